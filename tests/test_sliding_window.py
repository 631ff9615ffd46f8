"""Sliding-window attention: the band as a kernel and a bounded cache.

References: ``torch.nn.attention.flex_attention`` in eager mode with a ``create_block_mask(..., device="cpu")``
block mask, ``scaled_dot_product_attention`` with a boolean band built index by index, full-sequence
attention (for cached decoding).
"""

import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import course_lib as cl


def _randn(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _band(n_q, n_k, window, causal):
    """Query i sits at key position i + n_k - n_q and sees the keys within distance < window (and not after it)."""
    keep = torch.zeros(n_q, n_k, dtype=torch.bool)
    for i in range(n_q):
        for j in range(n_k):
            distance = i + n_k - n_q - j
            keep[i, j] = (0 <= distance < window) if causal else abs(distance) < window
    return keep


@pytest.mark.parametrize("n_q, n_k, window, causal", [(16, 16, 5, True), (6, 16, 4, True), (12, 12, 3, False)])
def test_sliding_window_kernels_equal_flex_attention_in_eager_mode(n_q, n_k, window, causal):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    q, k, v = _randn(2, 4, n_q, 8, seed=1), _randn(2, 2, n_k, 8, seed=2), _randn(2, 2, n_k, 8, seed=3)
    rule = cl.sliding_window_mod(window) & cl.causal_mod() if causal else cl.sliding_window_mod(window)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()": eager is the point
        block_mask = create_block_mask(rule.flex(n_q, n_k), None, None, n_q, n_k, device="cpu")
        expected = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)
    for base in (cl.fused_kernel, cl.explicit_kernel, cl.FlashKernel(block_q=4, block_k=3)):
        out, _ = cl.SlidingWindowKernel(window, base)(q, k, v, causal=causal)
        torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


@settings(max_examples=25, deadline=None)
@given(n=st.tuples(st.integers(1, 10), st.integers(1, 10)), window=st.integers(1, 6), causal=st.booleans(),
       seed=st.integers(0, 2**20))
def test_sliding_window_kernel_equals_sdpa_with_the_boolean_band(n, window, causal, seed):
    (n_q, n_k) = n
    q, k, v = _randn(1, 2, n_q, 4, seed=seed), _randn(1, 2, n_k, 4, seed=seed + 1), _randn(1, 2, n_k, 3, seed=seed + 2)
    keep = _band(n_q, n_k, window, causal)
    row_ok = keep.any(-1, keepdim=True)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=keep | ~row_ok) * row_ok
    out, _ = cl.SlidingWindowKernel(window, cl.FlashKernel(2, 3))(q, k, v, causal=causal)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
    assert torch.equal(keep, (cl.sliding_window_mod(window) & cl.causal_mod()).materialize(n_q, n_k) if causal
                       else cl.sliding_window_mod(window).materialize(n_q, n_k))


def test_flash_skips_the_tiles_outside_the_band():
    n, window, block = 64, 8, 8
    states = cl.flash_tile_map(n, n, block, block, cl.sliding_window_mod(window).materialize(n), causal=True)
    assert int((states > 0).sum()) == 8 + 7  # the diagonal tiles and the ones just below: O(n W / B^2), not O(n^2)


@settings(max_examples=20, deadline=None)
@given(window=st.integers(1, 6), steps=st.lists(st.integers(1, 4), min_size=1, max_size=6),
       kv_heads=st.sampled_from([1, 2]), seed=st.integers(0, 2**20))
def test_decoding_with_the_window_cache_equals_full_sliding_window_attention(window, steps, kv_heads, seed):
    torch.manual_seed(seed)
    mha = cl.MultiHeadAttention(8, 2, num_kv_heads=kv_heads, kernel=cl.SlidingWindowKernel(window)).eval()
    n = sum(steps)
    x = torch.randn(2, n, 8)
    cache, outs, t = cl.SlidingWindowCache(window), [], 0
    with torch.no_grad():
        for size in steps:  # a prompt, then a few tokens at a time
            outs.append(mha(x[:, t:t + size], x[:, t:t + size], x[:, t:t + size], causal=True, kv_cache=cache))
            t += size
            assert len(cache) == min(t, window - 1)
            assert cache.nbytes <= 2 * 2 * kv_heads * (window - 1) * 4 * 4  # k and v, batch 2, d_h 4, float32
        full = mha(x, x, x, causal=True)
        reference = cl.MultiHeadAttention(8, 2, num_kv_heads=kv_heads).eval()
        reference.load_state_dict(mha.state_dict())
        banded = reference(x, x, x, _band(n, n, window, causal=True))
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-6, rtol=0)
    torch.testing.assert_close(full, banded, atol=1e-6, rtol=0)


def test_the_window_cache_reorders_and_copies_as_a_window_cache():
    cache = cl.SlidingWindowCache(3)
    keys = torch.arange(2 * 5, dtype=torch.float32).view(2, 1, 5, 1)
    returned, _ = cache.update(keys, keys)
    assert torch.equal(returned, keys) and torch.equal(cache.keys, keys[:, :, 3:])
    assert cache.keys.untyped_storage().nbytes() == cache.keys.nbytes  # the dropped steps are freed
    copy = cache.copy()
    assert isinstance(copy, cl.SlidingWindowCache) and copy.window == 3
    copy.update(keys[:, :, :1], keys[:, :, :1])
    assert len(cache) == 2 and torch.equal(cache.keys, keys[:, :, 3:])  # the original is unchanged
    cache.reorder(torch.tensor([1, 1, 0]))
    assert cache.keys.shape == (3, 1, 2, 1) and isinstance(cache, cl.SlidingWindowCache)
    one = cl.SlidingWindowCache(1)  # a window of 1: each query sees only itself, nothing is kept
    one.update(keys, keys)
    assert len(one) == 0 and one.nbytes == 0


def test_bad_windows_are_refused():
    with pytest.raises(ValueError, match="window"):
        cl.SlidingWindowKernel(0)
    with pytest.raises(TypeError, match="window"):
        cl.SlidingWindowCache(2.5)
    with pytest.raises(TypeError, match="inner must be an AttentionKernel"):
        cl.SlidingWindowKernel(3, "flash")  # a kernel object; by name: cl.attention_kernel("sliding_window", ...)
