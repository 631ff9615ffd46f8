r"""Checkers for the exercises of section 13.1, speculative decoding.

The references are computed here from the definitions, independently of ``course_lib.decoding.speculative``:
the acceptance probability as :math:`\sum_x q(x)\min(1, p(x)/q(x))` summed token by token in float64; the
distribution of the token the rule emits when a rejected proposal is replaced by a fresh draw from :math:`p`,
from its two cases (accepted, or rejected then drawn); the expected tokens per target step as the sum over
:math:`j` of the probability that the first :math:`j` proposals are accepted; the best number of proposals
by trying every one. Typical mistakes (the probability that two independent draws agree, the bonus token
forgotten, the draft's cost ignored, ...) are recognised so that the message can say what to fix.
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


def _pair(g: torch.Generator, shape: tuple[int, ...], V: int, zeros: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Two float64 distributions p (target) and q (draft) of shape (*shape, V); with ``zeros``, each puts no
    mass on some tokens (as after top-k), on different tokens, so that p(x) = 0 < q(x) happens."""
    z = 2 * torch.randn(2, *shape, V, generator=g, dtype=torch.float64)
    if zeros and V >= 3:
        z[0, ..., 0] = -math.inf
        z[1, ..., V - 1] = -math.inf
    p, q = torch.softmax(z, dim=-1)
    return p, q


def _acceptance(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """sum_x q(x) min(1, p(x) / q(x)), token by token (0 where q(x) = 0: such x is never proposed)."""
    total = torch.zeros(p.shape[:-1], dtype=torch.float64)
    for x in range(p.shape[-1]):
        px, qx = p[..., x], q[..., x]
        ratio = torch.where(qx > 0, px / torch.where(qx > 0, qx, 1.0), 0.0)
        total = total + qx * ratio.clamp(max=1.0)
    return total


# --- speculative.acceptance_rate ----------------------------------------------------------------


@checker("speculative.acceptance_rate",
         "acceptance_rate(p, q): the probability that a token drawn from q is accepted by the rule, for (..., V) rows")
def check_acceptance_rate(answer: Callable) -> int:
    g = generator(71)

    def one(case: tuple[tuple[int, ...], int, bool]) -> None:
        shape, V, zeros = case
        p, q = _pair(g, shape, V, zeros)
        what = f"p, q of shape {(*shape, V)}" + (" with zeros" if zeros else "")
        got = call(answer, what, p.clone(), q.clone())
        expect_tensor(got, what, tuple(shape), "(...)")
        expected = _acceptance(p, q)
        expect_match(got, expected, what, [
            ((p * q).sum(-1), f"{what}: sum p(x) q(x) is the probability that two independent draws agree; the "
                              "rule accepts x with probability min(1, p(x)/q(x)), so average that over x ~ q"),
            ((p * (p / q).nan_to_num(posinf=1.0).clamp(max=1.0)).sum(-1),
             f"{what}: the proposal is drawn from the draft's q, so weight min(1, p/q) by q(x), not by p(x)"),
            (1 - (p - q).abs().sum(-1), f"{what}: the total variation distance is half the sum of |p - q|: "
                                        "alpha = 1 - (1/2) sum |p(x) - q(x)|"),
            ((p / q).nan_to_num(posinf=1.0).clamp(max=1.0).mean(-1),
             f"{what}: a plain mean of min(1, p/q) over the vocabulary; weight each token by q(x)"),
        ], atol=1e-9, rtol=1e-9)

    cases = book_or_drawn([((), 2, False), ((), 5, False), ((3,), 6, True), ((2, 4), 10, True)], 72,
                          lambda gen: [((), integer(gen, 2, 9), False),
                                       ((integer(gen, 1, 5),), integer(gen, 3, 12), True),
                                       ((2, integer(gen, 1, 3)), integer(gen, 3, 8), True)])
    n_checks = count_cases(cases, one)
    # p = q accepts everything; disjoint supports accept nothing
    same = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
    disjoint = (torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64), torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))
    for p, q, value in ((same, same, 1.0), (*disjoint, 0.0)):
        what = f"p = {p.tolist()}, q = {q.tolist()}"
        got = call(answer, what, p.clone(), q.clone())
        expect(isinstance(got, torch.Tensor) and got.shape == () and abs(float(got) - value) < 1e-12,
               f"{what}: expected a 0-d tensor {value} (p = q accepts every proposal; disjoint supports accept none)"
               f", got {got!r}")
    return n_checks + 2


# --- speculative.resample_from_p ----------------------------------------------------------------


@checker("speculative.resample_from_p",
         "resample_from_p(p, q): the distribution of the emitted token when a rejected proposal is replaced by a "
         "fresh draw from p")
def check_resample_from_p(answer: Callable) -> int:
    g = generator(81)

    def one(case: tuple[tuple[int, ...], int, bool]) -> None:
        shape, V, zeros = case
        p, q = _pair(g, shape, V, zeros)
        what = f"p, q of shape {(*shape, V)}" + (" with zeros" if zeros else "")
        got = call(answer, what, p.clone(), q.clone())
        expect_tensor(got, what, (*shape, V), "(..., V)")
        accepted = torch.minimum(p, q)  # q(x) min(1, p(x)/q(x)): x proposed and kept
        expected = accepted + (1 - _acceptance(p, q))[..., None] * p
        expect_match(got, expected, what, [
            (p, f"{what}: that is p itself, what the correct rule gives (it redraws from max(0, p - q)); with a "
                "fresh draw from p, x is emitted when it is proposed and kept, min(p(x), q(x)), or after any "
                "rejection, (1 - alpha) p(x)"),
            (accepted, f"{what}: you have the case where the proposal is kept; add the rejected case: probability "
                       "1 - alpha, then x with probability p(x)"),
            (accepted + (1 - _acceptance(p, q))[..., None] * q,
             f"{what}: after a rejection the token is drawn from p (the target), not from q"),
        ], atol=1e-9, rtol=1e-9)

    cases = book_or_drawn([((), 3, False), ((), 6, True), ((4,), 5, True), ((2, 3), 8, False)], 82,
                          lambda gen: [((), integer(gen, 3, 9), True),
                                       ((integer(gen, 1, 5),), integer(gen, 3, 10), False),
                                       ((2, integer(gen, 1, 3)), integer(gen, 3, 8), True)])
    return count_cases(cases, one)


# --- speculative.expected_tokens ----------------------------------------------------------------


def _expected_tokens(alpha: float, k: int) -> float:
    """sum_{j=0..k} P(the first j proposals all accepted) = sum_j alpha^j: the bonus or corrected token is
    always emitted, and the j-th proposal counts when it and all before it are accepted."""
    return sum(alpha**j for j in range(k + 1))


@checker("speculative.expected_tokens",
         "expected_tokens(alpha, k): the expected number of tokens one target step yields with k proposals, each "
         "accepted with probability alpha")
def check_expected_tokens(answer: Callable) -> int:
    def one(case: tuple[float, int]) -> None:
        alpha, k = case
        what = f"alpha={alpha}, k={k}"
        got = call(answer, what, alpha, k)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = float(got)
        expect(isinstance(got, (float, int)) and not isinstance(got, bool),
               f"{what}: return a number, got {type(got).__name__} {got!r}")
        expect(math.isfinite(got), f"{what}: got {got}; at alpha = 1 every proposal is accepted: k + 1 tokens")
        expected = _expected_tokens(alpha, k)
        expect_same(got, expected, [
            (expected - 1, f"{what}: {got:.6g} counts the accepted proposals only; every round also emits one "
                           "token of the target's (the replacement of the rejected one, or the bonus token)"),
            (_expected_tokens(alpha, k - 1), f"{what}: {got:.6g} stops one term short: with k proposals a round "
                                             "yields up to k + 1 tokens, (1 - alpha^(k+1)) / (1 - alpha)"),
            (1 + k * alpha, f"{what}: {got:.6g} = 1 + k alpha assumes each proposal counts on its own; proposal j "
                            "counts only when all before it are accepted too (probability alpha^j)"),
        ], otherwise=lambda: f"{what}: expected {expected:.6g} tokens per target step, got {got!r}: "
                             "sum of alpha^j for j = 0 .. k", same=lambda a, b: math.isclose(a, b, rel_tol=1e-9,
                                                                                             abs_tol=1e-12))

    cases = book_or_drawn([(0.0, 4), (0.5, 1), (0.6, 4), (0.8, 8), (1.0, 3), (0.95, 16)], 91,
                          lambda gen: [(0.0, integer(gen, 1, 6)), (1.0, integer(gen, 1, 9))]
                          + [(integer(gen, 5, 95) / 100, integer(gen, 1, 12)) for _ in range(4)])
    return count_cases(cases, one)


# --- speculative.best_k -------------------------------------------------------------------------


def _speedup(alpha: float, k: int, c: float) -> float:
    """Leviathan et al.'s expected speed-up: tokens per round over the round's cost in target steps, k c + 1."""
    return _expected_tokens(alpha, k) / (k * c + 1)


def _best(alpha: float, c: float, k_max: int) -> int:
    return max(range(1, k_max + 1), key=lambda k: (_speedup(alpha, k, c), -k))


@checker("speculative.best_k",
         "best_k(alpha, c, k_max): the number of proposals 1 .. k_max with the largest expected speed-up, for an "
         "acceptance rate alpha and a draft step costing c target steps")
def check_best_k(answer: Callable) -> int:
    def one(case: tuple[float, float, int]) -> None:
        alpha, c, k_max = case
        what = f"alpha={alpha}, c={c}, k_max={k_max}"
        got = call(answer, what, alpha, c, k_max)
        expect(isinstance(got, int) and not isinstance(got, bool) and 1 <= got <= k_max,
               f"{what}: return an int k in 1 .. {k_max}, got {got!r}")
        expected = _best(alpha, c, k_max)
        no_bonus = max(range(1, k_max + 1), key=lambda k: ((_expected_tokens(alpha, k) - 1) / (k * c + 1), -k))
        expect_same(got, expected, [
            (k_max, f"{what}: k = {got} is the most proposals allowed; each draft step costs c = {c} target "
                    f"steps, so past some k the extra tokens do not pay for it (here k = {expected})"),
            (no_bonus, f"{what}: k = {got} maximises the accepted proposals only; a round also yields the target's "
                       f"own token, so the tokens per round are (1 - alpha^(k+1)) / (1 - alpha)"),
        ], otherwise=lambda: f"{what}: expected k = {expected} (speed-up {_speedup(alpha, expected, c):.4f}), got "
                             f"k = {got} (speed-up {_speedup(alpha, got, c):.4f}); the speed-up of k proposals is "
                             "(1 - alpha^(k+1)) / ((1 - alpha)(k c + 1))")

    cases = book_or_drawn([(0.8, 0.05, 20), (0.6, 0.1, 20), (0.9, 0.02, 30), (0.5, 0.3, 10), (0.95, 0.25, 12),
                           (0.7, 0.0, 8)], 101,
                          lambda gen: [(integer(gen, 40, 95) / 100, integer(gen, 1, 30) / 100, integer(gen, 8, 30))
                                       for _ in range(6)])
    return count_cases(cases, one)
