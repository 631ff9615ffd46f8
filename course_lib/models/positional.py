r"""Positional encodings: fixed sinusoids and learned position embeddings (chapter 4).

Self-attention is permutation equivariant: it cannot tell the order of its inputs. Adding a
position-dependent vector :math:`\mathbf p_t` to each token breaks that symmetry. The sinusoidal
table of Vaswani et al. (2017) is

.. math:: p_{t,2i} = \sin\!\Big(\frac{t}{10000^{2i/d}}\Big),\qquad
   p_{t,2i+1} = \cos\!\Big(\frac{t}{10000^{2i/d}}\Big),

one frequency per pair of columns. Because :math:`\mathbf p_{t+k}` is a rotation of
:math:`\mathbf p_t` that depends only on :math:`k`, the dot product
:math:`\langle\mathbf p_t,\mathbf p_{t+k}\rangle` depends only on the offset :math:`k`.
"""

from __future__ import annotations

import torch
from torch import nn

from .._validation import check_floating, check_ndim, check_positive_int, check_probability

__all__ = ["LearnedPositionalEmbedding", "PositionalEncoding", "sinusoidal_table"]


def sinusoidal_table(max_len: int, num_hiddens: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    r"""The sinusoidal position table :math:`P` (rows are positions, columns features).

    Computed in float64 and then cast, so that large positions keep full precision.

    Args:
        max_len: number of positions T.
        num_hiddens: d; an odd d is allowed (the last column is a sine without its cosine).
        dtype: dtype of the result.

    Returns:
        (max_len, num_hiddens) with ``P[t, 2i] = sin(t / 10000^(2i/d))`` and
        ``P[t, 2i+1] = cos(t / 10000^(2i/d))``.

    Examples:
        >>> sinusoidal_table(3, 4)  # columns: sin t, cos t, sin t/100, cos t/100
        tensor([[ 0.0000,  1.0000,  0.0000,  1.0000],
                [ 0.8415,  0.5403,  0.0100,  0.9999],
                [ 0.9093, -0.4161,  0.0200,  0.9998]])
        >>> P = sinusoidal_table(50, 16, dtype=torch.float64)
        >>> torch.isclose(P[3] @ P[10], P[20] @ P[27]).item()  # <p_t, p_t+k> depends on k only
        True
    """
    check_positive_int(max_len, "max_len")
    check_positive_int(num_hiddens, "num_hiddens")
    positions = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (T, 1)
    # exponent 2i/d for every even column 2i: (ceil(d/2),)
    exponents = torch.arange(0, num_hiddens, 2, dtype=torch.float64) / num_hiddens
    angles = positions / torch.pow(10000.0, exponents)  # (T, ceil(d/2))
    P = torch.empty(max_len, num_hiddens, dtype=torch.float64)
    P[:, 0::2] = torch.sin(angles)
    P[:, 1::2] = torch.cos(angles[:, : num_hiddens // 2])
    return P.to(dtype)


class _PositionalBase(nn.Module):
    """Shared checks and forward: ``dropout(X + P[:, offset:offset + T])``."""

    P: torch.Tensor

    def __init__(self, num_hiddens: int, dropout: float, max_len: int) -> None:
        super().__init__()
        check_positive_int(num_hiddens, "num_hiddens")
        check_positive_int(max_len, "max_len")
        check_probability(dropout, "dropout")
        self.num_hiddens = num_hiddens
        self.max_len = max_len
        self.dropout = nn.Dropout(dropout)

    def extra_repr(self) -> str:
        return f"num_hiddens={self.num_hiddens}, max_len={self.max_len}"

    def forward(self, X: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Add the encodings of positions ``offset, ..., offset + T - 1``.

        Args:
            X: (batch, T, num_hiddens) token embeddings.
            offset: position of ``X[:, 0]`` (the number of tokens already decoded when decoding
                one token at a time).

        Returns:
            (batch, T, num_hiddens): ``dropout(X + P[:, offset:offset + T])``.

        Examples:
            >>> pe = PositionalEncoding(4)
            >>> pe(torch.zeros(1, 1, 4), offset=1)  # one token at position 1 (decoding step by step)
            tensor([[[0.8415, 0.5403, 0.0100, 0.9999]]])
        """
        check_floating(X, "X")
        check_ndim(X, "X", 3, "(batch, T, num_hiddens)")
        if X.shape[2] != self.num_hiddens:
            raise ValueError(
                f"X must have size num_hiddens = {self.num_hiddens} in its last axis (batch, T, num_hiddens), "
                f"got shape {tuple(X.shape)}"
            )
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise TypeError(f"offset must be an int, got {type(offset).__name__}")
        if offset < 0:
            raise ValueError(f"offset must be non-negative, got {offset}")
        end = offset + X.shape[1]
        if end > self.max_len:
            raise ValueError(
                f"positions up to {end - 1} (offset {offset} + {X.shape[1]} steps of X with shape "
                f"{tuple(X.shape)}) exceed max_len = {self.max_len}; build the module with a larger max_len"
            )
        return self.dropout(X + self.P[:, offset:end].to(X.dtype))


class PositionalEncoding(_PositionalBase):
    """Fixed sinusoidal positional encoding (Vaswani et al., 2017), added to the embeddings.

    The table is a non-persistent buffer ``P`` (1, max_len, num_hiddens): it moves with
    ``.to(device)`` / ``.to(dtype)`` but is not saved in the ``state_dict`` (it is recomputed).

    Args:
        num_hiddens: d (odd d allowed: the last column is a sine).
        dropout: dropout rate on the sum.
        max_len: the largest number of positions.

    Examples:
        >>> pe = PositionalEncoding(4)
        >>> pe(torch.zeros(1, 2, 4))  # row t is (sin t, cos t, sin t/100, cos t/100)
        tensor([[[0.0000, 1.0000, 0.0000, 1.0000],
                 [0.8415, 0.5403, 0.0100, 0.9999]]])
    """

    def __init__(self, num_hiddens: int, dropout: float = 0.0, max_len: int = 1000) -> None:
        super().__init__(num_hiddens, dropout, max_len)
        self.register_buffer("P", sinusoidal_table(max_len, num_hiddens).unsqueeze(0), persistent=False)


class LearnedPositionalEmbedding(_PositionalBase):
    """A learned vector per position (as in BERT and GPT), added to the embeddings.

    The table is a parameter ``P`` (1, max_len, num_hiddens) initialised from N(0, 1), the scale
    of the sinusoids; it cannot extrapolate past ``max_len``.

    Args:
        num_hiddens: d.
        dropout: dropout rate on the sum.
        max_len: the number of positions with a learned vector.

    Examples:
        >>> pos = LearnedPositionalEmbedding(8, max_len=16)
        >>> pos.P.shape, num_parameters(pos)  # (1, max_len, num_hiddens)
        (torch.Size([1, 16, 8]), 128)
        >>> pos(torch.zeros(2, 5, 8)).shape
        torch.Size([2, 5, 8])
        >>> pos(torch.zeros(1, 17, 8))
        Traceback (most recent call last):
        ...
        ValueError: positions up to 16 (offset 0 + 17 steps of X with shape (1, 17, 8)) exceed max_len = 16; ...
    """

    def __init__(self, num_hiddens: int, dropout: float = 0.0, max_len: int = 1000) -> None:
        super().__init__(num_hiddens, dropout, max_len)
        self.P = nn.Parameter(torch.randn(1, max_len, num_hiddens))
