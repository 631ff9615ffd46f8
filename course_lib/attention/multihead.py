r"""Multi-head attention and the key/value cache for incremental decoding (chapter 5).

Each of the :math:`h` heads attends in its own learned subspace of size :math:`d_h = d / h`:

.. math:: \mathbf h_i = \operatorname{softmax}\!\Big(\frac{(\mathbf Q\mathbf W_q^{(i)})
   (\mathbf K\mathbf W_k^{(i)})^\top}{\sqrt{d_h}}\Big)\,\mathbf V\mathbf W_v^{(i)},\qquad
   \operatorname{MHA}(\mathbf Q,\mathbf K,\mathbf V) = [\mathbf h_1,\dots,\mathbf h_h]\,\mathbf W_o .

The :math:`h` projections of size :math:`d \times d_h` are stored side by side in one
``nn.Linear(d, d)`` per role (``W_q, W_k, W_v``), so all heads are computed with one matrix
product and a reshape. With the notes' sizes (batch 30, 50 tokens, d = 512, 8 heads of 64) the
queries ``(30, 50, 512)`` become ``(30, 8, 50, 64)``. The attention itself is a kernel
(:mod:`course_lib.attention.contract`): the module projects, the kernel attends, the module merges.

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
    check_batch_index,
    check_bool,
    check_heads,
    check_heads_inputs,
    check_heads_mask,
    check_positive_int,
    check_probability,
    check_qkv,
)
from .contract import AttentionKernel, fused_kernel

__all__ = ["KVCache", "MultiHeadAttention"]


class KVCache:
    """Projected keys and values of the tokens seen so far, for incremental self-attention.

    During greedy or beam decoding the decoder is fed one new token per step; its self-attention
    needs the keys and values of every earlier token. Recomputing them costs O(T) projections per
    step; a cache stores them once, so each step projects only the new token. ``MultiHeadAttention``
    appends to the cache it is given (``forward(..., kv_cache=cache)``). The attention itself still
    reads all T cached keys at every step.

    Attributes:
        keys, values: (batch, num_kv_heads, T_past, d_h) or ``None`` while empty.

    Examples:
        >>> mha, cache = MultiHeadAttention(8, 2).eval(), KVCache()
        >>> x = torch.randn(1, 3, 8)
        >>> steps = [mha(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], causal=True, kv_cache=cache) for t in range(3)]
        >>> len(cache), cache.nbytes, torch.allclose(torch.cat(steps, 1), mha(x, x, x, causal=True), atol=1e-6)
        (3, 192, True)
    """

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    def __len__(self) -> int:
        """T_past, the number of cached time steps."""
        return 0 if self.keys is None else self.keys.shape[2]

    def __repr__(self) -> str:
        shape = None if self.keys is None else tuple(self.keys.shape)
        return f"KVCache(keys={shape})"

    @property
    def nbytes(self) -> int:
        """Bytes held: 2 x batch x num_kv_heads x T_past x d_h x bytes per element.

        Examples:
            >>> cache = KVCache()
            >>> _ = cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
            >>> cache.nbytes  # 2 x 1 x 2 x 3 x 4 float32 numbers of 4 bytes
            192
        """
        return 0 if self.keys is None else self.keys.nbytes + self.values.nbytes

    def update(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new time steps and return all keys and values so far.

        Args:
            keys, values: (batch, num_kv_heads, T_new, d_h), the projected new steps.

        Returns:
            keys, values: (batch, num_kv_heads, T_past + T_new, d_h).

        Examples:
            >>> cache = KVCache()
            >>> _ = cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))  # a prompt of 3 steps
            >>> keys, values = cache.update(torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 4))  # one new step
            >>> keys.shape, len(cache)
            (torch.Size([1, 2, 4, 4]), 4)
        """
        if self.keys is not None:
            if keys.shape[:2] != self.keys.shape[:2] or keys.shape[3] != self.keys.shape[3]:
                raise ValueError(
                    f"kv_cache holds keys of shape {tuple(self.keys.shape)} (batch, num_kv_heads, T_past, d_h) "
                    f"but the new keys have shape {tuple(keys.shape)}; use one cache per attention layer "
                    f"and reorder it with the batch"
                )
            keys = torch.cat([self.keys, keys], dim=2)
            values = torch.cat([self.values, values], dim=2)
        self.keys, self.values = keys, values
        return keys, values

    def reorder(self, index: torch.Tensor) -> KVCache:
        """Select batch rows in place (beam search keeps the surviving hypotheses).

        Args:
            index: (new_batch,) integer indices into the current batch; may repeat rows.

        Returns:
            ``self``, so that calls can be chained.

        Examples:
            >>> cache = KVCache()
            >>> _ = cache.update(torch.arange(2.0).view(2, 1, 1, 1), torch.zeros(2, 1, 1, 1))  # batch of 2
            >>> cache.reorder(torch.tensor([1, 1, 0])).keys.flatten()  # row 1 twice, then row 0
            tensor([1., 1., 0.])
        """
        if self.keys is None:
            check_batch_index(index, None)
            return self
        index = check_batch_index(index, self.keys.shape[0], self.keys.device)
        self.keys, self.values = self.keys.index_select(0, index), self.values.index_select(0, index)
        return self

    def copy(self) -> KVCache:
        """A new cache sharing this one's tensors: it can grow without changing this one (``update``
        concatenates into new tensors, never in place).

        Examples:
            >>> cache = KVCache()
            >>> _ = cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
            >>> branch = cache.copy()
            >>> _ = branch.update(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))
            >>> len(cache), len(branch)
            (3, 4)
        """
        new = KVCache()
        new.keys, new.values = self.keys, self.values
        return new


class MultiHeadAttention(nn.Module):
    r"""Multi-head scaled dot-product attention with projections ``W_q, W_k, W_v, W_o``: project, attend, merge.

    The attention is computed by ``kernel`` (:mod:`course_lib.attention.contract`), by default the fused
    ``scaled_dot_product_attention``. To keep the weights for plots, record them:
    ``with course_lib.recording_attention(model): ...`` fills ``attention_weights``.

    A query that may attend to no key at all pools the zero vector (never NaN), so its output is
    ``W_o``'s bias, or zero when ``bias=False``.

    Args:
        num_hiddens: d, the model size of queries, keys, values and output.
        num_heads: h; must divide ``num_hiddens`` (each head has size d_h = d / h).
        dropout: dropout rate on the attention weights (training mode only).
        bias: give the four projections a bias.
        num_kv_heads: key/value heads (grouped-query attention); ``None`` means ``num_heads``; must
            divide ``num_heads``; 1 is multi-query attention.
        kernel: the attention computation, an :class:`~course_lib.attention.contract.AttentionKernel`.

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
                 num_kv_heads: int | None = None, kernel: AttentionKernel = fused_kernel) -> None:
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
        self.kernel = _check_kernel(kernel)
        self.record_weights = False
        self.attention_weights: torch.Tensor | None = None

    def extra_repr(self) -> str:
        kernel = getattr(self.kernel, "__name__", None) or repr(self.kernel)
        grouped = f", num_kv_heads={self.num_kv_heads}" if self.num_kv_heads != self.num_heads else ""
        return f"num_hiddens={self.num_hiddens}, num_heads={self.num_heads}{grouped}, kernel={kernel}"

    def forward(self, queries: torch.Tensor, keys: torch.Tensor | None = None, values: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, *, causal: bool = False,
                kv: tuple[torch.Tensor, torch.Tensor] | None = None, kv_cache: KVCache | None = None) -> torch.Tensor:
        """Attend from every query to the allowed keys, in every head.

        Args:
            queries: (batch, n_queries, num_hiddens)
            keys, values: (batch, n_keys, num_hiddens); or leave them out and pass ``kv``.
            mask: optional bool keep-mask, ``True`` = attend: (n_queries, n_keys), (batch, n_queries or
                1, n_keys) shared by the heads (:func:`course_lib.padding_mask` makes one from lengths),
                or (batch or 1, num_heads or 1, n_queries, n_keys).
            causal: query ``i`` sees keys ``j <= i + (n_keys - n_queries)``: the look-ahead mask aligned
                bottom-right, so it stays right when a cache holds earlier keys.
            kv: keys and values already projected by :meth:`project_kv`, (batch, num_kv_heads, n_keys, d_h)
                each (the decoder's cross-attention projects its memory once).
            kv_cache: optional :class:`KVCache`; the new projected keys and values are appended to it
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
        mask = None if mask is None else check_heads_mask(mask, batch, self.num_heads, n_q, n_k)
        q, k, v = self._project(queries, keys, values, kv)  # (B, h, Tq, d_h), (B, h_kv, Tk, d_h) x 2
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)
        out, weights = self.kernel(q, k, v, mask.to(q.device) if mask is not None else None, causal=causal,
                                   dropout_p=self.dropout.p if self.training else 0.0,
                                   need_weights=self.record_weights)
        if self.record_weights:
            self.attention_weights = weights.detach()
        # (B, h, Tq, d_h) -> (B, Tq, h, d_h) -> (B, Tq, d): concatenate the heads.
        return self.W_o(out.transpose(1, 2).reshape(batch, n_q, self.num_hiddens))

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
        # One matrix product with the stacked weights reads the input once instead of three times
        # (self-attention) or twice (keys that are the values).
        if kv is None and queries is keys and keys is values:
            sizes = (self.num_hiddens, self.W_k.out_features, self.W_v.out_features)
            q, k, v = _stacked_linear(queries, (self.W_q, self.W_k, self.W_v)).split(sizes, dim=-1)
            k, v = self._split(k, self.num_kv_heads), self._split(v, self.num_kv_heads)
        else:
            q = self.W_q(queries)
            k, v = kv if kv is not None else self._project_kv(keys, values)
        return self._split(q, self.num_heads), k, v

    def _project_kv(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if keys is values:
            k, v = _stacked_linear(keys, (self.W_k, self.W_v)).split(self.W_k.out_features, dim=-1)
        else:
            k, v = self.W_k(keys), self.W_v(values)
        return self._split(k, self.num_kv_heads), self._split(v, self.num_kv_heads)

    def _split(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        # (B, T, heads * d_h) -> (B, T, heads, d_h) -> (B, heads, T, d_h); a view, no copy.
        return x.view(x.shape[0], x.shape[1], heads, self.head_size).transpose(1, 2)


def _stacked_linear(x: torch.Tensor, layers: tuple[nn.Linear, ...]) -> torch.Tensor:
    weight = torch.cat([layer.weight for layer in layers])
    bias = None if layers[0].bias is None else torch.cat([layer.bias for layer in layers])
    return F.linear(x, weight, bias)


def _check_kernel(kernel: object) -> AttentionKernel:
    if not callable(kernel):
        raise TypeError(f"kernel must be an AttentionKernel (a callable), got {type(kernel).__name__}")
    return kernel


def _cached(kv_cache: object, queries: object) -> int:
    """The number of cached steps, after checking that ``kv_cache`` is a cache of the queries' batch."""
    if kv_cache is None:
        return 0
    if not isinstance(kv_cache, KVCache):
        raise TypeError(f"kv_cache must be a KVCache, got {type(kv_cache).__name__}")
    batch = queries.shape[0] if isinstance(queries, torch.Tensor) and queries.dim() else None  # else: checked later
    if kv_cache.keys is not None and batch is not None and kv_cache.keys.shape[0] != batch:
        raise ValueError(f"kv_cache holds a batch of {kv_cache.keys.shape[0]} (keys of shape "
                         f"{tuple(kv_cache.keys.shape)}) but the queries have a batch of {batch}; reorder the "
                         f"cache with the batch")
    return len(kv_cache)
