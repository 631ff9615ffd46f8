"""The key/value caches of incremental decoding (chapters 8, 10 and 11).

During decoding a model is fed one new token per step; each attention layer needs the keys and values
of every earlier token. A cache stores them once, so that each step projects only the new token. A
:class:`~course_lib.attention.multihead.MultiHeadAttention` appends to the cache it is given
(``forward(..., kv_cache=cache)``) and attends to everything the cache returns. :class:`KVCache` keeps
every step; :class:`SlidingWindowCache` only those a sliding window can still see.
"""

from __future__ import annotations

import torch

from .._validation import check_batch_index, check_non_negative_int, check_positive_int

__all__ = ["KVCache", "SlidingWindowCache"]


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

    def crop(self, length: int) -> KVCache:
        """Keep the first ``length`` cached steps and forget the rest, in place.

        Speculative decoding (:mod:`course_lib.decoding`) feeds the draft's tokens to the target at once
        and then drops the keys and values of the ones it rejects.

        Args:
            length: 0 <= ``length`` <= ``len(self)``.

        Returns:
            ``self``.

        Examples:
            >>> cache = KVCache()
            >>> _ = cache.update(torch.arange(5.0).view(1, 1, 5, 1), torch.zeros(1, 1, 5, 1))
            >>> cache.crop(2).keys.flatten()
            tensor([0., 1.])
        """
        check_non_negative_int(length, "length")
        if length > len(self):
            raise ValueError(f"length must be at most the {len(self)} cached steps, got {length}")
        if self.keys is not None:
            self.keys, self.values = self.keys[:, :, :length], self.values[:, :, :length]
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
