"""A seq2seq data set: three splits of token pairs, their vocabularies and per-source references.

Splits are made by *source*: every pair with the same source tokens lands in the same split, so a
sentence seen in training (with one of its translations) is never scored on held-out data.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from .._validation import check_int, check_max_len, check_positive_int, check_probability
from .batching import Batch, encode_sources, make_batch
from .vocab import Vocab

__all__ = ["SPLITS", "Pair", "Seq2SeqData", "build_references", "split_by_source"]

SPLITS: tuple[str, ...] = ("train", "valid", "test")
Pair = tuple[list[str], list[str]]


def split_by_source(pairs: Sequence[Pair], valid_frac: float = 0.1, test_frac: float = 0.1,
                    seed: int = 0) -> tuple[list[Pair], list[Pair], list[Pair]]:
    """Split pairs into train/valid/test so that all pairs sharing a source are on the same side.

    The distinct sources (in order of first appearance) are shuffled with ``random.Random(seed)``;
    the first ``round(test_frac * n)`` go to test, the next ``round(valid_frac * n)`` to valid, the
    rest to train. Within a split the pairs keep their input order.

    Args:
        pairs: (source tokens, target tokens) pairs.
        valid_frac, test_frac: fractions of the distinct sources, each in [0, 1).
        seed: the shuffling seed.

    Returns:
        ``(train, valid, test)`` lists of pairs.

    Raises:
        ValueError: a fraction is outside [0, 1), or no source would be left for training.

    Examples:
        >>> pairs = [(["a"], ["x"]), (["b"], ["y"]), (["a"], ["z"]), (["c"], ["w"])]
        >>> train, valid, test = split_by_source(pairs, valid_frac=0.25, test_frac=0.25)
        >>> train, valid
        ([(['b'], ['y'])], [(['c'], ['w'])])
        >>> test  # both pairs with the source ["a"] are on the same side
        [(['a'], ['x']), (['a'], ['z'])]
    """
    valid_frac = check_probability(valid_frac, "valid_frac")
    test_frac = check_probability(test_frac, "test_frac")
    seed = check_int(seed, "seed")
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, (src, _) in enumerate(pairs):
        groups.setdefault(tuple(src), []).append(i)
    sources = list(groups)
    random.Random(seed).shuffle(sources)
    n_test, n_valid = round(test_frac * len(sources)), round(valid_frac * len(sources))
    if n_test + n_valid >= len(sources):
        raise ValueError(f"valid_frac={valid_frac} and test_frac={test_frac} leave no training data: "
                         f"{len(sources)} distinct sources, {n_valid} valid + {n_test} test")
    side = {s: 2 for s in sources[:n_test]}
    side.update({s: 1 for s in sources[n_test:n_test + n_valid]})
    out: tuple[list[Pair], list[Pair], list[Pair]] = ([], [], [])
    for src, tgt in pairs:
        out[side.get(tuple(src), 0)].append((list(src), list(tgt)))
    return out


def build_references(pairs: Sequence[Pair]) -> dict[tuple[str, ...], list[list[str]]]:
    """Group the targets of each distinct source (duplicates once, in first-seen order).

    Returns:
        source token tuple -> every distinct target token list, sources in first-seen order.

    Examples:
        >>> build_references([(["a"], ["x"]), (["b"], ["y"]), (["a"], ["z"]), (["a"], ["x"])])
        {('a',): [['x'], ['z']], ('b',): [['y']]}
    """
    refs: dict[tuple[str, ...], list[list[str]]] = {}
    for src, tgt in pairs:
        targets = refs.setdefault(tuple(src), [])
        if list(tgt) not in targets:
            targets.append(list(tgt))
    return refs


@dataclass(repr=False)
class Seq2SeqData:
    """Three splits of (source tokens, target tokens) pairs with what training and scoring need.

    Attributes:
        train, valid, test: lists of ``(src_tokens, tgt_tokens)`` pairs.
        src_vocab, tgt_vocab: built on the training split.
        references: per split, source token tuple -> every target of that source in the split
            (multi-reference BLEU, exact match against any).
        tokenizer: ``"char"``, ``"word"`` or ``"subword"`` (how a raw sentence becomes tokens).
        name: the data set's name.
        info: counts and settings from the loader (what was dropped and why, seeds, sizes).
        src_tokenizer, tgt_tokenizer: for ``"subword"``, the two
            :class:`course_lib.data.SubwordTokenizer` objects (None otherwise).

    Examples:
        >>> data = Seq2SeqData.from_splits([(["a", "b"], ["x"]), (["b"], ["y", "x"])], [(["a"], ["y"])], [],
        ...                                tokenizer="word", name="toy")
        >>> data
        Seq2SeqData(name='toy', tokenizer='word',
                    train=2, valid=1, test=0,
                    src_vocab=6, tgt_vocab=6)
        >>> data.references["train"]
        {('a', 'b'): [['x']], ('b',): [['y', 'x']]}
    """

    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]
    src_vocab: Vocab
    tgt_vocab: Vocab
    references: dict[str, dict[tuple[str, ...], list[list[str]]]]
    tokenizer: str
    name: str
    info: dict[str, Any] = field(default_factory=dict)
    src_tokenizer: Any = None
    tgt_tokenizer: Any = None

    def __post_init__(self) -> None:
        if self.tokenizer not in ("char", "word", "subword"):
            raise ValueError(f'tokenizer must be "char", "word" or "subword", got {self.tokenizer!r}')
        if (self.tokenizer == "subword") != (self.src_tokenizer is not None and self.tgt_tokenizer is not None):
            raise ValueError('src_tokenizer and tgt_tokenizer must be given exactly when tokenizer="subword"')
        for v in ("src_vocab", "tgt_vocab"):
            if not isinstance(getattr(self, v), Vocab):
                raise TypeError(f"{v} must be a Vocab, got {type(getattr(self, v)).__name__}")

    @classmethod
    def from_splits(cls, train: Sequence[Pair], valid: Sequence[Pair], test: Sequence[Pair], *, tokenizer: str,
                    name: str, min_freq: int = 1, reserved_tokens: Sequence[str] = (),
                    info: dict[str, Any] | None = None) -> Seq2SeqData:
        """Build vocabularies (on ``train``, keeping tokens seen ``min_freq`` times) and references.

        Returns:
            The data set.

        Examples:
            >>> data = Seq2SeqData.from_splits([(["a", "b"], ["x"]), (["b"], ["x"])], [], [], tokenizer="word",
            ...                                name="toy", min_freq=2)
            >>> data.src_vocab.idx_to_token  # "a" was seen once: it will map to <unk>
            ('<pad>', '<bos>', '<eos>', '<unk>', 'b')
        """
        splits = {name_: [(list(s), list(t)) for s, t in pairs]
                  for name_, pairs in zip(SPLITS, (train, valid, test), strict=True)}
        src_vocab = Vocab.build((s for s, _ in splits["train"]), min_freq, reserved_tokens)
        tgt_vocab = Vocab.build((t for _, t in splits["train"]), min_freq, reserved_tokens)
        references = {k: build_references(v) for k, v in splits.items()}
        return cls(splits["train"], splits["valid"], splits["test"], src_vocab, tgt_vocab, references, tokenizer,
                   name, dict(info or {}))

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s}={len(getattr(self, s))}" for s in SPLITS)
        # Three short lines: a printed dataset fits the book's column.
        return (f"Seq2SeqData(name={self.name!r}, tokenizer={self.tokenizer!r},\n"
                f"            {sizes},\n"
                f"            src_vocab={len(self.src_vocab)}, tgt_vocab={len(self.tgt_vocab)})")

    def to_text(self, tokens: Sequence[str], side: Literal["src", "tgt"] = "tgt") -> str:
        """Join tokens into text: characters without spaces, words with one space, subwords by the tokenizer.

        Examples:
            >>> data = load_dates(n_examples=10, locales=("en_US",), years=(2000, 2009), seed=0)
            >>> data.to_text(["2", "0", "0", "1"]), data.tokenizer
            ('2001', 'char')
        """
        if side not in ("src", "tgt"):
            raise ValueError(f'side must be "src" or "tgt", got {side!r}')
        if self.tokenizer == "subword":
            return getattr(self, f"{side}_tokenizer").detokenize(tokens)
        return ("" if self.tokenizer == "char" else " ").join(tokens)

    def split(self, split: str) -> list[Pair]:
        """The pairs of ``split`` (``"train"``, ``"valid"`` or ``"test"``).

        Examples:
            >>> data = Seq2SeqData.from_splits([(["a"], ["x"])], [(["b"], ["y"])], [], tokenizer="word", name="toy")
            >>> data.split("valid")
            [(['b'], ['y'])]
        """
        if split not in SPLITS:
            raise ValueError(f'split must be "train", "valid" or "test", got {split!r}')
        return getattr(self, split)

    def encode_sources(self, token_lists: Sequence[Sequence[str]],
                       max_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode source token lists as the encoder expects them (``x <eos>``, padded).

        Returns:
            ``src`` (B, S) long and ``src_valid_lens`` (B,) long.

        Examples:
            >>> data = Seq2SeqData.from_splits([(["a", "b"], ["x"])], [], [], tokenizer="word", name="toy")
            >>> data.encode_sources([["a"], ["a", "b", "c"]])  # "c" is not in the vocabulary: <unk> = 3
            (tensor([[4, 2, 0, 0],
                    [4, 5, 3, 2]]), tensor([2, 4]))
        """
        return encode_sources(token_lists, self.src_vocab, max_len)

    def batches(self, split: str, batch_size: int, shuffle: bool = False, generator: torch.Generator | None = None,
                max_len: int | None = None) -> Iterator[Batch]:
        """Iterate over a split in padded batches (the last one may be smaller).

        Args:
            split: ``"train"``, ``"valid"`` or ``"test"``.
            batch_size: pairs per batch.
            shuffle: visit the pairs in the order of ``torch.randperm(n, generator=generator)``
                (the global torch RNG when ``generator`` is None); otherwise in split order.
            generator: makes the shuffled order reproducible.
            max_len: cut longer pairs (see :func:`make_batch`); each batch reports ``n_truncated``.

        Yields:
            :class:`Batch` objects on the CPU.

        Raises:
            ValueError: unknown split, ``batch_size < 1`` or ``max_len < 2`` (checked at the call,
                not at the first ``next``).

        Examples:
            >>> data = load_dates(n_examples=50, locales=("en_US",), years=(2000, 2009), seed=0)
            >>> g = torch.Generator().manual_seed(0)
            >>> batches = list(data.batches("train", batch_size=16, shuffle=True, generator=g))
            >>> [len(b) for b in batches]  # 40 training pairs: the last batch is smaller
            [16, 16, 8]
            >>> batches[0].tgt_out.shape  # (B, T): "YYYY-MM-DD" and <eos>
            torch.Size([16, 11])
        """
        pairs = self.split(split)
        batch_size = check_positive_int(batch_size, "batch_size")
        max_len = check_max_len(max_len)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        if shuffle:
            order = torch.randperm(len(pairs), generator=generator).tolist()
        else:
            order = list(range(len(pairs)))
        return self._iterate(pairs, order, batch_size, max_len)

    def _iterate(self, pairs: list[Pair], order: list[int], batch_size: int, max_len: int | None) -> Iterator[Batch]:
        for start in range(0, len(order), batch_size):
            chunk = [pairs[i] for i in order[start:start + batch_size]]
            yield make_batch(chunk, self.src_vocab, self.tgt_vocab, max_len)
