"""The chapter 2 checkers accept the notebook's solutions and reject typical mistakes
with a specific hint (their stubs: test_exercises_core.py)."""

from __future__ import annotations

import pytest
import torch
from exercise_helpers import fails_with, passes

import course_lib as cl
from course_lib.teaching.exercises.nadaraya_watson import _loop_loo_loss, _loop_nw

NOTEBOOK = "02_nadaraya_watson.ipynb"


# --- the checkers' own references against closed forms -------------------------------------------


def test_loop_reference_matches_two_point_closed_form():
    # Two points at 0 and 1 with y = 0 and 1: at query q the weight of x = 1 is a logistic function.
    h = 0.7
    q = torch.tensor([0.0, 0.5, 1.0, 3.0], dtype=torch.float64)
    got = _loop_nw(torch.tensor([0.0, 1.0]), torch.tensor([0.0, 1.0]), q, h)
    a, b = (q / h) ** 2 / 2, ((q - 1) / h) ** 2 / 2
    torch.testing.assert_close(got, torch.exp(-b) / (torch.exp(-a) + torch.exp(-b)))
    assert got[1].item() == pytest.approx(0.5)


def test_loop_reference_agrees_with_library_nadaraya_watson():
    g = torch.Generator().manual_seed(0)
    x, y, q = torch.rand(20, generator=g, dtype=torch.float64), torch.randn(20, generator=g,
                                                                             dtype=torch.float64), \
        torch.rand(7, generator=g, dtype=torch.float64)
    torch.testing.assert_close(_loop_nw(x, y, q, 0.2), cl.nadaraya_watson(x, y, q, "gaussian", 0.2)[0])


def test_loop_loo_loss_two_points_is_half_squared_difference_for_any_w():
    # With two points each is predicted by the other's y, whatever w: L = (y0 - y1)^2 / 2.
    for w in (0.1, 1.0, 50.0):
        assert _loop_loo_loss(w, [0.0, 1.0], [2.0, -1.0]) == pytest.approx(4.5)


# --- nadaraya_watson.nw_predict --------------------------------------------------------------------


def _sq_dist(x_query, x_train):
    """(n_q, N) squared distances of (n_q, d) queries to (N, d) training inputs, by broadcasting."""
    return (x_query[:, None, :] - x_train[None, :, :]).pow(2).sum(-1)


def _softmax_nw(x_train, y_train, x_query, bandwidth):
    return torch.softmax(-_sq_dist(x_query, x_train) / (2 * bandwidth**2), dim=-1) @ y_train


def expansion(x_train, y_train, x_query, bandwidth):
    # |x - x_i|^2 = |x|^2 - 2 x.x_i + |x_i|^2 with one matrix product: no (n_q, N, d) tensor.
    sq = x_query.pow(2).sum(-1)[:, None] - 2 * x_query @ x_train.T + x_train.pow(2).sum(-1)[None, :]
    return torch.softmax(-sq / (2 * bandwidth**2), dim=-1) @ y_train


def library_nw(x_train, y_train, x_query, bandwidth):
    return cl.nadaraya_watson(x_train, y_train, x_query, "gaussian", bandwidth)[0]


def naive_exp(x_train, y_train, x_query, bandwidth):
    k = torch.exp(-_sq_dist(x_query, x_train) / (2 * bandwidth**2))
    return (k @ y_train) / k.sum(-1)


def not_normalised(x_train, y_train, x_query, bandwidth):
    return torch.exp(-_sq_dist(x_query, x_train) / (2 * bandwidth**2)) @ y_train


def normalised_over_queries(x_train, y_train, x_query, bandwidth):
    return torch.softmax(-_sq_dist(x_query, x_train) / (2 * bandwidth**2), dim=0) @ y_train


def forgot_half(x_train, y_train, x_query, bandwidth):
    return torch.softmax(-_sq_dist(x_query, x_train) / bandwidth**2, dim=-1) @ y_train


def divides_squared_distance_by_h(x_train, y_train, x_query, bandwidth):
    return torch.softmax(-_sq_dist(x_query, x_train) / (2 * bandwidth), dim=-1) @ y_train


def one_dimensional_only(x_train, y_train, x_query, bandwidth):
    # The 1-D formula applied to (n, d) inputs: only the first coordinate counts.
    u = (x_query[:, :1] - x_train[:, 0][None, :]) / bandwidth
    return torch.softmax(-u.pow(2) / 2, dim=-1) @ y_train


def returns_pair(x_train, y_train, x_query, bandwidth):
    w = torch.softmax(-_sq_dist(x_query, x_train) / (2 * bandwidth**2), dim=-1)
    return w @ y_train, w


def returns_weights(x_train, y_train, x_query, bandwidth):
    return torch.softmax(-_sq_dist(x_query, x_train) / (2 * bandwidth**2), dim=-1)


def always_float64(x_train, y_train, x_query, bandwidth):
    return _softmax_nw(x_train.double(), y_train.double(), x_query.double(), bandwidth)


def sorts_in_place(x_train, y_train, x_query, bandwidth):
    out = _softmax_nw(x_train, y_train, x_query, bandwidth)
    x_query.mul_(1.0).add_(1.0)
    return out


def boxcar(x_train, y_train, x_query, bandwidth):
    return cl.nadaraya_watson(x_train, y_train, x_query, "boxcar", 10 * bandwidth)[0]


def crashes(x_train, y_train, x_query, bandwidth):
    return x_query @ x_train  # shapes (n_q, d) @ (N, d): fails unless d == N


def test_nw_predict_notebook_solution_passes(solutions):
    ns = solutions("ch02-ex-nw-predict")
    assert passes("nadaraya_watson.nw_predict", ns["nw_predict"]).n_checks == 8


def test_nw_predict_library_answer_passes():
    # The library is independent of the checker's loops: agreement cross-checks both.
    passes("nadaraya_watson.nw_predict", library_nw)


def test_nw_predict_expansion_and_broadcasting_answers_pass():
    # The matrix-product expansion the exercise asks for, and the (n_q, N, d) broadcast, both compute it.
    passes("nadaraya_watson.nw_predict", expansion)
    passes("nadaraya_watson.nw_predict", _softmax_nw)


def test_loop_reference_sums_squared_distances_over_coordinates():
    # Two training points in the plane at distances 1 and 2 from the query, bandwidth 1.
    got = _loop_nw(torch.tensor([[1.0, 0.0], [0.0, 2.0]]), torch.tensor([0.0, 1.0]), torch.zeros(1, 2), 1.0)
    e1, e2 = torch.exp(torch.tensor(-0.5)), torch.exp(torch.tensor(-2.0))
    torch.testing.assert_close(got, (e2 / (e1 + e2))[None].double())


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (not_normalised, "must sum to 1"),
        (normalised_over_queries, "over the queries"),
        (naive_exp, "torch.softmax"),
        (forgot_half, "forget the 1/2"),
        (divides_squared_distance_by_h, "bandwidth sqrt(h)"),
        (returns_pair, "expected a torch.Tensor"),
        (returns_weights, "return the predictions only"),
        (always_float64, "float32 predictions"),
        (sorts_in_place, "in place"),
        (boxcar, "values differ"),
        (crashes, "your function raised RuntimeError"),
        (one_dimensional_only, "values differ"),
    ],
)
def test_nw_predict_wrong_answers_fail_with_hint(answer, hint):
    fails_with("nadaraya_watson.nw_predict", answer, hint)


def test_nw_predict_unnormalised_answer_is_told_about_rows_summing_to_one():
    fails_with("nadaraya_watson.nw_predict", not_normalised, "each row", "sum to 1")


def test_nw_predict_naive_answer_fails_only_on_tiny_bandwidth_with_nan():
    fails_with("nadaraya_watson.nw_predict", naive_exp, "tiny bandwidth", "NaN")


# --- nadaraya_watson.leave_one_out_loss --------------------------------------------------------------


def _scores(w, x):
    return -0.5 * ((x[:, None] - x[None, :]) * w).pow(2)


def library_loss(w, x, y):
    model = cl.NWKernelRegression(1.0).to(x.dtype)
    # Differentiable in the given w: run the model's forward with w in place of its parameter.
    pred = torch.func.functional_call(model, {"w": w}, (x, cl.leave_one_out(x), cl.leave_one_out(y)))
    return 0.5 * (pred - y).pow(2).mean()


def includes_self(w, x, y):
    return 0.5 * (torch.softmax(_scores(w, x), -1) @ y - y).pow(2).mean()


def _masked(w, x):
    return _scores(w, x).masked_fill(torch.eye(len(x), dtype=torch.bool), float("-inf"))


def full_mse(w, x, y):
    return (torch.softmax(_masked(w, x), -1) @ y - y).pow(2).mean()


def summed(w, x, y):
    return 0.5 * (torch.softmax(_masked(w, x), -1) @ y - y).pow(2).sum()


def forgot_half_score(w, x, y):
    s = (-((x[:, None] - x[None, :]) * w).pow(2)).masked_fill(torch.eye(len(x), dtype=torch.bool), float("-inf"))
    return 0.5 * (torch.softmax(s, -1) @ y - y).pow(2).mean()


def uses_item(w, x, y):
    return torch.tensor(0.5 * (torch.softmax(_masked(w, x), -1) @ y - y).pow(2).mean().item(), dtype=x.dtype)


def per_point(w, x, y):
    return 0.5 * (torch.softmax(_masked(w, x), -1) @ y - y).pow(2)


def zero_diagonal_after_exp(w, x, y):
    k = torch.exp(_scores(w, x)) * (1 - torch.eye(len(x), dtype=x.dtype))
    return 0.5 * ((k @ y) / k.sum(-1) - y).pow(2).mean()


def returns_float(w, x, y):
    return (0.5 * (torch.softmax(_masked(w, x), -1) @ y - y).pow(2).mean()).item()


def centres_in_place(w, x, y):
    loss = 0.5 * (torch.softmax(_masked(w, x), -1) @ y - y).pow(2).mean()
    y.sub_(y.mean())
    return loss


def always_float64_loss(w, x, y):
    return 0.5 * (torch.softmax(_masked(w.double(), x.double()), -1) @ y.double() - y.double()).pow(2).mean()


def test_leave_one_out_loss_notebook_solution_passes(solutions):
    ns = solutions("ch02-ex-loo-loss")
    assert passes("nadaraya_watson.leave_one_out_loss", ns["leave_one_out_loss"]).n_checks == 7


def test_leave_one_out_loss_library_answer_passes():
    passes("nadaraya_watson.leave_one_out_loss", library_loss)


def test_notebook_solution_matches_fit_nw_kernel_regression_first_loss(solutions):
    # fit_nw_kernel_regression records the loss before each step: the first is L(init_w).
    ns = solutions("ch02-ex-loo-loss")
    g = torch.Generator().manual_seed(3)
    x, y = torch.rand(30, generator=g) * 5, torch.randn(30, generator=g)
    _, losses = cl.fit_nw_kernel_regression(x, y, epochs=1, lr=0.1, init_w=1.7)
    assert ns["leave_one_out_loss"](torch.tensor(1.7), x, y).item() == pytest.approx(losses[0], rel=1e-5)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (includes_self, "OTHER points"),
        (full_mse, "twice the expected"),
        (summed, "n times the expected"),
        (forgot_half_score, "forget the 1/2"),
        (uses_item, "requires_grad is False"),
        (per_point, "0-dim tensor"),
        (zero_diagonal_after_exp, "underflows"),
        (returns_float, "expected a 0-dim torch.Tensor"),
        (centres_in_place, "in place"),
        (always_float64_loss, "float32 loss"),
    ],
)
def test_leave_one_out_loss_wrong_answers_fail_with_hint(answer, hint):
    fails_with("nadaraya_watson.leave_one_out_loss", answer, hint)


def test_checkers_are_listed():
    from course_lib.teaching.exercises import list_exercises

    listed = list_exercises()
    assert "nadaraya_watson.nw_predict" in listed
    assert "nadaraya_watson.leave_one_out_loss" in listed


# --- plotting.show_heatmaps colour scales (added for the chapter's sharp-vs-flat heatmaps) ----------


def test_show_heatmaps_shared_scale_spans_all_panels_with_one_colour_bar():
    sharp = torch.eye(4)
    flat = torch.full((4, 4), 0.25)
    fig = cl.show_heatmaps(torch.stack([flat, sharp])[None])
    images = [im for ax in fig.axes for im in ax.images]
    assert [im.get_clim() for im in images] == [(0.0, 1.0), (0.0, 1.0)]  # the flat panel is not stretched
    assert len(fig.axes) == 3  # two panels and one colour bar


def test_show_heatmaps_separate_scales_give_each_panel_its_colour_bar():
    sharp = torch.eye(4)
    flat = torch.full((4, 4), 0.25) + 0.01 * torch.eye(4)
    fig = cl.show_heatmaps(torch.stack([flat, sharp])[None], share_scale=False)
    images = [im for ax in fig.axes for im in ax.images]
    assert images[0].get_clim() == pytest.approx((0.0, 0.26)) and images[1].get_clim() == (0.0, 1.0)
    assert len(fig.axes) == 4


def test_show_heatmaps_shared_scale_ignores_nan_rows():
    weights = torch.tensor([[0.2, 0.8], [float("nan"), float("nan")]])
    fig = cl.show_heatmaps(weights)
    assert fig.axes[0].images[0].get_clim() == pytest.approx((0.0, 0.8))
