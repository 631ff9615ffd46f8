r"""The attention computation itself, behind one interface: the kernels (chapters 3, 5, 9, 10).

Every attention module of the library projects its inputs, hands queries, keys and values to a
*kernel*, and merges what comes back. The kernel computes

.. math:: \operatorname{softmax}\!\Big(\frac{\mathbf Q\mathbf K^\top}{\sqrt d}
   \;\text{restricted to the kept pairs}\Big)\,\mathbf V

and nothing else: scores, the keep-mask, the softmax with the empty-row rule, dropout, pooling.
A kernel is any callable with this signature (:class:`AttentionKernel`)::

    kernel(q, k, v, mask=None, *, causal=False, dropout_p=0.0, scale=None, need_weights=False)
        -> (output, weights or None)

- ``q`` (B, H, n_q, d), ``k`` (B, H_kv, n_k, d), ``v`` (B, H_kv, n_k, d_v); ``H_kv`` divides ``H``
  (grouped-query attention: query head ``i`` reads key/value head ``i // (H / H_kv)``).
- ``mask``: ``None`` or bool, broadcastable to (B, H, n_q, n_k), ``True`` = attend.
- ``causal``: the look-ahead rule, aligned bottom-right (query ``i`` sits at key position
  ``i + n_k - n_q``), combined with ``mask`` by logical and.
- ``dropout_p``: dropout on the weights (the caller passes 0 in evaluation mode); ``scale``: the
  factor of the scores, :math:`1/\sqrt d` when ``None``.
- Returns the output (B, H, n_q, d_v) and, with ``need_weights``, the weights (B, H, n_q, n_k)
  before dropout (``None`` otherwise). A query that may see no key outputs the zero vector, with
  zero weights and zero gradient, never NaN.

Kernels do not validate: the public function that calls one (:func:`attend`, a module's
``forward``) checks its arguments once. Two kernels live here, equal up to rounding (tested):
:func:`explicit_kernel`, the computation of chapter 3 written out, and :func:`fused_kernel`,
``torch.nn.functional.scaled_dot_product_attention``. Chapter 9's sparse patterns
(:class:`course_lib.sparse.SparseKernel`) and chapter 10's tiled and linear kernels are more; a module
takes any of them (``MultiHeadAttention(..., kernel=...)``) without a change to its code.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
import torch.nn.functional as F

from .._validation import check_bool, check_keep_mask, check_positive, check_probability, check_qkv
from .masks import causal_mask, softmax_with_keep

__all__ = ["AttentionKernel", "attend", "explicit_kernel", "fused_kernel", "keep_mask"]


@runtime_checkable
class AttentionKernel(Protocol):
    """What :class:`~course_lib.multihead.MultiHeadAttention` calls: see the module docstring for the shapes.

    Examples:
        A kernel of one's own plugs into a module unchanged; here the explicit kernel, logged:

        >>> calls = []
        >>> def logged(q, k, v, mask=None, **options):
        ...     calls.append(tuple(q.shape))  # (B, H, n_q, d_h)
        ...     return explicit_kernel(q, k, v, mask, **options)
        >>> mha = MultiHeadAttention(8, 2, kernel=logged)
        >>> mha(torch.randn(1, 3, 8), torch.randn(1, 5, 8), torch.randn(1, 5, 8)).shape, calls
        (torch.Size([1, 3, 8]), [(1, 2, 3, 4)])
        >>> isinstance(fused_kernel, AttentionKernel)
        True
    """

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, *,
                 causal: bool = False, dropout_p: float = 0.0, scale: float | None = None,
                 need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]: ...


def keep_mask(mask: torch.Tensor | None, causal: bool, n_queries: int, n_keys: int,
              device: torch.device | str | None = None) -> torch.Tensor | None:
    """``mask`` and the bottom-right look-ahead rule combined into one keep-mask (``None`` when neither).

    A single query is the last position: it sees every key, so ``causal`` adds nothing for it.

    Examples:
        >>> keep_mask(None, True, 2, 3).int()
        tensor([[1, 1, 0],
                [1, 1, 1]], dtype=torch.int32)
    """
    if not causal or n_queries <= 1:
        return mask
    look_ahead = causal_mask(n_queries, n_keys, device=device)
    return look_ahead if mask is None else mask & look_ahead


def _grouped(q: torch.Tensor, k: torch.Tensor) -> int:
    """G = H / H_kv, the query heads per key/value head (1 for ordinary multi-head attention)."""
    return 1 if q.dim() != 4 or k.dim() != 4 or q.shape[1] == k.shape[1] else q.shape[1] // k.shape[1]


def explicit_kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, *,
                    causal: bool = False, dropout_p: float = 0.0, scale: float | None = None,
                    need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""Attention written out: the score matrix, the masked softmax, dropout and the weighted sum.

    .. math:: \mathbf A = \operatorname{softmax}(\mathbf Q\mathbf K^\top/\sqrt d),\qquad
       \mathbf O = \mathbf A\mathbf V

    Args and returns: see :mod:`course_lib.attention_kernels`; it returns the weights whether or not
    ``need_weights`` asks for them (they are formed anyway).

    Examples:
        >>> q, k = torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 3, 2)
        >>> v = torch.tensor([[[[3.0], [6.0], [9.0]]]])
        >>> out, weights = explicit_kernel(q, k, v)
        >>> out.flatten().tolist(), weights.flatten().tolist()
        ([6.0], [0.3333333432674408, 0.3333333432674408, 0.3333333432674408])
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    groups = _grouped(q, k)
    if groups > 1:  # (B, H, n_q, d) -> (B, H_kv, G, n_q, d): each key/value head serves G query heads
        q = q.unflatten(-3, (k.shape[-3], groups))
        k, v = k.unsqueeze(-3), v.unsqueeze(-3)
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., n_q, n_k)
    if groups > 1:
        scores = scores.flatten(-4, -3)  # (B, H, n_q, n_k)
    keep = keep_mask(mask, causal, q.shape[-2], k.shape[-2], q.device)
    weights = torch.softmax(scores, dim=-1) if keep is None else softmax_with_keep(scores, keep)
    dropped = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
    if groups > 1:
        out = (dropped.unflatten(-3, (v.shape[-4], groups)) @ v).flatten(-4, -3)
    else:
        out = dropped @ v
    return out, weights


def fused_kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, *,
                 causal: bool = False, dropout_p: float = 0.0, scale: float | None = None,
                 need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The same through ``torch.nn.functional.scaled_dot_product_attention`` (fused, never stores the weights).

    On a CPU (and with the flash or memory-efficient kernels of a GPU) the scores are computed tile
    by tile: O(n) memory instead of O(n^2), for 4-D (B, H, n, d) inputs without a mask (the causal rule of
    as many queries as keys needs none); a mask is itself an n x n tensor, and 3-D inputs take PyTorch's
    math path, which stores the scores. The weights exist only in :func:`explicit_kernel`, which
    this kernel calls when ``need_weights`` asks for them.

    Args and returns: see :mod:`course_lib.attention_kernels`.

    Examples:
        >>> q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 8)
        >>> fused, _ = fused_kernel(q, k, v, causal=True)
        >>> explicit, _ = explicit_kernel(q, k, v, causal=True)
        >>> fused.shape, torch.allclose(fused, explicit, atol=1e-6)
        (torch.Size([2, 4, 5, 8]), True)
    """
    if need_weights:
        return explicit_kernel(q, k, v, mask, causal=causal, dropout_p=dropout_p, scale=scale)
    n_q, n_k = q.shape[-2], k.shape[-2]
    options = {"dropout_p": dropout_p, "scale": scale}
    if _grouped(q, k) > 1:
        options["enable_gqa"] = True
    if mask is None and causal and n_q == n_k:
        # SDPA's is_causal is aligned top-left: the same as ours for a square mask only.
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, **options), None
    keep = keep_mask(mask, causal, n_q, n_k, q.device)
    if keep is None:
        return F.scaled_dot_product_attention(q, k, v, **options), None
    row_ok = keep.any(dim=-1, keepdim=True)
    # Depending on the version and the kernel, SDPA returns NaN or 0 for a query with no key: let it
    # attend everywhere (finite) and zero its output. On the CPU the test is cheap and spares the
    # fix-up; on an accelerator bool() would wait for the device, so the fix-up (exact when every
    # query has a key) always runs there.
    every_row = keep.device.type == "cpu" and bool(row_ok.all())
    # The keep-mask as SDPA's additive mask (0 or -inf): the same numbers as a boolean mask, which
    # SDPA converts on every call (about 10 % of its time on a CPU).
    bias = torch.zeros(keep.shape, dtype=q.dtype, device=q.device).masked_fill_(
        ~(keep if every_row else keep | ~row_ok), float("-inf"))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, **options)
    return (out, None) if every_row else (out * row_ok, None)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, *,
           causal: bool = False, dropout_p: float = 0.0, scale: float | None = None, need_weights: bool = False,
           kernel: AttentionKernel = fused_kernel) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Scaled dot-product attention through a kernel, with its arguments checked: the library's one entry.

    Args:
        q: (..., n_q, d) queries; with heads, (B, H, n_q, d).
        k: (..., n_k, d) keys; with heads (B, H_kv, n_k, d), H_kv dividing H.
        v: (..., n_k, d_v) values, laid out as ``k``.
        mask: optional bool, broadcastable to (..., n_q, n_k), ``True`` = attend.
        causal: the bottom-right aligned look-ahead rule, and-ed with ``mask``.
        dropout_p: dropout on the weights, in [0, 1) (pass 0 outside training).
        scale: the factor of the scores (default :math:`1/\\sqrt d`).
        need_weights: also return the weights (..., n_q, n_k).
        kernel: an :class:`AttentionKernel` (default :func:`fused_kernel`).

    Returns:
        ``(output, weights)``: (..., n_q, d_v), and (..., n_q, n_k) or ``None``.

    Examples:
        >>> q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 6)
        >>> out, weights = attend(q, k, v, causal=True, need_weights=True)
        >>> out.shape, weights.shape
        (torch.Size([1, 2, 3, 6]), torch.Size([1, 2, 3, 5]))
        >>> (weights[0, 0] > 0).int()  # query i sits at key position i + 2: it sees keys 0 .. i + 2
        tensor([[1, 1, 1, 0, 0],
                [1, 1, 1, 1, 0],
                [1, 1, 1, 1, 1]], dtype=torch.int32)
    """
    check_qkv(q, k, v)
    lead = [max(a, b) for a, b in zip(q.shape[:-2], k.shape[:-2], strict=True)]
    if q.dim() == 4:
        lead[1] = q.shape[1]  # grouped-query heads: the scores have the queries' heads
    scores = (*lead, q.shape[-2], k.shape[-2])
    if mask is not None:
        check_keep_mask(mask, scores)
    check_bool(causal, "causal")
    check_bool(need_weights, "need_weights")
    check_probability(dropout_p, "dropout_p")
    if scale is not None:
        check_positive(scale, "scale")
    if not callable(kernel):
        raise TypeError(f"kernel must be an AttentionKernel (a callable), got {type(kernel).__name__}")
    return kernel(q, k, v, mask, causal=causal, dropout_p=dropout_p, scale=scale, need_weights=need_weights)
