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


def check_scalar_regression(queries: object, keys: object, values: object) -> None:
    """The inputs of Nadaraya–Watson regression on scalars (:class:`~course_lib.NWKernelRegression`).

    ``queries`` (n_queries,); ``keys`` (n_keys,), shared by every query, or (n_queries, n_keys), one set
    per query; ``values`` shaped like ``keys``; all floating point.
    """
    check_floating(queries, "queries")
    check_ndim(queries, "queries", 1, "(n_queries,)")
    check_floating(keys, "keys")
    check_ndim(keys, "keys", (1, 2), "(n_keys,) or (n_queries, n_keys)")
    check_floating(values, "values")
    if values.shape != keys.shape:
        raise ValueError(f"values must have the shape of keys {tuple(keys.shape)}, got {tuple(values.shape)}")
    if keys.dim() == 2:
        check_same_size(queries, "queries", 0, keys, "keys", 0)


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


def check_summary_cells(c: object, stride: int) -> int:
    """Raise unless ``1 <= c <= stride`` (the summary cells per block of chapter 9's fixed pattern)."""
    check_positive_int(c, "c")
    if c > stride:
        raise ValueError(f"c (the number of summary cells per block) must be at most stride = {stride}, got c = {c}")
    return int(c)


def check_max_len(max_len: int | None) -> int | None:
    """``None``, or a sequence length of at least 2 (one token plus ``<eos>``)."""
    if max_len is None:
        return None
    max_len = check_positive_int(max_len, "max_len")
    if max_len < 2:
        raise ValueError(f"max_len must be at least 2 (one token plus <eos>), got {max_len}")
    return max_len


def check_choice(value: object, name: str, choices: Sequence[str]) -> str:
    """Raise ``ValueError`` unless ``value`` is one of ``choices`` (a mode, a pattern, a decoding)."""
    if value not in choices:
        options = " or ".join(f'"{c}"' for c in choices)
        raise ValueError(f"{name} must be {options}, got {value!r}")
    return value


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


def _as_tensor(x: object, name: str, what: str) -> torch.Tensor:
    """``x`` itself, or a list (a NumPy array) of ``what`` as a tensor; ``TypeError`` naming ``name`` otherwise."""
    if isinstance(x, torch.Tensor):
        return x
    try:
        return torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name} must be a tensor (or list) of {what}, got {type(x).__name__}") from None


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
    lengths = _as_tensor(lengths, name, "integer lengths")
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


def check_batch_index(index: object, batch_size: int | None, device: torch.device | str | None = None,
                      name: str = "index") -> torch.Tensor:
    """Validate (B',) integer row indices into a batch of ``batch_size`` (beam search's reordering).

    ``batch_size=None`` checks the type and shape only (an empty cache has no batch yet).

    Returns:
        ``index`` as int64 on ``device``.
    """
    check_tensor(index, name)
    check_ndim(index, name, 1, "(batch',)")
    if index.is_floating_point() or index.is_complex() or index.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor, got dtype {index.dtype}")
    if batch_size is not None and index.numel() and (int(index.min()) < 0 or int(index.max()) >= batch_size):
        raise ValueError(f"{name} must lie in [0, {batch_size}) for a batch of {batch_size}, got values in "
                         f"[{int(index.min())}, {int(index.max())}]")
    return index.to(device=device if device is not None else index.device, dtype=torch.long)


def check_qkv(queries: object, keys: object, values: object | None, *,
              layout: str | dict[str, str] = "", ndim: int | None = None, size: int | None = None,
              dtype: torch.dtype | None = None, same_size: bool = True) -> None:
    """The one check of an attention call's queries, keys and values.

    Each must be a floating-point tensor of at least two axes (exactly ``ndim`` when given), all of one
    dtype (``dtype``, a module's parameters', when given); keys and values agree in every axis but the
    last; queries and keys agree in the last axis (``same_size``), and every last axis is ``size`` when
    given. The leading axes of the queries and the keys must be equal (``ndim`` given: a module's
    fixed layout) or broadcast, except the head axis of 4-D inputs, where the keys may have fewer heads
    that divide the queries' (grouped-query attention).

    Args:
        queries, keys, values: the tensors, named so in the messages (``values`` may be ``None``
            when only scores are computed).
        layout: the axes, quoted in the messages: one string, or one per name
            (``{"queries": "(batch, n_queries, d_q)", ...}``).
        ndim: the exact number of axes, or ``None`` for two or more.
        size: the size every last axis must have, or ``None``.
        dtype: the dtype every tensor must have, or ``None`` for the queries'.
        same_size: require ``queries.shape[-1] == keys.shape[-1]`` (dot-product scores).
    """
    named = [("queries", queries), ("keys", keys)] + ([("values", values)] if values is not None else [])
    for name, t in named:
        check_features(t, name, layout=layout[name] if isinstance(layout, dict) else layout, ndim=ndim, size=size)
    for name, t in named:
        if dtype is not None and t.dtype != dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but the module's parameters have dtype {dtype}; convert "
                            f"one of them (e.g. module.to(dtype))")
        if dtype is None and t.dtype != queries.dtype:
            raise TypeError(f"queries and {name} must share a dtype, got {queries.dtype} and {t.dtype}")
    if values is not None:
        check_same_size(keys, "keys", -2, values, "values", -2)
        for axis in range(keys.dim() - 2 if ndim is not None else 0):  # a fixed layout: the batch axes too
            check_same_size(keys, "keys", axis, values, "values", axis)
    if same_size:
        check_same_size(queries, "queries", -1, keys, "keys", -1)
    heads = queries.dim() == keys.dim() == 4 and queries.shape[1] != keys.shape[1]
    if heads and (keys.shape[1] == 0 or queries.shape[1] % keys.shape[1]):
        raise ValueError(f"the keys' heads must divide the queries' heads (grouped-query attention), got "
                         f"queries {tuple(queries.shape)} and keys {tuple(keys.shape)}")
    if ndim is not None:  # a module's fixed layout: the leading axes are equal
        for axis in range(ndim - 2):
            if not (heads and axis == 1):
                check_same_size(queries, "queries", axis, keys, "keys", axis)
        return
    leads = [list(t.shape[:-2]) for t in (queries, keys, values) if t is not None]
    if heads:
        for lead in leads:
            lead[1] = 1
    # Checked by hand (right-aligned, 1 broadcasts): torch.broadcast_shapes is slow in a training step.
    for axis in range(1, max(len(lead) for lead in leads) + 1):
        sizes = {lead[-axis] for lead in leads if len(lead) >= axis} - {1}
        if len(sizes) > 1:
            shapes = ", ".join(f"{name} {tuple(t.shape)}" for name, t in (("queries", queries), ("keys", keys),
                                                                         ("values", values)) if t is not None)
            raise ValueError(f"the leading (batch) axes do not broadcast: {shapes}")


def check_features(x: object, name: str, *, layout: str = "", ndim: int | None = None,
                   size: int | None = None) -> torch.Tensor:
    """Raise unless ``x`` is a floating-point tensor of ``ndim`` axes (two or more when ``None``) whose last
    axis has ``size`` features (when given); ``layout`` names the axes in the messages."""
    check_floating(x, name)
    if ndim is not None:
        check_ndim(x, name, ndim, layout)
    elif x.dim() < 2:
        raise ValueError(f"{name} must be at least 2-D{' ' + layout if layout else ''}, got shape {tuple(x.shape)}")
    if size is not None and x.shape[-1] != size:
        raise ValueError(f"{name} must have size {size} in its last axis{' ' + layout if layout else ''}, got "
                         f"shape {tuple(x.shape)}")
    return x


def check_keep_mask(mask: object, scores: tuple[int, ...], name: str = "mask") -> torch.Tensor:
    """The one check of a keep-mask: bool (``True`` = attend) and broadcastable *to* ``scores``.

    A mask with more axes than the scores, or with an axis that is neither 1 nor the scores' size,
    is refused (broadcasting it would silently change the output's shape). A 2-D mask is
    (n_queries, n_keys). One of shape (batch, n_keys) looks like ``torch.nn.MultiheadAttention``'s
    ``key_padding_mask``, whose ``True`` means *padding*: it is refused unless the two readings
    cannot be told apart (``n_queries`` equal to 1 or to the batch).

    Args:
        mask: the mask.
        scores: the shape of the scores it masks, (..., n_queries, n_keys); the batch is its first axis.
        name: the argument's name, for the messages.

    Returns:
        ``mask`` itself.
    """
    check_tensor(mask, name)
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a bool tensor (True = attend), got dtype {mask.dtype}")
    batch, n_q, n_k = scores[0], scores[-2], scores[-1]
    if mask.dim() == 2 and len(scores) > 2 and batch > 1 and tuple(mask.shape) == (batch, n_k) and (
            n_q not in (1, batch)):
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} looks like torch's key_padding_mask (batch, n_keys), where "
            f"True means padding; here a mask is True = attend and a 2-D one is (n_queries, n_keys) = "
            f"{(n_q, n_k)}. Use course_lib.padding_mask(valid_lens, n_keys), or ~key_padding_mask[:, None, :]"
        )
    # Checked by hand: torch.broadcast_shapes is slow enough to show in a training step.
    if mask.dim() > len(scores) or any(m not in (1, s) for m, s in zip(reversed(mask.shape), reversed(scores),
                                                                       strict=False)):
        raise ValueError(f"{name} of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
                         f"{tuple(scores)}")
    return mask


def check_key_mask(mask: torch.Tensor, what: str, name: str = "mask") -> torch.Tensor:
    """Raise ``ValueError`` unless a (checked) keep-mask marks keys only: size 1 on its query axis.

    A key (padding) mask, broadcastable to (..., 1, n_keys), says which keys exist for every query; a
    computation that never forms the (n_queries, n_keys) matrix (``what``) can honour it, but not a mask
    that differs from query to query.
    """
    if mask.dim() >= 2 and mask.shape[-2] != 1:
        raise ValueError(f"{what} takes only a key (padding) mask, broadcastable to (..., 1, n_keys), got {name} of "
                         f"shape {tuple(mask.shape)}; a mask with a query axis needs the (n_queries, n_keys) "
                         f"matrix (use softmax attention for it)")
    return mask


def check_real(value: object, name: str, *, greater_than: float | None = None,
               at_least: float | None = None) -> float:
    """``value`` as a float; ``TypeError`` unless a real number (not a bool), ``ValueError`` unless finite and
    ``> greater_than`` / ``>= at_least`` (when given)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be finite, got {value}")
    if greater_than is not None and not value > greater_than:
        raise ValueError(f"{name} must be greater than {greater_than}, got {value}")
    if at_least is not None and not value >= at_least:
        raise ValueError(f"{name} must be at least {at_least}, got {value}")
    return value


def check_positions(positions: object, shape: tuple[int, ...], name: str = "positions") -> torch.Tensor:
    """Integer token positions (a tensor or a list) that broadcast to ``shape`` (..., T); returned as int64.

    Args:
        positions: (T,), or any shape whose last axis is T and that broadcasts to ``shape``.
        shape: the leading axes of the tensor they index, (..., T).
        name: the argument's name, for the messages.

    Raises:
        TypeError: not integers (a float, bool or complex dtype; positions are token indices).
        ValueError: a shape that does not end in T or does not broadcast to ``shape``.
    """
    positions = _as_tensor(positions, name, "integer positions")
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer positions (token indices), got dtype {positions.dtype}")
    n = shape[-1] if shape else 0
    if positions.dim() == 0 or positions.shape[-1] != n or positions.dim() > len(shape) or any(
            p not in (1, s) for p, s in zip(reversed(positions.shape), reversed(shape), strict=False)):
        raise ValueError(f"{name} must have shape ({n},) or one that broadcasts to {tuple(shape)} with {n} "
                         f"positions in its last axis, got {tuple(positions.shape)}")
    return positions.long()


def check_last_axis(x: object, name: str, size: int, layout: str = "(..., num_hiddens)") -> torch.Tensor:
    """Raise unless ``x`` is a floating-point tensor of at least one axis whose last axis has ``size`` entries
    (the input of a layer that acts on the features of each position)."""
    check_floating(x, name)
    if x.dim() == 0 or x.shape[-1] != size:
        raise ValueError(f"{name} must have size {size} in its last axis {layout}, got shape {tuple(x.shape)}")
    return x


def check_even(value: object, name: str, why: str) -> int:
    """Raise unless ``value`` is a positive even integer; ``why`` says what needs it (RoPE's pairs of features)."""
    value = check_positive_int(value, name)
    if value % 2:
        raise ValueError(f"{name} must be even ({why}), got {value}")
    return value


def check_heads(num_hiddens: int, num_heads: object, num_kv_heads: object) -> None:
    """Raise unless the heads split ``num_hiddens`` and the key/value heads divide the query heads."""
    check_positive_int(num_heads, "num_heads")
    check_positive_int(num_kv_heads, "num_kv_heads")
    if num_hiddens % num_heads:
        raise ValueError(f"num_hiddens ({num_hiddens}) must be divisible by num_heads ({num_heads}): each head "
                         f"gets num_hiddens / num_heads features")
    if num_heads % num_kv_heads:
        raise ValueError(f"num_kv_heads ({num_kv_heads}) must divide num_heads ({num_heads}): each key/value "
                         f"head serves num_heads / num_kv_heads query heads")


def check_token_id(token_id: object, name: str, vocab_size: int) -> int:
    """Raise unless ``token_id`` is an int id of a vocabulary of ``vocab_size`` (an ``eos_id``)."""
    check_int(token_id, name)
    if not 0 <= token_id < vocab_size:
        raise ValueError(f"{name} must be an id in [0, {vocab_size}), got {token_id}")
    return int(token_id)


_HEADS_LAYOUT = {"queries": "(batch, n_queries, num_hiddens)", "keys": "(batch, n_keys, num_hiddens)",
                 "values": "(batch, n_keys, num_hiddens)"}


def check_heads_inputs(queries: object, keys: object, values: object, kv: object, *, num_hiddens: int,
                       num_heads: int, num_kv_heads: int, dtype: torch.dtype, cached: int = 0) -> tuple[int, int, int]:
    """The one check of a multi-head attention call's inputs: keys and values, or projected ``kv``.

    Args:
        queries: (batch, n_queries, num_hiddens) of the module's ``dtype``.
        keys, values: (batch, n_keys, num_hiddens), or both ``None`` when ``kv`` is given.
        kv: ``None``, or the (keys, values) pair of ``project_kv``: (batch, num_kv_heads, n_keys, d_h)
            each (any floating dtype: under autocast projected tensors carry autocast's).
        num_hiddens, num_heads, num_kv_heads, dtype: the module's sizes and parameter dtype.
        cached: the keys a cache already holds.

    Returns:
        ``(batch, n_queries, n_keys)``, the cached keys included.
    """
    if kv is None:
        if keys is None or values is None:
            raise ValueError("give keys and values (batch, n_keys, num_hiddens), or kv from project_kv")
        check_qkv(queries, keys, values, layout=_HEADS_LAYOUT, ndim=3, size=num_hiddens, dtype=dtype)
        n_new = keys.shape[1]
    else:
        if keys is not None or values is not None:
            raise ValueError("give keys and values, or kv (projected by project_kv), not both")
        if not isinstance(kv, tuple) or len(kv) != 2:
            raise TypeError(f"kv must be the (keys, values) pair of project_kv, got {type(kv).__name__}")
        check_qkv(queries, queries, None, layout=_HEADS_LAYOUT["queries"], ndim=3, size=num_hiddens, dtype=dtype)
        check_qkv(kv[0], kv[0], kv[1], layout="(batch, num_kv_heads, n_keys, d_h)", ndim=4,
                  size=num_hiddens // num_heads)
        if kv[0].shape[:2] != (queries.shape[0], num_kv_heads):
            raise ValueError(f"kv must hold (batch, num_kv_heads, n_keys, d_h) = ({queries.shape[0]}, "
                             f"{num_kv_heads}, n_keys, d_h) tensors, got {tuple(kv[0].shape)}")
        n_new = kv[0].shape[2]
    if n_new + cached == 0:
        raise ValueError(f"keys must hold at least one key, got shape {tuple((keys if kv is None else kv[0]).shape)}")
    return queries.shape[0], queries.shape[1], n_new + cached


def check_heads_mask(mask: object, batch: int, num_heads: int, n_queries: int, n_keys: int) -> torch.Tensor:
    """A multi-head attention's keep-mask, checked and given its head axis: 3-D masks are shared by the heads.

    Accepts (n_q, n_k), (batch or 1, n_q or 1, n_k or 1) and (batch or 1, heads or 1, n_q or 1, n_k or 1).

    Returns:
        The mask with 2 or 4 axes, (B, Tq, Tk) made (B, 1, Tq, Tk).
    """
    check_tensor(mask, "mask")
    scores = (batch, n_queries, n_keys) if mask.dim() < 4 else (batch, num_heads, n_queries, n_keys)
    check_keep_mask(mask, scores)
    return mask.unsqueeze(1) if mask.dim() == 3 else mask
