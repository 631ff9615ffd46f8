r"""Attention scoring functions and the attention modules built on them (chapter 3).

Each module computes scores :math:`a(\mathbf q, \mathbf k_i)`, turns them into weights with
:func:`~course_lib.attention.masks.masked_softmax` and returns the weighted sum of the values:

.. math:: \operatorname{attention}(\mathbf q) = \sum_i \operatorname{softmax}(a(\mathbf q,
   \mathbf k_i))\, \mathbf v_i .

Shapes (defined once): ``queries: (batch, n_queries, d_q)``, ``keys: (batch, n_keys, d_k)``,
``values: (batch, n_keys, d_v)``; outputs are ``(batch, n_queries, d_v)`` and the weights kept in
``.attention_weights`` are ``(batch, n_queries, n_keys)``. Masks are ``True`` = attend.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .._validation import (
    check_floating,
    check_keep_mask,
    check_positive,
    check_positive_int,
    check_probability,
    check_qkv,
)
from .masks import softmax_with_keep

__all__ = [
    "dot_product_scores",
    "additive_scores",
    "bilinear_scores",
    "cosine_scores",
    "DotProductAttention",
    "AdditiveAttention",
    "BilinearAttention",
    "CosineAttention",
]


_LAYOUT = {"queries": "(batch, n_queries, d_q)", "keys": "(batch, n_keys, d_k)", "values": "(batch, n_keys, d_v)"}


def dot_product_scores(queries: torch.Tensor, keys: torch.Tensor, scaled: bool = True) -> torch.Tensor:
    r"""Scores :math:`\mathbf q^\top \mathbf k / \sqrt d` (or unscaled :math:`\mathbf q^\top \mathbf k`).

    Args:
        queries: (batch, n_queries, d)
        keys: (batch, n_keys, d)
        scaled: divide by :math:`\sqrt d` so that the scores keep unit variance when the
            entries of q and k do (chapter 3).

    Returns:
        (batch, n_queries, n_keys)

    Examples:
        >>> q = torch.tensor([[[1.0, 0.0]]])  # (1, 1, 2)
        >>> k = torch.tensor([[[2.0, 0.0], [0.0, 3.0], [-1.0, -1.0]]])  # (1, 3, 2)
        >>> dot_product_scores(q, k, scaled=False), dot_product_scores(q, k)  # the second divided by sqrt(2)
        (tensor([[[ 2.,  0., -1.]]]), tensor([[[ 1.4142,  0.0000, -0.7071]]]))
    """
    check_qkv(queries, keys, None, layout=_LAYOUT, ndim=3)
    scores = queries @ keys.transpose(-2, -1)
    return scores / math.sqrt(queries.shape[-1]) if scaled else scores


def additive_scores(queries: torch.Tensor, keys: torch.Tensor, W_q: torch.Tensor,
                    W_k: torch.Tensor, w_v: torch.Tensor) -> torch.Tensor:
    r"""Additive (Bahdanau) scores :math:`\mathbf w_v^\top \tanh(\mathbf W_q \mathbf q + \mathbf W_k \mathbf k)`.

    Args:
        queries: (batch, n_queries, d_q)
        keys: (batch, n_keys, d_k)
        W_q: (h_a, d_q);  W_k: (h_a, d_k);  w_v: (h_a,), with h_a the hidden size

    Examples:
        >>> q = torch.tensor([[[1.0, 0.0]]])  # (1, 1, 2)
        >>> k = torch.tensor([[[2.0, 0.0], [0.0, 3.0], [-1.0, -1.0]]])  # (1, 3, 2)
        >>> additive_scores(q, k, torch.eye(2), torch.eye(2), torch.ones(2))  # tanh(q + k) summed
        tensor([[[ 0.9951,  1.7566, -0.7616]]])
        >>> additive_scores(torch.ones(2, 3, 4), torch.ones(2, 5, 6), torch.ones(8, 4), torch.ones(8, 6),
        ...                 torch.ones(8)).shape  # d_q = 4 and d_k = 6 may differ
        torch.Size([2, 3, 5])
    """
    check_qkv(queries, keys, None, layout=_LAYOUT, ndim=3, same_size=False)
    for name, t in (("W_q", W_q), ("W_k", W_k), ("w_v", w_v)):
        check_floating(t, name)
    h_a = w_v.shape[0] if w_v.dim() == 1 else -1
    expected = {"W_q": (h_a, queries.shape[-1]), "W_k": (h_a, keys.shape[-1]), "w_v": (h_a,)}
    for name, t in (("w_v", w_v), ("W_q", W_q), ("W_k", W_k)):
        if tuple(t.shape) != expected[name]:
            raise ValueError(
                f"additive_scores needs w_v: (h_a,), W_q: (h_a, d_q), W_k: (h_a, d_k) for queries of shape "
                f"{tuple(queries.shape)} and keys of shape {tuple(keys.shape)}; got w_v "
                f"{tuple(w_v.shape)}, W_q {tuple(W_q.shape)}, W_k {tuple(W_k.shape)}"
            )
    q = queries @ W_q.T  # (batch, n_queries, h_a)
    k = keys @ W_k.T  # (batch, n_keys, h_a)
    # Broadcast every query against every key: (batch, n_queries, n_keys, h_a).
    features = torch.tanh(q.unsqueeze(2) + k.unsqueeze(1))
    return features @ w_v


def bilinear_scores(queries: torch.Tensor, keys: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    r"""Bilinear (Luong "general") scores :math:`\mathbf q^\top \mathbf W \mathbf k`.

    Args:
        queries: (batch, n_queries, d_q)
        keys: (batch, n_keys, d_k)
        W: (d_q, d_k)

    Returns:
        (batch, n_queries, n_keys)

    Examples:
        >>> q = torch.tensor([[[1.0, 0.0]]])  # (1, 1, 2)
        >>> k = torch.tensor([[[2.0, 0.0], [0.0, 3.0], [-1.0, -1.0]]])  # (1, 3, 2)
        >>> bilinear_scores(q, k, 2 * torch.eye(2))  # W = 2 I: twice the dot product
        tensor([[[ 4.,  0., -2.]]])
        >>> bilinear_scores(torch.ones(2, 3, 4), torch.ones(2, 5, 6), torch.ones(4, 6)).shape
        torch.Size([2, 3, 5])
    """
    check_qkv(queries, keys, None, layout=_LAYOUT, ndim=3, same_size=False)
    check_floating(W, "W")
    if W.shape != (queries.shape[-1], keys.shape[-1]):
        raise ValueError(
            f"W must have shape (d_q, d_k) = ({queries.shape[-1]}, {keys.shape[-1]}) for queries "
            f"of shape {tuple(queries.shape)} and keys of shape {tuple(keys.shape)}, got "
            f"{tuple(W.shape)}"
        )
    return (queries @ W) @ keys.transpose(-2, -1)


def cosine_scores(queries: torch.Tensor, keys: torch.Tensor, temperature: float = 1.0,
                  eps: float = 1e-8) -> torch.Tensor:
    r"""Cosine-similarity scores :math:`\cos(\mathbf q, \mathbf k) / \tau`.

    Bounded in :math:`[-1/\tau, 1/\tau]` whatever the norms, so no scaling with d is needed.

    Args:
        queries: (batch, n_queries, d);  keys: (batch, n_keys, d)
        temperature: :math:`\tau > 0`; small values sharpen the weights.
        eps: guards the division for zero vectors (their score is 0).

    Returns:
        (batch, n_queries, n_keys)

    Examples:
        >>> q = torch.tensor([[[1.0, 0.0]]])  # (1, 1, 2)
        >>> k = torch.tensor([[[2.0, 0.0], [0.0, 3.0], [-1.0, -1.0]]])  # (1, 3, 2)
        >>> cosine_scores(q, k), cosine_scores(q, k, temperature=0.5)[..., 0]  # the norms do not count
        (tensor([[[ 1.0000,  0.0000, -0.7071]]]), tensor([[2.]]))
    """
    check_qkv(queries, keys, None, layout=_LAYOUT, ndim=3)
    check_positive(temperature, "temperature")
    q = queries / queries.norm(dim=-1, keepdim=True).clamp_min(eps)
    k = keys / keys.norm(dim=-1, keepdim=True).clamp_min(eps)
    return (q @ k.transpose(-2, -1)) / temperature


class _ScoredAttention(nn.Module):
    """Shared forward: scores -> masked softmax -> dropout -> weighted sum of the values."""

    _same_size = True

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        check_probability(dropout, "dropout")
        self.dropout = nn.Dropout(dropout)
        self.record_weights = False
        self.attention_weights: torch.Tensor | None = None

    def score(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """The scores :math:`a(\\mathbf q, \\mathbf k_i)` before the softmax (each subclass has its own).

        Args:
            queries: (batch, n_queries, d_q)
            keys: (batch, n_keys, d_k)

        Returns:
            (batch, n_queries, n_keys)

        Examples:
            >>> DotProductAttention(scaled=False).score(torch.ones(2, 3, 4), torch.ones(2, 5, 4))[0, 0]
            tensor([4., 4., 4., 4., 4.])
        """
        raise NotImplementedError

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """Attend from each query to the allowed keys and pool their values.

        Args:
            queries: (batch, n_queries, d_q)
            keys: (batch, n_keys, d_k)
            values: (batch, n_keys, d_v)
            mask: optional bool keep-mask, broadcastable to (batch, n_queries, n_keys), ``True`` =
                attend; :func:`course_lib.padding_mask` makes one from valid lengths.

        Returns:
            (batch, n_queries, d_v). While :func:`course_lib.recording_attention` is on, the weights
            (batch, n_queries, n_keys) are kept in ``self.attention_weights`` (detached).
        """
        check_qkv(queries, keys, values, layout=_LAYOUT, ndim=3, same_size=self._same_size)
        scores = self.score(queries, keys)
        if mask is not None:
            check_keep_mask(mask, tuple(scores.shape))
        weights = torch.softmax(scores, dim=-1) if mask is None else softmax_with_keep(scores, mask.to(scores.device))
        if self.record_weights:
            self.attention_weights = weights.detach()
        return self.dropout(weights) @ values


class DotProductAttention(_ScoredAttention):
    r"""Scaled dot-product attention, :math:`\operatorname{softmax}(\mathbf Q \mathbf K^\top/\sqrt d)\mathbf V`.

    Args:
        dropout: dropout rate on the attention weights (training mode only).
        scaled: divide the scores by :math:`\sqrt d` (``False`` gives plain dot-product scores).

    Examples:
        >>> attention = DotProductAttention()
        >>> keys = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]]])
        >>> values = torch.tensor([[[1.0], [3.0], [100.0]]])
        >>> keep = torch.tensor([[[True, True, False]]])  # the third key is padding
        >>> attention(torch.zeros(1, 1, 2), keys, values, keep)
        tensor([[[2.]]])
    """

    def __init__(self, dropout: float = 0.0, scaled: bool = True) -> None:
        super().__init__(dropout)
        self.scaled = scaled

    def score(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return dot_product_scores(queries, keys, scaled=self.scaled)


class AdditiveAttention(_ScoredAttention):
    r"""Additive attention: scores :math:`\mathbf w_v^\top\tanh(\mathbf W_q\mathbf q + \mathbf W_k\mathbf k)`.

    Queries and keys may have different sizes. With ``query_size``/``key_size`` left ``None`` the
    projections are ``nn.LazyLinear`` and take their input size from the first call (as in D2L).

    Args:
        hidden_size: h_a, the size of the hidden layer (``num_hiddens`` in D2L; here that name is kept for
            the model width d).
        dropout: dropout rate on the attention weights.
        query_size, key_size: d_q and d_k, when known up front.

    Examples:
        >>> attention = AdditiveAttention(8, query_size=4, key_size=6)
        >>> queries, keys, values = torch.ones(2, 3, 4), torch.ones(2, 5, 6), torch.ones(2, 5, 7)
        >>> keep = padding_mask(torch.tensor([2, 5]), 5)  # (2, 1, 5): the first sequence has 2 keys
        >>> with recording_attention(attention):
        ...     out = attention(queries, keys, values, keep)
        >>> out.shape, attention.attention_weights[0, 0]  # (batch, n_queries, d_v); equal keys, equal weights
        (torch.Size([2, 3, 7]), tensor([0.5000, 0.5000, 0.0000, 0.0000, 0.0000]))
    """

    _same_size = False

    def __init__(self, hidden_size: int, dropout: float = 0.0, query_size: int | None = None,
                 key_size: int | None = None) -> None:
        super().__init__(dropout)
        check_positive_int(hidden_size, "hidden_size")
        for name, size in (("query_size", query_size), ("key_size", key_size)):
            if size is not None:
                check_positive_int(size, name)
        self.W_q = (nn.Linear(query_size, hidden_size, bias=False) if query_size is not None
                    else nn.LazyLinear(hidden_size, bias=False))
        self.W_k = (nn.Linear(key_size, hidden_size, bias=False) if key_size is not None
                    else nn.LazyLinear(hidden_size, bias=False))
        self.w_v = nn.Linear(hidden_size, 1, bias=False)

    def score(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        for name, t, layer in (("queries", queries, self.W_q), ("keys", keys, self.W_k)):
            if isinstance(layer, nn.Linear) and not isinstance(layer, nn.LazyLinear) and (
                    t.shape[-1] != layer.in_features):
                raise ValueError(
                    f"{name} has size {t.shape[-1]} in its last axis (shape {tuple(t.shape)}) but "
                    f"this AdditiveAttention was built for {layer.in_features}"
                )
        features = torch.tanh(self.W_q(queries).unsqueeze(2) + self.W_k(keys).unsqueeze(1))
        return self.w_v(features).squeeze(-1)  # (batch, n_queries, n_keys)


class BilinearAttention(_ScoredAttention):
    r"""Bilinear (Luong "general") attention, :math:`a(\mathbf q,\mathbf k) = \mathbf q^\top\mathbf W\mathbf k`.

    Args:
        query_size: d_q.
        key_size: d_k (defaults to d_q).
        dropout: dropout rate on the attention weights.
        scaled: divide the scores by :math:`\sqrt{d_k}` as in scaled dot product.

    Examples:
        >>> attention = BilinearAttention(4, key_size=6)
        >>> attention.W.shape  # (d_q, d_k)
        torch.Size([4, 6])
        >>> attention(torch.ones(2, 3, 4), torch.ones(2, 5, 6), torch.ones(2, 5, 7)).shape
        torch.Size([2, 3, 7])
    """

    _same_size = False

    def __init__(self, query_size: int, key_size: int | None = None, dropout: float = 0.0,
                 scaled: bool = False) -> None:
        super().__init__(dropout)
        check_positive_int(query_size, "query_size")
        key_size = query_size if key_size is None else check_positive_int(key_size, "key_size")
        self.W = nn.Parameter(torch.empty(query_size, key_size))
        nn.init.xavier_uniform_(self.W)
        self.scaled = scaled

    def score(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        scores = bilinear_scores(queries, keys, self.W)
        return scores / math.sqrt(keys.shape[-1]) if self.scaled else scores


class CosineAttention(_ScoredAttention):
    r"""Attention with cosine-similarity scores :math:`\cos(\mathbf q,\mathbf k)/\tau`.

    Args:
        temperature: :math:`\tau > 0`.
        dropout: dropout rate on the attention weights.

    Examples:
        >>> attention = CosineAttention(temperature=0.1)
        >>> keys = torch.tensor([[[30.0, 0.0], [0.0, 0.1]]])  # very different norms
        >>> with recording_attention(attention):
        ...     out = attention(torch.tensor([[[1.0, 0.0]]]), keys, torch.tensor([[[1.0], [0.0]]]))
        >>> attention.attention_weights  # softmax of (1, 0) / 0.1: the direction counts, not the norm
        tensor([[[9.9995e-01, 4.5398e-05]]])
    """

    def __init__(self, temperature: float = 0.1, dropout: float = 0.0) -> None:
        super().__init__(dropout)
        check_positive(temperature, "temperature")
        self.temperature = temperature

    def score(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return cosine_scores(queries, keys, self.temperature)
