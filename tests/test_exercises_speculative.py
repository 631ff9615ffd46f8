"""The section 13.1 checkers (speculative decoding) accept correct answers (written here independently: closed
forms, loops, and the library's own speculative_generate statistics where they say the same) and reject typical
mistakes with a specific hint, in the book's cases and in a hidden variant (their stubs: test_exercises_core.py)."""

from __future__ import annotations

import pytest
import torch
from exercise_helpers import fails_with, passes

NOTEBOOK = "13b_speculative_decoding.ipynb"


# --- speculative.acceptance_rate ----------------------------------------------------------------


def acceptance_min(p, q):
    return torch.minimum(p, q).sum(-1)


def acceptance_total_variation(p, q):
    return 1 - 0.5 * (p - q).abs().sum(-1)


def acceptance_loop(p, q):
    out = torch.zeros(p.shape[:-1], dtype=p.dtype)
    for x in range(p.shape[-1]):
        ratio = torch.where(q[..., x] > 0, p[..., x] / q[..., x], torch.zeros_like(p[..., x]))
        out += q[..., x] * ratio.clamp(max=1)
    return out


@pytest.mark.parametrize("variant", [0, 1, 2])
@pytest.mark.parametrize("answer", [acceptance_min, acceptance_total_variation, acceptance_loop])
def test_acceptance_rate_correct_answers_pass(answer, variant):
    passes("speculative.acceptance_rate", answer, variant=variant)


@pytest.mark.parametrize(("answer", "hint"), [
    (lambda p, q: (p * q).sum(-1), "two independent draws agree"),
    (lambda p, q: 1 - (p - q).abs().sum(-1), "half the sum of |p - q|"),
    (lambda p, q: (p / q).clamp(max=1).nan_to_num(0.0).mean(-1), "plain mean"),
    (lambda p, q: torch.minimum(p, q).sum(-1, keepdim=True), "expected shape"),
    (lambda p, q: 1.001 * torch.minimum(p, q).sum(-1), "values differ"),
])
def test_acceptance_rate_wrong_answers_fail_with_hint(answer, hint):
    fails_with("speculative.acceptance_rate", answer, hint)


# --- speculative.resample_from_p ----------------------------------------------------------------


def resample_from_p_closed_form(p, q):
    alpha = torch.minimum(p, q).sum(-1, keepdim=True)
    return torch.minimum(p, q) + (1 - alpha) * p


def resample_from_p_by_cases(p, q):
    out = torch.zeros_like(p)
    for x in range(p.shape[-1]):  # proposed and kept, or any proposal rejected and x drawn from p
        kept = torch.where(q[..., x] > 0, q[..., x] * (p[..., x] / q[..., x]).clamp(max=1), torch.zeros_like(q[..., x]))
        out[..., x] = kept
    rejected = 1 - out.sum(-1, keepdim=True)
    return out + rejected * p


@pytest.mark.parametrize("variant", [0, 1])
@pytest.mark.parametrize("answer", [resample_from_p_closed_form, resample_from_p_by_cases])
def test_resample_from_p_correct_answers_pass(answer, variant):
    passes("speculative.resample_from_p", answer, variant=variant)


@pytest.mark.parametrize(("answer", "hint"), [
    (lambda p, q: p.clone(), "that is p itself"),
    (lambda p, q: torch.minimum(p, q), "add the rejected case"),
    (lambda p, q: torch.minimum(p, q) + (1 - torch.minimum(p, q).sum(-1, keepdim=True)) * q, "drawn from p"),
    (lambda p, q: torch.minimum(p, q) + (p - q).clamp(min=0) + 1e-3, "values differ"),
])
def test_resample_from_p_wrong_answers_fail_with_hint(answer, hint):
    fails_with("speculative.resample_from_p", answer, hint)


def test_resampling_from_p_is_biased_towards_the_drafts_choices():
    # what the exercise shows: the fresh-draw rule gives min(p, q) + (1 - alpha) p, not p
    p = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
    q = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    biased = resample_from_p_closed_form(p, q)
    alpha = 0.2 + 0.3 + 0.1  # sum of min(p, q)
    expected = [0.2 + (1 - alpha) * 0.6, 0.3 + (1 - alpha) * 0.3, 0.1 + (1 - alpha) * 0.1]
    assert torch.allclose(biased, torch.tensor(expected, dtype=torch.float64))
    assert not torch.allclose(biased, p)


# --- speculative.expected_tokens ----------------------------------------------------------------


def expected_closed_form(alpha, k):
    return float(k + 1) if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def expected_by_enumeration(alpha, k):
    # the round stops at the first rejection (probability alpha^m (1 - alpha) of m accepted), or accepts all k
    total = sum((m + 1) * alpha**m * (1 - alpha) for m in range(k))
    return total + (k + 1) * alpha**k


@pytest.mark.parametrize("variant", [0, 1, 2])
@pytest.mark.parametrize("answer", [expected_closed_form, expected_by_enumeration])
def test_expected_tokens_correct_answers_pass(answer, variant):
    passes("speculative.expected_tokens", answer, variant=variant)


@pytest.mark.parametrize(("answer", "hint"), [
    (lambda a, k: expected_closed_form(a, k) - 1, "counts the accepted proposals only"),
    (lambda a, k: expected_closed_form(a, k - 1), "stops one term short"),
    (lambda a, k: 1 + k * a, "1 + k alpha"),
    (lambda a, k: (1 - a ** (k + 1)) / (1 - a), "alpha=1.0, k=3: your function raised ZeroDivisionError"),
])
def test_expected_tokens_wrong_answers_fail_with_hint(answer, hint):
    fails_with("speculative.expected_tokens", answer, hint)


def test_expected_tokens_agree_with_the_librarys_count_for_a_draft_right_with_a_fixed_probability():
    # A round of speculative_generate yields accepted + 1 tokens; with proposals accepted independently with
    # probability alpha, its mean is the closed form (a seeded check of the formula the exercise asks for).
    g = torch.Generator().manual_seed(0)
    alpha, k, rounds = 0.7, 4, 40_000
    accepted = (torch.rand(rounds, k, generator=g) < alpha).long().cumprod(1).sum(1)
    assert abs((accepted + 1).double().mean().item() - expected_closed_form(alpha, k)) < 0.02


# --- speculative.best_k -------------------------------------------------------------------------


def best_by_search(alpha, c, k_max):
    def speedup(k):
        return expected_closed_form(alpha, k) / (k * c + 1)

    return max(range(1, k_max + 1), key=speedup)


@pytest.mark.parametrize("variant", [0, 1, 2])
def test_best_k_correct_answer_passes(variant):
    passes("speculative.best_k", best_by_search, variant=variant)


@pytest.mark.parametrize(("answer", "hint"), [
    (lambda a, c, k_max: k_max, "the most proposals allowed"),
    (lambda a, c, k_max: max(range(1, k_max + 1), key=lambda k: (expected_closed_form(a, k) - 1) / (k * c + 1)),
     "maximises the accepted proposals only"),
    (lambda a, c, k_max: 1, "expected k = 8 (speed-up"),
    (lambda a, c, k_max: float(best_by_search(a, c, k_max)), "return an int"),
])
def test_best_k_wrong_answers_fail_with_hint(answer, hint):
    fails_with("speculative.best_k", answer, hint)


# --- the book's worked solutions ----------------------------------------------------------------


@pytest.mark.parametrize(("label", "name", "exercise"), [
    ("ch13-ex-acceptance", "acceptance_rate", "speculative.acceptance_rate"),
    ("ch13-ex-fresh-draw", "resample_from_p", "speculative.resample_from_p"),
    ("ch13-ex-expected", "expected_tokens", "speculative.expected_tokens"),
    ("ch13-ex-best-k", "best_k", "speculative.best_k"),
])
def test_notebook_solutions_pass_the_book_and_a_hidden_variant(solution_function, label, name, exercise):
    answer = solution_function(label, name)
    for variant in (0, 1):
        passes(exercise, answer, variant=variant)
