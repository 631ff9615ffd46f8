r"""Sparse attention: factorized patterns that cost O(n sqrt n) instead of O(n^2) (chapter 9).

Full self-attention scores every query against every key: an :math:`n \times n` matrix per head,
O(n^2) time and memory. The Sparse Transformer :cite:`child2019` lets position :math:`i` attend only
to a set :math:`A_i` of about :math:`\sqrt n` positions, chosen so that every position still reaches
every other one in two steps (two layers, or two heads). With a stride :math:`\ell` (about
:math:`\sqrt n`), and positions counted from 0:

- **strided**: :math:`A_i = \{j : |i - j| < \ell\} \cup \{j : (i - j) \bmod \ell = 0\}`, the previous
  :math:`\ell` positions (a local band) and every :math:`\ell`-th position (a "column");
- **fixed**: :math:`A_i = \{j : \lfloor j/\ell \rfloor = \lfloor i/\ell \rfloor\} \cup
  \{j : j \bmod \ell \ge \ell - c\}`, the block of length :math:`\ell` that holds :math:`i` and the
  last :math:`c` positions ("summary" cells) of every block;

and the causal (autoregressive) variants keep only :math:`j \le i`. ``strided_pattern`` and
``fixed_pattern`` return these sets as boolean (n, n) masks, ``True`` = attend (the convention of
``torch.nn.functional.scaled_dot_product_attention`` and of all of ``course_lib``).

``strided_attention`` and ``fixed_attention`` compute softmax attention restricted to a pattern
**without building the n x n matrix**: the sequence is cut into ``ceil(n / stride)`` blocks of
``stride`` positions, and each query's allowed keys are split into disjoint groups that are dense
inside a block layout:

- strided: the band, in the query's own block and the previous one (the next one too when not
  causal), and the column (the same offset inside every other block, a transpose of the block layout);
- fixed: the query's own block and the summary cells of the other blocks (a gather of ``c`` keys
  per block).

Each group is scored separately and the softmax over their union is assembled from per-group row
maxima, row sums and partial outputs (as FlashAttention :cite:`dao2022` merges its tiles), so the
result equals dense attention with the pattern mask (tested, values and gradients). With ``stride``
about :math:`\sqrt n` every query scores about :math:`3\sqrt n` keys: O(n sqrt n) time and memory.

Shapes: ``B`` batch, ``H`` heads, ``n`` sequence length, ``d`` key size, ``d_v`` value size.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ._validation import as_lengths, check_floating, check_ndim, check_positive_int, check_probability, check_tensor
from .masking import causal_mask, lengths_to_mask, masked_softmax
from .multihead import KVCache, MultiHeadAttention, store_attention_weights
from .transformer import TransformerDecoderBlock, TransformerEncoderBlock

__all__ = [
    "PATTERNS",
    "SparseMultiHeadAttention",
    "default_stride",
    "dense_attention",
    "fixed_attention",
    "fixed_pattern",
    "fused_attention",
    "peak_memory",
    "strided_attention",
    "strided_pattern",
    "use_sparse_attention",
]

PATTERNS = ("strided", "fixed")


# --- the patterns as dense boolean masks (for small n, plots and tests) -----------------------------


def _check_bool(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def _check_c(c: object, stride: int) -> int:
    check_positive_int(c, "c")
    if c > stride:
        raise ValueError(f"c (the number of summary cells per block) must be at most stride = {stride}, got c = {c}")
    return int(c)


def _strided_rule(i: torch.Tensor, j: torch.Tensor, stride: int, causal: bool) -> torch.Tensor:
    """Does query position ``i`` attend to key position ``j``? (broadcasting integer tensors)"""
    diff = i - j
    keep = (diff.abs() < stride) | (diff.remainder(stride) == 0)
    return keep & (diff >= 0) if causal else keep


def _fixed_rule(i: torch.Tensor, j: torch.Tensor, stride: int, c: int, causal: bool) -> torch.Tensor:
    keep = (i.div(stride, rounding_mode="floor") == j.div(stride, rounding_mode="floor")) | (
        j.remainder(stride) >= stride - c)
    return keep & (j <= i) if causal else keep


def strided_pattern(n: int, stride: int, causal: bool = True,
                    device: torch.device | str | None = None) -> torch.Tensor:
    r"""The strided pattern of :cite:`child2019` as a boolean mask.

    Query ``i`` attends to key ``j`` when :math:`|i - j| < \ell` (the previous ``stride`` positions,
    itself included) or :math:`(i - j) \bmod \ell = 0` (every ``stride``-th position), with
    :math:`\ell` = ``stride``; the causal variant also requires :math:`j \le i`. (The paper's band
    :math:`\{\max(0, i - \ell), \dots, i\}` has one more position, :math:`i - \ell`, which the
    column holds anyway: the union is the same.)

    Args:
        n: sequence length.
        stride: :math:`\ell \ge 1`, about :math:`\sqrt n` in the paper.
        causal: keep only ``j <= i``.
        device: where to build the mask.

    Returns:
        (n, n) bool tensor, ``True`` = attend; row ``i`` is the set :math:`A_i`.
    """
    check_positive_int(n, "n")
    check_positive_int(stride, "stride")
    _check_bool(causal, "causal")
    pos = torch.arange(n, device=device)
    return _strided_rule(pos[:, None], pos[None, :], int(stride), causal)


def fixed_pattern(n: int, stride: int, c: int, causal: bool = True,
                  device: torch.device | str | None = None) -> torch.Tensor:
    r"""The fixed pattern of :cite:`child2019` as a boolean mask.

    Query ``i`` attends to key ``j`` when both lie in the same block of ``stride`` positions
    (:math:`\lfloor i/\ell\rfloor = \lfloor j/\ell\rfloor`) or ``j`` is one of the last ``c``
    positions of its block (:math:`j \bmod \ell \ge \ell - c`, a "summary" cell); the causal
    variant also requires :math:`j \le i`. A last block shorter than :math:`\ell - c + 1` has no
    summary cell, so in the non-causal pattern no other block reaches it: take ``n`` a multiple
    of ``stride``.

    Args:
        n: sequence length.
        stride: :math:`\ell \ge 1`, the block length.
        c: summary cells per block, ``1 <= c <= stride``.
        causal: keep only ``j <= i``.
        device: where to build the mask.

    Returns:
        (n, n) bool tensor, ``True`` = attend.
    """
    check_positive_int(n, "n")
    check_positive_int(stride, "stride")
    c = _check_c(c, stride)
    _check_bool(causal, "causal")
    pos = torch.arange(n, device=device)
    return _fixed_rule(pos[:, None], pos[None, :], int(stride), c, causal)


def _pattern_rows(pattern: str, q_pos: torch.Tensor, n_keys: int, stride: int, c: int,
                  causal: bool) -> torch.Tensor:
    """(len(q_pos), n_keys) rows of a pattern, for queries at the positions ``q_pos``."""
    j = torch.arange(n_keys, device=q_pos.device)[None, :]
    i = q_pos[:, None]
    return _strided_rule(i, j, stride, causal) if pattern == "strided" else _fixed_rule(i, j, stride, c, causal)


def default_stride(n: int) -> int:
    r"""The stride :math:`\lceil\sqrt n\,\rceil` that balances the band and the column: about
    :math:`2\sqrt n` keys per query instead of :math:`n`."""
    check_positive_int(n, "n")
    return math.isqrt(n - 1) + 1


# --- dense baselines ----------------------------------------------------------------------------


def dense_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                    mask: torch.Tensor | None = None) -> torch.Tensor:
    r"""Explicit scaled dot-product attention: the (..., n_q, n_k) score matrix, a masked softmax, a product.

    .. math:: \operatorname{softmax}\big(\mathbf Q\mathbf K^\top/\sqrt d\,\big)\mathbf V

    Args:
        queries: (..., n_q, d)
        keys: (..., n_k, d)
        values: (..., n_k, d_v)
        mask: optional bool, broadcastable to (..., n_q, n_k), ``True`` = attend.

    Returns:
        (..., n_q, d_v); a query with no allowed key gets the zero vector.
    """
    _check_batched_qkv(queries, keys, values, same_length=False)
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])  # (..., n_q, n_k)
    return masked_softmax(scores, mask=mask) @ values


def fused_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                    mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
    """The same through ``torch.nn.functional.scaled_dot_product_attention`` (fused kernels).

    On a CPU (and with a memory-efficient or flash kernel on a GPU) the scores are computed block by
    block and never stored whole: O(n) memory, but still O(n^2) time.

    Args:
        queries, keys, values: as in :func:`dense_attention`.
        mask: optional bool, broadcastable to (..., n_q, n_k), ``True`` = attend.
        is_causal: the look-ahead mask of :func:`course_lib.causal_mask` (bottom-right aligned, as
            everywhere in the library); built by the kernel when ``n_q == n_k``; not with ``mask``.

    Returns:
        (..., n_q, d_v); a query with no allowed key gets the zero vector.
    """
    _check_batched_qkv(queries, keys, values, same_length=False)
    _check_bool(is_causal, "is_causal")
    n_q, n_k = queries.shape[-2], keys.shape[-2]
    if mask is None and is_causal and n_q != n_k:
        # SDPA's own is_causal is aligned top-left: the same as ours only for square masks.
        mask, is_causal = causal_mask(n_q, n_k, device=queries.device), False
    if mask is None:
        return F.scaled_dot_product_attention(queries, keys, values, is_causal=is_causal)
    if is_causal:
        raise ValueError("give either mask or is_causal=True, not both (fold the look-ahead into the mask)")
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = attend), got dtype {mask.dtype}")
    row_ok = mask.any(dim=-1, keepdim=True)
    # SDPA gives NaN or 0 for a query without keys depending on the kernel: make it finite, then zero it.
    out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask | ~row_ok)
    return out * row_ok


# --- sparse attention without the n x n matrix ---------------------------------------------------


def _check_batched_qkv(queries: object, keys: object, values: object, same_length: bool) -> None:
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        check_floating(t, name)
        if t.dim() < 2:
            raise ValueError(f"{name} must be at least 2-D (..., n, d), got shape {tuple(t.shape)}")
    if keys.shape[-1] != queries.shape[-1]:
        raise ValueError(f"queries and keys must have the same size d in the last axis, got shapes "
                         f"{tuple(queries.shape)} and {tuple(keys.shape)}")
    if keys.shape[-2] != values.shape[-2] or keys.shape[:-2] != values.shape[:-2]:
        raise ValueError(f"keys and values must agree in every axis but the last, got shapes "
                         f"{tuple(keys.shape)} and {tuple(values.shape)}")
    if same_length and queries.shape[:-1] != keys.shape[:-1]:
        raise ValueError(f"sparse self-attention needs queries and keys of the same shape (..., n, d), got "
                         f"{tuple(queries.shape)} and {tuple(keys.shape)}")


def _blocks(x: torch.Tensor, stride: int) -> torch.Tensor:
    """(B, H, n, f) -> (B, H, nb, stride, f) with nb = ceil(n / stride), padded with zeros (or False)."""
    n = x.shape[2]
    pad = -n % stride
    if pad:
        x = torch.cat([x, x.new_zeros(x.shape[0], x.shape[1], pad, x.shape[3])], dim=2)
    return x.unflatten(2, (x.shape[2] // stride, stride))


def _prepare(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, stride: object, causal: object,
             valid_lens: object, key_mask: object, dropout_p: float
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, bool]:
    """Validate; return 4-D q, k, v, the key validity (B or 1, 1, n, 1), per-query lengths or None, squeeze."""
    _check_batched_qkv(queries, keys, values, same_length=True)
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        check_ndim(t, name, (3, 4), "(batch, n, d) or (batch, heads, n, d)")
    check_positive_int(stride, "stride")
    _check_bool(causal, "causal")
    check_probability(dropout_p, "dropout_p")
    squeeze = queries.dim() == 3
    if squeeze:
        queries, keys, values = queries.unsqueeze(1), keys.unsqueeze(1), values.unsqueeze(1)
    batch, _, n, _ = queries.shape
    if n == 0:
        raise ValueError(f"queries must hold at least one position, got shape {tuple(queries.shape)}")
    device = queries.device
    valid = torch.ones(1, 1, n, 1, dtype=torch.bool, device=device)
    lens_q = None
    if valid_lens is not None:
        lens = as_lengths(valid_lens, "valid_lens", max_len=n, device=device)
        if lens.shape == (batch,):
            valid = valid & lengths_to_mask(lens, n).view(batch, 1, n, 1)
        elif lens.shape == (batch, n):
            lens_q = lens
        else:
            raise ValueError(f"valid_lens must have shape ({batch},) or ({batch}, {n}) for queries of shape "
                             f"{tuple(queries.shape)}, got {tuple(lens.shape)}")
    if key_mask is not None:
        check_tensor(key_mask, "key_mask")
        if key_mask.dtype != torch.bool:
            raise TypeError(f"key_mask must be a bool tensor (True = attend), got dtype {key_mask.dtype}")
        if key_mask.shape not in ((batch, n), (1, n)):
            raise ValueError(f"key_mask must have shape ({batch}, {n}) (batch, n_keys), got {tuple(key_mask.shape)}")
        valid = valid & key_mask.to(device).view(key_mask.shape[0], 1, n, 1)
    return queries, keys, values, valid, lens_q, squeeze


def _query_lengths(lens_q: torch.Tensor, stride: int) -> torch.Tensor:
    """(B, n) per-query lengths -> (B, 1, nb, stride, 1), laid out like the queries' blocks."""
    return _blocks(lens_q[:, None, :, None], stride)


# Where a group of keys puts its per-query results in the common (B, H, nb, l, ...) layout: "own" is that
# layout, "prev" / "next" cover the query blocks 1..nb-1 / 0..nb-2, "column" is (B, H, l, nb, ...).
_Place = Literal["own", "prev", "next", "column"]


def _to_common(x: torch.Tensor, place: _Place, fill: float | bool) -> torch.Tensor:
    """A per-query tensor of a group, (B, H, nb', l, ...) or (B, H, l, nb, ...), in the common layout."""
    if place == "column":
        return x.transpose(2, 3)
    if place == "own":
        return x
    pad = x.new_full((*x.shape[:2], 1, *x.shape[3:]), fill)  # the query block the group does not reach
    return torch.cat([pad, x], dim=2) if place == "prev" else torch.cat([x, pad], dim=2)


def _from_common(x: torch.Tensor, place: _Place) -> torch.Tensor:
    """The inverse of :func:`_to_common`: the part of a common-layout tensor that a group uses."""
    if place == "column":
        return x.transpose(2, 3)
    return {"own": x, "prev": x[:, :, 1:], "next": x[:, :, :-1]}[place]


def _merge_groups(groups: list[tuple[_Place, torch.Tensor, torch.Tensor, torch.Tensor]],
                  dropout_p: float) -> torch.Tensor:
    r"""Softmax attention over the union of disjoint groups of keys, each scored separately.

    With :math:`m_i` the largest allowed score of query :math:`i` over all groups,
    :math:`Z_i = \sum_g \sum_{j \in g} e^{s_{ij} - m_i}` and
    :math:`\mathbf o_i = \sum_g \sum_{j \in g} e^{s_{ij} - m_i} \mathbf v_j / Z_i`: the softmax over the
    union, assembled from per-group pieces as FlashAttention merges its tiles. The scores are overwritten
    in place (masked, shifted, exponentiated), so each group holds a single score tensor.

    Args:
        groups: ``(place, scores, keep, values)``: scores (B, H, nb', l, K), or (B, H, l, nb, K) for
            ``"column"``; keep, bool, broadcastable to the scores; values such that ``weights @ values``
            is (B, H, nb', l, d_v) (or (B, H, l, nb, d_v)).
        dropout_p: dropout on the weights.

    Returns:
        (B, H, nb, l, d_v); a query with no allowed key gets 0 (and no gradient).
    """
    m = None
    for place, scores, keep, _ in groups:
        # -inf, not the lowest float: exp of a huge negative number takes a slow path on CPUs.
        scores.masked_fill_(~keep, -math.inf)
        group_max = _to_common(scores.detach().amax(dim=-1), place, -math.inf)  # (B, H, nb, l)
        m = group_max if m is None else torch.maximum(m, group_max)
    # The shift does not change the softmax, so no gradient flows through it; a query with no allowed
    # key (m = -inf) gets the shift 0, all its weights are exp(-inf) = 0 and its output 0 / tiny = 0.
    m = m.masked_fill(m == -math.inf, 0.0)
    total = out = 0
    for place, scores, _, values in groups:
        weights = scores.sub_(_from_common(m, place).unsqueeze(-1)).exp_()  # unnormalised, 0 where masked
        total = total + _to_common(weights.sum(dim=-1), place, 0.0)
        if dropout_p > 0:
            weights = F.dropout(weights, dropout_p)
        out = out + _to_common(weights @ values, place, 0.0)
    return out / total.clamp_min(torch.finfo(total.dtype).tiny).unsqueeze(-1)


def strided_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, stride: int,
                      causal: bool = True, valid_lens: torch.Tensor | None = None,
                      key_mask: torch.Tensor | None = None, dropout_p: float = 0.0) -> torch.Tensor:
    r"""Scaled dot-product self-attention inside the strided pattern, in O(n (stride + n / stride)) memory.

    Equal to :func:`dense_attention` with ``mask = strided_pattern(n, stride, causal)`` (and the
    padding), without the n x n matrix. Query ``i = b * stride + r`` (block ``b``, offset ``r``)
    scores disjoint groups of keys, each dense in the block layout:

    - its own block ``b`` and the previous block ``b - 1`` (and the next one, ``b + 1``, when not
      causal), masked to the band :math:`0 \le i - j < \ell` (:math:`|i - j| < \ell`): one
      (stride, stride) score block per pair of neighbouring blocks;
    - the column :math:`j = b' \ell + r` with :math:`b' < b` (:math:`b' \ne b`): transposing the
      block layout to (stride, nb, d) gives, for every offset ``r``, an (nb, nb) score matrix.

    The softmax over the union is assembled from the groups (see ``_merge_groups``).

    Args:
        queries: (B, n, d) or (B, H, n, d)
        keys: same shape as ``queries``
        values: (B, n, d_v) or (B, H, n, d_v)
        stride: :math:`\ell \ge 1`; :func:`default_stride` gives :math:`\lceil\sqrt n\,\rceil`.
        causal: the causal pattern (``j <= i``).
        valid_lens: optional (B,) or (B, n) integer lengths: keys ``j >= valid_lens`` are ignored.
        key_mask: optional (B, n) bool, ``False`` at keys to ignore (padding).
        dropout_p: dropout on the attention weights (applied when > 0; pass 0 in evaluation).

    Returns:
        Shaped like ``values`` with n positions; a query with no allowed key gets the zero vector.
    """
    q, k, v, valid, lens_q, squeeze = _prepare(queries, keys, values, stride, causal, valid_lens, key_mask,
                                               dropout_p)
    n, d, dev = q.shape[2], q.shape[3], q.device
    ell = int(stride)
    qb = _blocks(q / math.sqrt(d), ell)  # (B, H, nb, l, d): position b * l + r sits at [b, r]
    kb, vb, validb = _blocks(k, ell), _blocks(v, ell), _blocks(valid, ell)
    key_ok = validb.transpose(-2, -1)  # (B', 1, nb, 1, l): key s of block b is a real, unpadded position
    blk, r = torch.arange(qb.shape[2], device=dev), torch.arange(ell, device=dev)

    # Query offset r of block b against key offset s of block b': i - j = (b - b') l + r - s.
    own = r[None, :] <= r[:, None] if causal else torch.ones(ell, ell, dtype=torch.bool, device=dev)
    groups = [("own", qb @ kb.transpose(-2, -1), own & key_ok, vb),  # (B, H, nb, l, l)
              ("prev", qb[:, :, 1:] @ kb[:, :, :-1].transpose(-2, -1),  # (B, H, nb - 1, l, l)
               (r[None, :] > r[:, None]) & key_ok[:, :, :-1], vb[:, :, :-1])]
    if not causal:
        groups.append(("next", qb[:, :, :-1] @ kb[:, :, 1:].transpose(-2, -1),  # (B, H, nb - 1, l, l)
                       (r[None, :] < r[:, None]) & key_ok[:, :, 1:], vb[:, :, 1:]))
    # Column: offset r of the other blocks; with the block axes transposed, (B, H, l, nb, d).
    column = blk[None, :] < blk[:, None] if causal else blk[None, :] != blk[:, None]  # (nb query, nb key)
    column_ok = validb[..., 0].transpose(2, 3).unsqueeze(3)  # (B', 1, l, 1, nb)
    groups.append(("column", qb.transpose(2, 3) @ kb.transpose(2, 3).transpose(-2, -1),  # (B, H, l, nb, nb)
                   column & column_ok, vb.transpose(2, 3)))

    if lens_q is not None:  # per-query lengths: key j must also satisfy j < valid_lens[b, i]
        lens = _query_lengths(lens_q, ell)  # (B, 1, nb, l, 1)
        key_pos = {"own": blk[:, None, None] * ell + r, "prev": (blk[1:, None, None] - 1) * ell + r,
                   "next": (blk[:-1, None, None] + 1) * ell + r, "column": blk * ell + r[:, None, None]}
        groups = [(place, s, keep & (key_pos[place] < _from_common(lens, place)), vals)
                  for place, s, keep, vals in groups]

    out = _merge_groups(groups, dropout_p).flatten(2, 3)[:, :, :n]  # (B, H, n, d_v)
    return out.squeeze(1) if squeeze else out


def fixed_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, stride: int, c: int = 1,
                    causal: bool = True, valid_lens: torch.Tensor | None = None,
                    key_mask: torch.Tensor | None = None, dropout_p: float = 0.0) -> torch.Tensor:
    r"""Scaled dot-product self-attention inside the fixed pattern, in O(n (stride + c n / stride)) memory.

    Equal to :func:`dense_attention` with ``mask = fixed_pattern(n, stride, c, causal)`` (and the
    padding), without the n x n matrix. Query ``i`` in block ``b`` scores two disjoint groups:

    - its own block (keys ``j <= i`` of it when causal): a (stride, stride) score block per block;
    - the ``c`` summary cells (the last ``c`` positions) of every block ``b' < b``
      (``b' != b`` when not causal): ``c * nb`` keys gathered once for all queries.

    Args:
        queries, keys, values, causal, valid_lens, key_mask, dropout_p: as in :func:`strided_attention`.
        stride: :math:`\ell \ge 1`, the block length.
        c: summary cells per block, ``1 <= c <= stride``.

    Returns:
        Shaped like ``values``; a query with no allowed key gets the zero vector.
    """
    q, k, v, valid, lens_q, squeeze = _prepare(queries, keys, values, stride, causal, valid_lens, key_mask,
                                               dropout_p)
    ell = int(stride)
    c = _check_c(c, ell)
    n, d, dev = q.shape[2], q.shape[3], q.device
    qb = _blocks(q / math.sqrt(d), ell)  # (B, H, nb, l, d)
    kb, vb, validb = _blocks(k, ell), _blocks(v, ell), _blocks(valid, ell)
    nb = qb.shape[2]
    blk, r = torch.arange(nb, device=dev), torch.arange(ell, device=dev)

    own = r[None, :] <= r[:, None] if causal else torch.ones(ell, ell, dtype=torch.bool, device=dev)
    # The summary cells b' l + l - c, ..., b' l + l - 1 of every block, gathered: (B, H, nb c, d).
    ks, vs = kb[:, :, :, ell - c:].flatten(2, 3), vb[:, :, :, ell - c:].flatten(2, 3)
    key_block = blk.repeat_interleave(c)  # (nb c,)
    other = key_block[None, :] < blk[:, None] if causal else key_block[None, :] != blk[:, None]  # (nb, nb c)
    summary_ok = validb[:, :, :, ell - c:, 0].flatten(2, 3)[:, :, None, None, :]  # (B', 1, 1, 1, nb c)
    groups = [("own", qb @ kb.transpose(-2, -1), own & validb.transpose(-2, -1), vb),  # (B, H, nb, l, l)
              ("own", (qb.flatten(2, 3) @ ks.transpose(-2, -1)).unflatten(2, (nb, ell)),  # (B, H, nb, l, nb c)
               other[:, None, :] & summary_ok, vs.unsqueeze(2))]

    if lens_q is not None:  # per-query lengths: key j must also satisfy j < valid_lens[b, i]
        lens = _query_lengths(lens_q, ell)  # (B, 1, nb, l, 1)
        key_pos = [blk[:, None, None] * ell + r,  # (nb, 1, l)
                   (blk[:, None] * ell + torch.arange(ell - c, ell, device=dev)).flatten()]  # (nb c,)
        groups = [(place, s, keep & (pos < lens), vals)
                  for (place, s, keep, vals), pos in zip(groups, key_pos, strict=True)]

    out = _merge_groups(groups, dropout_p).flatten(2, 3)[:, :, :n]
    return out.squeeze(1) if squeeze else out


# --- the multi-head module and the swap into a Transformer ----------------------------------------


class SparseMultiHeadAttention(MultiHeadAttention):
    r"""Multi-head self-attention restricted to a strided or fixed pattern, never building the n x n matrix.

    A drop-in replacement for :class:`~course_lib.multihead.MultiHeadAttention` in self-attention:
    the same parameters ``W_q, W_k, W_v, W_o`` (so ``load_state_dict`` works both ways), the same
    ``forward(queries, keys, values, valid_lens=None, causal=False, mask=None, kv_cache=None)``.
    ``causal`` selects the causal variant of the pattern. Every head uses the same pattern.

    Three kernels, equal up to rounding (tested):

    - the default: :func:`strided_attention` / :func:`fixed_attention`, O(n sqrt n) memory;
    - ``need_weights=True`` (or :func:`~course_lib.multihead.store_attention_weights`): the explicit
      path with the dense pattern mask, which returns the (batch, h, n, n) weights (small n only);
    - with a ``kv_cache`` (incremental decoding): the new queries attend to the cached keys through
      their rows of the pattern, (n_new, n_keys), bottom-right aligned.

    Args:
        num_hiddens: d.
        num_heads: h; must divide ``num_hiddens``.
        pattern: ``"strided"`` or ``"fixed"``.
        stride: :math:`\ell`; ``None`` uses :func:`default_stride` of each call's length.
        c: summary cells per block of the fixed pattern (ignored by the strided one).
        dropout: dropout on the attention weights (training mode only).
        bias: give the four projections a bias.
    """

    def __init__(self, num_hiddens: int, num_heads: int, pattern: Literal["strided", "fixed"] = "strided",
                 stride: int | None = None, c: int = 1, dropout: float = 0.0, bias: bool = False) -> None:
        super().__init__(num_hiddens, num_heads, dropout, bias)
        if pattern not in PATTERNS:
            raise ValueError(f'pattern must be one of {PATTERNS}, got {pattern!r}')
        if stride is not None:
            check_positive_int(stride, "stride")
            _check_c(c, stride)
        else:
            check_positive_int(c, "c")
        self.pattern = pattern
        self.stride = None if stride is None else int(stride)
        self.c = int(c)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, pattern={self.pattern!r}, stride={self.stride}, c={self.c}"

    @classmethod
    def from_dense(cls, attention: MultiHeadAttention, pattern: Literal["strided", "fixed"] = "strided",
                   stride: int | None = None, c: int = 1) -> SparseMultiHeadAttention:
        """A sparse module with a copy of ``attention``'s weights, dropout rate, device and dtype."""
        if not isinstance(attention, MultiHeadAttention):
            raise TypeError(f"attention must be a MultiHeadAttention, got {type(attention).__name__}")
        sparse = cls(attention.num_hiddens, attention.num_heads, pattern, stride, c, attention.dropout.p,
                     bias=attention.W_q.bias is not None)
        sparse.to(device=attention.W_q.weight.device, dtype=attention.W_q.weight.dtype)
        sparse.load_state_dict(attention.state_dict())
        sparse.train(attention.training)
        return sparse

    def stride_for(self, n: int) -> int:
        """The stride used for sequences of length ``n``."""
        stride = default_stride(n) if self.stride is None else self.stride
        if self.pattern == "fixed":
            _check_c(self.c, stride)
        return stride

    def pattern_mask(self, n: int, causal: bool, device: torch.device | str | None = None) -> torch.Tensor:
        """The (n, n) bool mask this module attends inside, ``True`` = attend."""
        stride = self.stride_for(n)
        if self.pattern == "strided":
            return strided_pattern(n, stride, causal, device)
        return fixed_pattern(n, stride, self.c, causal, device)

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                valid_lens: torch.Tensor | None = None, causal: bool = False,
                mask: torch.Tensor | None = None, kv_cache: KVCache | None = None,
                need_weights: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Sparse self-attention in every head.

        Args:
            queries: (batch, n, num_hiddens)
            keys, values: (batch, n, num_hiddens), the same length as ``queries`` (self-attention);
                with a ``kv_cache``, any number of new positions.
            valid_lens: optional (batch,) or (batch, n) integer lengths: keys ``j >= valid_lens`` are
                ignored (padding).
            causal: the causal variant of the pattern (``j <= i``).
            mask: optional **key** mask (padding), bool, broadcastable to (batch, 1, 1, n_keys),
                ``True`` = attend. A general (n_queries, n_keys) mask is refused: it is the n x n
                matrix this module avoids (use :class:`MultiHeadAttention` for it).
            kv_cache: optional :class:`KVCache` for incremental decoding; query ``t`` of the new ones
                sits at position ``n_keys - n_new + t``.
            need_weights: also return the (batch, h, n_queries, n_keys) weights (the explicit path).

        Returns:
            (batch, n, num_hiddens); with ``need_weights``, also the weights.
        """
        self._check_inputs(queries, keys, values, kv_cache)
        _check_bool(causal, "causal")
        _check_bool(need_weights, "need_weights")
        batch, n_q = queries.shape[:2]
        n_k = keys.shape[1] + (0 if kv_cache is None else len(kv_cache))
        if kv_cache is None and n_q != n_k:
            raise ValueError(f"sparse self-attention needs as many queries as keys, got queries of shape "
                             f"{tuple(queries.shape)} and keys of shape {tuple(keys.shape)}")
        device = queries.device
        stride = self.stride_for(n_k)
        key_mask = None if mask is None else self._key_mask(mask, batch, n_k).to(device)  # (B or 1, n_k)
        lens = None if valid_lens is None else as_lengths(valid_lens, "valid_lens", max_len=n_k, device=device)
        if lens is not None and lens.shape not in ((batch,), (batch, n_q)):
            raise ValueError(f"valid_lens must have shape ({batch},) or ({batch}, {n_q}) for {n_q} queries and "
                             f"{n_k} keys in a batch of {batch}, got {tuple(lens.shape)}")
        q, k, v = self._project(queries, keys, values)  # (B, h, T, d_h) each
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)
        weights = None
        if need_weights or kv_cache is not None:
            keep = self._dense_keep(n_q, n_k, stride, causal, key_mask, lens, device)
            if need_weights:
                out, weights = self._explicit_attention(q, k, v, keep)
            else:
                out = self._fast_attention(q, k, v, keep, False)
        else:
            sparse = strided_attention if self.pattern == "strided" else fixed_attention
            extra = {} if self.pattern == "strided" else {"c": self.c}
            out = sparse(q, k, v, stride, causal=causal, valid_lens=lens, key_mask=key_mask,
                         dropout_p=self.dropout.p if self.training else 0.0, **extra)
        out = self.W_o(out.transpose(1, 2).reshape(batch, n_q, self.num_hiddens))  # concatenate the heads
        return (out, weights) if need_weights else out

    def _dense_keep(self, n_q: int, n_k: int, stride: int, causal: bool, key_mask: torch.Tensor | None,
                    lens: torch.Tensor | None, device: torch.device) -> torch.Tensor:
        """(B or 1, 1, n_q, n_k) bool: the pattern rows of the queries, with the padding."""
        q_pos = torch.arange(n_k - n_q, n_k, device=device)  # bottom-right aligned, as with a cache
        keep = _pattern_rows(self.pattern, q_pos, n_k, stride, self.c, causal)[None, None]
        if key_mask is not None:
            keep = keep & key_mask[:, None, None, :]
        if lens is not None:
            lens = lens.view(-1, 1, 1) if lens.dim() == 1 else lens.view(lens.shape[0], 1, n_q)
            keep = keep & lengths_to_mask(lens, n_k)  # (B, 1, 1 or n_q, n_k)
        return keep

    def _key_mask(self, mask: object, batch: int, n_k: int) -> torch.Tensor:
        check_tensor(mask, "mask")
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be a bool tensor (True = attend), got dtype {mask.dtype}")
        if mask.dim() > 4:
            raise ValueError(f"mask must have at most 4 axes (batch, heads, n_queries, n_keys), got shape "
                             f"{tuple(mask.shape)}")
        full = (1,) * (4 - mask.dim()) + tuple(mask.shape)
        if full[1:3] != (1, 1) or full[3] != n_k or full[0] not in (1, batch):
            raise ValueError(
                f"SparseMultiHeadAttention accepts only a key (padding) mask broadcastable to (batch, 1, 1, n_keys) "
                f"= ({batch}, 1, 1, {n_k}), got shape {tuple(mask.shape)}; a mask with a query axis is the "
                f"n x n matrix sparse attention avoids (use MultiHeadAttention for it)"
            )
        return mask.reshape(full[0], n_k)


def use_sparse_attention(model: nn.Module, pattern: Literal["strided", "fixed"] = "strided",
                         stride: int | None = None, c: int = 1) -> int:
    """Replace the self-attention of every Transformer block in ``model`` by a sparse one, in place.

    Encoder blocks (:class:`~course_lib.transformer.TransformerEncoderBlock`, attribute
    ``attention``) get the non-causal pattern, decoder blocks
    (:class:`~course_lib.transformer.TransformerDecoderBlock`, attribute ``self_attention``) the
    causal one, since they call it with ``causal=True``. Cross-attention stays dense (its queries
    and keys are different sequences). The new modules keep the old weights
    (:meth:`SparseMultiHeadAttention.from_dense`), so a trained model can be switched.

    Args:
        model: a module containing Transformer blocks (a block, an encoder, a decoder, a Transformer).
        pattern, stride, c: as in :class:`SparseMultiHeadAttention`.

    Returns:
        The number of attention modules replaced (already sparse ones are replaced too, with the new pattern).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    count = 0
    for module in list(model.modules()):
        name = ("attention" if isinstance(module, TransformerEncoderBlock) else
                "self_attention" if isinstance(module, TransformerDecoderBlock) else None)
        if name is not None:
            dense = getattr(module, name)
            sparse = SparseMultiHeadAttention.from_dense(dense, pattern, stride, c)
            if getattr(dense, "_weight_hooks", None):  # store_attention_weights was on: keep it on
                store_attention_weights(sparse)
            setattr(module, name, sparse)
            count += 1
    if count == 0:
        raise ValueError(f"model ({type(model).__name__}) contains no TransformerEncoderBlock or "
                         f"TransformerDecoderBlock whose self-attention could be replaced")
    return count


# --- measuring memory ---------------------------------------------------------------------------


class _LiveTensorBytes(TorchDispatchMode):
    """Count the bytes of the tensor storages created by every operation while they are alive.

    A storage is counted when an operation returns it and none of the operation's inputs holds it
    (views and in-place results share an input's storage), and uncounted when it is freed.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.current = 0
        self.peak = 0

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage()._cdata for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key = storage._cdata
            if key in self.live or key in inputs:
                continue
            self.live[key] = storage.nbytes()
            self.current += self.live[key]
            self.peak = max(self.peak, self.current)
            weakref.finalize(storage, self._free, key)
        return out


def peak_memory(fn: Callable[[], object], device: torch.device | str | None = None) -> int:
    """Peak bytes of memory that ``fn()`` allocates for tensors, its inputs excluded.

    On a CUDA device this is ``torch.cuda.max_memory_allocated`` during the call minus the memory
    allocated before it. On a CPU, every tensor an operation returns is counted while it is alive
    (a ``TorchDispatchMode`` sees each operation; views and in-place results are not new memory),
    and the peak of the running total is returned. That count sees every intermediate tensor of
    operations written in PyTorch, but not the scratch space a fused kernel allocates inside itself
    (for the CPU kernel of ``scaled_dot_product_attention``: a few tiles per thread, independent of n).

    Args:
        fn: a function of no argument (use a ``lambda``); run once, its result is dropped.
        device: the device ``fn`` computes on (``None``: the CPU).

    Returns:
        The peak in bytes.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    device = torch.device("cpu" if device is None else device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        result = fn()
        torch.cuda.synchronize(device)
        del result
        return torch.cuda.max_memory_allocated(device) - before
    counter = _LiveTensorBytes()
    with counter:
        result = fn()
        del result
    return counter.peak
