r"""Sliding-window attention: each query sees the last ``window`` keys, and a cache that keeps only those (chapter 10).

With the causal rule, query :math:`i` sees the keys :math:`i - W < j \le i` (Beltagy et al. 2020; Mistral
7B, Jiang et al. 2023): :func:`~course_lib.causal_mod` ``&`` :func:`~course_lib.sliding_window_mod` as a
keep-mask, the band of chapter 9's patterns. Two consequences:

- attention costs O(n W) instead of O(n^2) for a kernel that skips the empty tiles
  (:class:`~course_lib.FlashKernel`: outside the band, whole tiles are skipped);
- during decoding no query ever looks further back than :math:`W - 1` steps, so the key/value cache may
  forget the older steps: :class:`SlidingWindowCache` holds at most :math:`W - 1` steps, a memory bound that
  does not grow with the length of the text. Stacked layers still see further: layer :math:`\ell` reaches
  :math:`\ell (W - 1)` positions back through the layers below.

:class:`SlidingWindowKernel` adds the band to every call of another kernel, so that
``MultiHeadAttention(d, h, kernel=SlidingWindowKernel(W))`` is a sliding-window layer; with a
:class:`SlidingWindowCache` its cached decoding equals attention over the whole sequence with the band
(tested).
"""

from __future__ import annotations

import torch

from ..._validation import check_positive_int
from ..contract import AttentionKernel, fused_kernel
from ..masks import sliding_window_mod
from ..multihead import KVCache

__all__ = ["SlidingWindowCache", "SlidingWindowKernel"]


class SlidingWindowKernel:
    """Another kernel restricted to the band ``|q_pos - kv_pos| < window``; with ``causal``, the last ``window`` keys.

    The band is aligned bottom-right like every mask of the library (the queries are the last positions),
    so it stays right when a cache holds the earlier keys. It is and-ed with the call's mask and handed
    to ``kernel`` as a keep-mask.

    Args:
        window: W >= 1: a causal query sees itself and the W - 1 keys before it.
        kernel: the kernel that computes the attention (default :func:`~course_lib.fused_kernel`;
            :class:`~course_lib.FlashKernel` skips the tiles outside the band).

    Examples:
        >>> kernel = SlidingWindowKernel(2)
        >>> q = k = v = torch.randn(1, 1, 4, 8)
        >>> _, weights = kernel(q, k, v, causal=True, need_weights=True)
        >>> (weights[0, 0] > 0).int()
        tensor([[1, 0, 0, 0],
                [1, 1, 0, 0],
                [0, 1, 1, 0],
                [0, 0, 1, 1]], dtype=torch.int32)
    """

    def __init__(self, window: int, kernel: AttentionKernel = fused_kernel) -> None:
        self.window = check_positive_int(window, "window")
        if not callable(kernel):
            raise TypeError(f"kernel must be an AttentionKernel (a callable), got {type(kernel).__name__}")
        self.kernel = kernel
        self.rule = sliding_window_mod(self.window)

    def __repr__(self) -> str:
        kernel = getattr(self.kernel, "__name__", None) or repr(self.kernel)
        return f"SlidingWindowKernel(window={self.window}, kernel={kernel})"

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, *,
                 causal: bool = False, dropout_p: float = 0.0, scale: float | None = None,
                 need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        band = self.rule.materialize(q.shape[-2], k.shape[-2], device=q.device)  # (n_q, n_k)
        keep = band if mask is None else mask & band
        return self.kernel(q, k, v, keep, causal=causal, dropout_p=dropout_p, scale=scale, need_weights=need_weights)


class SlidingWindowCache(KVCache):
    """A key/value cache that keeps only the steps a sliding window of ``window`` can still see.

    A causal query with window W sees itself and the W - 1 steps before it; so after each call the cache
    keeps the last W - 1 steps and drops the rest. :meth:`update` returns the kept steps followed by the new
    ones, in order, which is all that the new queries may see. Use it with a
    :class:`SlidingWindowKernel` of the same window and ``causal=True``: decoding then equals attention over
    the whole sequence with the band (tested), with at most W - 1 steps held between calls
    (``nbytes <= 2 x batch x num_kv_heads x (W - 1) x d_h x bytes per element``).

    Args:
        window: W >= 1, the window of the attention that reads this cache.

    Examples:
        >>> mha = MultiHeadAttention(8, 2, kernel=SlidingWindowKernel(3)).eval()
        >>> x, cache = torch.randn(1, 6, 8), SlidingWindowCache(3)
        >>> steps = [mha(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], causal=True, kv_cache=cache) for t in range(6)]
        >>> len(cache), cache.nbytes  # 2 steps x 2 heads x 4 features x 4 bytes, for keys and values
        (2, 128)
        >>> torch.allclose(torch.cat(steps, 1), mha(x, x, x, causal=True), atol=1e-6)
        True
    """

    def __init__(self, window: int) -> None:
        super().__init__()
        self.window = check_positive_int(window, "window")

    def __repr__(self) -> str:
        shape = None if self.keys is None else tuple(self.keys.shape)
        return f"SlidingWindowCache(window={self.window}, keys={shape})"

    def update(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new steps, return the kept and the new ones, then forget all but the last ``window - 1``.

        Args:
            keys, values: (batch, num_kv_heads, T_new, d_h), the projected new steps.

        Returns:
            keys, values: (batch, num_kv_heads, min(T_past, window - 1) + T_new, d_h).

        Examples:
            >>> cache = SlidingWindowCache(3)
            >>> keys, _ = cache.update(torch.zeros(1, 1, 5, 2), torch.zeros(1, 1, 5, 2))  # a prompt of 5 steps
            >>> keys.shape[2], len(cache)  # all 5 returned, the last W - 1 = 2 kept
            (5, 2)
            >>> keys, _ = cache.update(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2))  # one new step
            >>> keys.shape[2], len(cache)
            (3, 2)
        """
        keys, values = super().update(keys, values)
        keep = self.window - 1
        start = keys.shape[2] - keep
        if start > 0:  # copies, so that the memory of the dropped steps is freed
            self.keys, self.values = keys[:, :, start:].clone(), values[:, :, start:].clone()
        return keys, values

    def copy(self) -> SlidingWindowCache:
        """A new cache of the same window sharing this one's tensors (see :meth:`KVCache.copy`)."""
        new = SlidingWindowCache(self.window)
        new.keys, new.values = self.keys, self.values
        return new
