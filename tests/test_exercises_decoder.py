"""The chapter 11 checkers accept correct answers (written here independently: the library's
``cl.rotary_embedding`` / ``cl.alibi_slopes`` / ``cl.swiglu_hidden_size`` and closed forms) and reject
typical mistakes with a specific hint, in the book's cases and in a hidden variant (their stubs:
test_exercises_core.py)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from exercise_helpers import fails_with, passes

import course_lib as cl

NOTEBOOK = "11_modern_decoder.ipynb"


# --- decoder.rope_d4 ----------------------------------------------------------------------------


def rope_library(x, m, base):
    return cl.rotary_embedding(x[None], torch.tensor([m]), base=base)[0]


def rope_by_hand(x, m, base, *, pairs=((0, 2), (1, 3)), sign=1.0, exponent=lambda i: 2 * i / 4, shift=0):
    out = x.clone()
    for i, (a, b) in enumerate(pairs):
        angle = sign * (m + shift) * base ** -exponent(i)
        c, s = math.cos(angle), math.sin(angle)
        out[a], out[b] = x[a] * c - x[b] * s, x[a] * s + x[b] * c
    return out


@pytest.mark.parametrize("variant", [0, 1, 2])
def test_rope_d4_correct_answers_pass(variant):
    passes("decoder.rope_d4", rope_library, variant=variant, library=True)
    passes("decoder.rope_d4", rope_by_hand, variant=variant)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (lambda x, m, b: rope_by_hand(x, m, b, pairs=((0, 1), (2, 3))), "interleaved layout"),
        (lambda x, m, b: rope_by_hand(x, m, b, sign=-1.0), "the wrong way"),
        (lambda x, m, b: rope_by_hand(x, m, b, exponent=lambda i: i / 4), "not base^(-i/d)"),
        (lambda x, m, b: rope_by_hand(x, m, b, shift=1), "positions count from 0"),
        (lambda x, m, b: 1.001 * rope_by_hand(x, m, b), "values differ"),
        (lambda x, m, b: rope_by_hand(x, m, b)[None], "expected shape (4,)"),
    ],
)
def test_rope_d4_wrong_answers_fail_with_hint(answer, hint):
    fails_with("decoder.rope_d4", answer, hint)


# --- decoder.relative_score ---------------------------------------------------------------------


def relative_by_library(q, k, delta, base):
    # the score of the rotated vectors at (m, n) = (delta, 0) when delta >= 0, else (0, -delta)
    m, n = max(delta, 0), max(-delta, 0)
    qr = cl.rotary_embedding(q[..., None, :], torch.tensor([m]), base=base)[..., 0, :]
    kr = cl.rotary_embedding(k[..., None, :], torch.tensor([n]), base=base)[..., 0, :]
    return (qr * kr).sum(-1)


def relative_closed_form(q, k, delta, base, *, sign=1.0):
    half = q.shape[-1] // 2
    theta = base ** (-2 * torch.arange(half, dtype=torch.float64) / q.shape[-1])
    a1, a2, b1, b2 = q[..., :half], q[..., half:], k[..., :half], k[..., half:]
    c, s = torch.cos(delta * theta), sign * torch.sin(delta * theta)
    return ((a1 * b1 + a2 * b2) * c + (a1 * b2 - a2 * b1) * s).sum(-1)  # q^T R_(-delta) k


@pytest.mark.parametrize("variant", [0, 1, 2])
def test_relative_score_correct_answers_pass(variant):
    passes("decoder.relative_score", relative_by_library, variant=variant, library=True)
    passes("decoder.relative_score", relative_closed_form, variant=variant)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (lambda q, k, d, b: relative_closed_form(q, k, d, b, sign=-1.0), "the other way round"),
        (lambda q, k, d, b: (q * k).sum(-1), "without positions"),
        (lambda q, k, d, b: relative_closed_form(q, k, d + 1, b), "values differ"),
        (lambda q, k, d, b: relative_closed_form(q, k, d, b)[..., None], "expected shape"),
    ],
)
def test_relative_score_wrong_answers_fail_with_hint(answer, hint):
    fails_with("decoder.relative_score", answer, hint)


# --- decoder.swiglu_parameters ------------------------------------------------------------------


def swiglu_parameters(d, multiple_of):
    return 3 * d * cl.swiglu_hidden_size(d, multiple_of)


def test_swiglu_library_layer_has_the_counted_parameters():
    # the checker's count equals the parameters of the library's layer (no biases)
    layer = cl.SwiGLU(96, multiple_of=32)
    assert sum(p.numel() for p in layer.parameters()) == swiglu_parameters(96, 32)


@pytest.mark.parametrize("variant", [0, 1, 2])
def test_swiglu_parameters_correct_answer_passes(variant):
    passes("decoder.swiglu_parameters", swiglu_parameters, variant=variant, library=True)


def test_llama_7b_count():
    # Llama 7B: d = 4096, hidden 11008 (Touvron et al. 2023, table 2 / the released config)
    assert swiglu_parameters(4096, 256) == 3 * 4096 * 11008


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (lambda d, m: 2 * d * cl.swiglu_hidden_size(d, m), "three matrices"),
        (lambda d, m: 3 * d * (8 * d // 3), "round the hidden size"),
        (lambda d, m: 3 * d * 4 * d, "not 4d"),
        (lambda d, m: 8 * d * d, "4d ReLU MLP"),
        (lambda d, m: float(swiglu_parameters(d, m)), "exact Python int"),
        (lambda d, m: swiglu_parameters(d, m) + 1, "expected"),
    ],
)
def test_swiglu_parameters_wrong_answers_fail_with_hint(answer, hint):
    fails_with("decoder.swiglu_parameters", answer, hint, library=True)


# --- decoder.alibi_slopes -----------------------------------------------------------------------


def slopes_by_hand(n):
    def geometric(count):
        return [2.0 ** (-8.0 * h / count) for h in range(1, count + 1)]

    below = 2 ** int(math.log2(n))
    return geometric(below) + geometric(2 * below)[0::2][: n - below]


@pytest.mark.parametrize("variant", [0, 1, 2])
def test_alibi_slopes_correct_answers_pass(variant):
    passes("decoder.alibi_slopes", slopes_by_hand, variant=variant)
    passes("decoder.alibi_slopes", lambda n: cl.alibi_slopes(n, dtype=torch.float64), variant=variant, library=True)


def test_twelve_heads():
    # the book's case written out: the 8 slopes of 8 heads, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5
    expected = [2.0 ** -h for h in range(1, 9)] + [2.0 ** -(h + 0.5) for h in range(4)]
    assert slopes_by_hand(12) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (lambda n: [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)], "power of two only"),
        (lambda n: [2.0 ** (-8.0 * h / n) for h in range(n)] if n & (n - 1) == 0 else slopes_by_hand(n),
         "count from h = 1"),
        (lambda n: slopes_by_hand(n)[::-1], "the slopes decrease"),
        (lambda n: slopes_by_hand(n)[:-1], "list (or 1-D tensor) of"),
        (lambda n: [1.01 * s for s in slopes_by_hand(n)], "values differ"),
    ],
)
def test_alibi_slopes_wrong_answers_fail_with_hint(answer, hint):
    fails_with("decoder.alibi_slopes", answer, hint)


# --- decoder.to_rotate_half ---------------------------------------------------------------------


def to_rotate_half(W, num_heads):
    d_h = W.shape[0] // num_heads
    return W.view(num_heads, d_h, -1)[:, cl.rotary_permutation(d_h)].reshape(W.shape)


def test_the_permutation_makes_interleaved_equal_rotate_half():
    # independent of the checker: rotate-half RoPE of the permuted features = the permuted interleaved RoPE
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    perm = cl.rotary_permutation(8)
    torch.testing.assert_close(cl.rotary_embedding(x[..., perm]), cl.rotary_embedding(x, interleaved=True)[..., perm])


@pytest.mark.parametrize("variant", [0, 1, 2])
def test_to_rotate_half_correct_answer_passes(variant):
    passes("decoder.to_rotate_half", to_rotate_half, variant=variant)


def _inverse(W, num_heads):
    d_h = W.shape[0] // num_heads
    perm = cl.rotary_permutation(d_h)
    return W.view(num_heads, d_h, -1)[:, torch.argsort(perm)].reshape(W.shape)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (lambda W, h: W, "values differ"),
        (_inverse, "inverse permutation"),
        (lambda W, h: W[list(range(0, W.shape[0], 2)) + list(range(1, W.shape[0], 2))], "inside each head"),
        (lambda W, h: to_rotate_half(W.T, h).T, "reordered the columns"),
        (lambda W, h: W[:-1], "expected shape"),
    ],
)
def test_to_rotate_half_wrong_answers_fail_with_hint(answer, hint):
    fails_with("decoder.to_rotate_half", answer, hint)


# --- decoder.perplexity (section 11.1) ----------------------------------------------------------


def perplexity(logits, targets):
    return math.exp(F.cross_entropy(logits.flatten(0, 1).double(), targets.flatten()).item())


@pytest.mark.parametrize("variant", [0, 1, 2])
def test_perplexity_correct_answer_passes(variant):
    passes("decoder.perplexity", perplexity, variant=variant)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (lambda lg, t: F.cross_entropy(lg.flatten(0, 1), t.flatten()).item(), "the mean cross-entropy"),
        (lambda lg, t: math.exp(F.cross_entropy(lg.flatten(0, 1).double(), t.flatten(), reduction="sum").item()),
         "before taking exp"),
        (lambda lg, t: F.cross_entropy(lg.flatten(0, 1).double(), t.flatten(), reduction="none").exp().mean().item(),
         "not the mean of the exps"),
        (lambda lg, t: torch.tensor([perplexity(lg, t)] * 2), "return one number"),
        (lambda lg, t: 1.01 * perplexity(lg, t), "expected a perplexity"),
    ],
)
def test_perplexity_wrong_answers_fail_with_hint(answer, hint):
    fails_with("decoder.perplexity", answer, hint)


# --- the book's worked solutions ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "name", "exercise"),
    [
        ("ch11-ex-rope-d4", "rope_d4", "decoder.rope_d4"),
        ("ch11-ex-relative", "relative_score", "decoder.relative_score"),
        ("ch11-ex-swiglu", "swiglu_parameters", "decoder.swiglu_parameters"),
        ("ch11-ex-slopes", "alibi_slopes", "decoder.alibi_slopes"),
        ("ch11-ex-permute", "to_rotate_half", "decoder.to_rotate_half"),
        ("ch11-ex-perplexity", "perplexity", "decoder.perplexity"),
    ],
)
def test_notebook_solutions_pass_the_book_and_a_hidden_variant(solution_function, label, name, exercise):
    answer = solution_function(label, name)
    passes(exercise, answer)
    passes(exercise, answer, variant=3)
