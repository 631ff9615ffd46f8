r"""Checkers for the exercises of chapter 6, positional encoding.

The references are computed here independently of ``course_lib.positional``: the table by a double
loop over positions and columns with Python's ``math.sin``/``math.cos`` in float64, and the rotation
from its closed form, each :math:`2\times 2` block written out. Typical mistakes (sine and cosine
swapped, the exponent ``i/d`` or ``j/d`` instead of ``2i/d``, the sines and cosines in two halves
instead of interleaved, positions counted from 1, a rotation that goes backwards) are recognised by
comparing the answer with the result of that mistake, so the message can say what to fix.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ._core import ExerciseFailure, call, checker, expect, expect_close


def _as_float64(got: object, shape: tuple[int, ...], case: str, layout: str) -> torch.Tensor:
    expect(isinstance(got, torch.Tensor), f"{case}: expected a torch.Tensor, got {type(got).__name__}")
    expect(got.dtype.is_floating_point, f"{case}: expected a floating-point tensor, got dtype {got.dtype}")
    expect(tuple(got.shape) == shape, f"{case}: expected shape {shape} = {layout}, got {tuple(got.shape)}")
    return got.detach().to("cpu", torch.float64)


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


@checker("positional.sinusoidal_positions",
         "sinusoidal_positions(T, d): P[t, 2i] = sin(t / 10000^(2i/d)), P[t, 2i+1] = cos(...), any d")
def check_sinusoidal_positions(answer: Callable) -> int:
    n = 0
    for T, d in ((50, 16), (64, 64), (5, 2), (20, 7), (3, 1)):
        case = f"T={T}, d={d}"
        try:
            got = answer(T, d)
        except NotImplementedError:
            raise
        except Exception as error:
            hint = (" For odd d there are ceil(d/2) sines and floor(d/2) cosines: the last column is a sine "
                    "without its cosine." if d % 2 else "")
            raise ExerciseFailure(f"{case}: your function raised {type(error).__name__}: {error}.{hint}") from None
        if isinstance(got, torch.Tensor) and tuple(got.shape) == (1, T, d):
            raise ExerciseFailure(f"{case}: got shape {(1, T, d)}; return the table itself, shape (T, d), "
                                  "without the batch axis.")
        if isinstance(got, torch.Tensor) and tuple(got.shape) == (d, T) and d != T:
            raise ExerciseFailure(f"{case}: got shape {(d, T)}, the transpose: rows are positions, columns "
                                  "features, shape (T, d).")
        actual = _as_float64(got, (T, d), case, "(T, d)")
        expected = _loop_table(T, d)
        if not torch.allclose(actual, expected, atol=2e-5):
            for kwargs, hint in _TABLE_MISTAKES:
                if torch.allclose(actual, _loop_table(T, d, **kwargs), atol=2e-5):
                    raise ExerciseFailure(f"{case}: {hint}")
        expect_close(got, expected, case, atol=2e-5)
        n += 1
    return n


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


@checker("positional.rotation_matrix",
         "rotation_matrix(k, d): the block-diagonal R_k with p_{t+k} = R_k p_t for every t (even d)")
def check_rotation_matrix(answer: Callable) -> int:
    n = 0
    for k, d in ((1, 8), (5, 16), (-3, 4), (0, 6), (17, 32), (40, 2)):
        case = f"k={k}, d={d}"
        got = call(answer, case, k, d)
        actual = _as_float64(got, (d, d), case, "(d, d)")
        expected = _rotation(k, d)
        if not torch.allclose(actual, expected, atol=1e-6):
            if k != 0 and torch.allclose(actual, _rotation(k, d, backwards=True), atol=1e-6):
                raise ExerciseFailure(
                    f"{case}: your R_k moves positions backwards, R_k p_t = p_(t-k) (it is the transpose of the "
                    "right matrix; R_k acts on the column p_t, so in rows P[t + k] = P[t] @ R_k.T). From "
                    "sin(a + b) = sin a cos b + cos a sin b and cos(a + b) = cos a cos b - sin a sin b, the block "
                    "acting on (sin, cos) is [[cos kw, sin kw], [-sin kw, cos kw]].")
            if torch.allclose(actual, _rotation(k, d, exponent=lambda i, d: i / d), atol=1e-6):
                raise ExerciseFailure(
                    f"{case}: the frequency of pair i must be w_i = 1 / 10000^(2i/d); yours uses the exponent i/d.")
            if torch.allclose(actual, _rotation(k, d, exponent=lambda i, d: (2 * i + 1) / d), atol=1e-6):
                raise ExerciseFailure(
                    f"{case}: the frequency of pair i must be w_i = 1 / 10000^(2i/d); yours uses (2i+1)/d.")
            if torch.allclose(actual.abs(), expected.abs(), atol=1e-6):
                raise ExerciseFailure(
                    f"{case}: the entries have the right size but some signs are wrong; the block acting on the "
                    "pair (sin, cos) is [[cos kw, sin kw], [-sin kw, cos kw]].")
        expect_close(got, expected, f"{case} (R_k p_t must equal p_(t+k) for every t)", atol=1e-6)
        n += 1

    for d in (5, 1):
        try:
            answer(3, d)
        except NotImplementedError:
            raise
        except ValueError:
            n += 1
            continue
        except Exception as error:
            raise ExerciseFailure(
                f"k=3, d={d}: expected a ValueError for odd d, got {type(error).__name__}: {error}") from None
        raise ExerciseFailure(
            f"k=3, d={d}: expected a ValueError. For odd d the last column sin(w t) has no cosine partner, so "
            "p_(t+k) is not a linear function of p_t and no R_k exists; check d % 2 and raise ValueError.")
    return n
