"""Tests for course_lib.attention.sparse: the strided and fixed patterns, block-sparse attention, the multi-head
module, the swap into a Transformer, and the memory counter.

References: the paper's index sets built by Python loops, dense attention written here (scores,
-inf fill, softmax), a brute-force loop over (batch, head, query), torch.nn.functional
.scaled_dot_product_attention with the pattern mask, autograd.gradcheck in float64, and closed forms.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import course_lib as cl
from course_lib import padding_mask, recording_attention
from course_lib.attention.cache import KVCache
from course_lib.attention.multihead import MultiHeadAttention
from course_lib.attention.sparse import (
    SparseKernel,
    SparseMultiHeadAttention,
    default_stride,
    dense_attention,
    fixed_attention,
    fixed_pattern,
    fused_attention,
    peak_memory,
    strided_attention,
    strided_pattern,
)
from course_lib.teaching.exercises._core import LargestTensorProbe

D, H = 12, 3

# ---------------------------------------------------------------- references


def loop_strided(n: int, stride: int, causal: bool) -> torch.Tensor:
    """The paper's sets: A1 = {max(0, i - l), ..., i} (band of l + 1) and A2 = {j : (i - j) mod l = 0}."""
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(n):
            if causal:
                allowed = max(0, i - stride) <= j <= i or (j <= i and (i - j) % stride == 0)
            else:
                allowed = abs(i - j) <= stride or (i - j) % stride == 0
            mask[i, j] = allowed
    return mask


def loop_fixed(n: int, stride: int, c: int, causal: bool) -> torch.Tensor:
    """A1 = the block of i, A2 = the last c positions of every block (that exist)."""
    mask = torch.zeros(n, n, dtype=torch.bool)
    summary = {b + s for b in range(0, n, stride) for s in range(stride - c, stride) if b + s < n}
    for i in range(n):
        start = (i // stride) * stride
        block = set(range(start, min(start + stride, n)))
        for j in block | summary:
            if not causal or j <= i:
                mask[i, j] = True
    return mask


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt d) v with -inf at masked keys; a query without keys gets 0."""
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v


def padding_keep(batch: int, n: int, valid_lens=None, key_mask=None) -> torch.Tensor:
    """(batch, 1, n, n) bool from (batch,) or (batch, n) lengths and a (batch, n) key mask."""
    keep = torch.ones(batch, 1, n, n, dtype=torch.bool)
    if valid_lens is not None:
        lens = valid_lens.view(batch, 1, 1, 1) if valid_lens.dim() == 1 else valid_lens.view(batch, 1, n, 1)
        keep = keep & (torch.arange(n) < lens)
    if key_mask is not None:
        keep = keep & key_mask[:, None, None, :]
    return keep


def qkv(batch=2, heads=2, n=10, d=6, d_v=5, dtype=torch.float64, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    out = [torch.randn(batch, heads, n, dd, generator=g, dtype=dtype) for dd in (d, d, d_v)]
    return [t.requires_grad_(requires_grad) for t in out]


def sparse(pattern, q, k, v, stride, c, causal, **kwargs):
    if pattern == "strided":
        return strided_attention(q, k, v, stride, causal=causal, **kwargs)
    return fixed_attention(q, k, v, stride, c, causal=causal, **kwargs)


def dense_pattern(pattern, n, stride, c, causal):
    return strided_pattern(n, stride, causal) if pattern == "strided" else fixed_pattern(n, stride, c, causal)


# ---------------------------------------------------------------- the patterns


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("n", "stride"), [(1, 1), (7, 1), (16, 4), (17, 4), (23, 5), (9, 12), (30, 6)])
def test_strided_pattern_matches_the_papers_index_sets(n, stride, causal):
    assert torch.equal(strided_pattern(n, stride, causal), loop_strided(n, stride, causal))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("n", "stride", "c"), [(1, 1, 1), (16, 4, 1), (17, 4, 2), (23, 5, 5), (9, 12, 3), (30, 6, 1)])
def test_fixed_pattern_matches_the_papers_index_sets(n, stride, c, causal):
    assert torch.equal(fixed_pattern(n, stride, c, causal), loop_fixed(n, stride, c, causal))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 40), stride=st.integers(1, 12), c=st.integers(1, 12))
def test_pattern_properties(n, stride, c):
    c = min(c, stride)
    for causal_mask, full in ((strided_pattern(n, stride, True), strided_pattern(n, stride, False)),
                              (fixed_pattern(n, stride, c, True), fixed_pattern(n, stride, c, False))):
        assert causal_mask.dtype == torch.bool and causal_mask.shape == (n, n)
        assert causal_mask.diagonal().all()  # every position sees itself
        assert torch.equal(causal_mask, full & torch.ones(n, n, dtype=torch.bool).tril())
    assert torch.equal(strided_pattern(n, stride, False), strided_pattern(n, stride, False).T)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 300), stride=st.integers(1, 40))
def test_strided_causal_row_counts_have_the_closed_form(n, stride):
    # Row i: min(i + 1, l) positions of the band plus floor(i / l) earlier positions of the column.
    rows = strided_pattern(n, stride, True).sum(1)
    i = torch.arange(n)
    assert torch.equal(rows, torch.clamp(i + 1, max=stride) + i // stride)


@pytest.mark.parametrize("n", [64, 256, 1024])
def test_sqrt_stride_attends_to_order_n_sqrt_n_pairs(n):
    stride = default_stride(n)
    pairs = int(strided_pattern(n, stride, True).sum())
    assert pairs <= 2 * n * math.sqrt(n)  # at most l + n / l = 2 sqrt(n) per query
    assert pairs < n * (n + 1) / 2 / (math.sqrt(n) / 4)  # far fewer than causal dense's n (n + 1) / 2


def reach_in_two_hops(mask: torch.Tensor) -> torch.Tensor:
    """Boolean (A @ A) > 0: j reaches i through some k with A[i, k] and A[k, j] (A has its diagonal)."""
    a = mask.to(torch.int64)
    return (a @ a) > 0


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 70), stride=st.integers(1, 12), c=st.integers(1, 12))
def test_every_earlier_position_is_reachable_in_two_hops(n, stride, c):
    c = min(c, stride)
    tril = torch.ones(n, n, dtype=torch.bool).tril()
    for causal_mask in (strided_pattern(n, stride, True), fixed_pattern(n, stride, c, True)):
        reach = reach_in_two_hops(causal_mask)
        assert torch.equal(reach & tril, tril)  # every j <= i
        assert not (reach & ~tril).any()  # and never the future
    assert reach_in_two_hops(strided_pattern(n, stride, False)).all()
    # Non-causal fixed: a key in the last block is reached through that block's summary cells, which
    # exist only when the block is long enough to hold one (n % stride > stride - c, or a full block).
    last = n % stride or stride
    assert bool(reach_in_two_hops(fixed_pattern(n, stride, c, False)).all()) == (last > stride - c or n <= stride)


@pytest.mark.parametrize("pattern", ["strided", "fixed"])
def test_one_hop_is_not_enough(pattern):
    mask = dense_pattern(pattern, 64, 8, 1, True)
    tril = torch.ones(64, 64, dtype=torch.bool).tril()
    assert not torch.equal(mask, tril)
    assert (tril & ~mask).sum() > 64 * 63 / 2 * 0.5  # most earlier positions need the second hop


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: strided_pattern(0, 2), ValueError, "n must be positive"),
        (lambda: strided_pattern(5, 0), ValueError, "stride must be positive"),
        (lambda: strided_pattern(5, 2.0), TypeError, "stride must be an int"),
        (lambda: strided_pattern(True, 2), TypeError, "n must be an int"),
        (lambda: strided_pattern(5, 2, causal=1), TypeError, "causal must be a bool"),
        (lambda: fixed_pattern(5, 2, 0), ValueError, "c must be positive"),
        (lambda: fixed_pattern(5, 2, 3), ValueError, "c .* at most stride = 2"),
        (lambda: default_stride(0), ValueError, "n must be positive"),
    ],
)
def test_bad_pattern_arguments_raise(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize(("n", "expected"), [(1, 1), (2, 2), (4, 2), (5, 3), (256, 16), (257, 17), (4096, 64)])
def test_default_stride_is_the_ceiling_of_sqrt_n(n, expected):
    assert default_stride(n) == expected


# ---------------------------------------------------------------- sparse attention == dense masked attention

CASES = [(1, 1, 1), (7, 3, 1), (16, 4, 1), (16, 4, 2), (17, 4, 3), (23, 5, 1), (9, 12, 4), (12, 1, 1)]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("pattern", ["strided", "fixed"])
@pytest.mark.parametrize(("n", "stride", "c"), CASES)
def test_sparse_attention_equals_dense_masked_attention(pattern, n, stride, c, causal):
    q, k, v = qkv(n=n, seed=n + stride)
    expected = reference_attention(q, k, v, loop_fixed(n, stride, c, causal) if pattern == "fixed"
                                   else loop_strided(n, stride, causal))
    torch.testing.assert_close(sparse(pattern, q, k, v, stride, c, causal), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("pattern", ["strided", "fixed"])
def test_three_dimensional_inputs_are_one_head(pattern):
    q, k, v = qkv(heads=1, n=11)
    four = sparse(pattern, q, k, v, 3, 1, True)
    three = sparse(pattern, q[:, 0], k[:, 0], v[:, 0], 3, 1, True)
    assert three.shape == (2, 11, 5)
    torch.testing.assert_close(three, four[:, 0])


PADDING = {
    "lens_1d": {"valid_lens": torch.tensor([13, 4, 0])},
    "lens_2d": {"valid_lens": torch.tensor([[(i * 7) % 14 for i in range(13)], [13] * 13, [i for i in range(13)]])},
    "key_mask": {"key_mask": torch.rand(3, 13, generator=torch.Generator().manual_seed(1)) > 0.4},
    "both": {"valid_lens": torch.tensor([9, 13, 2]),
             "key_mask": torch.rand(3, 13, generator=torch.Generator().manual_seed(2)) > 0.3},
}


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("pattern", ["strided", "fixed"])
@pytest.mark.parametrize("case", list(PADDING))
def test_padding_equals_dense_with_the_padding_mask(case, pattern, causal):
    n, stride, c = 13, 4, 2
    q, k, v = qkv(batch=3, n=n, seed=3)
    kwargs = PADDING[case]
    keep = loop_fixed(n, stride, c, causal) if pattern == "fixed" else loop_strided(n, stride, causal)
    keep = keep & padding_keep(3, n, **kwargs)
    expected = reference_attention(q, k, v, keep)
    torch.testing.assert_close(sparse(pattern, q, k, v, stride, c, causal, **kwargs), expected,
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("pattern", ["strided", "fixed"])
def test_fully_masked_queries_output_zero_with_finite_gradients(pattern):
    q, k, v = qkv(batch=2, n=9, seed=4, requires_grad=True)
    out = sparse(pattern, q, k, v, 3, 1, True, valid_lens=torch.tensor([9, 0]))
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert torch.equal(k.grad[1], torch.zeros_like(k.grad[1]))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("pattern", ["strided", "fixed"])
def test_gradients_equal_those_of_dense_masked_attention(pattern, causal):
    n, stride, c = 14, 4, 2
    lens = torch.tensor([14, 8])
    keep = dense_pattern(pattern, n, stride, c, causal) & padding_keep(2, n, lens)
    grads = []
    for path in ("sparse", "dense"):
        q, k, v = qkv(n=n, seed=5, requires_grad=True)
        out = (sparse(pattern, q, k, v, stride, c, causal, valid_lens=lens) if path == "sparse"
               else reference_attention(q, k, v, keep))
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape)).sum().backward()
        grads.append([q.grad, k.grad, v.grad])
    for sparse_grad, dense_grad in zip(*grads, strict=True):
        torch.testing.assert_close(sparse_grad, dense_grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("pattern", ["strided", "fixed"])
def test_gradcheck_float64(pattern, causal):
    q, k, v = qkv(batch=2, heads=1, n=7, d=3, d_v=2, seed=6, requires_grad=True)
    lens = torch.tensor([7, 5])
    assert torch.autograd.gradcheck(lambda a, b, c_: sparse(pattern, a, b, c_, 3, 1, causal, valid_lens=lens),
                                    (q, k, v))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("pattern", ["strided", "fixed"])
def test_sparse_attention_equals_scaled_dot_product_attention_with_the_pattern(pattern, causal):
    n, stride, c = 40, 6, 2
    q, k, v = qkv(n=n, dtype=torch.float32, seed=7)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=dense_pattern(pattern, n, stride, c, causal))
    torch.testing.assert_close(sparse(pattern, q, k, v, stride, c, causal), expected)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 40), stride=st.integers(1, 10), c=st.integers(1, 10), causal=st.booleans(),
       pattern=st.sampled_from(["strided", "fixed"]), seed=st.integers(0, 2**16))
def test_sparse_equals_dense_for_random_sizes(n, stride, c, causal, pattern, seed):
    c = min(c, stride)
    q, k, v = qkv(batch=2, heads=1, n=n, seed=seed)
    lens = torch.randint(0, n + 1, (2,), generator=torch.Generator().manual_seed(seed))
    keep = dense_pattern(pattern, n, stride, c, causal) & padding_keep(2, n, lens)
    torch.testing.assert_close(sparse(pattern, q, k, v, stride, c, causal, valid_lens=lens),
                               reference_attention(q, k, v, keep), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("pattern", ["strided", "fixed"])
def test_keys_outside_the_pattern_do_not_change_the_output(pattern):
    n, stride, c = 20, 4, 1
    q, k, v = qkv(n=n, seed=8)
    out = sparse(pattern, q, k, v, stride, c, True)
    i = 13
    outside = ~dense_pattern(pattern, n, stride, c, True)[i]
    k2, v2 = k.clone(), v.clone()
    k2[:, :, outside] = 50 * torch.randn_like(k2[:, :, outside])
    v2[:, :, outside] = 50 * torch.randn_like(v2[:, :, outside])
    torch.testing.assert_close(sparse(pattern, q, k2, v2, stride, c, True)[:, :, i], out[:, :, i])


def test_dropout_on_the_weights_only_when_asked():
    q, k, v = qkv(n=16, dtype=torch.float32)
    plain = strided_attention(q, k, v, 4)
    torch.testing.assert_close(strided_attention(q, k, v, 4, dropout_p=0.0), plain)
    torch.manual_seed(0)
    dropped = strided_attention(q, k, v, 4, dropout_p=0.5)
    assert not torch.allclose(dropped, plain)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("pattern", ["strided", "fixed"])
def test_no_tensor_of_n_squared_entries_is_built(pattern, causal):
    n = 1024
    q, k, v = qkv(batch=1, heads=1, n=n, d=8, d_v=8, dtype=torch.float32)
    with torch.no_grad(), LargestTensorProbe() as probe:
        sparse(pattern, q, k, v, default_stride(n), 1, causal)
    # About n (2 or 3) sqrt(n) scores; the dense matrix would have n^2 = 32 sqrt(n) n entries.
    assert probe.largest <= 4 * n * math.sqrt(n)
    with torch.no_grad(), LargestTensorProbe() as probe:
        dense_attention(q, k, v, strided_pattern(n, 32, causal))
    assert probe.largest >= n * n


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda q, k, v: strided_attention(q, k[:, :, :5], v[:, :, :5], 2), ValueError, "same shape"),
        (lambda q, k, v: strided_attention(q[0, 0], k[0, 0], v[0, 0], 2), ValueError, "3-D or 4-D"),
        (lambda q, k, v: strided_attention(q.long(), k, v, 2), TypeError, "queries must be a floating"),
        (lambda q, k, v: strided_attention(q, k, v[..., :3, :], 2), ValueError, "keys and values"),
        (lambda q, k, v: strided_attention(q, k, v, 0), ValueError, "stride must be positive"),
        (lambda q, k, v: strided_attention(q, k, v, 2, causal=None), TypeError, "causal must be a bool"),
        (lambda q, k, v: fixed_attention(q, k, v, 2, c=3), ValueError, "c .* at most stride"),
        (lambda q, k, v: strided_attention(q, k, v, 2, valid_lens=torch.tensor([1, 2, 3])), ValueError,
         "valid_lens must have shape"),
        (lambda q, k, v: strided_attention(q, k, v, 2, valid_lens=torch.tensor([1, 9])), ValueError,
         "must not exceed"),
        (lambda q, k, v: strided_attention(q, k, v, 2, key_mask=torch.ones(2, 8)), TypeError,
         "key_mask must be a bool"),
        (lambda q, k, v: strided_attention(q, k, v, 2, key_mask=torch.ones(2, 5, dtype=torch.bool)), ValueError,
         r"key_mask must have shape \(2, 8\)"),
        (lambda q, k, v: strided_attention(q, k, v, 2, dropout_p=1.0), ValueError, "dropout_p"),
        (lambda q, k, v: fused_attention(q, k, v, mask=torch.ones(8, 8), causal=True), TypeError, "bool"),
        (lambda q, k, v: dense_attention(q, k[..., :2], v), ValueError, "queries and keys do not match"),
    ],
)
def test_bad_attention_inputs_raise(call, error, match):
    q, k, v = qkv(n=8, dtype=torch.float32)
    with pytest.raises(error, match=match):
        call(q, k, v)


# ---------------------------------------------------------------- the dense baselines


def test_dense_and_fused_attention_match_sdpa_and_zero_empty_rows():
    q, k, v = qkv(n=9, dtype=torch.float32, seed=9)
    mask = torch.rand(2, 1, 9, 9, generator=torch.Generator().manual_seed(3)) > 0.5
    mask[0, 0, 4] = False  # a query without keys
    mask[:, :, 5] = True
    expected = reference_attention(q, k, v, mask)
    torch.testing.assert_close(dense_attention(q, k, v, mask), expected)
    torch.testing.assert_close(fused_attention(q, k, v, mask), expected)
    assert torch.equal(fused_attention(q, k, v, mask)[0, :, 4], torch.zeros(2, 5))
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    torch.testing.assert_close(fused_attention(q, k, v, causal=True), reference_attention(q, k, v, causal))


# ---------------------------------------------------------------- memory


def test_peak_memory_counts_live_tensors_only():
    x = torch.randn(1000)

    def two_then_one():
        a = torch.empty(1000)  # 4000 bytes
        b = torch.empty(500, dtype=torch.float64)  # 4000 bytes, both alive: 8000
        del a, b
        return torch.empty(250)  # 1000 bytes after both are freed

    assert peak_memory(two_then_one) == 8000
    assert peak_memory(lambda: x.view(10, 100).t()) == 0  # views share the input's storage
    assert peak_memory(lambda: x.mul_(1.0)) == 0  # in place
    assert peak_memory(lambda: x + 1) == 4000


def test_peak_memory_of_explicit_attention_holds_the_n_by_n_matrix():
    n = 256
    q, k, v = qkv(batch=1, heads=1, n=n, d=8, d_v=8, dtype=torch.float32)
    with torch.no_grad():
        peak = peak_memory(lambda: dense_attention(q, k, v))
    assert peak >= 2 * n * n * 4  # scores and weights alive together, float32


def test_sparse_memory_beats_explicit_dense_and_grows_like_n_to_the_1_5():
    peaks = {}
    for n in (1024, 4096):
        q, k, v = qkv(batch=1, heads=1, n=n, d=16, d_v=16, dtype=torch.float32)
        stride = default_stride(n)
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        with torch.no_grad():
            peaks[n] = (peak_memory(lambda: strided_attention(q, k, v, stride)),  # noqa: B023
                        peak_memory(lambda: dense_attention(q, k, v, causal)))  # noqa: B023
    assert peaks[4096][1] >= 8 * peaks[4096][0]
    sparse_growth, dense_growth = peaks[4096][0] / peaks[1024][0], peaks[4096][1] / peaks[1024][1]
    assert 4 < sparse_growth < 10  # 4^1.5 = 8
    assert dense_growth > 15  # 4^2 = 16


def test_peak_memory_rejects_non_callables():
    with pytest.raises(TypeError, match="fn must be callable"):
        peak_memory(3)


# ---------------------------------------------------------------- the multi-head module


def make_pair(pattern="strided", stride=3, c=1, bias=True, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    dense = MultiHeadAttention(D, H, bias=bias).to(dtype).eval()
    if bias:
        with torch.no_grad():
            for layer in (dense.W_q, dense.W_k, dense.W_v, dense.W_o):
                layer.bias.normal_()
    return dense, SparseMultiHeadAttention.from_dense(dense, pattern, stride, c)


def brute_force_mha(mha, x, allowed):
    """One (example, head, query) at a time; ``allowed(b, i, j)`` says if query i sees key j."""
    B, T, _ = x.shape
    dh = mha.head_size
    q, k, v = mha.W_q(x), mha.W_k(x), mha.W_v(x)
    heads = torch.zeros(B, T, D, dtype=x.dtype)
    for b in range(B):
        for head in range(mha.num_heads):
            cols = slice(head * dh, (head + 1) * dh)
            for i in range(T):
                js = [j for j in range(T) if allowed(b, i, j)]
                if js:
                    scores = torch.stack([q[b, i, cols] @ k[b, j, cols] for j in js]) / math.sqrt(dh)
                    weights = torch.softmax(scores, dim=0)
                    heads[b, i, cols] = sum(w * v[b, j, cols] for w, j in zip(weights, js, strict=True))
    return mha.W_o(heads)


@pytest.mark.parametrize("store_weights", [False, True])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("pattern", "c"), [("strided", 1), ("fixed", 2)])
def test_module_matches_brute_force_loop(pattern, c, causal, store_weights):
    _, mha = make_pair(pattern, 4, c, seed=1)
    mha.record_weights = store_weights  # recording runs the explicit kernel with the dense pattern
    x = torch.randn(2, 11, D, dtype=torch.float64)
    lens = torch.tensor([11, 6])
    pat = loop_fixed(11, 4, c, causal) if pattern == "fixed" else loop_strided(11, 4, causal)
    expected = brute_force_mha(mha, x, lambda b, i, j: bool(pat[i, j]) and j < lens[b])
    torch.testing.assert_close(mha(x, x, x, padding_mask(lens, 11), causal=causal), expected)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("pattern", "c"), [("strided", 1), ("fixed", 3)])
def test_module_equals_dense_module_with_the_pattern_mask(pattern, c, causal):
    dense, mha = make_pair(pattern, 5, c, seed=2)
    x = torch.randn(3, 17, D, dtype=torch.float64)
    keep = padding_mask(torch.tensor([17, 3, 11]), 17)  # (B, 1, n): marks keys only
    mask = dense_pattern(pattern, 17, 5, c, causal)
    torch.testing.assert_close(mha(x, x, x, keep, causal=causal), dense(x, x, x, keep & mask))


def test_module_accepts_the_encoders_key_mask():
    dense, mha = make_pair("fixed", 4, 1, seed=3)
    x = torch.randn(2, 10, D, dtype=torch.float64)
    lens = torch.tensor([10, 7])
    key_mask = (torch.arange(10) < lens[:, None])[:, None, None, :]  # (B, 1, 1, n), as TransformerEncoder builds it
    torch.testing.assert_close(mha(x, x, x, mask=key_mask), mha(x, x, x, padding_mask(lens, 10)))
    torch.testing.assert_close(mha(x, x, x, mask=key_mask),
                               dense(x, x, x, mask=key_mask & fixed_pattern(10, 4, 1, causal=False)))


def test_stored_weights_live_in_the_pattern():
    _, mha = make_pair("strided", 3, seed=4)
    x = torch.randn(2, 10, D, dtype=torch.float64)
    with recording_attention(mha):
        mha(x, x, x, causal=True)
    weights = mha.attention_weights
    assert weights.shape == (2, H, 10, 10)
    assert torch.equal(weights != 0, strided_pattern(10, 3).expand(2, H, 10, 10))
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, H, 10, dtype=torch.float64))
    mha(2 * x, x, x, causal=True)
    assert mha.attention_weights is weights  # not recording any more


@pytest.mark.parametrize("pattern", ["strided", "fixed"])
@pytest.mark.parametrize("chunks", [(1,) * 9, (4, 1, 3, 1), (9,)])
def test_kv_cache_incremental_equals_full_causal_forward(pattern, chunks):
    _, mha = make_pair(pattern, 3, 1, seed=5)
    x = torch.randn(2, sum(chunks), D, dtype=torch.float64)
    full = mha(x, x, x, causal=True)
    cache, outs, start = KVCache(), [], 0
    for size in chunks:
        step = x[:, start:start + size]
        outs.append(mha(step, step, step, causal=True, kv_cache=cache))
        start += size
    torch.testing.assert_close(torch.cat(outs, dim=1), full)


def test_stride_none_uses_the_default_stride_of_each_length():
    torch.manual_seed(6)
    auto = SparseMultiHeadAttention(D, H, "strided").double().eval()
    fixed_stride = SparseMultiHeadAttention(D, H, "strided", stride=5).double().eval()
    fixed_stride.load_state_dict(auto.state_dict())
    x = torch.randn(2, 21, D, dtype=torch.float64)  # ceil(sqrt(21)) = 5
    assert auto.stride_for(21) == 5
    torch.testing.assert_close(auto(x, x, x, causal=True), fixed_stride(x, x, x, causal=True))


def test_module_gradcheck_float64():
    _, mha = make_pair("strided", 2, seed=7)
    x = torch.randn(2, 5, D, dtype=torch.float64, requires_grad=True)
    keep = padding_mask(torch.tensor([5, 3]), 5)
    assert torch.autograd.gradcheck(lambda t: mha(t, t, t, keep, causal=True), (x,))


def test_dropout_acts_only_in_training():
    mha = SparseMultiHeadAttention(D, H, "strided", stride=3, dropout=0.5)
    x = torch.randn(2, 9, D)
    mha.eval()
    torch.testing.assert_close(mha(x, x, x), mha(x, x, x))
    mha.train()
    torch.manual_seed(0)
    a = mha(x, x, x)
    torch.manual_seed(1)
    assert not torch.allclose(a, mha(x, x, x))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"pattern": "dense"}, ValueError, "pattern must be one of"),
        ({"stride": 0}, ValueError, "stride must be positive"),
        ({"pattern": "fixed", "stride": 2, "c": 3}, ValueError, "c .* at most stride"),
        ({"c": 0}, ValueError, "c must be positive"),
        ({"dropout": 1.5}, ValueError, "dropout"),
    ],
)
def test_bad_construction_raises(kwargs, error, match):
    with pytest.raises(error, match=match):
        SparseMultiHeadAttention(D, H, **kwargs)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda m, x: m(x, x, x, mask=torch.ones(6, 6, dtype=torch.bool)), ValueError, "only key"),
        (lambda m, x: m(x, x, x, mask=torch.ones(2, 1, 1, 6)), TypeError, "mask must be a bool"),
        (lambda m, x: m(x, x, x, padding_mask(torch.tensor([1, 2, 3]), 6)), ValueError, "does not broadcast"),
        (lambda m, x: m(x, x, x, padding_mask(torch.tensor([[1] * 6, [2] * 6]), 6)), ValueError, "only key"),
        (lambda m, x: m(x, x, x, causal="yes"), TypeError, "causal must be a bool"),
        (lambda m, x: m(x.long(), x, x), TypeError, "floating"),
    ],
)
def test_bad_forward_inputs_raise(call, error, match):
    mha = SparseMultiHeadAttention(D, H, "strided", stride=2)
    with pytest.raises(error, match=match):
        call(mha, torch.randn(2, 6, D))


def test_fused_attention_ands_a_mask_with_causal():
    q, k, v = (torch.randn(2, 7, 4, dtype=torch.float64) for _ in range(3))
    mask = torch.rand(7, 7, generator=torch.Generator().manual_seed(0)) > 0.4
    torch.testing.assert_close(fused_attention(q, k, v, mask, causal=True),
                               dense_attention(q, k, v, mask & cl.causal_mask(7)))


@pytest.mark.parametrize("pattern", ["strided", "fixed"])
def test_fewer_queries_than_keys_get_the_last_rows_of_the_pattern(pattern):
    _, mha = make_pair(pattern, 3, 1, seed=8)
    x = torch.randn(2, 10, D, dtype=torch.float64)
    for causal in (True, False):
        torch.testing.assert_close(mha(x[:, 6:], x, x, causal=causal), mha(x, x, x, causal=causal)[:, 6:])


def test_fixed_pattern_with_default_stride_checks_c_at_call_time():
    mha = SparseMultiHeadAttention(D, H, "fixed", c=3)
    x = torch.randn(1, 4, D)  # default stride 2 < c
    with pytest.raises(ValueError, match="c .* at most stride = 2"):
        mha(x, x, x)


# ---------------------------------------------------------------- inside a Transformer


def small_transformer(seed=0, **kernel):
    """A small Transformer; ``kernel`` names its self-attention kernel (cross-attention stays dense)."""
    torch.manual_seed(seed)
    config = cl.TransformerConfig(src_vocab_size=11, tgt_vocab_size=13, num_hiddens=D, ffn_num_hiddens=16,
                                  num_heads=H, num_enc_layers=2, num_dec_layers=3, dropout=0.0, max_len=40,
                                  cross_kernel="fused" if kernel else None, **kernel)
    return cl.Transformer(config).double().eval()


def sparse_kernel(pattern, stride, c=1):
    """The config fields that name chapter 9's kernel."""
    return {"kernel": "sparse", "kernel_options": {"pattern": pattern, "stride": stride, "c": c}}


def test_a_config_naming_the_sparse_kernel_gives_self_attention_the_pattern_and_the_same_weights():
    dense, model = small_transformer(), small_transformer(**sparse_kernel("fixed", 4, 2))
    for block in model.encoder.blocks:
        assert block.attention.kernel.pattern == "fixed" and block.attention.kernel.c == 2
    for block in model.decoder.blocks:
        assert isinstance(block.self_attention.kernel, SparseKernel)
        assert block.cross_attention.kernel is cl.fused_kernel
    assert dense.state_dict().keys() == model.state_dict().keys()
    model.load_state_dict(dense.state_dict())  # a trained dense model's weights, under the pattern
    assert all(p.dtype == torch.float64 for p in model.parameters())


def test_a_stride_longer_than_the_sequence_gives_back_the_dense_model():
    dense = small_transformer(1)
    src, tgt = torch.randint(1, 11, (2, 9)), torch.randint(1, 13, (2, 7))
    lens = torch.tensor([9, 5])
    dense_logits = dense(src, lens, tgt)
    full = small_transformer(**sparse_kernel("strided", 40))  # |i - j| < 40: the full (causal) pattern
    full.load_state_dict(dense.state_dict())
    torch.testing.assert_close(full(src, lens, tgt), dense_logits)
    narrow = small_transformer(**sparse_kernel("strided", 2))
    narrow.load_state_dict(dense.state_dict())
    assert not torch.allclose(narrow(src, lens, tgt), dense_logits)


def test_sparse_decoder_steps_equal_teacher_forcing():
    model = small_transformer(2, **sparse_kernel("fixed", 3, 1))
    src, tgt = torch.randint(1, 11, (2, 8)), torch.randint(1, 13, (2, 10))
    lens = torch.tensor([8, 6])
    full = model(src, lens, tgt)
    state = model.init_decoder_state(model.encode(src, lens), lens)
    steps = []
    for t in range(10):
        logits, state = model.decode_step(tgt[:, t:t + 1], state)
        steps.append(logits)
    torch.testing.assert_close(torch.stack(steps, dim=1), full)


def test_sparse_encoder_output_ignores_tokens_outside_the_two_hop_reach():
    # One encoder layer: position i only sees its pattern row (the FFN acts per position).
    torch.manual_seed(3)
    encoder = cl.TransformerEncoder(20, D, 16, H, num_layers=1, max_len=64, **sparse_kernel("strided", 4))
    encoder = encoder.double().eval()
    src = torch.randint(1, 20, (1, 30))
    out = encoder(src)
    i = 17
    outside = ~strided_pattern(30, 4, causal=False)[i]
    changed = src.clone()
    changed[0, outside] = (changed[0, outside] % 19) + 1
    assert not torch.equal(changed, src)
    torch.testing.assert_close(encoder(changed)[0, i], out[0, i])


def test_a_config_refuses_unknown_sparse_options_naming_them():
    with pytest.raises(TypeError, match="'sparse' kernel takes the options.*'width'"):
        cl.TransformerConfig(11, 13, kernel="sparse", kernel_options={"width": 3})
    with pytest.raises(ValueError, match="pattern"):
        cl.TransformerConfig(11, 13, kernel="sparse", kernel_options={"pattern": "diagonal"})


def test_a_sparse_encoder_records_its_weights():
    from course_lib.models.transformer import TransformerEncoder

    encoder = TransformerEncoder(20, D, 2 * D, H, 1, **sparse_kernel("strided", 3))
    with cl.recording_attention(encoder):
        encoder(torch.randint(0, 20, (2, 9)))
    assert encoder.blocks[0].attention.attention_weights.shape == (2, H, 9, 9)
