r"""Multi-head attention and the key/value cache for incremental decoding (chapter 5).

Each of the :math:`h` heads attends in its own learned subspace of size :math:`d_h = d / h`:

.. math:: \mathbf h_i = \operatorname{softmax}\!\Big(\frac{(\mathbf Q\mathbf W_q^{(i)})
   (\mathbf K\mathbf W_k^{(i)})^\top}{\sqrt{d_h}}\Big)\,\mathbf V\mathbf W_v^{(i)},\qquad
   \operatorname{MHA}(\mathbf Q,\mathbf K,\mathbf V) = [\mathbf h_1,\dots,\mathbf h_h]\,\mathbf W_o .

The :math:`h` projections of size :math:`d \times d_h` are stored side by side in one
``nn.Linear(d, d)`` per role (``W_q, W_k, W_v``), so all heads are computed with one matrix
product and a reshape. With the notes' sizes (batch 30, 50 tokens, d = 512, 8 heads of 64) the
queries ``(30, 50, 512)`` become ``(30, 8, 50, 64)``. The attention itself is a kernel
(:mod:`course_lib.attention.contract`), chosen by name: the module projects, the kernel attends, the module
merges.

With ``num_kv_heads`` smaller than ``num_heads`` the keys and values have fewer heads, each shared by
a group of query heads: grouped-query attention :cite:`ainslie2023`, multi-query attention
:cite:`shazeer2019` when it is 1. ``W_k`` and ``W_v`` then map d to ``num_kv_heads`` x d_h features,
and the key/value cache shrinks by the factor ``num_heads / num_kv_heads``.

Masks are boolean, ``True`` = attend, as in ``torch.nn.functional.scaled_dot_product_attention``
(``torch.nn.MultiheadAttention`` uses ``True`` = masked out).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .._validation import (
    check_bool,
    check_heads,
    check_heads_inputs,
    check_heads_mask,
    check_positive_int,
    check_probability,
    check_qkv,
)
from ..utils import stacked_linear
from .cache import Cache
from .contract import AttentionKernel, check_supported
from .kernels.rotary import RotaryEmbedding
from .masks import MaskMod
from .registry import attention_kernel

__all__ = ["MultiHeadAttention"]


class MultiHeadAttention(nn.Module):
    r"""Multi-head scaled dot-product attention with projections ``W_q, W_k, W_v, W_o``: project, attend, merge.

    The attention is computed by ``kernel`` (:mod:`course_lib.attention.contract`), by default the fused
    ``scaled_dot_product_attention``; what the kernel does not support (attention dropout for the flash
    kernel, a query mask for linear attention, ...) is refused before the call. To keep the weights for
    plots, record them: ``with course_lib.recording_attention(model): ...`` fills ``attention_weights``.

    A query that may attend to no key at all pools the zero vector (never NaN), so its output is
    ``W_o``'s bias, or zero when ``bias=False``.

    Args:
        num_hiddens: d, the model size of queries, keys, values and output.
        num_heads: h; must divide ``num_hiddens`` (each head has size d_h = d / h).
        dropout: dropout rate on the attention weights (training mode only).
        bias: give the four projections a bias.
        num_kv_heads: key/value heads (grouped-query attention); ``None`` means ``num_heads``; must
            divide ``num_heads``; 1 is multi-query attention.
        rotary: RoPE applied to the new queries and keys before the cache's update (each key rotated once, at
            its position, and cached rotated: :class:`~course_lib.RotaryEmbedding`), or ``None``.
        kernel: the attention computation: a kernel's name (:mod:`course_lib.attention.registry`: ``"fused"``,
            ``"explicit"``, ``"flash"``, ...) or an :class:`~course_lib.attention.contract.AttentionKernel`.

    Attributes:
        record_weights: whether calls keep their weights (set by :func:`course_lib.recording_attention`).
        attention_weights: ``None``, or the detached (batch, num_heads, n_queries, n_keys) weights of
            the last call made while recording.

    Examples:
        >>> mha = MultiHeadAttention(num_hiddens=16, num_heads=4)
        >>> queries, keys = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
        >>> mha(queries, keys, keys, mask=padding_mask(torch.tensor([5, 2]), 5)).shape
        torch.Size([2, 3, 16])
    """

    def __init__(self, num_hiddens: int, num_heads: int, dropout: float = 0.0, bias: bool = False, *,
                 num_kv_heads: int | None = None, kernel: str | AttentionKernel = "fused",
                 rotary: RotaryEmbedding | None = None) -> None:
        super().__init__()
        self.num_hiddens, self.num_heads = check_positive_int(num_hiddens, "num_hiddens"), num_heads
        self.num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        check_heads(num_hiddens, num_heads, self.num_kv_heads)
        self.head_size = num_hiddens // num_heads
        kv_size = self.num_kv_heads * self.head_size
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_k = nn.Linear(num_hiddens, kv_size, bias=bias)
        self.W_v = nn.Linear(num_hiddens, kv_size, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.dropout = nn.Dropout(check_probability(dropout, "dropout"))
        self.kernel = attention_kernel(kernel)
        if rotary is not None and not isinstance(rotary, RotaryEmbedding):
            raise TypeError(f"rotary must be a RotaryEmbedding or None, got {type(rotary).__name__}")
        if rotary is not None and rotary.head_size != self.head_size:
            raise ValueError(f"rotary turns heads of size {rotary.head_size}, the module's heads have size "
                             f"{self.head_size}")
        self.rotary = rotary
        self.record_weights = False
        self.attention_weights: torch.Tensor | None = None
        self._kv: dict = {}

    def extra_repr(self) -> str:
        kernel = repr(self.kernel)
        grouped = f", num_kv_heads={self.num_kv_heads}" if self.num_kv_heads != self.num_heads else ""
        rotary = "" if self.rotary is None else f", rotary={self.rotary!r}"
        return f"num_hiddens={self.num_hiddens}, num_heads={self.num_heads}{grouped}, kernel={kernel}{rotary}"

    def forward(self, queries: torch.Tensor, keys: torch.Tensor | None = None, values: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, *, causal: bool = False,
                kv: tuple[torch.Tensor, torch.Tensor] | None = None, kv_cache: Cache | None = None) -> torch.Tensor:
        """Attend from every query to the allowed keys, in every head.

        Args:
            queries: (batch, n_queries, num_hiddens)
            keys, values: (batch, n_keys, num_hiddens); or leave them out and pass ``kv``.
            mask: optional bool keep-mask, ``True`` = attend: (n_queries, n_keys), (batch, n_queries or
                1, n_keys) shared by the heads (:func:`course_lib.padding_mask` makes one from lengths),
                or (batch or 1, num_heads or 1, n_queries, n_keys); or a rule, a :class:`MaskMod`.
            causal: query ``i`` sees keys ``j <= i + (n_keys - n_queries)``: the look-ahead mask aligned
                bottom-right, so it stays right when a cache holds earlier keys.
            kv: keys and values already projected by :meth:`project_kv`, (batch, num_kv_heads, n_keys, d_h)
                each (the decoder's cross-attention projects its memory once).
            kv_cache: optional :class:`~course_lib.attention.cache.Cache` (a :class:`~course_lib.KVCache`, ...); the
                new projected keys and values are appended to it
                and the queries attend to all of them (n_keys = T_past + new keys).

        Returns:
            (batch, n_queries, num_hiddens)

        Examples:
            >>> mha = MultiHeadAttention(16, num_heads=4, num_kv_heads=2).eval()  # grouped-query attention
            >>> x = torch.randn(2, 5, 16)
            >>> y = mha(x, x, x, causal=True)  # self-attention, no look-ahead
            >>> y.shape
            torch.Size([2, 5, 16])
            >>> torch.allclose(mha(x[:, :3], x[:, :3], x[:, :3], causal=True), y[:, :3], atol=1e-6)  # the past only
            True
        """
        check_bool(causal, "causal")
        batch, n_q, n_k = check_heads_inputs(queries, keys, values, kv, num_hiddens=self.num_hiddens,
                                             num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
                                             dtype=self.W_q.weight.dtype, cached=_cached(kv_cache, queries))
        # Checked before the cache grows, so a bad mask leaves it intact; (B, Tq, Tk) -> (B, 1, Tq, Tk).
        if mask is not None and not isinstance(mask, MaskMod):
            mask = check_heads_mask(mask, batch, self.num_heads, n_q, n_k)
        return self.compute(queries, keys, values, mask, causal=causal, kv=kv, kv_cache=kv_cache)

    def compute(self, queries: torch.Tensor, keys: torch.Tensor | None = None, values: torch.Tensor | None = None,
                mask: torch.Tensor | MaskMod | None = None, *, causal: bool = False,
                kv: tuple[torch.Tensor, torch.Tensor] | None = None, kv_cache: Cache | None = None) -> torch.Tensor:
        """:meth:`forward`'s computation for arguments already checked: what a model's blocks call.

        A model checks its inputs once, at its own boundary (the token ids, the lengths); its blocks then
        call this, which skips the argument checks of :meth:`forward` (what the kernel does not support is
        still refused). Same arguments and result as :meth:`forward`.

        Examples:
            >>> mha, x = MultiHeadAttention(16, 4).eval(), torch.randn(2, 5, 16)
            >>> torch.equal(mha.compute(x, x, x, causal=True), mha(x, x, x, causal=True))
            True
        """
        if isinstance(mask, torch.Tensor) and mask.dim() == 3:
            mask = mask.unsqueeze(1)  # (B, Tq, Tk): shared by the heads
        dropout_p = self.dropout.p if self.training else 0.0
        check_supported(self.kernel, mask=mask, dropout_p=dropout_p, need_weights=self.record_weights,
                        grouped=self.num_kv_heads != self.num_heads)
        q, k, v = self._project(queries, keys, values, kv)  # (B, h, Tq, d_h), (B, h_kv, Tk, d_h) x 2
        if self.rotary is not None and kv is None:
            # The new keys sit at positions start .. start + Tk - 1, the queries at the last Tq of them.
            start = 0 if kv_cache is None else kv_cache.position
            q, k = self.rotary(q, start + k.shape[-2] - q.shape[-2]), self.rotary(k, start)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)
        out, weights = self.kernel(q, k, v, mask.to(q.device) if isinstance(mask, torch.Tensor) else mask,
                                   causal=causal, dropout_p=dropout_p, need_weights=self.record_weights)
        if self.record_weights:
            self.attention_weights = weights.detach()
        # (B, h, Tq, d_h) -> (B, Tq, h, d_h) -> (B, Tq, d): concatenate the heads.
        merged = out.transpose(1, 2).reshape(queries.shape[0], queries.shape[1], self.num_hiddens)
        return F.linear(merged, self.W_o.weight, self.W_o.bias)

    def project_kv(self, keys: torch.Tensor, values: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values projected and split into heads, for ``forward(queries, kv=...)``.

        Args:
            keys: (batch, n_keys, num_hiddens)
            values: (batch, n_keys, num_hiddens); default ``keys`` (cross-attention to a memory).

        Returns:
            (batch, num_kv_heads, n_keys, d_h) keys and values.

        Examples:
            >>> mha = MultiHeadAttention(16, num_heads=4).eval()
            >>> memory, queries = torch.randn(2, 7, 16), torch.randn(2, 3, 16)
            >>> kv = mha.project_kv(memory)  # once per source sentence
            >>> kv[0].shape  # (batch, num_kv_heads, n_keys, d_h)
            torch.Size([2, 4, 7, 4])
            >>> torch.allclose(mha(queries, kv=kv), mha(queries, memory, memory), atol=1e-6)
            True
        """
        values = keys if values is None else values
        check_qkv(keys, keys, values, layout="(batch, n_keys, num_hiddens)", ndim=3, size=self.num_hiddens,
                  dtype=self.W_k.weight.dtype)
        return self._project_kv(keys, values)

    def _project(self, queries: torch.Tensor, keys: torch.Tensor | None, values: torch.Tensor | None,
                 kv: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[torch.Tensor, ...]:
        # Self-attention: three products, each output contiguous (measured faster than one product with the
        # stacked weights both for a decoding step, which pays the stack's bookkeeping, and under autograd,
        # which pays for concatenating the split's gradients).
        q = F.linear(queries, self.W_q.weight, self.W_q.bias)
        if kv is not None:
            k, v = kv
        elif queries is keys and keys is values:
            k = self._split(F.linear(keys, self.W_k.weight, self.W_k.bias), self.num_kv_heads)
            v = self._split(F.linear(values, self.W_v.weight, self.W_v.bias), self.num_kv_heads)
        else:
            k, v = self._project_kv(keys, values)
        return self._split(q, self.num_heads), k, v

    def _project_kv(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if keys is values:
            k, v = stacked_linear(keys, (self.W_k, self.W_v), self._kv).split(self.W_k.out_features, dim=-1)
        else:
            k, v = self.W_k(keys), self.W_v(values)
        return self._split(k, self.num_kv_heads), self._split(v, self.num_kv_heads)

    def _split(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        # (B, T, heads * d_h) -> (B, T, heads, d_h) -> (B, heads, T, d_h); a view, no copy.
        return x.view(x.shape[0], x.shape[1], heads, self.head_size).transpose(1, 2)


def _cached(kv_cache: object, queries: object) -> int:
    """The number of cached steps, after checking that ``kv_cache`` is a cache of the queries' batch."""
    if kv_cache is None:
        return 0
    if not isinstance(kv_cache, Cache):
        raise TypeError(f"kv_cache must be a key/value Cache (KVCache, SlidingWindowCache, ...), got "
                        f"{type(kv_cache).__name__}")
    batch = queries.shape[0] if isinstance(queries, torch.Tensor) and queries.dim() else None  # else: checked later
    held = kv_cache.batch_size
    if held is not None and batch is not None and held != batch:
        raise ValueError(f"kv_cache holds a batch of {held} (keys of shape {tuple(kv_cache.keys.shape)}) but the "
                         f"queries have a batch of {batch}; reorder the cache with the batch")
    return len(kv_cache)
