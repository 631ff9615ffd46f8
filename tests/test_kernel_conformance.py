"""Every registered attention kernel against the contract of course_lib.attention.contract.

Each kernel name of ``cl.kernel_names()`` has a setup here: the options it is built with and what it should
compute, written independently of the library (softmax over the kept pairs by hand, RoPE from cos and sin,
ALiBi's slopes from the paper's formula, the sparse patterns by loops, linear attention as Nadaraya-Watson
with elu + 1 features). A kernel registered without a setup fails the first test. Every kernel is then held
to the same properties: its output equals its reference with grouped heads, padding and the causal rule;
the causal rule is aligned bottom-right when a cache holds earlier keys; a query with no key outputs zeros
with zero gradients; the weights it returns equal the reference's; masks that differ from query to query,
as tensors and as rules, and additive score modifiers (against ``flex_attention``'s ``score_mod`` in eager
mode) work where the kernel declares them and are refused, in the one message format, where it does not;
attention dropout likewise.
"""

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import flex_attention

import course_lib as cl
from course_lib import AttentionKernel, MaskMod, ScoreMod

B, H, H_KV, D = 2, 4, 2, 6


def _feature(x):
    return F.elu(x) + 1


def _rope(x, positions, base=10000.0):
    """Rotate-half RoPE from cos and sin of position * base^(-2i/d), by hand."""
    d = x.shape[-1]
    angles = positions.double()[:, None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def _strided_keep(q_pos, kv_pos, stride, causal):
    """Chapter 9's strided pattern by loops: the band |i - j| < stride and the columns (i - j) % stride == 0."""
    keep = torch.zeros(len(q_pos), len(kv_pos), dtype=torch.bool)
    for a, i in enumerate(q_pos.tolist()):
        for b, j in enumerate(kv_pos.tolist()):
            keep[a, b] = (abs(i - j) < stride or (i - j) % stride == 0) and (j <= i or not causal)
    return keep


class Reference:
    """What a kernel computes, by hand: keep and bias rules, and the weights' kernel (softmax or features)."""

    def __init__(self, *, rotate=False, alibi=False, window=None, stride=None, linear=False):
        self.rotate, self.alibi, self.window, self.stride, self.linear = rotate, alibi, window, stride, linear

    def __call__(self, q, k, v, keep=None, causal=False, bias=None, scale=None):
        """Output (B, H, n_q, d_v) and weights of float64 inputs; ``keep`` (.., n_q, n_k), ``bias`` likewise."""
        n_q, n_k = q.shape[-2], k.shape[-2]
        groups = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        q_pos, kv_pos = torch.arange(n_k - n_q, n_k), torch.arange(n_k)
        rule = torch.ones(n_q, n_k, dtype=torch.bool)
        if causal:
            rule &= kv_pos[None, :] <= q_pos[:, None]
        if self.window is not None:
            rule &= (q_pos[:, None] - kv_pos[None, :]).abs() < self.window
        if self.stride is not None:
            rule &= _strided_keep(q_pos, kv_pos, self.stride, causal)
        keep = rule if keep is None else keep & rule
        if self.rotate:
            q, k = _rope(q, q_pos), _rope(k, kv_pos)
        if self.linear:
            values = _feature(q) @ _feature(k).transpose(-2, -1)
        else:
            scores = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale)
            if self.alibi:
                slopes = torch.tensor([2.0 ** (-8 * (h + 1) / q.shape[1]) for h in range(q.shape[1])],
                                      dtype=torch.float64)
                scores = scores - slopes[:, None, None] * (q_pos[:, None] - kv_pos[None, :]).abs()
            if bias is not None:
                scores = scores + bias
            values = torch.exp(scores - scores.amax(-1, keepdim=True).detach())
        values = values * keep
        total = values.sum(-1, keepdim=True)
        weights = values / torch.where(total == 0, torch.ones_like(total), total)
        return weights @ v, weights


SETUPS = {  # name -> (options, reference)
    "fused": ({}, Reference()),
    "explicit": ({}, Reference()),
    "flash": ({"block_q": 2, "block_k": 3}, Reference()),
    "linear": ({}, Reference(linear=True)),
    "sliding_window": ({"window": 3}, Reference(window=3)),
    "sparse": ({"pattern": "strided", "stride": 3}, Reference(stride=3)),
    "rotary": ({}, Reference(rotate=True)),
    "alibi": ({}, Reference(alibi=True)),
}
NAMES = list(SETUPS)


def kernel(name):
    return cl.attention_kernel(name, **SETUPS[name][0])


def inputs(n_q=7, n_k=7, seed=0, h_kv=H_KV, requires_grad=False):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, n_q, D, generator=gen, dtype=torch.float64)
    k = torch.randn(B, h_kv, n_k, D, generator=gen, dtype=torch.float64)
    v = torch.randn(B, h_kv, n_k, D + 1, generator=gen, dtype=torch.float64)
    return tuple(t.requires_grad_(requires_grad) for t in (q, k, v))


def padding(lengths, n_k):
    return cl.padding_mask(torch.tensor(lengths), n_k).unsqueeze(1)  # (B, 1, 1, n_k): a key mask


def refusal(name, feature):
    return rf"the '{name}' kernel does not support {feature} \(got .*\): "


def test_every_registered_kernel_has_a_conformance_setup():
    assert set(cl.kernel_names()) == set(SETUPS), "register a kernel's reference here to hold it to the contract"
    for name in NAMES:
        built = kernel(name)
        assert isinstance(built, AttentionKernel) and built.name == name
        assert isinstance(built.supports, cl.Capabilities)
    assert not isinstance(print, AttentionKernel) and not isinstance(lambda q, k, v: q, AttentionKernel)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_output_equals_the_reference_with_grouped_heads_and_padding(name, causal):
    q, k, v = inputs(seed=1)
    keep = padding([7, 4], 7)
    out, _ = cl.attend(q, k, v, keep, causal=causal, kernel=kernel(name))
    torch.testing.assert_close(out, SETUPS[name][1](q, k, v, keep, causal)[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_the_causal_rule_is_aligned_bottom_right_when_a_cache_holds_earlier_keys(name):
    q, k, v = inputs(n_q=3, n_k=8, seed=2)
    out, _ = cl.attend(q, k, v, causal=True, kernel=kernel(name))
    torch.testing.assert_close(out, SETUPS[name][1](q, k, v, None, True)[0], rtol=0, atol=1e-12)
    # The same rows as all eight queries at once: the last three.
    q_all = torch.cat([inputs(n_q=5, n_k=8, seed=3)[0], q], dim=2)
    full, _ = cl.attend(q_all, k, v, causal=True, kernel=kernel(name))
    torch.testing.assert_close(out, full[:, :, -3:], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_a_query_without_keys_outputs_zeros_with_zero_gradients(name):
    q, k, v = inputs(seed=4, requires_grad=True)
    out, _ = cl.attend(q, k, v, padding([7, 0], 7), causal=True, kernel=kernel(name))
    assert torch.isfinite(out).all()
    assert torch.equal(out[1], torch.zeros_like(out[1]))  # batch row 1 has no key at all
    out[1].sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all() and torch.equal(t.grad, torch.zeros_like(t.grad))


@pytest.mark.parametrize("name", NAMES)
def test_the_weights_equal_the_references_where_offered(name):
    q, k, v = inputs(seed=5)
    keep = padding([6, 7], 7)
    if not kernel(name).supports.weights:
        with pytest.raises(ValueError, match=refusal(name, "returning the attention weights")):
            cl.attend(q, k, v, keep, causal=True, need_weights=True, kernel=kernel(name))
        return
    out, weights = cl.attend(q, k, v, keep, causal=True, need_weights=True, kernel=kernel(name))
    expected_out, expected = SETUPS[name][1](q, k, v, keep, True)
    torch.testing.assert_close(weights, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(out, expected_out, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_masks_that_differ_from_query_to_query_as_tensors_and_as_rules(name):
    q, k, v = inputs(seed=6)
    keep = torch.rand(B, H, 7, 7, generator=torch.Generator().manual_seed(6)) > 0.3
    rule = MaskMod(lambda b, h, q_pos, kv_pos: (q_pos + kv_pos + b + h) % 3 != 0, "thirds")
    rule_keep = rule.materialize(7, 7, batch=B, heads=H)
    if not kernel(name).supports.query_masks:
        for mask in (keep, rule):
            with pytest.raises(ValueError, match=refusal(name, "masks that differ from query to query")):
                cl.attend(q, k, v, mask, kernel=kernel(name))
        return
    for mask, dense in ((keep, keep), (rule, rule_keep)):
        out, _ = cl.attend(q, k, v, mask, causal=True, kernel=kernel(name))
        torch.testing.assert_close(out, SETUPS[name][1](q, k, v, dense, True)[0], rtol=0, atol=1e-12)


def _flex(q, k, v, score_mod, causal):
    """flex_attention in eager mode (the GQA heads repeated), with the causal rule as its mask_mod."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    offset = k.shape[-2] - q.shape[-2]
    mask_mod = (lambda b, h, q_idx, kv_idx: kv_idx <= q_idx + offset) if causal else None
    from torch.nn.attention.flex_attention import create_block_mask

    block_mask = None if mask_mod is None else create_block_mask(mask_mod, None, None, q.shape[-2], k.shape[-2],
                                                                 device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # flex_attention without torch.compile
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)


@pytest.mark.parametrize("name", NAMES)
def test_a_score_modifier_equals_flex_attentions_score_mod_in_eager_mode(name):
    q, k, v = inputs(n_q=5, n_k=9, seed=7)
    mod = ScoreMod(lambda b, h, q_pos, kv_pos: 0.3 * torch.cos(q_pos * 0.7 + kv_pos) - 0.1 * h + 0.05 * b, "waves")
    if not kernel(name).supports.score_mods:
        with pytest.raises(ValueError, match=refusal(name, "score modifiers")):
            cl.attend(q, k, v, score_mod=mod, kernel=kernel(name))
        return
    out, _ = cl.attend(q, k, v, causal=True, score_mod=mod, kernel=kernel(name))
    bias = mod.materialize(5, 9, batch=B, heads=H, dtype=torch.float64)
    torch.testing.assert_close(out, SETUPS[name][1](q, k, v, None, True, bias)[0], rtol=0, atol=1e-12)
    if name in ("fused", "explicit", "flash"):  # the plain softmax kernels: flex_attention itself
        torch.testing.assert_close(out, _flex(q, k, v, mod.flex(5, 9), True), rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_attention_dropout_where_declared_and_refused_where_not(name):
    q, k, v = inputs(seed=8)
    if not kernel(name).supports.dropout:
        with pytest.raises(ValueError, match=refusal(name, "attention dropout")):
            cl.attend(q, k, v, dropout_p=0.5, kernel=kernel(name))
        return
    plain, _ = cl.attend(q, k, v, kernel=kernel(name))
    torch.manual_seed(0)
    dropped, _ = cl.attend(q, k, v, dropout_p=0.5, kernel=kernel(name))
    torch.manual_seed(0)
    again, _ = cl.attend(q, k, v, dropout_p=0.5, kernel=kernel(name))
    torch.testing.assert_close(dropped, again, rtol=0, atol=0)  # the draws follow torch's generator
    assert not torch.allclose(dropped, plain)
    # Inverted dropout keeps the expectation: averaged over many draws, the output comes back.
    torch.manual_seed(1)
    mean = sum(cl.attend(q, k, v, dropout_p=0.5, kernel=kernel(name))[0] for _ in range(400)) / 400
    assert (mean - plain).abs().max() < 0.35 and (mean - plain).abs().mean() < 0.06


@pytest.mark.parametrize("name", NAMES)
def test_a_scale_where_declared_and_refused_where_not(name):
    q, k, v = inputs(seed=9)
    if not kernel(name).supports.scale:
        with pytest.raises(ValueError, match=refusal(name, "a score scale")):
            cl.attend(q, k, v, scale=0.25, kernel=kernel(name))
        return
    out, _ = cl.attend(q, k, v, causal=True, scale=0.25, kernel=kernel(name))
    torch.testing.assert_close(out, SETUPS[name][1](q, k, v, None, True, scale=0.25)[0], rtol=0, atol=1e-12)


def test_the_one_message_names_the_kernel_the_feature_and_what_came():
    with pytest.raises(ValueError) as error:
        cl.MultiHeadAttention(8, 2, dropout=0.1, kernel="flash")(*(torch.randn(1, 3, 8),) * 3)
    assert str(error.value).startswith("the 'flash' kernel does not support attention dropout (got dropout_p=0.1): ")
    assert math.isfinite(len(str(error.value)))
