"""The key/value caches against plain references: concatenation, full attention with the window's mask, and
each other (paged == contiguous); the memory they take, counted."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import course_lib as cl
from course_lib import BlockPool, KVCache, MaskMod, PagedKVCache, SinkCache, SlidingWindowCache


def _steps(lengths, batch=2, heads=3, d=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, heads, n, d, generator=gen), torch.randn(batch, heads, n, d, generator=gen))
            for n in lengths]


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 7), min_size=1, max_size=9), capacity=st.integers(0, 9))
def test_a_preallocated_cache_holds_what_concatenation_holds(lengths, capacity):
    cache, steps = KVCache(capacity), _steps(lengths)
    for i, (k, v) in enumerate(steps):
        keys, values = cache.update(k, v)
        torch.testing.assert_close(keys, torch.cat([s[0] for s in steps[:i + 1]], 2), rtol=0, atol=0)
        torch.testing.assert_close(values, torch.cat([s[1] for s in steps[:i + 1]], 2), rtol=0, atol=0)
    assert len(cache) == cache.position == sum(lengths) <= cache.capacity


def test_one_token_at_a_time_grows_by_doubling():
    cache, capacities = KVCache(), []
    for k, v in _steps([1] * 100):
        cache.update(k, v)
        capacities.append(cache.capacity)
    grown = sorted(set(capacities))
    assert grown == [1, 2, 4, 8, 16, 32, 64, 128]  # 8 allocations for 100 steps, not 100
    assert cache.nbytes == 2 * 2 * 3 * 100 * 4 * 4 and cache.allocated_nbytes == 2 * 2 * 3 * 128 * 4 * 4


def test_appending_writes_in_place_and_never_copies_the_steps_held():
    cache = KVCache(capacity=64)
    (k, v), = _steps([3])
    cache.update(k, v)
    storage = cache.keys.untyped_storage().data_ptr()
    for k, v in _steps([1] * 40, seed=1):
        cache.update(k, v)
    assert cache.keys.untyped_storage().data_ptr() == storage and len(cache) == 43


def test_branches_of_one_cache_do_not_overwrite_each_other():
    prefix, a, b, c = _steps([4, 1, 1, 2], seed=2)
    cache = KVCache(capacity=16)
    cache.update(*prefix)
    left, right = cache.copy(), cache.copy()
    left.update(*a)  # in place: nobody had written past the prefix
    right.update(*b)  # would write over left's step: gets its own storage
    cache.update(*c)  # likewise
    torch.testing.assert_close(left.keys, torch.cat([prefix[0], a[0]], 2), rtol=0, atol=0)
    torch.testing.assert_close(right.keys, torch.cat([prefix[0], b[0]], 2), rtol=0, atol=0)
    torch.testing.assert_close(cache.keys, torch.cat([prefix[0], c[0]], 2), rtol=0, atol=0)


def test_crop_then_update_writes_over_the_dropped_steps_of_a_cache_alone():
    first, second = _steps([6, 2], seed=3)
    cache = KVCache(capacity=8)
    cache.update(*first)
    storage = cache.keys.untyped_storage().data_ptr()
    cache.crop(3).update(*second)
    torch.testing.assert_close(cache.keys, torch.cat([first[0][:, :, :3], second[0]], 2), rtol=0, atol=0)
    assert cache.keys.untyped_storage().data_ptr() == storage  # no copy: nobody else held the dropped steps
    shared = cache.copy()
    cache.crop(2).update(*second)  # the copy still holds 5 steps: cache gets its own storage
    torch.testing.assert_close(shared.keys, torch.cat([first[0][:, :, :3], second[0]], 2), rtol=0, atol=0)


def test_reorder_selects_rows_in_a_storage_of_its_own():
    (k, v), = _steps([3], seed=4)
    cache = KVCache()
    cache.update(k, v)
    branch = cache.copy().reorder(torch.tensor([1, 1, 0]))
    torch.testing.assert_close(branch.keys, k[[1, 1, 0]], rtol=0, atol=0)
    torch.testing.assert_close(cache.keys, k, rtol=0, atol=0)


def _band_attention(x, mha, window, sinks):
    """Full causal attention with StreamingLLM's mask: the first `sinks` keys, and the last `window - sinks`."""
    n = x.shape[1]
    rule = MaskMod(lambda b, h, q, kv: (kv <= q) & ((kv < sinks) | (q - kv < window - sinks)), "sinks + window")
    return mha(x, x, x, rule.materialize(n))


@pytest.mark.parametrize("sinks", [0, 1, 3])
def test_decoding_with_sinks_equals_full_attention_with_the_sink_and_window_mask(sinks):
    cl.set_seed(5)
    mha = cl.MultiHeadAttention(16, 4, num_kv_heads=2).double().eval()
    x = torch.randn(2, 40, 16, dtype=torch.float64)
    cache = SinkCache(window=8, sinks=sinks) if sinks else SlidingWindowCache(8)
    steps = [mha(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], causal=True, kv_cache=cache) for t in range(40)]
    torch.testing.assert_close(torch.cat(steps, 1), _band_attention(x, mha, 8, sinks), rtol=0, atol=1e-12)
    assert len(cache) == 7 and cache.position == 40


def test_a_sink_cache_keeps_the_first_tokens_and_the_recent_ones():
    cache = SinkCache(window=5, sinks=2)
    for t in range(12):
        cache.update(torch.full((1, 1, 1, 1), float(t)), torch.zeros(1, 1, 1, 1))
    assert cache.keys.flatten().tolist() == [0.0, 1.0, 10.0, 11.0]  # the sinks and the last window - sinks - 1
    with pytest.raises(ValueError, match="sinks"):
        SinkCache(window=4, sinks=4)


@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=6), block_size=st.integers(1, 5))
def test_a_paged_cache_holds_what_a_contiguous_one_holds(lengths, block_size):
    pool = BlockPool(128, block_size, num_kv_heads=3, head_size=4)
    paged, contiguous = PagedKVCache(pool), KVCache()
    for k, v in _steps(lengths, seed=6):
        pk, pv = paged.update(k, v)
        ck, cv = contiguous.update(k, v)
        torch.testing.assert_close(pk, ck, rtol=0, atol=0)
        torch.testing.assert_close(pv, cv, rtol=0, atol=0)
    n = sum(lengths)
    assert paged.reserved_slots == 2 * block_size * -(-n // block_size)  # 2 rows, whole blocks
    assert paged.reserved_slots - 2 * n < 2 * block_size  # less than a block wasted per row


def test_paged_decoding_equals_contiguous_decoding_in_a_model():
    cl.set_seed(7)
    lm = cl.DecoderLM(cl.DecoderLMConfig(vocab_size=30, num_hiddens=16, num_heads=4, num_kv_heads=2)).double().eval()
    tokens = torch.randint(0, 30, (2, 11), generator=torch.Generator().manual_seed(7))
    pool = BlockPool(40, 3, num_kv_heads=2, head_size=4, dtype=torch.float64)
    state = cl.DecoderLMState([PagedKVCache(pool) for _ in lm.blocks])
    pieces = [lm.step_(tokens[:, :5], state)] + [lm.step_(tokens[:, t:t + 1], state) for t in range(5, 11)]
    torch.testing.assert_close(torch.cat(pieces, 1), lm(tokens), rtol=0, atol=1e-12)
    assert pool.used == 2 * 2 * 4  # 2 layers x 2 rows x ceil(11 / 3) blocks
    for cache in state.caches:
        cache.crop(4)
    assert pool.used == 2 * 2 * 2
    for cache in state.caches:
        cache.release()
    assert pool.used == 0


def test_a_full_pool_refuses_a_block():
    pool = BlockPool(2, 2, num_kv_heads=1, head_size=1)
    cache = PagedKVCache(pool)
    cache.update(torch.zeros(1, 1, 4, 1), torch.zeros(1, 1, 4, 1))
    with pytest.raises(RuntimeError, match="all in use"):
        cache.update(torch.zeros(1, 1, 1, 1), torch.zeros(1, 1, 1, 1))
