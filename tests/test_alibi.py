"""ALiBi: the slopes of Press et al. (2022), the bias, and attention equal to Hugging Face's BLOOM.

BLOOM's ``build_alibi_tensor`` gives the bias m_h * j (key position j only), not -m_h * |i - j|: the two differ
by m_h * i, a constant on each row of the scores among the keys a causal mask keeps. Softmax is invariant
to adding a constant to a row (softmax(s + c) = softmax(s)), so the attention *outputs* agree while the
biases do not; the tests compare outputs. BLOOM computes its slopes in float32 (rounded for head counts
that are not powers of two), hence a tolerance of 1e-6 on the outputs (measured: 1.8e-7 with 12 heads,
2e-14 with 4, whose slopes are powers of two and exact in float32).
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import math  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers.models.bloom.modeling_bloom import build_alibi_tensor  # noqa: E402

from course_lib import (  # noqa: E402
    ALiBiKernel,
    KVCache,
    MultiHeadAttention,
    alibi_bias,
    alibi_slopes,
    causal_mask,
    explicit_kernel,
)

F64 = torch.float64


def _bloom_slopes(num_heads):
    """BLOOM's slopes, read back from its bias: position 1 of a sequence of two gets m_h * 1."""
    return build_alibi_tensor(torch.ones(1, 2), num_heads, F64)[:, 0, 1]


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32])
def test_slopes_of_a_power_of_two_are_two_to_the_minus_eight_h_over_n(n):
    assert alibi_slopes(n, dtype=F64).tolist() == [2.0 ** (-8 * h / n) for h in range(1, n + 1)]


def test_slopes_of_twelve_heads_are_those_of_eight_then_every_other_of_sixteen():
    sixteen = [2.0 ** (-8 * h / 16) for h in range(1, 17)]
    eight = [2.0 ** (-8 * h / 8) for h in range(1, 9)]
    assert alibi_slopes(12, dtype=F64).tolist() == pytest.approx(eight + sixteen[0::2][:4], rel=1e-15)


@pytest.mark.parametrize("n", list(range(1, 34)))
def test_slopes_equal_blooms(n):
    """BLOOM raises a float32 base to powers up to 2n - 1: relative errors of a few 1e-7 where the base is
    not a power of two."""
    torch.testing.assert_close(alibi_slopes(n, dtype=F64), _bloom_slopes(n), rtol=1e-6, atol=0)


@pytest.mark.parametrize("n_queries, n_keys", [(4, 4), (1, 5), (2, 6), (5, 3)])
def test_bias_is_minus_the_slope_times_the_distance(n_queries, n_keys):
    slopes = [2.0 ** (-8 * h / 4) for h in range(1, 5)]
    expected = torch.tensor([[[-slopes[h] * abs((n_keys - n_queries + i) - j) for j in range(n_keys)]
                              for i in range(n_queries)] for h in range(4)], dtype=F64)
    torch.testing.assert_close(alibi_bias(4, n_queries, n_keys, dtype=F64), expected, rtol=0, atol=0)


def _bloom_attention(q, k, v, key_mask):
    """Causal attention with BLOOM's bias (B * H, 1, n) added to the scaled scores, as BLOOM's attention does."""
    B, H, n, d = q.shape
    bias = build_alibi_tensor(key_mask.long(), H, F64).view(B, H, 1, n)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d) + bias
    keep = causal_mask(n) & key_mask.bool()[:, None, None, :]
    weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)
    return weights @ v, bias


@pytest.mark.parametrize("heads", [4, 6, 12])
def test_attention_outputs_equal_blooms(heads):
    torch.manual_seed(0)
    B, n, d = 2, 9, 8
    q, k, v = (torch.randn(B, heads, n, d, dtype=F64) * 3 for _ in range(3))
    key_mask = torch.ones(B, n, dtype=torch.bool)
    key_mask[1, 6:] = False  # the second sequence is right-padded: 6 real tokens
    expected, bloom_bias = _bloom_attention(q, k, v, key_mask)
    keep = key_mask[:, None, None, :]  # (B, 1, 1, n) keep-mask of the keys
    for kernel in (ALiBiKernel(), lambda *a, **kw: ALiBiKernel()(*a, **kw, need_weights=True)):
        out, _ = kernel(q, k, v, keep, causal=True)
        torch.testing.assert_close(out[0], expected[0], rtol=0, atol=1e-6)
        torch.testing.assert_close(out[1, :, :6], expected[1, :, :6], rtol=0, atol=1e-6)  # the real queries
    # The biases themselves differ, by a constant on each row among the kept keys: softmax's shift invariance.
    difference = (bloom_bias[0] - alibi_bias(heads, n, n, dtype=F64)).tril()  # (H, n, n), kept keys j <= i
    row_constant = difference.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)  # m_h * i
    assert bool((row_constant[:, 1:] > 0).all())
    torch.testing.assert_close(difference, row_constant.expand_as(difference).tril(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_fused_and_explicit_paths_agree(kv_heads):
    torch.manual_seed(0)
    q = torch.randn(2, 4, 5, 8, dtype=F64)
    k, v = torch.randn(2, kv_heads, 7, 8, dtype=F64), torch.randn(2, kv_heads, 7, 3, dtype=F64)
    mask = torch.rand(2, 1, 5, 7) > 0.3
    fused, none = ALiBiKernel()(q, k, v, mask, causal=True)
    explicit, weights = ALiBiKernel()(q, k, v, mask, causal=True, need_weights=True)
    assert none is None
    torch.testing.assert_close(fused, explicit, rtol=0, atol=1e-12)
    keep = mask & causal_mask(5, 7)
    assert bool((weights[~keep.expand_as(weights)] == 0).all())
    # with q = 0 the scores are the bias alone: the weights are softmax(bias) over the kept keys
    _, w0 = ALiBiKernel()(torch.zeros_like(q), k, v, causal=True, need_weights=True)
    expected = torch.softmax(alibi_bias(4, 5, 7, dtype=F64).masked_fill(~causal_mask(5, 7), float("-inf")), -1)
    torch.testing.assert_close(w0, expected.expand_as(w0), rtol=0, atol=1e-12)


def test_a_query_with_no_key_outputs_zeros_without_nan():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 3, 4, requires_grad=True) for _ in range(3))
    mask = torch.tensor([[True, True, True], [False, False, False], [True, False, True]])
    for need_weights in (False, True):
        out, _ = ALiBiKernel()(q, k, v, mask, need_weights=need_weights)
        assert torch.equal(out[:, :, 1], torch.zeros(1, 2, 4))
        out.sum().backward()
        assert all(bool(t.grad.isfinite().all()) for t in (q, k, v))


def test_kv_cache_decoding_equals_attention_over_the_whole_sequence():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, num_kv_heads=2, kernel=ALiBiKernel()).double().eval()
    x = torch.randn(2, 6, 16, dtype=F64)
    full = mha(x, x, x, causal=True)
    cache = KVCache()
    steps = [mha(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], causal=True, kv_cache=cache) for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-12)
    plain = MultiHeadAttention(16, 4, num_kv_heads=2, kernel=explicit_kernel).double().eval()
    plain.load_state_dict(mha.state_dict())
    assert not torch.allclose(plain(x, x, x, causal=True), full)  # the bias does act


@pytest.mark.parametrize("call, error, words", [
    (lambda: alibi_slopes(0), ValueError, "num_heads"),
    (lambda: alibi_slopes(2.0), TypeError, "num_heads"),
    (lambda: alibi_bias(4, -1, 3), ValueError, "n_queries"),
    (lambda: alibi_bias(4, 2, True), TypeError, "n_keys"),
    (lambda: ALiBiKernel()(*(torch.randn(2, 3, 4),) * 3), ValueError, "head axis"),
])
def test_bad_input_is_refused_with_a_clear_message(call, error, words):
    with pytest.raises(error, match=words):
        call()
