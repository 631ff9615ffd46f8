"""attention: pooling over a key-value database and parameter-free self-attention (chapter 1)."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from course_lib.pooling import attention_pool, parameter_free_self_attention, softmax_attention

Q = torch.tensor([[2.0, -1.0, 0.0], [-2.0, 1.0, 4.0]], dtype=torch.float64)
K = torch.tensor([[2.0, 1.0, -1.0], [0.0, 3.0, -1.0], [1.0, 1.0, 3.0]], dtype=torch.float64)
V = torch.tensor([[2.0, 3.0, 1.0], [2.0, -1.0, 0.0], [0.0, 5.0, 1.0]], dtype=torch.float64)


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _loop_softmax_rows(scores):
    rows = []
    for row in scores:
        top = max(row)
        exps = [math.exp(s - top) for s in row]
        rows.append([e / sum(exps) for e in exps])
    return rows


def _loop_pool(weights, values):
    return [[sum(w * v[c] for w, v in zip(row, values, strict=True)) for c in range(len(values[0]))]
            for row in weights]


# --- the worked example -------------------------------------------------------------------------------


def test_worked_example_weights_and_output():
    out, weights = softmax_attention(Q, K, V)
    torch.testing.assert_close(weights, torch.tensor([[0.879, 0.002, 0.119], [0.0, 0.0, 1.0]], dtype=torch.float64),
                               atol=1e-3, rtol=0)
    expected_w = _loop_softmax_rows([[3.0, -3.0, 1.0], [-7.0, -1.0, 11.0]])
    torch.testing.assert_close(weights, torch.tensor(expected_w, dtype=torch.float64))
    torch.testing.assert_close(out, torch.tensor(_loop_pool(expected_w, V.tolist()), dtype=torch.float64))


def test_softmax_attention_matches_sdpa_with_unit_scale():
    q, k, v = _randn(2, 3, 4, seed=1), _randn(2, 5, 4, seed=2), _randn(2, 5, 6, seed=3)
    out, _ = softmax_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=1.0))


def test_softmax_attention_broadcasts_leading_axes():
    q, k, v = _randn(2, 1, 3, 4, seed=1), _randn(5, 4, seed=2), _randn(5, 2, seed=3)
    out, weights = softmax_attention(q, k, v)
    assert out.shape == (2, 1, 3, 2) and weights.shape == (2, 1, 3, 5)
    for b in range(2):
        ref_w = _loop_softmax_rows((q[b, 0] @ k.T).tolist())
        torch.testing.assert_close(out[b, 0], torch.tensor(_loop_pool(ref_w, v.tolist()), dtype=torch.float64))


# --- attention_pool -------------------------------------------------------------------------------------


def test_attention_pool_matches_loop():
    w = torch.softmax(_randn(2, 3, 4, seed=1), -1)
    v = _randn(2, 4, 5, seed=2)
    out = attention_pool(w, v)
    for b in range(2):
        torch.testing.assert_close(out[b], torch.tensor(_loop_pool(w[b].tolist(), v[b].tolist()), dtype=torch.float64))


@given(n_keys=st.integers(1, 6), seed=st.integers(0, 2**31 - 1))
def test_one_hot_weights_look_up_the_database(n_keys, seed):
    values = _randn(n_keys, 3, seed=seed)
    order = torch.randperm(n_keys, generator=torch.Generator().manual_seed(seed))
    weights = torch.eye(n_keys, dtype=torch.float64)[order]
    assert torch.equal(attention_pool(weights, values), values[order])


@given(n_q=st.integers(1, 4), n_keys=st.integers(1, 6), seed=st.integers(0, 2**31 - 1))
def test_equal_scores_give_average_pooling(n_q, n_keys, seed):
    keys, values = _randn(n_keys, 3, seed=seed), _randn(n_keys, 2, seed=seed + 1)
    out, weights = softmax_attention(torch.zeros(n_q, 3, dtype=torch.float64), keys, values)
    torch.testing.assert_close(weights, torch.full((n_q, n_keys), 1 / n_keys, dtype=torch.float64))
    torch.testing.assert_close(out, values.mean(0).expand(n_q, 2))


@given(n_q=st.integers(1, 4), n_keys=st.integers(1, 6), seed=st.integers(0, 2**31 - 1),
       scale=st.sampled_from([0.1, 1.0, 30.0]))
def test_output_is_a_convex_combination_of_the_values(n_q, n_keys, seed, scale):
    q, k, v = _randn(n_q, 4, seed=seed) * scale, _randn(n_keys, 4, seed=seed + 1), _randn(n_keys, 3, seed=seed + 2)
    out, weights = softmax_attention(q, k, v)
    assert torch.all(weights >= 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(n_q, dtype=torch.float64))
    assert torch.all(out >= v.min(0).values - 1e-12) and torch.all(out <= v.max(0).values + 1e-12)


@given(seed=st.integers(0, 2**31 - 1))
def test_shifting_all_keys_by_one_vector_does_not_change_the_weights(seed):
    # Unscaled dot product: k_i + u adds q.u to every score in q's row, and softmax ignores that.
    q, k, v = _randn(3, 4, seed=seed), _randn(5, 4, seed=seed + 1), _randn(5, 2, seed=seed + 2)
    u = _randn(1, 4, seed=seed + 3)
    _, w = softmax_attention(q, k, v)
    _, w_shift = softmax_attention(q, k + u, v)
    torch.testing.assert_close(w_shift, w)


# --- parameter-free self-attention ----------------------------------------------------------------------


def test_parameter_free_self_attention_matches_loop():
    X = _randn(4, 3, seed=1)
    H, A = parameter_free_self_attention(X)
    rows = X.tolist()
    ref_A = _loop_softmax_rows([[sum(a * b for a, b in zip(r, s, strict=True)) for s in rows] for r in rows])
    torch.testing.assert_close(A, torch.tensor(ref_A, dtype=torch.float64))
    torch.testing.assert_close(H, torch.tensor(_loop_pool(ref_A, rows), dtype=torch.float64))


def test_parameter_free_self_attention_batched_and_tokens_attend_mostly_to_themselves():
    X = 3 * torch.eye(4, dtype=torch.float64).expand(2, 4, 4)  # orthogonal tokens of norm 3
    H, A = parameter_free_self_attention(X)
    assert H.shape == (2, 4, 4) and A.shape == (2, 4, 4)
    diagonal = math.exp(9) / (math.exp(9) + 3)
    torch.testing.assert_close(torch.diagonal(A, dim1=-2, dim2=-1), torch.full((2, 4), diagonal, dtype=torch.float64))
    assert torch.all(A.argmax(-1) == torch.arange(4))


def test_gradcheck_softmax_attention():
    q, k, v = (t.requires_grad_() for t in (_randn(2, 3, seed=1), _randn(4, 3, seed=2), _randn(4, 2, seed=3)))
    assert torch.autograd.gradcheck(lambda a, b, c: softmax_attention(a, b, c)[0], (q, k, v))


# --- bad input ------------------------------------------------------------------------------------------


def test_attention_pool_rejects_bad_input():
    with pytest.raises(ValueError, match=r"at least 2-D, got \(3,\) and \(3, 2\)"):
        attention_pool(_randn(3), _randn(3, 2))
    with pytest.raises(ValueError, match=r"weights has shape \(2, 3\) and values has shape \(4, 2\)"):
        attention_pool(_randn(2, 3), _randn(4, 2))
    with pytest.raises(ValueError, match=r"axes do not broadcast: weights \(2, 2, 3\), values \(3, 3, 1\)"):
        attention_pool(_randn(2, 2, 3), _randn(3, 3, 1))
    with pytest.raises(TypeError, match="values must be a floating-point tensor"):
        attention_pool(_randn(2, 3), torch.ones(3, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="must share a dtype"):
        attention_pool(_randn(2, 3), _randn(3, 2).float())


def test_softmax_attention_rejects_bad_input():
    with pytest.raises(ValueError, match=r"queries has shape \(2, 3\) and keys has shape \(4, 5\)"):
        softmax_attention(_randn(2, 3), _randn(4, 5), _randn(4, 2))
    with pytest.raises(ValueError, match=r"keys has shape \(4, 3\) and values has shape \(5, 2\)"):
        softmax_attention(_randn(2, 3), _randn(4, 3), _randn(5, 2))
    with pytest.raises(ValueError, match=r"queries must be at least 2-D, got shape \(3,\)"):
        softmax_attention(_randn(3), _randn(4, 3), _randn(4, 2))
    with pytest.raises(ValueError, match=r"do not broadcast: queries \(2, 2, 3\), keys \(3, 4, 3\)"):
        softmax_attention(_randn(2, 2, 3), _randn(3, 4, 3), _randn(4, 2))
    with pytest.raises(TypeError, match="keys must be a floating-point tensor"):
        softmax_attention(_randn(2, 3), torch.ones(4, 3, dtype=torch.long), _randn(4, 2))


def test_parameter_free_self_attention_rejects_bad_rank():
    with pytest.raises(ValueError, match=r"X must be 2-D or 3-D \(T, d\) or \(batch, T, d\), got shape \(3,\)"):
        parameter_free_self_attention(_randn(3))
    with pytest.raises(ValueError, match=r"got shape \(1, 2, 3, 4\)"):
        parameter_free_self_attention(_randn(1, 2, 3, 4))
    with pytest.raises(TypeError, match="X must be a floating-point tensor"):
        parameter_free_self_attention(torch.ones(3, 2, dtype=torch.long))
