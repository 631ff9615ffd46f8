"""Tests for course_lib.attention.multihead: MultiHeadAttention, KVCache, and recording its weights.

References: torch.nn.MultiheadAttention with the same weights, a brute-force loop over
(batch, head, query), F.scaled_dot_product_attention semantics, autograd.gradcheck.
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from course_lib import padding_mask, recording_attention, store_attention_weights
from course_lib.attention.cache import KVCache
from course_lib.attention.kernels.explicit import explicit_kernel
from course_lib.attention.kernels.fused import fused_kernel
from course_lib.attention.multihead import MultiHeadAttention

D, H = 16, 4


def make_mha(bias: bool = False, seed: int = 0, d: int = D, h: int = H, dtype=torch.float32) -> MultiHeadAttention:
    torch.manual_seed(seed)
    mha = MultiHeadAttention(d, h, bias=bias).to(dtype).eval()
    if bias:  # nn.Linear's default biases are small; make them matter
        with torch.no_grad():
            for layer in (mha.W_q, mha.W_k, mha.W_v, mha.W_o):
                layer.bias.normal_()
    return mha


def torch_twin(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """nn.MultiheadAttention with our weights: in_proj_weight = cat(W_q, W_k, W_v)."""
    bias = mha.W_q.bias is not None
    theirs = nn.MultiheadAttention(mha.num_hiddens, mha.num_heads, bias=bias, batch_first=True).eval()
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([mha.W_q.weight, mha.W_k.weight, mha.W_v.weight]))
        theirs.out_proj.weight.copy_(mha.W_o.weight)
        if bias:
            theirs.in_proj_bias.copy_(torch.cat([mha.W_q.bias, mha.W_k.bias, mha.W_v.bias]))
            theirs.out_proj.bias.copy_(mha.W_o.bias)
    return theirs


def with_lengths(mask, valid_lens, n_keys):
    """The keep-mask of ``valid_lens`` (padding) and-ed with ``mask`` (3-D or 4-D), as a model builds it."""
    keep = padding_mask(valid_lens, n_keys)  # (B, 1 or Tq, Tk)
    if mask is None:
        return keep
    return (keep.unsqueeze(1) if mask.dim() == 4 else keep) & mask


def run(mha: MultiHeadAttention, *args, explicit: bool, **kwargs) -> torch.Tensor:
    """A call through the fused kernel, or through the explicit one while recording the weights."""
    mha.record_weights = explicit
    if "valid_lens" in kwargs:
        kwargs["mask"] = with_lengths(kwargs.get("mask"), kwargs.pop("valid_lens"), args[1].shape[1])
    return mha(*args, **kwargs)


def brute_force_mha(mha: MultiHeadAttention, queries, keys, values, allowed) -> torch.Tensor:
    """Multi-head attention one (example, head, query) at a time; ``allowed(b, i, j)`` says if i sees j."""
    B, Tq, _ = queries.shape
    Tk = keys.shape[1]
    h, dh = mha.num_heads, mha.head_size
    q, k, v = mha.W_q(queries), mha.W_k(keys), mha.W_v(values)
    heads = torch.zeros(B, Tq, h * dh, dtype=queries.dtype)
    for b in range(B):
        for head in range(h):
            cols = slice(head * dh, (head + 1) * dh)
            for i in range(Tq):
                js = [j for j in range(Tk) if allowed(b, i, j)]
                if not js:
                    continue  # no key: the pooled value is the zero vector
                scores = torch.stack([q[b, i, cols] @ k[b, j, cols] for j in js]) / math.sqrt(dh)
                weights = torch.softmax(scores, dim=0)
                heads[b, i, cols] = sum(w * v[b, j, cols] for w, j in zip(weights, js, strict=True))
    return mha.W_o(heads)


# ---------------------------------------------------------------- against torch.nn.MultiheadAttention


@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_self_attention_matches_torch_multihead_attention(bias, explicit):
    mha = make_mha(bias)
    x = torch.randn(3, 7, D)
    expected, _ = torch_twin(mha)(x, x, x, need_weights=False)
    torch.testing.assert_close(run(mha, x, x, x, explicit=explicit), expected)


@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("keys_are_values", [True, False])
def test_cross_attention_matches_torch_multihead_attention(bias, explicit, keys_are_values):
    mha = make_mha(bias, seed=1)
    queries, keys = torch.randn(2, 4, D), torch.randn(2, 9, D)
    values = keys if keys_are_values else torch.randn(2, 9, D)
    expected, _ = torch_twin(mha)(queries, keys, values, need_weights=False)
    torch.testing.assert_close(run(mha, queries, keys, values, explicit=explicit), expected)


@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_valid_lens_match_torch_key_padding_mask(bias, explicit):
    mha = make_mha(bias, seed=2)
    queries, keys = torch.randn(4, 5, D), torch.randn(4, 8, D)
    valid_lens = torch.tensor([8, 1, 5, 3])
    # nn.MultiheadAttention's key_padding_mask is True = masked OUT (ours: True = attend).
    key_padding_mask = torch.arange(8) >= valid_lens[:, None]
    expected, _ = torch_twin(mha)(queries, keys, keys, key_padding_mask=key_padding_mask, need_weights=False)
    actual = run(mha, queries, keys, keys, valid_lens=valid_lens, explicit=explicit)
    torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_causal_matches_torch_attn_mask(bias, explicit):
    mha = make_mha(bias, seed=3)
    x = torch.randn(3, 6, D)
    # attn_mask is True = masked OUT: the strict upper triangle (future keys).
    future = torch.ones(6, 6, dtype=torch.bool).triu(diagonal=1)
    expected, _ = torch_twin(mha)(x, x, x, attn_mask=future, need_weights=False)
    torch.testing.assert_close(run(mha, x, x, x, causal=True, explicit=explicit), expected)


@pytest.mark.parametrize("explicit", [False, True])
def test_causal_and_padding_match_torch(explicit):
    mha = make_mha(True, seed=4)
    x = torch.randn(3, 6, D)
    valid_lens = torch.tensor([6, 2, 4])
    future = torch.ones(6, 6, dtype=torch.bool).triu(diagonal=1)
    expected, _ = torch_twin(mha)(x, x, x, attn_mask=future, key_padding_mask=torch.arange(6) >= valid_lens[:, None],
                                  need_weights=False)
    actual = run(mha, x, x, x, valid_lens=valid_lens, causal=True, explicit=explicit)
    torch.testing.assert_close(actual, expected)


# ---------------------------------------------------------------- explicit path == SDPA path

B, TQ, TK = 3, 5, 6
_GEN = torch.Generator().manual_seed(0)  # fixed masks, whatever order the tests run in
MASK_CASES = {
    "none": {},
    "valid_lens_per_example": {"valid_lens": torch.tensor([6, 3, 1])},
    "valid_lens_per_query": {"valid_lens": torch.tensor([[1, 2, 3, 4, 5], [6, 6, 0, 2, 2], [3, 3, 3, 3, 3]])},
    "causal": {"causal": True},
    "mask_2d": {"mask": torch.rand(TQ, TK, generator=_GEN) > 0.3},
    "mask_3d": {"mask": torch.rand(B, TQ, TK, generator=_GEN) > 0.3},
    "mask_per_head": {"mask": torch.rand(B, H, TQ, TK, generator=_GEN) > 0.3},
    "all_combined": {"valid_lens": torch.tensor([6, 2, 0]), "causal": True,
                     "mask": torch.rand(B, 1, TK, generator=_GEN) > 0.2},
    "some_rows_fully_masked": {"mask": torch.tensor([True, False, True, False, True])[None, :, None]
                               .expand(B, TQ, TK)},
}


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("case", list(MASK_CASES))
def test_explicit_path_equals_sdpa_path(case, bias):
    mha = make_mha(bias, seed=5)
    queries, keys, values = torch.randn(B, TQ, D), torch.randn(B, TK, D), torch.randn(B, TK, D)
    kwargs = MASK_CASES[case]
    fast = run(mha, queries, keys, values, explicit=False, **kwargs)
    assert mha.attention_weights is None
    explicit = run(mha, queries, keys, values, explicit=True, **kwargs)
    assert mha.attention_weights.shape == (B, H, TQ, TK)
    assert torch.isfinite(fast).all() and torch.isfinite(explicit).all()
    torch.testing.assert_close(fast, explicit)


def test_padding_mask_matches_brute_force_per_query_lengths():
    mha = make_mha(True, seed=6)
    queries, keys = torch.randn(2, 3, D), torch.randn(2, 5, D)
    valid_lens = torch.tensor([[1, 5, 3], [2, 4, 5]])
    expected = brute_force_mha(mha, queries, keys, keys, lambda b, i, j: j < valid_lens[b, i])
    for explicit in (False, True):
        torch.testing.assert_close(run(mha, queries, keys, keys, valid_lens=valid_lens, explicit=explicit), expected)


@pytest.mark.parametrize("explicit", [False, True])
def test_fully_masked_rows_output_exactly_zero_and_finite_gradients(explicit):
    mha = make_mha(False, seed=7).train()
    queries = torch.randn(3, 4, D, requires_grad=True)
    keys = torch.randn(3, 5, D, requires_grad=True)
    valid_lens = torch.tensor([5, 0, 2])  # example 1 has no key at all
    out = run(mha, queries, keys, keys, valid_lens=valid_lens, explicit=explicit)
    assert torch.equal(out[1], torch.zeros(4, D))
    assert not torch.equal(out[0], torch.zeros(4, D))
    out.sum().backward()
    for t in (queries, keys, *mha.parameters()):
        assert torch.isfinite(t.grad).all()
    assert torch.equal(queries.grad[1], torch.zeros(4, D))  # the masked queries do not matter


@pytest.mark.parametrize("explicit", [False, True])
def test_fully_masked_rows_output_the_output_bias(explicit):
    mha = make_mha(True, seed=8)
    x = torch.randn(2, 3, D)
    out = run(mha, x, x, x, mask=torch.tensor([True, False, True])[:, None], explicit=explicit)
    torch.testing.assert_close(out[:, 1], mha.W_o.bias.expand(2, D))


@pytest.mark.parametrize("explicit", [False, True])
def test_masked_keys_do_not_change_output(explicit):
    mha = make_mha(True, seed=9)
    queries, keys = torch.randn(2, 3, D), torch.randn(2, 6, D)
    valid_lens = torch.tensor([4, 2])
    out = run(mha, queries, keys, keys, valid_lens=valid_lens, explicit=explicit)
    changed = keys.clone()
    changed[0, 4:] = 100 * torch.randn(2, D)
    changed[1, 2:] = 100 * torch.randn(4, D)
    torch.testing.assert_close(run(mha, queries, changed, changed, valid_lens=valid_lens, explicit=explicit), out)


# ---------------------------------------------------------------- causal alignment and the cache


@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize(("n_q", "n_k"), [(3, 7), (1, 5), (5, 5), (6, 4)])
def test_causal_is_bottom_right_aligned(n_q, n_k, explicit):
    mha = make_mha(True, seed=10)
    queries, keys, values = torch.randn(2, n_q, D), torch.randn(2, n_k, D), torch.randn(2, n_k, D)
    # Query i is the (n_k - n_q + i)-th position: it sees keys up to and including that one.
    expected = brute_force_mha(mha, queries, keys, values, lambda b, i, j: j <= i + n_k - n_q)
    actual = run(mha, queries, keys, values, causal=True, explicit=explicit)
    torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("chunks", [(1,) * 7, (2, 3, 1, 1), (4, 3)])
def test_kv_cache_incremental_equals_full_causal_forward(chunks, explicit):
    mha = make_mha(True, seed=11)
    x = torch.randn(3, sum(chunks), D)
    full = run(mha, x, x, x, causal=True, explicit=explicit)
    cache, outs, start = KVCache(), [], 0
    for size in chunks:
        step = x[:, start:start + size]
        outs.append(run(mha, step, step, step, causal=True, kv_cache=cache, explicit=explicit))
        start += size
        assert len(cache) == start
        assert cache.keys.shape == (3, H, start, D // H)
    torch.testing.assert_close(torch.cat(outs, dim=1), full)


def test_kv_cache_reorder_follows_the_batch():
    mha = make_mha(False, seed=12)
    x = torch.randn(3, 5, D)
    index = torch.tensor([2, 2, 0, 1])
    full = mha(x[index], x[index], x[index], causal=True)
    cache = KVCache()
    first = x[:, :3]
    mha(first, first, first, causal=True, kv_cache=cache)
    cache.reorder(index)
    rest = x[index, 3:]
    out = mha(rest, rest, rest, causal=True, kv_cache=cache)
    torch.testing.assert_close(out, full[:, 3:])


def test_bad_mask_leaves_the_cache_untouched():
    mha = make_mha(False)
    cache = KVCache()
    x = torch.randn(2, 3, D)
    mha(x, x, x, kv_cache=cache)
    with pytest.raises(ValueError, match="mask"):
        mha(x, x, x, kv_cache=cache, mask=torch.ones(5, 5, dtype=torch.bool))
    assert len(cache) == 3


# ---------------------------------------------------------------- properties


@settings(max_examples=15, deadline=None)
@given(perm=st.permutations(list(range(6))), explicit=st.booleans(), seed=st.integers(0, 2**16))
def test_self_attention_is_permutation_equivariant(perm, explicit, seed):
    mha = make_mha(True, seed=13)
    x = torch.randn(2, 6, D, generator=torch.Generator().manual_seed(seed))
    perm = torch.tensor(perm)
    out = run(mha, x, x, x, explicit=explicit)
    permuted = run(mha, x[:, perm], x[:, perm], x[:, perm], explicit=explicit)
    torch.testing.assert_close(permuted, out[:, perm])


@pytest.mark.parametrize("explicit", [False, True])
def test_gradcheck_float64(explicit):
    mha = make_mha(True, seed=14, d=4, h=2, dtype=torch.float64)
    mha.record_weights = explicit
    queries = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    keys = torch.randn(2, 4, 4, dtype=torch.float64, requires_grad=True)
    values = torch.randn(2, 4, 4, dtype=torch.float64, requires_grad=True)
    keep = padding_mask(torch.tensor([3, 0]), 4)  # includes a fully masked example
    assert torch.autograd.gradcheck(lambda q, k, v: mha(q, k, v, keep), (queries, keys, values))
    assert torch.autograd.gradcheck(lambda q: mha(q, q, q, causal=True), (queries,))


def test_attention_weights_are_a_distribution_over_allowed_keys():
    mha = make_mha(False, seed=15)
    queries, keys = torch.randn(2, 3, D), torch.randn(2, 5, D)
    with recording_attention(mha):
        mha(queries, keys, keys, padding_mask(torch.tensor([5, 2]), 5))
    weights = mha.attention_weights
    assert weights.shape == (2, H, 3, 5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, H, 3))
    assert torch.equal(weights[1, :, :, 2:], torch.zeros(H, 3, 3))
    assert not weights.requires_grad


def test_notes_shapes():
    mha = MultiHeadAttention(512, 8).eval()
    x = torch.randn(30, 50, 512)
    with recording_attention(mha):
        assert mha(x, x, x, padding_mask(torch.randint(1, 51, (30,)), 50)).shape == (30, 50, 512)
    assert mha.attention_weights.shape == (30, 8, 50, 50)
    assert mha.head_size == 64


def test_dropout_acts_only_in_training():
    mha = make_mha(False, seed=16)
    mha.dropout.p = 0.5
    x = torch.randn(2, 8, D)
    for explicit in (False, True):
        mha.eval()
        torch.testing.assert_close(run(mha, x, x, x, explicit=explicit), run(mha, x, x, x, explicit=explicit))
        mha.train()
        assert not torch.allclose(run(mha, x, x, x, explicit=explicit), run(mha, x, x, x, explicit=explicit))


def test_recording_attention_switches_every_attention_module_and_restores_it():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([MultiHeadAttention(D, H) for _ in range(3)])
            self.other = nn.Linear(D, D)

    model = Model()
    model.blocks[2].record_weights = True  # already on: stays on after the block
    x = torch.randn(1, 2, D)
    with recording_attention(model) as modules:
        assert modules == list(model.blocks)
        for block in model.blocks:
            block(x, x, x)
    for block in model.blocks:
        assert block.attention_weights.shape == (1, H, 2, 2)  # kept after the block
    assert [b.record_weights for b in model.blocks] == [False, False, True]
    before = model.blocks[0].attention_weights
    model.blocks[0](2 * x, x, x)
    assert model.blocks[0].attention_weights is before  # not recording: nothing new is kept
    with pytest.raises(TypeError, match="model"):
        with recording_attention("not a model"):
            pass


def test_store_attention_weights_is_a_deprecated_alias():
    mha = MultiHeadAttention(D, H)
    x = torch.randn(1, 2, D)
    with pytest.warns(DeprecationWarning, match="recording_attention"):
        assert store_attention_weights(mha) == 1
    mha(x, x, x)
    assert mha.attention_weights.shape == (1, H, 2, 2)
    with pytest.warns(DeprecationWarning):
        store_attention_weights(mha, False)
    assert mha.attention_weights is None and not mha.record_weights


# ---------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_hiddens": 10, "num_heads": 4}, ValueError, "divisible"),
        ({"num_hiddens": 0, "num_heads": 1}, ValueError, "num_hiddens"),
        ({"num_hiddens": 8, "num_heads": 0}, ValueError, "num_heads"),
        ({"num_hiddens": 8.0, "num_heads": 2}, TypeError, "num_hiddens"),
        ({"num_hiddens": 8, "num_heads": 2, "dropout": 1.5}, ValueError, "dropout"),
    ],
)
def test_bad_construction_raises(kwargs, error, match):
    with pytest.raises(error, match=match):
        MultiHeadAttention(**kwargs)


def _bad_forward_cases():
    x = torch.randn(2, 3, D)
    k = torch.randn(2, 5, D)
    return {
        "queries_wrong_size": ((torch.randn(2, 3, D + 1), k, k), {}, ValueError, r"queries.*\(2, 3, 17\)"),
        "keys_values_length": ((x, k, torch.randn(2, 4, D)), {}, ValueError, r"keys.*\(2, 5, 16\).*\(2, 4, 16\)"),
        "batch_mismatch": ((x, torch.randn(3, 5, D), torch.randn(3, 5, D)), {}, ValueError, r"\(2, 3, 16\)"),
        "two_dim_queries": ((x[0], k, k), {}, ValueError, "3-D"),
        "integer_queries": ((x.long(), k, k), {}, TypeError, "floating"),
        "dtype_mismatch": ((x.double(), k.double(), k.double()), {}, TypeError, "dtype"),
        "lengths_not_a_mask": ((x, k, k), {"mask": torch.tensor([5, 2])}, TypeError, "bool"),
        "mask_of_other_batch": ((x, k, k), {"mask": padding_mask(torch.tensor([1, 2, 3]), 5)}, ValueError,
                                r"mask.*\(3, 1, 5\)"),
        "mask_of_other_keys": ((x, k, k), {"mask": padding_mask(torch.tensor([1, 2]), 6)}, ValueError, "mask"),
        "kv_and_keys": ((x, k, k), {"kv": (k, k)}, ValueError, "not both"),
        "mask_not_bool": ((x, k, k), {"mask": torch.ones(3, 5)}, TypeError, "bool"),
        "mask_wrong_shape": ((x, k, k), {"mask": torch.ones(3, 4, dtype=torch.bool)}, ValueError, r"mask.*\(3, 4\)"),
        "mask_wrong_heads": ((x, k, k), {"mask": torch.ones(2, 3, 3, 5, dtype=torch.bool)}, ValueError, "mask"),
        "causal_not_bool": ((x, k, k), {"causal": 1}, TypeError, "causal"),
        "cache_wrong_type": ((x, k, k), {"kv_cache": {}}, TypeError, "kv_cache"),
        "no_keys": ((x, k[:, :0], k[:, :0]), {}, ValueError, "at least one key"),
    }


BAD_FORWARD = _bad_forward_cases()


@pytest.mark.parametrize("case", list(BAD_FORWARD))
def test_bad_forward_inputs_raise(case):
    args, kwargs, error, match = BAD_FORWARD[case]
    with pytest.raises(error, match=match):
        make_mha()(*args, **kwargs)


def test_cache_from_another_batch_raises():
    mha = make_mha()
    cache = KVCache()
    x = torch.randn(2, 3, D)
    mha(x, x, x, kv_cache=cache)
    y = torch.randn(3, 1, D)
    with pytest.raises(ValueError, match="kv_cache"):
        mha(y, y, y, kv_cache=cache)
    other = MultiHeadAttention(D, 2)
    with pytest.raises(ValueError, match="kv_cache"):
        other(x, x, x, kv_cache=cache)


@pytest.mark.parametrize(
    ("index", "error"),
    [([0, 1], TypeError), (torch.tensor([[0]]), ValueError), (torch.tensor([0.0]), TypeError),
     (torch.tensor([2]), ValueError), (torch.tensor([-1]), ValueError)],
)
def test_bad_reorder_index_raises(index, error):
    cache = KVCache()
    cache.update(torch.randn(2, H, 3, 4), torch.randn(2, H, 3, 4))
    with pytest.raises(error, match="index"):
        cache.reorder(index)


# --- one meaning of "causal", one meaning of a mask -----------------------------------------------


@pytest.mark.parametrize("n_q, n_k", [(5, 5), (3, 7), (1, 4), (6, 4)])
def test_the_causal_flag_and_the_causal_mask_helper_agree_for_any_number_of_queries(n_q, n_k):
    import course_lib as cl

    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    q, kv = torch.randn(2, n_q, 16), torch.randn(2, n_k, 16)
    torch.testing.assert_close(mha(q, kv, kv, causal=True), mha(q, kv, kv, mask=cl.causal_mask(n_q, n_k)))
    # And the fused-kernel helper means the same by causal.
    qh, kh = torch.randn(2, n_q, 8), torch.randn(2, n_k, 8)
    torch.testing.assert_close(cl.fused_attention(qh, kh, kh, causal=True),
                               cl.fused_attention(qh, kh, kh, mask=cl.causal_mask(n_q, n_k)))


def test_a_cache_step_sees_what_the_causal_mask_helper_allows():
    import course_lib as cl

    torch.manual_seed(1)
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 6, 8)
    cache = KVCache()
    mha(x[:, :4], x[:, :4], x[:, :4], causal=True, kv_cache=cache)
    step = mha(x[:, 4:], x[:, 4:], x[:, 4:], causal=True, kv_cache=cache)  # 2 queries, 6 keys
    torch.testing.assert_close(step, mha(x[:, 4:], x, x, mask=cl.causal_mask(2, 6)))
    torch.testing.assert_close(step, mha(x, x, x, causal=True)[:, 4:])


def test_a_torch_key_padding_mask_is_refused_not_read_with_the_opposite_meaning():
    mha = MultiHeadAttention(8, 2).eval()
    q, kv = torch.randn(3, 2, 8), torch.randn(3, 5, 8)
    key_padding_mask = torch.arange(5) >= torch.tensor([[5], [3], [1]])  # torch: True = padding
    with pytest.raises(ValueError, match="key_padding_mask"):
        mha(q, kv, kv, mask=key_padding_mask)
    lens = torch.tensor([5, 3, 1])
    torch.testing.assert_close(mha(q, kv, kv, mask=~key_padding_mask[:, None, :]),
                               mha(q, kv, kv, mask=padding_mask(lens, 5)))


def test_padding_mask_lengths_may_be_a_list_or_a_tensor():
    mha = MultiHeadAttention(8, 2).eval()
    q = torch.randn(2, 4, 8)
    torch.testing.assert_close(mha(q, q, q, padding_mask([4, 2], 4)),
                               mha(q, q, q, padding_mask(torch.tensor([4, 2]), 4)))


def test_recording_keeps_the_explicit_kernels_weights_beside_the_same_output():
    torch.manual_seed(2)
    mha = MultiHeadAttention(D, H).eval()
    q, kv = torch.randn(2, 3, D), torch.randn(2, 5, D)
    keep = padding_mask(torch.tensor([5, 2]), 5)
    fast = mha(q, kv, kv, keep)
    with recording_attention(mha):
        out = mha(q, kv, kv, keep)
    assert isinstance(out, torch.Tensor)  # one return type, whatever is recorded
    torch.testing.assert_close(out, fast)
    weights = mha.attention_weights
    assert weights.shape == (2, H, 3, 5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, H, 3))
    assert torch.all(weights[1, :, :, 2:] == 0)


@pytest.mark.parametrize("kernel", [explicit_kernel, fused_kernel])
def test_any_kernel_plugs_in_without_changing_the_module(kernel):
    torch.manual_seed(3)
    mha = make_mha(True, seed=3)
    x = torch.randn(2, 5, D)
    calls = []

    class Spy:
        name, supports = "spy", kernel.supports

        def __repr__(self):
            return "spy"

        def __call__(self, *args, **kwargs):
            calls.append(kwargs)
            return kernel(*args, **kwargs)

    reference = mha(x, x, x, padding_mask([5, 3], 5), causal=True)
    mha.kernel = Spy()
    torch.testing.assert_close(mha(x, x, x, padding_mask([5, 3], 5), causal=True), reference)
    assert calls and calls[0]["causal"] is True and "spy" in repr(mha)


def test_a_model_recording_its_weights_can_be_deep_copied():
    import copy

    mha = MultiHeadAttention(D, H)
    mha.record_weights = True
    twin = copy.deepcopy(mha)
    x = torch.randn(1, 2, D)
    assert isinstance(twin(x, x, x), torch.Tensor) and twin.attention_weights.shape == (1, H, 2, 2)
    assert mha.attention_weights is None


# --- grouped-query attention and projected keys/values ----------------------------------------------


def test_projected_kv_equals_passing_the_keys():
    mha = make_mha(True, seed=4)
    q, memory = torch.randn(2, 3, D), torch.randn(2, 7, D)
    keep = padding_mask([7, 4], 7)
    torch.testing.assert_close(mha(q, mask=keep, kv=mha.project_kv(memory)), mha(q, memory, memory, keep))
    with pytest.raises(ValueError, match="num_kv_heads"):
        mha(q, kv=tuple(t[:, :2] for t in mha.project_kv(memory)))
