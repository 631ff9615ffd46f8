r"""Attention pooling over a database of keys and values (chapter 1).

A database :math:`\mathcal D = \{(\mathbf k_1, \mathbf v_1), \dots, (\mathbf k_m, \mathbf v_m)\}`
answers a query :math:`\mathbf q` with :math:`\sum_i \alpha(\mathbf q, \mathbf k_i)\mathbf v_i`.
When the weights are a softmax of dot products this is

.. math:: \operatorname{Attention}(\mathbf Q, \mathbf K, \mathbf V) =
   \operatorname{softmax}(\mathbf Q \mathbf K^\top)\,\mathbf V .
"""

from __future__ import annotations

import torch

from ._validation import check_floating, check_ndim, check_qkv, check_same_size

__all__ = ["attention_pool", "softmax_attention", "parameter_free_self_attention"]


def _check_batch_axes(**tensors: torch.Tensor) -> None:
    """Raise ``ValueError`` unless the leading (batch) axes, all but the last two, broadcast."""
    try:
        torch.broadcast_shapes(*(t.shape[:-2] for t in tensors.values()))
    except RuntimeError:
        shapes = ", ".join(f"{name} {tuple(t.shape)}" for name, t in tensors.items())
        raise ValueError(f"the leading (batch) axes do not broadcast: {shapes}") from None
    dtypes = {t.dtype for t in tensors.values()}
    if len(dtypes) > 1:
        names = ", ".join(f"{name} {t.dtype}" for name, t in tensors.items())
        raise TypeError(f"the inputs must share a dtype, got {names}")


def attention_pool(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    r"""Weighted sum of the values, :math:`\sum_i \alpha_i \mathbf v_i` for every query.

    Args:
        weights: (..., n_queries, n_keys)
        values: (..., n_keys, d_v)

    Returns:
        (..., n_queries, d_v)

    Examples:
        >>> weights = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])  # (n_queries, n_keys) = (2, 3)
        >>> values = torch.tensor([[1.0, 10.0], [3.0, 20.0], [5.0, 30.0]])  # (n_keys, d_v) = (3, 2)
        >>> attention_pool(weights, values)  # the mean of the first two values, then the third
        tensor([[ 2., 15.],
                [ 5., 30.]])
    """
    check_floating(weights, "weights")
    check_floating(values, "values")
    if weights.dim() < 2 or values.dim() < 2:
        raise ValueError(
            f"weights (..., n_queries, n_keys) and values (..., n_keys, d_v) must be at least 2-D, "
            f"got {tuple(weights.shape)} and {tuple(values.shape)}"
        )
    check_same_size(weights, "weights", -1, values, "values", -2)
    _check_batch_axes(weights=weights, values=values)
    return weights @ values


def softmax_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Unscaled dot-product attention :math:`\operatorname{softmax}(\mathbf Q\mathbf K^\top)\mathbf V`.

    The form of the notes' worked example (chapter 1); chapter 3 adds the :math:`1/\sqrt d`.

    Args:
        queries: (..., n_queries, d)
        keys: (..., n_keys, d)
        values: (..., n_keys, d_v)

    Returns:
        ``(output, weights)``: (..., n_queries, d_v) and (..., n_queries, n_keys).

    Examples:
        >>> q = torch.tensor([[1.0, 0.0]])  # (1, 2)
        >>> k = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # (2, 2)
        >>> output, weights = softmax_attention(q, k, torch.tensor([[10.0], [20.0]]))
        >>> weights, output  # softmax(1, 0), then 10 w_1 + 20 w_2
        (tensor([[0.7311, 0.2689]]), tensor([[12.6894]]))
    """
    check_qkv(queries, keys, values)
    weights = torch.softmax(queries @ keys.transpose(-2, -1), dim=-1)
    return weights @ values, weights


def parameter_free_self_attention(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Self-attention with no parameters: every token is query, key and value at once.

    In the notes' column convention (:math:`\mathbf X \in \mathbb R^{d\times T}`) token t gets
    :math:`\mathbf a_t = \operatorname{softmax}(\mathbf X^\top \mathbf x_t)` and
    :math:`\mathbf H = \mathbf X \mathbf A`. Here tokens are rows, so ``H = A @ X`` with
    ``A = softmax(X X^T)`` row-wise. Because :math:`\mathbf x_t^\top\mathbf x_t = \lVert
    \mathbf x_t\rVert^2` usually dominates, each token mostly attends to itself: the reason for
    learnable :math:`\mathbf W_q, \mathbf W_k, \mathbf W_v`.

    Args:
        X: (..., T, d) token embeddings as rows.

    Returns:
        ``(H, A)``: (..., T, d) outputs and (..., T, T) weights (row t = token t's weights).

    Examples:
        >>> X = torch.tensor([[3.0, 0.0], [0.0, 3.0], [1.0, 1.0]])  # T = 3 tokens, d = 2
        >>> H, A = parameter_free_self_attention(X)
        >>> H.shape, A.shape
        (torch.Size([3, 2]), torch.Size([3, 3]))
        >>> A.diagonal()  # the two long tokens attend almost only to themselves
        tensor([0.9974, 0.9974, 0.1554])
    """
    check_floating(X, "X")
    check_ndim(X, "X", (2, 3), "(T, d) or (batch, T, d)")
    return softmax_attention(X, X, X)
