"""The English -> French sentence pairs of Tatoeba (the ``fra-eng`` file of Dive into Deep Learning).

The file has one pair a line, ``English<TAB>French[<TAB>attribution...]``. Words are the tokens,
after D2L's normalisation (lower case, a space before ``, . ! ?``). The splits are grouped by English
sentence: many sentences have several translations, and all of them stay in one split.
"""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

from .._validation import check_int, check_positive_int, check_probability
from .dataset import Pair, Seq2SeqData, split_by_source
from .paths import DataNotFoundError, find_data_file

__all__ = ["FRA_ENG_COURSE_PAIRS", "FRA_ENG_FILE", "SENTENCE_FINAL", "fra_eng_file", "load_fra_eng", "normalize_text",
           "read_sentence_pairs", "tokenize_words"]

FRA_ENG_FILE = "fra-eng/fra.txt"
#: The pairs of the course's copy of the file (the beginning of the Tatoeba export, its first 18 066 lines, the
#: last one cut): ``load_fra_eng(download=True, max_examples=FRA_ENG_COURSE_PAIRS)`` reads the book's data from
#: the full download (section 8.1 in Colab).
FRA_ENG_COURSE_PAIRS = 18065
# What a complete French (or English) sentence of the corpus ends with.
SENTENCE_FINAL = (".", "!", "?", "…", "»", '"', "”")


def _is_space(char: str) -> bool:
    # Zs covers the no-break spaces French typography puts before ! ? : (U+00A0, U+202F, U+2009).
    return char.isspace() or unicodedata.category(char) == "Zs"


def normalize_text(text: str) -> str:
    """D2L's normalisation: lower case, every space character -> ``" "``, a space before ``, . ! ?``.

    ``"Va\\u202f!"`` -> ``"va !"``, ``"Hi."`` -> ``"hi ."``. D2L replaces U+202F and U+00A0; every
    Unicode space separator (also U+2009, used in the French side) is replaced here, as are tabs and
    newlines.

    Raises:
        TypeError: ``text`` is not a str.

    Examples:
        >>> normalize_text("Va\\u202f!"), normalize_text("Hi, Tom.")
        ('va !', 'hi , tom .')
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    text = "".join(" " if _is_space(c) else c for c in text).lower()
    out = []
    for i, c in enumerate(text):
        if c in ",.!?" and i > 0 and text[i - 1] != " ":
            out.append(" ")
        out.append(c)
    return "".join(out)


def tokenize_words(text: str) -> list[str]:
    """Split normalised text into words at spaces (runs of spaces give no empty tokens).

    Raises:
        TypeError: ``text`` is not a str.

    Examples:
        >>> tokenize_words(normalize_text("Hi,  Tom."))
        ['hi', ',', 'tom', '.']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return text.split()


def read_sentence_pairs(path: str | os.PathLike[str]) -> tuple[list[tuple[str, str]], int]:
    """Read ``source<TAB>target[<TAB>...]`` lines; drop and count the malformed ones.

    A line is malformed (dropped, counted) when it is blank, has no tab, or has an empty side after
    stripping spaces. Columns after the second (Tatoeba attribution) are ignored. The last non-blank
    line of the file is also dropped when its target does not end with sentence-final punctuation
    (:data:`SENTENCE_FINAL`): an export cut at a size limit ends in the middle of a sentence, as
    the shared file does (``"They did it again.\\tIls l'ont "``, followed by a newline). Earlier lines
    without final punctuation (``"La réponse est : oui"``) are kept: only the end of a file gets cut.

    Args:
        path: a UTF-8 text file (a byte-order mark is allowed).

    Returns:
        ``(pairs, n_malformed)``: the ``(source, target)`` strings, stripped, in file order, and the
        number of dropped lines. ``len(pairs) + n_malformed`` is the number of lines.

    Raises:
        DataNotFoundError: ``path`` does not exist.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     file = Path(tmp) / "pairs.txt"
        ...     _ = file.write_text("Go.\\tVa !\\tCC-BY\\nno tab here\\nHi.\\tSalut !\\n"
        ...                         "They did it again.\\tIls l'ont \\n")
        ...     read_sentence_pairs(file)  # the line without a tab and the cut last line are dropped
        ([('Go.', 'Va !'), ('Hi.', 'Salut !')], 2)
    """
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"the sentence-pair file {path} does not exist")
    lines = path.read_text(encoding="utf-8-sig").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the text after the final newline is not a line
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    pairs: list[tuple[str, str]] = []
    n_malformed = 0
    for i, line in enumerate(lines):
        cols = line.rstrip("\r").split("\t")
        src, tgt = (cols[0].strip(), cols[1].strip()) if len(cols) >= 2 else ("", "")
        if not src or not tgt or (i == last and not tgt.endswith(SENTENCE_FINAL)):
            n_malformed += 1
            continue
        pairs.append((src, tgt))
    return pairs, n_malformed


def fra_eng_file(path: str | os.PathLike[str] | None = None, download: bool = False) -> Path:
    """The English-French file: ``path``, else ``fra-eng/fra.txt`` in the data folder, else (opt-in) downloaded.

    Args:
        path: an explicit file (returned as is).
        download: when the data folder has no copy, fetch D2L's archive
            (:func:`course_lib.data.download.download_fra_eng`: checksum verified, cached, the place
            printed). Without it nothing is ever downloaded.

    Raises:
        DataNotFoundError: no copy and ``download=False`` (the message says how to get one).

    Examples:
        >>> import tempfile
        >>> from unittest import mock
        >>> fra_eng_file("my/fra.txt").as_posix()  # an explicit path is returned as is
        'my/fra.txt'
        >>> with tempfile.TemporaryDirectory() as tmp, mock.patch.dict(os.environ, {"COURSE_DATA_DIR": tmp}):
        ...     try:
        ...         fra_eng_file()  # an empty data folder, and no download=True
        ...     except DataNotFoundError as e:
        ...         print("download=True" in str(e))
        True
    """
    if path is not None:
        return Path(path)
    try:
        return find_data_file(FRA_ENG_FILE)
    except DataNotFoundError as e:
        from .download import FRA_ENG_URL, cache_dir, download_fra_eng

        if not download:
            raise DataNotFoundError(f"{e}; or pass download=True to fetch it ({FRA_ENG_URL}, checksum verified) "
                                    f"into {cache_dir()}") from None
        return download_fra_eng()


def load_fra_eng(path: str | os.PathLike[str] | None = None, max_tokens: int | None = None, min_freq: int = 2,
                 seed: int = 0, valid_frac: float = 0.1, test_frac: float = 0.1,
                 max_examples: int | None = None, download: bool = False) -> Seq2SeqData:
    """English -> French word-level translation pairs, split by English sentence.

    Steps: read the pairs (:func:`read_sentence_pairs`), keep the first ``max_examples`` (the file
    is sorted by length, so these are the shortest), normalise and tokenise both sides, drop pairs
    with more than ``max_tokens`` words on either side, split the distinct English sentences
    80/10/10 (:func:`course_lib.data.split_by_source`), build both vocabularies on the training
    split (words seen fewer than ``min_freq`` times -> ``<unk>``).

    Args:
        path: the file; None looks up ``fra-eng/fra.txt`` in :func:`course_lib.data.data_dir`.
        max_tokens: the longest side kept, in words (``<eos>`` not counted); None keeps all.
        min_freq: vocabulary threshold (counted on the training split).
        seed: the split's seed.
        valid_frac, test_frac: fractions of the distinct English sentences.
        max_examples: read only the first that many pairs; None reads all.
        download: with ``path=None`` and no copy in the data folder, download D2L's archive (see
            :func:`fra_eng_file`); off by default: nothing is downloaded unless asked.

    Returns:
        A word-level :class:`Seq2SeqData` named ``"fra-eng"``; ``info`` holds ``path, n_lines,
        n_malformed, n_pairs, n_too_long, n_sources`` (distinct sources per split), ``n_pairs_split``.

    Raises:
        DataNotFoundError: the file is missing (the message says how to point at it).
        ValueError: a bad count or fraction, or no usable pair left.

    Examples:
        With a small file of the same format (the course's file is read the same way):

        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     file = Path(tmp) / "fra.txt"
        ...     _ = file.write_text("Go.\\tVa !\\nHi.\\tSalut !\\nRun!\\tCours !\\nRun!\\tCourez !\\nWho?\\tQui ?\\n"
        ...                         "Wow!\\tÇa alors !\\n")
        ...     data = load_fra_eng(file, min_freq=1, valid_frac=0.2, test_frac=0.2)
        >>> data
        Seq2SeqData(name='fra-eng', tokenizer='word',
                    train=3, valid=1, test=2,
                    src_vocab=10, tgt_vocab=10)
        >>> data.train[0], data.references["test"][("run", "!")]  # one source, every translation in one split
        ((['go', '.'], ['va', '!']), [['cours', '!'], ['courez', '!']])
    """
    if max_tokens is not None:
        max_tokens = check_positive_int(max_tokens, "max_tokens")
    if max_examples is not None:
        max_examples = check_positive_int(max_examples, "max_examples")
    min_freq = check_positive_int(min_freq, "min_freq")
    seed = check_int(seed, "seed")
    valid_frac, test_frac = check_probability(valid_frac, "valid_frac"), check_probability(test_frac, "test_frac")
    file = fra_eng_file(path, download)
    raw, n_malformed = read_sentence_pairs(file)
    n_lines = len(raw) + n_malformed
    if max_examples is not None:
        raw = raw[:max_examples]
    pairs: list[Pair] = [(tokenize_words(normalize_text(en)), tokenize_words(normalize_text(fr))) for en, fr in raw]
    n_read = len(pairs)
    if max_tokens is not None:
        pairs = [(s, t) for s, t in pairs if len(s) <= max_tokens and len(t) <= max_tokens]
    if not pairs:
        raise ValueError(f"{file} gave no usable sentence pair ({n_lines} lines, {n_malformed} malformed, "
                         f"max_tokens={max_tokens})")
    train, valid, test = split_by_source(pairs, valid_frac, test_frac, seed)
    info = {"path": str(file), "n_lines": n_lines, "n_malformed": n_malformed, "n_pairs": len(pairs),
            "n_too_long": n_read - len(pairs), "seed": seed, "max_tokens": max_tokens, "min_freq": min_freq,
            "n_pairs_split": {"train": len(train), "valid": len(valid), "test": len(test)}}
    data = Seq2SeqData.from_splits(train, valid, test, tokenizer="word", name="fra-eng", min_freq=min_freq,
                                   info=info)
    data.info["n_sources"] = {k: len(v) for k, v in data.references.items()}
    return data
