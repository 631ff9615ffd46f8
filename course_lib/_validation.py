"""Argument checks shared by the public functions.

Every public entry point calls these before touching PyTorch, so a wrong shape or dtype is reported
with the argument's name and the shapes involved instead of a cryptic error from deep inside torch.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch


def check_tensor(x: object, name: str) -> torch.Tensor:
    """Raise ``TypeError`` unless ``x`` is a tensor."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def check_floating(x: object, name: str) -> torch.Tensor:
    """Raise ``TypeError`` unless ``x`` is a floating-point tensor."""
    check_tensor(x, name)
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    return x


def check_ndim(x: torch.Tensor, name: str, ndims: int | Sequence[int], layout: str = "") -> None:
    """Raise ``ValueError`` unless ``x.dim()`` is one of ``ndims``; ``layout`` documents the axes."""
    allowed = (ndims,) if isinstance(ndims, int) else tuple(ndims)
    if x.dim() not in allowed:
        want = " or ".join(f"{n}-D" for n in allowed)
        hint = f" {layout}" if layout else ""
        raise ValueError(f"{name} must be {want}{hint}, got shape {tuple(x.shape)}")


def check_same_size(a: torch.Tensor, a_name: str, a_dim: int, b: torch.Tensor, b_name: str,
                    b_dim: int) -> None:
    """Raise ``ValueError`` unless ``a.shape[a_dim] == b.shape[b_dim]``, quoting both shapes."""
    if a.shape[a_dim] != b.shape[b_dim]:
        raise ValueError(
            f"{a_name} and {b_name} do not match: {a_name} has shape {tuple(a.shape)} and "
            f"{b_name} has shape {tuple(b.shape)} (axis {a_dim} of {a_name} must equal axis "
            f"{b_dim} of {b_name}: {a.shape[a_dim]} != {b.shape[b_dim]})"
        )


def check_positive(value: float, name: str) -> None:
    """Raise ``ValueError`` unless ``value`` is a finite positive number."""
    if isinstance(value, torch.Tensor):
        ok = bool(torch.all(value > 0)) and bool(torch.all(torch.isfinite(value)))
    else:
        try:
            ok = float(value) > 0 and float(value) < float("inf")
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a number, got {type(value).__name__}") from None
    if not ok:
        raise ValueError(f"{name} must be a finite positive number, got {value}")


def check_positive_int(value: object, name: str) -> int:
    """Raise unless ``value`` is a positive integer (NumPy integers too; bools are rejected)."""
    check_int(value, name)
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return int(value)


def check_non_negative_int(value: object, name: str) -> int:
    """Raise unless ``value`` is an integer ``>= 0`` (a size or a count; bools are rejected)."""
    check_int(value, name)
    if value < 0:
        raise ValueError(f"{name} must be non-negative, got {value}")
    return int(value)


def check_int(value: object, name: str) -> int:
    """Raise ``TypeError`` unless ``value`` is an integer (``int`` or NumPy integer, not ``bool``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return int(value)


def check_probability(value: float, name: str) -> None:
    """Raise ``ValueError`` unless ``0 <= value < 1`` (a dropout rate)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a float in [0, 1), got {type(value).__name__}")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")
