r"""The key/value caches of incremental decoding, kept as serving engines keep them (chapters 8, 10, 11, 13).

During decoding a model is fed one new token per step; each attention layer needs the keys and values of
every earlier token. A cache stores them once, so that each step projects only the new token. A
:class:`~course_lib.attention.multihead.MultiHeadAttention` appends to the cache it is given
(``forward(..., kv_cache=cache)``) and attends to everything the cache returns.

Every cache answers the same calls (:class:`Cache`): ``update`` (append, return what the new queries
may see), ``len`` (the steps held), ``position`` (the tokens seen, the position of the next one),
``reorder`` (beam search), ``copy``, ``crop`` (speculative decoding) and ``nbytes``.

- :class:`KVCache` keeps every step in storage allocated ahead and written in place, grown by doubling
  (as Hugging Face's static cache, vLLM and llama.cpp write into preallocated memory): appending T tokens
  one at a time copies O(T) elements in all, where concatenating at every step copies O(T^2) and briefly
  holds the cache twice. Copies share the storage until one of them writes where the other has (copy on
  write), so that a model's functional ``step`` leaves the previous state intact at no cost.
- :class:`SlidingWindowCache` keeps only the steps a sliding window of ``window`` can still see;
  :class:`SinkCache` keeps in addition the first ``sinks`` steps, the "attention sinks" of StreamingLLM
  (Xiao et al. 2023).
- :class:`PagedKVCache` stores the steps in fixed-size blocks of a shared :class:`BlockPool`, found
  through a block table (PagedAttention, Kwon et al. 2023): memory is taken a block at a time, as a
  sequence grows, instead of its maximum length ahead.

Shapes: keys and values are (B, H_kv, T, d_h), one cache per attention layer.
"""

from __future__ import annotations

import torch

from .._validation import check_batch_index, check_non_negative_int, check_positive_int

__all__ = ["BlockPool", "Cache", "KVCache", "PagedKVCache", "SinkCache", "SlidingWindowCache"]


def _check_steps(keys: torch.Tensor, values: torch.Tensor, like: torch.Tensor | None) -> None:
    """New keys and values (B, H_kv, T_new, d_h) that fit the steps held (``like``, or ``None`` while empty)."""
    if keys.dim() != 4 or values.shape[:3] != keys.shape[:3]:
        raise ValueError(f"keys and values must be (batch, num_kv_heads, T_new, d_h) tensors of one batch, heads and "
                         f"length, got {tuple(keys.shape)} and {tuple(values.shape)}")
    if like is not None and (keys.shape[:2] != like.shape[:2] or keys.shape[3] != like.shape[3]):
        raise ValueError(
            f"kv_cache holds keys of shape {tuple(like.shape)} (batch, num_kv_heads, T_past, d_h) but the new keys "
            f"have shape {tuple(keys.shape)}; use one cache per attention layer and reorder it with the batch")


class Cache:
    """What every key/value cache answers: the calls :class:`~course_lib.attention.multihead.MultiHeadAttention`
    and the decoding loops make. Subclasses implement ``update``, ``keys``/``values``, ``reorder``, ``copy``
    and ``crop``.

    Attributes:
        position: the tokens seen so far, the position of the next one (equal to ``len(cache)`` unless the
            cache forgets steps).

    Examples:
        >>> caches = [KVCache(), SlidingWindowCache(2), SinkCache(3, sinks=1)]
        >>> for cache in caches:
        ...     _ = cache.update(torch.zeros(1, 1, 4, 2), torch.zeros(1, 1, 4, 2))  # a prompt of 4 steps
        >>> [(len(cache), cache.position) for cache in caches], all(isinstance(c, Cache) for c in caches)
        ([(4, 4), (1, 4), (2, 4)], True)
    """

    position: int

    @property
    def keys(self) -> torch.Tensor | None:
        """(B, H_kv, T, d_h) the keys held, or ``None`` while empty."""
        raise NotImplementedError

    @property
    def values(self) -> torch.Tensor | None:
        """(B, H_kv, T, d_h) the values held, or ``None`` while empty."""
        raise NotImplementedError

    def __len__(self) -> int:
        """T, the steps held."""
        keys = self.keys
        return 0 if keys is None else keys.shape[2]

    @property
    def batch_size(self) -> int | None:
        """B, or ``None`` while empty."""
        keys = self.keys
        return None if keys is None else keys.shape[0]

    @property
    def nbytes(self) -> int:
        """Bytes of the steps held: 2 x batch x num_kv_heads x T x d_h x bytes per element."""
        keys = self.keys
        return 0 if keys is None else keys.nbytes + self.values.nbytes

    def __repr__(self) -> str:
        shape = None if self.keys is None else tuple(self.keys.shape)
        return f"{type(self).__name__}(keys={shape})"

    def update(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new steps; return the keys and values the new queries may see."""
        raise NotImplementedError

    def reorder(self, index: torch.Tensor) -> Cache:
        """Select batch rows in place (beam search keeps the surviving hypotheses); returns ``self``."""
        raise NotImplementedError

    def copy(self) -> Cache:
        """A cache that can grow without changing this one."""
        raise NotImplementedError

    def crop(self, length: int) -> Cache:
        """Keep the first ``length`` steps held and forget the rest, in place; returns ``self``."""
        raise NotImplementedError


class _Storage:
    """Preallocated key and value buffers (B, H_kv, capacity, d_h), shared by the copies of a cache.

    ``written`` is how far any cache sharing the buffers has written: a cache holding ``length`` steps may
    write in place only when ``written == length`` (no copy has written past it); ``sharers`` counts the
    caches that point at the buffers.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, written: int) -> None:
        self.keys, self.values, self.written, self.sharers = keys, values, written, 1

    @property
    def capacity(self) -> int:
        return self.keys.shape[2]


class KVCache(Cache):
    """Keys and values of the tokens seen so far, in storage allocated ahead and written in place.

    The first update allocates room for ``capacity`` steps (at least the steps given); when it is full the
    storage doubles (one copy of the steps held), so appending T tokens one at a time copies O(T) elements
    in all, where concatenating at every step would copy O(T^2). :attr:`keys` and :attr:`values` are views
    of the steps held. A :meth:`copy` shares the storage: the first of the two to write where the other
    has written gets its own storage (copy on write), so branching is safe and a chain of steps is free.

    Args:
        capacity: the steps to allocate room for at the first update (0: exactly the first update's).

    Examples:
        >>> mha, cache = MultiHeadAttention(8, 2).eval(), KVCache()
        >>> x = torch.randn(1, 3, 8)
        >>> steps = [mha(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], causal=True, kv_cache=cache) for t in range(3)]
        >>> len(cache), cache.nbytes, torch.allclose(torch.cat(steps, 1), mha(x, x, x, causal=True), atol=1e-6)
        (3, 192, True)
        >>> cache.capacity  # 1, then 2, then 4: doubled when full
        4
    """

    def __init__(self, capacity: int = 0) -> None:
        self.initial_capacity = check_non_negative_int(capacity, "capacity")
        self._storage: _Storage | None = None
        self._length = 0

    @property
    def position(self) -> int:
        """The tokens seen so far (every one is held)."""
        return self._length

    def __len__(self) -> int:
        return self._length

    @property
    def capacity(self) -> int:
        """The steps the storage has room for (0 while empty)."""
        return 0 if self._storage is None else self._storage.capacity

    @property
    def allocated_nbytes(self) -> int:
        """Bytes of the storage, held steps and room to grow (what :attr:`nbytes` leaves out)."""
        s = self._storage
        return 0 if s is None else s.keys.nbytes + s.values.nbytes

    @property
    def keys(self) -> torch.Tensor | None:
        """(B, H_kv, T, d_h): a view of the keys held, or ``None`` while empty."""
        return None if self._storage is None else self._storage.keys[:, :, :self._length]

    @property
    def values(self) -> torch.Tensor | None:
        """(B, H_kv, T, d_h): a view of the values held, or ``None`` while empty."""
        return None if self._storage is None else self._storage.values[:, :, :self._length]

    def __repr__(self) -> str:
        return f"KVCache(keys={None if self.keys is None else tuple(self.keys.shape)}, capacity={self.capacity})"

    def _own(self, needed: int, like_keys: torch.Tensor, like_values: torch.Tensor) -> _Storage:
        """Storage this cache may write ``needed`` steps into: grown (doubled) or copied when it must be."""
        s = self._storage
        if s is not None and s.written == self._length and needed <= s.capacity:
            return s  # write in place: no copy sharing the storage has written past this cache's steps
        capacity = max(needed, self.initial_capacity, 2 * (s.capacity if s is not None else 0))
        shape = (*like_keys.shape[:2], capacity, like_keys.shape[3])
        keys = like_keys.new_empty(shape)
        values = like_values.new_empty((*shape[:3], like_values.shape[3]))
        if s is not None:
            keys[:, :, :self._length] = s.keys[:, :, :self._length]
            values[:, :, :self._length] = s.values[:, :, :self._length]
            s.sharers -= 1
        self._storage = _Storage(keys, values, self._length)
        return self._storage

    def update(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new time steps after the held ones and return all keys and values so far.

        Args:
            keys, values: (batch, num_kv_heads, T_new, d_h), the projected new steps.

        Returns:
            keys, values: (batch, num_kv_heads, T_past + T_new, d_h), views of the storage.

        Examples:
            >>> cache = KVCache()
            >>> _ = cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))  # a prompt of 3 steps
            >>> keys, values = cache.update(torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 4))  # one new step
            >>> keys.shape, len(cache), cache.capacity
            (torch.Size([1, 2, 4, 4]), 4, 6)
        """
        _check_steps(keys, values, self.keys)
        start, stop = self._length, self._length + keys.shape[2]
        storage = self._own(stop, keys, values)
        storage.keys[:, :, start:stop] = keys
        storage.values[:, :, start:stop] = values
        self._length = storage.written = stop
        return self.keys, self.values

    def reorder(self, index: torch.Tensor) -> KVCache:
        """Select batch rows in place (beam search keeps the surviving hypotheses), in storage of its own.

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
        s = self._storage
        if s is None:
            check_batch_index(index, None)
            return self
        index = check_batch_index(index, s.keys.shape[0], s.keys.device)
        s.sharers -= 1
        self._storage = _Storage(s.keys.index_select(0, index), s.values.index_select(0, index), self._length)
        return self

    def copy(self) -> KVCache:
        """A new cache sharing this one's storage: it can grow without changing this one (copy on write).

        Examples:
            >>> cache = KVCache()
            >>> _ = cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
            >>> branch = cache.copy()
            >>> _ = branch.update(torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 4))  # in place: cache holds 3 steps
            >>> _ = cache.update(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))  # would overwrite: copied first
            >>> len(cache), len(branch), branch.keys[0, 0, 3].tolist()
            (4, 4, [1.0, 1.0, 1.0, 1.0])
        """
        new = KVCache(self.initial_capacity)
        new._storage, new._length = self._storage, self._length
        if self._storage is not None:
            self._storage.sharers += 1
        return new

    def crop(self, length: int) -> KVCache:
        """Keep the first ``length`` cached steps and forget the rest, in place.

        Speculative decoding feeds the draft's tokens to the target at once and then drops the keys and
        values of the ones it rejects; the storage is kept, and written over by the next update.

        Args:
            length: 0 <= ``length`` <= ``len(self)``.

        Returns:
            ``self``.

        Examples:
            >>> cache = KVCache()
            >>> _ = cache.update(torch.arange(5.0).view(1, 1, 5, 1), torch.zeros(1, 1, 5, 1))
            >>> cache.crop(2).keys.flatten(), cache.capacity
            (tensor([0., 1.]), 5)
        """
        check_non_negative_int(length, "length")
        if length > len(self):
            raise ValueError(f"length must be at most the {len(self)} cached steps, got {length}")
        s = self._storage
        if s is not None and s.sharers == 1 and s.written == self._length:
            s.written = length  # nobody else reads past it: the next update may write over the dropped steps
        self._length = length
        return self


class SlidingWindowCache(Cache):
    """A key/value cache that keeps only the steps a sliding window of ``window`` can still see.

    A causal query with window W sees itself and the W - 1 steps before it; so after each call the cache
    keeps the last W - 1 steps and drops the rest. :meth:`update` returns the kept steps followed by the new
    ones, in order, which is all that the new queries may see. Use it with a
    :class:`~course_lib.SlidingWindowKernel` of the same window and ``causal=True``: decoding then equals
    attention over the whole sequence with the band (tested), with at most W - 1 steps held between calls
    (``nbytes <= 2 x batch x num_kv_heads x (W - 1) x d_h x bytes per element``).

    Args:
        window: W >= 1, the window of the attention that reads this cache.

    Examples:
        >>> mha = MultiHeadAttention(8, 2, kernel=SlidingWindowKernel(3)).eval()
        >>> x, cache = torch.randn(1, 6, 8), SlidingWindowCache(3)
        >>> steps = [mha(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], causal=True, kv_cache=cache) for t in range(6)]
        >>> len(cache), cache.position, cache.nbytes  # 2 steps x 2 heads x 4 features x 4 bytes, keys and values
        (2, 6, 128)
        >>> torch.allclose(torch.cat(steps, 1), mha(x, x, x, causal=True), atol=1e-6)
        True
    """

    def __init__(self, window: int) -> None:
        self.window = check_positive_int(window, "window")
        self._keys: torch.Tensor | None = None
        self._values: torch.Tensor | None = None
        self.position = 0

    @property
    def keys(self) -> torch.Tensor | None:
        """(B, H_kv, T, d_h) the steps kept, T <= window - 1 between calls."""
        return self._keys

    @property
    def values(self) -> torch.Tensor | None:
        """(B, H_kv, T, d_h) the steps kept."""
        return self._values

    def __repr__(self) -> str:
        shape = None if self._keys is None else tuple(self._keys.shape)
        return f"{type(self).__name__}(window={self.window}, keys={shape})"

    def _kept(self, keys: torch.Tensor) -> slice:
        """The steps of ``keys`` (all held and new) to keep for the next call."""
        return slice(max(0, keys.shape[2] - (self.window - 1)), keys.shape[2])

    def update(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new steps, return the kept and the new ones, then forget all but the ones still in view.

        Args:
            keys, values: (batch, num_kv_heads, T_new, d_h), the projected new steps.

        Returns:
            keys, values: (batch, num_kv_heads, T_kept + T_new, d_h).

        Examples:
            >>> cache = SlidingWindowCache(3)
            >>> keys, _ = cache.update(torch.zeros(1, 1, 5, 2), torch.zeros(1, 1, 5, 2))  # a prompt of 5 steps
            >>> keys.shape[2], len(cache)  # all 5 returned, the last W - 1 = 2 kept
            (5, 2)
            >>> keys, _ = cache.update(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2))  # one new step
            >>> keys.shape[2], len(cache)
            (3, 2)
        """
        _check_steps(keys, values, self._keys)
        self.position += keys.shape[2]
        if self._keys is not None:
            keys, values = torch.cat([self._keys, keys], dim=2), torch.cat([self._values, values], dim=2)
        kept = self._kept(keys)
        # Copies, so that the memory of the dropped steps is freed.
        self._keys, self._values = keys[:, :, kept].clone(), values[:, :, kept].clone()
        return keys, values

    def reorder(self, index: torch.Tensor) -> SlidingWindowCache:
        """Select batch rows in place, as :meth:`KVCache.reorder`."""
        if self._keys is None:
            check_batch_index(index, None)
            return self
        index = check_batch_index(index, self._keys.shape[0], self._keys.device)
        self._keys, self._values = self._keys.index_select(0, index), self._values.index_select(0, index)
        return self

    def copy(self) -> SlidingWindowCache:
        """A new cache of the same window sharing this one's tensors (updates replace them, never write into them)."""
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def crop(self, length: int) -> SlidingWindowCache:
        """Keep the first ``length`` steps held, in place (the position goes back as many)."""
        check_non_negative_int(length, "length")
        if length > len(self):
            raise ValueError(f"length must be at most the {len(self)} cached steps, got {length}")
        if self._keys is not None:
            self.position -= len(self) - length
            self._keys, self._values = self._keys[:, :, :length], self._values[:, :, :length]
        return self


class SinkCache(SlidingWindowCache):
    """A sliding-window cache that also keeps the first ``sinks`` steps: StreamingLLM's attention sinks.

    Xiao et al. (2023) found that trained language models put a large share of their attention on the first
    tokens whatever they are (a place to put weight that no query needs), so that a plain sliding window,
    which drops them, derails once the text outgrows the window; keeping those few "sinks" beside the window
    restores it. Between calls the cache holds the first ``sinks`` steps and the last
    ``window - sinks - 1``: a new query sees ``window`` keys, itself included. The positions a rotary model
    should use are those inside the cache (the sinks at 0, 1, ..., the recent steps right after), as
    StreamingLLM does: keep the keys unrotated and rotate them in the kernel
    (``DecoderLMConfig(positional="none", kernel="rotary")``).

    Feed one token per update once the window is full: the new queries of a longer chunk would see every
    key returned, not a window each.

    Args:
        window: W, the keys a query sees, sinks included; > ``sinks``.
        sinks: the first steps kept for good (StreamingLLM uses 4).

    Examples:
        >>> cache = SinkCache(window=4, sinks=1)
        >>> for t in range(6):  # tokens 0 .. 5, one at a time
        ...     keys, _ = cache.update(torch.full((1, 1, 1, 1), float(t)), torch.zeros(1, 1, 1, 1))
        >>> keys.flatten().tolist(), cache.position  # token 5 sees the sink (0) and tokens 3, 4, 5
        ([0.0, 3.0, 4.0, 5.0], 6)
    """

    def __init__(self, window: int, sinks: int = 4) -> None:
        super().__init__(window)
        self.sinks = check_non_negative_int(sinks, "sinks")
        if self.sinks >= self.window:
            raise ValueError(f"sinks ({sinks}) must be smaller than the window ({window})")

    def __repr__(self) -> str:
        shape = None if self._keys is None else tuple(self._keys.shape)
        return f"SinkCache(window={self.window}, sinks={self.sinks}, keys={shape})"

    def update(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new steps; return the sinks, the recent steps and the new ones; keep the sinks and the
        last ``window - sinks - 1``.

        Args:
            keys, values: (batch, num_kv_heads, T_new, d_h).

        Returns:
            keys, values: (batch, num_kv_heads, T_held + T_new, d_h).
        """
        return super().update(keys, values)

    def _kept(self, keys: torch.Tensor) -> torch.Tensor | slice:
        n, recent = keys.shape[2], self.window - self.sinks - 1
        if n <= self.sinks + recent:
            return slice(0, n)
        return torch.cat([torch.arange(self.sinks), torch.arange(n - recent, n)]).to(keys.device)


class BlockPool:
    """Fixed-size blocks of key and value memory shared by many sequences: PagedAttention's memory (Kwon et al. 2023).

    Serving many requests of unknown lengths, an engine that reserves each one's maximum length ahead wastes
    what the request never uses (and cannot start a request it has no room for); vLLM instead cuts the
    memory into blocks of ``block_size`` tokens, hands a sequence a block when it needs one, and finds its
    blocks through a block table (:class:`PagedKVCache`), as an operating system pages virtual memory. The
    waste is then at most ``block_size - 1`` slots per sequence.

    Args:
        num_blocks: the blocks of the pool.
        block_size: tokens per block.
        num_kv_heads, head_size: the layout of a key or value.
        dtype, device: of the memory.

    Examples:
        >>> pool = BlockPool(num_blocks=8, block_size=4, num_kv_heads=2, head_size=16)
        >>> cache = PagedKVCache(pool)
        >>> _ = cache.update(torch.randn(1, 2, 6, 16), torch.randn(1, 2, 6, 16))  # 6 tokens: 2 blocks
        >>> pool.used, cache.block_tables
        (2, [[0, 1]])
    """

    def __init__(self, num_blocks: int, block_size: int, num_kv_heads: int, head_size: int, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> None:
        self.num_blocks = check_positive_int(num_blocks, "num_blocks")
        self.block_size = check_positive_int(block_size, "block_size")
        shape = (num_blocks, check_positive_int(num_kv_heads, "num_kv_heads"), block_size,
                 check_positive_int(head_size, "head_size"))
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self._free = list(range(num_blocks - 1, -1, -1))

    def __repr__(self) -> str:
        return f"BlockPool(used {self.used} of {self.num_blocks} blocks of {self.block_size} tokens)"

    @property
    def used(self) -> int:
        """Blocks handed out."""
        return self.num_blocks - len(self._free)

    def allocate(self) -> int:
        """A free block's index; ``RuntimeError`` when the pool is full (a server would queue the request)."""
        if not self._free:
            raise RuntimeError(f"the pool's {self.num_blocks} blocks are all in use")
        return self._free.pop()

    def release(self, blocks: list[int]) -> None:
        """Give blocks back to the pool."""
        self._free.extend(reversed(blocks))


class PagedKVCache(Cache):
    """A key/value cache whose steps live in the blocks of a :class:`BlockPool`, found through a block table.

    Step ``t`` of batch row ``b`` is slot ``t % block_size`` of block ``block_tables[b][t // block_size]``;
    a block is taken from the pool when a row needs one. :meth:`update` writes the new steps into their
    slots and returns every step held, gathered from the blocks in order (a paged attention kernel on a GPU
    reads the blocks where they are; here the gather keeps the attention kernels unchanged). Outputs equal
    those of a :class:`KVCache` (tested); only the memory differs. :meth:`release` gives the blocks back.

    Args:
        pool: the shared blocks.

    Examples:
        >>> pool = BlockPool(num_blocks=4, block_size=2, num_kv_heads=1, head_size=1)
        >>> cache = PagedKVCache(pool)
        >>> keys, _ = cache.update(torch.arange(3.0).view(1, 1, 3, 1), torch.zeros(1, 1, 3, 1))
        >>> keys.flatten().tolist(), cache.block_tables, cache.reserved_slots
        ([0.0, 1.0, 2.0], [[0, 1]], 4)
        >>> cache.release(); pool.used
        0
    """

    def __init__(self, pool: BlockPool) -> None:
        if not isinstance(pool, BlockPool):
            raise TypeError(f"pool must be a BlockPool, got {type(pool).__name__}")
        self.pool = pool
        self.block_tables: list[list[int]] = []
        self.position = 0

    @property
    def reserved_slots(self) -> int:
        """Token slots this cache holds in the pool (its blocks times the block size), over all batch rows."""
        return sum(len(table) for table in self.block_tables) * self.pool.block_size

    def _gather(self, memory: torch.Tensor) -> torch.Tensor | None:
        if not self.block_tables or self.position == 0:
            return None
        rows = [memory[table].transpose(0, 1).flatten(1, 2)[:, :self.position] for table in self.block_tables]
        return torch.stack(rows)  # (B, H_kv, T, d_h)

    @property
    def keys(self) -> torch.Tensor | None:
        """(B, H_kv, T, d_h): the keys held, gathered from the blocks."""
        return self._gather(self.pool.keys)

    @property
    def values(self) -> torch.Tensor | None:
        """(B, H_kv, T, d_h): the values held, gathered from the blocks."""
        return self._gather(self.pool.values)

    def __len__(self) -> int:
        return self.position

    def update(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new steps into their slots (taking blocks as needed) and return every step held.

        Args:
            keys, values: (batch, num_kv_heads, T_new, d_h), laid out as the pool.

        Returns:
            keys, values: (batch, num_kv_heads, T_past + T_new, d_h), gathered from the blocks.
        """
        _check_steps(keys, values, None)
        batch, heads, n_new, head_size = keys.shape
        if (heads, head_size) != (self.pool.keys.shape[1], self.pool.keys.shape[3]):
            raise ValueError(f"keys of shape {tuple(keys.shape)} do not fit the pool's blocks "
                             f"{tuple(self.pool.keys.shape[1:])} (num_kv_heads, block_size, head_size)")
        if not self.block_tables:
            self.block_tables = [[] for _ in range(batch)]
        elif batch != len(self.block_tables):
            raise ValueError(f"the cache holds a batch of {len(self.block_tables)}, got keys of shape "
                             f"{tuple(keys.shape)}; reorder the cache with the batch")
        size = self.pool.block_size
        steps = torch.arange(self.position, self.position + n_new)
        for table in self.block_tables:
            while len(table) * size < self.position + n_new:
                table.append(self.pool.allocate())
        blocks = torch.tensor([[table[t // size] for t in steps.tolist()] for table in self.block_tables])  # (B, T_new)
        slots = (steps % size).expand(batch, n_new)
        self.pool.keys[blocks, :, slots] = keys.transpose(1, 2).to(self.pool.keys.dtype)  # (B, T_new, H, d)
        self.pool.values[blocks, :, slots] = values.transpose(1, 2).to(self.pool.values.dtype)
        self.position += n_new
        return self.keys, self.values

    def release(self) -> None:
        """Give every block back to the pool and forget the steps."""
        for table in self.block_tables:
            self.pool.release(table)
        self.block_tables, self.position = [], 0

    def reorder(self, index: torch.Tensor) -> PagedKVCache:
        """Select batch rows in place: the rows kept get copies of their blocks (a row may be repeated)."""
        index = check_batch_index(index, len(self.block_tables) or None)
        keys, values, position = self.keys, self.values, self.position
        self.release()
        if keys is not None:
            self.update(keys.index_select(0, index), values.index_select(0, index))
            self.position = position
        return self

    def copy(self) -> PagedKVCache:
        """A cache with its own blocks holding the same steps (vLLM shares blocks by reference counts instead)."""
        new = PagedKVCache(self.pool)
        if self.keys is not None:
            new.update(self.keys, self.values)
        return new

    def crop(self, length: int) -> PagedKVCache:
        """Keep the first ``length`` steps and give the blocks past them back to the pool."""
        check_non_negative_int(length, "length")
        if length > self.position:
            raise ValueError(f"length must be at most the {self.position} cached steps, got {length}")
        keep = -(-length // self.pool.block_size)
        for table in self.block_tables:
            self.pool.release(table[keep:])
            del table[keep:]
        self.position = length
        return self
