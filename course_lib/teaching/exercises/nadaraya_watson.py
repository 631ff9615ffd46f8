"""Checkers for the exercises of the nadaraya_watson chapter (chapter 2, Nadaraya–Watson regression).

Every reference is computed here by Python loops over floats (``math.exp`` after shifting by the
largest score, in double precision), independently of ``course_lib.nadaraya_watson``: the exercises
ask the student to rebuild the Gaussian Nadaraya–Watson estimator (for inputs in R^d) and its
leave-one-out loss from tensor operations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from ._core import (
    call,
    checker,
    close,
    count_cases,
    expect,
    expect_close,
    expect_match,
    expect_same,
    expect_tensor,
    generator,
    unchanged,
    variant,
)


def _softmax_pool(scores: Sequence[float], values: Sequence[float]) -> float:
    """sum_i softmax(scores)_i values_i with Python floats, shifted by the largest score."""
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return sum(e * v for e, v in zip(exps, values, strict=True)) / total


def _rows(x: torch.Tensor) -> list[list[float]]:
    """The points of an (n, d) tensor as lists of floats (an (n,) tensor is n points of dimension 1)."""
    x = x.detach().to("cpu", torch.float64)
    return [[float(v) for v in row] for row in (x[:, None] if x.dim() == 1 else x)]


def _loop_nw(x_train: torch.Tensor, y_train: torch.Tensor, x_query: torch.Tensor, bandwidth: float
             ) -> torch.Tensor:
    """Gaussian Nadaraya–Watson by a double loop: one query at a time, one training point at a time.

    Inputs (n, d) or (n,); the squared distance is summed coordinate by coordinate.
    """
    xs, ys = _rows(x_train), y_train.double().tolist()
    out = []
    for q in _rows(x_query):
        scores = [-0.5 * sum((a - b) ** 2 for a, b in zip(q, x, strict=True)) / bandwidth ** 2 for x in xs]
        out.append(_softmax_pool(scores, ys))
    return torch.tensor(out, dtype=torch.float64)


def _loop_nw_over_queries(x_train: torch.Tensor, y_train: torch.Tensor, x_query: torch.Tensor,
                          bandwidth: float) -> torch.Tensor:
    """The typical slip: Gaussian weights normalised over the queries (down each column) instead."""
    xs, ys, qs = _rows(x_train), y_train.double().tolist(), _rows(x_query)
    raw = [[math.exp(-0.5 * sum((a - b) ** 2 for a, b in zip(q, x, strict=True)) / bandwidth ** 2) for x in xs]
           for q in qs]
    col = [sum(raw[i][j] for i in range(len(qs))) for j in range(len(xs))]
    return torch.tensor([sum(raw[i][j] / col[j] * ys[j] for j in range(len(xs))) for i in range(len(qs))],
                        dtype=torch.float64)


@checker("nadaraya_watson.nw_predict",
         "nw_predict(x_train, y_train, x_query, bandwidth): Gaussian Nadaraya–Watson for inputs in R^d, "
         "squared distances from one matrix product, weights normalised per query, stable for a tiny bandwidth")
def check_nw_predict(answer: Callable) -> int:
    g = generator(2)

    def run(case: str, x_train: torch.Tensor, y_train: torch.Tensor, x_query: torch.Tensor,
            bandwidth: float) -> torch.Tensor:
        with unchanged(f"{case}: your function changed its inputs in place; compute new tensors instead",
                       x_train, y_train, x_query):
            got = call(answer, case, x_train, y_train, x_query, bandwidth)
        expect_tensor(got, case)
        expect(tuple(got.shape) == (len(x_query),),
               f"{case}: expected one prediction per query, shape ({len(x_query)},), got {tuple(got.shape)}"
               " (return the predictions only, not the weights; the inputs are (N, d) and (n_q, d), so the "
               "squared distances form an (n_q, N) matrix)")
        return got

    def col(x: torch.Tensor) -> torch.Tensor:
        return x[:, None]  # (n,) -> (n, 1): points of dimension 1

    # The random data, drawn in this order; the hand-picked points of the last cases move and get other
    # targets in the hidden variants.
    x_train_12 = torch.rand(12, generator=g, dtype=torch.float64) * 5
    random_case = ("random case (40 training points, 25 queries, d = 1, bandwidth 0.4)",
                   col(torch.rand(40, generator=g, dtype=torch.float64) * 5),
                   torch.randn(40, generator=g, dtype=torch.float64),
                   col(torch.rand(25, generator=g, dtype=torch.float64) * 5), 0.4)
    xt32, yt32 = torch.rand(30, 3, generator=g) * 5, torch.randn(30, generator=g)
    xq32 = torch.rand(10, 3, generator=g) * 5
    shift, yt_spread = (0.0, torch.tensor([5.0, -1.0, 2.0, 7.0, 3.0])) if variant() == 0 else (
        float(torch.rand((), generator=g)) * 6 - 3, torch.randn(5, generator=g) * 4)
    xt_spread = col(torch.tensor([0.0, 0.4, 1.0, 1.7, 3.0]) + shift)  # 0.1 or more from every query
    xq_spread = col(torch.tensor([0.1, 0.65, 1.2, 2.5, 4.0]) + shift)
    hand_case = ("hand case (x_train = [0, 1, 2, 3] as (4, 1), y_train = [1, 2, 4, 8], bandwidth 1)",
                 col(torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64)),
                 torch.tensor([1.0, 2.0, 4.0, 8.0], dtype=torch.float64),
                 col(torch.tensor([0.5, 1.5, 2.9, -1.0], dtype=torch.float64)), 1.0)
    plane_case = ("points in the plane (50 training points, 20 queries, d = 2, bandwidth 0.5)",
                  torch.rand(50, 2, generator=g, dtype=torch.float64) * 4,
                  torch.randn(50, generator=g, dtype=torch.float64),
                  torch.rand(20, 2, generator=g, dtype=torch.float64) * 4, 0.5)

    def constant_targets() -> None:
        # Constant targets first: whatever the kernel, a weighted AVERAGE of ones is one.
        x_train = col(x_train_12)
        x_query = col(torch.linspace(0, 5, 7, dtype=torch.float64))
        ones = torch.ones(12, dtype=torch.float64)
        case = "constant targets (every y_i = 1, bandwidth 0.7)"
        got = run(case, x_train, ones, x_query, 0.7)
        expect_same(got, torch.ones(7, dtype=torch.float64), [(
            lambda: _loop_nw_over_queries(x_train, ones, x_query, 0.7),
            f"{case}: you normalised the weights over the queries (down each column). Each query's "
            "weights, one row of the (n_q, N) matrix, must sum to 1 over the training points: "
            "normalise along the training axis (dim=-1).")], same=close, otherwise=lambda: (
            f"{case}: a weighted average of ones must be 1 at every query, but you predict "
            f"{[round(v, 4) for v in got.double().tolist()]}. The weights of each query (each row of the "
            "(n_q, N) weight matrix) must sum to 1: divide K(|x - x_i|/h) by the row's sum "
            "sum_j K(|x - x_j|/h)."))

    def against_the_loop(case: tuple[str, torch.Tensor, torch.Tensor, torch.Tensor, float]) -> None:
        name, xt, yt, xq, h = case
        got = run(name, xt, yt, xq, h)
        mistakes = [
            (lambda: _loop_nw(xt, yt, xq, h / math.sqrt(2)),
             f"{name}: your predictions are those of bandwidth h/sqrt(2): the Gaussian kernel is "
             "exp(-u^2/2) with u = |x - x_i|/h; did you forget the 1/2?"),
            (lambda: _loop_nw(xt, yt, xq, math.sqrt(h)),
             f"{name}: your predictions are those of bandwidth sqrt(h): divide the squared distance by h^2, "
             "(the score is -u^2/2 = -|x - x_i|^2 / (2 h^2))."),
        ]
        expect_match(got, _loop_nw(xt, yt, xq, h), name, mistakes, atol=1e-8, rtol=1e-6)

    def float32_inputs() -> None:
        # float32 in, float32 out, against the float64 reference, in d = 3.
        xt, yt, xq = xt32, yt32, xq32
        case = "float32 inputs (30 training points in d = 3, bandwidth 0.8)"
        got = run(case, xt, yt, xq, 0.8)
        expect(got.dtype == torch.float32,
               f"{case}: float32 inputs should give float32 predictions, got {got.dtype}")
        expect_close(got, _loop_nw(xt, yt, xq, 0.8), case, atol=1e-4, rtol=1e-4)

    def tiny_bandwidth() -> None:
        # Every exp(-u^2/2) underflows, yet the estimate is the nearest neighbour's y.
        case = "tiny bandwidth (h = 1e-3, queries 0.1 or more from every training point)"
        got = run(case, xt_spread, yt_spread, xq_spread, 1e-3)
        expect(not bool(torch.isnan(got).any()) and bool(torch.isfinite(got).all()),
               f"{case}: you return {got.tolist()}. With a tiny h every exp(-u^2/2) underflows to 0 and the "
               "normalisation is 0/0 = NaN. Subtract each query's largest score -u^2/2 before exp (the weights "
               "do not change), or compute the weights with torch.softmax over the training points.")
        expect_close(got, _loop_nw(xt_spread, yt_spread, xq_spread, 1e-3),
                     case + " -> the nearest neighbour's y", atol=1e-5)

    def huge_bandwidth() -> None:
        # All weights equal: the estimate is the mean of y (average pooling).
        case = "huge bandwidth (h = 1e4) -> average pooling"
        got = run(case, xt_spread, yt_spread, xq_spread, 1e4)
        expect_close(got, torch.full((5,), float(yt_spread.double().mean())), case, atol=1e-4)

    def single_point() -> None:
        # One training point gets all the weight at every query.
        x0, y0 = (2.0, -3.0) if variant() == 0 else (shift, float(yt_spread[0]))
        case = "a single training point (N = 1)"
        got = run(case, torch.tensor([[x0, 1.0]]), torch.tensor([y0]),
                  torch.tensor([[0.0, 0.0], [2.0, 1.0], [9.0, -4.0]]) + torch.tensor([x0 - 2.0, 0.0]), 0.5)
        expect_close(got, torch.full((3,), y0), case)

    steps = [constant_targets, lambda: against_the_loop(hand_case), lambda: against_the_loop(random_case),
             lambda: against_the_loop(plane_case), float32_inputs, tiny_bandwidth, huge_bandwidth, single_point]
    return count_cases(steps, lambda step: step())


def _loop_loo_loss(w: float, x: Sequence[float], y: Sequence[float], leave_out: bool = True) -> float:
    """Half the mean squared error of predicting each y_i from the other points, by loops."""
    total = 0.0
    for i, (xi, yi) in enumerate(zip(x, y, strict=True)):
        keep = [j for j in range(len(x)) if j != i or not leave_out]
        pred = _softmax_pool([-0.5 * ((xi - x[j]) * w) ** 2 for j in keep], [y[j] for j in keep])
        total += (pred - yi) ** 2
    return 0.5 * total / len(x)


@checker("nadaraya_watson.leave_one_out_loss",
         "leave_one_out_loss(w, x, y): half the mean squared error of predicting each y_i from the other "
         "points with softmax(-((x_i - x_j) w)^2 / 2), differentiable in w")
def check_leave_one_out_loss(answer: Callable) -> int:
    g = generator(5)

    def run(case: str, w: float, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w_t = torch.tensor(w, dtype=x.dtype, requires_grad=True)
        with unchanged(f"{case}: your function changed x or y in place; compute new tensors instead", x, y):
            got = call(answer, case, w_t, x, y)
        expect(isinstance(got, torch.Tensor),
               f"{case}: expected a 0-dim torch.Tensor (the loss), got {type(got).__name__}; keep it a "
               "tensor (no .item()) so that it can be differentiated")
        expect(got.dim() == 0,
               f"{case}: expected a 0-dim tensor (one number: the loss averaged over the points), got shape "
               f"{tuple(got.shape)}")
        return got, w_t

    def diagnose(case: str, got: torch.Tensor, w: float, xs: list[float], ys: list[float]) -> None:
        value = float(got.detach())
        ref = _loop_loo_loss(w, xs, ys)
        n = len(xs)
        mistakes = [
            (lambda: _loop_loo_loss(w, xs, ys, leave_out=False),
             " Each point must be predicted from the OTHER points: leave x_i out of its own prediction "
             "(mask the diagonal), otherwise w -> infinity drives the loss to 0."),
            (2 * ref, " Your loss is twice the expected one: the loss is HALF the mean squared error."),
            (n * ref, " Your loss is n times the expected one: average over the points (mean), do not sum."),
            (2 * n * ref, " Your loss is 2n times the expected one: take half the MEAN of the squared errors."),
            (lambda: _loop_loo_loss(w * math.sqrt(2), xs, ys),
             " The score is -((x_i - x_j) w)^2 / 2: did you forget the 1/2?"),
        ]
        message = f"{case}: expected loss {ref:.6g}, got {value:.6g}."
        expect_same(value, ref, [(result, message + hint) for result, hint in mistakes], otherwise=message,
                    same=lambda a, b: math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-8))

    def one(case: tuple[str, float, torch.Tensor, torch.Tensor]) -> int:
        name, w, x, y = case
        got, w_t = run(name, w, x, y)
        xs, ys = x.tolist(), y.tolist()
        diagnose(name, got, w, xs, ys)
        # The gradient, against a central difference of the loop reference.
        expect(got.requires_grad,
               f"{name}: the loss does not depend on w for autograd (requires_grad is False). Build it from w "
               "with tensor operations: no .item(), .detach() or torch.tensor(...) of intermediate values.")
        (grad,) = torch.autograd.grad(got, w_t)
        eps = 1e-6
        fd = (_loop_loo_loss(w + eps, xs, ys) - _loop_loo_loss(w - eps, xs, ys)) / (2 * eps)
        expect(math.isclose(float(grad), fd, rel_tol=1e-4, abs_tol=1e-7),
               f"{name}: d loss / d w should be {fd:.6g} (finite difference), autograd on your loss gives "
               f"{float(grad):.6g}")
        return 2

    def large_w(case: tuple[torch.Tensor, torch.Tensor]) -> None:
        # Every exp underflows unless the scores are shifted; the prediction of each point is then the y of its
        # nearest other point.
        x, y = case
        name = "large w (w = 300, float32): the scores reach -((0.2 * 300)^2)/2 = -1800"
        got, _ = run(name, 300.0, x, y)
        expect(bool(torch.isfinite(got)),
               f"{name}: your loss is {float(got.detach())}. exp of the scores underflows to 0 and 0/0 = NaN; "
               "subtract each row's largest score before exp, or use torch.softmax (give the masked-out diagonal "
               "a score of -inf, not a weight of 0 after an underflowing exp).")
        expect(got.dtype == torch.float32, f"{name}: float32 inputs should give a float32 loss, got {got.dtype}")
        diagnose(name, got, 300.0, x.tolist(), y.tolist())

    # The hand-picked points of the two last cases move and get other targets in the hidden variants.
    random_x, random_y = (torch.rand(25, generator=g, dtype=torch.float64) * 5,
                          torch.randn(25, generator=g, dtype=torch.float64))
    two_x, two_y = torch.tensor([0.0, 1.0], dtype=torch.float64), torch.tensor([2.0, -1.0], dtype=torch.float64)
    x = torch.tensor([0.0, 0.3, 1.0, 1.2, 2.5])
    y = torch.tensor([1.0, -2.0, 0.5, 3.0, 4.0])
    if variant() != 0:
        two_x, two_y = torch.rand(2, generator=g, dtype=torch.float64) * 4, torch.randn(2, generator=g,
                                                                                      dtype=torch.float64)
        x, y = x + torch.randint(-3, 4, (), generator=g), torch.randn(5, generator=g) * 3
    cases = [
        ("hand case (x = [0, 1, 2, 3], y = [0, 1, 0, 1], w = 1)",
         1.0, torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64),
         torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=torch.float64)),
        ("random case (25 points, w = 2.5)", 2.5, random_x, random_y),
        ("two points (each is predicted by the other's y)", 0.7, two_x, two_y),
    ]
    return count_cases(cases, one) + count_cases([(x, y)], large_w)
