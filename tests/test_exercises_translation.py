"""The chapter 8.1 checkers accept the notebook's solutions and reject typical mistakes
with a specific hint (their stubs: test_exercises_core.py)."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from exercise_helpers import fails_with, passes

import course_lib as cl
from course_lib.data import normalize_text, tokenize_words

NOTEBOOK = "08b_translation.ipynb"


def _grams(tokens, n):
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


# --- translation.ngram_precision ----------------------------------------------------------------


def unclipped(pred, refs, n):
    pool = set().union(*(_grams(r, n) for r in refs))
    grams = _grams(pred, n)
    return sum(c for g, c in grams.items() if g in pool), sum(grams.values())


def clipped_by_sum(pred, refs, n):
    total = Counter()
    for r in refs:
        total += _grams(r, n)
    grams = _grams(pred, n)
    return sum(min(c, total[g]) for g, c in grams.items()), sum(grams.values())


def first_reference_only(pred, refs, n):
    ref = _grams(refs[0], n)
    grams = _grams(pred, n)
    return sum(min(c, ref[g]) for g, c in grams.items()), sum(grams.values())


def distinct_ngrams(pred, refs, n):
    best = Counter()
    for r in refs:
        best |= _grams(r, n)
    grams = set(_grams(pred, n))
    return sum(g in best for g in grams), sum(_grams(pred, n).values())


def total_is_length(pred, refs, n):
    best = Counter()
    for r in refs:
        best |= _grams(r, n)
    grams = _grams(pred, n)
    return sum(min(c, best[g]) for g, c in grams.items()), len(pred)


def returns_a_ratio(pred, refs, n):
    best = Counter()
    for r in refs:
        best |= _grams(r, n)
    grams = _grams(pred, n)
    total = sum(grams.values())
    return sum(min(c, best[g]) for g, c in grams.items()) / max(total, 1)


def test_ngram_precision_notebook_solution_passes(solutions):
    ns = solutions("ch08b-ex-ngram")
    assert passes("translation.ngram_precision", ns["ngram_precision"]).n_checks >= 8


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (unclipped, "clip each n-gram's count"),
        (clipped_by_sum, "maximum over the references, not the sum"),
        (first_reference_only, "only matched against the first reference"),
        (distinct_ngrams, "count every occurrence"),
        (total_is_length, "len(pred) - n + 1"),
        (returns_a_ratio, "return a pair of integers"),
    ],
)
def test_ngram_precision_wrong_answers_fail_with_hint(answer, hint):
    fails_with("translation.ngram_precision", answer, hint)


def test_ngram_precision_matches_library_corpus_bleu_when_composed(solutions):
    # The checker's brute-force counts and cl.corpus_bleu (tested against sacrebleu) must agree:
    # unigram-only corpus BLEU of a long-enough hypothesis is 100 * matches / total.
    ns = solutions("ch08b-ex-ngram")
    pred = "the the the the the the the".split()
    refs = ["the cat is on the mat".split(), "there is a cat on the mat".split()]
    matches, total = ns["ngram_precision"](pred, refs, 1)
    assert (matches, total) == (2, 7)
    assert cl.corpus_bleu([pred], [refs], max_n=1) == pytest.approx(100 * 2 / 7)


# --- translation.brevity_penalty ----------------------------------------------------------------


def inverted_ratio(c, r):
    return 1.0 if c >= r else math.exp(1 - c / r)


def penalises_long(c, r):
    return math.exp(1 - max(r / c, c / r)) if c else 0.0


def divides_by_zero(c, r):
    return 1.0 if c >= r else math.exp(1 - r / c) if c > 0 else 1 / 0


def nan_for_empty(c, r):
    return 1.0 if c >= r else (math.exp(1 - r / c) if c else float("nan"))


def test_brevity_penalty_notebook_solution_passes(solutions):
    ns = solutions("ch08b-ex-ngram", "ch08b-ex-brevity", hyp_tokens=[["a"]], ref_tokens=[[["a"]]])
    passes("translation.brevity_penalty", ns["brevity_penalty"])


def test_brevity_solution_rebuilds_corpus_bleu_like_the_library(solutions):
    # The solution composes ngram_precision and brevity_penalty into corpus BLEU: it must equal
    # cl.corpus_bleu (itself tested against sacrebleu) on a corpus with a brevity penalty, several
    # references and a tie between two reference lengths.
    ns = solutions("ch08b-ex-ngram", "ch08b-ex-brevity", hyp_tokens=[["a"]], ref_tokens=[[["a"]]])
    my_corpus_bleu = ns["my_corpus_bleu"]
    hyps = [["il", "fait", "froid", "."], ["oui", "."], ["a", "b", "c", "d", "e"]]
    refs = [[["il", "fait", "très", "froid", "."]], [["oui", "!"], ["oui", "."]],
            [["a", "b", "c", "d"], ["a", "b", "c", "d", "e", "f"]]]
    assert cl.corpus_bleu(hyps, refs) > 0
    assert my_corpus_bleu(hyps, refs) == pytest.approx(cl.corpus_bleu(hyps, refs))
    assert my_corpus_bleu(hyps[:2], refs[:2]) == pytest.approx(cl.corpus_bleu(hyps[:2], refs[:2]))


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (inverted_ratio, "exp(1 - r/c)"),
        (penalises_long, "not penalised"),
        (divides_by_zero, "ZeroDivisionError"),
        (nan_for_empty, "gets BP = 0"),
    ],
)
def test_brevity_penalty_wrong_answers_fail_with_hint(answer, hint):
    fails_with("translation.brevity_penalty", answer, hint)


# --- translation.normalize_pair -----------------------------------------------------------------


def _good(line):
    cols = line.rstrip("\r\n").split("\t")
    if len(cols) < 2 or not cols[0].strip() or not cols[1].strip():
        return None
    return tokenize_words(normalize_text(cols[0])), tokenize_words(normalize_text(cols[1]))


def _keep_case(text):
    """D2L's space insertion before , . ! ? without lower-casing."""
    out = []
    for i, ch in enumerate(text):
        if ch in ",.!?" and i > 0 and text[i - 1] != " ":
            out.append(" ")
        out.append(ch)
    return "".join(out)


def no_lower(line):
    cols = line.rstrip("\r\n").split("\t")
    if len(cols) < 2 or not cols[0].strip() or not cols[1].strip():
        return None
    return _keep_case(cols[0]).split(), _keep_case(cols[1]).split()


def no_punctuation_split(line):
    cols = line.rstrip("\r\n").split("\t")
    if len(cols) < 2 or not cols[0].strip() or not cols[1].strip():
        return None
    return cols[0].lower().split(), cols[1].lower().split()


def keeps_attribution(line):
    cols = line.rstrip("\r\n").split("\t")
    if len(cols) < 2 or not cols[0].strip() or not cols[1].strip():
        return None
    return tokenize_words(normalize_text(cols[0])), tokenize_words(normalize_text(" ".join(cols[1:])))


def raises_on_malformed(line):
    english, french = line.rstrip("\r\n").split("\t")[:2]
    return tokenize_words(normalize_text(english)), tokenize_words(normalize_text(french))


def returns_strings(line):
    result = _good(line)
    return None if result is None else (" ".join(result[0]), " ".join(result[1]))


def d2l_spaces_then_split_on_space(line):
    # D2L replaces U+202F and U+00A0 only; splitting on " " then keeps the thin space U+2009 in a token.
    cols = line.rstrip("\r\n").split("\t")
    if len(cols) < 2 or not cols[0].strip() or not cols[1].strip():
        return None

    def side(text):
        text = text.replace("\u202f", " ").replace("\xa0", " ").lower()
        return [t for t in _keep_case(text).split(" ") if t]

    return side(cols[0]), side(cols[1])


def test_normalize_pair_notebook_solution_passes(solutions):
    ns = solutions("ch08b-ex-normalize")
    assert passes("translation.normalize_pair", ns["normalize_pair"]).n_checks >= 15


def test_normalize_pair_library_pipeline_passes():
    # The library's normaliser (tested against D2L's code) and the checker's hand-written pairs agree.
    passes("translation.normalize_pair", _good)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (no_lower, "lower-case"),
        (no_punctuation_split, "put a space before"),
        (keeps_attribution, "attribution"),
        (raises_on_malformed, "return None instead of raising"),
        (returns_strings, "two lists of tokens"),
        (d2l_spaces_then_split_on_space, "no-break space"),
    ],
)
def test_normalize_pair_wrong_answers_fail_with_hint(answer, hint):
    fails_with("translation.normalize_pair", answer, hint)



# --- translation.bpe_merge_step -----------------------------------------------------------------


def _merge(words, *, weighted=True, every_position=True, tie="first", first_only=False, mutate=False,
           pair_as_string=False):
    """A merge step written for these tests (a Counter and a scan): the defaults are right, each switch a bug."""
    counts = Counter()
    for word, n in words.items():
        pairs = list(zip(word, word[1:], strict=False))
        for pair in (pairs if every_position else dict.fromkeys(pairs)):
            counts[pair] += n if weighted else 1
    if not counts:
        return None
    top = max(counts.values())
    tied = [p for p in counts if counts[p] == top]
    best = {"first": tied[0], "last": tied[-1], "alphabetical": min(tied)}[tie]
    new = {}
    for word, n in words.items():
        out, i, done = [], 0, False
        while i < len(word):
            if tuple(word[i:i + 2]) == best and not done:
                out.append(word[i] + word[i + 1])
                i += 2
                done = first_only
            else:
                out.append(word[i])
                i += 1
        new[tuple(out)] = new.get(tuple(out), 0) + n
    if mutate:
        words.clear()
        words.update(new)
        new = words
    return (best[0] + best[1] if pair_as_string else best), new


def test_bpe_notebook_solution_passes(solution_function):
    answer = solution_function("ch08b-ex-bpe", "bpe_merge_step")
    assert passes("translation.bpe_merge_step", answer).n_checks == 7
    for variant in (1, 2):
        passes("translation.bpe_merge_step", answer, variant=variant)


def test_bpe_independent_answer_passes_and_equals_the_library():
    for variant in (0, 1, 2, 3):
        passes("translation.bpe_merge_step", _merge, variant=variant)
    words = {tuple(w): n for w, n in {"les": 9, "des": 1, "ses": 2, "est": 4, "elle": 5, "elles": 1}.items()}
    for _ in range(6):
        assert _merge(words) == cl.data.bpe_merge_step(words)
        words = _merge(words)[1]


@pytest.mark.parametrize(
    ("switch", "hint"),
    [
        (dict(weighted=False), "weight it by the word's count"),
        (dict(every_position=False), "count every position"),
        (dict(first_only=True), "merge every occurrence"),
        (dict(tie="last"), "the pair met last"),
        (dict(tie="alphabetical"), "alphabetically smallest"),
        (dict(mutate=True), "changed its argument"),
        (dict(pair_as_string=True), "not the merged string"),
    ],
)
def test_bpe_wrong_answers_fail_with_hint(switch, hint):
    fails_with("translation.bpe_merge_step", lambda words: _merge(words, **switch), hint)


def test_bpe_no_pair_must_give_none():
    fails_with("translation.bpe_merge_step",
               lambda words: _merge(words) if any(len(w) > 1 for w in words) else ((None, None), {}), "return None")


def test_bpe_cases_expose_every_mistake_in_every_variant():
    from course_lib.teaching.exercises import translation as translation_checkers
    from course_lib.teaching.exercises._core import _VARIANT

    for variant in (0, 1, 2, 3):
        token = _VARIANT.set(variant)
        try:
            lists = translation_checkers._bpe_lists()
        finally:
            _VARIANT.reset(token)
        for kw, _ in translation_checkers._BPE_MISTAKES:
            words = [{tuple(w): n for w, n in text.items()} for text in lists]
            assert any(translation_checkers._sennrich_step(w, **kw) != translation_checkers._sennrich_step(w)
                       for w in words), (variant, kw)
