r"""ALiBi, attention with linear biases (Press et al. 2022), and its attention kernel (chapter 11).

ALiBi adds no position vector anywhere. Each head :math:`h` instead penalises a score by its distance,

.. math:: s_{ij} = \frac{\mathbf q_i^\top\mathbf k_j}{\sqrt{d_h}} - m_h\,|i - j|,

with a fixed slope :math:`m_h` per head: a geometric sequence, so that some heads look far and others
near. For :math:`n` heads, :math:`n` a power of two, :math:`m_h = 2^{-8h/n}`,
:math:`h = 1, \dots, n` (8 heads: 1/2, 1/4, ..., 1/256). For other counts the paper takes the
:math:`2^{\lfloor\log_2 n\rfloor}` slopes of the power of two below :math:`n`, then every other slope of
the next power of two (:func:`alibi_slopes`).

The paper (a causal language model) writes the bias :math:`-m_h (i - j)` for the keys :math:`j \le i`
the causal mask keeps; here it is :math:`-m_h |i - j|`, the same on those keys and symmetric when no
causal mask is used (as x-transformers does). Positions follow the library's bottom-right
convention: keys at ``0 .. n_keys - 1``, queries at the last ``n_queries`` of them, so the bias stays
right with a key/value cache.

Softmax is invariant to adding a constant to a row: Hugging Face's BLOOM adds :math:`m_h j`, which
differs from :math:`-m_h (i - j)` by :math:`m_h i`, the same for every key of row :math:`i`, and gives
the same attention weights.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..._validation import check_non_negative_int, check_positive_int
from ..contract import keep_mask
from ..masks import softmax_with_keep

__all__ = ["ALiBiKernel", "alibi_bias", "alibi_slopes"]


def _slopes(n: int) -> list[float]:
    """Press et al.'s slopes as Python floats (exact for a power of two, double precision otherwise)."""
    if n & (n - 1) == 0:  # a power of two: 2^(-8/n), 2^(-16/n), ..., 2^(-8)
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]
    below = 2 ** math.floor(math.log2(n))
    return _slopes(below) + _slopes(2 * below)[0::2][: n - below]


def alibi_slopes(num_heads: int, *, dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None) -> torch.Tensor:
    r"""ALiBi's slope :math:`m_h` of every head (Press et al. 2022), geometric and decreasing.

    Args:
        num_heads: :math:`n`; a power of two gives :math:`m_h = 2^{-8h/n}`; other counts take the
            :math:`2^{\lfloor\log_2 n\rfloor}` slopes of the power of two below, then every other slope of
            the power of two above, until there are :math:`n`.
        dtype, device: of the result.

    Returns:
        (num_heads,)

    Examples:
        >>> alibi_slopes(8).tolist()
        [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]
        >>> alibi_slopes(12, dtype=torch.float64)[8:]  # 2^-0.5, 2^-1.5, ...: the odd slopes of 16 heads
        tensor([0.7071, 0.3536, 0.1768, 0.0884], dtype=torch.float64)
    """
    num_heads = check_positive_int(num_heads, "num_heads")
    return torch.tensor(_slopes(num_heads), dtype=dtype, device=device)


def alibi_bias(num_heads: int, n_queries: int, n_keys: int, *, dtype: torch.dtype = torch.float32,
               device: torch.device | str | None = None) -> torch.Tensor:
    r"""The additive ALiBi bias :math:`-m_h |i - j|` of every head, query and key.

    Add it to the scaled scores before the softmax. A constant added to a row changes nothing (softmax
    is shift invariant), which is why other forms of the bias (BLOOM's :math:`m_h j`) give the same
    attention.

    Args:
        num_heads: :math:`n`, the heads (the slopes are :func:`alibi_slopes`).
        n_queries: the queries, at key positions ``n_keys - n_queries .. n_keys - 1`` (bottom-right).
        n_keys: the keys, at positions ``0 .. n_keys - 1``.
        dtype, device: of the result.

    Returns:
        (num_heads, n_queries, n_keys), zero on the query's own position and negative elsewhere.

    Examples:
        >>> alibi_bias(2, 3, 3)[0]  # slope 1/16 for the first of two heads
        tensor([[ 0.0000, -0.0625, -0.1250],
                [-0.0625,  0.0000, -0.0625],
                [-0.1250, -0.0625,  0.0000]])
        >>> alibi_bias(2, 1, 3)[0]  # one new query after two cached keys: it sits at position 2
        tensor([[-0.1250, -0.0625,  0.0000]])
    """
    num_heads = check_positive_int(num_heads, "num_heads")
    check_non_negative_int(n_queries, "n_queries")
    check_non_negative_int(n_keys, "n_keys")
    slopes = alibi_slopes(num_heads, dtype=torch.float64, device=device)
    q_pos = torch.arange(n_keys - n_queries, n_keys, dtype=torch.float64, device=device)
    k_pos = torch.arange(n_keys, dtype=torch.float64, device=device)
    distance = (q_pos[:, None] - k_pos[None, :]).abs()  # (n_q, n_k)
    return (0.0 - slopes[:, None, None] * distance).to(dtype)  # (H, n_q, n_k); 0 - x: no -0.0 on the diagonal


class ALiBiKernel:
    r"""Attention with ALiBi's linear biases: softmax(QKᵀ/√d + bias) V, the bias of :func:`alibi_bias`.

    An :class:`~course_lib.attention.contract.AttentionKernel`: ``MultiHeadAttention(d, h,
    kernel=ALiBiKernel())`` needs no position embedding. The slopes follow the number of query heads
    (with grouped-query attention each query head keeps its own slope). Without ``need_weights`` the
    bias, with :math:`-\infty` where the keep-mask forbids a key, is ``scaled_dot_product_attention``'s
    float ``attn_mask``; with it, the scores are formed explicitly. A query that may see no key outputs
    zeros. The queries and keys must be 4-D, (B, H, n, d).

    Examples:
        >>> mha = MultiHeadAttention(16, 4, kernel=ALiBiKernel())
        >>> x = torch.randn(2, 5, 16)
        >>> mha(x, x, x, causal=True).shape
        torch.Size([2, 5, 16])
        >>> q, k, v = torch.zeros(1, 8, 1, 2), torch.zeros(1, 8, 3, 2), torch.randn(1, 8, 3, 1)
        >>> out, weights = ALiBiKernel()(q, k, v, need_weights=True)  # equal scores: the bias alone decides
        >>> weights[0, 0]  # head 0 of 8 has the slope 1/2: softmax(-1, -1/2, 0)
        tensor([[0.1863, 0.3072, 0.5065]])
    """

    def __repr__(self) -> str:
        return "ALiBiKernel()"

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, *,
                 causal: bool = False, dropout_p: float = 0.0, scale: float | None = None,
                 need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Args and returns: see :mod:`course_lib.attention.contract`; q (B, H, n_q, d), k and v 4-D too."""
        if q.dim() != 4 or k.dim() != 4:
            raise ValueError(f"ALiBiKernel needs queries and keys with a head axis, (B, H, n, d); got queries "
                             f"{tuple(q.shape)} and keys {tuple(k.shape)}")
        heads, n_q, n_k = q.shape[1], q.shape[2], k.shape[2]
        bias = alibi_bias(heads, n_q, n_k, dtype=q.dtype, device=q.device)  # (H, n_q, n_k)
        keep = keep_mask(mask, causal, n_q, n_k, q.device)
        if need_weights:
            return _explicit(q, k, v, bias, keep, dropout_p, scale)
        options = {"dropout_p": dropout_p, "scale": scale}
        if heads != k.shape[1]:
            options["enable_gqa"] = True
        if keep is None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, **options), None
        # A query with no key would get a row of -inf (NaN): let it see every key, then zero its output.
        row_ok = keep.any(dim=-1, keepdim=True)
        attn_mask = torch.where(keep | ~row_ok, bias, float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, **options) * row_ok, None


def _explicit(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, keep: torch.Tensor | None,
              dropout_p: float, scale: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The scores written out, for the weights: (B, H, n_q, d_v) and (B, H, n_q, n_k)."""
    if q.shape[1] != k.shape[1]:  # grouped-query heads: each key/value head serves its group
        k, v = (t.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for t in (k, v))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale + bias  # (B, H, n_q, n_k)
    weights = torch.softmax(scores, dim=-1) if keep is None else softmax_with_keep(scores, keep)
    dropped = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
    return dropped @ v, weights
