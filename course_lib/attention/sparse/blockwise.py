"""Attention restricted to a pattern computed block by block, never building the n x n matrix."""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F

from ..._validation import (
    as_lengths,
    check_bool,
    check_keep_mask,
    check_ndim,
    check_positive_int,
    check_probability,
    check_qkv,
    check_summary_cells,
)
from ..contract import Capabilities, check_supported, kv_groups, repeat_kv
from ..kernels.explicit import explicit_kernel
from ..kernels.fused import fused_kernel
from ..masks import MaskMod, lengths_to_mask
from ..score_mods import ScoreMod
from .patterns import PATTERNS, default_stride, pattern_mod


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
    check_qkv(queries, keys, values, layout="(batch, n, d) or (batch, heads, n, d)")
    check_ndim(queries, "queries", (3, 4), "(batch, n, d) or (batch, heads, n, d)")
    if queries.shape[:-1] != keys.shape[:-1]:
        raise ValueError(f"sparse self-attention needs queries and keys of the same shape (..., n, d), got "
                         f"{tuple(queries.shape)} and {tuple(keys.shape)}")
    check_positive_int(stride, "stride")
    check_bool(causal, "causal")
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
        if getattr(key_mask, "shape", None) not in ((batch, n), (1, n)):
            raise ValueError(f"key_mask must have shape ({batch}, {n}) (batch, n_keys), got "
                             f"{tuple(getattr(key_mask, 'shape', ()))}")
        check_keep_mask(key_mask, (batch, n), "key_mask")
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
    union, assembled from per-group pieces with the shift of the largest score over all groups, known before
    any group is exponentiated (no rescaling, unlike the online softmax of FlashAttention). The scores are overwritten
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


def strided_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    stride: int,
    causal: bool = True,
    valid_lens: torch.Tensor | None = None,
    key_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    r"""Scaled dot-product self-attention inside the strided pattern.

    Memory O(n (stride + n / stride)). Equal to :func:`dense_attention` with
    ``mask = strided_pattern(n, stride, causal)`` (and the padding), without
    the n x n matrix. Query ``i = b * stride + r`` (block ``b``, offset
    ``r``) scores disjoint groups of keys, each dense in the block layout:

    - its own block ``b`` and the previous block ``b - 1`` (and the next
      one, ``b + 1``, when not causal), masked to the band
      :math:`0 \le i - j < \ell` (:math:`|i - j| < \ell`): one
      (stride, stride) score block per pair of neighbouring blocks;
    - the column :math:`j = b' \ell + r` with :math:`b' < b`
      (:math:`b' \ne b`): transposing the block layout to (stride, nb, d)
      gives, for every offset ``r``, an (nb, nb) score matrix.

    The softmax over the union is assembled from the groups (see
    ``_merge_groups``).

    Args:
        queries: (B, n, d) or (B, H, n, d)
        keys: same shape as ``queries``
        values: (B, n, d_v) or (B, H, n, d_v)
        stride: :math:`\ell \ge 1`; :func:`default_stride` gives
            :math:`\lceil\sqrt n\,\rceil`.
        causal: the causal pattern (``j <= i``).
        valid_lens: optional (B,) or (B, n) integer lengths: keys
            ``j >= valid_lens`` are ignored.
        key_mask: optional (B, n) bool, ``False`` at keys to ignore (padding).
        dropout_p: dropout on the attention weights (applied when > 0; pass 0
            in evaluation).

    Returns:
        Shaped like ``values`` with n positions; a query with no allowed key
        gets the zero vector.

    Examples:
        >>> q, k = torch.randn(2, 10, 4), torch.randn(2, 10, 4)
        >>> v = torch.randn(2, 10, 3)
        >>> lens = torch.tensor([10, 6])  # 4 padding keys in row 2
        >>> out = strided_attention(q, k, v, stride=3, valid_lens=lens)
        >>> out.shape  # like values
        torch.Size([2, 10, 3])
        >>> # the dense (2, 10, 10) mask, built only for the check:
        >>> keep = strided_pattern(10, 3) & padding_mask(lens, 10)
        >>> torch.allclose(out, dense_attention(q, k, v, keep), atol=1e-6)
        True
    """
    q, k, v, valid, lens_q, squeeze = _prepare(
        queries, keys, values, stride, causal, valid_lens, key_mask, dropout_p
    )
    out = _strided(q, k, v, int(stride), causal, valid, lens_q, dropout_p)
    return out.squeeze(1) if squeeze else out


def _strided(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    ell: int,
    causal: bool,
    valid: torch.Tensor,
    lens_q: torch.Tensor | None,
    dropout_p: float,
) -> torch.Tensor:
    """:func:`strided_attention` on checked (B, H, n, d) inputs; ``valid``
    (B or 1, 1, n, 1) marks the real keys."""
    n, d, dev = q.shape[2], q.shape[3], q.device
    # (B, H, nb, l, d): position b * l + r sits at [b, r]
    qb = _blocks(q / math.sqrt(d), ell)
    kb, vb, validb = _blocks(k, ell), _blocks(v, ell), _blocks(valid, ell)
    key_ok = validb.transpose(-2, -1)  # (B', 1, nb, 1, l): the real keys
    blk = torch.arange(qb.shape[2], device=dev)
    r = torch.arange(ell, device=dev)

    # Band: query offset r of block b against key offset s of block b'
    # is i - j = (b - b') l + r - s; it lies in blocks b and b - 1
    # (and b + 1 when not causal).
    if causal:
        own = r[None, :] <= r[:, None]
    else:
        own = torch.ones(ell, ell, dtype=torch.bool, device=dev)
    kt = kb.transpose(-2, -1)
    before = (r[None, :] > r[:, None]) & key_ok[:, :, :-1]
    groups = [  # (place, scores, keep, values)
        ("own", qb @ kt, own & key_ok, vb),  # (B, H, nb, l, l)
        # (B, H, nb - 1, l, l): block b against block b - 1
        ("prev", qb[:, :, 1:] @ kt[:, :, :-1], before, vb[:, :, :-1]),
    ]
    if not causal:
        after = (r[None, :] < r[:, None]) & key_ok[:, :, 1:]
        groups.append(
            ("next", qb[:, :, :-1] @ kt[:, :, 1:], after, vb[:, :, 1:])
        )
    # Column: offset r of the other blocks; with the block axes
    # transposed, (B, H, l, nb, d), one (nb, nb) score matrix per r.
    if causal:
        column = blk[None, :] < blk[:, None]
    else:
        column = blk[None, :] != blk[:, None]
    # (B', 1, l, 1, nb): the real keys of the column
    column_ok = validb[..., 0].transpose(2, 3).unsqueeze(3)
    qc, kc = qb.transpose(2, 3), kb.transpose(2, 3)
    groups.append(
        ("column", qc @ kc.transpose(-2, -1),  # (B, H, l, nb, nb)
         column & column_ok, vb.transpose(2, 3))
    )
    if lens_q is not None:  # a length per query: keys j < valid_lens[b, i]
        groups = _strided_query_lengths(groups, lens_q, ell, blk, r)
    # The softmax over the union of the groups, then (B, H, n, d_v).
    return _merge_groups(groups, dropout_p).flatten(2, 3)[:, :, :n]


def _strided_query_lengths(groups: list, lens_q: torch.Tensor, ell: int, blk: torch.Tensor,
                           r: torch.Tensor) -> list:
    """The groups of :func:`_strided` with key ``j`` also kept only where ``j < valid_lens[b, i]``."""
    lens = _query_lengths(lens_q, ell)  # (B, 1, nb, l, 1)
    key_pos = {
        "own": blk[:, None, None] * ell + r,
        "prev": (blk[1:, None, None] - 1) * ell + r,
        "next": (blk[:-1, None, None] + 1) * ell + r,
        "column": blk * ell + r[:, None, None],
    }
    return [(place, s, keep & (key_pos[place] < _from_common(lens, place)), vals)
            for place, s, keep, vals in groups]


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

    Examples:
        >>> q, k, v = torch.randn(2, 3, 12, 4), torch.randn(2, 3, 12, 4), torch.randn(2, 3, 12, 5)  # (B, H, n, d)
        >>> out = fixed_attention(q, k, v, stride=4, c=1, causal=False)
        >>> out.shape, torch.allclose(out, dense_attention(q, k, v, fixed_pattern(12, 4, 1, causal=False)), atol=1e-6)
        (torch.Size([2, 3, 12, 5]), True)
    """
    q, k, v, valid, lens_q, squeeze = _prepare(queries, keys, values, stride, causal, valid_lens, key_mask,
                                               dropout_p)
    out = _fixed(q, k, v, int(stride), check_summary_cells(c, int(stride)), causal, valid, lens_q, dropout_p)
    return out.squeeze(1) if squeeze else out


def _fixed(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ell: int, c: int, causal: bool, valid: torch.Tensor,
           lens_q: torch.Tensor | None, dropout_p: float) -> torch.Tensor:
    """:func:`fixed_attention` on checked (B, H, n, d) inputs; ``valid`` (B or 1, 1, n, 1) marks real keys."""
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

    return _merge_groups(groups, dropout_p).flatten(2, 3)[:, :, :n]  # (B, H, n, d_v)


class SparseKernel:
    r"""Chapter 9's sparse attention as a kernel (registered as ``"sparse"``): a pattern, not a module.

    ``MultiHeadAttention(d, h, kernel=SparseKernel("strided"))`` attends inside the pattern; the
    pattern's causal variant is used when the call asks for ``causal``. Three computations, equal up
    to rounding (tested):

    - self-attention (as many queries as keys): :func:`strided_attention` / :func:`fixed_attention`,
      O(n sqrt n) memory, never the n x n matrix;
    - ``need_weights`` (recording the weights): the explicit kernel with the dense pattern mask (small n
      only);
    - new queries against more keys (a key/value cache), or a ``scale``: their rows of the pattern,
      bottom-right aligned, through the fused kernel.

    The mask may only mark keys (padding): bool, broadcastable to (B, 1, 1, n_keys). A mask with a
    query axis is the n x n matrix sparse attention avoids, and is refused (as are score modifiers).

    Args:
        pattern: ``"strided"`` or ``"fixed"``.
        stride: :math:`\ell`; ``None`` uses :func:`default_stride` of each call's number of keys.
        c: summary cells per block of the fixed pattern (ignored by the strided one).

    Examples:
        >>> kernel = SparseKernel("strided", stride=3)
        >>> q = k = v = torch.randn(1, 2, 9, 4)
        >>> sparse, _ = kernel(q, k, v, causal=True)
        >>> dense, _ = explicit_kernel(q, k, v, strided_pattern(9, 3))
        >>> torch.allclose(sparse, dense, atol=1e-6)
        True
    """

    name = "sparse"
    supports = Capabilities(query_masks=False, score_mods=False)

    def __init__(self, pattern: str = "strided", stride: int | None = None, c: int = 1) -> None:
        if pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
        if stride is not None:
            check_summary_cells(c, check_positive_int(stride, "stride"))
        else:
            check_positive_int(c, "c")
        self.pattern, self.stride, self.c = pattern, None if stride is None else int(stride), int(c)

    def __repr__(self) -> str:
        return f"SparseKernel({self.pattern!r}, stride={self.stride}, c={self.c})"

    def stride_for(self, n: int) -> int:
        """The stride used for ``n`` keys.

        Examples:
            >>> SparseKernel("strided").stride_for(50), SparseKernel("fixed", stride=4).stride_for(50)
            (8, 4)
        """
        stride = default_stride(n) if self.stride is None else self.stride
        if self.pattern == "fixed":
            check_summary_cells(self.c, stride)
        return stride

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 mask: torch.Tensor | MaskMod | None = None, *, causal: bool = False, dropout_p: float = 0.0,
                 scale: float | None = None, score_mod: ScoreMod | None = None,
                 need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Args and returns: see :mod:`course_lib.attention.contract` (a key mask only, no score modifier)."""
        check_supported(self, mask=mask, score_mod=score_mod)
        n_q, n_k = q.shape[-2], k.shape[-2]
        stride = self.stride_for(n_k)
        if need_weights or n_q != n_k or scale is not None:
            keep = pattern_mod(self.pattern, stride, self.c, causal).materialize(n_q, n_k, device=q.device)
            keep = keep if mask is None else keep & mask
            kernel = explicit_kernel if need_weights else fused_kernel
            return kernel(q, k, v, keep, dropout_p=dropout_p, scale=scale, need_weights=need_weights)
        groups = kv_groups(q, k)
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)  # grouped-query heads: one key/value head per query head
        valid = torch.ones(1, 1, n_k, 1, dtype=torch.bool, device=q.device)
        if mask is not None:
            full = (1,) * (4 - mask.dim()) + tuple(mask.shape)
            if mask.dim() > 4 or full[1:3] != (1, 1):
                raise ValueError(
                    f"a sparse kernel takes only a key (padding) mask, broadcastable to (batch, 1, 1, n_keys), got "
                    f"shape {tuple(mask.shape)}; a mask with a query axis is the n x n matrix sparse attention "
                    f"avoids (use the dense kernel for it)")
            valid = valid & mask.reshape(full).expand(full[0], 1, 1, n_k).reshape(full[0], 1, n_k, 1)
        if self.pattern == "strided":
            return _strided(q, k, v, stride, causal, valid, None, dropout_p), None
        return _fixed(q, k, v, stride, self.c, causal, valid, None, dropout_p), None
