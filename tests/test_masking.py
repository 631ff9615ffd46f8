"""masking: sequence/length/causal masks and masked_softmax against loops and torch built-ins."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from course_lib.attention.masks import (
    causal_mask,
    lengths_to_mask,
    masked_softmax,
    sequence_mask,
    valid_lens_to_mask,
)


def _loop_softmax(X: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Masked softmax by hand: per row, exp over the kept keys only; a row with none is zeros."""
    out = torch.zeros(X.shape, dtype=torch.float64)
    flat_x, flat_keep, flat_out = X.reshape(-1, X.shape[-1]), keep.reshape(-1, X.shape[-1]), out.view(-1, X.shape[-1])
    for r in range(flat_x.shape[0]):
        kept = [j for j in range(flat_x.shape[1]) if flat_keep[r, j]]
        if not kept:
            continue
        top = max(float(flat_x[r, j]) for j in kept)
        exps = {j: math.exp(float(flat_x[r, j]) - top) for j in kept}
        total = sum(exps.values())
        for j in kept:
            flat_out[r, j] = exps[j] / total
    return out


def _loop_keep_from_lens(lens: torch.Tensor, batch: int, n_q: int, n_k: int) -> torch.Tensor:
    keep = torch.zeros(batch, n_q, n_k, dtype=torch.bool)
    for b in range(batch):
        for i in range(n_q):
            length = int(lens[b]) if lens.dim() == 1 else int(lens[b, i])
            for j in range(n_k):
                keep[b, i, j] = j < length
    return keep


shapes = st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(1, 5))
seeds = st.integers(0, 2**31 - 1)
scales = st.sampled_from([1.0, 10.0, 1e4])


def _random(shape, seed, scale=1.0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


# --- masked_softmax: references --------------------------------------------------------------


def test_without_mask_equals_torch_softmax():
    X = _random((2, 3, 5), 0)
    torch.testing.assert_close(masked_softmax(X), torch.softmax(X, dim=-1))


def test_d2l_example_1d_valid_lens_zeroes_keys_past_the_length():
    X = torch.rand(2, 2, 4, generator=torch.Generator().manual_seed(0))
    W = masked_softmax(X, torch.tensor([2, 3]))
    assert torch.all(W[0, :, 2:] == 0) and torch.all(W[1, :, 3:] == 0)
    torch.testing.assert_close(W[0, :, :2], torch.softmax(X[0, :, :2], dim=-1))
    torch.testing.assert_close(W[1, :, :3], torch.softmax(X[1, :, :3], dim=-1))


def test_d2l_example_2d_valid_lens_gives_one_length_per_query():
    X = torch.rand(2, 2, 4, generator=torch.Generator().manual_seed(1))
    W = masked_softmax(X, torch.tensor([[1, 3], [2, 4]]))
    expected_zeros = torch.tensor([[[0, 1, 1, 1], [0, 0, 0, 1]], [[0, 0, 1, 1], [0, 0, 0, 0]]], dtype=torch.bool)
    assert torch.all(W[expected_zeros] == 0)
    assert torch.all(W[~expected_zeros] > 0)
    torch.testing.assert_close(W.sum(-1), torch.ones(2, 2))


@given(shape=shapes, seed=seeds, scale=scales, per_query=st.booleans())
def test_valid_lens_matches_brute_force_loop(shape, seed, scale, per_query):
    batch, n_q, n_k = shape
    X = _random(shape, seed, scale)
    g = torch.Generator().manual_seed(seed + 1)
    lens = torch.randint(0, n_k + 1, (batch, n_q) if per_query else (batch,), generator=g)
    expected = _loop_softmax(X, _loop_keep_from_lens(lens, batch, n_q, n_k))
    torch.testing.assert_close(masked_softmax(X, lens), expected)


@given(shape=shapes, seed=seeds, scale=scales)
def test_bool_mask_matches_brute_force_loop(shape, seed, scale):
    X = _random(shape, seed, scale)
    mask = torch.rand(shape, generator=torch.Generator().manual_seed(seed + 1)) < 0.6
    torch.testing.assert_close(masked_softmax(X, mask=mask), _loop_softmax(X, mask))


def test_mask_broadcasts_over_batch_and_matches_softmax_with_minus_inf():
    X = _random((3, 4, 4), 2)
    mask = causal_mask(4)  # (4, 4), broadcast over the batch
    expected = torch.softmax(X.masked_fill(~mask, float("-inf")), dim=-1)
    torch.testing.assert_close(masked_softmax(X, mask=mask), expected)


def test_valid_lens_and_mask_are_combined_with_logical_and():
    X = _random((2, 3, 4), 3)
    lens = torch.tensor([2, 4])
    mask = causal_mask(3, 4)
    keep = _loop_keep_from_lens(lens, 2, 3, 4) & mask
    torch.testing.assert_close(masked_softmax(X, lens, mask), _loop_softmax(X, keep))


def test_valid_lens_as_list_or_whole_floats_is_accepted():
    X = _random((2, 1, 3), 4)
    expected = _loop_softmax(X, _loop_keep_from_lens(torch.tensor([1, 2]), 2, 1, 3))
    torch.testing.assert_close(masked_softmax(X, [1, 2]), expected)
    torch.testing.assert_close(masked_softmax(X, torch.tensor([1.0, 2.0])), expected)


# --- masked_softmax: properties ----------------------------------------------------------------


@given(shape=shapes, seed=seeds, scale=scales)
def test_weights_are_non_negative_and_rows_sum_to_one_over_valid_keys(shape, seed, scale):
    X = _random(shape, seed, scale)
    mask = torch.rand(shape, generator=torch.Generator().manual_seed(seed + 1)) < 0.5
    W = masked_softmax(X, mask=mask)
    assert torch.all(W >= 0)
    assert torch.isfinite(W).all()
    has_key = mask.any(-1)
    torch.testing.assert_close(W.sum(-1)[has_key], torch.ones(int(has_key.sum()), dtype=W.dtype))
    assert torch.all(W.sum(-1)[~has_key] == 0)


@given(shape=shapes, seed=seeds, junk_scale=st.sampled_from([1.0, 1e4, 1e300]))
def test_masked_positions_get_exactly_zero_weight_and_do_not_change_output(shape, seed, junk_scale):
    X = _random(shape, seed)
    mask = torch.rand(shape, generator=torch.Generator().manual_seed(seed + 1)) < 0.5
    junk = _random(shape, seed + 2, junk_scale)
    X_changed = torch.where(mask, X, junk)  # same scores where attended, anything elsewhere
    W, W_changed = masked_softmax(X, mask=mask), masked_softmax(X_changed, mask=mask)
    assert torch.all(W[~mask] == 0)
    assert torch.equal(W, W_changed)


@given(shape=shapes, seed=seeds)
def test_adding_a_constant_per_row_does_not_change_the_weights(shape, seed):
    X = _random(shape, seed)
    shift = _random(shape[:-1] + (1,), seed + 1, 100.0)
    lens = torch.randint(0, shape[-1] + 1, shape[:1], generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(masked_softmax(X + shift, lens), masked_softmax(X, lens))


def test_fully_masked_row_gives_zero_weights_and_finite_gradients():
    X = _random((2, 2, 3), 5).requires_grad_()
    W = masked_softmax(X, torch.tensor([[0, 2], [3, 0]]))
    assert torch.all(W[0, 0] == 0) and torch.all(W[1, 1] == 0)
    assert not torch.isnan(W).any()
    (W * _random((2, 2, 3), 6)).sum().backward()
    assert torch.isfinite(X.grad).all()
    # No key, no influence: the gradient into a fully masked row is exactly zero.
    assert torch.all(X.grad[0, 0] == 0) and torch.all(X.grad[1, 1] == 0)


def test_all_keys_masked_in_every_row_gives_all_zeros():
    X = _random((2, 3, 4), 7)
    assert torch.equal(masked_softmax(X, torch.tensor([0, 0])), torch.zeros(2, 3, 4, dtype=X.dtype))
    assert torch.equal(masked_softmax(X, mask=torch.zeros(4, dtype=torch.bool)), torch.zeros_like(X))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_huge_scores_do_not_overflow(dtype):
    X = torch.tensor([[[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4]]], dtype=dtype)
    W = masked_softmax(X, torch.tensor([3]))
    torch.testing.assert_close(W[0, 0], torch.tensor([1.0, 0.0, 0.0], dtype=dtype))
    torch.testing.assert_close(W[0, 1], torch.full((3,), 1 / 3, dtype=dtype))
    W = masked_softmax(X, torch.tensor([1]))
    torch.testing.assert_close(W[0], torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]], dtype=dtype))


def _cpu_half_softmax_supported() -> bool:
    try:
        torch.softmax(torch.zeros(1, 2, dtype=torch.float16), dim=-1)
    except RuntimeError:
        return False
    return True


@pytest.mark.skipif(not _cpu_half_softmax_supported(), reason="no float16 softmax on this CPU build")
def test_huge_scores_in_float16_stay_finite_and_masked_rows_are_zero():
    X = torch.tensor([[[1e4, -1e4, 0.0], [5.0, 6.0, 7.0]]], dtype=torch.float16)
    W = masked_softmax(X, torch.tensor([[3, 0]]))
    assert W.dtype == torch.float16 and torch.isfinite(W).all()
    torch.testing.assert_close(W[0, 0], torch.tensor([1.0, 0.0, 0.0], dtype=torch.float16))
    assert torch.all(W[0, 1] == 0)


def test_gradcheck_with_a_fully_masked_row():
    X = _random((2, 3, 4), 8).requires_grad_()
    mask = torch.tensor([[True, False, True, True], [False, False, False, False], [True, True, True, False]])
    assert torch.autograd.gradcheck(lambda x: masked_softmax(x, mask=mask), (X,))
    assert torch.autograd.gradcheck(lambda x: masked_softmax(x, torch.tensor([[1, 0, 4], [2, 3, 0]])), (X,))


# --- masked_softmax: bad input -----------------------------------------------------------------


def test_valid_lens_of_wrong_shape_is_rejected_with_the_shapes():
    X = torch.zeros(2, 3, 4)
    with pytest.raises(ValueError, match=r"valid_lens must have shape \(2,\) or \(2, 3\).*got \(3,\)"):
        masked_softmax(X, torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match=r"shape"):
        masked_softmax(X, torch.ones(2, 4, dtype=torch.long))


def test_negative_valid_lens_is_rejected():
    with pytest.raises(ValueError, match="non-negative"):
        masked_softmax(torch.zeros(2, 3, 4), torch.tensor([1, -1]))


def test_non_integer_valid_lens_is_rejected():
    with pytest.raises(TypeError, match="non-integer"):
        masked_softmax(torch.zeros(2, 3, 4), torch.tensor([1.5, 2.0]))


def test_valid_lens_beyond_the_key_axis_is_rejected():
    with pytest.raises(ValueError, match=r"must not exceed 4"):
        masked_softmax(torch.zeros(2, 3, 4), torch.tensor([5, 1]))


def test_bool_valid_lens_is_rejected():
    with pytest.raises(TypeError, match="integer tensor of lengths"):
        masked_softmax(torch.zeros(2, 3, 4), torch.tensor([True, False]))


def test_valid_lens_need_3d_scores():
    with pytest.raises(ValueError, match=r"X must be 3-D.*got shape \(3, 4\)"):
        masked_softmax(torch.zeros(3, 4), torch.tensor([1, 2, 3]))


@pytest.mark.parametrize("X", [torch.zeros(2, 3, 4, dtype=torch.long), torch.zeros(2, 3, 4, dtype=torch.bool)])
def test_non_float_scores_are_a_type_error(X):
    with pytest.raises(TypeError, match="floating-point"):
        masked_softmax(X)


def test_non_tensor_scores_are_a_type_error():
    with pytest.raises(TypeError, match="torch.Tensor"):
        masked_softmax([[1.0, 2.0]])


def test_non_bool_mask_is_a_type_error():
    with pytest.raises(TypeError, match="bool"):
        masked_softmax(torch.zeros(2, 3), mask=torch.ones(2, 3, dtype=torch.long))


@pytest.mark.parametrize("mask_shape", [(2, 4), (2, 2, 3)])
def test_mask_that_does_not_broadcast_to_scores_is_rejected(mask_shape):
    # (2, 2, 3) broadcasts *with* (2, 3) but would turn the weights into (2, 2, 3): rejected too.
    with pytest.raises(ValueError, match=r"mask of shape .* does not broadcast to the scores' shape \(2, 3\)"):
        masked_softmax(torch.zeros(2, 3), mask=torch.ones(mask_shape, dtype=torch.bool))


# --- sequence_mask, lengths_to_mask, valid_lens_to_mask, causal_mask ---------------------------


def test_sequence_mask_d2l_example():
    X = torch.tensor([[1, 2, 3], [4, 5, 6]])
    assert torch.equal(sequence_mask(X, torch.tensor([1, 2])), torch.tensor([[1, 0, 0], [4, 5, 0]]))


def test_sequence_mask_fills_trailing_axes_with_value():
    X = torch.ones(2, 3, 4)
    out = sequence_mask(X, torch.tensor([1, 2]), value=-1)
    for b, length in enumerate([1, 2]):
        for t in range(3):
            assert torch.all(out[b, t] == (1 if t < length else -1))
    assert torch.all(X == 1), "the input must not be modified"


def test_sequence_mask_rejects_bad_input():
    with pytest.raises(ValueError, match="at least 2-D"):
        sequence_mask(torch.ones(3), torch.tensor([1]))
    with pytest.raises(ValueError, match=r"valid_lens must have shape \(2,\)"):
        sequence_mask(torch.ones(2, 3), torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match=r"must lie in \[0, 3\]"):
        sequence_mask(torch.ones(2, 3), torch.tensor([1, 4]))
    with pytest.raises(TypeError, match="torch.Tensor"):
        sequence_mask([[1, 2]], torch.tensor([1]))


@given(lens=st.lists(st.integers(0, 6), min_size=1, max_size=4), max_len=st.integers(0, 6))
def test_lengths_to_mask_matches_loop(lens, max_len):
    mask = lengths_to_mask(torch.tensor(lens), max_len)
    expected = [[t < n for t in range(max_len)] for n in lens]
    assert mask.dtype == torch.bool and mask.tolist() == expected


def test_lengths_to_mask_rejects_bad_input():
    with pytest.raises(TypeError, match="valid_lens must be a tensor"):
        lengths_to_mask(["1", "2"], 3)
    with pytest.raises(ValueError, match="max_len must be non-negative"):
        lengths_to_mask(torch.tensor([1]), -1)
    with pytest.raises(TypeError, match="max_len must be an int"):
        lengths_to_mask(torch.tensor([1]), 2.5)


@pytest.mark.parametrize("lens", [torch.tensor([2, 0, 3]), torch.tensor([[1, 2], [0, 3], [3, 3]])])
def test_valid_lens_to_mask_matches_loop(lens):
    mask = valid_lens_to_mask(lens, 3, 2, 3)
    assert torch.equal(mask, _loop_keep_from_lens(lens, 3, 2, 3))


def test_valid_lens_to_mask_rejects_a_wrong_shape():
    with pytest.raises(ValueError, match=r"\(3,\) or \(3, 2\).*got \(2, 3\)"):
        valid_lens_to_mask(torch.ones(2, 3, dtype=torch.long), 3, 2, 3)


@pytest.mark.parametrize(("n_q", "n_k"), [(1, None), (4, None), (3, 5), (5, 2)])
def test_causal_mask_lets_query_i_see_the_keys_up_to_its_bottom_right_aligned_position(n_q, n_k):
    mask = causal_mask(n_q, n_k)
    n_k = n_q if n_k is None else n_k
    assert mask.dtype == torch.bool and mask.shape == (n_q, n_k)
    # The queries are the last n_q positions: query i sits at key position i + n_k - n_q.
    assert mask.tolist() == [[j <= i + n_k - n_q for j in range(n_k)] for i in range(n_q)]
    assert causal_mask(n_q, n_k, offset=0).tolist() == [[j <= i for j in range(n_k)] for i in range(n_q)]


def test_lengths_to_mask_accepts_lists_like_tensors():
    assert torch.equal(lengths_to_mask([[1, 3]], 4), lengths_to_mask(torch.tensor([[1, 3]]), 4))


def test_a_key_padding_mask_is_refused_not_read_with_the_opposite_meaning():
    X = _random((2, 3, 4), 0)
    key_padding_mask = torch.tensor([[False, False, True, True], [False, False, False, True]])  # torch: True = pad
    with pytest.raises(ValueError, match="key_padding_mask"):
        masked_softmax(X, mask=key_padding_mask)
    torch.testing.assert_close(masked_softmax(X, mask=~key_padding_mask[:, None, :]),
                               masked_softmax(X, torch.tensor([2, 3])))


def test_causal_mask_follows_the_sdpa_convention_true_means_attend():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 5, 4, generator=g) for _ in range(3))
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(5)),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_causal_mask_rejects_bad_sizes():
    with pytest.raises(ValueError, match="n_queries must be non-negative"):
        causal_mask(-1)
    with pytest.raises(TypeError, match="n_keys must be an int"):
        causal_mask(3, 2.0)


def test_causal_mask_accepts_numpy_integers():
    assert torch.equal(causal_mask(np.int64(3)), causal_mask(3))


# --- properties on drawn tensors (hypothesis.extra.numpy): extreme and tied values, float32 too ---

_DTYPES = st.sampled_from([np.float32, np.float64])
_SHAPES = hnp.array_shapes(min_dims=3, max_dims=3, min_side=1, max_side=6)


def _scores(dtype, shape, bound):
    # A few distinct values only, so ties are common; extremes (+-bound) and zeros among them.
    values = st.sampled_from([0.0, 1.0, -1.0, 0.5, bound, -bound]) | st.floats(-bound, bound, width=32)
    return hnp.arrays(dtype, shape, elements=values)


@st.composite
def _scores_and_mask(draw, bound):
    dtype, shape = draw(_DTYPES), draw(_SHAPES)
    X = draw(_scores(dtype, shape, bound))
    mask = draw(hnp.arrays(np.bool_, shape))
    return torch.from_numpy(X), torch.from_numpy(mask)


def _reference_softmax(X, mask):
    """Softmax over the allowed keys in float64 NumPy; rows without a key are 0."""
    x = X.double().numpy()
    out = np.zeros_like(x)
    for idx in np.ndindex(*x.shape[:-1]):
        keep = mask.numpy()[idx]
        if keep.any():
            row = x[idx][keep]
            e = np.exp(row - row.max())
            out[idx][keep] = e / e.sum()
    return out


@given(_scores_and_mask(bound=1e4))
def test_masked_softmax_equals_a_float64_reference_on_drawn_scores(case):
    X, mask = case
    W = masked_softmax(X, mask=mask)
    assert W.dtype == X.dtype
    tol = 1e-5 if X.dtype == torch.float32 else 1e-12
    np.testing.assert_allclose(W.double().numpy(), _reference_softmax(X, mask), rtol=tol, atol=tol)
    assert torch.all(W[~mask.expand_as(W)] == 0)


@given(_scores_and_mask(bound=float(np.float32(3e38))))
def test_masked_softmax_stays_finite_and_normalised_with_extreme_scores(case):
    X, mask = case
    W = masked_softmax(X, mask=mask)
    assert torch.isfinite(W).all() and torch.all(W >= 0)
    sums = W.double().sum(-1)
    has_key = mask.any(-1)
    torch.testing.assert_close(sums[has_key], torch.ones_like(sums[has_key]), rtol=0, atol=1e-5)
    assert torch.all(sums[~has_key] == 0)


@given(_scores_and_mask(bound=1e4), st.floats(-1e3, 1e3))
def test_masked_softmax_ignores_a_shift_of_every_score(case, shift):
    X, mask = case
    X = X.double()
    torch.testing.assert_close(masked_softmax(X + shift, mask=mask), masked_softmax(X, mask=mask),
                               rtol=1e-9, atol=1e-9)


@given(hnp.arrays(np.int64, hnp.array_shapes(max_dims=2, max_side=5), elements=st.integers(0, 7)),
       st.integers(0, 7))
def test_lengths_to_mask_equals_numpy_comparison_on_drawn_lengths(lens, max_len):
    expected = np.arange(max_len) < lens[..., None]
    assert lengths_to_mask(torch.from_numpy(lens), max_len).numpy().tolist() == expected.tolist()
    assert lengths_to_mask(lens.tolist(), max_len).numpy().tolist() == expected.tolist()


@given(st.integers(0, 7), st.integers(0, 7), st.integers(-8, 8) | st.none())
def test_causal_mask_equals_numpy_tri(n_q, n_k, offset):
    expected = np.tri(n_q, n_k, k=n_k - n_q if offset is None else offset, dtype=bool)
    assert causal_mask(n_q, n_k, offset=offset).numpy().tolist() == expected.tolist()


# --- MaskMod: masks as rules, checked against loops and torch's FlexAttention -----------------------

from course_lib.attention.masks import MaskMod, causal_mod, padding_mod, sliding_window_mod  # noqa: E402
from course_lib.attention.sparse import fixed_mod, strided_mod  # noqa: E402


def _loop_mask(rule, n_q, n_k, batch=1):
    """rule(b, i, j) for the query at position n_k - n_q + i, one pair at a time."""
    return torch.tensor([[[bool(rule(b, n_k - n_q + i, j)) for j in range(n_k)] for i in range(n_q)]
                         for b in range(batch)])


RULES = {
    "causal": (causal_mod(), lambda b, i, j: j <= i),
    "window3": (sliding_window_mod(3), lambda b, i, j: abs(i - j) < 3),
    "causal_window3": (causal_mod() & sliding_window_mod(3), lambda b, i, j: j <= i and i - j < 3),
    "strided4": (strided_mod(4), lambda b, i, j: abs(i - j) < 4 or (i - j) % 4 == 0),
    "fixed4_2_causal": (fixed_mod(4, 2) & causal_mod(), lambda b, i, j: j <= i and (i // 4 == j // 4 or j % 4 >= 2)),
    "window_or_first": (sliding_window_mod(2) | MaskMod(lambda b, h, q, kv: kv == 0, "first"),
                        lambda b, i, j: abs(i - j) < 2 or j == 0),
}


@pytest.mark.parametrize("name", list(RULES))
@pytest.mark.parametrize(("n_q", "n_k"), [(9, 9), (3, 9), (1, 5)])
def test_a_rule_materialises_to_the_mask_of_its_loop(name, n_q, n_k):
    rule, loop = RULES[name]
    assert torch.equal(rule.materialize(n_q, n_k), _loop_mask(loop, n_q, n_k)[0])


def test_the_causal_rule_is_the_causal_mask_helper_and_padding_follows_the_lengths():
    for n_q, n_k in ((4, 4), (2, 6), (1, 3)):
        assert torch.equal(causal_mod().materialize(n_q, n_k), causal_mask(n_q, n_k))
    lens = torch.tensor([5, 2, 0])
    keep = (padding_mod(lens) & causal_mod()).materialize(5, batch=3)
    assert keep.shape == (3, 1, 5, 5)
    assert torch.equal(keep[:, 0], _loop_mask(lambda b, i, j: j <= i and j < lens[b], 5, 5, batch=3))


@pytest.mark.parametrize("name", list(RULES))
def test_block_lists_say_which_tiles_hold_any_or_only_kept_pairs(name):
    rule, _ = RULES[name]
    keep = rule.materialize(10, 11)
    any_kept, all_kept = rule.blocks(10, 11, 4, 3)
    assert any_kept.shape == all_kept.shape == (3, 4)
    for bi in range(3):
        for bj in range(4):
            tile = keep[4 * bi:4 * bi + 4, 3 * bj:3 * bj + 3]
            assert bool(any_kept[bi, bj]) == bool(tile.any()) and bool(all_kept[bi, bj]) == bool(tile.all())


@pytest.mark.parametrize("name", list(RULES))
def test_flex_attention_with_a_rule_equals_sdpa_with_its_mask(name):
    import warnings

    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    rule, _ = RULES[name]
    n_q, n_k = 6, 16
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, 2, n_q, 8, generator=g), torch.randn(2, 2, n_k, 8, generator=g), \
        torch.randn(2, 2, n_k, 8, generator=g)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # flex_attention warns that eager mode is slow
        block_mask = create_block_mask(rule.flex(n_q, n_k), None, None, n_q, n_k, device="cpu")
        out = flex_attention(q, k, v, block_mask=block_mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=rule.materialize(n_q, n_k))
    torch.testing.assert_close(out, expected)


def test_rules_combine_only_with_rules():
    with pytest.raises(TypeError, match="MaskMod"):
        causal_mod() & torch.ones(3, 3, dtype=torch.bool)
    with pytest.raises(TypeError, match="rule must be callable"):
        MaskMod("causal")
    with pytest.raises(ValueError, match="window"):
        sliding_window_mod(0)
