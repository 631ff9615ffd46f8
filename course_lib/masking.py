"""Masks and the masked softmax (chapter 3).

Convention, used everywhere in ``course_lib``: a boolean mask is ``True`` where a query may
attend to a key, as in ``torch.nn.functional.scaled_dot_product_attention``.
``torch.nn.MultiheadAttention`` uses the opposite convention (``True`` = masked out); pass
``~mask`` when you hand one of our masks to it.

A row in which no key is valid gets all-zero weights (never NaN): the attention output for such a
query is the zero vector.

Padding travels as lengths, ``valid_lens`` (D2L's name): one helper, :func:`lengths_to_mask`, turns
lengths into boolean masks for the whole library. "Causal" has one meaning: query ``i`` of ``n_q``
sits at key position ``i + n_k - n_q`` and sees the keys up to it (the queries are the *last*
``n_q`` positions: aligned bottom-right, as with a key/value cache); :func:`causal_mask` and every
``causal=True`` flag use it.
"""

from __future__ import annotations

import torch

from ._validation import as_lengths, check_int, check_ndim, check_non_negative_int, check_tensor


def sequence_mask(X: torch.Tensor, valid_lens: torch.Tensor, value: float = 0.0) -> torch.Tensor:
    """Replace the entries of each row of ``X`` past its valid length by ``value`` (D2L semantics).

    Args:
        X: (batch, max_len, ...) tensor.
        valid_lens: (batch,) integer lengths (tensor or list), each in ``[0, max_len]``.
        value: fill value for the padded positions.

    Returns:
        A new tensor shaped like ``X`` with ``X[b, t] = value`` for ``t >= valid_lens[b]``.

    Examples:
        >>> sequence_mask(torch.ones(2, 3), torch.tensor([1, 2]))
        tensor([[1., 0., 0.],
                [1., 1., 0.]])
    """
    check_tensor(X, "X")
    if X.dim() < 2:
        raise ValueError(f"X must be at least 2-D (batch, max_len, ...), got shape {tuple(X.shape)}")
    valid_lens = as_lengths(valid_lens, "valid_lens", max_len=X.shape[1], shape=(X.shape[0],),
                            what=f"X of shape {tuple(X.shape)}", device=X.device)
    keep = lengths_to_mask(valid_lens, X.shape[1])  # (batch, max_len)
    keep = keep.reshape(keep.shape + (1,) * (X.dim() - 2))
    return X.masked_fill(~keep, value)


def lengths_to_mask(valid_lens: torch.Tensor, max_len: int) -> torch.Tensor:
    """Boolean mask ``(..., max_len)`` that is ``True`` at positions ``t < valid_lens[...]``.

    The one place where lengths become a mask: the masked softmax, the attention modules, the
    Transformer and the sparse kernels all call it.

    Args:
        valid_lens: integer lengths of any shape ``(...)``, a tensor or a (nested) list; lengths
            larger than ``max_len`` keep every position.
        max_len: length of the new last axis.

    Returns:
        (..., max_len) bool tensor on the device of ``valid_lens``, ``True`` = attend.

    Examples:
        >>> lengths_to_mask(torch.tensor([1, 3]), 4)
        tensor([[ True, False, False, False],
                [ True,  True,  True, False]])
        >>> lengths_to_mask([2], 3)
        tensor([[ True,  True, False]])
    """
    check_non_negative_int(max_len, "max_len")
    valid_lens = as_lengths(valid_lens, "valid_lens")
    positions = torch.arange(max_len, device=valid_lens.device)
    return positions < valid_lens.unsqueeze(-1)


def causal_mask(n_queries: int, n_keys: int | None = None, device: torch.device | str | None = None, *,
                offset: int | None = None) -> torch.Tensor:
    """Look-ahead mask: query ``i`` sits at key position ``i + offset`` and sees the keys ``j <= i + offset``.

    The default ``offset = n_keys - n_queries`` aligns the queries with the *last* keys (bottom-right):
    the last query sees every key, as when a key/value cache holds the earlier positions. This is
    what ``MultiHeadAttention(..., causal=True)`` does. ``offset=0`` aligns them top-left, as
    ``scaled_dot_product_attention(..., is_causal=True)``; both agree when ``n_queries == n_keys``.

    Args:
        n_queries: rows.
        n_keys: columns (default ``n_queries``).
        device: where to build it.
        offset: the key position of query 0 (may be negative: those queries see no key).

    Returns:
        (n_queries, n_keys) bool tensor, ``True`` = attend.

    Examples:
        >>> causal_mask(3).int()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [1, 1, 1]], dtype=torch.int32)
        >>> causal_mask(2, 4).int()  # two new queries after two cached keys
        tensor([[1, 1, 1, 0],
                [1, 1, 1, 1]], dtype=torch.int32)
    """
    check_non_negative_int(n_queries, "n_queries")
    n_keys = n_queries if n_keys is None else n_keys
    check_non_negative_int(n_keys, "n_keys")
    offset = n_keys - n_queries if offset is None else check_int(offset, "offset")
    return torch.ones(n_queries, n_keys, dtype=torch.bool, device=device).tril(diagonal=offset)


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
    keep = _lengths_keep(valid_lens, batch_size, n_queries, n_keys, device)  # (B, 1 or n_q, n_k)
    return keep.expand(batch_size, n_queries, n_keys)


def _lengths_keep(valid_lens: object, batch_size: int, n_queries: int, n_keys: int,
                  device: torch.device | str | None = None) -> torch.Tensor:
    """:func:`valid_lens_to_mask` without the expand: (batch, 1, n_keys) or (batch, n_queries, n_keys)."""
    lens = as_lengths(valid_lens, "valid_lens", max_len=n_keys, device=device)
    if lens.shape == (batch_size,):
        lens = lens[:, None]
    elif lens.shape != (batch_size, n_queries):
        raise ValueError(
            f"valid_lens must have shape ({batch_size},) or ({batch_size}, {n_queries}) for scores "
            f"of shape ({batch_size}, {n_queries}, {n_keys}), got {tuple(lens.shape)}"
        )
    return lengths_to_mask(lens, n_keys)


def check_attend_mask(mask: object, batch: int, n_queries: int, n_keys: int,
                      num_heads: int | None = None) -> torch.Tensor:
    """Validate a ``mask`` argument (bool, ``True`` = attend) for scores (batch, [num_heads,] n_queries, n_keys).

    It must broadcast to the scores. A 2-D mask is read as (n_queries, n_keys), shared by the batch,
    as ``scaled_dot_product_attention``'s. A 2-D mask of shape (batch, n_keys) is what
    ``torch.nn.MultiheadAttention`` calls ``key_padding_mask``, with the opposite meaning
    (``True`` = padding): it is refused unless ``n_queries == batch``, where the two readings
    cannot be told apart. Pass lengths as ``valid_lens``, or ``~key_padding_mask[:, None, :]``.

    Returns:
        ``mask`` itself.
    """
    check_tensor(mask, "mask")
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = attend), got dtype {mask.dtype}")
    scores = (batch, n_queries, n_keys) if num_heads is None or mask.dim() <= 3 else (
        batch, num_heads, n_queries, n_keys)
    if mask.dim() == 2 and batch > 1 and tuple(mask.shape) == (batch, n_keys) and n_queries not in (1, batch):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} looks like torch's key_padding_mask (batch, n_keys), "
            f"where True means padding; here a mask is True = attend and a 2-D one is (n_queries, "
            f"n_keys) = {(n_queries, n_keys)}. Pass the lengths as valid_lens, or ~key_padding_mask[:, None, :]"
        )
    # Broadcasts *to* the scores: no extra axis, each trailing axis 1 or equal. Checked by hand because
    # torch.broadcast_shapes is a Python reference implementation, slow enough to show in a training step.
    ok = mask.dim() <= len(scores) and all(
        m in (1, t) for m, t in zip(reversed(mask.shape), reversed(scores), strict=False))
    if not ok:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape {scores}")
    return mask


def masked_softmax(
    X: torch.Tensor,
    valid_lens: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Softmax over the last axis that gives zero weight to masked keys.

    Args:
        X: (batch, n_queries, n_keys) scores (any leading shape when only
            ``mask`` is used).
        valid_lens: optional (batch,) or (batch, n_queries) integer lengths:
            the keys ``j >= valid_lens`` get weight 0 (D2L semantics).
        mask: optional boolean tensor broadcastable to ``X``, ``True`` =
            attend (the opposite of ``torch.nn.MultiheadAttention``'s masks;
            a 2-D (batch, n_keys) mask, the shape of its
            ``key_padding_mask``, is refused). Combined with ``valid_lens``
            by logical and.

    Returns:
        Weights shaped like ``X``: non-negative, each row sums to 1 over its
        valid keys, masked keys get exactly 0, and a row with no valid key is
        all zeros (not NaN).

    Raises:
        TypeError: ``X`` is not a floating-point tensor, or ``mask`` is not
            boolean.
        ValueError: ``valid_lens`` has the wrong shape or holds negative,
            non-integer or too large lengths; ``valid_lens`` is given for
            scores that are not 3-D; ``mask`` does not broadcast to the shape
            of ``X``.

    Examples:
        >>> X = torch.zeros(1, 2, 4)
        >>> masked_softmax(X, torch.tensor([3]))
        tensor([[[0.3333, 0.3333, 0.3333, 0.0000],
                 [0.3333, 0.3333, 0.3333, 0.0000]]])
        >>> mask = torch.tensor([[True, False, False, False], [False] * 4])
        >>> masked_softmax(X, mask=mask)
        tensor([[[1., 0., 0., 0.],
                 [0., 0., 0., 0.]]])
    """
    check_tensor(X, "X")
    if not X.is_floating_point():
        raise TypeError(
            f"X must be a floating-point tensor, got dtype {X.dtype}"
        )
    if valid_lens is None and mask is None:
        return torch.softmax(X, dim=-1)
    keep = None
    if valid_lens is not None:
        check_ndim(
            X, "X", 3, "(batch, n_queries, n_keys) when valid_lens is given"
        )
        keep = _lengths_keep(valid_lens, *X.shape, device=X.device)
    if mask is not None:
        if X.dim() == 3:
            # refuses a key_padding_mask-like (batch, n_keys) mask
            check_attend_mask(mask, *X.shape)
        check_tensor(mask, "mask")
        if mask.dtype != torch.bool:
            raise TypeError(
                "mask must be a bool tensor (True = attend), "
                f"got dtype {mask.dtype}"
            )
        try:
            broadcast = torch.broadcast_shapes(mask.shape, X.shape)
        except RuntimeError:
            broadcast = None
        # The mask must broadcast *to* X: a mask with extra or longer axes
        # would silently return weights of a different shape than the scores.
        if broadcast != X.shape:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not broadcast "
                f"to X of shape {tuple(X.shape)}"
            )
        keep = mask if keep is None else keep & mask
    keep = keep.to(X.device)
    # The most negative finite value, not -inf: a fully masked row then
    # stays finite (uniform before the final multiply) instead of giving
    # 0/0 = NaN, in the forward and backward pass.
    scores = X.masked_fill(~keep, torch.finfo(X.dtype).min)
    return torch.softmax(scores, dim=-1) * keep
