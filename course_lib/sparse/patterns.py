"""The strided and fixed patterns of the Sparse Transformer as boolean masks (small n, plots, tests)."""

from __future__ import annotations

import math

import torch

from .._validation import check_positive_int

PATTERNS = ("strided", "fixed")



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
