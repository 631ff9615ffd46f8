"""Figures used across the book: attention heatmaps, kernels and regression fits.

Models never plot; these functions take tensors and return the matplotlib figure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.ticker import MaxNLocator

__all__ = ["BOOK_STYLE", "COLUMN_WIDTH", "use_book_style", "show_heatmaps", "plot_kernels",
           "plot_regression", "plot_curves"]

#: Widest figure, in inches, shown unscaled in the book's column (660 px at a 1280-px window) at the
#: book's 80 dpi; figures up to 9.7 in are still shown at >= 85% of their pixel size.
COLUMN_WIDTH = 8.0

#: The book's one figure style: 80 dpi (small stored notebooks) and no text under 9 pt (10 px).
BOOK_STYLE = {
    "figure.dpi": 80,
    "savefig.dpi": 80,
    "font.size": 10,
    "axes.titlesize": 10,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "figure.titlesize": 11,
}

# Room per tick label on a heatmap axis, in inches (0.17 in = 14 px at 80 dpi): after the colour bar
# and the gaps take their share, a 9-pt token label still gets about 10 px.
_TICK_ROOM = 0.17
# Token labels turned 90 degrees read smaller than upright ones of the same size (a glyph's width is less
# than its height), so the key axis of a heatmap sets them one point larger.
_ROTATED_TICK_SIZE = 10


def use_book_style() -> None:
    """Set matplotlib's rcParams to :data:`BOOK_STYLE` (a notebook's setup calls it once).

    This changes matplotlib's global settings on purpose, for the session that calls it; the other
    functions of this module never do.

    Examples:
        >>> with plt.rc_context():  # only to put the settings back after the example
        ...     use_book_style()
        ...     plt.rcParams["figure.dpi"], plt.rcParams["xtick.labelsize"]
        (80.0, 9.0)
    """
    plt.rcParams.update(BOOK_STYLE)


def _to_numpy(x):
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x


def show_heatmaps(matrices: torch.Tensor, xlabel: str = "Keys", ylabel: str = "Queries",
                  titles: Sequence[str] | None = None, figsize: tuple[float, float] = (3.0, 3.0),
                  cmap: str = "Reds", xticklabels: Sequence[str] | None = None,
                  yticklabels: Sequence[str] | None = None, suptitle: str | None = None,
                  share_scale: bool = True):
    """Draw a grid of attention matrices (rows e.g. layers, columns e.g. heads).

    Args:
        matrices: (n_rows, n_cols, n_queries, n_keys), or (n_queries, n_keys) for one matrix.
        xlabel, ylabel: axis labels (bottom row / first column).
        titles: one title per column.
        figsize: size of one panel, enlarged where token labels need room (0.17 in per label).
        xticklabels, yticklabels: token strings for the key and query axes; without them the axes show
            integer key and query indices.
        suptitle: a title above the whole grid.
        share_scale: one colour scale for all panels, from 0 to the largest entry of ``matrices``, with
            one colour bar; ``False`` gives each panel its own scale and colour bar (for matrices of very
            different magnitudes, e.g. sharp and flat attention).

    Returns:
        The matplotlib figure.

    Examples:
        >>> weights = torch.full((1, 2, 3, 4), 0.25)  # one layer, two heads, 3 queries, 4 keys
        >>> fig = show_heatmaps(weights, titles=["head 1", "head 2"])
        >>> len(fig.axes)  # two panels and the shared colour bar
        3
        >>> fig = show_heatmaps(torch.eye(3), xticklabels=["je", "suis", "là"], yticklabels=["I", "am", "here"])
        >>> [t.get_text() for t in fig.axes[0].get_xticklabels()]
        ['je', 'suis', 'là']
        >>> plt.close("all")
    """
    m = _to_numpy(matrices)
    if m.ndim == 2:
        m = m[None, None]
    if m.ndim != 4:
        raise ValueError(f"matrices must be 2-D or 4-D (rows, cols, n_q, n_k), got shape {m.shape}")
    n_rows, n_cols = m.shape[:2]
    # Token labels stay legible: each tick gets at least _TICK_ROOM inches of its axis.
    panel_w = max(figsize[0], _TICK_ROOM * len(xticklabels) + 0.6) if xticklabels is not None else figsize[0]
    panel_h = max(figsize[1], _TICK_ROOM * len(yticklabels) + 0.4) if yticklabels is not None else figsize[1]
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(panel_w * n_cols, panel_h * n_rows),
                             sharex=True, sharey=True, squeeze=False)
    image = None
    # A single colour bar is only truthful if every panel uses the same colour scale.
    vmax = float(np.nanmax(m)) if share_scale else None
    for i in range(n_rows):
        for j in range(n_cols):
            ax = axes[i, j]
            image = ax.imshow(m[i, j], cmap=cmap, vmin=0, vmax=vmax, aspect="auto")
            if not share_scale:
                fig.colorbar(image, ax=ax, shrink=0.8, label="attention weight" if j == n_cols - 1 else None)
            if i == n_rows - 1:
                ax.set_xlabel(xlabel)
            if j == 0:
                ax.set_ylabel(ylabel)
            if titles is not None and i == 0:
                ax.set_title(titles[j])
            # Without token labels the ticks are key and query indices: integers only.
            if xticklabels is not None:
                ax.set_xticks(range(len(xticklabels)), xticklabels, rotation=90, fontsize=_ROTATED_TICK_SIZE)
            else:
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if yticklabels is not None:
                ax.set_yticks(range(len(yticklabels)), yticklabels)
            else:
                ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if share_scale:
        fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    if suptitle:
        fig.suptitle(suptitle, y=1.02)  # above the panel titles
    return fig


def plot_kernels(kernels: Mapping[str, Callable[[torch.Tensor], torch.Tensor]],
                 u_range: tuple[float, float] = (-2.5, 2.5), n_points: int = 501):
    """Plot each kernel K(u) side by side, one panel per kernel.

    Returns:
        The matplotlib figure.

    Examples:
        >>> fig = plot_kernels({"gaussian": gaussian_kernel, "boxcar": boxcar_kernel})
        >>> [ax.get_title() for ax in fig.axes], fig.axes[0].get_ylabel()
        (['gaussian', 'boxcar'], 'K(u)')
        >>> plt.close(fig)
    """
    u = torch.linspace(*u_range, n_points)
    fig, axes = plt.subplots(1, len(kernels), figsize=(min(2.4 * len(kernels), COLUMN_WIDTH), 2.6),
                             sharey=True, squeeze=False)
    for ax, (name, k) in zip(axes[0], kernels.items(), strict=True):
        ax.plot(u.numpy(), _to_numpy(k(u)))
        ax.set_title(name)
        ax.set_xlabel("u = (x - x_i) / h")
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("K(u)")
    fig.tight_layout()
    return fig


def plot_regression(x_train, y_train, x_query, y_true=None,
                    predictions: Mapping[str, torch.Tensor] | None = None, ax=None,
                    title: str | None = None):
    """Scatter the training data and draw the true function and each prediction curve.

    Returns:
        The matplotlib axes.

    Examples:
        >>> x = torch.linspace(0, 5, 20)
        >>> ax = plot_regression(x, torch.sin(x), x, torch.sin(x), predictions={"mean": torch.zeros(20)})
        >>> [t.get_text() for t in ax.get_legend().get_texts()]
        ['training data', 'true f(x)', 'mean']
        >>> plt.close(ax.figure)
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(_to_numpy(x_train), _to_numpy(y_train), "o", alpha=0.4, ms=4, label="training data")
    if y_true is not None:
        ax.plot(_to_numpy(x_query), _to_numpy(y_true), "k--", label="true f(x)")
    for name, y_hat in (predictions or {}).items():
        ax.plot(_to_numpy(x_query), _to_numpy(y_hat), label=name)
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    if title:
        ax.set_title(title)
    ax.legend()
    return ax


def plot_curves(curves: Mapping[str, Sequence[float]], xlabel: str = "epoch",
                ylabel: str = "loss", logy: bool = False, ax=None, title: str | None = None):
    """Plot named curves (losses, metrics) against their index.

    Returns:
        The matplotlib axes.

    Examples:
        >>> ax = plot_curves({"train": [2.0, 1.2, 0.9], "valid": [2.1, 1.5, 1.4]}, logy=True)
        >>> len(ax.lines), ax.get_yscale(), [int(x) for x in ax.lines[0].get_xdata()]  # epochs count from 1
        (2, 'log', [1, 2, 3])
        >>> plt.close(ax.figure)
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.2))
    for name, ys in curves.items():
        ax.plot(range(1, len(ys) + 1), list(ys), label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return ax
