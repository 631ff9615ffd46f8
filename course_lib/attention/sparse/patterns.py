"""The strided and fixed patterns of the Sparse Transformer as boolean masks (small n, plots, tests)."""

from __future__ import annotations

import math

import torch

from ..._validation import check_bool, check_positive_int, check_summary_cells
from ..masks import MaskMod, causal_mod

PATTERNS = ("strided", "fixed")


def strided_mod(stride: int) -> MaskMod:
    r"""The strided pattern as a rule: :math:`|i - j| < \ell` or :math:`(i - j) \bmod \ell = 0` (non-causal;
    and it with :func:`course_lib.causal_mod` for the causal one).

    Examples:
        >>> torch.equal((strided_mod(2) & causal_mod()).materialize(5), strided_pattern(5, 2))
        True
    """
    stride = check_positive_int(stride, "stride")
    return MaskMod(lambda b, h, i, j: ((i - j).abs() < stride) | ((i - j).remainder(stride) == 0),
                   f"strided({stride})")


def fixed_mod(stride: int, c: int) -> MaskMod:
    r"""The fixed pattern as a rule: the same block of :math:`\ell` positions, or a summary cell
    :math:`j \bmod \ell \ge \ell - c` (non-causal; and it with :func:`course_lib.causal_mod` for the causal one).

    Examples:
        >>> torch.equal((fixed_mod(3, 1) & causal_mod()).materialize(6), fixed_pattern(6, 3, 1))
        True
    """
    stride = check_positive_int(stride, "stride")
    c = check_summary_cells(c, stride)
    return MaskMod(lambda b, h, i, j: (i.div(stride, rounding_mode="floor") == j.div(stride, rounding_mode="floor"))
                   | (j.remainder(stride) >= stride - c), f"fixed({stride}, {c})")


def pattern_mod(pattern: str, stride: int, c: int = 1, causal: bool = True) -> MaskMod:
    """The rule of ``pattern`` (``"strided"`` or ``"fixed"``), causal or not.

    Examples:
        >>> pattern_mod("fixed", 3, c=1), pattern_mod("strided", 3, causal=False)
        (MaskMod(fixed(3, 1) & causal), MaskMod(strided(3)))
        >>> torch.equal(pattern_mod("fixed", 3).materialize(6), fixed_pattern(6, 3, 1))
        True
    """
    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    rule = strided_mod(stride) if pattern == "strided" else fixed_mod(stride, c)
    return rule & causal_mod() if check_bool(causal, "causal") else rule


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

    Examples:
        >>> strided_pattern(6, 3).int()  # row 4: the band {2, 3, 4} and the column {1, 4}
        tensor([[1, 0, 0, 0, 0, 0],
                [1, 1, 0, 0, 0, 0],
                [1, 1, 1, 0, 0, 0],
                [1, 1, 1, 1, 0, 0],
                [0, 1, 1, 1, 1, 0],
                [0, 0, 1, 1, 1, 1]], dtype=torch.int32)
    """
    check_positive_int(n, "n")
    check_positive_int(stride, "stride")
    check_bool(causal, "causal")
    return pattern_mod("strided", stride, causal=causal).materialize(n, device=device)


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

    Examples:
        >>> fixed_pattern(6, 3, 1, causal=False).int()  # blocks {0, 1, 2} and {3, 4, 5}; summary cells 2 and 5
        tensor([[1, 1, 1, 0, 0, 1],
                [1, 1, 1, 0, 0, 1],
                [1, 1, 1, 0, 0, 1],
                [0, 0, 1, 1, 1, 1],
                [0, 0, 1, 1, 1, 1],
                [0, 0, 1, 1, 1, 1]], dtype=torch.int32)
    """
    check_positive_int(n, "n")
    check_positive_int(stride, "stride")
    c = check_summary_cells(c, stride)
    check_bool(causal, "causal")
    return pattern_mod("fixed", stride, c, causal).materialize(n, device=device)


def default_stride(n: int) -> int:
    r"""The stride :math:`\lceil\sqrt n\,\rceil` that balances the band and the column: about
    :math:`2\sqrt n` keys per query instead of :math:`n`.

    Examples:
        >>> default_stride(100), default_stride(101)
        (10, 11)
    """
    check_positive_int(n, "n")
    return math.isqrt(n - 1) + 1
