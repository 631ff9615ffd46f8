"""The chapter 10 checkers accept the notebook's solutions and reject typical mistakes
with a specific hint (their stubs: test_exercises_core.py)."""

from __future__ import annotations

import math

import nbformat
import pytest
import torch
from exercise_helpers import BOOK, fails_with, passes

import course_lib as cl
from course_lib.teaching.exercises import list_exercises

NOTEBOOK = "10_efficient_attention.ipynb"


# --- efficient.merge_softmax_states -------------------------------------------------------------


def unscaled_sum(m_a, l_a, m_b, l_b):
    return torch.maximum(m_a, m_b), l_a + l_b


def inverted_factor(m_a, l_a, m_b, l_b):
    m = torch.maximum(m_a, m_b)
    return m, l_a * torch.exp(m - m_a).nan_to_num(0, 0, 0) + l_b * torch.exp(m - m_b).nan_to_num(0, 0, 0)


def nan_on_empty_rows(m_a, l_a, m_b, l_b):
    m = torch.maximum(m_a, m_b)  # exp(-inf - (-inf)) = NaN where both parts are empty
    return m, l_a * torch.exp(m_a - m) + l_b * torch.exp(m_b - m)


def test_merge_notebook_solution_passes(solution_function):
    merge = solution_function("ch10-ex-merge", "merge_softmax_states")
    assert passes("efficient.merge_softmax_states", merge).n_checks == 4
    passes("efficient.merge_softmax_states", merge, variant=1)


def test_merge_is_the_online_softmax_of_the_whole_row(solution_function):
    # The merged state equals the library's online softmax over the concatenated row (an independent path).
    merge = solution_function("ch10-ex-merge", "merge_softmax_states")
    x = torch.randn(3, 11, dtype=torch.float64)
    a, b = cl.online_softmax(x[:, :4], 4), cl.online_softmax(x[:, 4:], 7)
    m, den = merge(a.maxima[:, -1], a.denominators[:, -1], b.maxima[:, -1], b.denominators[:, -1])
    torch.testing.assert_close(m + torch.log(den), cl.online_softmax(x, 11).lse)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (unscaled_sum, "rescale each to the merged maximum"),
        (inverted_factor, "not exp(m - m_a)"),
        (nan_on_empty_rows, "your l contains NaN"),
        (lambda m_a, l_a, m_b, l_b: (m_a, l_a), "the merged maximum m"),
        (lambda m_a, l_a, m_b, l_b: torch.maximum(m_a, m_b), "return the pair (m, l)"),
    ],
)
def test_merge_wrong_answers_fail_with_hint(answer, hint):
    fails_with("efficient.merge_softmax_states", answer, hint)


# --- efficient.causal_tiles ---------------------------------------------------------------------


def every_pair(n_q, n_k, block_q, block_k):
    # Right, but by looking at every pair: too slow for the large cases (the checker would wait), so the test
    # only runs it on small sizes against the notebook's solution.
    return sum(any(j <= i + n_k - n_q for i in range(q0, min(q0 + block_q, n_q))
                   for j in range(k0, min(k0 + block_k, n_k)))
               for q0 in range(0, n_q, block_q) for k0 in range(0, n_k, block_k))


def top_left(n_q, n_k, block_q, block_k):
    return sum(min(min(q0 + block_q, n_q) - 1, n_k - 1) // block_k + 1 for q0 in range(0, n_q, block_q))


def below_the_diagonal_only(n_q, n_k, block_q, block_k):
    total = 0
    for q0 in range(0, n_q, block_q):
        first_query = q0 + n_k - n_q  # the key position of the block's first query
        total += max(0, (first_query + 1) // block_k) if first_query >= 0 else 0
    return total


def test_tiles_notebook_solution_passes(solution_function):
    causal_tiles = solution_function("ch10-ex-tiles", "causal_tiles")
    assert passes("efficient.causal_tiles", causal_tiles).n_checks == 9
    passes("efficient.causal_tiles", causal_tiles, variant=2)


@pytest.mark.parametrize("size", [(8, 8, 2, 2), (3, 11, 2, 4), (11, 4, 3, 2), (17, 17, 5, 4), (1, 1, 1, 1)])
def test_tiles_solution_agrees_with_every_pair_and_the_library_plan(solution_function, size):
    causal_tiles = solution_function("ch10-ex-tiles", "causal_tiles")
    assert causal_tiles(*size) == every_pair(*size) == int((cl.flash_tile_map(*size, causal=True) > 0).sum())


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (top_left, "aligned bottom-right"),
        (below_the_diagonal_only, "a tile on the diagonal is computed too"),
        (lambda n_q, n_k, block_q, block_k: -(-n_q // block_q) * -(-n_k // block_k), "that is every tile"),
        (lambda n_q, n_k, block_q, block_k: float(every_pair(n_q, n_k, block_q, block_k)), "exact Python int"),
        (lambda n_q, n_k, block_q, block_k: n_q * n_k // 2, "expected"),
    ],
)
def test_tiles_wrong_answers_fail_with_hint(answer, hint):
    fails_with("efficient.causal_tiles", answer, hint)


# --- efficient.max_cache_tokens -----------------------------------------------------------------


def test_cache_notebook_solution_passes(solution_function):
    max_cache_tokens = solution_function("ch10-ex-cache", "max_cache_tokens")
    assert passes("efficient.max_cache_tokens", max_cache_tokens).n_checks == 5
    passes("efficient.max_cache_tokens", max_cache_tokens, variant=1)


def test_cache_solution_matches_the_bytes_of_the_library_cache(solution_function):
    max_cache_tokens = solution_function("ch10-ex-cache", "max_cache_tokens")
    layer, cache = cl.MultiHeadAttention(16, 4, num_kv_heads=2).eval(), cl.KVCache()
    x = torch.randn(3, 5, 16)
    layer(x, x, x, causal=True, kv_cache=cache)  # 5 tokens, 3 sequences, 2 heads of 4 floats
    assert max_cache_tokens(cache.nbytes, 1, 2, 4, 3, 4) == 5
    assert max_cache_tokens(cache.nbytes - 1, 1, 2, 4, 3, 4) == 4


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (lambda m, layers, h, d, b, w: m // (layers * h * d * b * w), "keys AND values"),
        (lambda m, layers, h, d, b, w: -(-m // (2 * layers * h * d * b * w)), "round down"),
        (lambda m, layers, h, d, b, w: m // (2 * layers * h * d * w), "every sequence of the batch"),
        (lambda m, layers, h, d, b, w: m / (2 * layers * h * d * b * w), "exact Python int"),
        (lambda m, layers, h, d, b, w: m // (2 * layers * 32 * d * b * w), "one token costs"),
    ],
)
def test_cache_wrong_answers_fail_with_hint(answer, hint):
    fails_with("efficient.max_cache_tokens", answer, hint)


# --- efficient.quadratic_feature_map ------------------------------------------------------------


def test_quadratic_notebook_solution_passes(solution_function):
    phi = solution_function("ch10-ex-quadratic", "quadratic_feature_map")
    assert passes("efficient.quadratic_feature_map", phi).n_checks == 3
    passes("efficient.quadratic_feature_map", phi, variant=1)


def test_the_symmetric_features_with_root_two_pass_too():
    def symmetric(x):
        d = x.shape[-1]
        rows, cols = torch.triu_indices(d, d)
        weight = (rows == cols).to(x.dtype) + math.sqrt(2) * (rows != cols).to(x.dtype)
        return x[..., rows] * x[..., cols] * weight

    passes("efficient.quadratic_feature_map", symmetric)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (lambda x: x**2, "without the cross terms"),
        (lambda x: x, "that is the kernel q . k"),
        (lambda x: (x[..., :, None] * x[..., None, :]).flatten(-3), "act on the last axis only"),
        (lambda x: (x[..., :, None] * x[..., None, :]).flatten(-2).long(), "floating-point"),
        (lambda x: 2 * (x[..., :, None] * x[..., None, :]).flatten(-2), "values differ"),
    ],
)
def test_quadratic_wrong_answers_fail_with_hint(answer, hint):
    fails_with("efficient.quadratic_feature_map", answer, hint)


# --- efficient.causal_flash_attention -----------------------------------------------------------


def without_the_mask(q, k, v, block):
    return torch.softmax(q @ k.T / math.sqrt(q.shape[1]), dim=-1) @ v


def dense_causal(q, k, v, block):
    # Right values, through the (n, n) matrix the exercise is about avoiding.
    scores = (q @ k.T / math.sqrt(q.shape[1])).masked_fill(torch.ones(len(q), len(k), dtype=torch.bool).triu(1),
                                                           -math.inf)
    return torch.softmax(scores, dim=-1) @ v


def every_tile(q, k, v, block):
    # Right values, tile by tile, but visiting the tiles above the diagonal too (all masked there).
    n, d = q.shape
    out = torch.empty(n, v.shape[1], dtype=v.dtype)
    for q0 in range(0, n, block):
        q1 = min(q0 + block, n)
        m = torch.full((q1 - q0,), -math.inf, dtype=v.dtype)
        den = torch.zeros(q1 - q0, dtype=v.dtype)
        acc = torch.zeros(q1 - q0, v.shape[1], dtype=v.dtype)
        for k0 in range(0, n, block):
            s = q[q0:q1] @ k[k0:k0 + block].T / math.sqrt(d)
            s = s.masked_fill(torch.arange(k0, k0 + s.shape[1]) > torch.arange(q0, q1)[:, None], -math.inf)
            m_new = torch.maximum(m, s.amax(1))
            p = torch.exp(s - m_new[:, None])
            den, acc = torch.exp(m - m_new) * den + p.sum(1), torch.exp(m - m_new)[:, None] * acc + p @ v[k0:k0 + block]
            m = m_new
        out[q0:q1] = acc / den[:, None]
    return out


def test_causal_flash_notebook_solution_passes(solution_function):
    causal_flash_attention = solution_function("ch10-ex-causal-flash", "causal_flash_attention")
    assert passes("efficient.causal_flash_attention", causal_flash_attention).n_checks == 7
    passes("efficient.causal_flash_attention", causal_flash_attention, variant=1)


def test_causal_flash_solution_equals_the_library(solution_function):
    causal_flash_attention = solution_function("ch10-ex-causal-flash", "causal_flash_attention")
    q, k, v = (torch.randn(37, 5, dtype=torch.float64) for _ in range(3))
    torch.testing.assert_close(causal_flash_attention(q, k, v, 8), cl.flash_attention(q, k, v, causal=True))


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (without_the_mask, "without the look-ahead mask"),
        (lambda q, k, v, block: dense_causal(q * math.sqrt(q.shape[1]), k, v, block), "divided by sqrt(d)"),
        (dense_causal, "the size of the (n, n) score matrix"),
        (every_tile, "skip the tiles above the diagonal"),
        (lambda q, k, v, block: v[:, :1], "expected shape"),
    ],
)
def test_causal_flash_wrong_answers_fail_with_hint(answer, hint):
    fails_with("efficient.causal_flash_attention", answer, hint)


def test_causal_flash_crash_names_the_case():
    fails_with("efficient.causal_flash_attention", lambda q, k, v, block: q.reshape(-1, block + 1),
               "your function raised RuntimeError")


# --- the notebook's exercises and their checkers ------------------------------------------------


def test_every_coding_exercise_of_the_notebook_calls_a_registered_checker():
    nb = nbformat.read(BOOK / NOTEBOOK, as_version=4)
    calls = [cell.source for cell in nb.cells if cell.cell_type == "code" and 'check("efficient.' in cell.source]
    assert len(calls) == 10  # each checker runs on the stub (after it) and on the worked solution (inside it)
    names = {c.split('"')[1] for c in calls}
    assert names == {"efficient.merge_softmax_states", "efficient.causal_tiles", "efficient.max_cache_tokens",
                     "efficient.quadratic_feature_map", "efficient.causal_flash_attention"}
    assert names <= set(list_exercises())
    assert sum("{exercise}" in c.source for c in nb.cells if c.cell_type == "markdown") >= 4
