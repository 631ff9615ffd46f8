r"""Exact attention computed tile by tile with the online softmax: FlashAttention-2 in plain PyTorch (chapter 10).

Standard attention forms the :math:`n_q \times n_k` score matrix :math:`\mathbf S = \mathbf Q\mathbf K^\top/\sqrt d`,
its row-wise softmax :math:`\mathbf P` and then :math:`\mathbf O = \mathbf P\mathbf V`: O(n^2) extra memory, and
on a GPU O(n^2) reads and writes of slow main memory (HBM). FlashAttention (Dao et al. 2022) computes the
same :math:`\mathbf O` without ever holding :math:`\mathbf S` or :math:`\mathbf P`, tile by tile, with the softmax
over each row assembled *online* (Milakov & Gimelshein 2018). This module runs **FlashAttention-2's** loop
order and bookkeeping (Dao 2024, ICLR; arXiv:2307.08691, 2023): the queries are cut into blocks of
``block_q`` rows (the outer loop) and the keys and values into blocks of ``block_k`` rows (the inner loop).
With the running maximum :math:`m`, the running denominator :math:`\ell` and the unnormalised output
:math:`\tilde{\mathbf o}` of a query, kept on chip for the whole inner loop, a new tile of scores
:math:`\mathbf s` (and its values :math:`\mathbf V_j`) updates them as

.. math::
   m' = \max(m, \max_j s_j),\qquad
   \ell' = e^{m - m'}\,\ell + \sum_j e^{s_j - m'},\qquad
   \tilde{\mathbf o}' = e^{m - m'}\,\tilde{\mathbf o} + \sum_j e^{s_j - m'}\,\mathbf v_j ,

and after the last tile the division by :math:`\ell` is done once, :math:`\mathbf o = \tilde{\mathbf o}/\ell`,
and only the log-sum-exp of the row, :math:`L = m + \log \ell`, is written with :math:`\mathbf o` for the
backward pass. The factor :math:`e^{m - m'}` rescales what was summed against the old maximum when the
maximum grows; nothing is approximated, so the result equals softmax attention up to rounding. Extra
memory: one tile of scores and O(n) accumulators instead of O(n^2).

FlashAttention-1 (Dao et al. 2022, Algorithm 1) loops the other way: keys and values in the outer loop,
query blocks in the inner one, so at every tile it reads :math:`\mathbf O_i`, :math:`\ell_i` and :math:`m_i`
back from HBM, rescales :math:`\mathbf O_i` by :math:`\operatorname{diag}(\ell_i^{new})^{-1}` and writes all
three again; it keeps both :math:`\ell` and :math:`m` for the backward pass. Both orders compute the same
output; :func:`flash_io` counts the reads and writes of the order run here and :func:`flash1_io` those of
FlashAttention-1's, to compare with the bound :math:`\Theta(n^2 d^2 / M)` of that paper's Theorem 2.

The backward pass recomputes instead of storing: only :math:`\mathbf O` and :math:`L` are kept, and for
each tile :math:`\mathbf P_{ij} = \exp(\mathbf S_{ij} - L_i)` is rebuilt from :math:`\mathbf Q_i`,
:math:`\mathbf K_j` and :math:`L`. With :math:`D_i = \sum_c dO_{ic} O_{ic}` (the row sums of
:math:`d\mathbf O \circ \mathbf O`, which equal :math:`\sum_j P_{ij}\, dP_{ij}`), the softmax's gradient
is :math:`d\mathbf S = \mathbf P \circ (d\mathbf P - D)` with :math:`d\mathbf P = d\mathbf O\,\mathbf V^\top`,
and :math:`d\mathbf Q`, :math:`d\mathbf K`, :math:`d\mathbf V` are sums over tiles, visited as in
FlashAttention-2's backward pass: key/value blocks in the outer loop, :math:`d\mathbf Q` accumulated.

Tiles in which no query may see any key (above the diagonal with ``causal``, outside a window, padding)
are skipped, and tiles in which every pair is kept need no mask: :func:`flash_tile_map` gives the plan,
:func:`flash_io` counts the reads and writes it implies, and :func:`online_softmax` shows the running
maximum and denominator of one row seen in blocks.

This is the algorithm, not the speed of a fused kernel: each tile is a few PyTorch calls, so on a CPU it
is slower than ``torch.nn.functional.scaled_dot_product_attention`` (a fused C++ kernel that tiles the
same way). It is still several times faster than the explicit kernel on a CPU, with or without tiles
skipped (chapter 10 measures it): the explicit kernel passes over n x n scores and weights that do not fit
in cache. The size of the speed-up the papers report on GPUs comes from fewer trips to HBM, the tiles
living in on-chip SRAM.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch.autograd.function import once_differentiable

from ..._validation import (
    check_bool,
    check_floating,
    check_keep_mask,
    check_non_negative_int,
    check_positive,
    check_positive_int,
    check_qkv,
)
from ..contract import Capabilities, as_heads, from_heads, kv_groups, repeat_kv
from ..masks import MaskMod, causal_mod, query_offset
from ..score_mods import ScoreMod
from .explicit import explicit_kernel

__all__ = ["FlashIO", "FlashKernel", "OnlineSoftmax", "flash1_io", "flash_attention", "flash_io", "flash_tile_map",
           "online_softmax"]

# A tile's state in the plan: no pair kept (skipped), some pairs kept (masked inside), every pair kept.
SKIPPED, PARTIAL, FULL = 0, 1, 2


class OnlineSoftmax(NamedTuple):
    """What :func:`online_softmax` returns.

    Attributes:
        weights: (..., n), the softmax of the row.
        lse: (...,), its log-sum-exp :math:`m + \\log \\ell` (``-inf`` for a row of ``-inf``).
        maxima: (..., n_blocks), the running maximum :math:`m` after each block.
        denominators: (..., n_blocks), the running denominator :math:`\\ell` after each block, a sum of
            :math:`e^{x_j - m}` against that block's running maximum.

    Examples:
        >>> result = online_softmax(torch.zeros(2, 5), block=2)  # two rows of 5 scores, blocks of 2, 2 and 1
        >>> result.weights.shape, result.lse.shape, result.maxima.shape, result.denominators[0]
        (torch.Size([2, 5]), torch.Size([2]), torch.Size([2, 3]), tensor([2., 4., 5.]))
    """

    weights: torch.Tensor
    lse: torch.Tensor
    maxima: torch.Tensor
    denominators: torch.Tensor


def online_softmax(x: torch.Tensor, block: int) -> OnlineSoftmax:
    r"""Softmax over the last axis, reading it in blocks of ``block`` entries (Milakov & Gimelshein 2018).

    One pass keeps the running maximum :math:`m` and the running denominator
    :math:`\ell = \sum_{j \text{ seen}} e^{x_j - m}`; when a block raises the maximum from :math:`m` to
    :math:`m'`, the sum so far is rescaled by :math:`e^{m - m'}`. The weights are then
    :math:`e^{x_j - m}/\ell` with the final :math:`m` and :math:`\ell` (FlashAttention avoids this second
    pass by rescaling its output accumulator instead). ``-inf`` entries (masked keys) get weight 0; a row
    of ``-inf`` gets all-zero weights and ``lse = -inf``.

    Args:
        x: (..., n) floating-point scores.
        block: the block length, >= 1 (the last block may be shorter).

    Returns:
        An :class:`OnlineSoftmax`: ``weights`` (..., n), ``lse`` (...,), and the history ``maxima`` and
        ``denominators`` (..., ceil(n / block)).

    Examples:
        >>> x = torch.tensor([1.0, 3.0, 2.0, 5.0])
        >>> steps = online_softmax(x, block=2)
        >>> steps.maxima  # after [1, 3], then after [2, 5]
        tensor([3., 5.])
        >>> steps.denominators  # e^-2 + e^0, then (e^-2 + e^0) e^(3-5) + e^-3 + e^0
        tensor([1.1353, 1.2034])
        >>> torch.allclose(steps.weights, torch.softmax(x, -1)), torch.allclose(steps.lse, x.logsumexp(-1))
        (True, True)
    """
    check_floating(x, "x")
    if x.dim() == 0:
        raise ValueError("x must have at least one axis (..., n), got a 0-d tensor")
    block = check_positive_int(block, "block")
    n = x.shape[-1]
    m = x.new_full(x.shape[:-1], -math.inf)
    denominator = x.new_zeros(x.shape[:-1])
    maxima, denominators = [], []
    for start in range(0, n, block):
        chunk = x[..., start:start + block]
        m_new = torch.maximum(m, chunk.amax(-1))
        shift = _finite_shift(m_new)
        denominator = denominator * torch.exp(m - shift) + torch.exp(chunk - shift[..., None]).sum(-1)
        m = m_new
        maxima.append(m)
        denominators.append(denominator)
    shift = _finite_shift(m)
    weights = torch.exp(x - shift[..., None]) / denominator.clamp_min(1.0)[..., None]
    history = (torch.stack(maxima, -1), torch.stack(denominators, -1)) if maxima else (
        x.new_zeros(x.shape[:-1] + (0,)), x.new_zeros(x.shape[:-1] + (0,)))
    return OnlineSoftmax(weights, m + torch.log(denominator), *history)


def _finite_shift(m: torch.Tensor) -> torch.Tensor:
    """The running maximum used as the exponent's shift, 0 where no entry has been seen (m = -inf).

    exp(s - 0) is then exp(-inf) = 0 for the masked entries, instead of exp(-inf - (-inf)) = NaN.
    """
    return m.masked_fill(m == -math.inf, 0.0)


def _blocks(n: int, size: int) -> list[tuple[int, int]]:
    """The (start, stop) of each block of ``size`` along an axis of ``n``; the last may be shorter."""
    return [(start, min(start + size, n)) for start in range(0, n, size)]


def _rule(mask: torch.Tensor | MaskMod | None, causal: bool, n_q: int, n_k: int) -> MaskMod | None:
    """The call's mask and look-ahead rule as one rule (``None`` when every pair is kept): tiles read rules."""
    rule = MaskMod.from_keep(mask, n_q, n_k) if isinstance(mask, torch.Tensor) else mask
    if causal:
        rule = causal_mod() if rule is None else rule & causal_mod()
    return rule


def _tile_states(rule: MaskMod | None, lead: tuple[int, ...], n_q: int, n_k: int, block_q: int,
                 block_k: int) -> torch.Tensor:
    """The plan (n_query_blocks, n_key_blocks) of SKIPPED / PARTIAL / FULL, from the rule's block lists.

    A tile is computed when some batch row and head keeps some pair of it (tiles are shared by all of
    them), and needs no mask when every pair is kept for every batch row and head.
    """
    n_qb, n_kb = -(-n_q // block_q), -(-n_k // block_k)
    if rule is None or n_qb * n_kb == 0:
        return torch.full((n_qb, n_kb), FULL, dtype=torch.int8)
    some, every = rule.blocks(n_q, n_k, block_q, block_k, batch=lead[0] if lead else None,
                              heads=lead[1] if len(lead) > 1 else None)
    return (some.to(torch.int8) + (some & every).to(torch.int8)).cpu()


def flash_tile_map(n_queries: int, n_keys: int, block_q: int = 128, block_k: int = 128,
                   mask: torch.Tensor | MaskMod | None = None, *, causal: bool = False) -> torch.Tensor:
    """Which (query block, key block) tiles :func:`flash_attention` computes, and which need a mask.

    A tile is skipped (0) when no query of its block may see any key of its block, for every batch row
    and head: above the diagonal with ``causal``, outside a band, padding. It is partial (1) when some
    pairs are masked (the mask is applied inside it) and full (2) when every pair is kept (no mask
    needed). The last block of each axis may be shorter.

    Args:
        n_queries, n_keys: the lengths.
        block_q, block_k: the block sizes, >= 1.
        mask: optional bool keep-mask broadcastable to (batch, heads, n_queries, n_keys), ``True`` = attend,
            or a :class:`~course_lib.attention.masks.MaskMod`; the batch and head axes are reduced: a tile is
            skipped only if it is empty for all of them.
        causal: the bottom-right aligned look-ahead rule (query ``i`` sees keys ``j <= i + n_keys - n_queries``).

    Returns:
        (ceil(n_queries / block_q), ceil(n_keys / block_k)) int8 tensor of 0, 1, 2.

    Examples:
        >>> flash_tile_map(6, 6, 2, 2, causal=True)  # diagonal tiles are partial, the ones above skipped
        tensor([[1, 0, 0],
                [2, 1, 0],
                [2, 2, 1]], dtype=torch.int8)
    """
    n_queries = check_non_negative_int(n_queries, "n_queries")
    n_keys = check_non_negative_int(n_keys, "n_keys")
    block_q, block_k = check_positive_int(block_q, "block_q"), check_positive_int(block_k, "block_k")
    check_bool(causal, "causal")
    lead: tuple[int, ...] = ()
    if mask is not None and not isinstance(mask, MaskMod):
        check_keep_mask(mask, (*getattr(mask, "shape", ())[:-2], n_queries, n_keys))
        mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape)) if mask.dim() < 4 else mask
        if mask.dim() > 4:  # more leading axes than (batch, heads): fold them into the batch
            mask = mask.flatten(0, -4)
        lead = tuple(mask.shape[:2])
    return _tile_states(_rule(mask, causal, n_queries, n_keys), lead, n_queries, n_keys, block_q, block_k)


class FlashIO(NamedTuple):
    """Elements moved between main memory (HBM) and fast on-chip memory by one forward pass, one head.

    Returned by :func:`flash_io` (FlashAttention-2's loop order, the one :func:`flash_attention` runs) and
    :func:`flash1_io` (FlashAttention-1's order), so the two compare field by field.

    Attributes:
        q_reads, k_reads, v_reads: elements of Q, K and V read.
        o_reads: elements of the output and its softmax statistics read back: 0 in FlashAttention-2's order
            (they stay on chip); :math:`\\mathbf O_i`, :math:`\\ell_i`, :math:`m_i` at every tile in FlashAttention-1's.
        o_writes: elements of the output and its statistics written: O and its log-sum-exp once
            (FlashAttention-2); O, :math:`\\ell`, :math:`m` initialised once and rewritten at every tile
            (FlashAttention-1).
        tiles: tiles computed (not skipped); ``total_tiles``: all tiles of the grid.
        standard: the same count for standard attention (Dao et al. 2022, Algorithm 0), which writes the
            scores and the weights to main memory and reads them back.

    Examples:
        >>> io = flash_io(256, 256, d=64, block_q=64, block_k=64)  # a 4 x 4 grid of tiles
        >>> io.k_reads == 4 * 256 * 64, io.o_writes == 256 * 64 + 256  # K once per query block; O and its lse
        (True, True)
        >>> io.total, io.standard
        (164096, 327680)
        >>> flash_io(256, 256, d=64, block_q=64, block_k=64, causal=True).tiles  # the tiles above the diagonal skipped
        10
    """

    q_reads: int
    k_reads: int
    v_reads: int
    o_reads: int
    o_writes: int
    tiles: int
    total_tiles: int
    standard: int

    @property
    def total(self) -> int:
        """All elements read and written by the tiled pass."""
        return self.q_reads + self.k_reads + self.v_reads + self.o_reads + self.o_writes


class _Grid(NamedTuple):
    """The tile plan of an IO count: which tiles are computed, and the rows of each block."""

    live: torch.Tensor  # (n_query_blocks, n_key_blocks) long, 1 where the tile is computed
    q_len: torch.Tensor  # (n_query_blocks,) rows of each query block
    k_len: torch.Tensor  # (n_key_blocks,) rows of each key/value block
    standard: int


def _grid(n_queries: int, n_keys: int, d: int, d_v: int, block_q: int, block_k: int,
          mask: torch.Tensor | None, causal: bool) -> _Grid:
    """The plan shared by :func:`flash_io` and :func:`flash1_io`, and standard attention's count."""
    states = flash_tile_map(n_queries, n_keys, block_q, block_k, mask, causal=causal)
    q_len = torch.tensor([q1 - q0 for q0, q1 in _blocks(n_queries, block_q)], dtype=torch.long)
    k_len = torch.tensor([k1 - k0 for k0, k1 in _blocks(n_keys, block_k)], dtype=torch.long)
    # Algorithm 0: read Q, K; write S; read S, write P; read P, V; write O.
    standard = n_queries * d + n_keys * d + 4 * n_queries * n_keys + n_keys * d_v + n_queries * d_v
    return _Grid((states > 0).long().reshape(len(q_len), len(k_len)), q_len, k_len, standard)


def flash_io(n_queries: int, n_keys: int, d: int, block_q: int = 128, block_k: int = 128,
             mask: torch.Tensor | None = None, *, causal: bool = False, d_v: int | None = None) -> FlashIO:
    r"""Count the main-memory reads and writes of :func:`flash_attention`'s forward pass (one batch row, one head).

    FlashAttention-2's order (Dao 2024): the outer loop reads each query block once (if it computes any
    tile), the inner loop reads each key and value block once per tile computed, and each output block
    and its log-sum-exp are written once at the end. Without skipped tiles, K and V are read
    :math:`T_q = \lceil n_q / B_q \rceil` times: :math:`2 T_q n_k d` elements. With an on-chip memory of
    :math:`M` elements and a query block of :math:`B_q = \lceil M / 4d \rceil` rows (the size
    FlashAttention-1 gives its outer, key/value block), this is :math:`\approx 8 n^2 d^2 / M`, within the
    bound :math:`\Theta(n^2 d^2 / M)` of Dao et al. (2022, Theorem 2), against :math:`\Theta(n d + n^2)` for
    standard attention, whose count (Algorithm 0) is in ``standard``. :func:`flash1_io` counts
    FlashAttention-1's order with the same arguments.

    Args:
        n_queries, n_keys: the lengths.
        d: the size of queries and keys; ``d_v``: of values (default ``d``).
        block_q, block_k: rows of a query block and of a key/value block.
        mask, causal: as in :func:`flash_attention` (tiles skipped as there).

    Returns:
        A :class:`FlashIO` of element counts (``o_reads`` is 0: the output stays on chip until written).

    Examples:
        >>> io = flash_io(1024, 1024, 64, block_q=128, block_k=128)
        >>> io.k_reads == (1024 // 128) * 1024 * 64, io.tiles, io.total < io.standard
        (True, 64, True)
        >>> flash_io(1024, 1024, 64, block_q=128, block_k=128, causal=True).tiles  # 8 * 9 / 2
        36
    """
    d = check_positive_int(d, "d")
    d_v = d if d_v is None else check_positive_int(d_v, "d_v")
    grid = _grid(n_queries, n_keys, d, d_v, block_q, block_k, mask, causal)
    keys_read = int((grid.live * grid.k_len).sum())  # key rows read, summed over the tiles computed
    q_rows = int((grid.live.any(1).long() * grid.q_len).sum())
    return FlashIO(q_reads=q_rows * d, k_reads=keys_read * d, v_reads=keys_read * d_v, o_reads=0,
                   o_writes=n_queries * (d_v + 1), tiles=int(grid.live.sum()), total_tiles=grid.live.numel(),
                   standard=grid.standard)


def flash1_io(n_queries: int, n_keys: int, d: int, block_q: int = 128, block_k: int = 128,
              mask: torch.Tensor | None = None, *, causal: bool = False, d_v: int | None = None) -> FlashIO:
    r"""Count the main-memory reads and writes of FlashAttention-1's forward pass (Dao et al. 2022, Algorithm 1).

    FlashAttention-1's order, one batch row and one head: O, :math:`\ell` and :math:`m` are initialised in
    HBM; the outer loop reads each key and value block once (if it computes any tile); the inner loop, for
    every tile computed, reads the query block :math:`\mathbf Q_i` and :math:`\mathbf O_i, \ell_i, m_i`, and
    writes :math:`\mathbf O_i, \ell_i, m_i` back. Without skipped tiles, Q and O are read
    :math:`T_k = \lceil n_k / B_k \rceil` times: about :math:`T_k\, n_q (d + 2 d_v)` elements read and
    :math:`T_k\, n_q d_v` written. The paper takes :math:`B_c = \lceil M / 4d \rceil` key/value rows and
    :math:`B_r = \min(\lceil M / 4d \rceil, d)` query rows for an on-chip memory of :math:`M` elements, which
    makes this :math:`\approx 12 n^2 d^2 / M`: its Theorem 2, :math:`\Theta(n^2 d^2 / M)`. The query block
    sets only what fits on chip, not the count (except through skipped tiles).

    Args:
        n_queries, n_keys, d, block_q, block_k, mask, causal, d_v: as in :func:`flash_io` (``block_k`` is the
            paper's :math:`B_c`, ``block_q`` its :math:`B_r`).

    Returns:
        A :class:`FlashIO` of element counts, comparable field by field with :func:`flash_io`'s.

    Examples:
        >>> M, d = 16384, 64  # an on-chip memory of M elements: B_c = ceil(M / 4d) = 64, B_r = min(64, d) = 64
        >>> io = flash1_io(1024, 1024, d, block_q=min(-(-M // (4 * d)), d), block_k=-(-M // (4 * d)))
        >>> io.k_reads == 1024 * d, io.q_reads == (1024 // 64) * 1024 * d  # K once; Q once per key block
        (True, True)
        >>> io.o_reads == io.o_writes - 1024 * (d + 2) == 16 * 1024 * (d + 2)  # O, l, m at every tile
        True
        >>> io.total > flash_io(1024, 1024, d, block_q=64, block_k=64).total  # FlashAttention-2's order moves less
        True
    """
    d = check_positive_int(d, "d")
    d_v = d if d_v is None else check_positive_int(d_v, "d_v")
    grid = _grid(n_queries, n_keys, d, d_v, block_q, block_k, mask, causal)
    keys_read = int((grid.live.any(0).long() * grid.k_len).sum())  # each key block once, if computed at all
    q_rows = int((grid.live * grid.q_len[:, None]).sum())  # query rows read, summed over the tiles computed
    return FlashIO(q_reads=q_rows * d, k_reads=keys_read * d, v_reads=keys_read * d_v,
                   o_reads=q_rows * (d_v + 2), o_writes=(n_queries + q_rows) * (d_v + 2),
                   tiles=int(grid.live.sum()), total_tiles=grid.live.numel(), standard=grid.standard)


def _schedule(states: torch.Tensor) -> tuple[list[list[tuple[int, bool]]], list[list[tuple[int, bool]]]]:
    """The plan as loops: per query block, its (key block, needs a mask); and per key block, its query blocks."""
    rows: list[list[tuple[int, bool]]] = [[] for _ in range(states.shape[0])]
    cols: list[list[tuple[int, bool]]] = [[] for _ in range(states.shape[1])]
    for i, row in enumerate(states.tolist()):
        for j, state in enumerate(row):
            if state != SKIPPED:
                rows[i].append((j, state == PARTIAL))
                cols[j].append((i, state == PARTIAL))
    return rows, cols


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulate in float32 at least (as FlashAttention does for half-precision inputs)."""
    return torch.promote_types(dtype, torch.float32)


class _Tiles(NamedTuple):
    """What every tile of one call shares: the rule and the modifier, evaluated at each tile's positions."""

    rule: MaskMod | None
    score_mod: ScoreMod | None
    lead: tuple[int, ...]
    offset: int  # the key position of query 0 (bottom-right: query_offset)

    def scores(self, q_i: torch.Tensor, k_j: torch.Tensor, rows: tuple[int, int], cols: tuple[int, int],
               partial: bool) -> torch.Tensor:
        """One tile of scores, q_i (..., Bq, d) already scaled: modified, and -inf where the rule forbids."""
        s = q_i @ k_j.transpose(-2, -1)  # (..., Bq, Bk)
        if self.score_mod is None and not partial:
            return s
        # The tile's positions only: no (n,) position vector is kept for the whole call.
        q_pos = torch.arange(rows[0] + self.offset, rows[1] + self.offset, device=s.device)
        kv_pos = torch.arange(cols[0], cols[1], device=s.device)
        if self.score_mod is not None:
            s = s + self.score_mod.evaluate(self.lead, q_pos, kv_pos, s.dtype)
        if partial:
            s = s.masked_fill(~self.rule.evaluate(self.lead, q_pos, kv_pos), -math.inf)
        return s


def _flash_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tiles: _Tiles, scale: float, block_q: int,
                   block_k: int, rows: list[list[tuple[int, bool]]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Output (..., n_q, d_v) and log-sum-exp (..., n_q) of checked (..., n, d) inputs whose leading axes broadcast.

    FlashAttention-2's forward loop (Dao 2024, Algorithm 1): query blocks outside, key/value blocks inside.
    """
    n_q, n_k, work = q.shape[-2], k.shape[-2], _work_dtype(q.dtype)
    lead = tiles.lead
    out = q.new_zeros(*lead, n_q, v.shape[-1])
    lse = torch.full((*lead, n_q), -math.inf, dtype=work, device=q.device)
    key_blocks = _blocks(n_k, block_k)
    for (q0, q1), row in zip(_blocks(n_q, block_q), rows, strict=True):
        if not row:
            continue  # no key for any query of this block: output 0, lse -inf
        q_i = q[..., q0:q1, :].to(work) * scale  # (..., Bq, d)
        m = torch.full((*lead, q1 - q0), -math.inf, dtype=work, device=q.device)  # running maximum
        total = torch.zeros_like(m)  # running denominator
        acc = torch.zeros(*lead, q1 - q0, v.shape[-1], dtype=work, device=q.device)  # unnormalised output
        for j, partial in row:
            k0, k1 = key_blocks[j]
            s = tiles.scores(q_i, k[..., k0:k1, :].to(work), (q0, q1), (k0, k1), partial)  # (..., Bq, Bk)
            m_new = torch.maximum(m, s.amax(-1))
            shift = _finite_shift(m_new)
            p = torch.exp(s - shift[..., None])  # 0 at the masked pairs
            rescale = torch.exp(m - shift)  # e^{m - m'}: the old sums were taken against the old maximum
            total = rescale * total + p.sum(-1)
            acc = rescale[..., None] * acc + p @ v[..., k0:k1, :].to(work)
            m = m_new
        # total >= 1 for a query that saw a key (its maximum contributes e^0); 0 with acc = 0 otherwise.
        out[..., q0:q1, :] = acc / total.clamp_min(1.0)[..., None]
        lse[..., q0:q1] = m + torch.log(total)  # -inf + log 0 = -inf for a query that saw no key
    return out, lse


def _flash_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                    d_out: torch.Tensor | None, d_lse: torch.Tensor | None, tiles: _Tiles, scale: float,
                    block_q: int, block_k: int, cols: list[list[tuple[int, bool]]]
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv by recomputation: each tile's weights are rebuilt from q, k and the log-sum-exp.

    FlashAttention-2's backward loop (Dao 2024, Algorithm 2): key/value blocks outside, query blocks inside.
    """
    n_q, n_k, work = q.shape[-2], k.shape[-2], _work_dtype(q.dtype)
    lead = out.shape[:-2]
    # D_i = sum_c dO_ic O_ic = sum_j P_ij dP_ij; a gradient of the lse enters as dS += P * dlse.
    delta = torch.zeros_like(lse) if d_out is None else (d_out.to(work) * out.to(work)).sum(-1)
    if d_lse is not None:
        delta = delta - d_lse.to(work)
    d_out = torch.zeros_like(out, dtype=work) if d_out is None else d_out.to(work)
    lse = lse.masked_fill(lse == -math.inf, math.inf)  # a query that saw no key: P = exp(s - inf) = 0
    dq = torch.zeros(*lead, n_q, q.shape[-1], dtype=work, device=q.device)
    dk, dv = torch.zeros_like(k, dtype=work), torch.zeros_like(v, dtype=work)
    query_blocks = _blocks(n_q, block_q)
    for (k0, k1), col in zip(_blocks(n_k, block_k), cols, strict=True):
        if not col:
            continue
        k_j, v_j = k[..., k0:k1, :].to(work), v[..., k0:k1, :].to(work)
        dk_j = dv_j = 0
        for i, partial in col:
            q0, q1 = query_blocks[i]
            q_i = q[..., q0:q1, :].to(work) * scale
            s = tiles.scores(q_i, k_j, (q0, q1), (k0, k1), partial)  # (..., Bq, Bk), recomputed
            p = torch.exp(s - lse[..., q0:q1, None])  # the weights, exactly as the forward pass normalised them
            do_i = d_out[..., q0:q1, :]
            dv_j = dv_j + p.transpose(-2, -1) @ do_i
            ds = p * (do_i @ v_j.transpose(-2, -1) - delta[..., q0:q1, None])  # dS = P o (dP - D)
            dq[..., q0:q1, :] += (ds @ k_j) * scale
            dk_j = dk_j + ds.transpose(-2, -1) @ q_i
        # Keys broadcast over several batch rows served them all: their gradients add up.
        dk[..., k0:k1, :] = dk_j.sum_to_size(k_j.shape)
        dv[..., k0:k1, :] = dv_j.sum_to_size(v_j.shape)
    return dq.sum_to_size(q.shape).to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class _FlashAttention(torch.autograd.Function):
    """The tiled forward pass; the backward pass recomputes each tile from q, k, v, the output and the lse."""

    @staticmethod
    def forward(ctx, q, k, v, rule, score_mod, scale, block_q, block_k):  # noqa: D102
        n_q, n_k = q.shape[-2], k.shape[-2]
        lead = tuple(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]))
        tiles = _Tiles(rule, score_mod, lead, query_offset(n_q, n_k))
        rows, cols = _schedule(_tile_states(rule, lead, n_q, n_k, block_q, block_k))
        out, lse = _flash_forward(q, k, v, tiles, scale, block_q, block_k, rows)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(q, k, v, out, lse)  # no n_q x n_k tensor is kept
        ctx.options = (tiles, scale, block_q, block_k, cols)
        return out, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_lse):  # noqa: D102
        q, k, v, out, lse = ctx.saved_tensors
        tiles, scale, block_q, block_k, cols = ctx.options
        if d_out is None and d_lse is None:
            return (None,) * 8
        dq, dk, dv = _flash_backward(q, k, v, out, lse, d_out, d_lse, tiles, scale, block_q, block_k, cols)
        return dq, dk, dv, None, None, None, None, None


def _tiled(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | MaskMod | None, causal: bool,
           scale: float | None, score_mod: ScoreMod | None, block_q: int,
           block_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Output and lse of (B, H, n, d) inputs (or more leading axes): the one call of the tiled computation."""
    groups = kv_groups(q, k)
    k, v = repeat_kv(k, groups), repeat_kv(v, groups)  # (B, H, n_k, d): head i reads k/v head i // G
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    rule = _rule(mask, causal, q.shape[-2], k.shape[-2])
    return _FlashAttention.apply(q, k, v, rule, score_mod, scale, block_q, block_k)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | MaskMod | None = None,
                    *, causal: bool = False, block_q: int = 128, block_k: int = 128, return_lse: bool = False,
                    scale: float | None = None,
                    score_mod: ScoreMod | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    r"""Softmax attention tile by tile with the online softmax: FlashAttention-2 (Dao 2024), forward and backward.

    Equal to ``scaled_dot_product_attention(q, k, v, mask)`` up to rounding, without the
    (n_q, n_k) matrix: see the module :mod:`course_lib.attention.kernels.flash` for the recurrences. The loop
    order and bookkeeping are FlashAttention-2's: query blocks in the outer loop and key/value blocks in the
    inner one, the division by the softmax's denominator deferred to the end of each query block, and only
    the output and the log-sum-exp saved for the backward pass (FlashAttention-1's order is counted by
    :func:`flash1_io`). Tiles with no kept pair are skipped (:func:`flash_tile_map`); the backward pass
    recomputes each tile's weights from the saved output and log-sum-exp.

    Args:
        q: (..., n_q, d) queries; with heads, (B, H, n_q, d).
        k: (..., n_k, d) keys; leading axes broadcast with ``q``'s, and 4-D keys (B, H_kv, n_k, d) may have
            fewer heads than the queries (B, H, n_q, d) when ``H_kv`` divides ``H`` (grouped-query
            attention: query head ``h`` reads key/value head ``h // (H / H_kv)``).
        v: (..., n_k, d_v) values, laid out as ``k``.
        mask: optional bool keep-mask broadcastable to (..., n_q, n_k), or a
            :class:`~course_lib.attention.masks.MaskMod` (evaluated tile by tile); ``True`` = attend.
        causal: the look-ahead rule aligned bottom-right (query ``i`` sees the keys ``j <= i + n_k - n_q``),
            and-ed with ``mask``.
        block_q, block_k: rows of a query block and of a key/value block, >= 1; they need not divide the
            lengths (the last block is shorter). On a GPU the on-chip memory sets them; here each tile
            costs a few PyTorch calls, so larger tiles run faster (the default, 128, is twice as fast as
            64 on a CPU at n = 4096) for a little more memory (one (block_q, block_k) tile of scores).
        return_lse: also return the log-sum-exp of each query's scores.
        scale: the factor of the scores (default :math:`1/\sqrt d`).
        score_mod: an additive :class:`~course_lib.attention.score_mods.ScoreMod`, added tile by tile.

    Returns:
        The output (..., n_q, d_v), and with ``return_lse`` the pair ``(output, lse)`` with ``lse``
        (..., n_q) in float32 or wider. A query that may see no key outputs the zero vector (zero
        gradient) and has ``lse = -inf`` (the log of an empty sum, as ``flex_attention`` reports it).

    Raises:
        TypeError: non-floating inputs, a non-bool mask, non-int block sizes.
        ValueError: mismatched shapes, key heads that do not divide the query heads, a mask that does not
            broadcast, a block size <= 0.

    Examples:
        >>> q, k, v = torch.randn(2, 4, 10, 8), torch.randn(2, 2, 10, 8), torch.randn(2, 2, 10, 8)
        >>> out, lse = flash_attention(q, k, v, causal=True, block_q=4, block_k=3, return_lse=True)
        >>> reference = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        >>> out.shape, lse.shape, torch.allclose(out, reference, atol=1e-6)
        (torch.Size([2, 4, 10, 8]), torch.Size([2, 4, 10]), True)
    """
    check_qkv(q, k, v)
    n_q, n_k = q.shape[-2], k.shape[-2]
    k_lead = list(k.shape[:-2])
    if q.dim() == k.dim() == 4:
        k_lead[1] = q.shape[1]  # grouped-query heads: each key/value head serves a group of query heads
    lead = torch.broadcast_shapes(q.shape[:-2], tuple(k_lead))
    if mask is not None and not isinstance(mask, MaskMod):
        check_keep_mask(mask, (*lead, n_q, n_k))
        mask = mask.to(q.device)
    check_bool(causal, "causal")
    check_bool(return_lse, "return_lse")
    block_q, block_k = check_positive_int(block_q, "block_q"), check_positive_int(block_k, "block_k")
    if scale is not None:
        check_positive(scale, "scale")
    if score_mod is not None and not isinstance(score_mod, ScoreMod):
        raise TypeError(f"score_mod must be a ScoreMod or None, got {type(score_mod).__name__}")
    q, k, v, mask, layout = as_heads(q, k, v, mask)
    out, lse = _tiled(q, k, v, mask, causal, scale, score_mod, block_q, block_k)
    out = from_heads(out, layout)
    return (out, from_heads(lse.unsqueeze(-1), layout).squeeze(-1)) if return_lse else out


class FlashKernel:
    """:func:`flash_attention` as an attention kernel (registered as ``"flash"``): the contract of
    :mod:`course_lib.attention.contract`, tile by tile in FlashAttention-2's order.

    ``MultiHeadAttention(d, h, kernel="flash")`` computes its attention tile by tile, with the same result
    as the default fused kernel (tested). Masks, rules and score modifiers (ALiBi's) are evaluated tile by
    tile, and tiles a rule empties are skipped. Two cases are handed elsewhere or refused:

    - ``need_weights`` (recording the weights for a plot): the weights are the (n_q, n_k) matrix this
      kernel exists to avoid, so the call goes to the explicit kernel, whose output equals this kernel's
      up to rounding;
    - attention dropout is not supported (``supports.dropout`` is ``False``; refused before the call):
      FlashAttention drops weights inside each tile and regenerates the same random mask in the backward
      pass from the random generator's saved state; reproducing that tile by tile is beside this chapter's
      point (use dropout 0, or ``.eval()``).

    Args:
        block_q, block_k: the block sizes of :func:`flash_attention`.

    Examples:
        >>> mha = MultiHeadAttention(16, 4, kernel=FlashKernel(block_q=3, block_k=5))
        >>> x = torch.randn(2, 7, 16)
        >>> reference = MultiHeadAttention(16, 4)
        >>> _ = reference.load_state_dict(mha.state_dict())
        >>> torch.allclose(mha(x, x, x, causal=True), reference(x, x, x, causal=True), atol=1e-6)
        True
    """

    name = "flash"
    supports = Capabilities(dropout=False)

    def __init__(self, block_q: int = 128, block_k: int = 128) -> None:
        self.block_q = check_positive_int(block_q, "block_q")
        self.block_k = check_positive_int(block_k, "block_k")

    def __repr__(self) -> str:
        return f"FlashKernel(block_q={self.block_q}, block_k={self.block_k})"

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 mask: torch.Tensor | MaskMod | None = None, *, causal: bool = False, dropout_p: float = 0.0,
                 scale: float | None = None, score_mod: ScoreMod | None = None,
                 need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Args and returns: see :mod:`course_lib.attention.contract` (``dropout_p`` must be 0)."""
        if need_weights:
            return explicit_kernel(q, k, v, mask, causal=causal, scale=scale, score_mod=score_mod)
        out, _ = _tiled(q, k, v, mask, causal, scale, score_mod, self.block_q, self.block_k)
        return out, None
