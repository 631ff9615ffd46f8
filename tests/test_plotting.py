"""plotting: smoke tests that the figures are built, labelled, and that bad shapes are rejected."""

import numpy as np
import pytest
import torch

from course_lib.smoothing import KERNELS
from course_lib.teaching.plotting import plot_curves, plot_kernels, plot_regression, show_heatmaps


def _image_axes(fig):
    return [ax for ax in fig.axes if ax.images]


def test_show_heatmaps_single_matrix_has_labelled_axes():
    weights = torch.softmax(torch.randn(3, 5, generator=torch.Generator().manual_seed(0)), -1)
    fig = show_heatmaps(weights)
    (ax,) = _image_axes(fig)
    assert ax.get_xlabel() == "Keys" and ax.get_ylabel() == "Queries"
    assert ax.images[0].get_array().shape == (3, 5)
    np.testing.assert_allclose(ax.images[0].get_array(), weights.numpy())
    assert len(fig.axes) == 2  # the panel and its colour bar
    assert fig.axes[-1].get_ylabel() == "attention weight"


def test_show_heatmaps_grid_labels_outer_axes_titles_and_tokens():
    matrices = torch.rand(2, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    tokens = ["a", "b", "c", "d"]
    fig = show_heatmaps(matrices, xlabel="key", ylabel="query", titles=["h1", "h2", "h3"],
                        xticklabels=tokens, yticklabels=tokens, suptitle="heads")
    axes = _image_axes(fig)
    assert len(axes) == 6
    grid = np.array(axes).reshape(2, 3)
    assert [ax.get_xlabel() for ax in grid[1]] == ["key"] * 3 and [ax.get_xlabel() for ax in grid[0]] == [""] * 3
    assert [ax.get_ylabel() for ax in grid[:, 0]] == ["query"] * 2 and grid[0, 1].get_ylabel() == ""
    assert [ax.get_title() for ax in grid[0]] == ["h1", "h2", "h3"]
    assert [t.get_text() for t in grid[1, 0].get_xticklabels()] == tokens
    assert fig._suptitle.get_text() == "heads"


@pytest.mark.parametrize("shape", [(2, 3), (6, 10), (7, 7), (50, 50)])
def test_show_heatmaps_without_token_labels_ticks_integer_indices(shape):
    # A key or query index is an integer: no tick at 0.5 or 2.5 between two keys.
    fig = show_heatmaps(torch.rand(*shape, generator=torch.Generator().manual_seed(0)))
    (ax,) = _image_axes(fig)
    fig.canvas.draw()
    for ticks, n in ((ax.get_xticks(), shape[1]), (ax.get_yticks(), shape[0])):
        shown = [t for t in ticks if -0.5 <= t <= n - 0.5]
        assert shown, f"no ticks on an axis of {n} entries"
        assert all(float(t).is_integer() for t in shown), list(ticks)


def test_show_heatmaps_accepts_numpy_arrays():
    fig = show_heatmaps(np.eye(3))
    assert len(_image_axes(fig)) == 1


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4), (1, 1, 1, 2, 2)])
def test_show_heatmaps_rejects_other_ranks(shape):
    with pytest.raises(ValueError, match=r"matrices must be 2-D or 4-D"):
        show_heatmaps(torch.zeros(shape))


def test_plot_kernels_draws_one_labelled_panel_per_kernel():
    fig = plot_kernels(KERNELS, u_range=(-2.0, 2.0), n_points=41)
    assert [ax.get_title() for ax in fig.axes] == list(KERNELS)
    assert all(ax.get_xlabel() for ax in fig.axes)
    assert fig.axes[0].get_ylabel() == "K(u)"
    line = fig.axes[0].lines[0]
    u = np.linspace(-2, 2, 41)
    np.testing.assert_allclose(line.get_xdata(), u, atol=1e-6)
    np.testing.assert_allclose(line.get_ydata(), np.exp(-u**2 / 2), atol=1e-6)  # the Gaussian, drawn first


def test_plot_regression_labels_axes_and_draws_every_curve():
    x = torch.linspace(0, 5, 20)
    x_query = torch.linspace(0, 5, 50)
    ax = plot_regression(x, torch.sin(x), x_query, torch.sin(x_query),
                         predictions={"gaussian": torch.cos(x_query), "boxcar": x_query}, title="fits")
    assert ax.get_xlabel() == "x" and ax.get_ylabel() == "y" and ax.get_title() == "fits"
    labels = [line.get_label() for line in ax.lines]
    assert labels == ["training data", "true f(x)", "gaussian", "boxcar"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == labels
    assert len(ax.lines[2].get_xdata()) == 50


def test_plot_regression_without_truth_or_predictions():
    ax = plot_regression(np.arange(3.0), np.arange(3.0), np.arange(3.0))
    assert [line.get_label() for line in ax.lines] == ["training data"]


def test_plot_curves_labels_and_log_scale():
    ax = plot_curves({"train": [3.0, 2.0, 1.0], "valid": [3.5, 2.5, 2.0]}, ylabel="loss", logy=True, title="t")
    assert ax.get_xlabel() == "epoch" and ax.get_ylabel() == "loss" and ax.get_yscale() == "log"
    assert list(ax.lines[0].get_xdata()) == [1, 2, 3]
    assert [line.get_label() for line in ax.lines] == ["train", "valid"]
    assert ax.get_title() == "t"
