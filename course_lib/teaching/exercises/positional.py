r"""Checkers for the exercises of chapter 6, positional encoding.

The references are computed here independently of ``course_lib.models.positional``: the table by a double
loop over positions and columns with Python's ``math.sin``/``math.cos`` in float64, and the rotation
from its closed form, each :math:`2\times 2` block written out. Typical mistakes (sine and cosine
swapped, the exponent ``i/d`` or ``j/d`` instead of ``2i/d``, the sines and cosines in two halves
instead of interleaved, positions counted from 1, a rotation that goes backwards) are recognised by
comparing the answer with the result of that mistake, so the message can say what to fix.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch

from ._core import (
    book_or_drawn,
    call,
    call_explained,
    checker,
    count_cases,
    expect,
    expect_match,
    expect_raises,
    expect_tensor,
    integer,
)


def _loop_table(T: int, d: int, *, exponent: Callable[[int, int], float] | None = None, start: int = 0,
                swap: bool = False, halves: bool = False) -> torch.Tensor:
    """P[t, 2i] = sin(t / 10000^(2i/d)), P[t, 2i+1] = cos(same), by loops; keyword switches give mistakes.

    ``exponent(col, d)`` replaces ``2i/d`` (col = 2i or 2i+1); ``start`` is the first position; ``swap``
    puts cos in the even columns; ``halves`` puts all sines first, then all cosines.
    """
    P = torch.empty(T, d, dtype=torch.float64)
    n_freq = (d + 1) // 2
    for t in range(T):
        pos = t + start
        for col in range(d):
            if halves:
                i, use_sin = (col, True) if col < n_freq else (col - n_freq, False)
                e = 2 * i / d
            else:
                i, use_sin = col // 2, col % 2 == 0
                e = exponent(col, d) if exponent is not None else 2 * i / d
            angle = pos / 10000**e
            if swap:
                use_sin = not use_sin
            P[t, col] = math.sin(angle) if use_sin else math.cos(angle)
    return P


_TABLE_MISTAKES = [
    ({"swap": True},
     "sine and cosine are swapped: the even columns 2i hold sin(t * w_i) and the odd columns 2i+1 hold "
     "cos(t * w_i) (so that position 0 is (0, 1, 0, 1, ...))."),
    ({"exponent": lambda col, d: (col // 2) / d},
     "the exponent is i/d (i = the index of the pair); it must be 2i/d, i.e. the column index of the sine "
     "divided by d: w_i = 1 / 10000^(2i/d), so that the wavelengths range from 2*pi to about 10000 * 2*pi."),
    ({"exponent": lambda col, d: col / d},
     "each column uses its own index j in the exponent, j/d; the sine and the cosine of a pair must share "
     "one frequency, w_i = 1 / 10000^(2i/d) for both columns 2i and 2i+1 (use the even index 2i)."),
    ({"halves": True},
     "you put all the sines first and all the cosines after them ([sin | cos]); this chapter interleaves them: "
     "column 2i is the sine and column 2i+1 the cosine of the same frequency."),
    ({"start": 1},
     "your positions start at 1; the first token has position t = 0, whose encoding is (0, 1, 0, 1, ...)."),
]


def _table_sizes(g: torch.Generator) -> list[tuple[int, int]]:
    """(T, d) of the kinds the book checks: a long table, a square one, d = 2, an odd d and d = 1."""
    square = 2 * integer(g, 8, 32)
    return [(integer(g, 20, 60), 2 * integer(g, 4, 16)), (square, square), (integer(g, 2, 8), 2),
            (integer(g, 10, 30), 2 * integer(g, 2, 6) + 1), (integer(g, 2, 6), 1)]


@checker("positional.sinusoidal_positions",
         "sinusoidal_positions(T, d): P[t, 2i] = sin(t / 10000^(2i/d)), P[t, 2i+1] = cos(...), any d")
def check_sinusoidal_positions(answer: Callable) -> int:
    def one(size: tuple[int, int]) -> None:
        T, d = size
        case = f"T={T}, d={d}"
        hint = (" For odd d there are ceil(d/2) sines and floor(d/2) cosines: the last column is a sine "
                "without its cosine." if d % 2 else "")
        got = call_explained(answer, lambda error: f"{case}: your function raised {type(error).__name__}: "
                                                   f"{error}.{hint}", T, d)
        shape = tuple(got.shape) if isinstance(got, torch.Tensor) else None
        expect(shape != (1, T, d), f"{case}: got shape {(1, T, d)}; return the table itself, shape (T, d), "
                                   "without the batch axis.")
        expect(shape != (d, T) or d == T, f"{case}: got shape {(d, T)}, the transpose: rows are positions, "
                                          "columns features, shape (T, d).")
        expect_tensor(got, case, (T, d), "(T, d)", floating=True)
        expect_match(got, _loop_table(T, d), case,
                     [(partial(_loop_table, T, d, **kwargs), f"{case}: {hint}") for kwargs, hint in _TABLE_MISTAKES],
                     atol=2e-5)

    return count_cases(book_or_drawn([(50, 16), (64, 64), (5, 2), (20, 7), (3, 1)], 13, _table_sizes), one)


def _rotation(k: int, d: int, *, backwards: bool = False,
              exponent: Callable[[int, int], float] | None = None) -> torch.Tensor:
    """The block-diagonal R_k with blocks [[cos kw, sin kw], [-sin kw, cos kw]] written out entry by entry."""
    R = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        e = exponent(i, d) if exponent is not None else 2 * i / d
        w = 1.0 / 10000**e
        c, s = math.cos(k * w), math.sin(k * w)
        if backwards:
            s = -s
        R[2 * i, 2 * i], R[2 * i, 2 * i + 1] = c, s
        R[2 * i + 1, 2 * i], R[2 * i + 1, 2 * i + 1] = -s, c
    return R


def _rotation_sizes(g: torch.Generator) -> list[tuple[int, int]]:
    """(k, d): even d and shifts k of either sign, 0 once (as in the book)."""
    return [(0 if i == 3 else integer(g, -50, 50), 2 * integer(g, 1, 16)) for i in range(6)]


@checker("positional.rotation_matrix",
         "rotation_matrix(k, d): the block-diagonal R_k with p_{t+k} = R_k p_t for every t (even d)")
def check_rotation_matrix(answer: Callable) -> int:
    def one(size: tuple[int, int]) -> None:
        k, d = size
        case = f"k={k}, d={d}"
        got = call(answer, case, k, d)
        actual = expect_tensor(got, case, (d, d), "(d, d)", floating=True).detach().to("cpu", torch.float64)
        mistakes = [
            (lambda: _rotation(k, d, backwards=True),
             f"{case}: your R_k moves positions backwards, R_k p_t = p_(t-k) (it is the transpose of the "
             "right matrix; R_k acts on the column p_t, so in rows P[t + k] = P[t] @ R_k.T). From "
             "sin(a + b) = sin a cos b + cos a sin b and cos(a + b) = cos a cos b - sin a sin b, the block "
             "acting on (sin, cos) is [[cos kw, sin kw], [-sin kw, cos kw]]."),
            (lambda: _rotation(k, d, exponent=lambda i, d: i / d),
             f"{case}: the frequency of pair i must be w_i = 1 / 10000^(2i/d); yours uses the exponent i/d."),
            (lambda: _rotation(k, d, exponent=lambda i, d: (2 * i + 1) / d),
             f"{case}: the frequency of pair i must be w_i = 1 / 10000^(2i/d); yours uses (2i+1)/d."),
            (lambda: _rotation(k, d).abs().copysign(actual),  # the right sizes with your signs
             f"{case}: the entries have the right size but some signs are wrong; the block acting on the "
             "pair (sin, cos) is [[cos kw, sin kw], [-sin kw, cos kw]]."),
        ]
        expect_match(got, _rotation(k, d), f"{case} (R_k p_t must equal p_(t+k) for every t)", mistakes, atol=1e-6)

    def odd(d: int) -> None:
        expect_raises(answer, (3, d), ValueError, other=lambda error: (
            f"k=3, d={d}: expected a ValueError for odd d, got {type(error).__name__}: {error}"), returned=lambda _: (
            f"k=3, d={d}: expected a ValueError. For odd d the last column sin(w t) has no cosine partner, so "
            "p_(t+k) is not a linear function of p_t and no R_k exists; check d % 2 and raise ValueError."))

    sizes = book_or_drawn([(1, 8), (5, 16), (-3, 4), (0, 6), (17, 32), (40, 2)], 14, _rotation_sizes)
    return count_cases(sizes, one) + count_cases((5, 1), odd)
