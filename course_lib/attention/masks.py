"""Masks and the masked softmax (chapter 3).

Convention, used everywhere in ``course_lib``: a boolean mask is ``True`` where a query may
attend to a key, as in ``torch.nn.functional.scaled_dot_product_attention``.
``torch.nn.MultiheadAttention`` uses the opposite convention (``True`` = masked out); pass
``~mask`` when you hand one of our masks to it.

A row in which no key is valid gets all-zero weights (never NaN): the attention output for such a
query is the zero vector.

Padding travels as lengths, ``valid_lens`` (D2L's name): one helper, :func:`lengths_to_mask`, turns
lengths into boolean masks for the whole library. "Causal" has one meaning: query ``i`` of ``n_q``
sits at key position ``i + n_k - n_q`` and sees the keys up to it (the queries are the *last*
``n_q`` positions: aligned bottom-right, as with a key/value cache); :func:`query_positions` gives
those positions, and :func:`causal_mask`, every rule and every ``causal=True`` flag use it.

A mask comes in two forms that every kernel accepts (:mod:`course_lib.attention.contract`): a bool
tensor, or a rule, :class:`MaskMod` ("may the query at position ``q_pos`` see the key at ``kv_pos``?",
FlexAttention's ``mask_mod``). A kernel that needs a dense mask materialises a rule with
:func:`keep_mask`; a tiled kernel asks the rule for its tiles (:meth:`MaskMod.blocks`) and evaluates it
tile by tile, never forming the (n_queries, n_keys) matrix.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .._validation import (
    as_lengths,
    check_floating,
    check_int,
    check_keep_mask,
    check_ndim,
    check_non_negative_int,
    check_positive_int,
    check_tensor,
)


def query_offset(n_queries: int, n_keys: int) -> int:
    """The key position of the first query, ``n_keys - n_queries``: queries and keys aligned bottom-right.

    The library's one convention for queries and keys of different lengths: the keys sit at positions
    ``0 .. n_keys - 1`` and the queries are the *last* ``n_queries`` of them, as when a key/value cache
    holds the earlier keys. Masks, rules, ALiBi's distances, RoPE's angles and linear attention's
    prefix sums all take the queries' positions from here (or from :func:`query_positions`).

    Examples:
        >>> query_offset(1, 5)  # one new query after four cached keys sits at position 4
        4
    """
    return n_keys - n_queries


def query_positions(n_queries: int, n_keys: int, device: torch.device | str | None = None) -> torch.Tensor:
    """The key positions of the queries, aligned bottom-right: ``n_keys - n_queries .. n_keys - 1``.

    Args:
        n_queries, n_keys: the lengths.
        device: where to build the result.

    Returns:
        (n_queries,) int64; negative when there are more queries than keys (those queries see no key
        under the causal rule).

    Examples:
        >>> query_positions(2, 5)  # two new queries after three cached keys
        tensor([3, 4])
    """
    start = query_offset(n_queries, n_keys)
    return torch.arange(start, start + n_queries, device=device)


RuleInputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def rule_inputs(lead: tuple[int, ...], q_pos: torch.Tensor, kv_pos: torch.Tensor) -> RuleInputs:
    """The index tensors ``(b, h, q_pos, kv_pos)`` a rule is evaluated on, for scores of shape (*lead, n_q, n_k).

    ``b`` runs over ``lead[0]`` (the batch) and ``h`` over ``lead[1]`` (the heads), shaped so that the four
    broadcast against each other (a missing axis is the scalar 0); ``rule(*rule_inputs(...))`` then
    broadcasts to (*lead, n_q, n_k). :class:`MaskMod` and :class:`~course_lib.attention.score_mods.ScoreMod`
    share it.

    Examples:
        >>> b, h, q, kv = rule_inputs((2, 4), query_positions(3, 5), torch.arange(5))
        >>> b.shape, h.shape, q.shape, kv.shape
        (torch.Size([2, 1, 1, 1]), torch.Size([1, 4, 1, 1]), torch.Size([1, 1, 3, 1]), torch.Size([1, 1, 1, 5]))
    """
    ones = (1,) * len(lead)

    def index(axis: int) -> torch.Tensor:
        if axis >= len(lead):
            return torch.zeros((), dtype=torch.long, device=q_pos.device)
        shape = [1] * (len(lead) + 2)
        shape[axis] = lead[axis]
        return torch.arange(lead[axis], device=q_pos.device).view(shape)

    return index(0), index(1), q_pos.view(ones + (-1, 1)), kv_pos.view(ones + (1, -1))


def sequence_mask(X: torch.Tensor, valid_lens: torch.Tensor, value: float = 0.0) -> torch.Tensor:
    """Replace the entries of each row of ``X`` past its valid length by ``value`` (D2L semantics).

    Args:
        X: (batch, max_len, ...) tensor.
        valid_lens: (batch,) integer lengths (tensor or list), each in ``[0, max_len]``.
        value: fill value for the padded positions.

    Returns:
        A new tensor shaped like ``X`` with ``X[b, t] = value`` for ``t >= valid_lens[b]``.

    Examples:
        >>> sequence_mask(torch.ones(2, 3), torch.tensor([1, 2]))
        tensor([[1., 0., 0.],
                [1., 1., 0.]])
    """
    check_tensor(X, "X")
    if X.dim() < 2:
        raise ValueError(f"X must be at least 2-D (batch, max_len, ...), got shape {tuple(X.shape)}")
    valid_lens = as_lengths(valid_lens, "valid_lens", max_len=X.shape[1], shape=(X.shape[0],),
                            what=f"X of shape {tuple(X.shape)}", device=X.device)
    keep = keep_lengths(valid_lens, X.shape[1])  # (batch, max_len)
    keep = keep.reshape(keep.shape + (1,) * (X.dim() - 2))
    return X.masked_fill(~keep, value)


def lengths_to_mask(valid_lens: torch.Tensor, max_len: int) -> torch.Tensor:
    """Boolean mask ``(..., max_len)`` that is ``True`` at positions ``t < valid_lens[...]``.

    The one place where lengths become a mask: the masked softmax, the attention modules, the
    Transformer and the sparse kernels all call it.

    Args:
        valid_lens: integer lengths of any shape ``(...)``, a tensor or a (nested) list; lengths
            larger than ``max_len`` keep every position.
        max_len: length of the new last axis.

    Returns:
        (..., max_len) bool tensor on the device of ``valid_lens``, ``True`` = attend.

    Examples:
        >>> lengths_to_mask(torch.tensor([1, 3]), 4)
        tensor([[ True, False, False, False],
                [ True,  True,  True, False]])
        >>> lengths_to_mask([2], 3)
        tensor([[ True,  True, False]])
    """
    check_non_negative_int(max_len, "max_len")
    return keep_lengths(as_lengths(valid_lens, "valid_lens"), max_len)


def keep_lengths(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """:func:`lengths_to_mask` for lengths already checked (an int64 tensor): where a model turns the lengths it
    validated once into its mask.

    Examples:
        >>> keep_lengths(torch.tensor([2]), 3)
        tensor([[ True,  True, False]])
    """
    return torch.arange(max_len, device=lengths.device) < lengths.unsqueeze(-1)


def causal_mask(n_queries: int, n_keys: int | None = None, device: torch.device | str | None = None, *,
                offset: int | None = None) -> torch.Tensor:
    """Look-ahead mask: query ``i`` sits at key position ``i + offset`` and sees the keys ``j <= i + offset``.

    The default ``offset = n_keys - n_queries`` aligns the queries with the *last* keys (bottom-right):
    the last query sees every key, as when a key/value cache holds the earlier positions. This is
    what ``MultiHeadAttention(..., causal=True)`` does. ``offset=0`` aligns them top-left, as
    ``scaled_dot_product_attention(..., is_causal=True)``; both agree when ``n_queries == n_keys``.

    Args:
        n_queries: rows.
        n_keys: columns (default ``n_queries``).
        device: where to build it.
        offset: the key position of query 0 (may be negative: those queries see no key).

    Returns:
        (n_queries, n_keys) bool tensor, ``True`` = attend.

    Examples:
        >>> causal_mask(3).int()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [1, 1, 1]], dtype=torch.int32)
        >>> causal_mask(2, 4).int()  # two new queries after two cached keys
        tensor([[1, 1, 1, 0],
                [1, 1, 1, 1]], dtype=torch.int32)
    """
    check_non_negative_int(n_queries, "n_queries")
    n_keys = n_queries if n_keys is None else n_keys
    check_non_negative_int(n_keys, "n_keys")
    offset = query_offset(n_queries, n_keys) if offset is None else check_int(offset, "offset")
    return torch.ones(n_queries, n_keys, dtype=torch.bool, device=device).tril(diagonal=offset)


class MaskMod:
    """A rule "may the query at position ``q_pos`` see the key at position ``kv_pos``?": masks as one idea.

    Padding, the look-ahead mask, sliding windows and chapter 9's strided and fixed patterns are all
    such rules: a function ``rule(b, h, q_pos, kv_pos) -> bool`` of the batch row, the head and the two
    positions, as PyTorch's FlexAttention calls a ``mask_mod``. Rules combine with ``&`` and ``|`` and
    are materialised as a boolean keep-mask (:meth:`materialize`), as block lists (:meth:`blocks`), or
    handed to ``torch.nn.attention.flex_attention`` (:meth:`flex`).

    Positions: the keys sit at positions ``0 .. n_keys - 1`` and the ``n_queries`` queries at the *last*
    positions, ``n_keys - n_queries .. n_keys - 1`` (aligned bottom-right, as with a key/value cache).

    Args:
        rule: a function of four integer tensors that broadcast against each other, returning a bool
            tensor of their broadcast shape; written with tensor operations only (no ``if`` on values),
            so that it also runs under FlexAttention's ``vmap``.
        name: what ``repr`` shows.

    Examples:
        >>> window = causal_mod() & sliding_window_mod(2)
        >>> window.materialize(4).int()
        tensor([[1, 0, 0, 0],
                [1, 1, 0, 0],
                [0, 1, 1, 0],
                [0, 0, 1, 1]], dtype=torch.int32)
    """

    def __init__(self, rule: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
                 name: str = "rule") -> None:
        if not callable(rule):
            raise TypeError(f"rule must be callable, got {type(rule).__name__}")
        self.rule = rule
        self.name = name

    def __repr__(self) -> str:
        return f"MaskMod({self.name})"

    def __call__(self, b: torch.Tensor, h: torch.Tensor, q_pos: torch.Tensor, kv_pos: torch.Tensor) -> torch.Tensor:
        return self.rule(b, h, q_pos, kv_pos)

    def __and__(self, other: MaskMod) -> MaskMod:
        _check_mask_mod(other, "the right operand of &")
        return MaskMod(lambda b, h, q, kv: self.rule(b, h, q, kv) & other.rule(b, h, q, kv),
                       f"{self.name} & {other.name}")

    def __or__(self, other: MaskMod) -> MaskMod:
        _check_mask_mod(other, "the right operand of |")
        return MaskMod(lambda b, h, q, kv: self.rule(b, h, q, kv) | other.rule(b, h, q, kv),
                       f"({self.name} | {other.name})")

    def materialize(self, n_queries: int, n_keys: int | None = None, *, batch: int | None = None,
                    heads: int | None = None, device: torch.device | str | None = None) -> torch.Tensor:
        """The boolean keep-mask of the rule (``True`` = attend).

        Args:
            n_queries: rows (the queries sit at the last positions).
            n_keys: columns (default ``n_queries``).
            batch, heads: the batch and head counts of a rule that depends on them.
            device: where to build it.

        Returns:
            (n_queries, n_keys) when neither ``batch`` nor ``heads`` is given; otherwise
            (batch or 1, heads or 1, n_queries, n_keys), with 1 on the axes the rule ignores.

        Examples:
            >>> causal_mod().materialize(2, 3).int()  # the two queries sit at key positions 1 and 2
            tensor([[1, 1, 0],
                    [1, 1, 1]], dtype=torch.int32)
            >>> (causal_mod() & padding_mod(torch.tensor([1, 3]))).materialize(2, 3, batch=2).shape
            torch.Size([2, 1, 2, 3])
        """
        check_non_negative_int(n_queries, "n_queries")
        n_keys = n_queries if n_keys is None else check_non_negative_int(n_keys, "n_keys")
        lead = (1 if batch is None else check_positive_int(batch, "batch"),
                1 if heads is None else check_positive_int(heads, "heads"))
        keep = self.evaluate(lead, query_positions(n_queries, n_keys, device), torch.arange(n_keys, device=device))
        keep = keep.broadcast_to(torch.broadcast_shapes(keep.shape, (1, 1, n_queries, n_keys)))
        return keep[0, 0] if batch is None and heads is None else keep

    def evaluate(self, lead: tuple[int, ...], q_pos: torch.Tensor, kv_pos: torch.Tensor) -> torch.Tensor:
        """The rule at the given query and key positions, for scores of shape (*lead, len(q_pos), len(kv_pos)).

        What a kernel calls on one tile (a tiled kernel) or on the whole grid (:func:`keep_mask`).

        Returns:
            A bool tensor that broadcasts to (*lead, len(q_pos), len(kv_pos)) (size 1 on the axes the rule
            ignores).

        Examples:
            >>> causal_mod().evaluate((), torch.tensor([4, 5]), torch.arange(3, 7)).int()  # one 2 x 4 tile
            tensor([[1, 1, 0, 0],
                    [1, 1, 1, 0]], dtype=torch.int32)
        """
        return self.rule(*rule_inputs(lead, q_pos, kv_pos))

    def blocks(self, n_queries: int, n_keys: int | None = None, block_q: int = 64, block_k: int = 64, *,
               batch: int | None = None, heads: int | None = None,
               device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The rule as block lists: which (query block, key block) tiles hold any kept pair, and which are full.

        A tiled kernel (FlashAttention, chapter 10) skips the empty tiles and needs no mask inside
        the full ones; with ``batch`` and ``heads``, one plan serves every batch row and head: a tile
        holds a kept pair if it does for some row and head, and is full if it is for all. The rule is
        evaluated one block of query rows at a time (memory O(batch x heads x block_q x n_keys), never
        the whole matrix). The last block of each axis may be shorter.

        Returns:
            ``(any_kept, all_kept)``, two bool tensors (n_query_blocks, n_key_blocks).

        Examples:
            >>> any_kept, all_kept = causal_mod().blocks(4, 4, 2, 2)
            >>> any_kept.int(), all_kept.int()
            (tensor([[1, 0],
                    [1, 1]], dtype=torch.int32), tensor([[0, 0],
                    [1, 0]], dtype=torch.int32))
        """
        check_non_negative_int(n_queries, "n_queries")
        n_keys = n_queries if n_keys is None else check_non_negative_int(n_keys, "n_keys")
        check_positive_int(block_q, "block_q")
        check_positive_int(block_k, "block_k")
        lead = (1 if batch is None else check_positive_int(batch, "batch"),
                1 if heads is None else check_positive_int(heads, "heads"))
        q_pos, kv_pos = query_positions(n_queries, n_keys, device), torch.arange(n_keys, device=device)
        pad_k, n_kb = -n_keys % block_k, -(-n_keys // block_k)
        some, every = [], []
        for start in range(0, n_queries, block_q):
            rows = self.evaluate(lead, q_pos[start:start + block_q], kv_pos)
            rows = rows.broadcast_to(torch.broadcast_shapes(rows.shape, (1, 1, 1, n_keys))).flatten(0, -2)
            # Pad the keys to whole blocks with False for "any" and True for "all", so the padding changes neither.
            tiles = (rows.shape[0], n_kb, block_k)
            some.append(torch.nn.functional.pad(rows, (0, pad_k), value=False).view(tiles).any(-1).any(0))
            every.append(torch.nn.functional.pad(rows, (0, pad_k), value=True).view(tiles).all(-1).all(0))
        if not some:
            empty = torch.zeros(0, n_kb, dtype=torch.bool, device=device)
            return empty, empty
        return torch.stack(some), torch.stack(every)

    @classmethod
    def from_keep(cls, keep: torch.Tensor, n_queries: int, n_keys: int) -> MaskMod:
        """A dense keep-mask as a rule: the rule looks its answer up in the tensor.

        So that a kernel that works with rules (tiles, FlexAttention) takes a tensor mask too.

        Args:
            keep: bool, broadcastable to (batch, heads, n_queries, n_keys) (at most 4 axes), ``True`` = attend.
            n_queries, n_keys: the lengths it masks (the queries sit at the last positions).

        Examples:
            >>> keep = torch.tensor([[True, False, True]])  # (n_queries = 1, n_keys = 3)
            >>> MaskMod.from_keep(keep, 1, 3).materialize(1, 3)
            tensor([[ True, False,  True]])
        """
        check_tensor(keep, "keep")
        if keep.dtype != torch.bool or keep.dim() > 4 or any(
                m not in (1, n) for m, n in zip(keep.shape[-2:], (n_queries, n_keys), strict=False)):
            raise ValueError(f"keep must be a bool tensor broadcastable to (batch, heads, {n_queries}, {n_keys}), "
                             f"got {keep.dtype} of shape {tuple(keep.shape)}")
        table = keep.reshape((1,) * (4 - keep.dim()) + tuple(keep.shape))
        offset = query_offset(n_queries, n_keys)
        axes = tuple(size > 1 for size in table.shape)

        def rule(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
            index = (b, h, q - offset, kv)
            return table[tuple(i.to(table.device) if used else 0 for i, used in zip(index, axes, strict=True))]

        return cls(rule, f"tensor{tuple(keep.shape)}")

    def flex(self, n_queries: int, n_keys: int) -> Callable[..., torch.Tensor]:
        """The rule as a ``mask_mod`` for ``torch.nn.attention.flex_attention`` (queries indexed from 0).

        Examples:
            >>> mask_mod = causal_mod().flex(2, 4)  # FlexAttention counts queries from 0 ...
            >>> mask_mod(0, 0, torch.arange(2)[:, None], torch.arange(4)).int()  # ... query 0 is at key 2
            tensor([[1, 1, 1, 0],
                    [1, 1, 1, 1]], dtype=torch.int32)
        """
        offset = query_offset(check_non_negative_int(n_queries, "n_queries"), check_non_negative_int(n_keys, "n_keys"))
        return lambda b, h, q_idx, kv_idx: self.rule(b, h, q_idx + offset, kv_idx)


def keep_mask(mask: torch.Tensor | MaskMod | None, causal: bool, n_queries: int, n_keys: int,
              device: torch.device | str | None = None, *, lead: tuple[int, ...] = ()) -> torch.Tensor | None:
    """``mask`` (a tensor or a rule) and the bottom-right look-ahead rule as one dense keep-mask, or ``None``.

    What a kernel that needs a dense mask calls. A single query is the last position: it sees every key,
    so ``causal`` adds nothing for it.

    Args:
        mask: ``None``, a bool tensor broadcastable to (*lead, n_queries, n_keys), or a :class:`MaskMod`.
        causal: and the look-ahead rule.
        n_queries, n_keys: the lengths.
        device: where to build what is built.
        lead: the scores' leading axes (batch, heads): the axes a rule is evaluated over.

    Returns:
        A bool tensor that broadcasts to (*lead, n_queries, n_keys), ``True`` = attend; ``None`` when
        every pair is kept.

    Examples:
        >>> keep_mask(None, True, 2, 3).int()
        tensor([[1, 1, 0],
                [1, 1, 1]], dtype=torch.int32)
        >>> keep_mask(sliding_window_mod(2), True, 3, 3).int()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [0, 1, 1]], dtype=torch.int32)
    """
    if isinstance(mask, MaskMod):
        mask = mask.evaluate(lead, query_positions(n_queries, n_keys, device), torch.arange(n_keys, device=device))
    if not causal or n_queries <= 1:
        return mask
    look_ahead = causal_mask(n_queries, n_keys, device=device)
    return look_ahead if mask is None else mask & look_ahead


def _check_mask_mod(value: object, name: str) -> MaskMod:
    if not isinstance(value, MaskMod):
        raise TypeError(f"{name} must be a MaskMod, got {type(value).__name__}")
    return value


def causal_mod() -> MaskMod:
    """The look-ahead rule: a query sees the keys at its own position and before (``kv_pos <= q_pos``).

    Examples:
        >>> torch.equal(causal_mod().materialize(2, 4), causal_mask(2, 4))
        True
    """
    return MaskMod(lambda b, h, q, kv: kv <= q, "causal")


def sliding_window_mod(window: int) -> MaskMod:
    """The band ``|q_pos - kv_pos| < window``; with :func:`causal_mod`, the last ``window`` keys (Mistral's).

    Examples:
        >>> sliding_window_mod(2).materialize(3).int()
        tensor([[1, 1, 0],
                [1, 1, 1],
                [0, 1, 1]], dtype=torch.int32)
    """
    window = check_positive_int(window, "window")
    return MaskMod(lambda b, h, q, kv: (q - kv).abs() < window, f"sliding_window({window})")


def padding_mod(valid_lens: object) -> MaskMod:
    """The padding rule ``kv_pos < valid_lens[b]`` for (batch,) lengths (a tensor or a list).

    Examples:
        >>> padding_mod([1, 2]).materialize(1, 3, batch=2)[:, 0, 0].int()
        tensor([[1, 0, 0],
                [1, 1, 0]], dtype=torch.int32)
    """
    lens = as_lengths(valid_lens, "valid_lens")
    check_ndim(lens, "valid_lens", 1, "(batch,)")
    return MaskMod(lambda b, h, q, kv: kv < lens.to(kv.device)[b], "padding")


def padding_mask(valid_lens: object, n_keys: int) -> torch.Tensor:
    """The keep-mask of the real (unpadded) keys: lengths become a mask here, once per model call.

    Args:
        valid_lens: (batch,) one length per example, shared by all its queries, or (batch, n_queries)
            one length per query; a tensor or a (nested) list of integers in ``[0, n_keys]``.
        n_keys: the number of keys (the padded length).

    Returns:
        (batch, 1, n_keys) or (batch, n_queries, n_keys) bool, ``True`` at the keys ``j < valid_lens``:
        a mask for scores (batch, n_queries, n_keys), and for multi-head scores (a 3-D mask is shared
        by the heads).

    Examples:
        >>> padding_mask(torch.tensor([1, 3]), 4)
        tensor([[[ True, False, False, False]],
        <BLANKLINE>
                [[ True,  True,  True, False]]])
    """
    check_non_negative_int(n_keys, "n_keys")
    lens = as_lengths(valid_lens, "valid_lens", max_len=n_keys)
    if lens.dim() not in (1, 2):
        raise ValueError(f"valid_lens must have shape (batch,) or (batch, n_queries), got {tuple(lens.shape)}")
    keep = keep_lengths(lens, n_keys)  # (B, n_k) or (B, n_q, n_k)
    return keep.unsqueeze(1) if lens.dim() == 1 else keep


def valid_lens_to_mask(valid_lens: torch.Tensor, batch_size: int, n_queries: int,
                       n_keys: int, device: torch.device | None = None) -> torch.Tensor:
    """Turn D2L-style ``valid_lens`` into a boolean key mask ``(batch, n_queries, n_keys)``.

    :func:`padding_mask` expanded to the scores' full shape.

    Args:
        valid_lens: (batch,) one length per example, shared by all its queries, or
            (batch, n_queries) one length per query.
        batch_size, n_queries, n_keys: the shape of the scores the mask is for.

    Returns:
        (batch, n_queries, n_keys) bool tensor, ``True`` = attend.

    Raises:
        ValueError: wrong shape, negative, non-integer, or longer than ``n_keys``.

    Examples:
        >>> valid_lens_to_mask(torch.tensor([1, 2]), 2, 1, 3)
        tensor([[[ True, False, False]],
        <BLANKLINE>
                [[ True,  True, False]]])
    """
    keep = _padding_for_scores(valid_lens, (batch_size, n_queries, n_keys), device)
    return keep.expand(batch_size, n_queries, n_keys)


def _padding_for_scores(valid_lens: object, scores: tuple[int, int, int],
                        device: torch.device | str | None) -> torch.Tensor:
    """:func:`padding_mask` for scores (batch, n_queries, n_keys), with the lengths' shape checked against them."""
    batch, n_q, n_k = scores
    lens = as_lengths(valid_lens, "valid_lens", max_len=n_k, device=device)
    if tuple(lens.shape) not in ((batch,), (batch, n_q)):
        raise ValueError(f"valid_lens must have shape ({batch},) or ({batch}, {n_q}) for scores of shape "
                         f"{scores}, got {tuple(lens.shape)}")
    return padding_mask(lens, n_k)


def masked_softmax(
    X: torch.Tensor,
    valid_lens: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Softmax over the last axis that gives zero weight to masked keys.

    Args:
        X: (batch, n_queries, n_keys) scores (any leading shape when only
            ``mask`` is used).
        valid_lens: optional (batch,) or (batch, n_queries) integer lengths:
            the keys ``j >= valid_lens`` get weight 0 (D2L semantics).
        mask: optional boolean tensor broadcastable to ``X``, ``True`` =
            attend (the opposite of ``torch.nn.MultiheadAttention``'s masks;
            a 2-D (batch, n_keys) mask, the shape of its
            ``key_padding_mask``, is refused). Combined with ``valid_lens``
            by logical and.

    Returns:
        Weights shaped like ``X``: non-negative, each row sums to 1 over its
        valid keys, masked keys get exactly 0, and a row with no valid key is
        all zeros (not NaN).

    Raises:
        TypeError: ``X`` is not a floating-point tensor, or ``mask`` is not
            boolean.
        ValueError: ``valid_lens`` has the wrong shape or holds negative,
            non-integer or too large lengths; ``valid_lens`` is given for
            scores that are not 3-D; ``mask`` does not broadcast to the shape
            of ``X``.

    Examples:
        >>> X = torch.zeros(1, 2, 4)
        >>> masked_softmax(X, torch.tensor([3]))
        tensor([[[0.3333, 0.3333, 0.3333, 0.0000],
                 [0.3333, 0.3333, 0.3333, 0.0000]]])
        >>> mask = torch.tensor([[True, False, False, False], [False] * 4])
        >>> masked_softmax(X, mask=mask)
        tensor([[[1., 0., 0., 0.],
                 [0., 0., 0., 0.]]])
    """
    check_floating(X, "X")
    keep = None
    if valid_lens is not None:
        check_ndim(X, "X", 3, "(batch, n_queries, n_keys) with valid_lens")
        keep = _padding_for_scores(valid_lens, tuple(X.shape), X.device)
    if mask is not None:
        check_keep_mask(mask, tuple(X.shape))
        mask = mask.to(X.device)
        keep = mask if keep is None else keep & mask
    if keep is None:
        return torch.softmax(X, dim=-1)
    return softmax_with_keep(X, keep)


def softmax_with_keep(
    scores: torch.Tensor, keep: torch.Tensor
) -> torch.Tensor:
    """The masked softmax itself, for a checked keep-mask.

    What :func:`masked_softmax` computes once lengths and masks are one
    keep-mask. (Its lines fit the book's column: chapter 3 shows them.)

    Args:
        scores: (..., n_queries, n_keys) floating point.
        keep: bool, broadcastable to ``scores``, ``True`` = attend.

    Returns:
        Weights shaped like ``scores``; masked keys get exactly 0 and a row
        with no key is all zeros.

    Examples:
        >>> keep = torch.tensor([[True, True, False], [False] * 3])
        >>> softmax_with_keep(torch.zeros(2, 3), keep)
        tensor([[0.5000, 0.5000, 0.0000],
                [0.0000, 0.0000, 0.0000]])
    """
    # The most negative finite value, not -inf: a row with no key stays finite
    # (uniform before the multiply by keep) instead of 0/0 = NaN, forward and
    # backward.
    filled = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    return torch.softmax(filled, dim=-1) * keep
