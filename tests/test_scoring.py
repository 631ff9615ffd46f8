"""scoring: the four scoring functions and attention modules against loops, closed forms and SDPA."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from torch.func import functional_call

from course_lib import padding_mask, recording_attention
from course_lib.attention.scoring import (
    AdditiveAttention,
    BilinearAttention,
    CosineAttention,
    DotProductAttention,
    additive_scores,
    bilinear_scores,
    cosine_scores,
    dot_product_scores,
)

Q = torch.tensor([[[2.0, -1.0, 0.0], [-2.0, 1.0, 4.0]]], dtype=torch.float64)
K = torch.tensor([[[2.0, 1.0, -1.0], [0.0, 3.0, -1.0], [1.0, 1.0, 3.0]]], dtype=torch.float64)
V = torch.tensor([[[2.0, 3.0, 1.0], [2.0, -1.0, 0.0], [0.0, 5.0, 1.0]]], dtype=torch.float64)


def _randn(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _dot(a, b):
    return sum(float(x) * float(y) for x, y in zip(a, b, strict=True))


def _pairwise(queries, keys, score):
    """Scores (batch, n_q, n_k) from a per-pair function, one pair at a time."""
    B, n_q, n_k = queries.shape[0], queries.shape[1], keys.shape[1]
    out = torch.zeros(B, n_q, n_k, dtype=torch.float64)
    for b in range(B):
        for i in range(n_q):
            for j in range(n_k):
                out[b, i, j] = score(queries[b, i], keys[b, j])
    return out


def _loop_attention(scores, values, n_valid):
    """Softmax over the first ``n_valid[b]`` keys by hand, then the weighted sum of the values."""
    B, n_q, n_k = scores.shape
    out = torch.zeros(B, n_q, values.shape[-1], dtype=torch.float64)
    for b in range(B):
        for i in range(n_q):
            exps = [math.exp(float(scores[b, i, j])) for j in range(int(n_valid[b]))]
            for j, e in enumerate(exps):
                out[b, i] += e / sum(exps) * values[b, j]
    return out


# --- the worked example of the notes -------------------------------------------------------------


def test_worked_example_scores_are_the_closed_form():
    assert dot_product_scores(Q, K, scaled=False).tolist() == [[[3.0, -3.0, 1.0], [-7.0, -1.0, 11.0]]]
    torch.testing.assert_close(dot_product_scores(Q, K), dot_product_scores(Q, K, scaled=False) / math.sqrt(3))


def test_worked_example_weights_and_output():
    attention = DotProductAttention(scaled=False)
    with recording_attention(attention):
        out = attention(Q, K, V)
    e = [math.exp(3), math.exp(-3), math.exp(1)]
    row0 = [x / sum(e) for x in e]
    torch.testing.assert_close(attention.attention_weights[0, 0], torch.tensor(row0, dtype=torch.float64))
    torch.testing.assert_close(attention.attention_weights, torch.tensor(
        [[[0.879, 0.002, 0.119], [0.0, 0.0, 1.0]]], dtype=torch.float64), atol=1e-3, rtol=0)
    expected0 = [sum(row0[j] * float(V[0, j, c]) for j in range(3)) for c in range(3)]
    torch.testing.assert_close(out[0, 0], torch.tensor(expected0, dtype=torch.float64))
    torch.testing.assert_close(out[0, 1], V[0, 2], atol=1e-4, rtol=0)


# --- scoring functions against per-pair loops ------------------------------------------------


def test_dot_product_scores_match_pairwise_loop():
    q, k = _randn(2, 3, 4, seed=1), _randn(2, 5, 4, seed=2)
    torch.testing.assert_close(dot_product_scores(q, k, scaled=False), _pairwise(q, k, _dot))
    torch.testing.assert_close(dot_product_scores(q, k), _pairwise(q, k, lambda a, b: _dot(a, b) / 2))


def test_additive_scores_match_pairwise_loop():
    q, k = _randn(2, 3, 4, seed=1), _randn(2, 5, 6, seed=2)
    W_q, W_k, w_v = _randn(7, 4, seed=3), _randn(7, 6, seed=4), _randn(7, seed=5)

    def score(a, b):
        return sum(float(w_v[h]) * math.tanh(_dot(W_q[h], a) + _dot(W_k[h], b)) for h in range(7))

    torch.testing.assert_close(additive_scores(q, k, W_q, W_k, w_v), _pairwise(q, k, score))


def test_bilinear_scores_match_pairwise_loop():
    q, k, W = _randn(2, 3, 4, seed=1), _randn(2, 5, 6, seed=2), _randn(4, 6, seed=3)

    def score(a, b):
        return sum(float(a[r]) * float(W[r, c]) * float(b[c]) for r in range(4) for c in range(6))

    torch.testing.assert_close(bilinear_scores(q, k, W), _pairwise(q, k, score))


def test_bilinear_with_identity_is_the_dot_product():
    q, k = _randn(2, 3, 4, seed=1), _randn(2, 5, 4, seed=2)
    torch.testing.assert_close(bilinear_scores(q, k, torch.eye(4, dtype=torch.float64)), _pairwise(q, k, _dot))


@pytest.mark.parametrize("temperature", [1.0, 0.25])
def test_cosine_scores_match_pairwise_loop(temperature):
    q, k = _randn(2, 3, 4, seed=1), _randn(2, 5, 4, seed=2)

    def score(a, b):
        return _dot(a, b) / math.sqrt(_dot(a, a) * _dot(b, b)) / temperature

    torch.testing.assert_close(cosine_scores(q, k, temperature), _pairwise(q, k, score))


def test_cosine_scores_of_a_zero_vector_are_zero_and_all_are_bounded():
    q = torch.cat([torch.zeros(1, 1, 3, dtype=torch.float64), _randn(1, 2, 3, seed=1) * 1e3], dim=1)
    s = cosine_scores(q, _randn(1, 4, 3, seed=2), temperature=0.5)
    assert torch.all(s[0, 0] == 0)
    assert torch.all(s.abs() <= 2 + 1e-12)


# --- modules against torch.nn.functional.scaled_dot_product_attention --------------------------


@pytest.mark.parametrize("per_query", [False, True])
def test_dot_product_attention_with_valid_lens_matches_sdpa_with_bool_mask(per_query):
    q, k, v = _randn(3, 4, 5, seed=1), _randn(3, 6, 5, seed=2), _randn(3, 6, 2, seed=3)
    g = torch.Generator().manual_seed(4)
    lens = torch.randint(1, 7, (3, 4) if per_query else (3,), generator=g)
    mask = torch.arange(6) < (lens[:, None, None] if not per_query else lens[..., None])  # (3, 4 or 1, 6)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(DotProductAttention()(q, k, v, padding_mask(lens, 6)), expected)
    torch.testing.assert_close(DotProductAttention()(q, k, v, mask=mask), expected)


def test_unscaled_dot_product_attention_matches_sdpa_with_scale_one():
    q, k, v = _randn(2, 3, 4, seed=1), _randn(2, 5, 4, seed=2), _randn(2, 5, 3, seed=3)
    torch.testing.assert_close(DotProductAttention(scaled=False)(q, k, v),
                               F.scaled_dot_product_attention(q, k, v, scale=1.0))


def test_fully_masked_query_gets_a_zero_output_not_nan():
    q, k, v = _randn(2, 3, 4, seed=1), _randn(2, 5, 4, seed=2), _randn(2, 5, 3, seed=3)
    out = DotProductAttention()(q, k, v, padding_mask(torch.tensor([[0, 2, 5], [5, 0, 1]]), 5))
    assert torch.all(out[0, 0] == 0) and torch.all(out[1, 1] == 0)
    assert torch.isfinite(out).all()


# --- modules against loops -----------------------------------------------------------------------


def test_additive_attention_module_matches_loop():
    torch.manual_seed(0)
    attention = AdditiveAttention(8, query_size=4, key_size=6).double()
    q, k, v = _randn(2, 3, 4, seed=1), _randn(2, 5, 6, seed=2), _randn(2, 5, 3, seed=3)
    W_q, W_k, w_v = attention.W_q.weight.detach(), attention.W_k.weight.detach(), attention.w_v.weight[0].detach()

    def score(a, b):
        return sum(float(w_v[h]) * math.tanh(_dot(W_q[h], a) + _dot(W_k[h], b)) for h in range(8))

    lens = torch.tensor([2, 5])
    expected = _loop_attention(_pairwise(q, k, score), v, lens)
    torch.testing.assert_close(attention(q, k, v, padding_mask(lens, 5)), expected)


@pytest.mark.parametrize("scaled", [False, True])
def test_bilinear_attention_module_matches_loop(scaled):
    torch.manual_seed(0)
    attention = BilinearAttention(4, 6, scaled=scaled).double()
    q, k, v = _randn(2, 3, 4, seed=1), _randn(2, 5, 6, seed=2), _randn(2, 5, 3, seed=3)
    W = attention.W.detach()

    def score(a, b):
        s = sum(float(a[r]) * float(W[r, c]) * float(b[c]) for r in range(4) for c in range(6))
        return s / math.sqrt(6) if scaled else s

    lens = torch.tensor([4, 1])
    torch.testing.assert_close(attention(q, k, v, padding_mask(lens, 5)),
                               _loop_attention(_pairwise(q, k, score), v, lens))


def test_cosine_attention_module_matches_loop():
    q, k, v = _randn(2, 3, 4, seed=1), _randn(2, 5, 4, seed=2), _randn(2, 5, 3, seed=3)

    def score(a, b):
        return _dot(a, b) / math.sqrt(_dot(a, a) * _dot(b, b)) / 0.1

    lens = torch.tensor([5, 3])
    torch.testing.assert_close(CosineAttention(0.1)(q, k, v, padding_mask(lens, 5)),
                               _loop_attention(_pairwise(q, k, score), v, lens))


# --- properties shared by all modules ----------------------------------------------------------


def _make(kind: str, d_q: int, d_k: int) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "dot":
        return DotProductAttention()
    if kind == "additive":
        return AdditiveAttention(5, query_size=d_q, key_size=d_k).double()
    if kind == "bilinear":
        return BilinearAttention(d_q, d_k).double()
    return CosineAttention(0.5)


kinds = st.sampled_from(["dot", "additive", "bilinear", "cosine"])
sizes = st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(1, 5), st.integers(1, 4))
seeds = st.integers(0, 2**31 - 1)


def _inputs(kind, size, seed):
    B, n_q, n_k, d = size
    d_k = d if kind in ("dot", "cosine") else d + 1
    return _randn(B, n_q, d, seed=seed), _randn(B, n_k, d_k, seed=seed + 1), _randn(B, n_k, 3, seed=seed + 2)


@given(kind=kinds, size=sizes, seed=seeds)
def test_masked_keys_and_values_do_not_change_the_output(kind, size, seed):
    q, k, v = _inputs(kind, size, seed)
    B, n_k = size[0], size[2]
    lens = torch.randint(0, n_k + 1, (B,), generator=torch.Generator().manual_seed(seed))
    padded = torch.arange(n_k)[None, :, None] >= lens[:, None, None]  # (B, n_k, 1)
    k2 = torch.where(padded, _randn(*k.shape, seed=seed + 3) * 1e3, k)
    v2 = torch.where(padded, _randn(*v.shape, seed=seed + 4) * 1e3, v)
    attention = _make(kind, q.shape[-1], k.shape[-1])
    with recording_attention(attention):
        out = attention(q, k, v, padding_mask(lens, n_k))
    weights = attention.attention_weights
    torch.testing.assert_close(attention(q, k2, v2, padding_mask(lens, n_k)), out)
    assert torch.all(weights.masked_select(padded.transpose(1, 2)) == 0)


@given(kind=kinds, size=sizes, seed=seeds)
def test_output_is_a_convex_combination_of_the_values(kind, size, seed):
    q, k, v = _inputs(kind, size, seed)
    attention = _make(kind, q.shape[-1], k.shape[-1])
    with recording_attention(attention):
        out = attention(q, k, v)
    w = attention.attention_weights
    assert w.shape == (size[0], size[1], size[2])
    assert torch.all(w >= 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(size[:2], dtype=w.dtype))
    lo, hi = v.min(dim=1, keepdim=True).values, v.max(dim=1, keepdim=True).values  # per coordinate
    assert torch.all(out >= lo - 1e-12) and torch.all(out <= hi + 1e-12)


@given(size=sizes, seed=seeds, scaled=st.booleans())
def test_dot_product_weights_ignore_a_shift_shared_by_all_keys(size, seed, scaled):
    # Adding u to every key adds the same q.u to every score of query q's row.
    q, k, v = _inputs("dot", size, seed)
    u = _randn(size[0], 1, size[3], seed=seed + 5) * 3
    attention = DotProductAttention(scaled=scaled)
    with recording_attention(attention):
        attention(q, k, v)
        before = attention.attention_weights
        attention(q, k + u, v)
    torch.testing.assert_close(attention.attention_weights, before)


@given(kind=kinds, size=sizes, seed=seeds)
def test_one_hot_mask_is_a_database_lookup(kind, size, seed):
    q, k, v = _inputs(kind, size, seed)
    B, n_q, n_k = size[:3]
    pick = torch.randint(0, n_k, (B, n_q), generator=torch.Generator().manual_seed(seed))
    mask = torch.arange(n_k) == pick[..., None]
    out = _make(kind, q.shape[-1], k.shape[-1])(q, k, v, mask=mask)
    expected = torch.stack([torch.stack([v[b, pick[b, i]] for i in range(n_q)]) for b in range(B)])
    torch.testing.assert_close(out, expected)


def test_dominant_score_looks_up_the_matching_value():
    keys = torch.eye(4, dtype=torch.float64)[None]
    values = _randn(1, 4, 3, seed=1)
    queries = 100 * keys[:, [2, 0]]  # two queries, each aligned with one key
    out = DotProductAttention(scaled=False)(queries, keys, values)
    torch.testing.assert_close(out[0], values[0, [2, 0]])


@pytest.mark.parametrize("kind", ["dot", "cosine", "additive"])
def test_equal_scores_give_average_pooling(kind):
    q = torch.zeros(2, 3, 4, dtype=torch.float64)  # zero queries: every key scores the same
    k, v = _randn(2, 5, 4, seed=1), _randn(2, 5, 3, seed=2)
    attention = _make(kind, 4, 4)
    if kind == "additive":
        with torch.no_grad():
            attention.W_k.weight.zero_()
    lens = torch.tensor([5, 2])
    out = attention(q, k, v, padding_mask(lens, 5))
    torch.testing.assert_close(out[0], v[0].mean(0).expand(3, 3))
    torch.testing.assert_close(out[1], v[1, :2].mean(0).expand(3, 3))


# --- gradcheck ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["dot", "additive", "bilinear", "cosine"])
def test_gradcheck_in_float64(kind):
    q, k, v = (t.requires_grad_() for t in _inputs(kind, (2, 3, 4, 3), 7))
    attention = _make(kind, q.shape[-1], k.shape[-1])
    lens = padding_mask(torch.tensor([[4, 0, 2], [1, 3, 4]]), 4)
    assert torch.autograd.gradcheck(lambda a, b, c: attention(a, b, c, lens), (q, k, v))
    names = [name for name, _ in attention.named_parameters()]
    if names:  # the learned weights get correct gradients too

        def with_params(*params):
            return functional_call(attention, dict(zip(names, params, strict=True)), (q.detach(), k.detach(),
                                                                                       v.detach(), lens))

        params = tuple(p.detach().clone().requires_grad_() for p in attention.parameters())
        assert torch.autograd.gradcheck(with_params, params)


# --- modules: lazy sizes, dropout, attention_weights ----------------------------------------------


def test_additive_attention_with_different_query_and_key_sizes_lazy_and_explicit():
    q, k, v = _randn(2, 3, 4, seed=1, dtype=torch.float32), _randn(2, 5, 7, seed=2, dtype=torch.float32), \
        _randn(2, 5, 3, seed=3, dtype=torch.float32)
    torch.manual_seed(0)
    lazy = AdditiveAttention(6)
    assert lazy(q, k, v).shape == (2, 3, 3)
    assert lazy.W_q.weight.shape == (6, 4) and lazy.W_k.weight.shape == (6, 7)
    torch.manual_seed(0)
    explicit = AdditiveAttention(6, query_size=4, key_size=7)
    explicit.record_weights = True
    assert explicit(q, k, v, padding_mask(torch.tensor([2, 5]), 5)).shape == (2, 3, 3)
    assert explicit.attention_weights.shape == (2, 3, 5)
    with pytest.raises(ValueError, match=r"queries has size 5 .*built for 4"):
        explicit(_randn(2, 3, 5, dtype=torch.float32), k, v)
    with pytest.raises(ValueError, match=r"keys has size 4 .*built for 7"):
        lazy(q, _randn(2, 5, 4, dtype=torch.float32), v)


def test_dropout_acts_only_in_train_mode():
    q, k = _randn(2, 3, 4, seed=1), _randn(2, 5, 4, seed=2)
    v = torch.eye(5, dtype=torch.float64).expand(2, 5, 5)  # identity values: output = weights after dropout
    attention = DotProductAttention(dropout=0.5)
    reference = DotProductAttention(dropout=0.0)(q, k, v)
    attention.eval()
    torch.testing.assert_close(attention(q, k, v), reference)
    torch.testing.assert_close(attention(q, k, v), reference)
    attention.train()
    torch.manual_seed(0)
    with recording_attention(attention):
        out = attention(q, k, v)
    kept = out != 0
    assert kept.any() and (~kept).any()
    torch.testing.assert_close(out[kept], 2 * reference[kept])  # inverted dropout rescales by 1/(1-p)
    torch.testing.assert_close(attention.attention_weights, reference)  # stored before dropout


@pytest.mark.parametrize("kind", ["dot", "additive", "bilinear", "cosine"])
def test_attention_weights_have_shape_batch_queries_keys(kind):
    q, k, v = _inputs(kind, (2, 3, 6, 4), 0)
    attention = _make(kind, q.shape[-1], k.shape[-1])
    assert attention.attention_weights is None
    assert attention(q, k, v).shape == (2, 3, 3)
    assert attention.attention_weights is None  # kept only while recording
    with recording_attention(attention) as modules:
        assert modules == [attention] and attention(q, k, v).shape == (2, 3, 3)
    assert attention.attention_weights.shape == (2, 3, 6)
    assert not attention.attention_weights.requires_grad
    assert not attention.record_weights


# --- bad input --------------------------------------------------------------------------------------


def test_queries_and_keys_of_different_size_are_rejected_for_dot_product():
    with pytest.raises(ValueError, match=r"queries has shape \(2, 3, 4\) and keys has shape \(2, 5, 6\)"):
        DotProductAttention()(_randn(2, 3, 4), _randn(2, 5, 6), _randn(2, 5, 3))
    with pytest.raises(ValueError, match=r"queries has shape \(2, 3, 4\) and keys has shape \(2, 5, 6\)"):
        cosine_scores(_randn(2, 3, 4), _randn(2, 5, 6))


@pytest.mark.parametrize("kind", ["dot", "additive", "bilinear", "cosine"])
def test_keys_and_values_with_different_n_keys_are_rejected(kind):
    q, k, _ = _inputs(kind, (2, 3, 5, 4), 0)
    with pytest.raises(ValueError, match=r"keys has shape \(2, 5, \d\) and values has shape \(2, 4, 3\)"):
        _make(kind, q.shape[-1], k.shape[-1])(q, k, _randn(2, 4, 3))


@pytest.mark.parametrize("kind", ["dot", "additive", "bilinear", "cosine"])
def test_batch_mismatch_is_rejected(kind):
    q, k, v = _inputs(kind, (2, 3, 5, 4), 0)
    attention = _make(kind, q.shape[-1], k.shape[-1])
    with pytest.raises(ValueError, match=r"queries has shape \(3, 3, 4\) and keys has shape \(2, 5, \d\)"):
        attention(_randn(3, 3, 4), k, v)
    with pytest.raises(ValueError, match=r"keys has shape \(2, 5, \d\) and values has shape \(1, 5, 3\)"):
        attention(q, k, v[:1])


def test_wrong_rank_and_dtype_are_rejected():
    attention = DotProductAttention()
    with pytest.raises(ValueError, match=r"queries must be 3-D \(batch, n_queries, d_q\), got shape \(3, 4\)"):
        attention(_randn(3, 4), _randn(2, 5, 4), _randn(2, 5, 3))
    with pytest.raises(TypeError, match="keys must be a floating-point tensor"):
        attention(_randn(2, 3, 4), torch.ones(2, 5, 4, dtype=torch.long), _randn(2, 5, 3))
    with pytest.raises(TypeError, match="queries and values must share a dtype"):
        attention(_randn(2, 3, 4), _randn(2, 5, 4), _randn(2, 5, 3, dtype=torch.float32))
    with pytest.raises(TypeError, match="values must be a torch.Tensor"):
        attention(_randn(2, 3, 4), _randn(2, 5, 4), [[1.0]])


def test_mask_errors_reach_the_caller_from_a_module():
    q, k, v = _randn(2, 3, 4), _randn(2, 5, 4), _randn(2, 5, 3)
    with pytest.raises(TypeError, match="mask must be a bool tensor"):  # lengths are not a mask
        DotProductAttention()(q, k, v, torch.tensor([5, 1]))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 4\) does not broadcast"):
        DotProductAttention()(q, k, v, padding_mask(torch.tensor([4, 1]), 4))


def test_bad_weight_matrices_are_rejected():
    q, k = _randn(2, 3, 4), _randn(2, 5, 6)
    with pytest.raises(ValueError, match=r"W must have shape \(d_q, d_k\) = \(4, 6\).*got \(6, 4\)"):
        bilinear_scores(q, k, _randn(6, 4))
    with pytest.raises(ValueError, match=r"W_q: \(h_a, d_q\).*got w_v \(7,\), W_q \(7, 5\), W_k \(7, 6\)"):
        additive_scores(q, k, _randn(7, 5), _randn(7, 6), _randn(7))
    with pytest.raises(ValueError, match=r"got w_v \(7, 1\)"):
        additive_scores(q, k, _randn(7, 4), _randn(7, 6), _randn(7, 1))


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("inf")])
def test_non_positive_temperature_is_rejected(temperature):
    with pytest.raises(ValueError, match="temperature must be a finite positive number"):
        CosineAttention(temperature)
    with pytest.raises(ValueError, match="temperature"):
        cosine_scores(_randn(1, 2, 3), _randn(1, 2, 3), temperature)


@pytest.mark.parametrize("build", [
    lambda: DotProductAttention(dropout=1.0),
    lambda: DotProductAttention(dropout=-0.1),
    lambda: AdditiveAttention(0),
    lambda: AdditiveAttention(4, query_size=0),
    lambda: AdditiveAttention(4, key_size=-3),
    lambda: BilinearAttention(0),
    lambda: BilinearAttention(3, key_size=0),
])
def test_bad_constructor_arguments_are_rejected(build):
    with pytest.raises(ValueError, match="dropout|hidden_size|query_size|key_size"):
        build()


def test_non_int_sizes_are_a_type_error():
    with pytest.raises(TypeError, match="hidden_size must be an int"):
        AdditiveAttention(4.0)
    with pytest.raises(TypeError, match="query_size must be an int"):
        BilinearAttention(3.5)


# --- properties on drawn tensors (hypothesis.extra.numpy): extreme and tied values, float32 too ---


@st.composite
def _qk(draw, same_dim=True, bound=1e3):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    b, n_q, n_k, d = (draw(st.integers(1, 4)) for _ in range(4))
    d_k = d if same_dim else draw(st.integers(1, 4))
    values = st.sampled_from([0.0, 1.0, -1.0, bound, -bound]) | st.floats(-bound, bound, width=32)
    q = draw(hnp.arrays(dtype, (b, n_q, d), elements=values))
    k = draw(hnp.arrays(dtype, (b, n_k, d_k), elements=values))
    return torch.from_numpy(q), torch.from_numpy(k)


def _tol(t):
    return 1e-5 if t.dtype == torch.float32 else 1e-12


@given(_qk())
def test_dot_product_scores_equal_numpy_on_drawn_tensors(qk):
    q, k = qk
    expected = np.einsum("bqd,bkd->bqk", q.double().numpy(), k.double().numpy()) / math.sqrt(q.shape[-1])
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(dot_product_scores(q, k).double().numpy(), expected, rtol=_tol(q),
                               atol=_tol(q) * scale)


@given(_qk(bound=float(np.float32(1e30))), st.floats(0.05, 10.0))
def test_cosine_scores_stay_within_one_over_tau_even_for_huge_or_zero_vectors(qk, tau):
    q, k = qk
    s = cosine_scores(q, k, temperature=tau)
    assert torch.isfinite(s).all()
    assert torch.all(s.abs() <= (1 + 1e-5) / tau)
    zero = (q.abs().sum(-1) == 0)[..., None] | (k.abs().sum(-1) == 0)[:, None, :]
    assert torch.all(s[zero] == 0)


@given(_qk(same_dim=False, bound=10.0), st.integers(1, 4))
def test_additive_scores_equal_numpy_on_drawn_tensors(qk, h):
    q, k = qk
    g = torch.Generator().manual_seed(0)
    W_q = torch.randn(h, q.shape[-1], generator=g, dtype=q.dtype)
    W_k = torch.randn(h, k.shape[-1], generator=g, dtype=q.dtype)
    w_v = torch.randn(h, generator=g, dtype=q.dtype)
    Q, K = q.double().numpy() @ W_q.double().numpy().T, k.double().numpy() @ W_k.double().numpy().T
    expected = np.tanh(Q[:, :, None, :] + K[:, None, :, :]) @ w_v.double().numpy()
    np.testing.assert_allclose(additive_scores(q, k, W_q, W_k, w_v).double().numpy(), expected,
                               rtol=10 * _tol(q), atol=10 * _tol(q) * h)
