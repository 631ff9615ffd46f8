"""Checkers for the exercises of the scoring chapter (chapter 3, attention scoring functions).

Every reference is computed here by brute-force Python loops in float64, independently of
``course_lib.attention.masks`` and ``course_lib.attention.scoring``, which the exercises ask the student to rebuild.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ._core import (
    ExerciseFailure,
    call,
    call_explained,
    checker,
    count_cases,
    expect,
    expect_close,
    expect_match,
    expect_tensor,
    generator,
    hinted,
    unchanged,
)


def _loop_masked_softmax(X: torch.Tensor, valid_lens: torch.Tensor | None) -> torch.Tensor:
    """Masked softmax by loops: row ``(b, i)`` is a softmax over its first ``L`` keys, zeros after.

    ``L`` is ``valid_lens[b]`` (1-D) or ``valid_lens[b, i]`` (2-D); ``L = 0`` gives a zero row.
    """
    batch, n_q, n_k = X.shape
    out = torch.zeros(batch, n_q, n_k, dtype=torch.float64)
    for b in range(batch):
        for i in range(n_q):
            if valid_lens is None:
                length = n_k
            elif valid_lens.dim() == 1:
                length = int(valid_lens[b])
            else:
                length = int(valid_lens[b, i])
            if length == 0:
                continue
            row = [float(x) for x in X[b, i, :length]]
            top = max(row)  # subtracting the max keeps exp finite for large scores
            exps = [math.exp(x - top) for x in row]
            total = sum(exps)
            for j in range(length):
                out[b, i, j] = exps[j] / total
    return out


@checker("scoring.masked_softmax",
         "my_masked_softmax(X, valid_lens): 1-D and 2-D valid lengths, zeros for fully masked rows")
def check_masked_softmax(answer: Callable) -> int:
    g = generator(3)
    X = torch.randn(3, 2, 4, generator=g)

    def one_length_per_example() -> int:
        # The D2L example: three sentences of valid lengths 4, 3, 2 padded to 4 keys.
        lens = torch.tensor([4, 3, 2])
        with unchanged("your function changed X in place; use X.masked_fill (no underscore) to get a new tensor", X):
            got = call(answer, "1-D valid_lens [4, 3, 2]", X, lens)
        expect_close(got, _loop_masked_softmax(X, lens), "1-D valid_lens [4, 3, 2] (one length per example)")
        return 2

    def no_lengths() -> None:
        got = call(answer, "valid_lens=None", X, None)
        expect_close(got, _loop_masked_softmax(X, None),
                     "valid_lens=None (no masking: a plain softmax over the last axis)")

    def one_length_per_query() -> None:
        # Per-query lengths: every row (b, i) has its own length.
        lens2 = torch.tensor([[1, 4], [2, 3], [3, 1]])
        got = call_explained(answer, lambda error: (
            f"2-D valid_lens (per-query lengths, shape (batch, n_queries) = {tuple(lens2.shape)}): your "
            f"function raised {type(error).__name__}: {error}. Query i of example b must use its own "
            "length valid_lens[b, i]; build the mask from valid_lens[:, :, None] when valid_lens is 2-D."), X, lens2)
        expected = _loop_masked_softmax(X, lens2)
        expect(isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(expected.shape),
               f"2-D valid_lens: expected a tensor of shape {tuple(expected.shape)}, got "
               f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
        with hinted("with 2-D valid_lens (per-query lengths, shape (batch, n_queries)) row i of example b keeps "
                    f"keys j < valid_lens[b, i]; here valid_lens = {lens2.tolist()}."):
            expect_close(got, expected, "2-D valid_lens")

    def fully_masked(case: tuple[str, torch.Tensor]) -> int:
        # Fully masked rows: 1-D (a whole example without keys) and 2-D (a single query row).
        name, lens_z = case
        got = call(answer, f"fully masked rows, {name}", X, lens_z)
        expected = _loop_masked_softmax(X, lens_z)
        expect(isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(expected.shape),
               f"fully masked rows, {name}: expected a tensor of shape {tuple(expected.shape)}")
        got64 = got.detach().to("cpu", torch.float64)
        empty = expected.sum(-1) == 0  # (batch, n_q) rows with no valid key
        bad = got64[empty]
        expect(not bool(torch.isnan(bad).any()),
               f"fully masked rows ({name}) must give all-zero weights, but yours contain NaN: softmax of a row "
               "that is all -inf is 0/0. Fill with a large finite negative number (torch.finfo(X.dtype).min) "
               "and multiply the weights by the mask, so that these rows become exactly 0.")
        expect(bool((bad == 0).all()),
               f"fully masked rows ({name}) must give all-zero weights (a query with no valid key attends to "
               f"nothing), got {bad.tolist()}: a finite fill value makes the row uniform; multiply by the mask.")
        expect_close(got, expected, f"fully masked rows, {name}")
        return 2

    def finite_gradients() -> None:
        # Finite gradients through a fully masked row.
        Xg = X.clone().double().requires_grad_(True)
        out = call(answer, "backward pass with valid_lens [0, 3, 2]", Xg, torch.tensor([0, 3, 2]))
        expect(isinstance(out, torch.Tensor) and out.requires_grad,
               "the output must stay differentiable with respect to X (do not detach or build it from Python "
               "floats)")
        w = torch.randn(out.shape, generator=g, dtype=torch.float64)
        (out * w).sum().backward()
        expect(Xg.grad is not None and bool(torch.isfinite(Xg.grad).all()),
               "the gradient with respect to X is not finite for fully masked rows (valid length 0): the NaN of such "
               "a row's softmax flows back into X (adding a -inf mask to X passes it on, even when the forward "
               "output is repaired afterwards); fill with X.masked_fill(~mask, torch.finfo(X.dtype).min) and "
               "multiply by the mask")

    def large_scores() -> None:
        # exp(100) overflows float32 unless the row max is subtracted.
        big = 100.0 * torch.randn(2, 3, 5, generator=g) + 200.0
        lens_big = torch.tensor([5, 3])
        expect_close(call(answer, "large scores (~200)", big, lens_big), _loop_masked_softmax(big, lens_big),
                     "large scores (~200; subtract the row maximum before exp, or use torch.softmax)")

    masked_rows = [("1-D valid_lens [0, 3, 2]", torch.tensor([0, 3, 2])),
                   ("2-D valid_lens [[0, 4], [2, 0], [3, 1]]", torch.tensor([[0, 4], [2, 0], [3, 1]]))]
    return (count_cases([one_length_per_example, no_lengths, one_length_per_query], lambda step: step())
            + count_cases(masked_rows, fully_masked)
            + count_cases([finite_gradients, large_scores], lambda step: step()))


def _loop_additive(queries: torch.Tensor, keys: torch.Tensor, W_q: torch.Tensor, W_k: torch.Tensor,
                   w_v: torch.Tensor, activation: Callable[[torch.Tensor], torch.Tensor] = torch.tanh
                   ) -> torch.Tensor:
    """Score by loops: ``a[b, i, j] = w_v . tanh(W_q q_bi + W_k k_bj)`` in float64."""
    q, k = queries.double(), keys.double()
    Wq, Wk, wv = W_q.double(), W_k.double(), w_v.double()
    batch, n_q, n_k = q.shape[0], q.shape[1], k.shape[1]
    out = torch.empty(batch, n_q, n_k, dtype=torch.float64)
    for b in range(batch):
        for i in range(n_q):
            for j in range(n_k):
                out[b, i, j] = torch.dot(wv, activation(Wq @ q[b, i] + Wk @ k[b, j]))
    return out


@checker("scoring.additive_score",
         "additive_score(queries, keys, W_q, W_k, w_v): w_v^T tanh(W_q q + W_k k) for every query-key pair")
def check_additive_score(answer: Callable) -> int:
    g = generator(5)
    # (batch, n_q, n_k, d_q, d_k, h): sizes that differ, one query, and d_q == d_k with W_q != W_k.
    cases = [(2, 3, 5, 20, 2, 8), (1, 1, 4, 3, 6, 5), (2, 4, 4, 6, 6, 7)]

    def one(case: tuple[int, int, int, int, int, int]) -> None:
        batch, n_q, n_k, d_q, d_k, h = case
        name = f"queries {(batch, n_q, d_q)}, keys {(batch, n_k, d_k)}, h={h}"
        queries = torch.randn(batch, n_q, d_q, generator=g)
        keys = torch.randn(batch, n_k, d_k, generator=g)
        W_q = torch.randn(h, d_q, generator=g) / math.sqrt(d_q)
        W_k = torch.randn(h, d_k, generator=g) / math.sqrt(d_k)
        w_v = torch.randn(h, generator=g)
        got = call(answer, name, queries, keys, W_q, W_k, w_v)
        expected = _loop_additive(queries, keys, W_q, W_k, w_v)
        expect_tensor(got, name)
        if tuple(got.shape) == (batch, n_k, n_q) and n_q != n_k:
            raise ExerciseFailure(
                f"{name}: expected shape {(batch, n_q, n_k)} = (batch, n_queries, n_keys), got "
                f"{tuple(got.shape)}: axis 1 must index the queries and axis 2 the keys."
            )
        mistakes = [
            (lambda: _loop_additive(queries, keys, W_q, W_k, w_v, activation=lambda x: x),
             f"{name}: your scores equal w_v^T (W_q q + W_k k): the tanh is missing. Without it the "
             "score is linear, q and k no longer interact and the softmax over keys ignores the query."),
            (expected.transpose(1, 2),
             f"{name}: your result is transposed: entry [b, i, j] must score query i against key j."),
        ]
        expect_match(got, expected, name, mistakes)

    return count_cases(cases, one)
