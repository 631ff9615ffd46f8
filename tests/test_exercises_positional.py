"""The chapter 6 checkers accept the notebook's solutions and reject typical mistakes
with a specific hint (their stubs: test_exercises_core.py)."""

from __future__ import annotations

import math

import pytest
import torch
from exercise_helpers import fails_with, passes

import course_lib as cl

NOTEBOOK = "06_positional_encoding.ipynb"


# --- positional.sinusoidal_positions ------------------------------------------------------------


def _table(T, d, *, exponent=lambda i, d: 2 * i / d, swap=False, start=0):
    """A vectorised table with one deliberate mistake switched on (pairs i = 0 .. ceil(d/2) - 1)."""
    i = torch.arange((d + 1) // 2, dtype=torch.float64)
    angles = (torch.arange(T, dtype=torch.float64)[:, None] + start) / 10000 ** exponent(i, d)
    first, second = (angles.cos(), angles.sin()) if swap else (angles.sin(), angles.cos())
    return torch.stack([first, second], dim=-1).flatten(1)[:, :d]


def table_halves(T, d):
    i = torch.arange((d + 1) // 2, dtype=torch.float64)
    angles = torch.arange(T, dtype=torch.float64)[:, None] / 10000 ** (2 * i / d)
    return torch.cat([angles.sin(), angles.cos()], dim=1)[:, :d]


def table_per_column_exponent(T, d):
    j = torch.arange(d, dtype=torch.float64)
    angles = torch.arange(T, dtype=torch.float64)[:, None] / 10000 ** (j / d)  # (2i+1)/d for the cosines
    P = angles.sin()
    P[:, 1::2] = angles[:, 1::2].cos()
    return P


def table_even_d_only(T, d):
    P = torch.zeros(T, d)
    angles = torch.arange(T)[:, None] / 10000 ** (torch.arange(0, d, 2) / d)
    P[:, 0::2] = angles.sin()
    P[:, 1::2] = angles.cos()  # fails for odd d: one cosine column fewer
    return P


def test_sinusoidal_notebook_solution_passes(solutions):
    ns = solutions("ch06-ex-sinusoidal")
    assert passes("positional.sinusoidal_positions", ns["sinusoidal_positions"]).n_checks == 5


def test_library_table_passes_the_checker():
    # cl.sinusoidal_table is tested against its own double loop; the checker's loop must agree.
    passes("positional.sinusoidal_positions", lambda T, d: cl.sinusoidal_table(T, d), library=True)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (lambda T, d: _table(T, d, swap=True), "sine and cosine are swapped"),
        (lambda T, d: _table(T, d, exponent=lambda i, d: i / d), "the exponent is i/d"),
        (table_per_column_exponent, "must share one frequency"),
        (table_halves, "all the sines first"),
        (lambda T, d: _table(T, d, start=1), "positions start at 1"),
        (table_even_d_only, "last column is a sine without its cosine"),
        (lambda T, d: _table(T, d)[None], "without the batch axis"),
        (lambda T, d: _table(T, d).T, "the transpose"),
    ],
)
def test_sinusoidal_wrong_answers_fail_with_hint(answer, hint):
    fails_with("positional.sinusoidal_positions", answer, hint)


# --- positional.rotation_matrix -----------------------------------------------------------------


def _rotation(k, d, *, sign=1.0, exponent=lambda i, d: 2 * i / d, check_odd=True):
    if check_odd and d % 2:
        raise ValueError("d must be even")
    blocks = []
    for i in range(d // 2):
        angle = k / 10000 ** exponent(i, d)
        c, s = math.cos(angle), sign * math.sin(angle)
        blocks.append(torch.tensor([[c, s], [-s, c]], dtype=torch.float64))
    return torch.block_diag(*blocks)


def test_rotation_notebook_solution_passes(solutions):
    ns = solutions("ch06-ex-rotation")
    assert passes("positional.rotation_matrix", ns["rotation_matrix"]).n_checks == 8


def test_checker_reference_rotation_moves_the_library_table():
    # The checker compares with its closed form; that form must have the defining property
    # p_{t+k} = R_k p_t on the library's table, which is computed independently.
    correct = _rotation(7, 16)
    passes("positional.rotation_matrix", _rotation)
    P = cl.sinusoidal_table(80, 16, dtype=torch.float64)
    torch.testing.assert_close(P[:-7] @ correct.T, P[7:])


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (lambda k, d: _rotation(k, d, sign=-1.0), "moves positions backwards"),
        (lambda k, d: _rotation(k, d, exponent=lambda i, d: i / d), "exponent i/d"),
        (lambda k, d: _rotation(k, d, check_odd=False), "expected a ValueError"),
        (lambda k, d: _rotation(k, d).abs(), "some signs are wrong"),
    ],
)
def test_rotation_wrong_answers_fail_with_hint(answer, hint):
    fails_with("positional.rotation_matrix", answer, hint)

