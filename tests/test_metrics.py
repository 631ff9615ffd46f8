"""BLEU and exact match: D2L's sentence formula against closed forms, corpus BLEU against sacrebleu."""

import math
import random

import pytest
import sacrebleu

from course_lib.metrics import bleu, corpus_bleu, exact_match

# --- D2L sentence BLEU -------------------------------------------------------------------------


def test_bleu_of_identical_sequences_is_one():
    assert bleu("a b c d e", "a b c d e") == 1.0


def test_bleu_short_correct_prefix_is_only_the_brevity_penalty():
    # All n-grams match; 4 tokens against 6: exp(1 - 6/4).
    assert bleu("a b c d", "a b c d e f") == pytest.approx(math.exp(-0.5), abs=1e-12)


def test_bleu_closed_form_with_partial_bigram_precision():
    # p1 = 3/3, p2 = 1/2 ("a b" matches, "b c" does not); BP = exp(1 - 4/3); k = 2.
    expected = math.exp(1 - 4 / 3) * 1.0 ** 0.5 * 0.5 ** 0.25
    assert bleu("a b c", "a b d c", k=2) == pytest.approx(expected, abs=1e-12)


def test_bleu_clips_repeated_tokens_by_their_count_in_the_label():
    # p1 = 1/3 (the label has one "the"); no brevity penalty since the prediction is longer.
    assert bleu("the the the", "the cat", k=1) == pytest.approx((1 / 3) ** 0.5, abs=1e-12)


def test_bleu_is_zero_when_an_order_has_no_match():
    # p3 = 0: "a b x", "b x d" do not occur in the label.
    assert bleu("a b x d", "a b c d", k=4) == 0.0


def test_bleu_skips_orders_longer_than_the_prediction():
    # D2L loops n = 1 .. min(k, len_pred): a one-token prediction is scored on unigrams only.
    assert bleu("a", "a", k=4) == 1.0
    assert bleu("a b", "a b", k=4) == 1.0


def test_bleu_of_empty_prediction_is_zero():
    assert bleu("", "a b") == 0.0


def test_bleu_rejects_bad_arguments():
    with pytest.raises(TypeError, match="pred_seq"):
        bleu(["a"], "a")
    with pytest.raises(TypeError, match="label_seq"):
        bleu("a", None)
    with pytest.raises(ValueError, match="k must be positive"):
        bleu("a", "a", k=0)


# --- corpus BLEU against sacrebleu ---------------------------------------------------------------


def _sacrebleu(hyps, refs):
    n_refs = max(len(r) for r in refs)
    # sacrebleu takes reference *streams*; None marks a sentence with fewer references.
    streams = [[" ".join(r[j]) if j < len(r) else None for r in refs] for j in range(n_refs)]
    return sacrebleu.corpus_bleu([" ".join(h) for h in hyps], streams, tokenize="none",
                                 smooth_method="none").score


def _random_corpus(rng: random.Random):
    words = ["a", "b", "c", "d", "e"][: rng.randint(2, 5)]
    hyps, refs = [], []
    for _ in range(rng.randint(1, 6)):
        sentence_refs = [[rng.choice(words) for _ in range(rng.randint(0, 9))] for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.5:
            # A perturbed copy of a reference, so that long n-grams match too.
            hyp = list(rng.choice(sentence_refs))
            for i in range(len(hyp)):
                if rng.random() < 0.2:
                    hyp[i] = rng.choice(words)
            hyp = hyp[: rng.randint(0, len(hyp))] if rng.random() < 0.3 else hyp
        else:
            hyp = [rng.choice(words) for _ in range(rng.randint(0, 9))]
        hyps.append(hyp)
        refs.append(sentence_refs)
    return hyps, refs


@pytest.mark.parametrize("seed", range(40))
def test_corpus_bleu_equals_sacrebleu_on_random_corpora(seed):
    hyps, refs = _random_corpus(random.Random(seed))
    assert corpus_bleu(hyps, refs) == pytest.approx(_sacrebleu(hyps, refs), abs=1e-6)


def test_random_corpora_include_nonzero_scores():
    # Guards the test above against comparing zeros only.
    scores = [corpus_bleu(*_random_corpus(random.Random(seed))) for seed in range(40)]
    assert sum(s > 0 for s in scores) >= 10


@pytest.mark.parametrize(
    "hyps, refs",
    [
        ([[]], [[["a", "b"]]]),  # empty hypothesis
        ([[], []], [[[]], [[]]]),  # everything empty
        ([["x", "y", "z", "w"]], [[["a", "b", "c", "d"]]]),  # zero matches
        ([["a", "b", "c"]], [[["a", "b", "c"]]]),  # no 4-grams at all
        ([["a", "b", "c", "d", "e"], []], [[["a", "b", "c", "d", "e"]], [["f", "g"]]]),
        # equal distance to two references: the shorter one is the effective length
        ([["a", "b", "c", "d", "e"]], [[["a", "b", "c", "d"], ["a", "b", "c", "d", "e", "f"]]]),
        ([["a", "b", "c", "d", "a", "b", "c", "d"]], [[["a", "b", "c", "d", "a"], ["a", "b", "c", "d"] * 3]]),
    ],
)
def test_corpus_bleu_equals_sacrebleu_on_edge_cases(hyps, refs):
    assert corpus_bleu(hyps, refs) == pytest.approx(_sacrebleu(hyps, refs), abs=1e-6)


def test_corpus_bleu_closed_form_with_brevity_penalty():
    # 5 of the reference's 6 tokens in order: p_n = 1 for all n; BP = exp(1 - 6/5).
    hyp = [["a", "b", "c", "d", "e"]]
    assert corpus_bleu(hyp, [[["a", "b", "c", "d", "e", "f"]]]) == pytest.approx(100 * math.exp(1 - 6 / 5))


def test_corpus_bleu_perfect_translation_scores_100():
    hyps = [["a", "b", "c", "d"], ["x", "y", "z", "w", "v"]]
    assert corpus_bleu(hyps, [[h] for h in hyps]) == pytest.approx(100.0)


def test_corpus_bleu_clips_against_the_best_single_reference():
    # "a" occurs twice in the second reference: two of the three unigrams are credited, not three.
    hyp, refs = [["a", "a", "a"]], [[["a", "b"], ["a", "a"]]]
    score = corpus_bleu(hyp, refs, max_n=1)
    assert score == pytest.approx(100 * 2 / 3)


def test_corpus_bleu_empty_corpus_is_zero():
    assert corpus_bleu([], []) == 0.0


def test_corpus_bleu_rejects_bad_arguments():
    with pytest.raises(ValueError, match="same length"):
        corpus_bleu([["a"]], [])
    with pytest.raises(TypeError, match=r"references\[0\]\[0\]"):
        corpus_bleu([["a"]], [["a"]])  # one nesting level missing
    with pytest.raises(ValueError, match="non-empty"):
        corpus_bleu([["a"]], [[]])
    with pytest.raises(TypeError, match=r"hypotheses\[0\]"):
        corpus_bleu(["a b"], [[["a", "b"]]])
    with pytest.raises(TypeError, match="hypotheses"):
        corpus_bleu("a b", [[["a", "b"]]])
    with pytest.raises(ValueError, match="max_n"):
        corpus_bleu([["a"]], [[["a"]]], max_n=0)


# --- exact match ---------------------------------------------------------------------------------


def test_exact_match_counts_a_hit_on_any_reference():
    hyps = [["a", "b"], ["c"], ["d", "e"], []]
    refs = [[["x"], ["a", "b"]], [["c", "c"]], [["d", "e"]], [[]]]
    assert exact_match(hyps, refs) == pytest.approx(3 / 4)


def test_exact_match_of_empty_corpus_is_zero_and_bad_input_raises():
    assert exact_match([], []) == 0.0
    with pytest.raises(ValueError, match="same length"):
        exact_match([["a"]], [[["a"]], [["b"]]])
