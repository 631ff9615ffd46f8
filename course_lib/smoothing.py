r"""Smoothing kernels for Nadaraya–Watson regression (chapter 2).

Each kernel is evaluated on the scaled distance :math:`u = (x - x_i)/h`; for vector inputs the
kernels are radial, :math:`K(\lVert u \rVert)`. Constants are irrelevant for Nadaraya–Watson (the
weights are normalised), so the values below are the ones the notes use:

============== ==================================== =========================================
name           :math:`K(u)`                          note
============== ==================================== =========================================
gaussian       :math:`\exp(-u^2/2)`                  never zero: every point gets some weight
boxcar         :math:`1` if :math:`|u| \le 1`         average of the points within h
triangular     :math:`\max(0, 1-|u|)`                 what the lecture notes and D2L call
                                                      "Epanechnikov"
epanechnikov   :math:`\tfrac34 (1-u^2)_+`             the classical Epanechnikov kernel
============== ==================================== =========================================
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._validation import check_floating

__all__ = ["gaussian_kernel", "boxcar_kernel", "triangular_kernel", "epanechnikov_kernel",
           "KERNELS", "get_kernel"]


def gaussian_kernel(u: torch.Tensor) -> torch.Tensor:
    r"""Gaussian kernel :math:`K(u) = \exp(-u^2/2)`.

    Args:
        u: floating tensor of any shape, the scaled distances :math:`(x - x_i)/h`.

    Returns:
        Tensor shaped like ``u``, in :math:`(0, 1]`.

    Examples:
        >>> gaussian_kernel(torch.tensor([-2.0, -0.5, 0.0, 0.5, 2.0]))
        tensor([0.1353, 0.8825, 1.0000, 0.8825, 0.1353])
    """
    check_floating(u, "u")
    return torch.exp(-u.pow(2) / 2)


def boxcar_kernel(u: torch.Tensor) -> torch.Tensor:
    r"""Boxcar kernel: :math:`K(u) = 1` where :math:`|u| \le 1`, else 0.

    Args:
        u: floating tensor of any shape, the scaled distances :math:`(x - x_i)/h`.

    Returns:
        Tensor shaped like ``u`` of zeros and ones.

    Examples:
        >>> boxcar_kernel(torch.tensor([-2.0, -1.0, 0.0, 0.5, 2.0]))
        tensor([0., 1., 1., 1., 0.])
    """
    check_floating(u, "u")
    return (u.abs() <= 1).to(u.dtype)


def triangular_kernel(u: torch.Tensor) -> torch.Tensor:
    r"""Triangular kernel :math:`K(u) = \max(0, 1-|u|)` (called "Epanechnikov" in D2L and the notes).

    Args:
        u: floating tensor of any shape, the scaled distances :math:`(x - x_i)/h`.

    Returns:
        Tensor shaped like ``u``, in :math:`[0, 1]`.

    Examples:
        >>> triangular_kernel(torch.tensor([-2.0, -0.5, 0.0, 0.5, 2.0]))
        tensor([0.0000, 0.5000, 1.0000, 0.5000, 0.0000])
    """
    check_floating(u, "u")
    return (1 - u.abs()).clamp_min(0)


def epanechnikov_kernel(u: torch.Tensor) -> torch.Tensor:
    r"""Classical Epanechnikov kernel :math:`K(u) = \tfrac34 (1-u^2)_+`.

    Args:
        u: floating tensor of any shape, the scaled distances :math:`(x - x_i)/h`.

    Returns:
        Tensor shaped like ``u``, in :math:`[0, 3/4]`.

    Examples:
        >>> epanechnikov_kernel(torch.tensor([-2.0, -0.5, 0.0, 0.5, 2.0]))
        tensor([0.0000, 0.5625, 0.7500, 0.5625, 0.0000])
    """
    check_floating(u, "u")
    return 0.75 * (1 - u.pow(2)).clamp_min(0)


KERNELS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gaussian": gaussian_kernel,
    "boxcar": boxcar_kernel,
    "triangular": triangular_kernel,
    "epanechnikov": epanechnikov_kernel,
}

#: Kernels that are zero for :math:`|u| > 1`: a query far from every point gets no weight at all.
COMPACT_KERNELS = frozenset({"boxcar", "triangular", "epanechnikov"})


def get_kernel(kernel: str | Callable[[torch.Tensor], torch.Tensor]
               ) -> Callable[[torch.Tensor], torch.Tensor]:
    """Look up a kernel by name (one of :data:`KERNELS`) or pass a callable through.

    Examples:
        >>> get_kernel("boxcar") is boxcar_kernel, sorted(KERNELS)
        (True, ['boxcar', 'epanechnikov', 'gaussian', 'triangular'])
        >>> get_kernel(torch.sigmoid)(torch.zeros(2))  # a callable is used as it is
        tensor([0.5000, 0.5000])
    """
    if callable(kernel):
        return kernel
    if not isinstance(kernel, str):
        raise TypeError(f"kernel must be a name or a callable, got {type(kernel).__name__}")
    try:
        return KERNELS[kernel]
    except KeyError:
        raise ValueError(
            f"unknown kernel {kernel!r}; choose one of {sorted(KERNELS)} or pass a callable"
        ) from None
