"""``SparseMultiHeadAttention``: multi-head attention whose kernel is a sparse pattern (a drop-in)."""

from __future__ import annotations

from typing import Literal

import torch

from ..._validation import check_bool
from ..multihead import MultiHeadAttention
from .blockwise import SparseKernel
from .patterns import pattern_mod


class SparseMultiHeadAttention(MultiHeadAttention):
    r"""A :class:`~course_lib.attention.multihead.MultiHeadAttention` whose kernel is a :class:`SparseKernel`.

    Nothing but the kernel differs: the same parameters ``W_q, W_k, W_v, W_o`` (so ``load_state_dict``
    works both ways) and the same ``forward``; ``causal`` selects the causal variant of the pattern,
    and every head uses the same pattern. The mask may only mark keys (padding), e.g.
    :func:`course_lib.padding_mask`: a general (n_queries, n_keys) mask is refused.

    Args:
        num_hiddens: d.
        num_heads: h; must divide ``num_hiddens``.
        pattern: ``"strided"`` or ``"fixed"``.
        stride: :math:`\ell`; ``None`` uses :func:`default_stride` of each call's length.
        c: summary cells per block of the fixed pattern (ignored by the strided one).
        dropout: dropout on the attention weights (training mode only).
        bias: give the four projections a bias.

    Examples:
        >>> mha = SparseMultiHeadAttention(16, 2, pattern="fixed", stride=4, c=1)
        >>> x = torch.randn(2, 12, 16)
        >>> mha(x, x, x, padding_mask(torch.tensor([12, 7]), 12), causal=True).shape
        torch.Size([2, 12, 16])
    """

    def __init__(self, num_hiddens: int, num_heads: int, pattern: Literal["strided", "fixed"] = "strided",
                 stride: int | None = None, c: int = 1, dropout: float = 0.0, bias: bool = False) -> None:
        super().__init__(num_hiddens, num_heads, dropout, bias, kernel=SparseKernel(pattern, stride, c))

    @property
    def pattern(self) -> str:
        """``"strided"`` or ``"fixed"``, the kernel's pattern.

        Examples:
            >>> mha = SparseMultiHeadAttention(16, 2, pattern="fixed", stride=4, c=2)
            >>> mha.pattern, mha.stride, mha.c
            ('fixed', 4, 2)
        """
        return self.kernel.pattern

    @property
    def stride(self) -> int | None:
        r"""The fixed stride :math:`\ell`, or ``None`` for :func:`default_stride` of each call's length (see
        :attr:`pattern` for an example)."""
        return self.kernel.stride

    @property
    def c(self) -> int:
        """Summary cells per block of the fixed pattern (see :attr:`pattern` for an example)."""
        return self.kernel.c

    @classmethod
    def from_dense(cls, attention: MultiHeadAttention, pattern: Literal["strided", "fixed"] = "strided",
                   stride: int | None = None, c: int = 1) -> SparseMultiHeadAttention:
        """A sparse module with a copy of ``attention``'s weights, dropout rate, device, dtype and recording flag.

        Examples:
            >>> dense = MultiHeadAttention(16, 2)
            >>> sparse = SparseMultiHeadAttention.from_dense(dense, "strided", stride=3)
            >>> torch.equal(sparse.W_q.weight, dense.W_q.weight)
            True
            >>> x = torch.randn(1, 9, 16)  # with the pattern's mask, the dense module gives the same output
            >>> torch.allclose(sparse(x, x, x, causal=True), dense(x, x, x, sparse.pattern_mask(9, causal=True)),
            ...                atol=1e-5)
            True
        """
        if not isinstance(attention, MultiHeadAttention):
            raise TypeError(f"attention must be a MultiHeadAttention, got {type(attention).__name__}")
        if attention.num_kv_heads != attention.num_heads:
            raise ValueError("from_dense copies ordinary multi-head attention (num_kv_heads == num_heads)")
        sparse = cls(attention.num_hiddens, attention.num_heads, pattern, stride, c, attention.dropout.p,
                     bias=attention.W_q.bias is not None)
        sparse.to(device=attention.W_q.weight.device, dtype=attention.W_q.weight.dtype)
        sparse.load_state_dict(attention.state_dict())
        sparse.train(attention.training)
        sparse.record_weights = attention.record_weights
        return sparse

    def stride_for(self, n: int) -> int:
        """The stride used for sequences of length ``n``.

        Examples:
            >>> SparseMultiHeadAttention(16, 2).stride_for(50), SparseMultiHeadAttention(16, 2, stride=4).stride_for(50)
            (8, 4)
        """
        return self.kernel.stride_for(n)

    def pattern_mask(self, n: int, causal: bool, device: torch.device | str | None = None) -> torch.Tensor:
        """The (n, n) bool mask this module attends inside, ``True`` = attend.

        Examples:
            >>> mha = SparseMultiHeadAttention(16, 2, pattern="strided", stride=3)
            >>> torch.equal(mha.pattern_mask(6, causal=True), strided_pattern(6, 3))
            True
        """
        return pattern_mod(self.pattern, self.stride_for(n), self.c, check_bool(causal, "causal")).materialize(
            n, device=device)
