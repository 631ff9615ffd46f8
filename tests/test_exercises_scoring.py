"""The chapter 3 checkers accept the notebook's solutions and reject typical mistakes
with a specific hint (their stubs: test_exercises_core.py)."""

from __future__ import annotations

import pytest
import torch
from exercise_helpers import fails_with, passes

import course_lib as cl

NOTEBOOK = "03_scoring_functions.ipynb"


# --- scoring.masked_softmax ---------------------------------------------------------------------


def _lens_mask(X: torch.Tensor, valid_lens: torch.Tensor) -> torch.Tensor:
    lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[:, :, None]
    return torch.arange(X.shape[-1]) < lens


def naive_inf(X, valid_lens):
    if valid_lens is None:
        return torch.softmax(X, -1)
    return torch.softmax(X.masked_fill(~_lens_mask(X, valid_lens), float("-inf")), -1)


def ignores_2d_lens(X, valid_lens):
    if valid_lens is None:
        return torch.softmax(X, -1)
    if valid_lens.dim() == 2:
        valid_lens = valid_lens[:, 0]  # one length per example: the per-query lengths are lost
    keep = _lens_mask(X, valid_lens)
    return torch.softmax(X.masked_fill(~keep, torch.finfo(X.dtype).min), -1) * keep


def d2l_big_negative(X, valid_lens):
    if valid_lens is None:
        return torch.softmax(X, -1)
    return torch.softmax(X.masked_fill(~_lens_mask(X, valid_lens), -1e6), -1)


def additive_inf_mask_then_nan_to_num(X, valid_lens):
    # Forward is right (NaN rows repaired), but the NaN reaches X.grad through the addition.
    if valid_lens is None:
        return torch.softmax(X, -1)
    additive_mask = torch.zeros(_lens_mask(X, valid_lens).shape, dtype=X.dtype).masked_fill(
        ~_lens_mask(X, valid_lens), float("-inf"))
    return torch.softmax(X + additive_mask, -1).nan_to_num(0.0)


def exp_without_max(X, valid_lens):
    if valid_lens is None:
        e = X.exp()
        return e / e.sum(-1, keepdim=True)
    keep = _lens_mask(X, valid_lens)
    e = X.exp() * keep
    total = e.sum(-1, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))


def fills_in_place(X, valid_lens):
    if valid_lens is None:
        return torch.softmax(X, -1)
    keep = _lens_mask(X, valid_lens)
    return torch.softmax(X.masked_fill_(~keep, torch.finfo(X.dtype).min), -1) * keep


def test_masked_softmax_notebook_solution_passes(solutions):
    ns = solutions("ch03-ex-masked-softmax")
    assert passes("scoring.masked_softmax", ns["my_masked_softmax"]).n_checks >= 8


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (naive_inf, "fully masked rows"),
        (ignores_2d_lens, "per-query lengths"),
        (d2l_big_negative, "must give all-zero weights"),
        (additive_inf_mask_then_nan_to_num, "gradient"),
        (exp_without_max, "large scores"),
        (fills_in_place, "in place"),
    ],
)
def test_masked_softmax_wrong_answers_fail_with_hint(answer, hint):
    fails_with("scoring.masked_softmax", answer, hint)


def test_masked_softmax_naive_inf_fails_on_nan_not_on_values():
    fails_with("scoring.masked_softmax", naive_inf, "NaN")


def test_masked_softmax_crash_on_2d_lens_mentions_per_query_lengths():
    def only_1d(X, valid_lens):
        if valid_lens is None:
            return torch.softmax(X, -1)
        keep = torch.arange(X.shape[-1]) < valid_lens.reshape(X.shape[0], 1, 1)  # fails for 2-D
        return torch.softmax(X.masked_fill(~keep, torch.finfo(X.dtype).min), -1) * keep

    fails_with("scoring.masked_softmax", only_1d, "per-query lengths", "RuntimeError")


# --- scoring.additive_score ---------------------------------------------------------------------


def additive_without_tanh(queries, keys, W_q, W_k, w_v):
    return ((queries @ W_q.T)[:, :, None, :] + (keys @ W_k.T)[:, None, :, :]) @ w_v


def additive_transposed(queries, keys, W_q, W_k, w_v):
    return torch.tanh((queries @ W_q.T)[:, None, :, :] + (keys @ W_k.T)[:, :, None, :]) @ w_v


def additive_swapped_weights(queries, keys, W_q, W_k, w_v):
    # Only runs when d_q == d_k; the first case (d_q=20, d_k=2) makes it crash, which must be reported.
    return torch.tanh((queries @ W_k.T)[:, :, None, :] + (keys @ W_q.T)[:, None, :, :]) @ w_v


def test_additive_notebook_solution_passes(solutions):
    ns = solutions("ch03-ex-additive")
    assert passes("scoring.additive_score", ns["additive_score"]).n_checks == 3


def test_additive_scores_of_library_pass_the_checker():
    # The library implementation is independent of the checker's loop reference: both must agree.
    def library(*args):
        return cl.additive_scores(*args)

    passes("scoring.additive_score", library, library=True)
    # Handing in the library's own function is not an answer.
    fails_with("scoring.additive_score", cl.additive_scores, "course_lib's own", library=True)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (additive_without_tanh, "the tanh is missing"),
        (additive_transposed, "axis 1 must index the queries"),
        (additive_swapped_weights, "your function raised"),
    ],
)
def test_additive_wrong_answers_fail_with_hint(answer, hint):
    fails_with("scoring.additive_score", answer, hint)


def test_additive_transposed_square_case_is_named():
    calls = {"n": 0}

    def transposed_only_when_square(queries, keys, W_q, W_k, w_v):
        calls["n"] += 1
        out = torch.tanh((queries @ W_q.T)[:, :, None, :] + (keys @ W_k.T)[:, None, :, :]) @ w_v
        return out.transpose(1, 2) if queries.shape[1] == keys.shape[1] else out

    fails_with("scoring.additive_score", transposed_only_when_square, "transposed")
    assert calls["n"] == 3


def test_library_masked_softmax_passes_the_checker():
    # cl.masked_softmax is tested elsewhere against its own references; the checker's loop must agree.
    passes("scoring.masked_softmax", lambda X, valid_lens: cl.masked_softmax(X, valid_lens), library=True)
