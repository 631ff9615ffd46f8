"""Masks and the masked softmax (chapter 3).

Convention, used everywhere in ``course_lib``: a boolean mask is ``True`` where a query may
attend to a key, as in ``torch.nn.functional.scaled_dot_product_attention``.
``torch.nn.MultiheadAttention`` uses the opposite convention (``True`` = masked out); pass
``~mask`` when you hand one of our masks to it.

A row in which no key is valid gets all-zero weights (never NaN): the attention output for such a
query is the zero vector.
"""

from __future__ import annotations

import torch

from ._validation import check_ndim, check_non_negative_int, check_tensor


def sequence_mask(X: torch.Tensor, valid_len: torch.Tensor, value: float = 0.0) -> torch.Tensor:
    """Replace the entries of each row of ``X`` past its valid length by ``value`` (D2L semantics).

    Args:
        X: (batch, max_len, ...) tensor.
        valid_len: (batch,) integer lengths, each in ``[0, max_len]``.
        value: fill value for the padded positions.

    Returns:
        A new tensor shaped like ``X`` with ``X[b, t] = value`` for ``t >= valid_len[b]``.
    """
    check_tensor(X, "X")
    if X.dim() < 2:
        raise ValueError(f"X must be at least 2-D (batch, max_len, ...), got shape {tuple(X.shape)}")
    valid_len = _as_lengths(valid_len, "valid_len", X.shape[1], device=X.device)
    if valid_len.shape != (X.shape[0],):
        raise ValueError(
            f"valid_len must have shape ({X.shape[0]},) for X of shape {tuple(X.shape)}, "
            f"got {tuple(valid_len.shape)}"
        )
    keep = lengths_to_mask(valid_len, X.shape[1])  # (batch, max_len)
    keep = keep.reshape(keep.shape + (1,) * (X.dim() - 2))
    return X.masked_fill(~keep, value)


def lengths_to_mask(valid_lens: torch.Tensor, max_len: int) -> torch.Tensor:
    """Boolean mask ``(..., max_len)`` that is ``True`` at positions ``t < valid_lens[...]``.

    Args:
        valid_lens: integer tensor of any shape ``(...)``.
        max_len: length of the new last axis.

    Returns:
        (..., max_len) bool tensor, ``True`` = attend.
    """
    check_tensor(valid_lens, "valid_lens")
    check_non_negative_int(max_len, "max_len")
    positions = torch.arange(max_len, device=valid_lens.device)
    return positions < valid_lens.unsqueeze(-1)


def causal_mask(n_queries: int, n_keys: int | None = None,
                device: torch.device | str | None = None) -> torch.Tensor:
    """Look-ahead mask: query ``i`` sees keys ``j <= i`` (the diagonal included).

    Returns:
        (n_queries, n_keys) bool tensor, ``True`` = attend.
    """
    check_non_negative_int(n_queries, "n_queries")
    n_keys = n_queries if n_keys is None else n_keys
    check_non_negative_int(n_keys, "n_keys")
    return torch.ones(n_queries, n_keys, dtype=torch.bool, device=device).tril()


def _as_lengths(valid_lens: object, name: str, n_keys: int,
                device: torch.device | None = None) -> torch.Tensor:
    """Validate ``valid_lens`` and return it as an int64 tensor on ``device``."""
    if not isinstance(valid_lens, torch.Tensor):
        try:
            valid_lens = torch.as_tensor(valid_lens)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(
                f"{name} must be a tensor of integer lengths, got {type(valid_lens).__name__}"
            ) from None
    if valid_lens.dtype == torch.bool or valid_lens.is_complex():
        raise ValueError(f"{name} must hold integer lengths, got dtype {valid_lens.dtype}")
    if valid_lens.is_floating_point():
        if not torch.all(valid_lens == valid_lens.round()):
            raise ValueError(
                f"{name} must hold whole numbers (lengths), got non-integer values "
                f"{valid_lens.flatten()[:8].tolist()}"
            )
    if valid_lens.numel() and bool((valid_lens < 0).any()):
        raise ValueError(f"{name} must be non-negative, got {valid_lens.flatten()[:8].tolist()}")
    if valid_lens.numel() and bool((valid_lens > n_keys).any()):
        raise ValueError(
            f"{name} must not exceed the number of keys ({n_keys}), got max "
            f"{valid_lens.max().item()}"
        )
    return valid_lens.to(device=device, dtype=torch.long)


def valid_lens_to_mask(valid_lens: torch.Tensor, batch_size: int, n_queries: int,
                       n_keys: int, device: torch.device | None = None) -> torch.Tensor:
    """Turn D2L-style ``valid_lens`` into a boolean key mask ``(batch, n_queries, n_keys)``.

    Args:
        valid_lens: (batch,) one length per example, shared by all its queries, or
            (batch, n_queries) one length per query.
        batch_size, n_queries, n_keys: the shape of the scores the mask is for.

    Returns:
        (batch, n_queries, n_keys) bool tensor, ``True`` = attend.

    Raises:
        ValueError: wrong shape, negative, non-integer, or longer than ``n_keys``.
    """
    lens = _as_lengths(valid_lens, "valid_lens", n_keys, device=device)
    if lens.shape == (batch_size,):
        lens = lens[:, None].expand(batch_size, n_queries)
    elif lens.shape != (batch_size, n_queries):
        raise ValueError(
            f"valid_lens must have shape ({batch_size},) or ({batch_size}, {n_queries}) for scores "
            f"of shape ({batch_size}, {n_queries}, {n_keys}), got {tuple(lens.shape)}"
        )
    return lengths_to_mask(lens, n_keys)


def masked_softmax(X: torch.Tensor, valid_lens: torch.Tensor | None = None,
                   mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last axis that gives zero weight to masked keys.

    Args:
        X: (batch, n_queries, n_keys) scores (any leading shape when only ``mask`` is used).
        valid_lens: optional (batch,) or (batch, n_queries) integer lengths: the keys
            ``j >= valid_lens`` get weight 0 (D2L semantics).
        mask: optional boolean tensor broadcastable to ``X``, ``True`` = attend. Combined with
            ``valid_lens`` by logical and.

    Returns:
        Weights shaped like ``X``: non-negative, each row sums to 1 over its valid keys, masked
        keys get exactly 0, and a row with no valid key is all zeros (not NaN).

    Raises:
        TypeError: ``X`` is not a floating-point tensor, or ``mask`` is not boolean.
        ValueError: ``valid_lens`` has the wrong shape or holds negative, non-integer or too large
            lengths; ``valid_lens`` is given for scores that are not 3-D; ``mask`` does not
            broadcast to the shape of ``X``.
    """
    check_tensor(X, "X")
    if not X.is_floating_point():
        raise TypeError(f"X must be a floating-point tensor, got dtype {X.dtype}")
    if valid_lens is None and mask is None:
        return torch.softmax(X, dim=-1)
    keep = None
    if valid_lens is not None:
        check_ndim(X, "X", 3, "(batch, n_queries, n_keys) when valid_lens is given")
        keep = valid_lens_to_mask(valid_lens, *X.shape, device=X.device)
    if mask is not None:
        check_tensor(mask, "mask")
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be a bool tensor (True = attend), got dtype {mask.dtype}")
        try:
            broadcast = torch.broadcast_shapes(mask.shape, X.shape)
        except RuntimeError:
            broadcast = None
        # The mask must broadcast *to* X: a mask with extra or longer axes would silently
        # return weights of a different shape than the scores.
        if broadcast != X.shape:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not broadcast to X of shape "
                f"{tuple(X.shape)}"
            )
        keep = mask if keep is None else keep & mask
    keep = keep.to(X.device)
    # The most negative finite value, not -inf: a fully masked row then stays finite (uniform
    # before the final multiply) instead of giving 0/0 = NaN, in the forward and backward pass.
    scores = X.masked_fill(~keep, torch.finfo(X.dtype).min)
    return torch.softmax(scores, dim=-1) * keep
