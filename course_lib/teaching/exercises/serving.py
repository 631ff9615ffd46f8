r"""Checkers for the exercises of chapter 13, serving a language model.

The references are computed here from definitions, independently of ``course_lib.attention.cache``: the cost of a
prefill from the count of multiply-adds over the (query, key) pairs the causal mask keeps and of the numbers read
and written; the blocks of several samples of one prompt by simulating their writes token by token with reference
counts and copy on write; the keep-mask of StreamingLLM's cache by simulating which tokens a cache of sinks and a
window holds when each query comes. Typical mistakes (every pair of the square counted, the values or the cache
writes forgotten, the weights read once per token, the partial block left shared, the sinks seen before they
exist, a window one token off) are recognised by comparing the answer with the result of that mistake, so the
message can say what to fix.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._core import (
    book_or_drawn,
    call,
    checker,
    count_cases,
    expect,
    expect_same,
    expect_tensor,
    integer,
)

# --- serving.prefill_cost ----------------------------------------------------------------------


def _prefill_cost(params: int, layers: int, heads: int, kv_heads: int, head_size: int, batch: int, prompt: int,
                  bytes_per_number: int, *, causal: bool = True, values: bool = True, cache: bool = True,
                  weights_per_token: bool = False, flops_per_mac: int = 2) -> tuple[int, int]:
    """(FLOPs, bytes) of one pass over ``batch`` prompts of ``prompt`` tokens; the keywords give the mistakes."""
    n = prompt
    pairs = n * (n + 1) // 2 if causal else n * n  # (query, key) pairs per head and sequence
    macs = params * batch * n + 2 * batch * layers * heads * head_size * pairs  # scores, then the sum of values
    weight_reads = params * (batch * n if weights_per_token else 1)
    written = (2 if values else 1) * batch * layers * kv_heads * head_size * n if cache else 0
    return flops_per_mac * macs, (weight_reads + written) * bytes_per_number


@checker("serving.prefill_cost",
         "prefill_cost(params, layers, heads, kv_heads, head_size, batch, prompt, bytes_per_number): the FLOPs and "
         "bytes of one causal pass over the prompts")
def check_prefill_cost(answer: Callable) -> int:
    def draw(g: torch.Generator) -> list[tuple[int, ...]]:
        return [(integer(g, 10**6, 10**10), integer(g, 2, 80), h, kv, 128, integer(g, 1, 16), integer(g, 1, 8192),
                 integer(g, 1, 4)) for h, kv in ((32, 32), (64, 8), (16, 1), (8, 2))]

    cases = book_or_drawn([
        (6_476_005_376, 32, 32, 32, 128, 1, 512, 2),  # Llama 2 7B's blocks
        (6_476_005_376, 32, 32, 8, 128, 4, 4096, 2),
        (13_000_000, 4, 8, 2, 64, 16, 2048, 4),
        (1000, 1, 2, 1, 4, 3, 5, 4),
        (1000, 2, 2, 2, 4, 1, 1, 4),
    ], 41, draw)

    def one(args: tuple[int, ...]) -> None:
        params, layers, heads, kv_heads, head_size, batch, prompt, width = args
        case = (f"params={params}, layers={layers}, heads={heads}, kv_heads={kv_heads}, head_size={head_size}, "
                f"batch={batch}, prompt={prompt}, bytes_per_number={width}")
        got = call(answer, case, *args)
        expect(isinstance(got, tuple) and len(got) == 2,
               f"{case}: return the pair (flops, bytes), got {type(got).__name__} {got!r}")
        expect(all(isinstance(v, int) and not isinstance(v, bool) for v in got),
               f"{case}: return exact Python ints (counts of operations and bytes; use //), got {got!r}")
        expected = _prefill_cost(*args)
        values = f"{case}: expected (flops, bytes) = {expected}, got {got}"
        mistakes = [
            (_prefill_cost(*args, causal=False),
             f"{values}. With the causal mask query i sees i + 1 keys: n(n + 1)/2 pairs per head, not n^2"),
            (_prefill_cost(*args, flops_per_mac=1),
             f"{values}. A multiply-add counts as 2 floating-point operations (a multiplication and an addition)"),
            (_prefill_cost(*args, values=False),
             f"{values}. The pass writes keys AND values into the cache: 2 x layers x kv_heads x head_size x prompt "
             "numbers per sequence"),
            (_prefill_cost(*args, cache=False),
             f"{values}. Count the bytes of the keys and values the pass writes into the cache too"),
            (_prefill_cost(*args, weights_per_token=True),
             f"{values}. The weights are read once for the whole pass: every weight multiplies all batch x prompt "
             "tokens' vectors"),
        ]
        expect_same(got, expected, [(r, h) for r, h in mistakes if r != expected], otherwise=(
            f"{values}; FLOPs = 2 x params x batch x prompt + 2 x batch x layers x heads x head_size x prompt x "
            "(prompt + 1), bytes = (params + 2 x batch x layers x kv_heads x head_size x prompt) x bytes_per_number"))

    return count_cases(cases, one)


# --- serving.blocks_with_sharing ----------------------------------------------------------------


def _blocks_by_simulation(prompt: int, samples: int, generated: int, block_size: int) -> int:
    """Blocks in use after the samples wrote their tokens one at a time, with reference counts and copy on write.

    Each block is a set of owners; a sample writing into a block someone else also holds copies it first.
    """
    blocks: list[set[int]] = []  # the owners of each block in use
    tables = [[] for _ in range(samples)]
    for t in range(prompt):  # the prompt, written once for all samples
        if t % block_size == 0:
            blocks.append(set(range(samples)))
            for table in tables:
                table.append(len(blocks) - 1)
    for s, table in enumerate(tables):
        for t in range(prompt, prompt + generated):
            if t % block_size == 0:  # a new block of its own
                blocks.append({s})
                table.append(len(blocks) - 1)
            elif len(blocks[table[-1]]) > 1:  # shared: copy on write
                blocks[table[-1]].discard(s)
                blocks.append({s})
                table[-1] = len(blocks) - 1
    return sum(1 for owners in blocks if owners)


@checker("serving.blocks_with_sharing",
         "blocks_with_sharing(prompt, samples, generated, block_size): the paged blocks of several samples of one "
         "prompt, full prompt blocks shared, the partial one copied on write",
         references=("attention.cache.PagedKVCache", "attention.cache.BlockPool"))
def check_blocks_with_sharing(answer: Callable) -> int:
    def draw(g: torch.Generator) -> list[tuple[int, int, int, int]]:
        return [(integer(g, 1, 200), integer(g, 1, 8), integer(g, 1, 60), integer(g, 1, 16)) for _ in range(4)] + [
            (16 * integer(g, 1, 5), integer(g, 2, 5), integer(g, 1, 40), 16), (integer(g, 1, 50), 3, 0, 8)]

    cases = book_or_drawn([(1000, 8, 100, 16), (32, 4, 16, 16), (10, 3, 5, 4), (7, 2, 0, 4), (5, 1, 3, 8),
                           (33, 5, 1, 16)], 45, draw)

    def one(case: tuple[int, int, int, int]) -> None:
        prompt, samples, generated, block_size = case
        what = f"prompt={prompt}, samples={samples}, generated={generated}, block_size={block_size}"
        got = call(answer, what, *case)
        expect(isinstance(got, int) and not isinstance(got, bool),
               f"{what}: return an exact Python int (a number of blocks; use //), got {type(got).__name__} {got!r}")
        expected = _blocks_by_simulation(*case)
        values = f"{what}: expected {expected} blocks, got {got}"
        mistakes = [
            (samples * -(-(prompt + generated) // block_size),
             f"{values}: that is without sharing; the blocks the prompt fills completely are shared by all samples"),
            (-(-prompt // block_size) + samples * -(-generated // block_size),
             f"{values}: the prompt's partly filled last block cannot stay shared once the samples write their "
             "different tokens into it: each sample gets its own copy (copy on write), which its new tokens fill "
             "first"),
            (prompt // block_size + samples * -(-generated // block_size),
             f"{values}: each sample's copy of the partial block holds the prompt's last prompt % block_size tokens, "
             "and its new tokens fill that block first"),
        ]
        expect_same(got, expected, [(r, h) for r, h in mistakes if r != expected], otherwise=(
            f"{values}; shared: prompt // block_size blocks; each sample: ceil((prompt % block_size + generated) / "
            "block_size) blocks of its own"))

    return count_cases(cases, one)


# --- serving.sink_mask --------------------------------------------------------------------------


def _held(n: int, window: int, sinks: int) -> torch.Tensor:
    """(n, n) keep-mask: which keys a query at position i sees when a cache keeps the first ``sinks`` tokens and the
    most recent ones, ``window`` keys in all (the query's own included), simulated token by token."""
    keep = torch.zeros(n, n, dtype=torch.bool)
    held: list[int] = []
    for i in range(n):
        held.append(i)
        if len(held) > window:
            held = held[:sinks] + held[len(held) - (window - sinks):]
        keep[i, held] = True
    return keep


@checker("serving.sink_mask",
         "sink_mask(n, window, sinks): the keep-mask of full attention equal to decoding with StreamingLLM's cache",
         references=("attention.cache.SinkCache",))
def check_sink_mask(answer: Callable) -> int:
    def draw(gen: torch.Generator) -> list[tuple[int, int, int]]:
        cases = []
        for _ in range(4):
            window = integer(gen, 2, 9)
            cases.append((integer(gen, window, 24), window, integer(gen, 0, window - 1)))
        return cases + [(3, 5, 2)]

    cases = book_or_drawn([(12, 5, 2), (10, 4, 1), (8, 3, 0), (6, 6, 2), (3, 5, 2), (20, 8, 4)], 44, draw)

    def one(case: tuple[int, int, int]) -> None:
        n, window, sinks = case
        what = f"n={n}, window={window}, sinks={sinks}"
        got = call(answer, what, n, window, sinks)
        expected = _held(n, window, sinks)
        expect_tensor(got, what, (n, n), "(n queries, n keys)")
        expect(got.dtype == torch.bool, f"{what}: return a bool mask (True = attend), got dtype {got.dtype}")
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        causal = j <= i
        mistakes = [
            (causal & (i - j < window), f"{what}: this is a sliding window of {window} without the sinks: the first "
                                        f"{sinks} tokens stay visible to every later query"),
            ((j <= i) & ((j < sinks) | (i - j <= window - sinks)),
             f"{what}: one recent key too many: a query sees {window} keys in all, the {sinks} sinks and the last "
             f"{window - sinks} tokens, itself included (i - j < window - sinks)"),
            ((j <= i) & ((j < sinks) | (i - j < window)),
             f"{what}: the window of recent tokens is window - sinks long: the sinks take {sinks} of the {window} "
             "keys"),
            ((j < sinks) | ((j <= i) & (i - j < window - sinks)),
             f"{what}: an early query cannot see a sink that comes after it: keep the causal rule (j <= i) for the "
             "sinks too"),
        ]
        expect_same(got, expected, [(m, h) for m, h in mistakes if not torch.equal(m, expected)], otherwise=lambda: (
            f"{what}: the mask differs at {int((got.cpu() != expected).sum())} pairs. Query i sees the keys j <= i "
            f"that are either among the first `sinks` tokens or among the last window - sinks (i - j < window - "
            f"sinks).\n  expected {expected.int().tolist()}\n  got      {got.int().tolist()}"),
            same=lambda a, b: isinstance(a, torch.Tensor) and a.shape == b.shape and torch.equal(a.cpu().bool(), b))

    return count_cases(cases, one)
