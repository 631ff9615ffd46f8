"""``SparseMultiHeadAttention``: multi-head self-attention inside a pattern, a drop-in for the dense module."""

from __future__ import annotations

from typing import Literal

import torch

from .._validation import as_lengths, check_positive_int, check_tensor
from ..masking import lengths_to_mask
from ..multihead import KVCache, MultiHeadAttention
from .blockwise import fixed_attention, strided_attention
from .patterns import PATTERNS, _check_bool, _check_c, _pattern_rows, default_stride, fixed_pattern, strided_pattern


class SparseMultiHeadAttention(MultiHeadAttention):
    r"""Multi-head self-attention restricted to a strided or fixed pattern, never building the n x n matrix.

    A drop-in replacement for :class:`~course_lib.multihead.MultiHeadAttention` in self-attention:
    the same parameters ``W_q, W_k, W_v, W_o`` (so ``load_state_dict`` works both ways), the same
    ``forward(queries, keys, values, valid_lens=None, causal=False, mask=None, kv_cache=None)``.
    ``causal`` selects the causal variant of the pattern. Every head uses the same pattern.

    Three kernels, equal up to rounding (tested):

    - the default: :func:`strided_attention` / :func:`fixed_attention`, O(n sqrt n) memory;
    - ``need_weights=True`` (or :func:`~course_lib.multihead.store_attention_weights`): the explicit
      path with the dense pattern mask, which returns the (batch, h, n, n) weights (small n only);
    - with a ``kv_cache`` (incremental decoding): the new queries attend to the cached keys through
      their rows of the pattern, (n_new, n_keys), bottom-right aligned.

    Args:
        num_hiddens: d.
        num_heads: h; must divide ``num_hiddens``.
        pattern: ``"strided"`` or ``"fixed"``.
        stride: :math:`\ell`; ``None`` uses :func:`default_stride` of each call's length.
        c: summary cells per block of the fixed pattern (ignored by the strided one).
        dropout: dropout on the attention weights (training mode only).
        bias: give the four projections a bias.
    """

    def __init__(self, num_hiddens: int, num_heads: int, pattern: Literal["strided", "fixed"] = "strided",
                 stride: int | None = None, c: int = 1, dropout: float = 0.0, bias: bool = False) -> None:
        super().__init__(num_hiddens, num_heads, dropout, bias)
        if pattern not in PATTERNS:
            raise ValueError(f'pattern must be one of {PATTERNS}, got {pattern!r}')
        if stride is not None:
            check_positive_int(stride, "stride")
            _check_c(c, stride)
        else:
            check_positive_int(c, "c")
        self.pattern = pattern
        self.stride = None if stride is None else int(stride)
        self.c = int(c)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, pattern={self.pattern!r}, stride={self.stride}, c={self.c}"

    @classmethod
    def from_dense(cls, attention: MultiHeadAttention, pattern: Literal["strided", "fixed"] = "strided",
                   stride: int | None = None, c: int = 1) -> SparseMultiHeadAttention:
        """A sparse module with a copy of ``attention``'s weights, dropout rate, device and dtype."""
        if not isinstance(attention, MultiHeadAttention):
            raise TypeError(f"attention must be a MultiHeadAttention, got {type(attention).__name__}")
        sparse = cls(attention.num_hiddens, attention.num_heads, pattern, stride, c, attention.dropout.p,
                     bias=attention.W_q.bias is not None)
        sparse.to(device=attention.W_q.weight.device, dtype=attention.W_q.weight.dtype)
        sparse.load_state_dict(attention.state_dict())
        sparse.train(attention.training)
        return sparse

    def stride_for(self, n: int) -> int:
        """The stride used for sequences of length ``n``."""
        stride = default_stride(n) if self.stride is None else self.stride
        if self.pattern == "fixed":
            _check_c(self.c, stride)
        return stride

    def pattern_mask(self, n: int, causal: bool, device: torch.device | str | None = None) -> torch.Tensor:
        """The (n, n) bool mask this module attends inside, ``True`` = attend."""
        stride = self.stride_for(n)
        if self.pattern == "strided":
            return strided_pattern(n, stride, causal, device)
        return fixed_pattern(n, stride, self.c, causal, device)

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                valid_lens: torch.Tensor | None = None, causal: bool = False,
                mask: torch.Tensor | None = None, kv_cache: KVCache | None = None,
                need_weights: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Sparse self-attention in every head.

        Args:
            queries: (batch, n, num_hiddens)
            keys, values: (batch, n, num_hiddens), the same length as ``queries`` (self-attention);
                with a ``kv_cache``, any number of new positions.
            valid_lens: optional (batch,) or (batch, n) integer lengths: keys ``j >= valid_lens`` are
                ignored (padding).
            causal: the causal variant of the pattern (``j <= i``).
            mask: optional **key** mask (padding), bool, broadcastable to (batch, 1, 1, n_keys),
                ``True`` = attend. A general (n_queries, n_keys) mask is refused: it is the n x n
                matrix this module avoids (use :class:`MultiHeadAttention` for it).
            kv_cache: optional :class:`KVCache` for incremental decoding; query ``t`` of the new ones
                sits at position ``n_keys - n_new + t``.
            need_weights: also return the (batch, h, n_queries, n_keys) weights (the explicit path).

        Returns:
            (batch, n, num_hiddens); with ``need_weights``, also the weights.
        """
        self._check_inputs(queries, keys, values, kv_cache)
        _check_bool(causal, "causal")
        _check_bool(need_weights, "need_weights")
        batch, n_q = queries.shape[:2]
        n_k = keys.shape[1] + (0 if kv_cache is None else len(kv_cache))
        if kv_cache is None and n_q != n_k:
            raise ValueError(f"sparse self-attention needs as many queries as keys, got queries of shape "
                             f"{tuple(queries.shape)} and keys of shape {tuple(keys.shape)}")
        device = queries.device
        stride = self.stride_for(n_k)
        key_mask = None if mask is None else self._key_mask(mask, batch, n_k).to(device)  # (B or 1, n_k)
        lens = None if valid_lens is None else as_lengths(valid_lens, "valid_lens", max_len=n_k, device=device)
        if lens is not None and lens.shape not in ((batch,), (batch, n_q)):
            raise ValueError(f"valid_lens must have shape ({batch},) or ({batch}, {n_q}) for {n_q} queries and "
                             f"{n_k} keys in a batch of {batch}, got {tuple(lens.shape)}")
        q, k, v = self._project(queries, keys, values)  # (B, h, T, d_h) each
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)
        weights = None
        if need_weights or kv_cache is not None:
            keep = self._dense_keep(n_q, n_k, stride, causal, key_mask, lens, device)
            if need_weights:
                out, weights = self._explicit_attention(q, k, v, keep)
            else:
                out = self._fast_attention(q, k, v, keep, False)
        else:
            sparse = strided_attention if self.pattern == "strided" else fixed_attention
            extra = {} if self.pattern == "strided" else {"c": self.c}
            out = sparse(q, k, v, stride, causal=causal, valid_lens=lens, key_mask=key_mask,
                         dropout_p=self.dropout.p if self.training else 0.0, **extra)
        out = self.W_o(out.transpose(1, 2).reshape(batch, n_q, self.num_hiddens))  # concatenate the heads
        return (out, weights) if need_weights else out

    def _dense_keep(self, n_q: int, n_k: int, stride: int, causal: bool, key_mask: torch.Tensor | None,
                    lens: torch.Tensor | None, device: torch.device) -> torch.Tensor:
        """(B or 1, 1, n_q, n_k) bool: the pattern rows of the queries, with the padding."""
        q_pos = torch.arange(n_k - n_q, n_k, device=device)  # bottom-right aligned, as with a cache
        keep = _pattern_rows(self.pattern, q_pos, n_k, stride, self.c, causal)[None, None]
        if key_mask is not None:
            keep = keep & key_mask[:, None, None, :]
        if lens is not None:
            lens = lens.view(-1, 1, 1) if lens.dim() == 1 else lens.view(lens.shape[0], 1, n_q)
            keep = keep & lengths_to_mask(lens, n_k)  # (B, 1, 1 or n_q, n_k)
        return keep

    def _key_mask(self, mask: object, batch: int, n_k: int) -> torch.Tensor:
        check_tensor(mask, "mask")
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be a bool tensor (True = attend), got dtype {mask.dtype}")
        if mask.dim() > 4:
            raise ValueError(f"mask must have at most 4 axes (batch, heads, n_queries, n_keys), got shape "
                             f"{tuple(mask.shape)}")
        full = (1,) * (4 - mask.dim()) + tuple(mask.shape)
        if full[1:3] != (1, 1) or full[3] != n_k or full[0] not in (1, batch):
            raise ValueError(
                f"SparseMultiHeadAttention accepts only a key (padding) mask broadcastable to (batch, 1, 1, n_keys) "
                f"= ({batch}, 1, 1, {n_k}), got shape {tuple(mask.shape)}; a mask with a query axis is the "
                f"n x n matrix sparse attention avoids (use MultiHeadAttention for it)"
            )
        return mask.reshape(full[0], n_k)
