r"""Translation metrics: D2L's sentence BLEU, standard corpus BLEU, exact match.

BLEU compares the n-grams of a prediction with those of the reference(s). Its building block is
the *clipped* n-gram precision :math:`p_n`: the number of predicted n-grams that also occur in a
reference, each counted at most as often as it occurs there, over the number of predicted n-grams.

- :func:`bleu` is the sentence-level formula of D2L (one reference, tokens separated by spaces),
  which weights long n-grams more:

  .. math:: \exp\Big(\min\Big(0, 1 - \frac{\mathrm{len}_{\text{label}}}{\mathrm{len}_{\text{pred}}}
     \Big)\Big) \prod_{n=1}^{k} p_n^{1/2^n} .

- :func:`corpus_bleu` is the score reported in papers (Papineni et al., 2002, as computed by
  sacrebleu with ``tokenize="none"``, ``smooth_method="none"``): matches and n-gram totals are summed
  over the whole corpus before dividing, several references per sentence are allowed, and the
  brevity penalty uses the reference length closest to each hypothesis:

  .. math:: \mathrm{BLEU} = 100 \cdot \mathrm{BP} \cdot \exp\Big(\frac{1}{N}\sum_{n=1}^{N}\log p_n\Big),
     \qquad \mathrm{BP} = \min\big(1, e^{1 - r/c}\big),

  with :math:`c` the total hypothesis length and :math:`r` the total closest-reference length.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from ._validation import check_positive_int

__all__ = ["bleu", "corpus_bleu", "detokenized_bleu", "exact_match"]


def _ngrams(tokens: Sequence[str], n: int) -> Counter:
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def bleu(pred_seq: str, label_seq: str, k: int = 4) -> float:
    r"""D2L's sentence BLEU of one prediction against one label, in [0, 1].

    .. math:: \exp\big(\min(0, 1 - \mathrm{len}_{\text{label}}/\mathrm{len}_{\text{pred}})\big)
       \prod_{n=1}^{\min(k, \mathrm{len}_{\text{pred}})} p_n^{1/2^n}

    Args:
        pred_seq: the prediction, tokens separated by whitespace.
        label_seq: the reference, tokens separated by whitespace.
        k: the longest n-gram considered (orders longer than the prediction are skipped, as in D2L).

    Returns:
        The score; 1.0 for a perfect match, 0.0 for an empty prediction.

    Examples:
        >>> bleu("ils sont là .", "ils sont là .")
        1.0
        >>> round(bleu("ils sont", "ils sont là ."), 4)  # every n-gram matches; the brevity penalty is exp(1 - 4/2)
        0.3679
    """
    for name, value in (("pred_seq", pred_seq), ("label_seq", label_seq)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str of space-separated tokens, got {type(value).__name__}")
    check_positive_int(k, "k")
    pred_tokens, label_tokens = pred_seq.split(), label_seq.split()
    len_pred, len_label = len(pred_tokens), len(label_tokens)
    if len_pred == 0:
        return 0.0
    score = math.exp(min(0.0, 1.0 - len_label / len_pred))
    for n in range(1, min(k, len_pred) + 1):
        label_counts = _ngrams(label_tokens, n)
        matches = sum(min(count, label_counts[g]) for g, count in _ngrams(pred_tokens, n).items())
        score *= (matches / (len_pred - n + 1)) ** (0.5 ** n)
    return score


def _closest_ref_len(hyp_len: int, ref_lens: Sequence[int]) -> int:
    # sacrebleu's rule: the reference length closest to the hypothesis; on a tie, the shorter one.
    return min(ref_lens, key=lambda r: (abs(hyp_len - r), r))


def _check_corpus(hypotheses: object, references: object) -> None:
    if not isinstance(hypotheses, Sequence) or isinstance(hypotheses, str):
        raise TypeError(f"hypotheses must be a list of token lists, got {type(hypotheses).__name__}")
    if not isinstance(references, Sequence) or isinstance(references, str):
        raise TypeError(f"references must be a list of lists of token lists, got {type(references).__name__}")
    if len(hypotheses) != len(references):
        raise ValueError(
            f"hypotheses and references must have the same length (one entry per sentence), got "
            f"{len(hypotheses)} and {len(references)}"
        )
    for i, (hyp, refs) in enumerate(zip(hypotheses, references, strict=True)):
        if isinstance(hyp, str) or not isinstance(hyp, Sequence):
            raise TypeError(f"hypotheses[{i}] must be a list of tokens, got {type(hyp).__name__}")
        if isinstance(refs, str) or not isinstance(refs, Sequence) or not refs:
            raise ValueError(f"references[{i}] must be a non-empty list of token lists, got {refs!r}")
        for j, ref in enumerate(refs):
            if isinstance(ref, str) or not isinstance(ref, Sequence):
                raise TypeError(
                    f"references[{i}][{j}] must be a list of tokens (not {type(ref).__name__}): "
                    f"references is indexed [sentence][reference][token]"
                )


def corpus_bleu(hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[Sequence[str]]],
                max_n: int = 4) -> float:
    """Corpus BLEU in [0, 100], as sacrebleu computes it with ``tokenize="none"``, ``smooth_method="none"``.

    Args:
        hypotheses: one token list per sentence.
        references: for each sentence, a non-empty list of reference token lists (indexed
            ``[sentence][reference][token]``; sentences may have different numbers of references).
        max_n: N, the longest n-gram order.

    Returns:
        The score; 0.0 when some order has no match at all (no smoothing), and for an empty corpus.

    Examples:
        >>> hyps = [["the", "cat", "sat", "on", "the", "mat"], ["a", "dog", "ran", "home", "fast"]]
        >>> refs = [[["the", "cat", "sat", "on", "the", "mat"]], [["a", "dog", "ran", "home"], ["the", "dog", "ran"]]]
        >>> round(corpus_bleu(hyps, refs), 2)
        86.28
        >>> corpus_bleu([["the", "cat", "is", "on", "the", "mat"]], refs[:1])  # no 4-gram matches, no smoothing
        0.0
    """
    _check_corpus(hypotheses, references)
    check_positive_int(max_n, "max_n")
    matches, totals = [0] * max_n, [0] * max_n
    hyp_len = ref_len = 0
    for hyp, refs in zip(hypotheses, references, strict=True):
        hyp_len += len(hyp)
        ref_len += _closest_ref_len(len(hyp), [len(r) for r in refs])
        for n in range(1, max_n + 1):
            # Clip each n-gram by the most times any single reference contains it.
            max_ref_counts: Counter = Counter()
            for ref in refs:
                max_ref_counts |= _ngrams(ref, n)
            hyp_counts = _ngrams(hyp, n)
            matches[n - 1] += sum(min(c, max_ref_counts[g]) for g, c in hyp_counts.items())
            totals[n - 1] += sum(hyp_counts.values())
    if hyp_len == 0 or min(matches) == 0:
        return 0.0
    brevity_penalty = 1.0 if hyp_len >= ref_len else math.exp(1.0 - ref_len / hyp_len)
    log_precision = sum(math.log(m / t) for m, t in zip(matches, totals, strict=True)) / max_n
    return 100.0 * brevity_penalty * math.exp(log_precision)


def exact_match(hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[Sequence[str]]]) -> float:
    """Fraction of hypotheses equal (token for token) to at least one of their references.

    Args:
        hypotheses: one token list per sentence.
        references: for each sentence, a non-empty list of reference token lists.

    Returns:
        A number in [0, 1]; 0.0 for an empty corpus.

    Examples:
        >>> refs = [[["ils", "sont", "là"]], [["allez", "!"], ["vas-y", "!"]]]
        >>> exact_match([["ils", "sont", "là"], ["va", "!"]], refs)
        0.5
    """
    _check_corpus(hypotheses, references)
    if not hypotheses:
        return 0.0
    hits = sum(any(list(hyp) == list(ref) for ref in refs)
               for hyp, refs in zip(hypotheses, references, strict=True))
    return hits / len(hypotheses)


def detokenized_bleu(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """Corpus BLEU of *detokenised* text with sacrebleu's defaults (13a tokenisation, cased, exp smoothing).

    This is the score to compare across vocabularies (words, subwords, characters): sacrebleu tokenises
    the plain text itself, so how the model split it does not change the score.

    Args:
        hypotheses: one translation (a plain str) per sentence.
        references: for each sentence, a non-empty list of reference strings (any number each).

    Returns:
        The score in [0, 100].

    Examples:
        >>> round(detokenized_bleu(["The cat sat on the mat."], [["The cat sat on the mat."]]), 2)
        100.0
        >>> refs = [["The cat sat on the mat.", "A cat is on the mat."]]  # two references for one sentence
        >>> round(detokenized_bleu(["The cat is on the mat."], refs), 2)
        88.01
    """
    import sacrebleu

    if isinstance(hypotheses, str) or not all(isinstance(h, str) for h in hypotheses):
        raise TypeError("hypotheses must be a list of str (detokenised sentences)")
    if len(hypotheses) != len(references):
        raise ValueError(f"hypotheses and references must have the same length, got {len(hypotheses)} and "
                         f"{len(references)}")
    for i, refs in enumerate(references):
        if isinstance(refs, str) or not refs or not all(isinstance(r, str) for r in refs):
            raise ValueError(f"references[{i}] must be a non-empty list of str, got {refs!r}")
    # sacrebleu wants one stream per reference index, None where a sentence has fewer references.
    n_streams = max((len(refs) for refs in references), default=1)
    streams = [[refs[j] if j < len(refs) else None for refs in references] for j in range(n_streams)]
    return float(sacrebleu.corpus_bleu(list(hypotheses), streams).score)
