"""Dense attention with a pattern mask: the explicit reference and the fused kernel (the baselines)."""

from __future__ import annotations

import torch

from ..._validation import check_bool
from ..registry import attend


def dense_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                    mask: torch.Tensor | None = None) -> torch.Tensor:
    r"""Explicit scaled dot-product attention: the (..., n_q, n_k) score matrix, a masked softmax, a product.

    .. math:: \operatorname{softmax}\big(\mathbf Q\mathbf K^\top/\sqrt d\,\big)\mathbf V

    :func:`course_lib.attend` with the explicit kernel.

    Args:
        queries: (..., n_q, d)
        keys: (..., n_k, d)
        values: (..., n_k, d_v)
        mask: optional bool, broadcastable to (..., n_q, n_k), ``True`` = attend.

    Returns:
        (..., n_q, d_v); a query with no allowed key gets the zero vector.

    Examples:
        >>> q, k, v = torch.randn(2, 9, 4), torch.randn(2, 9, 4), torch.randn(2, 9, 3)
        >>> dense_attention(q, k, v, mask=strided_pattern(9, 3)).shape
        torch.Size([2, 9, 3])
    """
    return attend(queries, keys, values, mask, kernel="explicit")[0]


def fused_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                    mask: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
    """The same through ``torch.nn.functional.scaled_dot_product_attention`` (:func:`course_lib.fused_kernel`).

    On a CPU (and with a memory-efficient or flash kernel on a GPU) the scores of 4-D (B, H, n, d) inputs
    without a mask are computed block by block and never stored whole: O(n) memory, but still O(n^2)
    time. PyTorch's CPU kernel takes 4-D inputs only (3-D ones go through its math path, which stores
    the n x n scores), and a mask is itself an n x n tensor.

    Args:
        queries, keys, values: as in :func:`dense_attention`.
        mask: optional bool, broadcastable to (..., n_q, n_k), ``True`` = attend.
        causal: and the look-ahead mask of :func:`course_lib.causal_mask` (bottom-right aligned, as
            everywhere in the library).

    Returns:
        (..., n_q, d_v); a query with no allowed key gets the zero vector.

    Examples:
        >>> q, k, v = torch.randn(2, 9, 4), torch.randn(2, 9, 4), torch.randn(2, 9, 3)
        >>> torch.allclose(fused_attention(q, k, v, causal=True), dense_attention(q, k, v, causal_mask(9)),
        ...                atol=1e-6)
        True
    """
    return attend(queries, keys, values, mask, causal=check_bool(causal, "causal"), kernel="fused")[0]
