"""Checkers for the exercises of chapter 9, sparse attention.

References are computed here by Python loops over positions and blocks, independently of
``course_lib.attention.sparse``, which the exercises ask the student to rebuild in part.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ._core import (
    LargestTensorProbe,
    book_or_drawn,
    call,
    checker,
    count_cases,
    expect,
    expect_close,
    expect_match,
    expect_same,
    expect_tensor,
    generator,
    integer,
)

# --- sparse.window_global_pattern ---------------------------------------------------------------


def _loop_window_global(n: int, window: int, n_global: int) -> torch.Tensor:
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(n):
            mask[i, j] = abs(i - j) <= window or i < n_global or j < n_global
    return mask


def _pattern_sizes(g: torch.Generator) -> list[tuple[int, int, int]]:
    """(n, window, n_global) of the kinds the book checks: global tokens or not, no window, a window wider than
    the sequence, every token global."""
    wide, all_global = integer(g, 3, 6), integer(g, 5, 10)
    return [(integer(g, 8, 16), integer(g, 1, 3), integer(g, 1, 2)), (integer(g, 8, 16), 1, integer(g, 2, 4)),
            (integer(g, 4, 9), 0, 0), (wide, wide + integer(g, 0, 5), 0), (all_global, integer(g, 1, 3), all_global),
            (integer(g, 12, 20), 2, 2)]


@checker("sparse.window_global_pattern",
         "window_global_pattern(n, window, n_global): a sliding window plus global tokens, as an (n, n) bool mask")
def check_window_global_pattern(answer: Callable) -> int:
    def one(size: tuple[int, int, int]) -> None:
        n, window, n_global = size
        case = f"n={n}, window={window}, n_global={n_global}"
        got = call(answer, case, n, window, n_global)
        expected = _loop_window_global(n, window, n_global)
        expect_tensor(got, case, (n, n))
        expect(got.dtype == torch.bool,
               f"{case}: return a bool tensor (True = attend), got dtype {got.dtype}; comparisons such as "
               "(i - j).abs() <= window give one, combine them with | and &")
        got = got.cpu()
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        one_way = (f"{case}: a global token works both ways: it attends to every position (rows i < n_global are "
                   "all True) and every position attends to it (columns j < n_global are all True)")
        mistakes = [
            (((i - j).abs() <= window) | (j < n_global), one_way),  # only the columns
            (((i - j).abs() <= window) | (i < n_global), one_way),  # only the rows
        ]
        if window > 0:
            mistakes.insert(0, (((i - j).abs() < window) | (i < n_global) | (j < n_global),
                                f"{case}: the window is one position too short: |i - j| <= window is allowed "
                                "(window positions on each side and the position itself)"))

        def entry_message() -> str:
            wrong = (got != expected).nonzero()[0].tolist()
            return (f"{case}: entry (i, j) = {tuple(wrong)} should be {bool(expected[tuple(wrong)])}; "
                    "query i attends to key j when |i - j| <= window or i < n_global or j < n_global")

        expect_same(got, expected, mistakes, otherwise=entry_message)

    sizes = book_or_drawn([(10, 2, 1), (12, 1, 3), (7, 0, 0), (5, 10, 0), (9, 3, 9), (16, 2, 2)], 15, _pattern_sizes)
    return count_cases(sizes, one)


# --- sparse.strided_pairs -----------------------------------------------------------------------


def _pairs_by_blocks(n: int, stride: int) -> int:
    """Allowed (i, j) pairs of the causal strided pattern, one block of rows at a time.

    Row i = b * stride + r sees min(i + 1, stride) positions of its band and b earlier positions of
    its column (one in each earlier block).
    """
    total = 0
    for start in range(0, n, stride):
        b, end = start // stride, min(start + stride, n)
        if b == 0:
            total += sum(i + 1 for i in range(start, end))  # short bands, no column yet
        else:
            total += (end - start) * (stride + b)
    return total


def _pairs_by_loops(n: int, stride: int) -> int:
    return sum(1 for i in range(n) for j in range(i + 1) if i - j < stride or (i - j) % stride == 0)


def _stride_sizes(g: torch.Generator) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(n, stride): small ones (stride 1, stride > n, n a multiple of the stride or not) counted by loops, and
    large ones counted block by block."""
    small = [(integer(g, 1, 3), 1), (integer(g, 4, 8), 1), (integer(g, 4, 8), 2), (integer(g, 1, 6), integer(g, 7, 12))]
    small += [(integer(g, 10, 100), integer(g, 2, 13)) for _ in range(6)]
    large = [(integer(g, 10**5, 10**6), integer(g, 100, 1000)) for _ in range(3)]
    return small, large


@checker("sparse.strided_pairs",
         "strided_pairs(n, stride): the number of pairs (i, j) the causal strided pattern allows, in closed form")
def check_strided_pairs(answer: Callable) -> int:
    small, large = book_or_drawn(
        ([(1, 1), (5, 1), (5, 2), (16, 4), (17, 4), (3, 8), (30, 7), (64, 8), (100, 10), (99, 13)],
         [(10**6, 1000), (10**6 + 7, 999), (4096, 64)]), 16, _stride_sizes)

    def by_loops(size: tuple[int, int]) -> None:
        n, stride = size
        got = call(answer, f"n={n}, stride={stride}", n, stride)
        expected = _pairs_by_loops(n, stride)
        expect(isinstance(got, int) and not isinstance(got, bool),
               f"n={n}, stride={stride}: return an exact Python int (use // for the divisions), got "
               f"{type(got).__name__} {got!r}")
        values = f"n={n}, stride={stride}: expected {expected}, got {got}"
        mistakes = [
            (n * stride + sum(i // stride for i in range(n)),
             f"{values}. The first rows have fewer band positions: row i sees min(i + 1, stride) of them, not "
             "stride"),
            (expected + max(0, n - stride),
             f"{values}, one too many in each row i >= stride: the position i - stride is in the band of the "
             "paper's definition and in the column, count it once"),
            (expected - n, f"{values}, one too few in each row: every position attends to itself (j = i)"),
        ]
        expect_same(got, expected, mistakes, otherwise=(
            f"n={n}, stride={stride}: expected {expected} allowed pairs, got {got}; count the band, "
            "min(i + 1, stride) for row i, plus the column, i // stride, and sum over i"))

    def by_blocks(size: tuple[int, int]) -> None:
        n, stride = size
        got = call(answer, f"n={n}, stride={stride}", n, stride)
        expected = _pairs_by_blocks(n, stride)
        expect(got == expected, f"n={n}, stride={stride}: expected {expected}, got {got}")

    return count_cases(small, by_loops) + count_cases(large, by_blocks)


# --- sparse.block_local_attention ---------------------------------------------------------------


def _loop_block_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int) -> torch.Tensor:
    """Each query i attends to the keys of its own block [b * block, (b + 1) * block), by loops."""
    batch, n, d = q.shape
    out = torch.zeros(batch, n, v.shape[-1], dtype=torch.float64)
    for b in range(batch):
        for i in range(n):
            start = (i // block) * block
            scores = [float(q[b, i] @ k[b, j]) / math.sqrt(d) for j in range(start, start + block)]
            top = max(scores)
            exps = [math.exp(s - top) for s in scores]
            for w, j in zip(exps, range(start, start + block), strict=True):
                out[b, i] += w / sum(exps) * v[b, j].double()
    return out


@checker("sparse.block_local_attention",
         "block_local_attention(queries, keys, values, block): attention inside blocks, without the n x n matrix")
def check_block_local_attention(answer: Callable) -> int:
    g = generator(9)

    def one(size: tuple[int, int, int, int, int]) -> None:
        batch, n, d, d_v, block = size
        case = f"batch={batch}, n={n}, d={d}, block={block}"
        q, k, v = (torch.randn(batch, n, width, generator=g) for width in (d, d, d_v))
        got = call(answer, case, q, k, v, block)
        expected = _loop_block_attention(q, k, v, block)
        expect(isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(expected.shape),
               f"{case}: expected a tensor of shape {tuple(expected.shape)} (batch, n, d_v), got "
               f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
        expect_match(got, expected, f"{case} (query i = b * block + r belongs to block b = i // block: reshape to "
                                    "(batch, n // block, block, d), score and softmax inside each block over its "
                                    "last axis, then reshape back)",
                     [(lambda: _loop_block_attention(q * math.sqrt(d), k, v, block),
                       f"{case}: the scores must be divided by sqrt(d) = {math.sqrt(d):.3f} (scaled dot-product "
                       "attention)")])

    def without_the_dense_matrix(size: tuple[int, int]) -> int:
        # The point of the exercise: no (n, n) tensor.
        n, block = size
        q, k, v = (torch.randn(1, n, 8, generator=g) for _ in range(3))
        probe = LargestTensorProbe()
        with torch.no_grad(), probe:
            got = call(answer, f"n={n}, block={block}", q, k, v, block)
        expect_close(got, _loop_block_attention(q, k, v, block), f"n={n}, block={block}")
        expect(probe.largest < n * n // 4,
               f"n={n}, block={block}: your function built a tensor of {probe.largest} entries, the size of the "
               f"dense (n, n) = ({n}, {n}) score matrix; score each block separately: (batch, n // block, block, "
               f"d) @ (batch, n // block, d, block) -> (batch, n // block, block, block), n * block entries")
        return 2

    sizes = [(2, 12, 4, 3, 4), (1, 10, 3, 5, 5), (3, 6, 2, 2, 1), (1, 8, 4, 4, 8)]
    return count_cases(sizes, one) + count_cases([(256, 16)], without_the_dense_matrix)
