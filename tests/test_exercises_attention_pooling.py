"""The chapter 1 checkers accept the notebook's solutions and reject typical mistakes
with a specific hint (their stubs: test_exercises_core.py)."""

from __future__ import annotations

import pytest
import torch
from exercise_helpers import fails_with, passes

import course_lib as cl

NOTEBOOK = "01_queries_keys_values.ipynb"


# --- attention_pooling.attention_weights --------------------------------------------------------


def _stable(queries, keys):
    scores = queries @ keys.transpose(-2, -1)
    e = torch.exp(scores - scores.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def naive_exp(queries, keys):
    e = torch.exp(queries @ keys.transpose(-2, -1))
    return e / e.sum(-1, keepdim=True)


def global_max(queries, keys):
    scores = queries @ keys.transpose(-2, -1)
    e = torch.exp(scores - scores.max())  # one max for the whole matrix: a row far below it underflows
    return e / e.sum(-1, keepdim=True)


def uses_torch_softmax(queries, keys):
    return torch.softmax(queries @ keys.transpose(-2, -1), dim=-1)


def uses_library(queries, keys):
    return cl.softmax_attention(queries, keys, keys)[1]


def transposed(queries, keys):
    return _stable(keys, queries)


def normalised_over_queries(queries, keys):
    scores = queries @ keys.transpose(-2, -1)
    e = torch.exp(scores - scores.amax(-2, keepdim=True))
    return e / e.sum(-2, keepdim=True)


def not_normalised(queries, keys):
    scores = queries @ keys.transpose(-2, -1)
    return torch.exp(scores - scores.amax(-1, keepdim=True))


def dot_T_in_batch(queries, keys):
    scores = queries @ keys.T  # reverses every axis of a 3-D tensor
    e = torch.exp(scores - scores.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def always_float32(queries, keys):
    return _stable(queries.float(), keys.float())


def zeros_queries_in_place(queries, keys):
    out = _stable(queries, keys)
    queries.zero_()
    return out


def test_attention_weights_notebook_solution_passes(solutions):
    ns = solutions("ch01-ex-attention-weights")
    assert passes("attention_pooling.attention_weights", ns["attention_weights"]).n_checks == 6


def test_attention_weights_logsumexp_answer_passes():
    def via_logsumexp(queries, keys):
        scores = queries @ keys.transpose(-2, -1)
        return torch.exp(scores - scores.logsumexp(-1, keepdim=True))

    passes("attention_pooling.attention_weights", via_logsumexp)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (naive_exp, "Subtract the row max"),
        (global_max, "each row's own max"),
        (uses_torch_softmax, "torch.exp and .sum only"),
        (uses_library, "torch.exp and .sum only"),
        (transposed, "not keys @ queries^T"),
        (normalised_over_queries, "sum to 1 down each column"),
        (not_normalised, "must sum to 1 over the keys"),
        pytest.param(dot_T_in_batch, "keys.transpose(-2, -1)",
                     marks=pytest.mark.filterwarnings("ignore:The use of `x.T`:UserWarning")),
        (always_float32, "float64 inputs"),
        (zeros_queries_in_place, "in place"),
    ],
)
def test_attention_weights_wrong_answers_fail_with_hint(answer, hint):
    fails_with("attention_pooling.attention_weights", answer, hint, library=True)


def test_attention_weights_naive_fails_only_on_large_scores():
    # The naive version is right for moderate scores: the failure must be the overflow case, with NaN named.
    fails_with("attention_pooling.attention_weights", naive_exp, "large scores", "NaN")


def test_attention_weights_checker_agrees_with_torch_softmax_reference():
    # Independent of the checker's loops: torch.softmax on the worked example gives the notes' weights.
    Q = torch.tensor([[2.0, -1.0, 0.0], [-2.0, 1.0, 4.0]])
    K = torch.tensor([[2.0, 1.0, -1.0], [0.0, 3.0, -1.0], [1.0, 1.0, 3.0]])
    expected = torch.tensor([[0.879, 0.002, 0.119], [0.0, 0.0, 1.0]])
    torch.testing.assert_close(torch.softmax(Q @ K.T, -1), expected, atol=5e-4, rtol=0)
    torch.testing.assert_close(_stable(Q, K), expected, atol=5e-4, rtol=0)
    passes("attention_pooling.attention_weights", _stable)


# --- attention_pooling.database_lookup ----------------------------------------------------------


def _exact(query, keys, values):
    weights = (keys == query).all(-1).to(values.dtype)
    if weights.sum() == 0:
        raise KeyError("missing")
    return weights @ values, weights


def nearest_key(query, keys, values):
    i = int(((keys - query) ** 2).sum(-1).argmin())
    weights = torch.zeros(keys.shape[0], dtype=values.dtype)
    weights[i] = 1.0
    return weights @ values, weights


def any_coordinate(query, keys, values):
    weights = (keys == query).any(-1).to(values.dtype)
    if weights.sum() == 0:
        raise KeyError("missing")
    return weights @ values, weights


def most_matching_coordinates(query, keys, values):
    counts = (keys == query).sum(-1)
    if counts.max() == 0:
        raise KeyError("missing")
    weights = torch.zeros(keys.shape[0], dtype=values.dtype)
    weights[int(counts.argmax())] = 1.0
    return weights @ values, weights


def softmax_weights(query, keys, values):
    weights = torch.softmax(10.0 * (keys @ query), dim=0)
    return weights @ values, weights


def zero_when_missing(query, keys, values):
    weights = (keys == query).all(-1).to(values.dtype)
    return weights @ values, weights


def value_error_when_missing(query, keys, values):
    weights = (keys == query).all(-1).to(values.dtype)
    if weights.sum() == 0:
        raise ValueError("not found")
    return weights @ values, weights


def returns_key(query, keys, values):
    value, weights = _exact(query, keys, values)
    return weights @ keys, weights


def returns_value_only(query, keys, values):
    return _exact(query, keys, values)[0]


def test_database_lookup_notebook_solution_passes(solutions):
    ns = solutions("ch01-ex-database-lookup")
    assert passes("attention_pooling.database_lookup", ns["database_lookup"]).n_checks == 6


def test_database_lookup_reference_answer_passes():
    passes("attention_pooling.database_lookup", _exact)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (nearest_key, "does not return the nearest key"),
        (zero_when_missing, "All-zero weights pool to the zero vector"),
        (any_coordinate, "not .any"),
        (most_matching_coordinates, "ALL its coordinates"),
        (softmax_weights, "exactly one-hot"),
        (zero_when_missing, "raise KeyError"),
        (value_error_when_missing, "but your function raised ValueError"),
        (returns_key, "return the key instead of the value"),
        (returns_value_only, "return the pair (value, weights)"),
    ],
)
def test_database_lookup_wrong_answers_fail_with_hint(answer, hint):
    fails_with("attention_pooling.database_lookup", answer, hint)

