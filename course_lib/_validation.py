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


def check_probability(value: float, name: str) -> float:
    """``value`` as a float; ``TypeError``/``ValueError`` unless ``0 <= value < 1`` (a rate, a fraction)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a float in [0, 1), got {type(value).__name__}")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")
    return float(value)


def check_bool(value: object, name: str) -> bool:
    """Raise ``TypeError`` unless ``value`` is a ``bool`` (a flag; 0/1 are refused)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def check_tokens(x: object, name: str, layout: str, vocab_size: int | None = None) -> torch.Tensor:
    """Raise unless ``x`` is a 2-D ``torch.long`` tensor of ids in ``[0, vocab_size)`` (``>= 0`` without one).

    ``nn.Embedding`` reports an out-of-range id as an opaque ``IndexError`` (or a device assert on CUDA).
    """
    check_tensor(x, name)
    check_ndim(x, name, 2, layout)
    if x.dtype != torch.long:
        raise TypeError(f"{name} must hold token ids as torch.long, got dtype {x.dtype}")
    if vocab_size is None:
        if x.numel() and bool((x < 0).any()):
            raise ValueError(f"{name} holds negative ids: min {x.min().item()}")
    elif x.numel() and bool(((x < 0) | (x >= vocab_size)).any()):
        raise ValueError(f"{name} holds ids outside [0, {vocab_size}): min {x.min().item()}, max {x.max().item()}")
    return x


def as_lengths(lengths: object, name: str, max_len: int | None = None, shape: tuple[int, ...] | None = None,
               what: str = "", device: torch.device | str | None = None) -> torch.Tensor:
    """Validate integer lengths (a tensor, a list or a NumPy array) and return them as int64.

    The one check behind every ``valid_lens``-like argument of the library.

    Args:
        lengths: the lengths.
        name: the argument's name, for the messages.
        max_len: the largest length allowed (the padded length), or ``None``.
        shape: the shape they must have, or ``None`` for any.
        what: the tensor they describe, quoted in the messages (``"src of shape (2, 5)"``).
        device: where to put the result (default: where they are; lists go to the CPU).

    Raises:
        TypeError: not integers (floats with a fractional part, bools, complex, strings).
        ValueError: wrong shape, negative, or longer than ``max_len``.
    """
    for_what = f" for {what}" if what else ""
    if not isinstance(lengths, torch.Tensor):
        try:
            lengths = torch.as_tensor(lengths)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"{name} must be a tensor (or list) of integer lengths, got "
                            f"{type(lengths).__name__}") from None
    if lengths.dtype == torch.bool or lengths.is_complex():
        raise TypeError(f"{name} must be an integer tensor of lengths, got dtype {lengths.dtype}")
    if lengths.is_floating_point():
        if not torch.all(lengths == lengths.round()):
            raise TypeError(f"{name} must be an integer tensor of lengths, got dtype {lengths.dtype} with "
                            f"non-integer values {lengths.flatten()[:8].tolist()}")
    if shape is not None and tuple(lengths.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}{for_what}, got {tuple(lengths.shape)}")
    if lengths.numel():
        low, high = (int(v) for v in torch.stack(torch.aminmax(lengths)).tolist())  # one device sync
        bound = f"[0, {max_len}]" if max_len is not None else "[0, inf)"
        if low < 0:
            raise ValueError(f"{name} must lie in {bound}{for_what} (lengths are non-negative), got values "
                             f"from {low} to {high}")
        if max_len is not None and high > max_len:
            raise ValueError(f"{name} must lie in {bound}{for_what} (a length must not exceed {max_len}), got "
                             f"values from {low} to {high}")
    return lengths.to(device=device if device is not None else lengths.device, dtype=torch.long)


def check_pad_id(pad_id: object, *vocab_sizes: int) -> int:
    """Raise unless ``pad_id`` is an int and an id of every vocabulary (a config's ``pad_id``)."""
    check_int(pad_id, "pad_id")
    if not 0 <= pad_id < min(vocab_sizes):
        sizes = " and ".join(str(v) for v in vocab_sizes)
        raise ValueError(f"pad_id must be a valid id in every vocabulary (sizes {sizes}), got {pad_id}")
    return pad_id


def check_batch_index(index: object, batch_size: int, device: torch.device | str | None = None,
                      name: str = "index") -> torch.Tensor:
    """Validate (B',) integer row indices into a batch of ``batch_size`` (beam search's reordering).

    Returns:
        ``index`` as int64 on ``device``.
    """
    check_tensor(index, name)
    check_ndim(index, name, 1, "(batch',)")
    if index.is_floating_point() or index.is_complex() or index.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor, got dtype {index.dtype}")
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= batch_size):
        raise ValueError(f"{name} must lie in [0, {batch_size}) for a batch of {batch_size}, got values in "
                         f"[{int(index.min())}, {int(index.max())}]")
    return index.to(device=device if device is not None else index.device, dtype=torch.long)
