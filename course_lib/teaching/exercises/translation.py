"""Checkers for the exercises of chapter 8.1, translating English to French.

The references are computed here independently of :mod:`course_lib.metrics` and
:mod:`course_lib.data`, which the exercises ask the student to rebuild: n-gram counts by
brute-force loops over positions, the brevity penalty from its closed form, the normalised
sentence pairs written out by hand, and a BPE merge the way Sennrich et al.'s reference code does it
(words as space-separated strings, the pair replaced by a regular expression).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from functools import partial

import torch

from ._core import (
    ExerciseFailure,
    book_or_drawn,
    call,
    call_explained,
    checker,
    count_cases,
    expect,
    expect_same,
    integer,
    unchanged,
)

# --- translation.ngram_precision ----------------------------------------------------------------


def _count_at(tokens: Sequence[str], gram: tuple[str, ...]) -> int:
    """How many positions of ``tokens`` start the n-gram ``gram`` (a loop over positions)."""
    n = len(gram)
    return sum(1 for i in range(len(tokens) - n + 1) if tuple(tokens[i:i + n]) == gram)


def _brute_precision(pred: Sequence[str], refs: Sequence[Sequence[str]], n: int) -> tuple[int, int]:
    """(clipped matches, number of predicted n-grams) by brute force."""
    grams = [tuple(pred[i:i + n]) for i in range(len(pred) - n + 1)]
    matches = 0
    for gram in set(grams):
        clip = max(_count_at(ref, gram) for ref in refs)
        matches += min(_count_at(pred, gram), clip)
    return matches, len(grams)


def _as_pair(result: object, case: str) -> tuple[int, int]:
    ok = (isinstance(result, (tuple, list)) and len(result) == 2
          and all(isinstance(v, (int, float)) and not isinstance(v, bool) and float(v) == int(v) for v in result))
    expect(ok, f"{case}: return a pair of integers (matches, total), got {result!r}")
    return int(result[0]), int(result[1])


def _words(text: str) -> list[str]:
    return text.split()


@checker("translation.ngram_precision",
         "ngram_precision(pred_tokens, ref_token_lists, n) -> (clipped matches, total) against several references")
def check_ngram_precision(answer: Callable) -> int:
    def every_occurrence() -> None:
        # Every occurrence counts, not just distinct n-grams.
        pred = _words("the cat the cat")
        got = _as_pair(call(answer, "repeated matching n-grams", pred, [pred], 1), "n = 1")
        expect_same(got, (4, 4), [((2, 4), "'the cat the cat' against itself gave (2, 4): count every occurrence of "
                                           "an n-gram (a collections.Counter), not the distinct ones (a set)")],
                    otherwise=f"'the cat the cat' against itself, n = 1: expected (4, 4), got {got}")

    def clipped() -> None:
        # Papineni et al.'s example: a repeated word must be clipped by its count in one reference.
        pred = _words("the the the the the the the")
        refs = [_words("the cat is on the mat"), _words("there is a cat on the mat")]
        with unchanged("your function changed its arguments; count in new objects", pred, refs):
            got = _as_pair(call(answer, "Papineni's 'the the the ...' example", pred, refs, 1), "n = 1")
        expect(got[1] == 7, f"'the' x 7 has 7 unigrams: the total must be 7, got {got[1]}")
        mistakes = [
            ((7, 7), "'the the the the the the the' got 7 matching unigrams: clip each n-gram's count by the most "
                     "times it occurs in a single reference ('the' occurs twice in the first reference)"),
            ((3, 7), "'the' got 3 matches: that is the sum of its counts over the two references (2 + 1); clip by "
                     "the maximum over the references, not the sum"),
        ]
        expect_same(got, (2, 7), mistakes, otherwise=f"'the' x 7 against the two references: expected (2, 7), got "
                                                     f"{got}")

    pred_two, refs_two = _words("a cat sat on the mat"), [_words("the cat sat"), _words("a cat on the mat")]

    def two_references(n: int) -> None:
        # The second reference matters.
        expected = _brute_precision(pred_two, refs_two, n)
        got = _as_pair(call(answer, f"two references, n = {n}", pred_two, refs_two, n), f"n = {n}")
        expect(got[1] == expected[1],
               f"'a cat sat on the mat', n = {n}: the total must be the number of predicted {n}-grams, "
               f"len(pred) - n + 1 = {expected[1]}, got {got[1]}")
        first_only = (_brute_precision(pred_two, refs_two[:1], n)[0], expected[1])
        expect_same(got, expected, [(first_only, f"'a cat sat on the mat', n = {n}: you only matched against the "
                                                 "first reference; an n-gram counts when it occurs in any "
                                                 f"reference: expected {expected}, got {got}")],
                    otherwise=f"'a cat sat on the mat' against {refs_two}, n = {n}: expected {expected}, got {got}")

    def short(case: tuple[list[str], int]) -> None:
        # Short and empty predictions: no n-gram at all is (0, 0), not an error.
        pred, n = case
        refs = [_words("oui ."), _words("bonjour !")]
        expected = _brute_precision(pred, refs, n)
        got = _as_pair(call(answer, f"prediction {pred} with n = {n}", pred, refs, n), f"prediction {pred}, n = {n}")
        expect(got == expected, f"prediction {pred}, n = {n}: expected {expected} (a prediction shorter than n has "
                                f"no {n}-gram), got {got}")

    # Random small corpora (repeated words make clipping matter), together one check.
    rng = random.Random(book_or_drawn(8, 17, lambda g: integer(g, 0, 2**31 - 1)))
    corpora = []
    for _ in range(40):
        words = ["le", "la", "chat", "est", "."][: rng.randint(2, 5)]
        pred = [rng.choice(words) for _ in range(rng.randint(0, 9))]
        refs = [[rng.choice(words) for _ in range(rng.randint(1, 8))] for _ in range(rng.randint(1, 3))]
        corpora.append((pred, refs, rng.randint(1, 4)))

    def random_corpus(case: tuple[int, tuple[list[str], list[list[str]], int]]) -> None:
        k, (pred, refs, n) = case
        expected = _brute_precision(pred, refs, n)
        got = _as_pair(call(answer, f"random case {k}", pred, refs, n), f"random case {k}")
        expect(got == expected, f"pred {pred} against {refs}, n = {n}: expected {expected}, got {got}")

    def random_corpora(cases: list[tuple[list[str], list[list[str]], int]]) -> None:
        count_cases(enumerate(cases), random_corpus)  # together one check

    return (count_cases([every_occurrence, clipped], lambda step: step()) + count_cases(range(1, 5), two_references)
            + count_cases([(_words("bonjour ."), 3), ([], 1), (_words("oui"), 1)], short)
            + count_cases([corpora], random_corpora))


# --- translation.brevity_penalty ----------------------------------------------------------------


def _bp(c: int, r: int) -> float:
    """Papineni et al.'s brevity penalty: 1 when c >= r, else exp(1 - r / c) (0 for c = 0)."""
    if c >= r:
        return 1.0
    return math.exp(1.0 - r / c) if c > 0 else 0.0


def _length_pairs(g: torch.Generator) -> tuple:
    """(c, r) of the kinds the book checks: a shorter corpus, longer or equal ones, an empty one, a mix."""
    r = integer(g, 5, 50)
    equal_length = integer(g, 2, 60)
    return ((integer(g, 1, r - 1), r), [(r + integer(g, 1, 9), r), (equal_length, equal_length), (integer(g, 2, 9), 1)],
            integer(g, 1, 20), [(integer(g, 1, 100), integer(g, 1, 100)) for _ in range(6)])


@checker("translation.brevity_penalty",
         "brevity_penalty(c, r): 1 if c >= r else exp(1 - r/c), 0 for an empty hypothesis corpus")
def check_brevity_penalty(answer: Callable) -> int:
    short, longer, empty_r, mixed = book_or_drawn(
        ((8, 10), [(12, 10), (10, 10), (3, 1)], 5, [(1, 2), (5, 6), (7, 20), (99, 100), (1, 1), (40, 39)]), 18,
        _length_pairs)

    def value(c: int, r: int) -> float:
        got = call(answer, f"c = {c}, r = {r}", c, r)
        ok = isinstance(got, (int, float)) and not isinstance(got, bool) and math.isfinite(float(got))
        expect(ok, f"c = {c}, r = {r}: return a finite number, got {got!r}")
        return float(got)

    def shorter(size: tuple[int, int]) -> None:
        # Shorter hypotheses: the ratio is r / c.
        c, r = size
        got = value(c, r)
        expect_same(got, _bp(c, r), [(math.exp(1 - c / r),
                                     f"c = {c}, r = {r} gave exp(1 - c/r) = {got:.4f}: the penalty is exp(1 - r/c) "
                                     "(reference length over hypothesis length), which goes to 0 as the hypotheses "
                                     "get shorter")],
                    same=lambda a, b: math.isclose(a, b, rel_tol=1e-9),
                    otherwise=f"c = {c}, r = {r}: expected exp(1 - {r}/{c}) = {_bp(c, r):.6f}, got {got:.6f}")

    def not_penalised(size: tuple[int, int]) -> None:
        # Longer hypotheses are not penalised (the clipped precisions already pay for extra words).
        c, r = size
        got = value(c, r)
        expect(math.isclose(got, 1.0), f"c = {c}, r = {r} gave {got:.4f}: a hypothesis corpus at least as long "
                                       "as the references is not penalised, BP = 1")

    def empty(r: int) -> None:
        # An empty hypothesis corpus: the limit of exp(1 - r/c) as c -> 0 is 0.
        def crash(error: Exception) -> str:
            if isinstance(error, ZeroDivisionError):
                return (f"c = 0, r = {r} raised ZeroDivisionError: an empty hypothesis corpus gets BP = 0 (the limit "
                        "of exp(1 - r/c) as c -> 0); test c == 0 before dividing")
            return f"c = 0, r = {r}: your function raised {type(error).__name__}: {error}"

        got = call_explained(answer, crash, 0, r)
        expect(isinstance(got, (int, float)) and not isinstance(got, bool) and float(got) == 0.0,
               f"c = 0, r = {r}: an empty hypothesis corpus gets BP = 0, got {got!r}")

    def closed_form(size: tuple[int, int]) -> None:
        c, r = size
        got = value(c, r)
        expect(math.isclose(got, _bp(c, r), rel_tol=1e-9, abs_tol=1e-12),
               f"c = {c}, r = {r}: expected {_bp(c, r):.6g}, got {got:.6g}")

    def closed_forms(sizes: list[tuple[int, int]]) -> None:
        count_cases(sizes, closed_form)  # together one check

    return (count_cases([short], shorter) + count_cases(longer, not_penalised) + count_cases([empty_r], empty)
            + count_cases([mixed], closed_forms))


# --- translation.normalize_pair -----------------------------------------------------------------

# (line, expected (source tokens, target tokens) or None), written out by hand.
_PAIRS: list[tuple[str, tuple[list[str], list[str]] | None]] = [
    ("Go.\tVa !", (["go", "."], ["va", "!"])),
    ("Hello, Tom.\tBonjour, Tom.", (["hello", ",", "tom", "."], ["bonjour", ",", "tom", "."])),
    ("I'm OK.\tÇa va.", (["i'm", "ok", "."], ["ça", "va", "."])),
    ("Who?  \t  Qui ?", (["who", "?"], ["qui", "?"])),
    ("Wait...\tAttendez...", (["wait", ".", ".", "."], ["attendez", ".", ".", "."])),
    ("Hi.\tSalut !\r\n", (["hi", "."], ["salut", "!"])),
]
_SPACES = [
    ("Wait!\tAttends\u202f!", (["wait", "!"], ["attends", "!"])),  # narrow no-break space
    ("Really?\tVraiment\u00a0?", (["really", "?"], ["vraiment", "?"])),  # no-break space
    ("Why?\tPourquoi\u2009?", (["why", "?"], ["pourquoi", "?"])),  # thin space
]
_ATTRIBUTION = ("Run!\tCours\u202f!\tCC-BY 2.0 (France) Attribution: tatoeba.org #906328 (papabear) & "
                "#906331 (sacredceltic)", (["run", "!"], ["cours", "!"]))
_MALFORMED = ["", "Go.Va !", "\tVa !", "Go.\t   ", "   \t", "Go."]


def _pair_result(got: object, line: str) -> tuple[list[str], list[str]] | None:
    if got is None:
        return None
    ok = (isinstance(got, (tuple, list)) and len(got) == 2
          and all(isinstance(side, (list, tuple)) and all(isinstance(t, str) for t in side) for side in got))
    if not ok and isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(s, str) for s in got):
        raise ExerciseFailure(f"{line!r}: you returned two strings {got!r}; return two lists of tokens (split each "
                              "normalised side on whitespace)")
    expect(ok, f"{line!r}: return (source tokens, target tokens), two lists of str, or None; got {got!r}")
    return list(got[0]), list(got[1])


_NO_BREAK_SPACES = "\u202f\u00a0\u2009"


def _rewritten(line: str, g: torch.Generator) -> str:
    """The same pair written otherwise (a hidden variant): letters in the other case here and there, another
    no-break space, spaces around the tabs and at the end; it normalises to the same tokens."""
    end = "\r\n" if line.endswith("\r\n") else ""
    chars = []
    for ch in line[: len(line) - len(end)]:
        if ch in _NO_BREAK_SPACES:
            ch = _NO_BREAK_SPACES[integer(g, 0, 2)]
        elif ch.isalpha() and ch.swapcase().lower() == ch.lower() and integer(g, 0, 1):
            ch = ch.swapcase()
        chars.append(ch)
    around_tab = " " * integer(g, 0, 2) + "\t" + " " * integer(g, 0, 2)
    return "".join(chars).replace("\t", around_tab) + " " * integer(g, 0, 2) + end


@checker("translation.normalize_pair",
         "normalize_pair(line) -> (English tokens, French tokens) after D2L's normalisation, None if malformed")
def check_normalize_pair(answer: Callable) -> int:
    lines = book_or_drawn((_PAIRS, _SPACES, _ATTRIBUTION, _MALFORMED), 19, lambda g: (
        [(_rewritten(line, g), expected) for line, expected in _PAIRS],
        [(_rewritten(line, g), expected) for line, expected in _SPACES],
        (_rewritten(_ATTRIBUTION[0], g), _ATTRIBUTION[1]),
        [_rewritten(line, g) for line in _MALFORMED]))
    pairs, spaces, attribution, malformed = lines

    def good(case: tuple[str, tuple[list[str], list[str]]]) -> None:
        line, expected = case
        got = _pair_result(call(answer, repr(line), line), line)
        expect(got is not None, f"{line!r} is a good line, but your function returned None")

        def what_to_fix() -> str:
            joined = " ".join(got[0] + got[1])
            if joined != joined.lower():
                hint = "lower-case both sides"
            elif any(len(t) > 1 and t[-1] in ",.!?" for t in got[0] + got[1]):
                hint = "put a space before , . ! ? when it follows a character that is not a space, then split"
            elif any(t.strip() != t or not t for t in got[0] + got[1]):
                hint = "split on runs of whitespace (str.split() without an argument) so that no token is empty or " \
                       "holds a space, tab or \\r"
            else:
                hint = "compare with the expected tokens"
            return f"{line!r}: expected {expected}, got {got}; {hint}"

        expect_same(got, expected, otherwise=what_to_fix)

    def french_spaces(case: tuple[str, tuple[list[str], list[str]]]) -> None:
        line, expected = case
        got = _pair_result(call(answer, repr(line), line), line)
        expect(got == expected,
               f"{line!r}: expected {expected}, got {got}. French typography puts a no-break space before ! ? : ; "
               "(U+202F, U+00A0 or U+2009): treat every space character as a space (replace those for which "
               "char.isspace() is true by ' ') and split with str.split(), which splits on all of them")

    def with_attribution(case: tuple[str, tuple[list[str], list[str]]]) -> None:
        line, expected = case
        got = _pair_result(call(answer, "a line with an attribution column", line), line)
        expect(got == expected, f"{line!r}: expected {expected}, got {got}; the columns after the second (the "
                                "Tatoeba attribution) are not part of the translation: keep only columns 0 and 1")

    def bad(line: str) -> None:
        got = call_explained(answer, lambda error: (
            f"{line!r} is malformed (no tab, or an empty side): return None instead of raising "
            f"({type(error).__name__}: {error})"), line)
        expect(got is None, f"{line!r} is malformed (no tab, or a side that is empty after stripping spaces): "
                            f"return None, got {got!r}")

    return (count_cases(pairs, good) + count_cases(spaces, french_spaces)
            + count_cases([attribution], with_attribution) + count_cases(malformed, bad))


# --- translation.bpe_merge_step -----------------------------------------------------------------


def _sennrich_step(words: dict[tuple[str, ...], int], *, weighted: bool = True, every_position: bool = True,
                   tie: str = "first", all_occurrences: bool = True) -> tuple[tuple[str, str], dict] | None:
    """One merge the way Sennrich et al.'s reference code does it: words as space-separated strings, the pair
    replaced by a regular expression. The keyword switches are typical mistakes (for the hints)."""
    import re

    counts: dict[tuple[str, str], int] = {}
    for word, n in words.items():
        seen = set()
        for i in range(len(word) - 1):
            pair = (word[i], word[i + 1])
            if not every_position and pair in seen:
                continue
            seen.add(pair)
            counts[pair] = counts.get(pair, 0) + (n if weighted else 1)
    if not counts:
        return None
    top = max(counts.values())
    tied = [p for p in counts if counts[p] == top]  # in the order first met
    best = {"first": tied[0], "last": tied[-1], "alphabetical": min(tied)}[tie]
    pattern = re.compile(r"(?<!\S)" + re.escape(best[0] + " " + best[1]) + r"(?!\S)")
    merged: dict[tuple[str, ...], int] = {}
    for word, n in words.items():
        text = pattern.sub(best[0] + best[1], " ".join(word), count=0 if all_occurrences else 1)
        key = tuple(text.split(" "))
        merged[key] = merged.get(key, 0) + n
    return best, merged


def _bpe_words(text: dict[str, int]) -> dict[tuple[str, ...], int]:
    return {tuple(w): n for w, n in text.items()}


# 8.1's word list (the figure), Sennrich et al.'s, one where the counts decide, one where a pair occurs twice
# in a word, and a three-way tie (met first, met last and alphabetically first are three different pairs).
_LES = {"les": 9, "des": 1, "ses": 2, "est": 4, "elle": 5, "elles": 1, "belle": 3, "belles": 1}
_SENNRICH = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
_WEIGHTED = {"abc": 1, "abd": 1, "abe": 1, "cd": 5}
_OVERLAP = {"aaaa": 2, "aab": 1, "bc": 4}
_TIES = {"sa": 2, "le": 2, "ou": 2}


def _draw_word_lists(g: torch.Generator) -> list[dict[str, int]]:
    """Hidden variants: random word lists over a few letters (repeats make ties and overlaps likely), then the
    kinds of the book's cases drawn anew: the counts decide, a pair occurs twice in a word, a three-way tie."""
    letters = "abcde"
    lists = []
    for _ in range(5):
        words = {}
        for _ in range(integer(g, 2, 6)):
            word = "".join(letters[integer(g, 0, 4)] for _ in range(integer(g, 1, 6)))
            words[word] = integer(g, 1, 9)
        lists.append(words)
    a, b, c, d = (chr(ord("f") + integer(g, 0, 4) + 5 * i) for i in range(4))  # four different letters
    n = integer(g, 4, 9)
    lists.append({a + b + c: 1, a + b + d: 1, a + b + a: 1, c + d: n})  # 3 x (a, b) once against (c, d) n times
    lists.append({a * 4: 2, a * 2 + b: 1, b + c: 4})  # (a, a) three times in one word
    shuffled = sorted("".join(chr(ord("a") + integer(g, 0, 25)) for _ in range(2)) for _ in range(3))
    if len(set(shuffled)) == 3 and all(len(set(p)) == 2 for p in shuffled):
        first, middle, last = shuffled[1], shuffled[0], shuffled[2]
        lists.append({first: 3, middle: 3, last: 3})  # met first, alphabetically first, met last: three pairs
    else:
        lists.append(_TIES)
    return lists


def _bpe_lists() -> list[dict[str, int]]:
    """The word lists of the merge-step checker: the book's, or drawn anew in a hidden variant."""
    return book_or_drawn([_LES, _SENNRICH, _WEIGHTED, _OVERLAP, _TIES], 31, _draw_word_lists)


def _as_merge(result: object, case: str) -> tuple[tuple[str, str], dict[tuple[str, ...], int]] | None:
    if result is None:
        return None
    if (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], str)):
        raise ExerciseFailure(f"{case}: return the pair as a tuple of two symbols, e.g. ('l', 'e'), not the merged "
                              f"string {result[0]!r}")
    ok = (isinstance(result, (tuple, list)) and len(result) == 2 and isinstance(result[0], tuple)
          and len(result[0]) == 2 and isinstance(result[1], dict))
    expect(ok, f"{case}: return ((a, b), new_words): the merged pair and a dict {{tuple of symbols: count}}, "
               f"got {result!r}")
    for word in result[1]:
        expect(isinstance(word, tuple) and all(isinstance(s, str) for s in word),
               f"{case}: the keys of the returned dict must be tuples of str symbols, got {word!r}")
    return (tuple(result[0]), dict(result[1]))


_BPE_MISTAKES = [
    (dict(weighted=False), "you counted each pair once per word; weight it by the word's count (a word seen 9 "
                           "times contributes 9)"),
    (dict(every_position=False), "you counted a pair once per word even where it occurs twice; count every position"),
    (dict(all_occurrences=False), "you merged only the first occurrence of the pair in a word; merge every "
                                  "occurrence, from left to right"),
    (dict(tie="last"), "on a tie you took the pair met last; take the pair met first (reading the words in order, "
                       "each from left to right): max() and Counter.most_common() both do"),
    (dict(tie="alphabetical"), "on a tie you took the alphabetically smallest pair; take the pair met first (reading "
                               "the words in order, each from left to right)"),
]


@checker("translation.bpe_merge_step",
         "bpe_merge_step(words) -> ((a, b), new_words): merge the most frequent adjacent pair, weighted by counts")
def check_bpe_merge_step(answer: Callable) -> int:
    lists = _bpe_lists()

    def one(case: tuple[int, dict[str, int]]) -> None:
        k, text = case
        words = _bpe_words(text)
        name = f"the word list {text}"
        with unchanged(f"{name}: your function changed its argument; build a new dict", words):
            got = _as_merge(call(answer, name, words), name)
        expected = _sennrich_step(words)
        if got == expected:
            return
        expect(got is not None, f"{name}: there are pairs to merge, but your function returned None")
        expect_same(got, expected, [(partial(_sennrich_step, words, **kw), f"{name}: {hint}. Expected {expected}, "
                                                                          f"got {got}")
                                    for kw, hint in _BPE_MISTAKES],
                    same=lambda a, b: a == b,
                    otherwise=f"{name}: expected {expected}, got {got}")

    def no_pair() -> None:
        words = {("a",): 3, ("b",): 1}
        got = call(answer, "words of one symbol each", words)
        expect(got is None, f"words of one symbol each have no pair to merge: return None, got {got!r}")

    def seven_merges() -> None:
        # Applied again and again, the step makes the figure's seven merges.
        words, expected = _bpe_words(_LES), []
        for _ in range(7):
            pair, words = _sennrich_step(words)
            expected.append(pair)
        words, got = _bpe_words(_LES), []
        for step in range(7):
            result = _as_merge(call(answer, f"merge {step + 1} on the figure's word list", words), "figure")
            expect(result is not None, f"merge {step + 1} on the figure's word list: your function returned None")
            pair, words = result
            got.append(pair)
        expect(got == expected, f"seven merges on the figure's word list: expected {expected}, got {got}")

    return count_cases(enumerate(lists), one) + count_cases([no_pair, seven_merges], lambda step: step())
