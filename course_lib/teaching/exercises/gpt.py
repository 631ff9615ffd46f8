r"""Checkers for the exercises of chapter 12, build a GPT.

The references are computed here with plain Python loops over lists, independently of
``course_lib.decoding.sampling`` and of the chapter's tensor code: the nucleus by walking the sorted
probabilities, the masked loss token by token, the interpolated bigram from ``Counter`` objects, the
entropy from its definition. Typical mistakes (the token that crosses
:math:`p` left out, probabilities not renormalised, the padding averaged in, a mean of per-sequence
means, :math:`\lambda` on the wrong model, bits instead of nats, :math:`z\tau` instead of :math:`z/\tau`)
are recognised by comparing the answer with the result of that mistake.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import torch

from ._core import (
    book_or_drawn,
    call,
    checker,
    count_cases,
    expect,
    expect_match,
    expect_tensor,
    generator,
    integer,
)


def _as_float(got: object, what: str) -> float:
    if isinstance(got, torch.Tensor):
        expect(got.numel() == 1, f"{what}: return one number, got a tensor of shape {tuple(got.shape)}")
        got = got.item()
    expect(isinstance(got, (float, int)) and not isinstance(got, bool),
           f"{what}: return a float, got {type(got).__name__}")
    return float(got)


def _expect_number(got: float, expected: float, what: str, mistakes: list[tuple[float, str]], otherwise: str,
                   rel: float = 1e-6) -> None:
    if not math.isclose(got, expected, rel_tol=rel, abs_tol=1e-12):
        for value, hint in mistakes:
            expect(not math.isclose(got, value, rel_tol=rel, abs_tol=1e-12), hint)
    expect(math.isclose(got, expected, rel_tol=rel, abs_tol=1e-12), otherwise)


# --- gpt.nucleus_probs ----------------------------------------------------------------------------


def _nucleus(probs: list[float], p: float, *, crossing: bool = True, strict: bool = False,
             renormalise: bool = True) -> list[float]:
    """The nucleus of mass p, walking the tokens from the most likely; the variants are the mistakes."""
    order = sorted(range(len(probs)), key=lambda i: -probs[i])
    kept, mass = [], 0.0
    for i in order:
        if (mass > p) if strict else (mass >= p):
            break
        if not crossing and mass + probs[i] > p and kept:
            break
        kept.append(i)
        mass += probs[i]
    total = sum(probs[i] for i in kept) if renormalise else 1.0
    return [probs[i] / total if i in kept else 0.0 for i in range(len(probs))]


@checker("gpt.nucleus_probs",
         "nucleus_probs(probs, p): the top-p (nucleus) distribution of a probability vector, renormalised",
         references=("decoding.sampling.top_p_filter",))
def check_nucleus_probs(answer: Callable) -> int:

    def one(case: tuple[list[float], float]) -> None:
        values, p = case
        probs = torch.tensor(values, dtype=torch.float64)
        what = f"probs={[round(v, 4) for v in values]}, p={p}"
        got = call(answer, what, probs.clone(), p)
        expect_tensor(got, what, (len(values),), "(V,)", floating=True)
        expected = torch.tensor(_nucleus(values, p), dtype=torch.float64)
        ordered = sorted(range(len(values)), key=lambda i: -values[i])
        expect_match(got, expected, what, [
            (torch.tensor(_nucleus(values, p, crossing=False), dtype=torch.float64),
             f"{what}: keep the token that makes the mass reach p too: the nucleus is the smallest set of most "
             "likely tokens whose probabilities add up to at least p"),
            (torch.tensor(_nucleus(values, p, strict=True), dtype=torch.float64),
             f"{what}: stop as soon as the kept mass reaches p (>= p): one token too many"),
            (torch.tensor(_nucleus(values, p, renormalise=False), dtype=torch.float64),
             f"{what}: renormalise: divide the kept probabilities by their sum so that they add up to 1"),
            (lambda: torch.tensor(_nucleus(values, p), dtype=torch.float64)[ordered],
             f"{what}: return the probabilities in the vocabulary's order, not sorted"),
        ], atol=1e-9, rtol=1e-9)

    def draw(gen: torch.Generator) -> list[tuple[list[float], float]]:
        cases = []
        for _ in range(5):
            raw = torch.rand(integer(gen, 3, 9), generator=gen, dtype=torch.float64) ** 3 + 1e-3
            cases.append(((raw / raw.sum()).tolist(), round(float(torch.rand((), generator=gen)) * 0.9 + 0.05, 3)))
        return cases

    book = [([0.5, 0.25, 0.15, 0.1], 0.75), ([0.1, 0.6, 0.3], 0.5), ([0.04, 0.3, 0.4, 0.2, 0.06], 0.85),
            ([0.7, 0.2, 0.1], 0.01), ([0.3, 0.3, 0.4], 0.99)]
    return count_cases(book_or_drawn(book, 72, draw), one)


# --- gpt.masked_lm_loss ---------------------------------------------------------------------------


def _token_losses(logits: torch.Tensor, targets: torch.Tensor) -> list[list[float]]:
    """-log p(target) of every position, by hand (log-sum-exp minus the target's logit), float64."""
    z = logits.double()
    return [[float(torch.logsumexp(z[b, t], 0) - z[b, t, targets[b, t]]) for t in range(z.shape[1])]
            for b in range(z.shape[0])]


@checker("gpt.masked_lm_loss",
         "masked_lm_loss(logits, targets, pad_id): mean next-token cross-entropy over the targets that are not padding",
         references=("training.train.masked_cross_entropy",))
def check_masked_lm_loss(answer: Callable) -> int:
    g = generator(81)

    def one(case: tuple[list[int], int, int]) -> None:
        lengths, T, V = case
        B, pad = len(lengths), 0
        logits = 2 * torch.randn(B, T, V, generator=g)
        targets = torch.randint(1, V, (B, T), generator=g)
        for b, n in enumerate(lengths):
            targets[b, n:] = pad
        what = f"logits of shape {(B, T, V)}, target lengths {lengths} (pad_id={pad})"
        got = _as_float(call(answer, what, logits.clone(), targets.clone(), pad), what)
        losses = _token_losses(logits, targets)
        real = [v for b in range(B) for v in losses[b][:lengths[b]]]
        expected = sum(real) / len(real)
        every = [v for row in losses for v in row]
        per_sequence = [sum(losses[b][:n]) / n for b, n in enumerate(lengths) if n]
        _expect_number(got, expected, what, [
            (sum(every) / len(every), f"{what}: the padding positions are averaged in; leave out the targets equal "
                                      "to pad_id"),
            (sum(real) / (B * T), f"{what}: divide by the number of real targets, not by B * T"),
            (sum(per_sequence) / len(per_sequence),
             f"{what}: this is the mean of the sequences' mean losses; average over all real tokens at once, so "
             "that a long document counts more than a short one"),
            (sum(real), f"{what}: this is the sum; the loss is the mean over the real targets"),
        ], f"{what}: expected {expected:.6f}, the mean of -log p(target) over the {len(real)} targets that are "
           f"not padding, got {got:.6f}")

    book = [([5, 3], 5, 7), ([4, 4, 1], 4, 11), ([2, 6, 6, 3], 6, 5), ([1], 3, 4)]
    return count_cases(book_or_drawn(book, 82, lambda gen: [
        ([integer(gen, 1, 8) for _ in range(integer(gen, 2, 4))], 8, integer(gen, 3, 20)) for _ in range(4)]), one)


# --- gpt.bigram_perplexity ------------------------------------------------------------------------


def _interpolated(train: list[int], test: list[int], V: int, lam: float, add: int = 1) -> float:
    unigram, pairs, rows = Counter(train[1:]), Counter(zip(train, train[1:], strict=False)), Counter(train[:-1])
    n = len(train) - 1
    nll = 0.0
    for a, b in zip(test, test[1:], strict=False):
        p_bigram = pairs[(a, b)] / rows[a] if rows[a] else 0.0
        p = lam * p_bigram + (1 - lam) * (unigram[b] + add) / (n + add * V)
        nll -= math.log(p) if p > 0 else -math.inf
    return math.exp(nll / (len(test) - 1))


@checker("gpt.bigram_perplexity",
         "bigram_perplexity(train, test, V, lam): perplexity of lam * bigram + (1 - lam) * add-one unigram")
def check_bigram_perplexity(answer: Callable) -> int:
    g = generator(91)

    def one(case: tuple[int, int, int, float]) -> None:
        V, n_train, n_test, lam = case
        train = torch.randint(0, V, (n_train,), generator=g)
        train[::7] = 1  # a frequent token, so that bigrams differ from unigrams
        test = torch.randint(0, V, (n_test,), generator=g)
        test[::3] = train[:len(test[::3])]  # some pairs seen in training, some not
        what = f"V={V}, {n_train} training and {n_test} test tokens, lam={lam}"
        got = _as_float(call(answer, what, train.clone(), test.clone(), V, lam), what)
        tr, te = train.tolist(), test.tolist()
        expected = _interpolated(tr, te, V, lam)
        _expect_number(got, expected, what, [
            (_interpolated(tr, te, V, 1 - lam), f"{what}: lam weighs the bigram model, 1 - lam the unigram one"),
            (math.log(expected), f"{what}: this is the cross-entropy; the perplexity is its exponential"),
            (_interpolated(tr, te, V, lam, add=0), f"{what}: add one to every unigram count (and V to the total), "
                                                   "so that a token never seen in training keeps a probability"),
        ], f"{what}: expected a perplexity of {expected:.6g}, got {got:.6g}; count the pairs of the training stream "
           "(P(b | a) = count(a b) / count(a followed by anything), 0 for an a never followed) and its tokens "
           "(P(b) = (count(b) + 1) / (n - 1 + V), over the n - 1 tokens that follow another), then exp of the "
           "mean -log (lam P(b | a) + (1 - lam) P(b)) over the test pairs", rel=1e-6)

    book = [(5, 60, 20, 0.5), (8, 200, 50, 0.9), (3, 30, 10, 0.2), (12, 400, 80, 0.7)]
    return count_cases(book_or_drawn(book, 92, lambda gen: [
        (integer(gen, 3, 15), integer(gen, 50, 300), integer(gen, 10, 60), round(float(torch.rand((), generator=gen))
                                                                                 * 0.8 + 0.1, 2))
        for _ in range(4)]), one)


# --- gpt.entropy_at_temperature -------------------------------------------------------------------


def _entropy(rows: list[list[float]], tau: float, log: Callable[[float], float] = math.log,
             scale: Callable[[float, float], float] = lambda z, t: z / t) -> float:
    total = 0.0
    for row in rows:
        z = [scale(v, tau) for v in row]
        top = max(z)
        e = [math.exp(v - top) for v in z]
        p = [v / sum(e) for v in e]
        total -= sum(q * log(q) for q in p if q > 0)
    return total / len(rows)


@checker("gpt.entropy_at_temperature",
         "entropy_at_temperature(logits, tau): mean entropy (nats) of softmax(logits / tau) over the rows")
def check_entropy_at_temperature(answer: Callable) -> int:
    g = generator(101)

    def one(case: tuple[int, int, float, float]) -> None:
        N, V, scale, tau = case
        logits = scale * torch.randn(N, V, generator=g)
        what = f"logits of shape {(N, V)}, tau={tau}"
        got = _as_float(call(answer, what, logits.clone(), tau), what)
        rows = logits.double().tolist()
        expected = _entropy(rows, tau)
        _expect_number(got, expected, what, [
            (_entropy(rows, tau, log=math.log2), f"{what}: that is in bits (log2); give the entropy in nats (the "
                                                 "natural log), the unit of the cross-entropy"),
            (_entropy(rows, tau, scale=lambda z, t: z * t), f"{what}: divide the logits by tau, do not multiply: a "
                                                            "low temperature sharpens the distribution"),
            (N * expected, f"{what}: average the entropies of the {N} rows, do not add them"),
        ], f"{what}: expected {expected:.6f} nats, the mean over the rows of -sum p log p with p = "
           f"softmax(logits / tau), got {got:.6f}", rel=1e-5)

    book = [(1, 4, 0.0, 1.0), (3, 10, 2.0, 1.0), (5, 50, 3.0, 0.5), (2, 7, 1.0, 2.5), (4, 20, 5.0, 0.1)]
    return count_cases(book_or_drawn(book, 102, lambda gen: [
        (integer(gen, 1, 6), integer(gen, 2, 60), float(integer(gen, 1, 5)),
         round(float(torch.rand((), generator=gen)) * 2.9 + 0.1, 2)) for _ in range(5)]), one)
