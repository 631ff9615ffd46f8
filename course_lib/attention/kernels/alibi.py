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

The bias is a score modifier (:func:`alibi_mod`, a :class:`~course_lib.attention.score_mods.ScoreMod`), so
ALiBi is not a kernel of its own: :class:`ALiBiKernel` hands it to any kernel that takes score modifiers
(fused, explicit, flash), which adds it where it forms the scores.
"""

from __future__ import annotations

import math

import torch

from ..._validation import check_non_negative_int, check_positive_int
from ..contract import AttentionKernel, Capabilities, check_kernel
from ..masks import MaskMod
from ..score_mods import ScoreMod
from .fused import fused_kernel

__all__ = ["ALiBiKernel", "alibi_bias", "alibi_mod", "alibi_slopes"]


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


def alibi_mod(num_heads: int) -> ScoreMod:
    r"""ALiBi's bias as a score modifier: :math:`-m_h |q_{pos} - kv_{pos}|` for head ``h`` (the slopes of
    :func:`alibi_slopes`), computed in float64 and cast to the scores' dtype by the kernel.

    Args:
        num_heads: :math:`n`, the query heads.

    Returns:
        A :class:`~course_lib.attention.score_mods.ScoreMod`.

    Examples:
        >>> alibi_mod(2).materialize(1, 3, heads=2, dtype=torch.float32)[0, :, 0]  # slopes 1/16 and 1/256
        tensor([[-0.1250, -0.0625,  0.0000],
                [-0.0078, -0.0039,  0.0000]])
    """
    slopes = torch.tensor(_slopes(check_positive_int(num_heads, "num_heads")), dtype=torch.float64)

    def bias(b: torch.Tensor, h: torch.Tensor, q_pos: torch.Tensor, kv_pos: torch.Tensor) -> torch.Tensor:
        distance = (q_pos - kv_pos).abs().to(torch.float64)
        return 0.0 - slopes.to(distance.device)[h] * distance  # 0 - x: no -0.0 on the diagonal

    return ScoreMod(bias, f"alibi({num_heads})")


def alibi_bias(num_heads: int, n_queries: int, n_keys: int, *, dtype: torch.dtype = torch.float32,
               device: torch.device | str | None = None) -> torch.Tensor:
    r"""The additive ALiBi bias :math:`-m_h |i - j|` of every head, query and key (:func:`alibi_mod`, materialised).

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
    return alibi_mod(num_heads).materialize(n_queries, n_keys, heads=num_heads, dtype=dtype, device=device)[0]


class ALiBiKernel:
    r"""ALiBi's linear biases around another kernel, softmax(QKᵀ/√d + bias) V (registered as ``"alibi"``).

    ``MultiHeadAttention(d, h, kernel=ALiBiKernel())`` needs no position embedding. The bias is
    :func:`alibi_mod` of the call's query heads (with grouped-query attention each query head keeps its
    own slope), added to the call's own score modifier if any, and the inner kernel applies it: the fused
    kernel as ``scaled_dot_product_attention``'s float mask, the explicit kernel on its score matrix, the
    flash kernel tile by tile. A query that may see no key outputs zeros. The queries and keys must have a
    head axis, (B, H, n, d).

    Args:
        inner: the kernel that attends (default the fused kernel; by name, ``attention_kernel("alibi",
            inner="flash")``); it must take score modifiers.

    Examples:
        >>> mha = MultiHeadAttention(16, 4, kernel=ALiBiKernel())
        >>> x = torch.randn(2, 5, 16)
        >>> mha(x, x, x, causal=True).shape
        torch.Size([2, 5, 16])
        >>> q, k, v = torch.zeros(1, 8, 1, 2), torch.zeros(1, 8, 3, 2), torch.randn(1, 8, 3, 1)
        >>> out, weights = ALiBiKernel(explicit_kernel)(q, k, v, need_weights=True)  # the bias decides
        >>> weights[0, 0]  # head 0 of 8 has the slope 1/2: softmax(-1, -1/2, 0)
        tensor([[0.1863, 0.3072, 0.5065]])
        >>> flash = ALiBiKernel(FlashKernel())(q, k, v)[0]  # the same biases, added tile by tile
        >>> torch.allclose(flash, out, atol=1e-6)
        True
    """

    name = "alibi"

    def __init__(self, inner: AttentionKernel = fused_kernel) -> None:
        self.inner = check_kernel(inner, "inner")
        if not self.inner.supports.score_mods:
            raise ValueError(f"ALiBi adds its biases as a score modifier, and the {self.inner.name!r} kernel does "
                             f"not support score modifiers; use a softmax kernel (fused, explicit, flash)")
        self._mods: dict[int, ScoreMod] = {}

    @property
    def supports(self) -> Capabilities:
        """What the inner kernel supports."""
        return self.inner.supports

    def __repr__(self) -> str:
        return f"ALiBiKernel({self.inner!r})"

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 mask: torch.Tensor | MaskMod | None = None, *, causal: bool = False, dropout_p: float = 0.0,
                 scale: float | None = None, score_mod: ScoreMod | None = None,
                 need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Args and returns: see :mod:`course_lib.attention.contract`; q (B, H, n_q, d), k and v 4-D too."""
        if q.dim() != 4 or k.dim() != 4:
            raise ValueError(f"ALiBiKernel needs queries and keys with a head axis, (B, H, n, d); got queries "
                             f"{tuple(q.shape)} and keys {tuple(k.shape)}")
        heads = q.shape[1]
        if heads not in self._mods:
            self._mods[heads] = alibi_mod(heads)
        alibi = self._mods[heads] if score_mod is None else score_mod + self._mods[heads]
        return self.inner(q, k, v, mask, causal=causal, dropout_p=dropout_p, scale=scale, score_mod=alibi,
                          need_weights=need_weights)
