r"""Checkers for the exercises of chapter 11 (today's decoder block) and section 11.1 (a small language model).

The references are computed here independently of ``course_lib.attention.kernels.rotary``,
``course_lib.attention.kernels.alibi``, ``course_lib.models.decoder_lm`` and ``course_lib.training.train``:
RoPE from the explicit :math:`2\times 2` rotation matrices of each pair, in float64 with Python's
``math.cos``/``math.sin``; the ALiBi slopes from the
paper's rule written with Python floats; SwiGLU's size from Llama's formula; perplexities by a loop over
the tokens. Typical mistakes (the interleaved layout where rotate-half is asked, a rotation the
wrong way, the exponent ``i/d`` instead of ``2i/d``, the naive slopes for a head count that is not a
power of two, the gate matrix forgotten, the permutation applied to the columns) are recognised by
comparing the answer with the result of that mistake, so the message can say what to fix.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ._core import (
    book_or_drawn,
    call,
    checker,
    count_cases,
    expect,
    expect_match,
    expect_same,
    expect_tensor,
    generator,
    integer,
)

# --- decoder.rope_d4 ----------------------------------------------------------------------------


def _rotation(d: int, m: int, base: float, *, pairs: str = "half", sign: float = 1.0,
              exponent: Callable[[int, int], float] | None = None) -> torch.Tensor:
    """The (d, d) float64 RoPE matrix R_m: pair i turned by sign * m * theta_i, theta_i = base^(-2i/d).

    ``pairs``: ``"half"`` pairs (i, i + d/2), ``"interleaved"`` pairs (2i, 2i + 1); ``exponent(i, d)``
    replaces 2i/d (a mistake).
    """
    R = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        e = exponent(i, d) if exponent is not None else 2 * i / d
        angle = sign * m * base ** -e
        a, b = (i, i + d // 2) if pairs == "half" else (2 * i, 2 * i + 1)
        R[a, a], R[a, b] = math.cos(angle), -math.sin(angle)
        R[b, a], R[b, b] = math.sin(angle), math.cos(angle)
    return R


@checker("decoder.rope_d4",
         "rope_d4(x, m, base): RoPE of a 4-feature query or key at position m, rotate-half pairs (x0, x2), (x1, x3)")
def check_rope_d4(answer: Callable) -> int:
    g = generator(11)

    def one(case: tuple[int, float]) -> None:
        m, base = case
        x = torch.randn(4, generator=g, dtype=torch.float64)
        what = f"x={[round(v, 3) for v in x.tolist()]}, m={m}, base={base:g}"
        got = call(answer, what, x.clone(), m, base)
        expected = _rotation(4, m, base) @ x
        expect_tensor(got, what, (4,))
        expect_match(got, expected, what, [
            (lambda: _rotation(4, m, base, pairs="interleaved") @ x,
             f"{what}: you turned the pairs (x0, x1) and (x2, x3), the interleaved layout of the paper; this "
             "exercise asks for the rotate-half layout of Hugging Face's Llama: pair i is (x_i, x_(i + d/2)), "
             "here (x0, x2) with theta_0 = 1 and (x1, x3) with theta_1 = base^(-1/2)"),
            (lambda: _rotation(4, m, base, sign=-1.0) @ x,
             f"{what}: your rotation goes the wrong way: (a, b) becomes (a cos - b sin, a sin + b cos), a turn "
             "by +m * theta_i"),
            (lambda: _rotation(4, m, base, exponent=lambda i, d: i / d) @ x,
             f"{what}: the frequencies are theta_i = base^(-2i/d) (here 1 and base^(-1/2)), not base^(-i/d)"),
            (lambda: _rotation(4, m + 1, base) @ x, f"{what}: positions count from 0: position m turns by m * theta_i"),
        ], atol=1e-6, rtol=1e-6)

    cases = book_or_drawn([(0, 10000.0), (1, 10000.0), (3, 100.0), (17, 10000.0), (250, 500000.0)], 12,
                          lambda gen: [(integer(gen, 1, 400), float(10 ** integer(gen, 2, 6))) for _ in range(5)])
    return count_cases(cases, one)


# --- decoder.relative_score ---------------------------------------------------------------------


def _relative_reference(q: torch.Tensor, k: torch.Tensor, delta: int, base: float) -> torch.Tensor:
    """<R_m q, R_n k> for m - n = delta (rotate-half pairs), as q^T R_(n - m) k = q^T R_(-delta) k."""
    R = _rotation(q.shape[-1], -delta, base)
    return (q.double() * (k.double() @ R.T)).sum(-1)  # (k @ R^T)_i = (R k)_i


@checker("decoder.relative_score",
         "relative_score(q, k, delta, base): the RoPE score of q at m and k at n = m - delta, from q, k and delta only")
def check_relative_score(answer: Callable) -> int:
    g = generator(21)

    def one(case: tuple[tuple[int, ...], int, int, float]) -> int:
        batch, d, delta, base = case
        q = torch.randn(*batch, d, generator=g, dtype=torch.float64)
        k = torch.randn(*batch, d, generator=g, dtype=torch.float64)
        what = f"q, k of shape {(*batch, d)}, delta={delta}, base={base:g}"
        got = call(answer, what, q.clone(), k.clone(), delta, base)
        expected = _relative_reference(q, k, delta, base)
        expect_tensor(got, what, tuple(batch))
        expect_match(got, expected, what, [
            (lambda: _relative_reference(q, k, -delta, base),
             f"{what}: the sign of the sine terms is the other way round: with the query at m and the key at "
             "n = m - delta, the score is q^T R_(n - m) k = q^T R_(-delta) k"),
            (lambda: (q * k).sum(-1), f"{what}: this is the score without positions; turn each pair by delta * "
                                      "theta_i (the cosine and the sine terms)"),
        ], atol=1e-8, rtol=1e-8)
        # the property the exercise is about: the score of rotated vectors at any (m, n) with m - n = delta
        for m in (delta + 3, delta + 40):
            n = m - delta
            rotated = ((_rotation(d, m, base) @ q[..., None])[..., 0] * (_rotation(d, n, base) @ k[..., None])[..., 0])
            expect_match(got, rotated.sum(-1), f"{what}, compared with <R_{m} q, R_{n} k>", atol=1e-8, rtol=1e-8)
        return 3

    cases = book_or_drawn([((), 4, 1, 10000.0), ((), 8, 5, 10000.0), ((3,), 8, 0, 100.0), ((2, 3), 16, 12, 10000.0),
                           ((5,), 6, -7, 500.0)], 22,
                          lambda gen: [((integer(gen, 1, 4),), 2 * integer(gen, 2, 8), integer(gen, -30, 30),
                                        float(10 ** integer(gen, 2, 5))) for _ in range(5)])
    return count_cases(cases, one)


# --- decoder.swiglu_parameters ------------------------------------------------------------------


def _llama_hidden(d: int, multiple_of: int) -> int:
    hidden = (8 * d) // 3
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


@checker("decoder.swiglu_parameters",
         "swiglu_parameters(d, multiple_of): the weights of Llama's SwiGLU feed-forward layer for width d")
def check_swiglu_parameters(answer: Callable) -> int:
    def one(case: tuple[int, int]) -> None:
        d, multiple_of = case
        what = f"d={d}, multiple_of={multiple_of}"
        got = call(answer, what, d, multiple_of)
        expect(isinstance(got, int) and not isinstance(got, bool),
               f"{what}: return an exact Python int (use // for the divisions), got {type(got).__name__} {got!r}")
        hidden = _llama_hidden(d, multiple_of)
        expected = 3 * d * hidden
        expect_same(got, expected, [
            (2 * d * hidden, f"{what}: expected {expected:,}, got {got:,}: SwiGLU has three matrices (W_gate, "
                             f"W_up, W_down), not two"),
            (3 * d * (8 * d // 3), f"{what}: expected {expected:,}, got {got:,}: round the hidden size floor(8d/3) "
                                   f"= {8 * d // 3} up to a multiple of {multiple_of} (here {hidden})"),
            (3 * d * 4 * d, f"{what}: expected {expected:,}, got {got:,}: the hidden size is about 8d/3, not 4d"),
            (2 * d * 4 * d, f"{what}: expected {expected:,}, got {got:,}: that is the 4d ReLU MLP of the 2017 "
                            f"Transformer"),
        ], otherwise=lambda: f"{what}: expected {expected:,} weights (3 * d * hidden, hidden = {hidden}), got {got}")

    cases = book_or_drawn([(4096, 256), (5120, 256), (8192, 256), (128, 32), (96, 32), (48, 1)], 31,
                          lambda gen: [(64 * integer(gen, 1, 100), 2 ** integer(gen, 0, 8)) for _ in range(6)])
    return count_cases(cases, one)


# --- decoder.alibi_slopes -----------------------------------------------------------------------


def _paper_slopes(n: int) -> list[float]:
    def power_of_two(count: int) -> list[float]:
        start = 2.0 ** (-8.0 / count)
        return [start ** (h + 1) for h in range(count)]

    if math.log2(n).is_integer():
        return power_of_two(n)
    below = 2 ** int(math.floor(math.log2(n)))
    return power_of_two(below) + power_of_two(2 * below)[0::2][: n - below]


@checker("decoder.alibi_slopes", "alibi_slopes(n): ALiBi's slope of each of n heads, for any n >= 1")
def check_alibi_slopes(answer: Callable) -> int:
    def one(n: int) -> None:
        what = f"n={n}"
        got = call(answer, what, n)
        if isinstance(got, torch.Tensor):
            got = got.detach().cpu().double().tolist()
        expect(isinstance(got, (list, tuple)) and len(got) == n,
               f"{what}: return a list (or 1-D tensor) of {n} slopes, got {got!r}")
        expected = torch.tensor(_paper_slopes(n), dtype=torch.float64)
        actual = torch.tensor([float(v) for v in got], dtype=torch.float64)
        naive = torch.tensor([2.0 ** (-8.0 * h / n) for h in range(1, n + 1)], dtype=torch.float64)
        expect_match(actual, expected, what, [
            (naive, f"{what}: 2^(-8h/n) is the rule for a power of two only; for {n} heads the paper takes the "
                    f"slopes of the power of two below, then every other slope of the power of two above"),
            (torch.tensor([2.0 ** (-8.0 * h / n) for h in range(n)], dtype=torch.float64),
             f"{what}: the heads count from h = 1: the first slope is 2^(-8/n), not 1"),
            (expected.flip(0), f"{what}: the slopes decrease: head 1 has the largest slope"),
        ], atol=1e-12, rtol=1e-10)

    return count_cases(book_or_drawn([12, 8, 1, 6, 20, 3], 41,
                                     lambda gen: [integer(gen, 2, 64) for _ in range(5)] + [2 ** integer(gen, 0, 6)]),
                       one)


# --- decoder.to_rotate_half ---------------------------------------------------------------------


def _interleaved_rope(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE in the interleaved layout on (T, H, d_h), position t for row t, float64."""
    T, _, d_h = x.shape
    return torch.stack([(_rotation(d_h, t, base, pairs="interleaved") @ x[t].double().T).T for t in range(T)])


def _half_rope(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    T, _, d_h = x.shape
    return torch.stack([(_rotation(d_h, t, base) @ x[t].double().T).T for t in range(T)])


def _permuted(W: torch.Tensor, heads: int) -> torch.Tensor:
    """Hugging Face's conversion of Meta's weights: in each head, rows (0, 2, 4, ..., 1, 3, 5, ...)."""
    out_features, d = W.shape
    d_h = out_features // heads
    order = [h * d_h + j for h in range(heads) for j in list(range(0, d_h, 2)) + list(range(1, d_h, 2))]
    return W[order]


@checker("decoder.to_rotate_half",
         "to_rotate_half(W, num_heads): the rows of W_q or W_k reordered so that rotate-half RoPE gives the "
         "interleaved scores")
def check_to_rotate_half(answer: Callable) -> int:
    g = generator(51)

    def one(case: tuple[int, int, int]) -> int:
        heads, d_h, d = case
        what = f"W of shape ({heads * d_h}, {d}), num_heads={heads}"
        W_q = torch.randn(heads * d_h, d, generator=g, dtype=torch.float64)
        W_k = torch.randn(heads * d_h, d, generator=g, dtype=torch.float64)
        got_q = call(answer, what, W_q.clone(), heads)
        got_k = call(answer, what, W_k.clone(), heads)
        expect_tensor(got_q, what, tuple(W_q.shape))
        expect_tensor(got_k, what, tuple(W_k.shape))
        expected = _permuted(W_q, heads)
        inverse = torch.empty_like(W_q)
        inverse[[h * d_h + j for h in range(heads) for j in list(range(0, d_h, 2)) + list(range(1, d_h, 2))]] = W_q
        global_order = list(range(0, heads * d_h, 2)) + list(range(1, heads * d_h, 2))
        mistakes = [
            (inverse, f"{what}: this is the inverse permutation: in each head, the rotate-half layout puts the "
                      "first elements of the pairs (rows 0, 2, 4, ...) first, then the second ones (1, 3, 5, ...)"),
            (W_q[global_order], f"{what}: reorder the rows inside each head (blocks of d_h rows), not across heads"),
        ]
        if d == heads * d_h:
            mistakes.append((_permuted(W_q.T, heads).T, f"{what}: you reordered the columns; the features of the "
                                                        "queries are the rows of W (q = W x)"))
        expect_match(got_q, expected, what, mistakes, atol=0, rtol=0)
        # what it is for: the same attention scores with rotate-half RoPE on the new weights
        x = torch.randn(5, d, generator=g, dtype=torch.float64)
        q_old = _interleaved_rope((x @ W_q.T).view(5, heads, d_h))
        k_old = _interleaved_rope((x @ W_k.T).view(5, heads, d_h))
        q_new = _half_rope((x @ got_q.double().T).view(5, heads, d_h))
        k_new = _half_rope((x @ got_k.double().T).view(5, heads, d_h))
        scores_old = torch.einsum("thd,shd->hts", q_old, k_old)
        scores_new = torch.einsum("thd,shd->hts", q_new, k_new)
        expect_match(scores_new, scores_old, f"{what}: the attention scores with rotate-half RoPE", atol=1e-9,
                     rtol=1e-9)
        return 2

    cases = book_or_drawn([(2, 4, 8), (4, 8, 32), (1, 6, 6), (3, 2, 5)], 52,
                          lambda gen: [(integer(gen, 1, 4), 2 * integer(gen, 1, 5), integer(gen, 2, 12))
                                       for _ in range(4)])
    return count_cases(cases, one)


# --- decoder.perplexity (section 11.1) ----------------------------------------------------------


@checker("decoder.perplexity",
         "perplexity(logits, targets): exp of the mean next-token cross-entropy of (B, T, V) logits")
def check_perplexity(answer: Callable) -> int:
    g = generator(61)

    def one(case: tuple[int, int, int, float]) -> None:
        B, T, V, scale = case
        logits = scale * torch.randn(B, T, V, generator=g)
        targets = torch.randint(0, V, (B, T), generator=g)
        what = f"logits of shape {(B, T, V)}"
        got = call(answer, what, logits.clone(), targets.clone())
        if isinstance(got, torch.Tensor):
            expect(got.numel() == 1, f"{what}: return one number, got a tensor of shape {tuple(got.shape)}")
            got = float(got)
        expect(isinstance(got, float), f"{what}: return a float, got {type(got).__name__}")
        logp = logits.double() - torch.logsumexp(logits.double(), dim=-1, keepdim=True)
        losses = [-float(logp[b, t, targets[b, t]]) for b in range(B) for t in range(T)]
        expected = math.exp(sum(losses) / len(losses))
        mistakes = [
            (sum(losses) / len(losses), f"{what}: this is the mean cross-entropy; the perplexity is its exponential"),
            (math.exp(sum(losses)), f"{what}: average the cross-entropy over the B * T tokens before taking exp"),
            (sum(math.exp(v) for v in losses) / len(losses),
             f"{what}: exp of the mean, not the mean of the exps (the geometric mean of 1 / p)"),
        ]
        for value, hint in mistakes:
            expect(not math.isclose(got, value, rel_tol=1e-6) or math.isclose(got, expected, rel_tol=1e-6), hint)
        expect(math.isclose(got, expected, rel_tol=1e-5),
               f"{what}: expected a perplexity of {expected:.6g}, got {got:.6g}; exp(mean over tokens of "
               "logsumexp(logits) - logit of the target)")

    uniform = [(2, 3, 17, 0.0)]  # equal logits: the perplexity is the vocabulary size
    cases = book_or_drawn(uniform + [(2, 5, 11, 1.0), (1, 7, 50, 3.0), (4, 1, 3, 10.0)], 62,
                          lambda gen: uniform + [(integer(gen, 1, 4), integer(gen, 1, 8), integer(gen, 2, 60),
                                                  float(integer(gen, 1, 5))) for _ in range(3)])
    return count_cases(cases, one)
