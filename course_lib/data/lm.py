r"""A language-modelling corpus: sentences joined into one token stream, read in windows (chapter 11).

A decoder-only language model is trained on one long stream of tokens, not on pairs. Here the stream is
made of sentences (the English side of the course's English -> French file, or any list of sentences):

1. the distinct sentences (after :func:`course_lib.data.clean_text`) are shuffled with a seed (the file
   is sorted by length) and split by sentence into train / valid / test, so that no held-out sentence
   was seen in training;
2. a byte-level BPE tokenizer (:class:`course_lib.data.SubwordTokenizer`, chapter 8.1) is learned on the
   training sentences;
3. each split becomes one stream ``s_1 <eos> s_2 <eos> ...``: every sentence's tokens followed by
   ``<eos>``, the separator a model learns to predict at the end of a sentence (as GPT's
   ``<|endoftext|>`` separates documents).

A model reads a stream in **windows** of ``L + 1`` contiguous tokens: the first ``L`` are its input,
the last ``L`` (shifted by one) the targets, so position ``t`` of a window predicts token ``t + 1`` from
tokens ``0..t``. :meth:`LMData.windows` cuts a stream into non-overlapping windows starting at an
offset; training draws a new random offset every epoch (so a token does not always sit at the same
position of its window) and visits the windows in a random order.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .._validation import check_int, check_non_negative_int, check_positive_int, check_probability
from .paths import DataNotFoundError
from .subword import SubwordTokenizer, clean_text
from .translation import fra_eng_file

__all__ = ["LMBatch", "LMData", "english_sentences", "generated_sentences", "load_english_lm", "read_text_lines"]

_SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class LMBatch:
    """A batch of windows: ``inputs`` (B, L) and ``targets`` (B, L), the same tokens shifted by one.

    Examples:
        >>> stream = torch.arange(10)
        >>> window = stream[2:2 + 4 + 1]  # L = 4: five contiguous tokens
        >>> batch = LMBatch(window[None, :-1], window[None, 1:])
        >>> batch.inputs.tolist(), batch.targets.tolist(), batch.n_tokens
        ([[2, 3, 4, 5]], [[3, 4, 5, 6]], 4)
    """

    inputs: torch.Tensor
    targets: torch.Tensor

    @property
    def n_tokens(self) -> int:
        """B * L, the predicted tokens."""
        return self.targets.numel()

    def to(self, device: torch.device | str) -> LMBatch:
        """The batch on ``device``."""
        return LMBatch(self.inputs.to(device), self.targets.to(device))


def read_text_lines(path: str | os.PathLike[str]) -> list[str]:
    """The non-blank lines of a UTF-8 text file, each cut at its first tab and cleaned (:func:`clean_text`).

    For the English -> French file (``English<TAB>French[<TAB>...]``) these are the English sentences, in file
    order and with repetitions; any plain text file (one sentence or paragraph a line) works as well.

    Raises:
        DataNotFoundError: ``path`` is not a file.

    Examples:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "pairs.txt"
        >>> _ = path.write_text("Go.\\tVa !\\tCC-BY\\n\\nHi.\\tSalut !\\nGo.\\tMarche.\\n", encoding="utf-8")
        >>> read_text_lines(path)  # blank lines dropped, repetitions kept
        ['Go.', 'Hi.', 'Go.']
    """
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"the text file {path} does not exist")
    lines = (line.split("\t", 1)[0] for line in path.read_text(encoding="utf-8-sig").splitlines())
    return [text for text in (clean_text(line) for line in lines) if text]


def english_sentences(path: str | os.PathLike[str] | None = None, max_examples: int | None = None,
                      download: bool = False) -> list[str]:
    """The English side of the course's English -> French file, one sentence per line, in file order.

    Args:
        path: the file; None looks up ``fra-eng/fra.txt`` in :func:`course_lib.data.data_dir`.
        max_examples: read only the first that many lines (the file is sorted by length).
        download: opt-in download when the data folder has no copy (:func:`course_lib.data.fra_eng_file`).

    Raises:
        DataNotFoundError: no file (the message says how to point at one).

    Examples:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "fra.txt"
        >>> _ = path.write_text("Go.\\tVa !\\nHi.\\tSalut !\\nRun!\\tCours !\\n", encoding="utf-8")
        >>> english_sentences(path), english_sentences(path, max_examples=2)
        (['Go.', 'Hi.', 'Run!'], ['Go.', 'Hi.'])
    """
    if max_examples is not None:
        max_examples = check_positive_int(max_examples, "max_examples")
    lines = read_text_lines(fra_eng_file(path, download))
    return lines[:max_examples] if max_examples is not None else lines


# A small English grammar for the corpus used where the data file is absent: each subject with its
# person (0: "they like", 1: "she likes"), its form after "Do"/"Does" and its pronoun, so that every
# generated sentence is grammatical.
_SUBJECTS = [("I", 0, "I", "I"), ("You", 0, "you", "you"), ("We", 0, "we", "we"), ("They", 0, "they", "they"),
             ("Tom", 1, "Tom", "he"), ("Mary", 1, "Mary", "she"), ("He", 1, "he", "he"), ("She", 1, "she", "she"),
             ("My brother", 1, "my brother", "he"), ("Your sister", 1, "your sister", "she"),
             ("The teacher", 1, "the teacher", "she"), ("Our neighbours", 0, "our neighbours", "they"),
             ("The children", 0, "the children", "they")]
_BE = ("are", "is")
_DO = ("Do", "Does")
_NOT = ("don't", "doesn't")
_ADJECTIVES = ["happy", "tired", "hungry", "busy", "ready", "late", "right", "wrong", "sick", "angry", "here",
               "at home", "very kind", "still young", "a little shy"]
_VERBS = [("like", "likes"), ("want", "wants"), ("need", "needs"), ("see", "sees"), ("have", "has"),
          ("know", "knows"), ("love", "loves"), ("hate", "hates")]
_PAST = ["found", "lost", "bought", "forgot", "sold", "broke"]
_OBJECTS = ["the book", "a car", "the keys", "my dog", "your cat", "the answer", "some water", "a new job",
            "the money", "this house", "that song", "his name", "her phone", "the truth", "a cup of tea",
            "the red bike", "an umbrella", "the letter"]
_ACTIONS = ["swim", "sing", "dance", "cook", "drive", "read", "win", "sleep", "help", "wait", "leave", "stay"]
_TIMES = ["today", "now", "tomorrow", "every day", "at night", "again", "too", "alone"]


def _generated_sentence(rng: random.Random) -> str:
    subject, person, after_do, pronoun = rng.choice(_SUBJECTS)
    kind = rng.randrange(6)
    if kind == 0:
        return f"{subject} {_BE[person]} {rng.choice(_ADJECTIVES)}."
    if kind == 1:
        verb = rng.choice(_VERBS)[person] if rng.random() < 0.6 else rng.choice(_PAST)
        return f"{subject} {verb} {rng.choice(_OBJECTS)}."
    if kind == 2:
        return f"{subject} {_NOT[person]} {rng.choice(_VERBS)[0]} {rng.choice(_OBJECTS)}."
    if kind == 3:
        return f"{_DO[person]} {after_do} {rng.choice(_ACTIONS)} {rng.choice(_TIMES)}?"
    if kind == 4:
        return f"{subject} {('want', 'wants')[person]} to {rng.choice(_ACTIONS)} {rng.choice(_TIMES)}."
    first, second = rng.sample(_ACTIONS, 2)
    return f"{subject} can {first}, but {pronoun} {_NOT[person]} {second}."


def generated_sentences(n: int = 12000, seed: int = 0) -> list[str]:
    """Short English sentences drawn from a small grammar: a corpus for when the data file is absent.

    Six sentence shapes (``Tom is tired.``, ``My brother likes the red bike.``, ``She doesn't want the
    keys.``, ``Do you swim at night?``, ``We want to cook today.``, ``Mary can sing, but she doesn't
    drive.``)
    over a few dozen words, with subject-verb agreement. It is far more repetitive than real text, so
    a model trained on it reaches a much lower perplexity.

    Args:
        n: how many sentences to draw (repetitions included).
        seed: the draw's seed (the same seed gives the same sentences).

    Returns:
        ``n`` sentences.

    Examples:
        >>> generated_sentences(3, seed=1)
        ['We want to sing at night.', 'Do you sleep alone?', 'Does the teacher cook now?']
    """
    n = check_positive_int(n, "n")
    rng = random.Random(check_int(seed, "seed"))
    return [_generated_sentence(rng) for _ in range(n)]


@dataclass
class LMData:
    """Token streams of a language-modelling corpus and the tokenizer that made them.

    Build one with :meth:`from_sentences` (or :func:`load_english_lm`). Each split is one 1-D stream of
    token ids, sentences each followed by ``<eos>`` (``eos_id``).

    Attributes:
        train, valid, test: (n_split,) ``torch.long`` streams.
        tokenizer: the :class:`course_lib.data.SubwordTokenizer` learned on the training sentences.
        name: where the sentences came from (``"english"``, ``"generated"``, ...).
        info: sentence and token counts, seed, vocabulary size.

    Examples:
        >>> data = LMData.from_sentences(generated_sentences(300), vocab_size=300, seed=0)
        >>> data.vocab_size, data.train.dtype, int(data.train[-1]) == data.eos_id
        (300, torch.int64, True)
        >>> data.windows("train", 8).shape[1]  # windows of L + 1 = 9 tokens
        9
    """

    train: torch.Tensor
    valid: torch.Tensor
    test: torch.Tensor
    tokenizer: SubwordTokenizer
    name: str = "sentences"
    info: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s}={len(self.split(s)):,}" for s in _SPLITS)
        return f"LMData(name={self.name!r}, tokens: {sizes}, vocab_size={self.vocab_size})"

    @property
    def vocab_size(self) -> int:
        """V, the tokenizer's vocabulary size (special tokens included)."""
        return len(self.tokenizer)

    @property
    def eos_id(self) -> int:
        """The id of ``<eos>``, the separator after every sentence."""
        return self.tokenizer.vocab.eos

    @classmethod
    def from_sentences(cls, sentences: Iterable[str], vocab_size: int = 1000, seed: int = 0,
                       valid_frac: float = 0.1, test_frac: float = 0.1, name: str = "sentences") -> LMData:
        """Shuffle and split the distinct sentences, learn BPE on the training ones, and join each split.

        Args:
            sentences: the corpus; cleaned with :func:`course_lib.data.clean_text`, blank ones and
                repetitions dropped (the first occurrence is kept).
            vocab_size: of the byte-level BPE (>= 260: 4 special tokens and the 256 bytes).
            seed: the shuffle's seed.
            valid_frac, test_frac: fractions of the distinct sentences held out (each split keeps at least
                one sentence when the fraction is positive).
            name: recorded in :attr:`name`.

        Returns:
            The streams; ``info`` holds ``n_sentences`` (distinct), ``n_repeated`` (dropped),
            ``sentences`` and ``tokens`` per split, ``seed`` and ``vocab_size``.

        Raises:
            ValueError: fewer than 3 distinct sentences, or fractions that leave no training sentence.
        """
        seed = check_int(seed, "seed")
        valid_frac, test_frac = check_probability(valid_frac, "valid_frac"), check_probability(test_frac, "test_frac")
        if isinstance(sentences, str):
            raise TypeError("sentences must be an iterable of str (one sentence each), got a single str")
        cleaned = [clean_text(s) for s in sentences]
        distinct = list(dict.fromkeys(s for s in cleaned if s))
        if len(distinct) < 3:
            raise ValueError(f"sentences must hold at least 3 distinct non-blank sentences, got {len(distinct)}")
        random.Random(seed).shuffle(distinct)
        n_valid = max(1, round(valid_frac * len(distinct))) if valid_frac > 0 else 0
        n_test = max(1, round(test_frac * len(distinct))) if test_frac > 0 else 0
        if n_valid + n_test >= len(distinct):
            raise ValueError(f"valid_frac={valid_frac} and test_frac={test_frac} leave no training sentence out "
                             f"of {len(distinct)}")
        parts = {"valid": distinct[:n_valid], "test": distinct[n_valid:n_valid + n_test],
                 "train": distinct[n_valid + n_test:]}
        tokenizer = SubwordTokenizer.train(parts["train"], vocab_size)
        streams = _streams(parts, tokenizer)
        info = {"n_sentences": len(distinct), "n_repeated": len(cleaned) - len(distinct), "seed": seed,
                "vocab_size": vocab_size, "sentences": {s: len(parts[s]) for s in _SPLITS},
                "tokens": {s: len(streams[s]) for s in _SPLITS}}
        return cls(streams["train"], streams["valid"], streams["test"], tokenizer, name, info)

    @classmethod
    def from_documents(cls, documents: Mapping[str, str], vocab_size: int = 1000, seed: int = 0,
                       valid_frac: float = 0.1, test_frac: float = 0.1, name: str = "documents") -> LMData:
        """Split whole documents (files) into train / valid / test, learn BPE on the training ones, join each split.

        Unlike :meth:`from_sentences`, the text is kept as it is, every space and newline included (source
        code: the tokenizer is trained with ``keep_whitespace=True``), and the split is by document: a
        held-out document was never seen in training, not even in part. The documents are visited in
        the sorted order of their names, shuffled with ``seed``; each stream is ``doc <eos> doc <eos> ...``.

        Args:
            documents: ``{name: text}``; empty texts are dropped.
            vocab_size: of the byte-level BPE (>= 260).
            seed: the shuffle's seed.
            valid_frac, test_frac: fractions of the documents held out (each split keeps at least one
                document when the fraction is positive).
            name: recorded in :attr:`name`.

        Returns:
            The streams; ``info`` holds ``documents`` (the names of each split, in stream order), ``chars``
            and ``tokens`` per split, ``seed`` and ``vocab_size``.

        Raises:
            TypeError: ``documents`` is not a mapping of str to str.
            ValueError: fewer than 3 non-empty documents, or fractions that leave no training document.

        Examples:
            >>> docs = {f"m{i}.py": f"def f{i}(x):\\n    return x + {i}\\n" for i in range(10)}
            >>> data = LMData.from_documents(docs, vocab_size=280, valid_frac=0.2, test_frac=0.2)
            >>> data.info["documents"]["test"], data.tokenizer.keeps_whitespace
            (['m1.py', 'm5.py'], True)
            >>> data.decode(data.test[:data.test.tolist().index(data.eos_id)])  # the first test document
            'def f1(x):\\n    return x + 1\\n'
        """
        seed = check_int(seed, "seed")
        valid_frac, test_frac = check_probability(valid_frac, "valid_frac"), check_probability(test_frac, "test_frac")
        if not isinstance(documents, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                         for k, v in documents.items()):
            raise TypeError("documents must be a mapping {name: text} of str to str")
        names = sorted(k for k, v in documents.items() if v)
        if len(names) < 3:
            raise ValueError(f"documents must hold at least 3 non-empty documents, got {len(names)}")
        random.Random(seed).shuffle(names)
        n_valid = max(1, round(valid_frac * len(names))) if valid_frac > 0 else 0
        n_test = max(1, round(test_frac * len(names))) if test_frac > 0 else 0
        if n_valid + n_test >= len(names):
            raise ValueError(f"valid_frac={valid_frac} and test_frac={test_frac} leave no training document out "
                             f"of {len(names)}")
        split_names = {"valid": names[:n_valid], "test": names[n_valid:n_valid + n_test],
                       "train": names[n_valid + n_test:]}
        parts = {split: [documents[n] for n in part] for split, part in split_names.items()}
        tokenizer = SubwordTokenizer.train(parts["train"], vocab_size, keep_whitespace=True)
        streams = _streams(parts, tokenizer)
        info = {"documents": {s: split_names[s] for s in _SPLITS}, "seed": seed, "vocab_size": vocab_size,
                "chars": {s: sum(len(t) for t in parts[s]) for s in _SPLITS},
                "tokens": {s: len(streams[s]) for s in _SPLITS}}
        return cls(streams["train"], streams["valid"], streams["test"], tokenizer, name, info)

    def split(self, split: str) -> torch.Tensor:
        """The stream of ``"train"``, ``"valid"`` or ``"test"``."""
        if split not in _SPLITS:
            raise ValueError(f'split must be "train", "valid" or "test", got {split!r}')
        return getattr(self, split)

    def window_starts(self, split: str, length: int, offset: int = 0, stride: int | None = None) -> list[int]:
        """The first positions of the windows of ``length + 1`` tokens from ``offset`` on, ``stride`` apart.

        Window k covers stream positions ``s_k .. s_k + length`` with ``s_k = offset + k * stride``. With the
        default ``stride = length`` the windows do not overlap: consecutive windows share one token (the
        last target of one is the first input of the next), so every token after ``offset`` is predicted
        once. A smaller stride gives overlapping windows (each token is then predicted at several
        positions). A tail too short for a window is left out.

        Raises:
            ValueError: the stream holds no window of this length at this offset.
        """
        length = check_positive_int(length, "length")
        offset = check_non_negative_int(offset, "offset")
        stride = length if stride is None else check_positive_int(stride, "stride")
        n = len(self.split(split))
        if n - 1 - offset < length:
            raise ValueError(f"the {split} stream has {n} tokens: no window of length {length} + 1 from offset "
                             f"{offset}; use a shorter length")
        return list(range(offset, n - length, stride))

    def windows(self, split: str, length: int, offset: int = 0, stride: int | None = None) -> torch.Tensor:
        """The windows of :meth:`window_starts` as rows: (n_windows, length + 1)."""
        starts = self.window_starts(split, length, offset, stride)
        return self._gather(self.split(split), starts, length)

    def batch(self, split: str, starts: Sequence[int], length: int) -> LMBatch:
        """The :class:`LMBatch` of the windows of ``length + 1`` tokens that start at ``starts``."""
        rows = self._gather(self.split(split), starts, length)
        return LMBatch(rows[:, :-1], rows[:, 1:])

    @staticmethod
    def _gather(stream: torch.Tensor, starts: Sequence[int], length: int) -> torch.Tensor:
        index = torch.as_tensor(list(starts), dtype=torch.long)[:, None] + torch.arange(length + 1)
        return stream[index]  # (n_windows, length + 1)

    def batches(self, split: str, batch_size: int, length: int, *, shuffle: bool = False,
                generator: torch.Generator | None = None) -> Iterator[LMBatch]:
        """A pass over a split in batches of windows (the last batch may be smaller).

        Args:
            split: ``"train"``, ``"valid"`` or ``"test"``.
            batch_size: windows per batch.
            length: L, the tokens a window predicts.
            shuffle: start the windows at a random offset in ``[0, L)`` and visit them in a random order
                (both drawn from ``generator``); otherwise offset 0, in stream order.
            generator: makes the shuffle reproducible.

        Yields:
            :class:`LMBatch` objects on the CPU, inputs and targets (b, L).
        """
        batch_size = check_positive_int(batch_size, "batch_size")
        starts = self.epoch_starts(split, length, generator) if shuffle else self.window_starts(split, length)
        for i in range(0, len(starts), batch_size):
            yield self.batch(split, starts[i:i + batch_size], length)

    def epoch_starts(self, split: str, length: int, generator: torch.Generator | None = None) -> list[int]:
        """One training epoch's windows: a random offset in ``[0, L)``, then the windows in a random order."""
        length = check_positive_int(length, "length")
        n = len(self.split(split))
        offset = int(torch.randint(0, min(length, max(n - 1 - length, 0) + 1), (), generator=generator))
        starts = self.window_starts(split, length, offset)
        return [starts[i] for i in torch.randperm(len(starts), generator=generator).tolist()]

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text`` (no ``<eos>`` added)."""
        return self.tokenizer.vocab.encode(self.tokenizer.tokenize(text))

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        """Text from token ids: the sentences between ``<eos>`` separators, joined by one space; documents
        (:meth:`from_documents`) are joined as they are, each ``<eos>`` read as a newline."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        sentences, current = [], []
        for i in ids:
            if i == self.eos_id:
                sentences.append(current)
                current = []
            else:
                current.append(i)
        sentences.append(current)
        texts = (self.tokenizer.detokenize(self.tokenizer.vocab.decode(s)) for s in sentences)
        if self.tokenizer.keeps_whitespace:
            return "\n".join(texts)
        return " ".join(t for t in texts if t)


def _streams(parts: dict[str, list[str]], tokenizer: SubwordTokenizer) -> dict[str, torch.Tensor]:
    """Each split's texts as one stream of token ids, every text followed by ``<eos>``."""
    eos, streams = tokenizer.vocab.eos, {}
    for split, texts in parts.items():
        ids: list[int] = []
        for text in texts:
            ids += tokenizer.vocab.encode(tokenizer.tokenize(text))
            ids.append(eos)
        streams[split] = torch.tensor(ids, dtype=torch.long)
    return streams


def load_english_lm(path: str | os.PathLike[str] | None = None, vocab_size: int = 1000, seed: int = 0,
                    valid_frac: float = 0.1, test_frac: float = 0.1, max_examples: int | None = None,
                    download: bool = False) -> LMData:
    """The English sentences of the course's English -> French file as a language-modelling corpus.

    :func:`english_sentences` then :meth:`LMData.from_sentences` (distinct sentences, shuffled, split,
    byte-level BPE learned on the training split, each split one stream with ``<eos>`` after every
    sentence).

    Args:
        path: the file (its first tab-separated column; any text file, one sentence a line, works); None
            looks up ``fra-eng/fra.txt`` in :func:`course_lib.data.data_dir`.
        vocab_size, seed, valid_frac, test_frac: see :meth:`LMData.from_sentences`.
        max_examples: read only the first that many lines.
        download: opt-in download when there is no copy (see :func:`course_lib.data.fra_eng_file`).

    Returns:
        An :class:`LMData` named ``"english"``; ``info["path"]`` is the file read.

    Raises:
        DataNotFoundError: the file is missing (the message says how to point at it).

    Examples:
        >>> import tempfile, pathlib
        >>> from course_lib.data import generated_sentences
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "fra.txt"
        >>> _ = path.write_text("".join(f"{s}\\tx\\n" for s in generated_sentences(200)), encoding="utf-8")
        >>> data = load_english_lm(path, vocab_size=270)
        >>> data.name, data.vocab_size, data.info["path"] == str(path)
        ('english', 270, True)
    """
    file = fra_eng_file(path, download)
    data = LMData.from_sentences(english_sentences(file, max_examples), vocab_size, seed, valid_frac, test_frac,
                                 name="english")
    data.info["path"] = str(file)
    return data
