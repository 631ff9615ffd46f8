"""Checkers for the exercises of chapter 8.1, translating English to French.

The references are computed here independently of :mod:`course_lib.metrics` and
:mod:`course_lib.data.translation`, which the exercises ask the student to rebuild: n-gram counts by
brute-force loops over positions, the brevity penalty from its closed form, and the normalised
sentence pairs written out by hand.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

from ._core import ExerciseFailure, call, checker, expect

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
    n_checks = 0

    # Every occurrence counts, not just distinct n-grams.
    pred = _words("the cat the cat")
    got = _as_pair(call(answer, "repeated matching n-grams", pred, [pred], 1), "n = 1")
    expect(got != (2, 4), "'the cat the cat' against itself gave (2, 4): count every occurrence of an n-gram "
                          "(a collections.Counter), not the distinct ones (a set)")
    expect(got == (4, 4), f"'the cat the cat' against itself, n = 1: expected (4, 4), got {got}")
    n_checks += 1

    # Papineni et al.'s example: a repeated word must be clipped by its count in one reference.
    pred = _words("the the the the the the the")
    refs = [_words("the cat is on the mat"), _words("there is a cat on the mat")]
    pred_before, refs_before = list(pred), [list(r) for r in refs]
    got = _as_pair(call(answer, "Papineni's 'the the the ...' example", pred, refs, 1), "n = 1")
    expect(pred == pred_before and refs == refs_before, "your function changed its arguments; count in new objects")
    expect(got[1] == 7, f"'the' x 7 has 7 unigrams: the total must be 7, got {got[1]}")
    expect(got[0] != 7, "'the the the the the the the' got 7 matching unigrams: clip each n-gram's count by the "
                        "most times it occurs in a single reference ('the' occurs twice in the first reference)")
    expect(got[0] != 3, "'the' got 3 matches: that is the sum of its counts over the two references (2 + 1); clip by "
                        "the maximum over the references, not the sum")
    expect(got == (2, 7), f"'the' x 7 against the two references: expected (2, 7), got {got}")
    n_checks += 1

    # The second reference matters.
    pred = _words("a cat sat on the mat")
    refs = [_words("the cat sat"), _words("a cat on the mat")]
    for n in range(1, 5):
        expected = _brute_precision(pred, refs, n)
        got = _as_pair(call(answer, f"two references, n = {n}", pred, refs, n), f"n = {n}")
        if got[1] != expected[1]:
            raise ExerciseFailure(
                f"'a cat sat on the mat', n = {n}: the total must be the number of predicted {n}-grams, "
                f"len(pred) - n + 1 = {expected[1]}, got {got[1]}")
        if got[0] == _brute_precision(pred, refs[:1], n)[0] and got[0] != expected[0]:
            raise ExerciseFailure(
                f"'a cat sat on the mat', n = {n}: you only matched against the first reference; an n-gram "
                f"counts when it occurs in any reference: expected {expected}, got {got}")
        expect(got == expected, f"'a cat sat on the mat' against {refs}, n = {n}: expected {expected}, got {got}")
        n_checks += 1

    # Short and empty predictions: no n-gram at all is (0, 0), not an error.
    for pred, n in ((_words("bonjour ."), 3), ([], 1), (_words("oui"), 1)):
        expected = _brute_precision(pred, [_words("oui ."), _words("bonjour !")], n)
        got = _as_pair(call(answer, f"prediction {pred} with n = {n}", pred,
                             [_words("oui ."), _words("bonjour !")], n), f"prediction {pred}, n = {n}")
        expect(got == expected, f"prediction {pred}, n = {n}: expected {expected} (a prediction shorter than n has "
                                f"no {n}-gram), got {got}")
        n_checks += 1

    # Random small corpora: repeated words make clipping matter.
    rng = random.Random(8)
    for case in range(40):
        words = ["le", "la", "chat", "est", "."][: rng.randint(2, 5)]
        pred = [rng.choice(words) for _ in range(rng.randint(0, 9))]
        refs = [[rng.choice(words) for _ in range(rng.randint(1, 8))] for _ in range(rng.randint(1, 3))]
        n = rng.randint(1, 4)
        expected = _brute_precision(pred, refs, n)
        got = _as_pair(call(answer, f"random case {case}", pred, refs, n), f"random case {case}")
        expect(got == expected, f"pred {pred} against {refs}, n = {n}: expected {expected}, got {got}")
    n_checks += 1
    return n_checks


# --- translation.brevity_penalty ----------------------------------------------------------------


def _bp(c: int, r: int) -> float:
    """Papineni et al.'s brevity penalty: 1 when c >= r, else exp(1 - r / c) (0 for c = 0)."""
    if c >= r:
        return 1.0
    return math.exp(1.0 - r / c) if c > 0 else 0.0


@checker("translation.brevity_penalty",
         "brevity_penalty(c, r): 1 if c >= r else exp(1 - r/c), 0 for an empty hypothesis corpus")
def check_brevity_penalty(answer: Callable) -> int:
    n_checks = 0

    def value(c: int, r: int) -> float:
        got = call(answer, f"c = {c}, r = {r}", c, r)
        ok = isinstance(got, (int, float)) and not isinstance(got, bool) and math.isfinite(float(got))
        expect(ok, f"c = {c}, r = {r}: return a finite number, got {got!r}")
        return float(got)

    # Shorter hypotheses: the ratio is r / c.
    got = value(8, 10)
    expect(not math.isclose(got, math.exp(1 - 8 / 10)),
           f"c = 8, r = 10 gave exp(1 - c/r) = {got:.4f}: the penalty is exp(1 - r/c) (reference length over "
           "hypothesis length), which goes to 0 as the hypotheses get shorter")
    expect(math.isclose(got, _bp(8, 10), rel_tol=1e-9), f"c = 8, r = 10: expected exp(1 - 10/8) = {_bp(8, 10):.6f}, "
                                                         f"got {got:.6f}")
    n_checks += 1

    # Longer hypotheses are not penalised (the clipped precisions already pay for extra words).
    for c, r in ((12, 10), (10, 10), (3, 1)):
        got = value(c, r)
        expect(math.isclose(got, 1.0), f"c = {c}, r = {r} gave {got:.4f}: a hypothesis corpus at least as long "
                                       "as the references is not penalised, BP = 1")
        n_checks += 1

    # An empty hypothesis corpus: the limit of exp(1 - r/c) as c -> 0 is 0.
    try:
        got = answer(0, 5)
    except NotImplementedError:
        raise
    except ZeroDivisionError:
        raise ExerciseFailure("c = 0, r = 5 raised ZeroDivisionError: an empty hypothesis corpus gets BP = 0 "
                              "(the limit of exp(1 - r/c) as c -> 0); test c == 0 before dividing") from None
    except Exception as error:
        raise ExerciseFailure(f"c = 0, r = 5: your function raised {type(error).__name__}: {error}") from None
    expect(isinstance(got, (int, float)) and not isinstance(got, bool) and float(got) == 0.0,
           f"c = 0, r = 5: an empty hypothesis corpus gets BP = 0, got {got!r}")
    n_checks += 1

    for c, r in ((1, 2), (5, 6), (7, 20), (99, 100), (1, 1), (40, 39)):
        got = value(c, r)
        expect(math.isclose(got, _bp(c, r), rel_tol=1e-9, abs_tol=1e-12),
               f"c = {c}, r = {r}: expected {_bp(c, r):.6g}, got {got:.6g}")
    n_checks += 1
    return n_checks


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


@checker("translation.normalize_pair",
         "normalize_pair(line) -> (English tokens, French tokens) after D2L's normalisation, None if malformed")
def check_normalize_pair(answer: Callable) -> int:
    n_checks = 0
    for line, expected in _PAIRS:
        got = _pair_result(call(answer, repr(line), line), line)
        expect(got is not None, f"{line!r} is a good line, but your function returned None")
        if got != expected:
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
            raise ExerciseFailure(f"{line!r}: expected {expected}, got {got}; {hint}")
        n_checks += 1

    for line, expected in _SPACES:
        got = _pair_result(call(answer, repr(line), line), line)
        if got != expected:
            raise ExerciseFailure(
                f"{line!r}: expected {expected}, got {got}. French typography puts a no-break space before ! ? : ; "
                "(U+202F, U+00A0 or U+2009): treat every space character as a space (replace those for which "
                "char.isspace() is true by ' ') and split with str.split(), which splits on all of them")
        n_checks += 1

    line, expected = _ATTRIBUTION
    got = _pair_result(call(answer, "a line with an attribution column", line), line)
    expect(got == expected, f"{line!r}: expected {expected}, got {got}; the columns after the second (the Tatoeba "
                            "attribution) are not part of the translation: keep only columns 0 and 1")
    n_checks += 1

    for line in _MALFORMED:
        try:
            got = answer(line)
        except NotImplementedError:
            raise
        except Exception as error:
            raise ExerciseFailure(f"{line!r} is malformed (no tab, or an empty side): return None instead of raising "
                                  f"({type(error).__name__}: {error})") from None
        expect(got is None, f"{line!r} is malformed (no tab, or a side that is empty after stripping spaces): "
                            f"return None, got {got!r}")
        n_checks += 1
    return n_checks
