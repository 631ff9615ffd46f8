"""Dense attention with a pattern mask: the explicit reference and the fused kernel (the baselines)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .._validation import check_floating
from ..masking import causal_mask, masked_softmax
from .patterns import _check_bool


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
