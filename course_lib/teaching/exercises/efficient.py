"""Checkers for the exercises of chapter 10, efficient attention.

References are computed here from definitions (a row's maximum and sum of exponentials, loops over tiles and
positions, softmax attention with an explicit mask, kernels evaluated pair by pair), independently of
``course_lib.attention.kernels.flash`` and ``course_lib.attention.kernels.linear``, which the exercises ask
the student to rebuild in part.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

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

# --- efficient.merge_softmax_states -------------------------------------------------------------


def _state(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(max, sum of exp(x - max)) of each row of x (..., n), by definition; (-inf, 0) for an empty or -inf row."""
    if x.shape[-1] == 0:
        return x.new_full(x.shape[:-1], -math.inf), x.new_zeros(x.shape[:-1])
    m = x.amax(-1)
    safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    return m, torch.exp(x - safe[..., None]).sum(-1)


def _rows(g: torch.Generator, rows: int, n: int, split: int, empty_rows: int) -> torch.Tensor:
    """Scores (rows, n) of spread-out scale (so a missing rescaling shows): the first ``empty_rows`` rows are -inf in
    their first ``split`` entries (a block in which every key is masked), and with ``empty_rows`` > 1 the last row is
    -inf everywhere (a query that may see no key: m = -inf and l = 0 after the merge too)."""
    x = 4 * torch.randn(rows, n, generator=g, dtype=torch.float64)
    x[:empty_rows, :split] = -math.inf
    if empty_rows > 1:
        x[-1] = -math.inf
    return x


@checker("efficient.merge_softmax_states",
         "merge_softmax_states(m_a, l_a, m_b, l_b): the running maximum and denominator of two parts of a row, merged")
def check_merge_softmax_states(answer: Callable) -> int:
    def draw(g: torch.Generator) -> list[tuple[int, int, int, int]]:
        return [(integer(g, 1, 4), integer(g, 4, 12), integer(g, 1, 3), 0),
                (integer(g, 2, 5), integer(g, 6, 12), integer(g, 3, 5), 1),
                (integer(g, 1, 3), integer(g, 2, 9), 1, 0), (integer(g, 4, 6), integer(g, 6, 9), 4, 3)]

    sizes = book_or_drawn([(3, 10, 4, 0), (4, 12, 7, 1), (2, 5, 1, 0), (4, 8, 4, 3)], 31, draw)
    g = generator(32)

    def one(size: tuple[int, int, int, int]) -> None:
        rows, n, split, empty = size
        x = _rows(g, rows, n, split, empty)
        (m_a, l_a), (m_b, l_b), (m, den) = _state(x[:, :split]), _state(x[:, split:]), _state(x)
        case = f"{rows} rows of {n} scores split after entry {split}" + (
            f", the first part of {empty} row(s) fully masked (m_a = -inf, l_a = 0)" if empty else "") + (
            ", the last row masked in both parts" if empty > 1 else "")
        got = call(answer, case, m_a.clone(), l_a.clone(), m_b.clone(), l_b.clone())
        expect(isinstance(got, tuple) and len(got) == 2,
               f"{case}: return the pair (m, l), got {type(got).__name__}")
        got_m, got_l = got
        expect_close(got_m, m, f"{case}: the merged maximum m")
        expect_tensor(got_l, f"{case}: the merged denominator l", tuple(den.shape), "(rows,)")
        expect(not bool(torch.isnan(got_l.detach()).any()),
               f"{case}: your l contains NaN. A fully masked part has m = -inf and l = 0, and exp(-inf - (-inf)) "
               "is NaN: rescale by exp(m_a - m) only where m_a is finite (or shift by 0 where m is -inf)")
        with torch.no_grad():
            unscaled = l_a + l_b
            inverted = l_a * torch.exp(m - m_a).nan_to_num(0, 0, 0) + l_b * torch.exp(m - m_b).nan_to_num(0, 0, 0)
        expect_match(got_l, den, f"{case}: the merged denominator l = sum_j exp(x_j - m) over both parts", [
            (unscaled, f"{case}: l_a + l_b adds sums taken against two different maxima; rescale each to the merged "
                       "maximum: l = l_a exp(m_a - m) + l_b exp(m_b - m)"),
            (inverted, f"{case}: the rescaling factor is exp(m_a - m) <= 1 (the old maximum minus the new one), not "
                       "exp(m - m_a)"),
        ], rtol=1e-9, atol=1e-12)

    return count_cases(sizes, one)


# --- efficient.causal_tiles ---------------------------------------------------------------------


def _tiles_by_loops(n_q: int, n_k: int, block_q: int, block_k: int) -> int:
    """Tiles (query block, key block) holding at least one pair j <= i + n_k - n_q, by looking at every pair."""
    count = 0
    for q0 in range(0, n_q, block_q):
        for k0 in range(0, n_k, block_k):
            count += any(j <= i + n_k - n_q for i in range(q0, min(q0 + block_q, n_q))
                         for j in range(k0, min(k0 + block_k, n_k)))
    return count


def _tiles_by_blocks(n_q: int, n_k: int, block_q: int, block_k: int) -> int:
    """The same, one query block at a time: its last query sees the keys up to i + n_k - n_q."""
    total = 0
    key_blocks = -(-n_k // block_k)
    for q0 in range(0, n_q, block_q):
        last = min(q0 + block_q, n_q) - 1 + n_k - n_q
        if last >= 0:
            total += min(last // block_k + 1, key_blocks)
    return total


def _tile_sizes(g: torch.Generator) -> tuple[list[tuple[int, int, int, int]], list[tuple[int, int, int, int]]]:
    small = [(integer(g, 4, 12), 0, integer(g, 1, 4), integer(g, 1, 4)) for _ in range(3)]
    small = [(n, n, bq, bk) for n, _, bq, bk in small]
    small += [(integer(g, 1, 5), integer(g, 6, 14), integer(g, 1, 3), integer(g, 1, 4)),  # a cache: n_q < n_k
              (integer(g, 8, 14), integer(g, 2, 6), integer(g, 1, 4), integer(g, 1, 3)),  # n_q > n_k
              (integer(g, 9, 20), integer(g, 9, 20), integer(g, 2, 6), integer(g, 2, 6)),
              (integer(g, 3, 6), integer(g, 3, 6), 8, 8)]
    large = [(integer(g, 10**5, 10**6), integer(g, 10**5, 10**6), integer(g, 32, 256), integer(g, 32, 256))]
    return small, large


@checker("efficient.causal_tiles",
         "causal_tiles(n_q, n_k, block_q, block_k): the tiles FlashAttention computes with the bottom-right causal "
         "mask")
def check_causal_tiles(answer: Callable) -> int:
    small, large = book_or_drawn(
        ([(8, 8, 2, 2), (10, 10, 3, 3), (12, 12, 4, 3), (3, 11, 2, 4), (11, 4, 3, 2), (17, 17, 5, 4), (5, 5, 8, 8)],
         [(4096, 4096, 128, 128), (10**6 + 3, 10**6, 128, 64)]), 33, _tile_sizes)

    def one(size: tuple[int, int, int, int]) -> None:
        n_q, n_k, block_q, block_k = size
        case = f"n_q={n_q}, n_k={n_k}, block_q={block_q}, block_k={block_k}"
        got = call(answer, case, n_q, n_k, block_q, block_k)
        expected = _tiles_by_loops(n_q, n_k, block_q, block_k) if n_q * n_k <= 10**4 else _tiles_by_blocks(
            n_q, n_k, block_q, block_k)
        expect(isinstance(got, int) and not isinstance(got, bool),
               f"{case}: return an exact Python int (use // for the divisions), got {type(got).__name__} {got!r}")
        values = f"{case}: expected {expected} tiles, got {got}"
        mistakes = [
            (_tiles_by_blocks(n_q, n_q, block_q, block_k) if n_q <= n_k else None,
             f"{values}. The causal mask is aligned bottom-right: query i sits at key position i + n_k - n_q, so "
             "with a cache (n_k > n_q) the first query already sees n_k - n_q + 1 keys"),
            (_tiles_by_blocks(n_q, n_k, block_q, block_k) - _diagonal(n_q, n_k, block_q, block_k),
             f"{values}: a tile on the diagonal is computed too (some of its pairs are kept: it is masked inside)"),
            (-(-n_q // block_q) * -(-n_k // block_k),
             f"{values}: that is every tile; a tile in which no query may see any key is skipped"),
        ]
        expect_same(got, expected, [(r, h) for r, h in mistakes if r is not None and r != expected], otherwise=(
            f"{values}; count, for each query block, the key blocks up to the one holding the last key its last "
            "query may see (position last_query + n_k - n_q)"))

    return count_cases(small, one) + count_cases(large, one)


def _diagonal(n_q: int, n_k: int, block_q: int, block_k: int) -> int:
    """Tiles that hold kept and masked pairs (the diagonal ones), by loops over the tiles' corners."""
    count = 0
    offset = n_k - n_q
    for q0 in range(0, n_q, block_q):
        q1 = min(q0 + block_q, n_q) - 1
        for k0 in range(0, n_k, block_k):
            k1 = min(k0 + block_k, n_k) - 1
            count += k0 <= q1 + offset and k1 > q0 + offset  # some pair kept, some pair masked
    return count


# --- efficient.max_cache_tokens -----------------------------------------------------------------


@checker("efficient.max_cache_tokens",
         "max_cache_tokens(memory_bytes, layers, kv_heads, head_size, batch, bytes_per_element): the longest context "
         "whose key/value cache fits")
def check_max_cache_tokens(answer: Callable) -> int:
    def draw(g: torch.Generator) -> list[tuple[int, int, int, int, int, int]]:
        return [(integer(g, 10**9, 8 * 10**10), integer(g, 12, 80), h, 128, integer(g, 1, 16), integer(g, 1, 4))
                for h in (1, integer(g, 2, 8), integer(g, 16, 64))] + [(1000, 1, 1, 10, 1, 4), (1023, 2, 1, 4, 2, 4)]

    cases = book_or_drawn([(80 * 2**30, 32, 32, 128, 1, 2), (80 * 2**30, 32, 8, 128, 1, 2),
                           (24 * 2**30, 80, 8, 128, 4, 2), (1000, 1, 1, 10, 1, 4), (1023, 2, 1, 4, 2, 4)], 34, draw)

    def one(args: tuple[int, int, int, int, int, int]) -> None:
        memory, layers, kv_heads, head_size, batch, width = args
        case = (f"memory_bytes={memory}, layers={layers}, kv_heads={kv_heads}, head_size={head_size}, batch={batch}, "
                f"bytes_per_element={width}")
        got = call(answer, case, *args)
        per_token = 2 * layers * kv_heads * head_size * batch * width
        expected = memory // per_token
        expect(isinstance(got, int) and not isinstance(got, bool),
               f"{case}: return an exact Python int (a number of tokens; use //), got {type(got).__name__} {got!r}")
        values = f"{case}: expected {expected} tokens, got {got}"
        expect_same(got, expected, [
            (memory // (per_token // 2), f"{values}. The cache holds keys AND values: 2 x layers x kv_heads x "
                                         "head_size x batch x bytes_per_element bytes per token"),
            (-(-memory // per_token), f"{values}: round down, a partial token does not fit"),
            (memory // (per_token // batch), f"{values}: every sequence of the batch has its own cache"),
        ], otherwise=f"{values}; one token costs 2 x layers x kv_heads x head_size x batch x bytes_per_element bytes")

    return count_cases(cases, one)


# --- efficient.quadratic_feature_map ------------------------------------------------------------


def _pairwise_kernel(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """(q . k)^2 for every pair of rows, (..., n_q, n_k), by definition."""
    return (q @ k.transpose(-2, -1)) ** 2


@checker("efficient.quadratic_feature_map",
         "quadratic_feature_map(x): features phi(x) with phi(q) . phi(k) = (q . k)^2")
def check_quadratic_feature_map(answer: Callable) -> int:
    g = generator(35)
    shapes = book_or_drawn([(5, 3), (2, 4, 2), (1, 7, 6)], 36,
                           lambda g: [(integer(g, 2, 6), integer(g, 2, 5)), (integer(g, 1, 3), integer(g, 2, 5), 3),
                                      (integer(g, 1, 2), integer(g, 2, 4), integer(g, 4, 7))])

    def one(shape: tuple[int, ...]) -> None:
        q = torch.randn(*shape, generator=g, dtype=torch.float64)
        k = torch.randn(*shape[:-2], shape[-2] + 1, shape[-1], generator=g, dtype=torch.float64)
        case = f"q of shape {tuple(q.shape)}, k of shape {tuple(k.shape)}"
        fq, fk = call(answer, case, q), call(answer, case, k)
        expect_tensor(fq, f"{case}: phi(q)", floating=True)
        expect(fq.shape[:-1] == q.shape[:-1],
               f"{case}: phi must act on the last axis only and keep the others, expected shape "
               f"{tuple(q.shape[:-1])} + (d_phi,), got {tuple(fq.shape)}")
        got = fq @ fk.transpose(-2, -1)
        expect_match(got, _pairwise_kernel(q, k), f"{case}: the kernel phi(q) . phi(k)", [
            (lambda: (q**2) @ (k**2).transpose(-2, -1),
             f"{case}: squaring each feature gives sum_i q_i^2 k_i^2, without the cross terms q_i q_j k_i k_j of "
             "(q . k)^2 = sum_i sum_j q_i q_j k_i k_j: use every product x_i x_j (an outer product)"),
            (lambda: q @ k.transpose(-2, -1),
             f"{case}: that is the kernel q . k; (q . k)^2 needs products of two features"),
        ], rtol=1e-6, atol=1e-6)

    return count_cases(shapes, one)


# --- efficient.causal_flash_attention -----------------------------------------------------------


def _causal_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Softmax attention with the look-ahead mask, the (n, n) matrix written out (float64)."""
    n, d = q.shape
    scores = (q @ k.T) / math.sqrt(d)
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(scores, dim=-1) @ v


def _tiles(n: int, block: int) -> list[tuple[int, int]]:
    """(rows, cols) of the tiles on or below the diagonal of an (n, n) causal grid of ``block`` blocks."""
    sizes = [min(block, n - s) for s in range(0, n, block)]
    return [(sizes[i], sizes[j]) for i in range(len(sizes)) for j in range(i + 1)]


@checker("efficient.causal_flash_attention",
         "causal_flash_attention(q, k, v, block): FlashAttention's forward pass for one head, causal, skipping the "
         "tiles above the diagonal")
def check_causal_flash_attention(answer: Callable) -> int:
    g = generator(37)
    sizes = book_or_drawn([(8, 3, 2, 4), (10, 4, 3, 3), (13, 2, 5, 4), (6, 3, 3, 8)], 38,
                          lambda g: [(integer(g, 6, 12), integer(g, 2, 4), integer(g, 1, 4), integer(g, 2, 4)),
                                     (integer(g, 9, 17), integer(g, 2, 5), integer(g, 2, 5), integer(g, 3, 5)),
                                     (integer(g, 3, 6), 3, 2, 8)])

    def one(size: tuple[int, int, int, int]) -> None:
        n, d, d_v, block = size
        case = f"n={n}, d={d}, d_v={d_v}, block={block}"
        q, k = (torch.randn(n, d, generator=g, dtype=torch.float64) for _ in range(2))
        v = torch.randn(n, d_v, generator=g, dtype=torch.float64)
        got = call(answer, case, q, k, v, block)
        expected = _causal_reference(q, k, v)
        expect_tensor(got, case, tuple(expected.shape), "(n, d_v)")
        with torch.no_grad():
            full = torch.softmax((q @ k.T) / math.sqrt(d), dim=-1) @ v
        expect_match(got, expected, f"{case} (query i attends to the keys j <= i)", [
            (full, f"{case}: that is attention without the look-ahead mask; mask the pairs j > i inside the diagonal "
                   "tiles (and skip the tiles above them)"),
            (lambda: _causal_reference(q * math.sqrt(d), k, v),
             f"{case}: the scores must be divided by sqrt(d) = {math.sqrt(d):.3f}"),
        ], rtol=1e-9, atol=1e-10)

    def skips_and_never_holds_the_matrix(size: tuple[int, int]) -> int:
        n, block = size
        case = f"n={n}, block={block}"
        q, k, v = (torch.randn(n, 8, generator=g) for _ in range(3))
        probe = LargestTensorProbe()
        with torch.no_grad(), probe, FlopCounterMode(display=False) as flops:
            got = call(answer, case, q, k, v, block)
        expect_close(got, _causal_reference(q.double(), k.double(), v.double()), case, atol=1e-4)
        expect(probe.largest < n * n // 4,
               f"{case}: your function built a tensor of {probe.largest} entries, the size of the (n, n) score "
               f"matrix; keep one (block, block) tile of scores at a time")
        needed = sum(2 * rows * cols * (8 + 8) for rows, cols in _tiles(n, block))  # S_ij and P_ij V_j per tile
        expect(flops.get_total_flops() <= 1.25 * needed,
               f"{case}: your matrix products cost {flops.get_total_flops():,} floating-point operations, the tiles "
               f"on and below the diagonal need {needed:,}: skip the tiles above the diagonal (key block j > query "
               "block i), in which every pair is masked")
        return 3

    return count_cases(sizes, one) + count_cases([(256, 32)], skips_and_never_holds_the_matrix)
