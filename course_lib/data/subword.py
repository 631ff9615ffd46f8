"""Subword vocabularies: byte-level byte-pair encoding (BPE) learned with Hugging Face ``tokenizers``.

A word-level vocabulary (:class:`course_lib.data.Vocab`, the chapters' choice) maps every word it
did not keep to ``<unk>``. BPE (Sennrich et al., 2016) starts from the 256 byte values and merges,
again and again, the most frequent adjacent pair of symbols of the training text into a new symbol,
until the vocabulary has ``vocab_size`` entries. Frequent words end up as one symbol, rare words are
spelled from pieces, and since every byte is a symbol *any* text can be encoded: there is no
``<unk>``. Byte-level pieces show each byte as a printable character and mark a preceding space with
``Ġ`` (``"Je suis fatigué."`` -> ``["Je", "Ġsuis", "ĠfatiguÃ©", "."]``, ``Ã©`` being the two UTF-8
bytes of ``é``), so joining the pieces and mapping the bytes back restores the text exactly:
detokenisation is lossless.

:class:`SubwordTokenizer` wraps one trained ``tokenizers.Tokenizer`` (one per language);
:func:`load_fra_eng_subwords` builds the English -> French data set with them, on the *same* split as
the word-level :func:`course_lib.data.load_fra_eng` (grouped by the normalised English sentence), so
that the two are scored on the same held-out sentences.
"""

from __future__ import annotations

import json
import os
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from .._validation import check_bool, check_int, check_positive_int, check_probability
from .dataset import Pair, Seq2SeqData, build_references, split_by_source
from .translation import fra_eng_file, normalize_text, read_sentence_pairs, tokenize_words
from .vocab import SPECIAL_TOKENS, Vocab

__all__ = ["SubwordTokenizer", "bpe_merge_step", "clean_text", "load_fra_eng_subwords"]


def clean_text(text: str) -> str:
    """NFC, every run of space characters (no-break and thin spaces included) -> one ``" "``, stripped.

    French typography puts a narrow no-break space (U+202F) before ``!`` and ``?``; the corpus uses it
    on some lines and a plain space on others. One space everywhere keeps both sides consistent.

    Raises:
        TypeError: ``text`` is not a str.

    Examples:
        >>> clean_text(" Va\\u202f!  Cours\\u00a0!\\n")
        'Va ! Cours !'
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    text = unicodedata.normalize("NFC", text)
    chars = [" " if c.isspace() or unicodedata.category(c) == "Zs" else c for c in text]
    return " ".join("".join(chars).split())


def _check_text(text: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return text


def bpe_merge_step(words: Mapping[tuple[str, ...], int]) -> tuple[tuple[str, str], dict[tuple[str, ...], int]] | None:
    """One step of byte-pair encoding on a word list: the most frequent adjacent pair becomes one symbol.

    The algorithm :meth:`SubwordTokenizer.train` runs (through Hugging Face ``tokenizers``) on the bytes of
    the training text, written out on a small word list for the book's figure. A pair's count is the sum,
    over the words, of the word's count times the number of positions where the pair occurs in it; the
    most frequent pair (on a tie, the one met first reading the words in order, each from left to right)
    is merged in every word, its occurrences replaced from left to right.

    Args:
        words: ``{symbols: count}``, each word a tuple of symbols (one character each at the start).

    Returns:
        ``((a, b), new_words)``: the merged pair and the words with ``a b`` written as one symbol ``a + b``
        (the argument is not changed), or ``None`` when no word has two symbols left.

    Raises:
        TypeError: ``words`` is not a mapping of tuples of str to int.
        ValueError: a count is not positive.

    Examples:
        >>> bpe_merge_step({("l", "o", "w"): 5, ("l", "o", "w", "e", "r"): 2, ("n", "e", "w"): 3})
        (('l', 'o'), {('lo', 'w'): 5, ('lo', 'w', 'e', 'r'): 2, ('n', 'e', 'w'): 3})
    """
    if not isinstance(words, Mapping):
        raise TypeError(f"words must be a mapping {{tuple of symbols: count}}, got {type(words).__name__}")
    for word, count in words.items():
        if not isinstance(word, tuple) or not all(isinstance(symbol, str) for symbol in word):
            raise TypeError(f"each word must be a tuple of str symbols, got {word!r}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"each count must be a positive int, got {count!r} for {word!r}")
    pairs: Counter[tuple[str, str]] = Counter()
    for word, count in words.items():
        for pair in zip(word, word[1:], strict=False):
            pairs[pair] += count
    if not pairs:
        return None
    best = max(pairs, key=pairs.__getitem__)  # max keeps the first of equal counts: the pair met first
    merged: dict[tuple[str, ...], int] = {}
    for word, count in words.items():
        out, i = [], 0
        while i < len(word):
            if word[i:i + 2] == best:
                out.append(best[0] + best[1])
                i += 2
            else:
                out.append(word[i])
                i += 1
        merged[tuple(out)] = merged.get(tuple(out), 0) + count
    return best, merged


class SubwordTokenizer:
    """A byte-level BPE tokenizer: text -> subword tokens -> text.

    Build one with :meth:`train`; :meth:`to_json` / :meth:`from_json` store and restore it (the
    checkpoint keeps the JSON string). Ids ``0..3`` are ``<pad> <bos> <eos> <unk>`` as in every
    :class:`course_lib.data.Vocab`; ``<unk>`` is reserved but never produced.

    Sentences are cleaned with :func:`clean_text` before they are split (every run of spaces becomes one
    space). A tokenizer trained with ``keep_whitespace=True`` (for source code, chapter 12) takes text as
    it is, newlines and indentation included, and only puts it in Unicode NFC; it records that as the
    ``tokenizers`` normalizer of its JSON, so :meth:`from_json` restores the same behaviour.

    Args:
        tokenizer: a trained ``tokenizers.Tokenizer`` with a byte-level pre-tokenizer and decoder.

    Examples:
        >>> tok = SubwordTokenizer.train(["Je suis fatigué.", "Je suis là.", "Tu es fatigué ?"] * 5, vocab_size=300)
        >>> tok  # fewer than 300: no pair was left to merge
        SubwordTokenizer(byte-level BPE, vocab_size=280)
        >>> tok("Je suis fatigué.")  # Ġ marks a space before, Ã© are the two bytes of é
        ['Je', 'Ġsuis', 'ĠfatiguÃ©', '.']
        >>> tok.detokenize(tok("Tu es là ?"))  # lossless, words never seen included
        'Tu es là ?'
    """

    def __init__(self, tokenizer) -> None:
        from tokenizers import Tokenizer

        if not isinstance(tokenizer, Tokenizer):
            raise TypeError(f"tokenizer must be a tokenizers.Tokenizer, got {type(tokenizer).__name__}")
        vocab = tokenizer.get_vocab()
        tokens = [None] * len(vocab)
        for token, idx in vocab.items():
            if not 0 <= idx < len(tokens) or tokens[idx] is not None:
                raise ValueError(f"the tokenizer's ids are not 0..{len(vocab) - 1} without gaps")
            tokens[idx] = token
        if tuple(tokens[:4]) != SPECIAL_TOKENS:
            raise ValueError(f"the tokenizer's first ids must be {list(SPECIAL_TOKENS)}, got {tokens[:4]}")
        # A text that spells "<bos>" (or another special token) is text: encoded as its characters, never
        # matched as the marker, which detokenize would drop (on a copy: the caller's tokenizer is left as it was).
        if not tokenizer.encode_special_tokens:
            tokenizer = Tokenizer.from_str(tokenizer.to_str())
            tokenizer.encode_special_tokens = True
        self._tokenizer = tokenizer
        self.vocab = Vocab(tokens)
        self._prepare = _check_text if self.keeps_whitespace else clean_text

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 2000, min_frequency: int = 2, *,
              keep_whitespace: bool = False) -> SubwordTokenizer:
        """Learn BPE merges on ``texts`` until the vocabulary has ``vocab_size`` tokens (or no pair is left to merge).

        Args:
            texts: training sentences (cleaned with :func:`clean_text` first), or documents kept as they are
                with ``keep_whitespace``.
            vocab_size: the vocabulary size, specials and the 256 byte symbols included (>= 260).
            min_frequency: a pair seen fewer times is never merged.
            keep_whitespace: keep every space, tab and newline (source code); only NFC is applied.

        Returns:
            The trained tokenizer (deterministic: the same texts give the same vocabulary).

        Examples:
            >>> tok = SubwordTokenizer.train(["low lower lowest"] * 3, vocab_size=262)  # 260 + two merges: lo, low
            >>> len(tok), tok.tokenize("lowest")
            (262, ['low', 'e', 's', 't'])
            >>> code = SubwordTokenizer.train(["def f(x):\\n    return x\\n"] * 3, 300, keep_whitespace=True)
            >>> code.tokenize("def f(x):\\n    return x\\n")  # Ċ is the newline, Ġ a space
            ['def', 'Ġf', '(', 'x', '):', 'ĊĠĠĠ', 'Ġreturn', 'Ġx', 'Ċ']
            >>> code.detokenize(code.tokenize("def g():\\n    pass\\n"))  # every space and newline restored
            'def g():\\n    pass\\n'
        """
        from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

        vocab_size = check_positive_int(vocab_size, "vocab_size")
        min_frequency = check_positive_int(min_frequency, "min_frequency")
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        if vocab_size < len(SPECIAL_TOKENS) + len(alphabet):
            raise ValueError(f"vocab_size must be at least {len(SPECIAL_TOKENS) + len(alphabet)} (4 special tokens "
                             f"and the 256 bytes), got {vocab_size}")
        keep_whitespace = check_bool(keep_whitespace, "keep_whitespace")
        tokenizer = Tokenizer(models.BPE())
        if keep_whitespace:
            tokenizer.normalizer = normalizers.NFC()
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                      special_tokens=list(SPECIAL_TOKENS), initial_alphabet=alphabet,
                                      show_progress=False)
        prepare = _check_text if keep_whitespace else clean_text
        tokenizer.train_from_iterator((prepare(t) for t in texts), trainer=trainer)
        return cls(tokenizer)

    def __len__(self) -> int:
        return len(self.vocab)

    def __repr__(self) -> str:
        kept = ", whitespace kept" if self.keeps_whitespace else ""
        return f"SubwordTokenizer(byte-level BPE, vocab_size={len(self)}{kept})"

    @property
    def keeps_whitespace(self) -> bool:
        """Whether text is taken as it is (``train(..., keep_whitespace=True)``) rather than cleaned."""
        return self._tokenizer.normalizer is not None

    def __call__(self, text: str) -> list[str]:
        """Same as :meth:`tokenize` (so a tokenizer can be passed where a function str -> tokens is expected)."""
        return self.tokenize(text)

    def tokenize(self, text: str) -> list[str]:
        """The subword tokens of ``text`` after :func:`clean_text` (as it is with ``keep_whitespace``); no ``<unk>``."""
        return self._tokenizer.encode(self._prepare(text), add_special_tokens=False).tokens

    def detokenize(self, tokens: Sequence[str]) -> str:
        """Join subword tokens back into text (special tokens dropped): the inverse of :meth:`tokenize`."""
        if isinstance(tokens, str):
            raise TypeError("tokens must be a list of subword tokens, got a single str")
        text = self._tokenizer.decoder.decode([t for t in tokens if t not in SPECIAL_TOKENS])
        return text if self.keeps_whitespace else text.strip()

    def to_json(self) -> str:
        """The whole tokenizer (merges, vocabulary, pre-tokenizer, decoder) as a JSON string.

        Examples:
            >>> text = SubwordTokenizer.train(["low lower lowest"] * 3, vocab_size=262).to_json()
            >>> json.loads(text)["model"]["type"]
            'BPE'
        """
        return self._tokenizer.to_str()

    @classmethod
    def from_json(cls, text: str) -> SubwordTokenizer:
        """Rebuild a tokenizer from :meth:`to_json`'s output.

        Raises:
            TypeError: ``text`` is not a str.
            ValueError: ``text`` is not a tokenizer's JSON.

        Examples:
            >>> tok = SubwordTokenizer.train(["low lower lowest"] * 3, vocab_size=262)
            >>> again = SubwordTokenizer.from_json(tok.to_json())
            >>> again.vocab == tok.vocab, again.tokenize("lower") == tok.tokenize("lower")
            (True, True)
        """
        from tokenizers import Tokenizer

        if not isinstance(text, str):
            raise TypeError(f"text must be a str (from SubwordTokenizer.to_json), got {type(text).__name__}")
        try:
            json.loads(text)
            tokenizer = Tokenizer.from_str(text)
        except Exception as e:  # json.JSONDecodeError, or the Rust side's Exception
            raise ValueError(f"not a tokenizer's JSON: {str(e)[:200]}") from e
        return cls(tokenizer)


def load_fra_eng_subwords(path: str | os.PathLike[str] | None = None, vocab_size: int = 2000,
                          seed: int = 0, valid_frac: float = 0.1, test_frac: float = 0.1,
                          max_examples: int | None = None, download: bool = False) -> Seq2SeqData:
    """English -> French pairs as subword tokens (byte-level BPE), on the word-level loader's split.

    Steps: read the pairs (:func:`course_lib.data.read_sentence_pairs`), keep the first
    ``max_examples``, split the distinct *normalised* English sentences as
    :func:`course_lib.data.load_fra_eng` does (same seed, same fractions: the same held-out
    sentences), learn one BPE tokenizer per language on the training split, and tokenise both sides
    of every pair (case and punctuation kept, spaces cleaned by :func:`clean_text`).

    Args:
        path: the file; None looks up ``fra-eng/fra.txt`` in :func:`course_lib.data.data_dir`.
        vocab_size: the size of each language's vocabulary.
        seed: the split's seed.
        valid_frac, test_frac: fractions of the distinct English sentences.
        max_examples: read only the first that many pairs; None reads all.
        download: opt-in download when the data folder has no copy (see :func:`course_lib.data.fra_eng_file`).

    Returns:
        A :class:`Seq2SeqData` with ``tokenizer="subword"``; ``src_tokenizer`` and ``tgt_tokenizer``
        hold the two :class:`SubwordTokenizer` objects, and ``src_vocab``/``tgt_vocab`` are their
        vocabularies.

    Raises:
        DataNotFoundError: the file is missing (the message says how to point at it).
        ValueError: a bad count or fraction, or no usable pair.

    Examples:
        With a small file of the course file's format (the same split as ``load_fra_eng`` gives it):

        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     file = Path(tmp) / "fra.txt"
        ...     _ = file.write_text("Go.\\tVa !\\nHi.\\tSalut !\\nRun!\\tCours !\\nRun!\\tCourez !\\nWho?\\tQui ?\\n"
        ...                         "Wow!\\tÇa alors !\\n")
        ...     data = load_fra_eng_subwords(file, vocab_size=300, valid_frac=0.2, test_frac=0.2)
        >>> data
        Seq2SeqData(name='fra-eng', tokenizer='subword',
                    train=3, valid=1, test=2,
                    src_vocab=260, tgt_vocab=261)
        >>> src, tgt = data.train[0]
        >>> tgt, data.to_text(tgt)
        (['V', 'a', 'Ġ!'], 'Va !')
    """
    if max_examples is not None:
        max_examples = check_positive_int(max_examples, "max_examples")
    seed = check_int(seed, "seed")
    valid_frac, test_frac = check_probability(valid_frac, "valid_frac"), check_probability(test_frac, "test_frac")
    file = fra_eng_file(path, download)
    raw, n_malformed = read_sentence_pairs(file)
    if max_examples is not None:
        raw = raw[:max_examples]
    if not raw:
        raise ValueError(f"{file} gave no usable sentence pair")
    # Split on the word-level key, carrying the raw texts along as the "target".
    keyed = [(tokenize_words(normalize_text(en)), [clean_text(en), clean_text(fr)]) for en, fr in raw]
    split_raw = split_by_source(keyed, valid_frac, test_frac, seed)
    train_texts = split_raw[0]
    src_tok = SubwordTokenizer.train([en for _, (en, _) in train_texts], vocab_size)
    tgt_tok = SubwordTokenizer.train([fr for _, (_, fr) in train_texts], vocab_size)
    splits: list[list[Pair]] = [[(src_tok.tokenize(en), tgt_tok.tokenize(fr)) for _, (en, fr) in part]
                                for part in split_raw]
    references = {name: build_references(part) for name, part in zip(("train", "valid", "test"), splits, strict=True)}
    info = {"path": str(file), "n_lines": len(raw) + n_malformed, "n_malformed": n_malformed, "n_pairs": len(raw),
            "seed": seed, "vocab_size": vocab_size,
            "n_pairs_split": {k: len(v) for k, v in zip(("train", "valid", "test"), splits, strict=True)},
            "n_sources": {k: len(v) for k, v in references.items()}}
    return Seq2SeqData(*splits, src_tok.vocab, tgt_tok.vocab, references, "subword", "fra-eng", info,
                       src_tokenizer=src_tok, tgt_tokenizer=tgt_tok)
