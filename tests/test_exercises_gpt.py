"""The chapter 12 checkers accept correct answers (written here independently: the library's
``cl.top_p_filter``, ``torch.nn.functional.cross_entropy(ignore_index=...)``, ``torch.distributions``) and
reject typical mistakes with a specific hint, in the book's cases and in a hidden variant (their stubs:
test_exercises_core.py)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from exercise_helpers import fails_with, passes

import course_lib as cl

NOTEBOOK = "12_build_a_gpt.ipynb"


# --- gpt.nucleus_probs ----------------------------------------------------------------------------


def nucleus_by_library(probs, p):
    return torch.softmax(cl.top_p_filter(probs.log(), p), -1)


def nucleus_by_loop(probs, p, *, crossing=True, renormalise=True, sort_output=False):
    order = sorted(range(len(probs)), key=lambda i: -probs[i].item())
    kept, mass = [], 0.0
    for i in order:
        if mass >= p or (not crossing and kept and mass + probs[i].item() > p):
            break
        kept.append(i)
        mass += probs[i].item()
    out = torch.zeros_like(probs)
    out[kept] = probs[kept] / (probs[kept].sum() if renormalise else 1.0)
    return out[order] if sort_output else out


@pytest.mark.parametrize("variant", [0, 1, 2])
def test_nucleus_correct_answers_pass(variant):
    passes("gpt.nucleus_probs", nucleus_by_library, variant=variant, library=True)
    passes("gpt.nucleus_probs", nucleus_by_loop, variant=variant)


@pytest.mark.parametrize(("answer", "hint"), [
    (lambda q, p: nucleus_by_loop(q, p, crossing=False), "makes the mass reach p too"),
    (lambda q, p: nucleus_by_loop(q, p, renormalise=False), "renormalise"),
    (lambda q, p: nucleus_by_loop(q, p, sort_output=True), "not sorted"),
    (lambda q, p: nucleus_by_loop(q, p)[None], "expected shape"),
    (lambda q, p: q, "values differ"),
])
def test_nucleus_wrong_answers_fail_with_hint(answer, hint):
    fails_with("gpt.nucleus_probs", answer, hint)


# --- gpt.masked_lm_loss ---------------------------------------------------------------------------


def masked_loss_torch(logits, targets, pad_id):
    return F.cross_entropy(logits.flatten(0, 1).double(), targets.flatten(), ignore_index=pad_id).item()


@pytest.mark.parametrize("variant", [0, 1, 2])
def test_masked_loss_correct_answer_passes(variant):
    passes("gpt.masked_lm_loss", masked_loss_torch, variant=variant)


def per_sequence_mean(logits, targets, pad_id):
    return sum(masked_loss_torch(logits[b:b + 1], targets[b:b + 1], pad_id) for b in range(len(targets))) / len(
        targets)


@pytest.mark.parametrize(("answer", "hint"), [
    (lambda z, t, pad: F.cross_entropy(z.flatten(0, 1), t.flatten()).item(), "padding positions are averaged in"),
    (lambda z, t, pad: F.cross_entropy(z.flatten(0, 1), t.flatten(), ignore_index=pad, reduction="sum").item()
     / t.numel(), "not by B * T"),
    (per_sequence_mean, "mean of the sequences' mean losses"),
    (lambda z, t, pad: F.cross_entropy(z.flatten(0, 1), t.flatten(), ignore_index=pad, reduction="sum").item(),
     "this is the sum"),
    (lambda z, t, pad: "0.5", "return a float"),
])
def test_masked_loss_wrong_answers_fail_with_hint(answer, hint):
    fails_with("gpt.masked_lm_loss", answer, hint)


# --- gpt.bigram_perplexity ------------------------------------------------------------------------


def bigram_by_distributions(train, test, V, lam, *, swap=False, add=1):
    # categorical distributions built from torch.bincount, scored with torch.distributions
    if swap:
        lam = 1 - lam
    unigram = torch.bincount(train[1:], minlength=V).double() + add  # add-one
    total = 0.0
    for a, b in zip(test[:-1].tolist(), test[1:].tolist(), strict=True):
        follow = torch.bincount(train[1:][train[:-1] == a], minlength=V).double()
        mix = (1 - lam) * unigram / unigram.sum()
        if follow.sum() > 0:
            mix = mix + lam * follow / follow.sum()
        total -= torch.distributions.Categorical(probs=mix).log_prob(torch.tensor(b)).item()
    return math.exp(total / (len(test) - 1))


@pytest.mark.parametrize("variant", [0, 1])
def test_bigram_correct_answer_passes(variant):
    passes("gpt.bigram_perplexity", bigram_by_distributions, variant=variant)


@pytest.mark.parametrize(("answer", "hint"), [
    (lambda tr, te, V, lam: bigram_by_distributions(tr, te, V, lam, swap=True), "lam weighs the bigram"),
    (lambda tr, te, V, lam: math.log(bigram_by_distributions(tr, te, V, lam)), "this is the cross-entropy"),
    (lambda tr, te, V, lam: 1.01 * bigram_by_distributions(tr, te, V, lam), "expected a perplexity of"),
    (lambda tr, te, V, lam: bigram_by_distributions(tr, te, V, lam, add=0), "add one to every unigram count"),
])
def test_bigram_wrong_answers_fail_with_hint(answer, hint):
    fails_with("gpt.bigram_perplexity", answer, hint)


# --- gpt.entropy_at_temperature -------------------------------------------------------------------


def entropy_by_distributions(logits, tau):
    return torch.distributions.Categorical(logits=logits.double() / tau).entropy().mean().item()


@pytest.mark.parametrize("variant", [0, 1, 2])
def test_entropy_correct_answer_passes(variant):
    passes("gpt.entropy_at_temperature", entropy_by_distributions, variant=variant)


@pytest.mark.parametrize(("answer", "hint"), [
    (lambda z, tau: entropy_by_distributions(z, tau) / math.log(2), "in bits"),
    (lambda z, tau: entropy_by_distributions(z * tau * tau, tau), "divide the logits by tau"),
    (lambda z, tau: entropy_by_distributions(z, tau) * z.shape[0], "do not add them"),
    (lambda z, tau: torch.distributions.Categorical(logits=z / tau).entropy(), "return one number"),
])
def test_entropy_wrong_answers_fail_with_hint(answer, hint):
    fails_with("gpt.entropy_at_temperature", answer, hint)


def test_entropy_limits_are_what_the_exercise_says():
    z = torch.tensor([[2.0, 2.0, 0.0, -1.0]])
    assert math.isclose(entropy_by_distributions(z, 1e-3), math.log(2), rel_tol=1e-6)  # tau -> 0: the tied top
    assert math.isclose(entropy_by_distributions(z, 1e6), math.log(4), rel_tol=1e-6)  # tau -> inf: uniform
