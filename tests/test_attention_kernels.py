"""The attention core: kernels against torch's scaled_dot_product_attention, grouped-query heads, attend's checks.

References: ``torch.nn.functional.scaled_dot_product_attention`` (with ``enable_gqa``), a loop over query
heads that repeats the key/value heads by hand, gradcheck.
"""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import course_lib as cl
from course_lib import attend, explicit_kernel, fused_kernel, keep_mask

KERNELS = [explicit_kernel, fused_kernel]


def _randn(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _sdpa_reference(q, k, v, keep):
    """SDPA on heads repeated by hand (no enable_gqa), with rows that see no key set to zero."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    if keep is None:
        return F.scaled_dot_product_attention(q, k, v)
    row_ok = keep.any(-1, keepdim=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep | ~row_ok) * row_ok


shapes = st.tuples(st.integers(1, 3), st.sampled_from([(1, 1), (2, 1), (4, 2), (3, 3), (6, 2)]),
                   st.integers(1, 7), st.integers(1, 9), st.integers(1, 6))


@settings(max_examples=60, deadline=None)
@given(shape=shapes, causal=st.booleans(), masked=st.booleans(), seed=st.integers(0, 2**20))
def test_kernels_equal_sdpa_over_shapes_heads_and_masks(shape, causal, masked, seed):
    B, (H, H_kv), n_q, n_k, d = shape
    q, k, v = _randn(B, H, n_q, d, seed=seed), _randn(B, H_kv, n_k, d, seed=seed + 1), \
        _randn(B, H_kv, n_k, d + 1, seed=seed + 2)
    mask = (torch.rand(B, 1, n_q, n_k, generator=torch.Generator().manual_seed(seed)) > 0.3) if masked else None
    keep = keep_mask(mask, causal, n_q, n_k)
    expected = _sdpa_reference(q, k, v, None if keep is None else keep.expand(B, H, n_q, n_k))
    for kernel in KERNELS:
        out, weights = kernel(q, k, v, mask, causal=causal, need_weights=True)
        torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-10)
        assert weights.shape == (B, H, n_q, n_k)
        torch.testing.assert_close(weights @ v.repeat_interleave(H // H_kv, dim=1), expected, atol=1e-12, rtol=1e-10)


def test_the_fused_kernel_uses_sdpas_own_grouped_query_attention():
    q, k, v = _randn(2, 8, 5, 4, seed=1), _randn(2, 2, 7, 4, seed=2), _randn(2, 2, 7, 4, seed=3)
    out, weights = fused_kernel(q, k, v)
    assert weights is None  # the fused kernel never forms the weights unless asked
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, enable_gqa=True))


def test_causal_is_bottom_right_aligned_in_every_kernel():
    q, k, v = _randn(1, 2, 3, 4, seed=4), _randn(1, 2, 6, 4, seed=5), _randn(1, 2, 6, 4, seed=6)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=cl.causal_mask(3, 6))
    for kernel in KERNELS:
        torch.testing.assert_close(kernel(q, k, v, causal=True)[0], expected)
    # One query: the last position, it sees every key.
    torch.testing.assert_close(fused_kernel(q[:, :, -1:], k, v, causal=True)[0], F.scaled_dot_product_attention(
        q[:, :, -1:], k, v))


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_query_without_keys_outputs_zero_with_zero_gradient(kernel):
    q = _randn(1, 1, 3, 4, seed=7).requires_grad_()
    k, v = _randn(1, 1, 5, 4, seed=8), _randn(1, 1, 5, 2, seed=9)
    mask = torch.tensor([[True] * 5, [False] * 5, [True, False, True, False, True]])
    out, _ = kernel(q, k, v, mask)
    assert torch.equal(out[0, 0, 1], torch.zeros(2))
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and torch.equal(q.grad[0, 0, 1], torch.zeros(4))


@pytest.mark.parametrize("kernel", KERNELS)
def test_gradcheck_with_grouped_heads_and_a_mask(kernel):
    q = _randn(2, 4, 3, 3, seed=10).requires_grad_()
    k, v = _randn(2, 2, 5, 3, seed=11).requires_grad_(), _randn(2, 2, 5, 2, seed=12).requires_grad_()
    mask = cl.padding_mask([5, 0], 5)[:, None]  # (2, 1, 1, 5): the second example sees nothing
    assert torch.autograd.gradcheck(lambda a, b, c: kernel(a, b, c, mask, causal=True)[0], (q, k, v))


def test_scale_and_dropout_follow_sdpa():
    q, k, v = _randn(1, 1, 4, 8, seed=13), _randn(1, 1, 6, 8, seed=14), _randn(1, 1, 6, 8, seed=15)
    for kernel in KERNELS:
        torch.testing.assert_close(kernel(q, k, v, scale=0.5)[0], F.scaled_dot_product_attention(q, k, v, scale=0.5))
    v_eye = torch.eye(6, dtype=torch.float64).expand(1, 1, 6, 6)
    torch.manual_seed(0)
    out, weights = explicit_kernel(q, k, v_eye, dropout_p=0.5)
    kept = out != 0
    assert kept.any() and (~kept).any()
    torch.testing.assert_close(out[kept], 2 * weights[kept])  # inverted dropout: weights / (1 - p) where kept


def test_attend_checks_its_arguments_once_and_names_them():
    q, k, v = _randn(1, 4, 3, 8), _randn(1, 3, 5, 8), _randn(1, 3, 5, 8)
    with pytest.raises(ValueError, match="heads must divide"):
        attend(q, k, v)
    with pytest.raises(ValueError, match=r"keys and values do not match"):
        attend(q, k[:, :1], v[:, :, :4])
    with pytest.raises(TypeError, match="mask must be a bool"):
        attend(q, q, q, mask=torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"mask of shape \(4, 3\) does not broadcast"):
        attend(q, q, q, mask=torch.ones(4, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="dropout_p"):
        attend(q, q, q, dropout_p=1.0)
    with pytest.raises(TypeError, match="causal"):
        attend(q, q, q, causal=1)
    with pytest.raises(TypeError, match="kernel"):
        attend(q, q, q, kernel=42)
    with pytest.raises(ValueError, match="kernel must be one of"):
        attend(q, q, q, kernel="flashy")
    out, weights = attend(q, q, q, need_weights=True)
    assert out.shape == (1, 4, 3, 8) and weights.shape == (1, 4, 3, 3)


def test_attend_takes_grouped_heads_and_masks_per_head():
    q, k, v = _randn(2, 4, 3, 8, seed=1), _randn(2, 2, 5, 8, seed=2), _randn(2, 2, 5, 8, seed=3)
    mask = torch.rand(1, 4, 3, 5, generator=torch.Generator().manual_seed(0)) > 0.3
    out, weights = attend(q, k, v, mask, need_weights=True)
    assert out.shape == (2, 4, 3, 8) and weights.shape == (2, 4, 3, 5)
    torch.testing.assert_close(out, _sdpa_reference(q, k, v, mask.expand(2, 4, 3, 5)))


# --- grouped-query attention in the module --------------------------------------------------------


def test_num_kv_heads_equal_to_num_heads_is_ordinary_multi_head_attention():
    torch.manual_seed(0)
    ordinary = cl.MultiHeadAttention(16, 4, bias=True)
    torch.manual_seed(0)
    same = cl.MultiHeadAttention(16, 4, bias=True, num_kv_heads=4)
    assert ordinary.state_dict().keys() == same.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(ordinary.state_dict().values(), same.state_dict().values(),
                                                   strict=True))
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(same(x, x, x, causal=True), ordinary(x, x, x, causal=True))


@pytest.mark.parametrize("num_kv_heads", [1, 2])
def test_grouped_heads_equal_multi_head_attention_with_repeated_key_value_weights(num_kv_heads):
    torch.manual_seed(1)
    H, d_h = 4, 3
    grouped = cl.MultiHeadAttention(H * d_h, H, num_kv_heads=num_kv_heads).double()
    assert grouped.W_k.weight.shape == (num_kv_heads * d_h, H * d_h)
    full = cl.MultiHeadAttention(H * d_h, H).double()
    group = H // num_kv_heads
    with torch.no_grad():  # query head h reads key/value head h // group: repeat each kv head's rows
        full.W_q.weight.copy_(grouped.W_q.weight)
        full.W_o.weight.copy_(grouped.W_o.weight)
        for mine, theirs in ((full.W_k, grouped.W_k), (full.W_v, grouped.W_v)):
            mine.weight.copy_(theirs.weight.unflatten(0, (num_kv_heads, d_h)).repeat_interleave(group, 0).flatten(0, 1))
    x = torch.randn(2, 6, H * d_h, dtype=torch.float64)
    keep = cl.padding_mask([6, 4], 6)
    for record in (False, True):
        grouped.record_weights = full.record_weights = record
        torch.testing.assert_close(grouped(x, x, x, keep, causal=True), full(x, x, x, keep, causal=True))


def test_the_cache_of_grouped_heads_is_smaller_by_heads_over_kv_heads():
    torch.manual_seed(2)
    x = torch.randn(3, 7, 16)
    sizes = {}
    for kv_heads in (4, 2, 1):
        mha, cache = cl.MultiHeadAttention(16, 4, num_kv_heads=kv_heads).eval(), cl.KVCache()
        steps = [mha(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], causal=True, kv_cache=cache) for t in range(7)]
        torch.testing.assert_close(torch.cat(steps, 1), mha(x, x, x, causal=True))
        assert cache.nbytes == 2 * kv_heads * (16 // 4) * 7 * 3 * 4  # 2 (K and V) x heads x d_h x T x batch x bytes
        sizes[kv_heads] = cache.nbytes
    assert sizes[4] == 2 * sizes[2] == 4 * sizes[1]


@pytest.mark.parametrize(("heads", "kv_heads", "match"), [(4, 3, "divide num_heads"), (4, 0, "num_kv_heads")])
def test_kv_heads_that_do_not_divide_the_heads_are_refused(heads, kv_heads, match):
    with pytest.raises(ValueError, match=match):
        cl.MultiHeadAttention(16, heads, num_kv_heads=kv_heads)
