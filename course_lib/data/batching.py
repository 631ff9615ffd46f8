"""Turn token pairs into padded tensors for teacher forcing.

A pair ``(x, y)`` becomes

- ``src = x <eos>`` (the encoder sees where the source ends), ``src_valid_lens = len(x) + 1``;
- ``tgt_in = <bos> y`` (the decoder input) and ``tgt_out = y <eos>`` (what it must predict at each
  step, shifted by one), both of length ``tgt_valid_lens = len(y) + 1``.

Rows are padded on the right with ``<pad>`` = 0 to the longest row of the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch

from .._validation import check_max_len, check_non_negative_int
from .vocab import Vocab

__all__ = ["Batch", "encode_sources", "make_batch", "pad_sequences"]


@dataclass
class Batch:
    """One padded batch of B pairs.

    Attributes:
        src: (B, S) long, ``x <eos>`` padded with ``<pad>``.
        src_valid_lens: (B,) long, ``len(x) + 1``.
        tgt_in: (B, T) long, ``<bos> y`` padded.
        tgt_out: (B, T) long, ``y <eos>`` padded.
        tgt_valid_lens: (B,) long, ``len(y) + 1``.
        n_truncated: how many of the B pairs were cut to fit a ``max_len`` (0 without one).

    Examples:
        >>> v = Vocab.build([["a", "b", "b"]])  # ids: <pad> <bos> <eos> <unk> b a
        >>> batch = make_batch([(["a"], ["a", "b"]), (["a", "b", "a"], ["b"])], v, v)
        >>> batch.src.shape, batch.tgt_in.shape, len(batch)  # (B, S), (B, T), B
        (torch.Size([2, 4]), torch.Size([2, 3]), 2)
        >>> batch.tgt_in, batch.tgt_out  # <bos> y and y <eos>, padded with 0
        (tensor([[1, 5, 4],
                [1, 4, 0]]), tensor([[5, 4, 2],
                [4, 2, 0]]))
    """

    src: torch.Tensor
    src_valid_lens: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    tgt_valid_lens: torch.Tensor
    n_truncated: int = 0

    def __post_init__(self) -> None:
        for f in fields(self)[:5]:
            value = getattr(self, f.name)
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"Batch.{f.name} must be a torch.Tensor, got {type(value).__name__}")
        if self.src.dim() != 2 or self.tgt_in.dim() != 2:
            raise ValueError(f"Batch.src and Batch.tgt_in must be 2-D (B, S) and (B, T), got shapes "
                             f"{tuple(self.src.shape)} and {tuple(self.tgt_in.shape)}")
        B = self.src.shape[0]
        if self.tgt_out.shape != self.tgt_in.shape or self.tgt_in.shape[0] != B:
            raise ValueError(f"Batch.tgt_in and Batch.tgt_out must both be (B={B}, T), got shapes "
                             f"{tuple(self.tgt_in.shape)} and {tuple(self.tgt_out.shape)}")
        for name in ("src_valid_lens", "tgt_valid_lens"):
            if tuple(getattr(self, name).shape) != (B,):
                raise ValueError(f"Batch.{name} must have shape (B,) = ({B},), got {tuple(getattr(self, name).shape)}")

    def __len__(self) -> int:
        return self.src.shape[0]

    def to(self, device: torch.device | str) -> Batch:
        """A copy with every tensor moved to ``device``.

        Examples:
            >>> v = Vocab.build([["a"]])
            >>> make_batch([(["a"], ["a"])], v, v).to("cpu").src.device
            device(type='cpu')
        """
        return Batch(self.src.to(device), self.src_valid_lens.to(device), self.tgt_in.to(device),
                     self.tgt_out.to(device), self.tgt_valid_lens.to(device), self.n_truncated)


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int = 0) -> torch.Tensor:
    """Stack id lists of different lengths into one right-padded tensor.

    Args:
        seqs: B lists of ids.
        pad_id: the id of ``<pad>`` (the name the model configs use).

    Returns:
        (B, max length) long tensor; (B, 0) when every list is empty.

    Examples:
        >>> pad_sequences([[5], [], [6, 7]])
        tensor([[5, 0],
                [0, 0],
                [6, 7]])
    """
    width = max((len(s) for s in seqs), default=0)
    out = torch.full((len(seqs), width), check_non_negative_int(pad_id, "pad_id"), dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            out[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return out


def _encode_sources(token_lists: Sequence[Sequence[str]], vocab: Vocab,
                    max_len: int | None) -> tuple[torch.Tensor, torch.Tensor, list[bool]]:
    ids, cut = [], []
    for tokens in token_lists:
        x = vocab.encode(tokens)
        cut.append(max_len is not None and len(x) + 1 > max_len)
        if cut[-1]:
            x = x[: max_len - 1]  # keep room for <eos>: the encoder must still see where the source ends
        ids.append([*x, vocab.eos])
    return pad_sequences(ids, vocab.pad), torch.tensor([len(x) for x in ids], dtype=torch.long), cut


def encode_sources(token_lists: Sequence[Sequence[str]], vocab: Vocab,
                   max_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Encode source sentences for the encoder: ``x <eos>``, padded.

    Args:
        token_lists: B token lists.
        vocab: the source vocabulary.
        max_len: cut each row to at most this many ids (``<eos>`` included); None keeps all.

    Returns:
        ``src`` (B, S) long and ``src_valid_lens`` (B,) long.

    Raises:
        TypeError: ``token_lists`` is a single str, or a row is one.
        ValueError: ``max_len < 2``.

    Examples:
        >>> v = Vocab.build([["a", "b", "b"]])  # ids: <pad> <bos> <eos> <unk> b a
        >>> src, src_valid_lens = encode_sources([["a"], ["b", "a", "c"]], v)  # "c" is unknown: <unk> = 3
        >>> src, src_valid_lens  # (B, S), (B,)
        (tensor([[5, 2, 0, 0],
                [4, 5, 3, 2]]), tensor([2, 4]))
        >>> encode_sources([["b", "a", "c"]], v, max_len=2)[0]  # cut, <eos> kept
        tensor([[4, 2]])
    """
    if isinstance(token_lists, str):
        raise TypeError("token_lists must be a list of token lists, got a single str")
    src, lens, _ = _encode_sources(token_lists, vocab, check_max_len(max_len))
    return src, lens


def make_batch(pairs: Sequence[tuple[Sequence[str], Sequence[str]]], src_vocab: Vocab, tgt_vocab: Vocab,
               max_len: int | None = None) -> Batch:
    """Build the teacher-forcing tensors of a list of (source tokens, target tokens) pairs.

    Args:
        pairs: B pairs of token lists.
        src_vocab, tgt_vocab: the vocabularies.
        max_len: cut sources to ``max_len`` ids (``<eos>`` included) and targets to ``max_len - 1``
            tokens (so ``tgt_in``/``tgt_out`` have at most ``max_len`` columns); the number of pairs
            cut is reported in ``Batch.n_truncated``. None keeps everything.

    Returns:
        A :class:`Batch`; S = longest ``len(x) + 1``, T = longest ``len(y) + 1``.

    Raises:
        ValueError: ``pairs`` is empty, or ``max_len < 2``.

    Examples:
        >>> v = Vocab.build([["a", "b", "b"]])  # ids: <pad> <bos> <eos> <unk> b a
        >>> batch = make_batch([(["a", "b"], ["a", "b", "a"]), (["b"], ["b"])], v, v, max_len=3)
        >>> batch.src, batch.tgt_out  # (B, S) and (B, T), T <= max_len
        (tensor([[5, 4, 2],
                [4, 2, 0]]), tensor([[5, 4, 2],
                [4, 2, 0]]))
        >>> batch.src_valid_lens, batch.tgt_valid_lens, batch.n_truncated
        (tensor([3, 2]), tensor([3, 2]), 1)
    """
    if len(pairs) == 0:
        raise ValueError("pairs must not be empty: a batch needs at least one pair")
    max_len = check_max_len(max_len)
    src, src_lens, src_cut = _encode_sources([x for x, _ in pairs], src_vocab, max_len)
    ys, tgt_cut = [], []
    for _, y in pairs:
        ids = tgt_vocab.encode(y)
        tgt_cut.append(max_len is not None and len(ids) + 1 > max_len)
        ys.append(ids[: max_len - 1] if tgt_cut[-1] else ids)
    tgt_in = pad_sequences([[tgt_vocab.bos, *y] for y in ys], tgt_vocab.pad)
    tgt_out = pad_sequences([[*y, tgt_vocab.eos] for y in ys], tgt_vocab.pad)
    tgt_lens = torch.tensor([len(y) + 1 for y in ys], dtype=torch.long)
    n_cut = sum(a or b for a, b in zip(src_cut, tgt_cut, strict=True))
    return Batch(src, src_lens, tgt_in, tgt_out, tgt_lens, n_cut)
