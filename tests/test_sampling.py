"""course_lib.decoding.sampling: top-k and top-p filters against brute-force enumeration of the kept sets on small
vocabularies, sample_next's draws against the distribution those sets define (a seeded statistical test),
and the edge cases the docstrings promise (ties, p -> 0, p = 1, temperature -> 0)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from course_lib import next_token_probs, sample_next, top_k_filter, top_p_filter

INF = float("inf")


# ------------------------------------------------------------------------- brute-force references


def kept_top_k(z: list[float], k: int) -> set[int]:
    """Every subset of the vocabulary, the one top-k must keep: the tokens with fewer than k strictly larger."""
    V = len(z)
    candidates = [set(s) for n in range(V + 1) for s in itertools.combinations(range(V), n)]
    # closed under "at least as large" (ties all in or all out) and holding every token with < k larger ones
    closed = [s for s in candidates if all(j in s for i in s for j in range(V) if z[j] >= z[i])]
    best = min((s for s in closed if all(i in s for i in range(V) if sum(z[j] > z[i] for j in range(V)) < k)),
               key=len)
    return {i for i in best if z[i] != -INF}  # a -inf logit stays -inf: probability 0 either way


def probabilities(z: list[float]) -> list[float]:
    finite = [v for v in z if v != -INF]
    top = max(finite)
    e = [0.0 if v == -INF else math.exp(v - top) for v in z]
    return [v / sum(e) for v in e]


def kept_top_p(z: list[float], p: float) -> set[int]:
    """The smallest subset, closed under "at least as likely", whose mass reaches p (enumerated)."""
    V, pi = len(z), probabilities(z)
    best = None
    for n in range(1, V + 1):
        for s in itertools.combinations(range(V), n):
            closed = all(j in s for i in s for j in range(V) if pi[j] >= pi[i])
            if closed and sum(pi[i] for i in s) >= p and (best is None or len(s) < len(best)):
                best = set(s)
    return {i for i in best if z[i] != -INF}


def mass_levels(z: list[float]) -> list[float]:
    """The masses of the sets {i: pi_i >= t} for every level t: where a p on the boundary would be ambiguous."""
    pi = probabilities(z)
    return [sum(q for q in pi if q >= t) for t in set(pi)]


def kept(filtered: torch.Tensor) -> set[int]:
    return {i for i, v in enumerate(filtered.tolist()) if v != -INF}


# Small vocabularies with many ties: logits drawn from a few values (and sometimes -inf).
logit_values = st.sampled_from([-INF, -2.0, -0.5, 0.0, 0.0, 1.0, 1.0, 2.5])
rows = st.lists(logit_values, min_size=1, max_size=6).filter(lambda r: any(v != -INF for v in r))


# ------------------------------------------------------------------------------------------ top-k


@given(rows, st.integers(1, 7))
def test_top_k_keeps_the_enumerated_set(z, k):
    out = top_k_filter(torch.tensor(z, dtype=torch.float64), k)
    assert kept(out) == kept_top_k(z, k)
    assert all(out[i] == z[i] for i in kept(out))  # kept logits unchanged


def test_top_k_keeps_ties_and_k_at_least_v_keeps_everything():
    z = torch.tensor([1.0, 3.0, 1.0, 0.0, 1.0])
    assert kept(top_k_filter(z, 2)) == {0, 1, 2, 4}  # the 2nd largest is 1.0: all three ones stay
    assert kept(top_k_filter(z, 1)) == {1}
    assert torch.equal(top_k_filter(z, 5), z) and torch.equal(top_k_filter(z, 50), z)


# ------------------------------------------------------------------------------------------ top-p


@given(rows, st.floats(0.0, 1.0))
def test_top_p_keeps_the_enumerated_nucleus(z, p):
    assume(p < 1.0)
    assume(all(abs(m - p) > 1e-9 for m in mass_levels(z)))  # not on a boundary, where rounding decides
    out = top_p_filter(torch.tensor(z, dtype=torch.float64), p)
    assert kept(out) == kept_top_p(z, p)
    assert all(out[i] == z[i] for i in kept(out))


@given(st.lists(st.floats(-5, 5), min_size=2, max_size=8), st.floats(0.01, 0.99), st.randoms(use_true_random=False))
def test_top_p_does_not_depend_on_the_order_of_the_vocabulary(z, p, rng):
    order = list(range(len(z)))
    rng.shuffle(order)
    a = top_p_filter(torch.tensor(z, dtype=torch.float64), p)
    b = top_p_filter(torch.tensor([z[i] for i in order], dtype=torch.float64), p)
    assert torch.equal(a[order], b)


@given(st.integers(1, 4), st.integers(1, 3), st.integers(2, 9), st.floats(0.0, 1.0), st.integers(0, 2**16))
def test_top_p_filters_each_row_of_a_batch_alone(b1, b2, V, p, seed):
    z = torch.randn(b1, b2, V, generator=torch.Generator().manual_seed(seed))
    out = top_p_filter(z, p)
    assert out.shape == z.shape and out.dtype == z.dtype
    for i, j in itertools.product(range(b1), range(b2)):
        assert torch.equal(out[i, j], top_p_filter(z[i, j], p))
    assert bool((out.amax(-1) == z.amax(-1)).all())  # the most likely token is always kept


def test_top_p_edge_cases():
    z = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    assert kept(top_p_filter(z, 0.0)[0]) == {0}  # p -> 0: greedy
    assert kept(top_p_filter(z, 1e-12)[0]) == {0}
    assert kept(top_p_filter(z, 0.5)[0]) == {0}  # 0.5 reached by the first token
    assert kept(top_p_filter(z, 0.5000001)[0]) == {0, 1}
    ties = torch.tensor([1.0, 2.0, 2.0, 0.0])
    assert kept(top_p_filter(ties, 0.0)) == {1, 2}  # the most likely token and its tie
    with_inf = torch.tensor([0.0, -INF, 1.0])
    assert torch.equal(top_p_filter(with_inf, 1.0), with_inf)  # p = 1: unchanged, a copy
    assert top_p_filter(with_inf, 1.0) is not with_inf
    far = torch.tensor([0.0, -200.0], dtype=torch.float64)  # the mass above token 1 rounds to exactly 1
    assert kept(top_p_filter(far, 1.0)) == {0, 1} and kept(top_p_filter(far, 0.999)) == {0}
    assert kept(top_p_filter(torch.tensor([0.0] * 5 + [-40.0]), 0.9999999999)) == {0, 1, 2, 3, 4}


def test_filters_keep_half_precision_and_never_touch_their_input():
    z = torch.tensor([0.1, 2.0, 1.0, -1.0], dtype=torch.float16)
    before = z.clone()
    for out in (top_k_filter(z, 2), top_p_filter(z, 0.7)):  # 0.64 < 0.7, then 0.87
        assert out.dtype == torch.float16 and kept(out) == {1, 2}
    assert torch.equal(z, before)


# ------------------------------------------------------------------------------------- sample_next


def expected_distribution(z: list[float], temperature: float, top_k: int | None, top_p: float | None) -> list[float]:
    """softmax(z / tau) on the enumerated kept sets: top-k of the tempered logits, then top-p of what remains."""
    z = [v / temperature for v in z]
    if top_k is not None:
        keep = kept_top_k(z, top_k)
        z = [v if i in keep else -INF for i, v in enumerate(z)]
    if top_p is not None:
        keep = kept_top_p(z, top_p)
        z = [v if i in keep else -INF for i, v in enumerate(z)]
    return probabilities(z)


@pytest.mark.parametrize("temperature, top_k, top_p", [
    (1.0, None, None), (0.5, None, None), (2.0, None, None), (1.0, 3, None), (1.0, None, 0.7),
    (0.7, 4, 0.8), (1.5, None, 0.9),
])
def test_sample_next_draws_from_the_enumerated_distribution(temperature, top_k, top_p):
    # 40,000 seeded draws: each frequency within 5 standard deviations sqrt(q (1 - q) / n) of its
    # probability q (a failure by chance has probability below 1e-5 per token); tokens outside the
    # kept set are never drawn.
    z = [1.2, 0.3, -0.4, 0.3, 2.0, -1.5]
    n = 40_000
    q = expected_distribution(z, temperature, top_k, top_p)
    logits = torch.tensor(z).expand(n, len(z))
    draws = sample_next(logits, temperature=temperature, top_k=top_k, top_p=top_p,
                        generator=torch.Generator().manual_seed(0))
    assert draws.shape == (n,) and draws.dtype == torch.long
    freq = torch.bincount(draws, minlength=len(z)).double() / n
    for token, (f, p) in enumerate(zip(freq.tolist(), q, strict=True)):
        if p == 0.0:
            assert f == 0.0, token
        else:
            assert abs(f - p) <= 5 * math.sqrt(p * (1 - p) / n), (token, f, p)


@pytest.mark.parametrize("temperature, top_k, top_p", [
    (1.0, None, None), (0.5, None, None), (2.0, 2, None), (1.0, None, 0.7), (0.7, 4, 0.8), (1.5, 5, 0.35),
])
def test_next_token_probs_is_the_enumerated_distribution_sample_next_draws_from(temperature, top_k, top_p):
    z = [1.2, 0.3, -0.4, 0.3, 2.0, -1.5]
    expected = torch.tensor(expected_distribution(z, temperature, top_k, top_p), dtype=torch.float64)
    rows = torch.tensor([z, z[::-1]], dtype=torch.float64)  # (2, V): each row alone
    got = next_token_probs(rows, temperature=temperature, top_k=top_k, top_p=top_p)
    assert got.shape == (2, 6) and got.dtype == torch.float64
    assert torch.allclose(got[0], expected, rtol=0, atol=1e-15)
    assert torch.allclose(got[1], expected.flip(0), rtol=0, atol=1e-15)
    # the tokens sample_next draws are those with a positive probability here, and only those
    draws = sample_next(rows[0].expand(2000, 6), temperature=temperature, top_k=top_k, top_p=top_p,
                        generator=torch.Generator().manual_seed(0))
    assert set(draws.tolist()) == {i for i, v in enumerate(expected.tolist()) if v > 0}


def test_next_token_probs_at_temperature_zero_is_the_argmax_sample_next_returns():
    z = torch.tensor([[0.0, 2.0, 2.0, 1.0], [3.0, -1.0, 0.0, 2.9]], dtype=torch.float16)
    probs = next_token_probs(z, temperature=0.0, top_k=2)
    assert probs.dtype == torch.float32  # half precision gives float32 probabilities, as for a draw
    assert probs.tolist() == [[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]  # the first index on a tie
    assert probs.argmax(-1).tolist() == sample_next(z, temperature=0.0).tolist()


def test_temperature_zero_is_the_argmax_and_tiny_temperatures_approach_it():
    z = torch.tensor([[0.0, 2.0, 2.0, 1.0], [3.0, -1.0, 0.0, 2.9]])
    assert sample_next(z, temperature=0.0).tolist() == [1, 0]  # the first index on a tie
    assert sample_next(z, temperature=0.0, top_k=3, top_p=0.2).tolist() == [1, 0]  # filters keep the argmax
    g = torch.Generator().manual_seed(0)
    draws = sample_next(z[1].expand(500, 4), temperature=1e-40, generator=g)  # 3 / 1e-40 would overflow
    assert bool((draws == 0).all())


def test_sample_next_takes_any_leading_shape_and_follows_its_generator():
    z = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(1))
    a = sample_next(z, generator=torch.Generator().manual_seed(5))
    b = sample_next(z, generator=torch.Generator().manual_seed(5))
    assert a.shape == (2, 3) and torch.equal(a, b)
    assert sample_next(z[0, 0], temperature=0.0).shape == ()
    state = torch.random.get_rng_state()
    sample_next(z, generator=torch.Generator().manual_seed(5))
    assert torch.equal(torch.random.get_rng_state(), state)  # the global generator is left alone


@pytest.mark.parametrize("call, error, words", [
    (lambda: top_k_filter(torch.zeros(3), 0), ValueError, "k must be a positive int"),
    (lambda: top_k_filter(torch.zeros(3), 1.5), TypeError, "k"),
    (lambda: top_k_filter(torch.zeros(3, dtype=torch.long), 1), TypeError, "logits must be a floating-point"),
    (lambda: top_k_filter(torch.tensor(1.0), 1), ValueError, "shape (..., V)"),
    (lambda: top_k_filter(torch.zeros(2, 0), 1), ValueError, "shape (..., V)"),
    (lambda: top_p_filter(torch.zeros(3), 1.5), ValueError, "p must be in [0, 1]"),
    (lambda: top_p_filter(torch.zeros(3), -0.1), ValueError, "p must be in [0, 1]"),
    (lambda: top_p_filter(torch.zeros(3), float("nan")), ValueError, "p must be finite"),
    (lambda: top_p_filter(torch.tensor([0.0, float("nan")]), 0.5), ValueError, "NaN or +inf"),
    (lambda: top_p_filter(torch.tensor([[0.0, 1.0], [-INF, -INF]]), 0.5), ValueError, "a row is all -inf"),
    (lambda: sample_next(torch.zeros(3), temperature=-1.0), ValueError, "temperature must be at least 0"),
    (lambda: sample_next(torch.zeros(3), top_k=0), ValueError, "top_k must be a positive int"),
    (lambda: sample_next(torch.zeros(3), top_p=2.0), ValueError, "top_p must be in [0, 1]"),
    (lambda: sample_next(torch.zeros(3), generator=0), TypeError, "generator must be a torch.Generator"),
    (lambda: sample_next([0.0, 1.0]), TypeError, "logits must be a torch.Tensor"),
    (lambda: next_token_probs(torch.zeros(3), temperature=-1.0), ValueError, "temperature must be at least 0"),
    (lambda: next_token_probs(torch.zeros(3), top_p=2.0), ValueError, "top_p must be in [0, 1]"),
    (lambda: next_token_probs(torch.tensor([-INF, -INF])), ValueError, "a row is all -inf"),
])
def test_bad_arguments_are_named(call, error, words):
    with pytest.raises(error, match=None) as info:
        call()
    assert words in str(info.value)
