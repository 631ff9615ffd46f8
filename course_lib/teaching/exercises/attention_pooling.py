"""Checkers for the exercises of the attention_pooling chapter (chapter 1, queries, keys and values).

Every reference is computed here by Python loops over floats (``math.exp``), independently of
``course_lib.pooling``: the exercises ask the student to rebuild attention weights and a database
lookup from primitive tensor operations.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch.overrides import TorchFunctionMode

from ._core import (
    ExerciseFailure,
    book_or_drawn,
    call,
    checker,
    close,
    count_cases,
    expect,
    expect_close,
    expect_none_of,
    expect_raises,
    expect_same,
    expect_tensor,
    generator,
    hinted,
    unchanged,
)


class _SoftmaxSpy(TorchFunctionMode):
    """Record whether any softmax-like torch function runs while the mode is active."""

    def __init__(self) -> None:
        super().__init__()
        self.used: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if "softmax" in name:
            self.used.add(name)
        return func(*args, **(kwargs or {}))


def _loop_weights(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """``softmax(Q K^T)`` row by row with Python floats, shifting by the row maximum, in float64."""
    q = queries.detach().to("cpu", torch.float64)
    k = keys.detach().to("cpu", torch.float64)
    batch_shape = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    q = q.expand(*batch_shape, *q.shape[-2:]).reshape(-1, *q.shape[-2:])  # (B, n_q, d)
    k = k.expand(*batch_shape, *k.shape[-2:]).reshape(-1, *k.shape[-2:])  # (B, n_k, d)
    out = torch.empty(q.shape[0], q.shape[1], k.shape[1], dtype=torch.float64)
    for b in range(q.shape[0]):
        for i in range(q.shape[1]):
            scores = [sum(float(a) * float(c) for a, c in zip(q[b, i], k[b, j], strict=True))
                      for j in range(k.shape[1])]
            top = max(scores)
            exps = [math.exp(s - top) for s in scores]
            total = sum(exps)
            for j, e in enumerate(exps):
                out[b, i, j] = e / total
    return out.reshape(*batch_shape, q.shape[1], k.shape[1])


# The worked example of the notes (chapter 1): queries and keys as rows.
_WORKED_Q = [[2.0, -1.0, 0.0], [-2.0, 1.0, 4.0]]
_WORKED_K = [[2.0, 1.0, -1.0], [0.0, 3.0, -1.0], [1.0, 1.0, 3.0]]


@checker("attention_pooling.attention_weights",
         "attention_weights(queries, keys): softmax(Q K^T) over the keys with exp and sum only, stable for "
         "large scores")
def check_attention_weights(answer: Callable) -> int:
    g = generator(11)

    def run(case: str, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        with unchanged(f"{case}: your function changed its inputs in place; compute new tensors instead (e.g. "
                       "`scores - max` rather than `scores -= max` on a view of the inputs).", queries, keys):
            with _SoftmaxSpy() as spy:
                got = call(answer, case, queries, keys)
            expect(not spy.used,
                   f"{case}: your function calls torch's {', '.join(sorted(spy.used))}; the exercise asks you to "
                   "build the weights from torch.exp and .sum only (softmax is what you are writing).")
        expect_tensor(got, case)
        return got

    def compare(case: str, got: torch.Tensor, queries: torch.Tensor, keys: torch.Tensor) -> None:
        expected = _loop_weights(queries, keys)
        n_q, n_k = queries.shape[-2], keys.shape[-2]
        if tuple(got.shape) != tuple(expected.shape):
            hint = ""
            if tuple(got.shape[-2:]) == (n_k, n_q):
                hint = " Entry [i, j] must score query i against key j: compute queries @ keys^T, not keys @ queries^T."
            raise ExerciseFailure(
                f"{case}: expected shape {tuple(expected.shape)} = (..., n_queries, n_keys), got "
                f"{tuple(got.shape)}.{hint}"
            )
        got64 = got.detach().to("cpu", torch.float64)
        if torch.isfinite(got64).all():
            def over_the_queries() -> torch.Tensor:
                scores = queries.double() @ keys.double().transpose(-2, -1)
                cols = (scores - scores.amax(-2, keepdim=True)).exp()
                return cols / cols.sum(-2, keepdim=True)

            expect_none_of(got64, expected, [(
                over_the_queries,
                f"{case}: your weights sum to 1 down each column (over the queries). Each row (one query) "
                "must sum to 1 over the keys: normalise over the last axis, .sum(dim=-1, keepdim=True).")])
            row_sums = got64.sum(-1)
            expect(close(got64, expected) or torch.allclose(row_sums, torch.ones_like(row_sums), atol=1e-4),
                   f"{case}: the weights of each query must sum to 1 over the keys; yours sum to "
                   f"{[round(v, 4) for v in row_sums.flatten()[:6].tolist()]}.")
        expect_close(got, expected, case)

    # Random cases, drawn in this order: (4, 5) and (6, 5); batched (2, 3, 4) and (2, 5, 4); (5, 8) and (7, 8).
    rect = torch.randn(4, 5, generator=g), torch.randn(6, 5, generator=g)
    batched = torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 4, generator=g)
    spread = 3.0 * torch.randn(5, 8, generator=g), torch.randn(7, 8, generator=g)

    def worked_example() -> None:
        # The worked example of the notes: scores [[3, -3, 1], [-7, -1, 11]].
        Q, K = torch.tensor(_WORKED_Q), torch.tensor(_WORKED_K)
        compare("the worked example (scores [[3, -3, 1], [-7, -1, 11]])", run("the worked example", Q, K), Q, K)

    def more_keys_than_queries() -> None:
        # A transposed result has the wrong shape.
        case = "random queries (4, 5) and keys (6, 5)"
        compare(case, run(case, *rect), *rect)

    def leading_batch_axes() -> None:
        case = "batched queries (2, 3, 4) and keys (2, 5, 4)"
        with hinted("with a leading batch axis, transpose only the last two axes of the keys, "
                    "keys.transpose(-2, -1) (keys.T reverses every axis), and reduce over dim=-1."):
            compare(case, run(case, *batched), *batched)

    def float64_inputs() -> None:
        got = run("float64 inputs", *(t.double() for t in batched))
        expect(got.dtype == torch.float64, f"float64 inputs: expected float64 weights, got {got.dtype}")

    def large_scores() -> None:
        # Scores near +-1000: exp(1000) is inf and exp(-1000) is 0 in float32 and float64.
        Q = torch.tensor([[10.0, 0.0], [0.0, 10.0], [-10.0, -10.0]])
        K = torch.tensor([[100.0, 0.0], [99.0, 1.0], [0.0, 100.0]])
        case = "large scores (rows [1000, 990, 0], [0, 10, 1000], [-1000, -1000, -1000])"
        got = run(case, Q, K)
        expect(tuple(got.shape) == (3, 3), f"{case}: expected shape (3, 3), got {tuple(got.shape)}")
        finite_rows = torch.isfinite(got.detach()).all(dim=-1).tolist()
        expect(finite_rows != [True, True, False],
               f"{case}: the first two rows are finite but the row of equal scores -1000 gives "
               f"{got[2].detach().cpu().tolist()}. Subtract each row's own max (amax(dim=-1, keepdim=True)), not "
               "one max for the whole matrix: 1000 below the global max, exp(-2000) is 0 and the row becomes 0/0.")
        expect(bool(torch.isfinite(got).all()),
               f"{case}: your weights contain NaN or inf: {got.detach().cpu().tolist()}. exp(1000) overflows to inf "
               "(and exp(-1000) underflows to 0), so inf/inf and 0/0 give NaN. Subtract the row max from the scores "
               "before exp (softmax(s) = softmax(s - max_j s_j) for each row); then the largest exponent is exp(0) "
               "= 1.")
        compare(case, got, Q, K)

    def a_distribution() -> None:
        # The weights are a distribution over the keys, for every query.
        got = run("queries (5, 8), keys (7, 8)", *spread)
        expect(bool((got >= 0).all()) and torch.allclose(got.sum(-1), torch.ones(5), atol=1e-5),
               "queries (5, 8), keys (7, 8): every row must be non-negative and sum to 1")
        compare("queries (5, 8), keys (7, 8)", got, *spread)

    steps = [worked_example, more_keys_than_queries, leading_batch_axes, float64_inputs, large_scores,
             a_distribution]
    return count_cases(steps, lambda step: step())


def _loop_lookup(query: torch.Tensor, keys: torch.Tensor) -> int | None:
    """Index of the key equal to ``query`` in every coordinate, or ``None``."""
    target = [float(x) for x in query]
    for i in range(keys.shape[0]):
        if [float(x) for x in keys[i]] == target:
            return i
    return None


def _database() -> tuple[torch.Tensor, torch.Tensor]:
    """Keys (4, 3) and values (4, 2), d_v != d: the book's table, or for a hidden variant a drawn one."""
    def draw(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        keys = torch.randint(-4, 6, (4, 3), generator=g).float()  # small integers: exact equality is the point
        while len({tuple(row) for row in keys.tolist()}) < 4:  # distinct keys
            keys = torch.randint(-4, 6, (4, 3), generator=g).float()
        return keys, torch.randn(4, 2, generator=g)

    return book_or_drawn((torch.tensor([[1.0, 2.0, 3.0], [1.0, 0.0, 0.0], [4.0, 5.0, 6.0], [0.0, 0.0, 1.0]]),
                          torch.tensor([[10.0, -1.0], [20.0, -2.0], [30.0, -3.0], [40.0, -4.0]])), 12, draw)


@checker("attention_pooling.database_lookup",
         "database_lookup(query, keys, values): exact-match lookup as attention with one-hot weights, "
         "KeyError when no key matches")
def check_database_lookup(answer: Callable) -> int:
    keys, values = _database()

    def lookup(case: tuple[str, torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
        name, query, keys, values = case
        with unchanged(f"{name}: your function changed keys or values in place", keys, values):
            got = call(answer, name, query, keys, values)
        expect(isinstance(got, tuple) and len(got) == 2,
               f"{name}: return the pair (value, weights), got {type(got).__name__}")
        value, weights = got
        expect(isinstance(value, torch.Tensor) and isinstance(weights, torch.Tensor),
               f"{name}: value and weights must be tensors, got {type(value).__name__} and {type(weights).__name__}")
        m = keys.shape[0]
        expect(tuple(weights.shape) == (m,), f"{name}: weights must have shape (n_keys,) = ({m},), got "
                                             f"{tuple(weights.shape)}")
        i = _loop_lookup(query, keys)
        one_hot = torch.zeros(m, dtype=torch.float64)
        one_hot[i] = 1.0
        w = weights.detach().to("cpu", torch.float64)
        expect(not (int((w != 0).sum()) > 1 and bool(((w == 0) | (w == 1)).all())),
               f"{name}: several keys matched (weights {w.tolist()}); only key {i} equals the query. A key matches "
               "when ALL its coordinates equal the query's: (keys == query).all(dim=-1), not .any.")
        expect_same(w, one_hot, otherwise=lambda: (
            f"{name}: the weights must be exactly one-hot, 1 at the matching key {i} and 0 elsewhere: expected "
            f"{one_hot.tolist()}, got {[round(v, 6) for v in w.tolist()]}. A softmax of scores is never exactly "
            "one-hot; compare the query with every key for equality instead."))
        expect(tuple(value.shape) == (values.shape[1],),
               f"{name}: the value must have shape (d_v,) = ({values.shape[1]},), got {tuple(value.shape)}"
               + (" (did you return the key instead of the value?)" if tuple(value.shape) == (keys.shape[1],)
                  else ""))
        expect_close(value, values[i], f"{name}: the value stored under key {i}")

    found = [(case, keys[i].clone(), keys, values) for case, i in (
        ("query equal to key 1", 1), ("query equal to the first key", 0), ("query equal to the last key", 3))]
    found.append(("a database with one entry", keys[2].clone(), keys[2:3], values[2:3]))

    first = int(keys[0, 0])
    missing = [
        ("a query that differs from key 2 by 1e-3 in every coordinate", keys[2] + 1e-3,
         " An exact lookup does not return the nearest key: that is what attention pooling does."),
        (f"a query that agrees with key 0 in its first coordinate only, [{first}, 9, 9]",
         torch.tensor([float(first), 9.0, 9.0]),
         " A key matches only when ALL its coordinates equal the query's: (keys == query).all(dim=-1)."),
    ]

    def no_match(case: tuple[str, torch.Tensor, str]) -> None:
        name, query, hint = case

        def returned(got: object) -> str:
            shown = [t.tolist() if isinstance(t, torch.Tensor) else t for t in got] if isinstance(got, tuple) else got
            weights = got[1] if isinstance(got, tuple) and len(got) == 2 else None
            zero = isinstance(weights, torch.Tensor) and not bool((weights != 0).any())
            why = " All-zero weights pool to the zero vector, which looks like a stored value; raise instead." \
                if zero else hint
            return f"{name}: no key matches, so raise KeyError (as a Python dict does); your function returned " \
                   f"{shown}.{why}"

        expect_raises(answer, (query, keys, values), KeyError, returned=returned, other=lambda error: (
            f"{name}: no key matches, so raise KeyError (as a Python dict does), but your function raised "
            f"{type(error).__name__}: {error}"))

    return count_cases(found, lookup) + count_cases(missing, no_match)
