"""Figures of a training run: the loss curves of a :class:`course_lib.training.train.TrainHistory`.

Kept apart from :mod:`course_lib.training.train` so that training code never imports matplotlib.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

__all__ = ["plot_history"]


def plot_history(history, smooth: int = 20, figsize: tuple[float, float] = (6.0, 3.5), log_y: bool = False):
    """Plot the training loss per step (and its moving average) with the validation losses.

    Args:
        history: a :class:`course_lib.training.train.TrainHistory`.
        smooth: window of the moving average drawn over the per-step losses (1 = none).
        figsize: the figure size.
        log_y: use a logarithmic loss axis.

    Returns:
        The matplotlib figure.

    Examples:
        >>> history = TrainHistory(steps=3, train_loss=[3.0, 2.5, 2.0], valid_steps=[3], valid_loss=[2.2])
        >>> fig = plot_history(history, smooth=2)
        >>> len(fig.axes), [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        (1, ['train (step)', 'train (2-step mean)', 'valid'])
        >>> plt.close(fig)
    """
    if isinstance(smooth, bool) or not isinstance(smooth, int) or smooth < 1:
        raise ValueError(f"smooth must be a positive int, got {smooth!r}")
    fig, ax = plt.subplots(figsize=figsize)
    train = np.asarray(history.train_loss, dtype=float)
    steps = np.arange(1, len(train) + 1)
    if len(train):
        ax.plot(steps, train, color="C0", alpha=0.25 if smooth > 1 else 1.0, lw=0.8, label="train (step)")
        if smooth > 1 and len(train) >= smooth:
            avg = np.convolve(train, np.ones(smooth) / smooth, mode="valid")
            ax.plot(steps[smooth - 1:], avg, color="C0", label=f"train ({smooth}-step mean)")
    if history.valid_loss:
        ax.plot(history.valid_steps, history.valid_loss, "o-", color="C1", label="valid")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy per token")
    if log_y:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig
