"""The chapter 9 checkers accept the notebook's solutions and reject typical mistakes
with a specific hint (their stubs: test_exercises_core.py)."""

from __future__ import annotations

import math

import nbformat
import pytest
import torch
from exercise_helpers import BOOK, fails_with, passes

import course_lib as cl
from course_lib.teaching.exercises import list_exercises

NOTEBOOK = "09_sparse_attention.ipynb"


def _positions(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.arange(n)[:, None], torch.arange(n)[None, :]


# --- sparse.window_global_pattern ---------------------------------------------------------------


def window_too_short(n, window, n_global):
    i, j = _positions(n)
    return ((i - j).abs() < window) | (i < n_global) | (j < n_global)


def global_columns_only(n, window, n_global):
    i, j = _positions(n)
    return ((i - j).abs() <= window) | (j < n_global)


def returns_integers(n, window, n_global):
    i, j = _positions(n)
    return (((i - j).abs() <= window) | (i < n_global) | (j < n_global)).long()


def causal_by_mistake(n, window, n_global):
    i, j = _positions(n)
    return (((i - j).abs() <= window) | (i < n_global) | (j < n_global)) & (j <= i)


def test_window_global_notebook_solution_passes(solutions):
    ns = solutions("ch09-ex-window-global")
    assert passes("sparse.window_global_pattern", ns["window_global_pattern"]).n_checks == 6


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (window_too_short, "one position too short"),
        (global_columns_only, "works both ways"),
        (returns_integers, "return a bool tensor"),
        (causal_by_mistake, "should be True"),
        (lambda n, window, n_global: torch.ones(n, n + 1, dtype=torch.bool), "expected shape"),
    ],
)
def test_window_global_wrong_answers_fail_with_hint(answer, hint):
    fails_with("sparse.window_global_pattern", answer, hint)


# --- sparse.strided_pairs -----------------------------------------------------------------------


def brute_force_pairs(n: int, stride: int) -> int:
    """Count the allowed pairs row by row, i.e. an O(n) answer that is right but not a closed form."""
    return sum(min(i + 1, stride) + i // stride for i in range(n))


def band_always_full(n, stride):
    return n * stride + sum(i // stride for i in range(n))


def paper_band_counted_twice(n, stride):
    return brute_force_pairs(n, stride) + max(0, n - stride)


def forgets_the_diagonal(n, stride):
    return brute_force_pairs(n, stride) - n


def float_answer(n, stride):
    return float(brute_force_pairs(n, stride))


def test_strided_pairs_notebook_solution_passes(solutions):
    ns = solutions("ch09-ex-pairs")
    assert passes("sparse.strided_pairs", ns["strided_pairs"]).n_checks == 13


def test_strided_pairs_counts_of_the_library_pattern_agree_with_the_checker(solutions):
    # The checker's loop reference and the library's pattern are independent: they must agree.
    ns = solutions("ch09-ex-pairs")
    for n, stride in ((1, 1), (17, 4), (64, 8), (100, 7)):
        assert ns["strided_pairs"](n, stride) == int(cl.sparse.strided_pattern(n, stride).sum())


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (band_always_full, "fewer band positions"),
        (paper_band_counted_twice, "count it once"),
        (forgets_the_diagonal, "attends to itself"),
        (float_answer, "exact Python int"),
        (lambda n, stride: n * n, "count the band"),
    ],
)
def test_strided_pairs_wrong_answers_fail_with_hint(answer, hint):
    fails_with("sparse.strided_pairs", answer, hint)


# --- sparse.block_local_attention ---------------------------------------------------------------


def unscaled(queries, keys, values, block):
    batch, n, d = queries.shape
    q, k = queries.reshape(batch, n // block, block, d), keys.reshape(batch, n // block, block, d)
    v = values.reshape(batch, n // block, block, -1)
    return (torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v).reshape(batch, n, -1)


def dense_with_block_mask(queries, keys, values, block):
    # Right values, but through the (n, n) matrix the exercise is about avoiding.
    n = queries.shape[1]
    i, j = _positions(n)
    mask = (i // block) == (j // block)
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ values


def interleaved_blocks(queries, keys, values, block):
    # reshape(batch, block, n // block, d) groups the positions with the same index mod n // block.
    batch, n, d = queries.shape
    q, k = queries.reshape(batch, block, n // block, d), keys.reshape(batch, block, n // block, d)
    v = values.reshape(batch, block, n // block, -1)
    weights = torch.softmax(q.transpose(1, 2) @ k.transpose(1, 2).transpose(-2, -1) / math.sqrt(d), dim=-1)
    return (weights @ v.transpose(1, 2)).transpose(1, 2).reshape(batch, n, -1)


def test_block_local_notebook_solution_passes(solutions):
    ns = solutions("ch09-ex-block-local")
    assert passes("sparse.block_local_attention", ns["block_local_attention"]).n_checks == 6


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (unscaled, "divided by sqrt(d)"),
        (dense_with_block_mask, "the size of the dense"),
        (interleaved_blocks, "belongs to block b = i // block"),
        (lambda q, k, v, block: v, "values differ"),
        (lambda q, k, v, block: v[:, :, :1], "expected a tensor of shape"),
    ],
)
def test_block_local_wrong_answers_fail_with_hint(answer, hint):
    fails_with("sparse.block_local_attention", answer, hint)


def test_block_local_crash_names_the_case():
    def crashes(queries, keys, values, block):
        return queries.reshape(-1, block + 1)

    fails_with("sparse.block_local_attention", crashes, "your function raised RuntimeError")


# --- the notebook's exercises and their checkers ------------------------------------------------


def test_every_coding_exercise_of_the_notebook_calls_a_registered_checker():
    nb = nbformat.read(BOOK / NOTEBOOK, as_version=4)
    calls = [cell.source for cell in nb.cells if cell.cell_type == "code" and 'check("sparse.' in cell.source]
    assert len(calls) == 6  # each checker runs on the stub (after it) and on the worked solution (inside it)
    names = {c.split('"')[1] for c in calls}
    assert names == {"sparse.window_global_pattern", "sparse.strided_pairs", "sparse.block_local_attention"}
    assert names <= set(list_exercises())
