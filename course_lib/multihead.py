r"""Multi-head attention and the key/value cache for incremental decoding (chapter 4).

Each of the :math:`h` heads attends in its own learned subspace of size :math:`d_h = d / h`:

.. math:: \mathbf h_i = \operatorname{softmax}\!\Big(\frac{(\mathbf Q\mathbf W_q^{(i)})
   (\mathbf K\mathbf W_k^{(i)})^\top}{\sqrt{d_h}}\Big)\,\mathbf V\mathbf W_v^{(i)},\qquad
   \operatorname{MHA}(\mathbf Q,\mathbf K,\mathbf V) = [\mathbf h_1,\dots,\mathbf h_h]\,\mathbf W_o .

The :math:`h` projections of size :math:`d \times d_h` are stored side by side in one
``nn.Linear(d, d)`` per role (``W_q, W_k, W_v``), so all heads are computed with one matrix
product and a reshape. With the notes' sizes (batch 30, 50 tokens, d = 512, 8 heads of 64) the
queries ``(30, 50, 512)`` become ``(30, 8, 50, 64)``.

Masks are boolean, ``True`` = attend, as in ``torch.nn.functional.scaled_dot_product_attention``
(``torch.nn.MultiheadAttention`` uses ``True`` = masked out).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ._validation import (
    check_bool,
    check_floating,
    check_ndim,
    check_positive_int,
    check_probability,
    check_same_size,
)
from .masking import _lengths_keep, causal_mask, check_attend_mask, masked_softmax

__all__ = ["KVCache", "MultiHeadAttention", "store_attention_weights"]


class KVCache:
    """Projected keys and values of the tokens seen so far, for incremental self-attention.

    During greedy or beam decoding the decoder is fed one new token per step; its self-attention
    needs the keys and values of every earlier token. Recomputing them costs O(T) per step; a
    cache stores them once, so each step only projects the new token. ``MultiHeadAttention``
    appends to the cache it is given (``forward(..., kv_cache=cache)``).

    Attributes:
        keys, values: (batch, num_heads, T_past, d_h) or ``None`` while empty.

    Examples:
        >>> mha, cache = MultiHeadAttention(8, 2).eval(), KVCache()
        >>> x = torch.randn(1, 3, 8)
        >>> steps = [mha(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], causal=True, kv_cache=cache) for t in range(3)]
        >>> len(cache), torch.allclose(torch.cat(steps, 1), mha(x, x, x, causal=True), atol=1e-6)
        (3, True)
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

    def update(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new time steps and return all keys and values so far.

        Args:
            keys, values: (batch, num_heads, T_new, d_h), the projected new steps.

        Returns:
            keys, values: (batch, num_heads, T_past + T_new, d_h).
        """
        if self.keys is not None:
            if keys.shape[:2] != self.keys.shape[:2] or keys.shape[3] != self.keys.shape[3]:
                raise ValueError(
                    f"kv_cache holds keys of shape {tuple(self.keys.shape)} (batch, num_heads, T_past, d_h) "
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
        """
        if not isinstance(index, torch.Tensor):
            raise TypeError(f"index must be a torch.Tensor of batch indices, got {type(index).__name__}")
        if index.dim() != 1 or index.dtype.is_floating_point or index.dtype == torch.bool:
            raise ValueError(f"index must be a 1-D integer tensor, got dtype {index.dtype} and shape "
                             f"{tuple(index.shape)}")
        if self.keys is None:
            return self
        batch = self.keys.shape[0]
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= batch):
            raise ValueError(f"index must lie in [0, {batch}) for a cache of batch {batch}, got "
                             f"values in [{int(index.min())}, {int(index.max())}]")
        index = index.to(self.keys.device)
        self.keys = self.keys.index_select(0, index)
        self.values = self.values.index_select(0, index)
        return self


class MultiHeadAttention(nn.Module):
    r"""Multi-head scaled dot-product attention with separate projections ``W_q, W_k, W_v, W_o``.

    One computation, two kernels that give the same result (tested): by default the fused
    ``torch.nn.functional.scaled_dot_product_attention``; with ``need_weights=True`` the explicit one
    the notes derive (scores / sqrt(d_h), masked softmax, dropout, matrix product), which also returns
    the weights. To keep the weights of every attention module of a model for plots, see
    :func:`store_attention_weights` (forward hooks that ask for them).

    A query that may attend to no key at all pools the zero vector (never NaN), so its output is
    ``W_o``'s bias, zero when ``bias=False``.

    Args:
        num_hiddens: d, the model size of queries, keys, values and output.
        num_heads: h; must divide ``num_hiddens`` (each head has size d_h = d / h).
        dropout: dropout rate on the attention weights (training mode only).
        bias: give the four projections a bias.

    Attributes:
        attention_weights: ``None``, or the detached (batch, num_heads, n_queries, n_keys) weights of the
            last call while :func:`store_attention_weights` is on.

    Examples:
        >>> mha = MultiHeadAttention(num_hiddens=16, num_heads=4)
        >>> queries, keys = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
        >>> mha(queries, keys, keys, valid_lens=torch.tensor([5, 2])).shape
        torch.Size([2, 3, 16])
    """

    def __init__(self, num_hiddens: int, num_heads: int, dropout: float = 0.0, bias: bool = False) -> None:
        super().__init__()
        check_positive_int(num_hiddens, "num_hiddens")
        check_positive_int(num_heads, "num_heads")
        if num_hiddens % num_heads:
            raise ValueError(
                f"num_hiddens ({num_hiddens}) must be divisible by num_heads ({num_heads}): each head "
                f"gets num_hiddens / num_heads features"
            )
        check_probability(dropout, "dropout")
        self.num_hiddens = num_hiddens
        self.num_heads = num_heads
        self.head_size = num_hiddens // num_heads
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_v = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights: torch.Tensor | None = None

    def extra_repr(self) -> str:
        return f"num_hiddens={self.num_hiddens}, num_heads={self.num_heads}"

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                valid_lens: torch.Tensor | None = None, causal: bool = False,
                mask: torch.Tensor | None = None, kv_cache: KVCache | None = None,
                need_weights: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Attend from every query to the allowed keys, in every head.

        Args:
            queries: (batch, n_queries, num_hiddens)
            keys: (batch, n_keys, num_hiddens)
            values: (batch, n_keys, num_hiddens)
            valid_lens: optional (batch,) or (batch, n_queries) integer lengths: keys
                ``j >= valid_lens`` are ignored (padding). With a cache they count all keys, cached
                ones included.
            causal: query ``i`` sees keys ``j <= i + (n_keys - n_queries)``: the look-ahead mask
                aligned bottom-right, so it stays right when a cache holds earlier keys; the same as
                ``mask=causal_mask(n_queries, n_keys)`` (tested).
            mask: optional bool, broadcastable to (batch, n_queries, n_keys) or
                (batch, num_heads, n_queries, n_keys), ``True`` = attend. A 2-D mask is
                (n_queries, n_keys); ``torch.nn.MultiheadAttention``'s ``key_padding_mask``
                (batch, n_keys), ``True`` = padding, is refused: give ``valid_lens`` instead.
            kv_cache: optional :class:`KVCache`; the new projected keys and values are appended to
                it and the queries attend to all of them (n_keys = T_past + new keys).
            need_weights: also return the attention weights, computed by the explicit path.

        Returns:
            (batch, n_queries, num_hiddens); with ``need_weights``, also the weights
            (batch, num_heads, n_queries, n_keys) (before dropout; rows of queries without keys are 0).
        """
        self._check_inputs(queries, keys, values, kv_cache)
        check_bool(causal, "causal")
        check_bool(need_weights, "need_weights")
        batch, n_q = queries.shape[:2]
        n_k = keys.shape[1] + (0 if kv_cache is None else len(kv_cache))
        # A single query is the last one: bottom-right aligned, it sees every key.
        causal = causal and n_q > 1
        # SDPA's own is_causal is top-left aligned: the same only when n_queries == n_keys.
        use_is_causal = causal and n_q == n_k and valid_lens is None and mask is None and not need_weights
        # Validated and built before the cache is touched, so a bad mask leaves the cache intact.
        keep = None if use_is_causal else self._build_mask(batch, n_q, n_k, valid_lens, causal, mask,
                                                           queries.device)
        q, k, v = self._project(queries, keys, values)  # (B, h, T, d_h) each
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)
        weights = None
        if need_weights:
            out, weights = self._explicit_attention(q, k, v, keep)
        else:
            out = self._fast_attention(q, k, v, keep, use_is_causal)
        # (B, h, Tq, d_h) -> (B, Tq, h, d_h) -> (B, Tq, d): concatenate the heads.
        out = self.W_o(out.transpose(1, 2).reshape(batch, n_q, self.num_hiddens))
        return (out, weights) if need_weights else out

    def _check_inputs(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                      kv_cache: KVCache | None) -> None:
        layout = {"queries": "(batch, n_queries, num_hiddens)", "keys": "(batch, n_keys, num_hiddens)",
                  "values": "(batch, n_keys, num_hiddens)"}
        dtype = self.W_q.weight.dtype
        checked: list[torch.Tensor] = []
        for name, t in (("queries", queries), ("keys", keys), ("values", values)):
            # Self-attention passes one tensor three times: check it once (an error names it as
            # the first argument it came in as, as before).
            if any(t is c for c in checked):
                continue
            checked.append(t)
            check_floating(t, name)
            check_ndim(t, name, 3, layout[name])
            if t.shape[2] != self.num_hiddens:
                raise ValueError(
                    f"{name} must have size num_hiddens = {self.num_hiddens} in its last axis "
                    f"{layout[name]}, got shape {tuple(t.shape)}"
                )
            if t.dtype != dtype:
                raise TypeError(f"{name} has dtype {t.dtype} but the projections have dtype "
                                f"{dtype}; convert one of them (e.g. module.to(dtype))")
        check_same_size(queries, "queries", 0, keys, "keys", 0)
        check_same_size(keys, "keys", 0, values, "values", 0)
        check_same_size(keys, "keys", 1, values, "values", 1)
        if kv_cache is not None and not isinstance(kv_cache, KVCache):
            raise TypeError(f"kv_cache must be a KVCache, got {type(kv_cache).__name__}")
        if kv_cache is not None and kv_cache.keys is not None and kv_cache.keys.shape[0] != queries.shape[0]:
            raise ValueError(
                f"kv_cache holds a batch of {kv_cache.keys.shape[0]} (keys of shape {tuple(kv_cache.keys.shape)}) "
                f"but queries have shape {tuple(queries.shape)}; reorder the cache with the batch"
            )
        if keys.shape[1] == 0 and (kv_cache is None or len(kv_cache) == 0):
            raise ValueError(f"keys must hold at least one key, got shape {tuple(keys.shape)}")

    def _project(self, queries: torch.Tensor, keys: torch.Tensor,
                 values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Project and split into heads: three (batch, num_heads, T, d_h) tensors."""
        # One matrix product with the stacked weights reads the input once instead of three
        # times (self-attention) or twice (cross-attention, where keys are values).
        if queries is keys and keys is values:
            q, k, v = self._stacked_linear(queries, (self.W_q, self.W_k, self.W_v)).chunk(3, dim=-1)
        elif keys is values:
            q = self.W_q(queries)
            # No new keys (the decoder's cross-attention, its memory already in the cache): nothing
            # to project, and no copy of the stacked weights at every decoding step.
            k, v = (keys, values) if keys.shape[1] == 0 else (
                self._stacked_linear(keys, (self.W_k, self.W_v)).chunk(2, dim=-1))
        else:
            q, k, v = self.W_q(queries), self.W_k(keys), self.W_v(values)
        return self._split_heads(q), self._split_heads(k), self._split_heads(v)

    @staticmethod
    def _stacked_linear(x: torch.Tensor, layers: tuple[nn.Linear, ...]) -> torch.Tensor:
        weight = torch.cat([layer.weight for layer in layers])
        bias = None if layers[0].bias is None else torch.cat([layer.bias for layer in layers])
        return F.linear(x, weight, bias)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        # (B, T, d) -> (B, T, h, d_h) -> (B, h, T, d_h); a view, no copy. (view rather than
        # Tensor.unflatten, whose Python wrapper costs more than the view itself.)
        return x.view(x.shape[0], x.shape[1], self.num_heads, self.head_size).transpose(1, 2)

    def _build_mask(self, batch: int, n_q: int, n_k: int, valid_lens: torch.Tensor | None, causal: bool,
                    mask: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
        """Combine padding, look-ahead and user masks into one (B or 1, 1 or h, Tq, Tk) bool mask.

        Each part keeps its broadcast axes (a padding mask from (batch,) lengths is (B, 1, 1, Tk)),
        so the combination is no bigger than it needs to be.
        """
        keep = None
        if valid_lens is not None:
            keep = _lengths_keep(valid_lens, batch, n_q, n_k, device).unsqueeze(1)  # (B, 1, 1 or Tq, Tk)
        if causal:
            look_ahead = causal_mask(n_q, n_k, device=device)  # (Tq, Tk), bottom-right aligned
            keep = look_ahead if keep is None else keep & look_ahead
        if mask is not None:
            mask = check_attend_mask(mask, batch, n_q, n_k, self.num_heads).to(device)
            mask = mask.unsqueeze(-3) if mask.dim() == 3 else mask  # (B, Tq, Tk) -> (B, 1, Tq, Tk): every head
            keep = mask if keep is None else keep & mask
        if keep is not None and keep.dim() < 4:
            keep = keep.view((1,) * (4 - keep.dim()) + tuple(keep.shape))
        return keep

    def _explicit_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            keep: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """softmax(q k^T / sqrt(d_h)) v and the weights; q, k, v (B, h, T, d_h), weights (B, h, Tq, Tk)."""
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_size)  # (B, h, Tq, Tk)
        weights = masked_softmax(scores, mask=keep)
        return self.dropout(weights) @ v, weights

    def _fast_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        keep: torch.Tensor | None, is_causal: bool) -> torch.Tensor:
        """The same through ``F.scaled_dot_product_attention`` (fused kernels, no weights)."""
        dropout_p = self.dropout.p if self.training else 0.0
        row_ok = None
        if keep is not None:
            row_ok = keep.any(dim=-1, keepdim=True)  # (B or 1, 1 or h, Tq, 1)
            # On the CPU the test is cheap and usually spares the fix-up below. On an accelerator
            # bool() would wait for the device at every call, so the fix-up always runs there; it
            # changes nothing (not a bit) when every query has a key.
            if keep.device.type == "cpu" and bool(row_ok.all()):
                row_ok = None
            else:
                # Depending on the version and the kernel, SDPA returns NaN or 0 for a query with
                # no key: let it attend everywhere (finite) and zero its output (and gradient).
                keep = keep | ~row_ok
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=dropout_p, is_causal=is_causal)
        return out if row_ok is None else out * row_ok


def _ask_for_weights(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    return args, {**kwargs, "need_weights": True}


def _keep_weights(module: nn.Module, args: tuple, kwargs: dict,
                  output: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    out, weights = output
    module.attention_weights = weights.detach()
    return out


def store_attention_weights(model: nn.Module, on: bool = True) -> int:
    """Keep (or stop keeping) the weights of every attention module of ``model`` for plots.

    It adds (or removes) two forward hooks on each :class:`MultiHeadAttention`: one that calls it
    with ``need_weights=True``, one that stores the weights in ``.attention_weights``
    (batch, num_heads, n_queries, n_keys), detached, and returns the output alone. The modules are
    not changed otherwise; turning it off removes the hooks and the stored weights.

    Args:
        model: any module; its submodules are searched.
        on: keep the weights (``True``) or stop (``False``).

    Returns:
        The number of attention modules.

    Examples:
        >>> mha = MultiHeadAttention(8, 2)
        >>> store_attention_weights(mha)
        1
        >>> _ = mha(torch.randn(1, 3, 8), torch.randn(1, 5, 8), torch.randn(1, 5, 8))
        >>> mha.attention_weights.shape
        torch.Size([1, 2, 3, 5])
        >>> store_attention_weights(mha, False), mha.attention_weights
        (1, None)
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    check_bool(on, "on")
    count = 0
    for module in model.modules():
        if not isinstance(module, MultiHeadAttention):
            continue
        count += 1
        _remove_weight_hooks(module)
        module.attention_weights = None
        if on:
            module.register_forward_pre_hook(_ask_for_weights, with_kwargs=True)
            module.register_forward_hook(_keep_weights, with_kwargs=True)
    return count


def _remove_weight_hooks(module: nn.Module) -> None:
    # Found by identity rather than through handles, so copies of a module (deepcopy) lose them too.
    for hooks, with_kwargs, ours in ((module._forward_pre_hooks, module._forward_pre_hooks_with_kwargs,
                                      _ask_for_weights),
                                     (module._forward_hooks, module._forward_hooks_with_kwargs, _keep_weights)):
        for key in [k for k, fn in hooks.items() if fn is ours]:
            del hooks[key]
            with_kwargs.pop(key, None)


def _stores_weights(module: nn.Module) -> bool:
    """Whether :func:`store_attention_weights` is on for ``module``."""
    return any(fn is _keep_weights for fn in module._forward_hooks.values())
