"""The chapter 13 checkers accept correct answers (the notebook's solutions, and answers written here independently:
FLOPs counted by PyTorch's FlopCounterMode on a loop over the queries, blocks counted by cl.BlockPool/PagedKVCache,
masks read off cl.SinkCache) and reject typical mistakes with a specific hint (their stubs: test_exercises_core.py)."""

from __future__ import annotations

import pytest
import torch
from exercise_helpers import fails_with, passes
from torch.utils.flop_counter import FlopCounterMode

import course_lib as cl

NOTEBOOK = "13_serving.ipynb"


# --- serving.prefill_cost -----------------------------------------------------------------------


def test_prefill_notebook_solution_passes(solution_function):
    answer = solution_function("ch13-ex-prefill", "prefill_cost")
    passes("serving.prefill_cost", answer)
    passes("serving.prefill_cost", answer, variant=1)


def test_the_prefill_count_is_what_a_causal_loop_multiplies(solution_function):
    # An independent count: FlopCounterMode on one layer's attention computed query by query, causal, plus the
    # matrix products of a linear layer standing for the weights.
    answer = solution_function("ch13-ex-prefill", "prefill_cost")
    heads, kv_heads, d_h, n, batch = 4, 2, 8, 7, 3
    q = torch.randn(batch, heads, n, d_h)
    k, v = torch.randn(batch, kv_heads, n, d_h), torch.randn(batch, kv_heads, n, d_h)
    linear = torch.nn.Linear(16, 12, bias=False)
    x = torch.randn(batch * n, 16)
    with FlopCounterMode(display=False) as counter:
        linear(x)
        keys, values = (t.repeat_interleave(heads // kv_heads, 1) for t in (k, v))
        for i in range(n):  # query i sees keys 0 .. i
            weights = torch.softmax(q[:, :, i:i + 1] @ keys[:, :, :i + 1].transpose(-2, -1), -1)
            weights @ values[:, :, :i + 1]
    flops, nbytes = answer(16 * 12, 1, heads, kv_heads, d_h, batch, n, 4)
    assert flops == counter.get_total_flops()
    assert nbytes == 4 * (16 * 12 + 2 * batch * kv_heads * n * d_h)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (lambda p, L, h, kv, d, b, n, s: (2 * p * b * n + 4 * b * L * h * d * n * n, s * (p + 2 * b * L * kv * d * n)),
         "not n^2"),
        (lambda p, L, h, kv, d, b, n, s: (p * b * n + b * L * h * d * n * (n + 1), s * (p + 2 * b * L * kv * d * n)),
         "counts as 2 floating-point operations"),
        (lambda p, L, h, kv, d, b, n, s: (2 * p * b * n + 2 * b * L * h * d * n * (n + 1),
                                          s * (p + b * L * kv * d * n)),
         "keys AND values"),
        (lambda p, L, h, kv, d, b, n, s: (2 * p * b * n + 2 * b * L * h * d * n * (n + 1), s * p),
         "writes into the cache too"),
        (lambda p, L, h, kv, d, b, n, s: (2 * p * b * n + 2 * b * L * h * d * n * (n + 1),
                                          s * (p * b * n + 2 * b * L * kv * d * n)), "read once for the whole pass"),
        (lambda *args: (1.0, 2.0), "exact Python ints"),
        (lambda *args: 3, "return the pair (flops, bytes)"),
    ],
)
def test_prefill_wrong_answers_fail_with_hint(answer, hint):
    fails_with("serving.prefill_cost", answer, hint)


# --- serving.blocks_with_sharing ----------------------------------------------------------------


def blocks_by_the_library(prompt, samples, generated, block_size):
    # Each sample's own cache in a shared pool, and the prompt's full blocks held once: counted by cl.BlockPool.
    pool = cl.BlockPool(4096, block_size, num_kv_heads=1, head_size=1)
    shared = prompt // block_size
    own = [cl.PagedKVCache(pool) for _ in range(samples if generated else 1)]
    for cache in own:  # the tokens after the shared blocks: the prompt's rest, then the new ones
        rest = prompt % block_size + generated
        if rest:
            cache.update(torch.zeros(1, 1, rest, 1), torch.zeros(1, 1, rest, 1))
    return shared + pool.used


def test_sharing_notebook_solution_and_the_library_count_pass(solution_function):
    answer = solution_function("ch13-ex-sharing", "blocks_with_sharing")
    for candidate in (answer, blocks_by_the_library):
        passes("serving.blocks_with_sharing", candidate, library=candidate is not answer)
        passes("serving.blocks_with_sharing", candidate, variant=1, library=candidate is not answer)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (lambda p, s, g, b: s * -(-(p + g) // b), "that is without sharing"),
        (lambda p, s, g, b: -(-p // b) + s * -(-g // b), "cannot stay shared"),
        (lambda p, s, g, b: p // b + s * -(-g // b), "its new tokens fill that block first"),
        (lambda p, s, g, b: (p + s * g) / b, "exact Python int"),
    ],
)
def test_sharing_wrong_answers_fail_with_hint(answer, hint):
    fails_with("serving.blocks_with_sharing", answer, hint)


# --- serving.sink_mask --------------------------------------------------------------------------


def mask_read_off_the_cache(n, window, sinks):
    # Which tokens cl.SinkCache (or SlidingWindowCache, without sinks) returns at each step: keys hold their position.
    cache = cl.SinkCache(window, sinks) if sinks else cl.SlidingWindowCache(window)
    keep = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        seen, _ = cache.update(torch.full((1, 1, 1, 1), float(i)), torch.zeros(1, 1, 1, 1))
        keep[i, seen.flatten().long()] = True
    return keep


def test_sink_mask_notebook_solution_and_the_library_pass(solution_function):
    answer = solution_function("ch13-ex-sink-mask", "sink_mask")
    for candidate in (answer, mask_read_off_the_cache):
        passes("serving.sink_mask", candidate, library=candidate is not answer)
        passes("serving.sink_mask", candidate, variant=1, library=candidate is not answer)


def _grid(n):
    return torch.arange(n)[:, None], torch.arange(n)[None, :]


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (lambda n, w, s: (lambda i, j: (j <= i) & (i - j < w))(*_grid(n)), "without the sinks"),
        (lambda n, w, s: (lambda i, j: (j <= i) & ((j < s) | (i - j <= w - s)))(*_grid(n)), "one recent key too many"),
        (lambda n, w, s: (lambda i, j: (j <= i) & ((j < s) | (i - j < w)))(*_grid(n)), "the sinks take"),
        (lambda n, w, s: (lambda i, j: (j < s) | ((j <= i) & (i - j < w - s)))(*_grid(n)), "keep the causal rule"),
        (lambda n, w, s: (lambda i, j: ((j <= i) & ((j < s) | (i - j < w - s))).int())(*_grid(n)), "a bool mask"),
        (lambda n, w, s: torch.ones(n, n - 1, dtype=torch.bool), "expected shape"),
        (lambda n, w, s: (lambda i, j: (j <= i) & ((j < s) | (i - j < w - s - 1)))(*_grid(n)), "differs at"),
    ],
)
def test_sink_mask_wrong_answers_fail_with_hint(answer, hint):
    fails_with("serving.sink_mask", answer, hint)
