"""The drawing primitives every diagram uses: one canvas, boxes, arrows and stacks of boxes, one palette.

Sized for the book's column: text at ``FONT`` points (no smaller than 9 points anywhere).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

FONT = 10  # points
COLORS = {
    "query": "#cfe2f3",
    "key": "#fde9c9",
    "value": "#d9ead3",
    "op": "#eeeeee",
    "attention": "#f4cccc",
    "norm": "#fff2cc",
    "ffn": "#d0e0e3",
    "rnn": "#e6d5ee",
}


def canvas(width: float, height: float, xlim: float, ylim: float) -> tuple[Figure, plt.Axes]:
    fig, ax = plt.subplots(figsize=(width, height))
    ax.set_xlim(0, xlim)
    ax.set_ylim(0, ylim)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def box(ax, x: float, y: float, w: float, h: float, text: str, kind: str = "op",
         fontsize: float = FONT) -> tuple[float, float, float, float]:
    """A rounded box centred at (x, y); returns its (left, bottom, right, top)."""
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                facecolor=COLORS[kind], edgecolor="black", linewidth=1))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize)
    return x - w / 2, y - h / 2, x + w / 2, y + h / 2


def arrow(ax, start: tuple[float, float], end: tuple[float, float], text: str | None = None,
           style: str = "-|>", color: str = "black", dashed: bool = False, rad: float = 0.0) -> None:
    ax.annotate("", xy=end, xytext=start,
                arrowprops=dict(arrowstyle=style, color=color, lw=1.1, shrinkA=0, shrinkB=0,
                                linestyle="--" if dashed else "-",
                                connectionstyle=f"arc3,rad={rad}"))
    if text:
        ax.text((start[0] + end[0]) / 2 + 0.08, (start[1] + end[1]) / 2, text, fontsize=FONT - 1,
                ha="left", va="center")


def stack(ax, x: float, y0: float, width: float, layers: list[tuple[str, str]], gap: float = 0.35,
           height: float = 0.62) -> list[float]:
    """Boxes stacked upwards from y0; returns the centre y of each."""
    ys = []
    y = y0
    for text, kind in layers:
        box(ax, x, y, width, height, text, kind, fontsize=FONT - 1)
        ys.append(y)
        y += height + gap
    for a, b in zip(ys, ys[1:], strict=False):
        arrow(ax, (x, a + height / 2), (x, b - height / 2))
    return ys
