"""kernels: the four smoothing kernels against their closed forms, and the name lookup."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from course_lib.smoothing import (
    COMPACT_KERNELS,
    KERNELS,
    boxcar_kernel,
    epanechnikov_kernel,
    gaussian_kernel,
    get_kernel,
    triangular_kernel,
)

CLOSED_FORMS = {
    "gaussian": (gaussian_kernel, lambda u: math.exp(-u * u / 2)),
    "boxcar": (boxcar_kernel, lambda u: 1.0 if abs(u) <= 1 else 0.0),
    "triangular": (triangular_kernel, lambda u: max(0.0, 1 - abs(u))),
    "epanechnikov": (epanechnikov_kernel, lambda u: 0.75 * max(0.0, 1 - u * u)),
}
POINTS = [-3.0, -1.5, -1.0, -0.75, -0.5, 0.0, 0.25, 0.5, 1.0, 1.0001, 2.0]


@pytest.mark.parametrize("name", sorted(CLOSED_FORMS))
def test_kernel_matches_closed_form_at_chosen_points(name):
    kernel, closed_form = CLOSED_FORMS[name]
    u = torch.tensor(POINTS, dtype=torch.float64)
    expected = torch.tensor([closed_form(x) for x in POINTS], dtype=torch.float64)
    torch.testing.assert_close(kernel(u), expected)


def test_kernel_values_at_landmarks():
    assert gaussian_kernel(torch.tensor([0.0, 2.0])).tolist() == pytest.approx([1.0, math.exp(-2)])
    assert boxcar_kernel(torch.tensor([1.0, -1.0, 1.01])).tolist() == [1.0, 1.0, 0.0]
    assert triangular_kernel(torch.tensor([0.0, 0.5, 1.0])).tolist() == [1.0, 0.5, 0.0]
    assert epanechnikov_kernel(torch.tensor([0.0, 0.5, 1.0])).tolist() == [0.75, 0.5625, 0.0]


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_keeps_shape_and_dtype(name):
    u = torch.linspace(-2, 2, 12, dtype=torch.float64).reshape(3, 4)
    out = KERNELS[name](u)
    assert out.shape == (3, 4) and out.dtype == torch.float64


@given(u=st.floats(-50, 50, allow_nan=False), name=st.sampled_from(sorted(KERNELS)))
def test_kernels_are_symmetric_non_negative_and_peak_at_zero(u, name):
    k = KERNELS[name]
    t = torch.tensor([u, -u, 0.0], dtype=torch.float64)
    value, mirrored, peak = k(t).tolist()
    assert value == mirrored
    assert 0 <= value <= peak


@given(u=st.floats(1.0, 1e6, exclude_min=True, allow_nan=False), name=st.sampled_from(sorted(COMPACT_KERNELS)))
def test_compact_kernels_vanish_beyond_one(u, name):
    assert KERNELS[name](torch.tensor([u, -u], dtype=torch.float64)).tolist() == [0.0, 0.0]


def test_gaussian_kernel_is_never_zero_within_float64_reach():
    assert torch.all(gaussian_kernel(torch.linspace(-30, 30, 101, dtype=torch.float64)) > 0)


@pytest.mark.parametrize(("name", "integral"), [("gaussian", math.sqrt(2 * math.pi)), ("boxcar", 2.0),
                                                ("triangular", 1.0), ("epanechnikov", 1.0)])
def test_kernel_integrals(name, integral):
    u = torch.linspace(-10, 10, 200_001, dtype=torch.float64)
    assert torch.trapezoid(KERNELS[name](u), u).item() == pytest.approx(integral, abs=1e-4)


def test_get_kernel_by_name_and_callable_pass_through():
    for name, kernel in KERNELS.items():
        assert get_kernel(name) is kernel

    def custom(u):
        return 1 / (1 + u**2)

    assert get_kernel(custom) is custom
    assert set(KERNELS) == {"gaussian", "boxcar", "triangular", "epanechnikov"}
    assert {"gaussian"}.isdisjoint(COMPACT_KERNELS) and COMPACT_KERNELS < set(KERNELS)


def test_unknown_kernel_name_lists_the_choices():
    with pytest.raises(ValueError, match=r"unknown kernel 'cosine'.*boxcar.*epanechnikov.*gaussian.*triangular"):
        get_kernel("cosine")


def test_non_string_non_callable_kernel_is_a_type_error():
    with pytest.raises(TypeError, match="kernel must be a name or a callable, got int"):
        get_kernel(3)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernels_reject_integer_input(name):
    with pytest.raises(TypeError, match="u must be a floating-point tensor"):
        KERNELS[name](torch.tensor([0, 1]))
