"""Nadaraya–Watson: the estimator, the learnable-width model and its leave-one-out fit, against loops."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.func import functional_call

from course_lib import recording_attention
from course_lib.nadaraya_watson import (
    NWKernelRegression,
    fit_nw_kernel_regression,
    leave_one_out,
    nadaraya_watson,
)

KERNEL_FORMS = {
    "gaussian": lambda u: math.exp(-u * u / 2),
    "boxcar": lambda u: 1.0 if abs(u) <= 1 else 0.0,
    "triangular": lambda u: max(0.0, 1 - abs(u)),
    "epanechnikov": lambda u: 0.75 * max(0.0, 1 - u * u),
}


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _loop_nw(x_train, y_train, x_query, K, h):
    """Nadaraya–Watson with explicit double loops; x as lists of vectors, y as lists of vectors."""
    y_hat, weights = [], []
    for q in x_query:
        raw = [K(math.dist(q, x) / h) for x in x_train]
        total = sum(raw)
        row = [r / total for r in raw]
        weights.append(row)
        y_hat.append([sum(w * y[c] for w, y in zip(row, y_train, strict=True)) for c in range(len(y_train[0]))])
    return torch.tensor(y_hat, dtype=torch.float64), torch.tensor(weights, dtype=torch.float64)


def _data_1d(n=12, q=7, seed=0):
    # A jittered grid on [0, 5]: random, yet every query in [0.5, 4.5] has a point within 0.5.
    jitter = (torch.rand(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) - 0.5) * 0.2
    x = torch.linspace(0, 5, n, dtype=torch.float64) + jitter
    y = torch.sin(x) + 0.1 * _randn(n, seed=seed + 1)
    x_query = torch.linspace(0.5, 4.5, q, dtype=torch.float64)
    return x, y, x_query


# --- the estimator against loops -------------------------------------------------------------------


@pytest.mark.parametrize("kernel", sorted(KERNEL_FORMS))
def test_scalar_inputs_match_double_loop(kernel):
    x, y, x_query = _data_1d()
    y_hat, weights = nadaraya_watson(x, y, x_query, kernel, bandwidth=1.5)
    ref_y, ref_w = _loop_nw([[v] for v in x.tolist()], [[v] for v in y.tolist()], [[v] for v in x_query.tolist()],
                            KERNEL_FORMS[kernel], 1.5)
    assert y_hat.shape == (7,) and weights.shape == (7, 12)
    torch.testing.assert_close(weights, ref_w)
    torch.testing.assert_close(y_hat, ref_y[:, 0])


@pytest.mark.parametrize("kernel", sorted(KERNEL_FORMS))
def test_vector_inputs_match_loop_with_radial_kernel(kernel):
    x, x_query = _randn(15, 3, seed=1), _randn(5, 3, seed=2) * 0.5
    y = _randn(15, 2, seed=3)
    y_hat, weights = nadaraya_watson(x, y, x_query, kernel, bandwidth=2.5)
    ref_y, ref_w = _loop_nw(x.tolist(), y.tolist(), x_query.tolist(), KERNEL_FORMS[kernel], 2.5)
    assert y_hat.shape == (5, 2)
    torch.testing.assert_close(weights, ref_w)
    torch.testing.assert_close(y_hat, ref_y)


def test_callable_kernel_is_used_as_given():
    x, y, x_query = _data_1d()

    def cauchy(u):
        return 1 / (1 + u**2)

    ref_y, ref_w = _loop_nw([[v] for v in x.tolist()], [[v] for v in y.tolist()], [[v] for v in x_query.tolist()],
                            lambda u: 1 / (1 + u * u), 0.7)
    y_hat, weights = nadaraya_watson(x, y, x_query, cauchy, bandwidth=0.7)
    torch.testing.assert_close(weights, ref_w)
    torch.testing.assert_close(y_hat, ref_y[:, 0])


@given(seed=st.integers(0, 2**31 - 1), kernel=st.sampled_from(sorted(KERNEL_FORMS)),
       bandwidth=st.floats(0.5, 5.0))
def test_weights_are_non_negative_and_rows_sum_to_one(seed, kernel, bandwidth):
    x, y, x_query = _data_1d(seed=seed)
    _, weights = nadaraya_watson(x, y, x_query, kernel, bandwidth)
    reachable = ~torch.isnan(weights).any(-1)
    assert reachable.all()  # queries lie inside the data range, within reach of h >= 0.5 of some point
    assert torch.all(weights >= 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(len(x_query), dtype=torch.float64))


@given(seed=st.integers(0, 2**31 - 1), shift=st.floats(-100, 100), scale=st.floats(0.01, 100),
       bandwidth=st.floats(0.1, 3.0))
def test_gaussian_estimate_is_invariant_to_shifting_and_to_scaling_x_with_the_bandwidth(seed, shift, scale, bandwidth):
    x, y, x_query = _data_1d(seed=seed)
    y_hat, w = nadaraya_watson(x, y, x_query, "gaussian", bandwidth)
    y_shift, w_shift = nadaraya_watson(x + shift, y, x_query + shift, "gaussian", bandwidth)
    y_scale, w_scale = nadaraya_watson(x * scale, y, x_query * scale, "gaussian", bandwidth * scale)
    torch.testing.assert_close(w_shift, w, atol=1e-8, rtol=1e-6)
    torch.testing.assert_close(y_shift, y_hat, atol=1e-8, rtol=1e-6)
    torch.testing.assert_close(w_scale, w, atol=1e-8, rtol=1e-6)
    torch.testing.assert_close(y_scale, y_hat, atol=1e-8, rtol=1e-6)


def test_huge_bandwidth_gives_the_mean_of_the_targets():
    x, y, x_query = _data_1d()
    for kernel in KERNEL_FORMS:
        y_hat, _ = nadaraya_watson(x, y, x_query, kernel, bandwidth=1e6)
        torch.testing.assert_close(y_hat, y.mean().expand(7), rtol=1e-6, atol=1e-6)


def test_tiny_gaussian_bandwidth_is_the_nearest_neighbour_and_finite():
    x, y, x_query = _data_1d(n=20, q=9)
    y_hat, weights = nadaraya_watson(x, y, x_query, "gaussian", bandwidth=1e-4)
    assert torch.isfinite(y_hat).all() and torch.isfinite(weights).all()
    nearest = [min(range(len(x)), key=lambda i, q=q: abs(float(x[i]) - q)) for q in x_query.tolist()]
    torch.testing.assert_close(y_hat, y[nearest])
    y32, _ = nadaraya_watson(x.float(), y.float(), x_query.float(), "gaussian", bandwidth=1e-4)
    assert torch.isfinite(y32).all()
    torch.testing.assert_close(y32, y[nearest].float())


def test_compact_kernel_out_of_reach_query_is_nan_with_a_warning_and_others_are_unaffected():
    x, y, _ = _data_1d()
    x_query = torch.tensor([1.0, 100.0, 3.0], dtype=torch.float64)
    for kernel in ("boxcar", "triangular", "epanechnikov"):
        with pytest.warns(RuntimeWarning, match=r"1 of 3 queries have no training point within bandwidth"):
            y_hat, weights = nadaraya_watson(x, y, x_query, kernel, bandwidth=1.0)
        assert torch.isnan(y_hat[1]) and torch.isnan(weights[1]).all()
        ref_y, ref_w = _loop_nw([[v] for v in x.tolist()], [[v] for v in y.tolist()], [[1.0], [3.0]],
                                KERNEL_FORMS[kernel], 1.0)
        torch.testing.assert_close(y_hat[[0, 2]], ref_y[:, 0])
        torch.testing.assert_close(weights[[0, 2]], ref_w)


def test_gaussian_far_query_still_gets_an_estimate():
    x, y, _ = _data_1d()
    y_hat, _ = nadaraya_watson(x, y, torch.tensor([1e3], dtype=torch.float64), "gaussian", bandwidth=0.1)
    torch.testing.assert_close(y_hat, y[-1:])  # all weight on the largest x, the closest one


# --- the estimator: bad input ---------------------------------------------------------------------------


def test_unknown_kernel_name_is_rejected_with_the_choices():
    x, y, x_query = _data_1d()
    with pytest.raises(ValueError, match=r"unknown kernel 'laplace'; choose one of \['boxcar', 'epanechnikov'"):
        nadaraya_watson(x, y, x_query, "laplace")


@pytest.mark.parametrize("bandwidth", [0.0, -1.0, float("nan"), float("inf")])
def test_non_positive_bandwidth_is_rejected(bandwidth):
    x, y, x_query = _data_1d()
    with pytest.raises(ValueError, match="bandwidth must be a finite positive number"):
        nadaraya_watson(x, y, x_query, bandwidth=bandwidth)


def test_mismatched_train_lengths_are_rejected_naming_both_shapes():
    x, y, x_query = _data_1d()
    with pytest.raises(ValueError, match=r"x_train has shape \(12,\) and y_train has shape \(11,\)"):
        nadaraya_watson(x, y[:-1], x_query)


def test_query_dimension_must_match_train_dimension_naming_both_shapes():
    with pytest.raises(ValueError, match=r"x_query has shape \(4, 3\).*x_train has shape \(10, 2\)"):
        nadaraya_watson(_randn(10, 2), _randn(10), _randn(4, 3))
    with pytest.raises(ValueError, match=r"x_query has shape \(4, 2\).*x_train has shape \(10,\)"):
        nadaraya_watson(_randn(10), _randn(10), _randn(4, 2))


def test_wrong_rank_and_dtype_are_rejected():
    with pytest.raises(ValueError, match=r"x_train must be 1-D or 2-D \(n,\) or \(n, d\), got shape \(2, 3, 4\)"):
        nadaraya_watson(_randn(2, 3, 4), _randn(2), _randn(3))
    with pytest.raises(ValueError, match=r"y_train must be 1-D or 2-D"):
        nadaraya_watson(_randn(2), _randn(2, 1, 1), _randn(3))
    with pytest.raises(TypeError, match="x_query must be a floating-point tensor"):
        nadaraya_watson(_randn(2), _randn(2), torch.tensor([1, 2]))
    with pytest.raises(TypeError, match="must share a dtype"):
        nadaraya_watson(_randn(2), _randn(2).float(), _randn(3))


def test_negative_kernel_is_rejected():
    with pytest.raises(ValueError, match="kernel returned negative values"):
        nadaraya_watson(_randn(5), _randn(5), _randn(3), kernel=lambda u: 1 - u**2)


# --- NWKernelRegression ------------------------------------------------------------------------------


def _loop_nw_model(w, queries, keys_per_query, values_per_query):
    out = []
    for q, ks, vs in zip(queries, keys_per_query, values_per_query, strict=True):
        exps = [math.exp(-(((q - k) * w) ** 2) / 2) for k in ks]
        out.append(sum(e * v for e, v in zip(exps, vs, strict=True)) / sum(exps))
    return torch.tensor(out, dtype=torch.float64)


def test_model_with_shared_keys_matches_loop_and_the_gaussian_estimator():
    x, y, x_query = _data_1d()
    model = NWKernelRegression(init_w=2.0).double()
    model(x_query, x, y)
    assert model.attention_weights is None  # kept only while recording
    with recording_attention(model):
        out = model(x_query, x, y)
    expected = _loop_nw_model(2.0, x_query.tolist(), [x.tolist()] * 7, [y.tolist()] * 7)
    torch.testing.assert_close(out, expected.detach())
    assert model.attention_weights.shape == (7, 12)
    y_hat, weights = nadaraya_watson(x, y, x_query, "gaussian", bandwidth=0.5)  # h = 1 / w
    torch.testing.assert_close(out.detach(), y_hat)
    torch.testing.assert_close(model.attention_weights, weights)


def test_model_with_one_key_set_per_query_matches_loop():
    x, y, _ = _data_1d(n=6)
    keys, values = _randn(6, 4, seed=5), _randn(6, 4, seed=6)
    out = NWKernelRegression(init_w=0.7).double()(x, keys, values)
    torch.testing.assert_close(out.detach(), _loop_nw_model(0.7, x.tolist(), keys.tolist(), values.tolist()))


def test_gradcheck_of_the_width_and_the_queries():
    x, y, x_query = _data_1d()
    keys, values = x.expand(7, -1), y.expand(7, -1)
    model = NWKernelRegression().double()
    w = torch.tensor(1.3, dtype=torch.float64, requires_grad=True)
    # functional_call routes w in as an input, so gradcheck differentiates the parameter itself.
    assert torch.autograd.gradcheck(lambda w: functional_call(model, {"w": w}, (x_query, keys, values)), (w,))
    assert torch.autograd.gradcheck(lambda q: model(q, keys, values), (x_query.clone().requires_grad_(),))


def test_model_rejects_bad_input():
    model = NWKernelRegression()
    with pytest.raises(ValueError, match=r"values must have the shape of keys \(5,\), got \(4,\)"):
        model(torch.zeros(3), torch.zeros(5), torch.zeros(4))
    with pytest.raises(ValueError, match=r"queries must be 1-D"):
        model(torch.zeros(3, 1), torch.zeros(5), torch.zeros(5))
    with pytest.raises(ValueError, match=r"queries has shape \(3,\) and keys has shape \(4, 5\)"):
        model(torch.zeros(3), torch.zeros(4, 5), torch.zeros(4, 5))
    with pytest.raises(TypeError, match="values must be a floating-point tensor"):
        model(torch.zeros(3), torch.zeros(5), torch.zeros(5, dtype=torch.long))


# --- leave_one_out and the fit --------------------------------------------------------------------------


@given(n=st.integers(2, 8))
def test_leave_one_out_matches_loop(n):
    x = torch.arange(n, dtype=torch.float64) * 1.5
    expected = [[float(x[j]) for j in range(n) if j != i] for i in range(n)]
    assert leave_one_out(x).tolist() == expected


def test_leave_one_out_rejects_non_vectors():
    with pytest.raises(ValueError, match=r"x must be 1-D \(n,\), got shape \(2, 3\)"):
        leave_one_out(torch.zeros(2, 3))
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        leave_one_out([1.0, 2.0])


def test_fit_lowers_the_leave_one_out_loss_on_a_noisy_sine():
    g = torch.Generator().manual_seed(0)
    x = torch.sort(torch.rand(50, generator=g) * 5).values
    y = 2 * torch.sin(x) + x**0.8 + torch.normal(0.0, 0.5, (50,), generator=g)
    model, losses = fit_nw_kernel_regression(x, y, epochs=30, lr=0.5, init_w=1.0)
    assert len(losses) == 30 and all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0]
    # The first loss is the leave-one-out loss at w = 1, computed here by hand.
    xs, ys = x.tolist(), y.tolist()
    preds = _loop_nw_model(1.0, xs, [xs[:i] + xs[i + 1:] for i in range(50)], [ys[:i] + ys[i + 1:] for i in range(50)])
    expected_first = 0.5 * sum((p - t) ** 2 for p, t in zip(preds.tolist(), ys, strict=True)) / 50
    assert losses[0] == pytest.approx(expected_first, rel=1e-4)
    assert model.w.item() != 1.0


def test_fit_rejects_bad_input():
    x = torch.linspace(0, 1, 5)
    with pytest.raises(ValueError, match="at least 2 training points"):
        fit_nw_kernel_regression(x[:1], x[:1])
    with pytest.raises(ValueError, match=r"x_train has shape \(5,\) and y_train has shape \(4,\)"):
        fit_nw_kernel_regression(x, x[:4])
    with pytest.raises(ValueError, match=r"y_train must be 1-D"):
        fit_nw_kernel_regression(x, x[:, None])
    with pytest.raises(ValueError, match="epochs must be non-negative"):
        fit_nw_kernel_regression(x, x, epochs=-1)
    with pytest.raises(TypeError, match="epochs must be an int"):
        fit_nw_kernel_regression(x, x, epochs=2.5)
    with pytest.raises(ValueError, match="lr must be a finite positive number"):
        fit_nw_kernel_regression(x, x, lr=0.0)
