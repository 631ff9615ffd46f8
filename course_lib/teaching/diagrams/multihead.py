"""Diagrams of chapter 5: projections, multi-head attention, the head split and cross-attention's shapes."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ._draw import COLORS, FONT, arrow, box, canvas

_MASK_COLOR = "#dddddd"


def multihead_diagram(num_heads: int = 3) -> Figure:
    """Multi-head attention (chapter 5): per head its own W_q, W_k, W_v, a scaled dot-product attention
    that takes the optional mask, then the concatenation of the heads and the output projection W_o.

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = multihead_diagram()
        >>> len(fig.axes), fig.get_size_inches().tolist()  # one drawing, within the book's 8-inch column
        (1, [7.8, 4.9])
        >>> plt.close(fig)
    """
    if num_heads < 2 or num_heads > 4:
        raise ValueError(f"num_heads must be between 2 and 4, got {num_heads}")
    fig, ax = canvas(7.8, 4.9, 12.0, 7.5)
    sources = {"q": (1.6, "queries", "query"), "k": (4.2, "keys", "key"), "v": (6.8, "values", "value")}
    for x, text, kind in sources.values():
        box(ax, x, 0.45, 1.6, 0.6, text, kind)
    width = 9.2 / num_heads
    head_x = [0.4 + width * (i + 0.5) for i in range(num_heads)]
    bus = 3.0  # the mask's line, between the projections and the attentions
    box(ax, 10.9, bus, 1.8, 0.9, "mask\n(optional)", "op", fontsize=FONT - 1)
    ax.plot([head_x[0] + width * 0.4, 10.0], [bus, bus], color="#888888", lw=1.1, ls="--")
    for i, x in enumerate(head_x):
        name = str(i + 1) if i < num_heads - 1 else "h"
        step = min(0.95, width / 3.3)
        for j, role in enumerate("qkv"):
            px = x + (j - 1) * step
            box(ax, px, 2.1, step * 0.9, 0.7, rf"$\mathbf{{W}}_{role}^{{({name})}}$", sources[role][2],
                fontsize=FONT - 1)
            arrow(ax, (sources[role][0] + 0.25 * (i - (num_heads - 1) / 2), 0.75), (px, 1.75), color="#555555")
            arrow(ax, (px, 2.45), (px, 3.45))
        arrow(ax, (x + width * 0.4, bus), (x + width * 0.4, 3.45), color="#888888", dashed=True)
        box(ax, x, 3.9, width * 0.88, 0.9, f"scaled dot-product\nattention, head {name}", "attention",
            fontsize=FONT - 1)
        arrow(ax, (x, 4.35), (5.0 + 0.3 * (i - (num_heads - 1) / 2), 5.3))
    ax.text(10.0, 1.7, "each head maps\n$d$ to $d_h = d/h$\nfeatures", fontsize=FONT - 1, ha="left", va="center")
    box(ax, 5.0, 5.6, 2.8, 0.6, "concatenate heads", "op")
    box(ax, 5.0, 6.7, 2.8, 0.6, r"$\mathbf{W}_o$ ($d \times d$)", "op")
    arrow(ax, (5.0, 5.9), (5.0, 6.4))
    ax.text(6.6, 6.7, r"output $(n_q, d)$", fontsize=FONT, ha="left", va="center")
    ax.set_title(f"Multi-head attention ({num_heads} heads drawn)", fontsize=FONT + 1)
    return fig


def _matrix(ax, x: float, y: float, w: float, h: float, color: str, label: str | None = None,
            rows: str | None = None, cols: str | None = None, splits: int = 0,
            split_colors: list[str] | None = None) -> None:
    """A matrix drawn as a rectangle with its lower-left corner at (x, y); ``splits`` column blocks."""
    if splits:
        for s in range(splits):
            ax.add_patch(Rectangle((x + s * w / splits, y), w / splits, h, facecolor=split_colors[s],
                                   edgecolor="black", linewidth=0.8))
    else:
        ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor="black", linewidth=1))
    if label:
        ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=FONT)
    if rows:
        ax.text(x - 0.12, y + h / 2, rows, ha="right", va="center", fontsize=FONT - 1)
    if cols:
        ax.text(x + w / 2, y + h + 0.12, cols, ha="center", va="bottom", fontsize=FONT - 1)


def head_split_diagram(num_heads: int = 4) -> Figure:
    """The head split as tensors (chapter 5): the (T, d) projected queries of one example, read as h
    blocks of d_h columns, become a stack of h matrices (T, d_h), one per head.

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = head_split_diagram()
        >>> len(fig.axes), fig.get_size_inches().tolist()  # one drawing, within the book's 8-inch column
        (1, [7.8, 3.5])
        >>> plt.close(fig)
    """
    if num_heads < 2 or num_heads > 4:
        raise ValueError(f"num_heads must be between 2 and 4, got {num_heads}")
    palette = ["#cfe2f3", "#f4cccc", "#d9ead3", "#fde9c9"][:num_heads]
    fig, ax = canvas(7.8, 3.5, 12.0, 5.6)
    _matrix(ax, 0.7, 0.9, 3.2, 2.8, "", rows="$T$", cols=r"$d = h \cdot d_h$", splits=num_heads,
            split_colors=palette)
    for s in range(num_heads):
        ax.text(0.7 + (s + 0.5) * 3.2 / num_heads, 0.6, str(s + 1) if s < num_heads - 1 else "h",
                ha="center", va="center", fontsize=FONT - 1)
    ax.text(0.55, 0.6, "head", ha="right", va="center", fontsize=FONT - 1)
    ax.text(2.3, 4.3, r"$\mathbf{Q}$: (batch, $T$, $d$)", ha="center", fontsize=FONT)
    arrow(ax, (4.2, 2.3), (5.6, 2.3))
    ax.text(4.9, 2.6, "view as\n$(h, d_h)$,\nswap axes", ha="center", va="bottom", fontsize=FONT - 1)
    step = 0.45
    for s in reversed(range(num_heads)):
        _matrix(ax, 6.3 + s * step, 0.7 + s * step, 0.8, 2.8, palette[s])
    ax.text(6.7, 0.4, r"$d_h$", ha="center", va="center", fontsize=FONT - 1)
    ax.text(6.15, 2.1, "$T$", ha="right", va="center", fontsize=FONT - 1)
    ax.text(7.3, 5.1, r"(batch, $h$, $T$, $d_h$)", ha="center", fontsize=FONT)
    ax.text(9.2, 2.3, "$h$ independent\nattentions:\nscores\n(batch, $h$, $T$, $T$)", ha="left", va="center",
            fontsize=FONT - 1)
    ax.set_title("Splitting the heads: a view and a transpose of the projected queries", fontsize=FONT + 1)
    return fig


def cross_attention_diagram() -> Figure:
    """Cross-attention's shapes (chapter 5): T decoder queries against T_s encoder keys and values give a
    (T, T_s) weight matrix and a (T, d) output, one row per target token.

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = cross_attention_diagram()
        >>> len(fig.axes), fig.get_size_inches().tolist()  # one drawing, within the book's 8-inch column
        (1, [7.8, 3.6])
        >>> plt.close(fig)
    """
    fig, ax = canvas(7.8, 3.6, 12.5, 5.8)
    _matrix(ax, 0.6, 0.6, 1.0, 1.6, COLORS["query"], r"$\mathbf{Q}$", rows="$T$", cols="$d$")
    ax.text(1.1, 0.25, "decoder\n(target)", ha="center", va="top", fontsize=FONT - 1)
    _matrix(ax, 0.6, 3.0, 1.0, 2.2, COLORS["key"], r"$\mathbf{K}$", rows="$T_s$", cols="$d$")
    _matrix(ax, 2.3, 3.0, 1.0, 2.2, COLORS["value"], r"$\mathbf{V}$", rows="$T_s$", cols="$d$")
    ax.text(3.5, 4.1, "encoder\n(source)", ha="left", va="center", fontsize=FONT - 1)
    _matrix(ax, 5.0, 0.6, 2.2, 1.6, COLORS["attention"], r"$\mathbf{A}$", rows="$T$", cols="$T_s$")
    arrow(ax, (1.7, 1.4), (4.55, 1.4))
    ax.text(3.2, 1.6, r"softmax$(\mathbf{Q}\mathbf{K}^\top/\sqrt{d})$", ha="center", va="bottom", fontsize=FONT - 1)
    arrow(ax, (1.1, 2.95), (4.85, 1.9), dashed=True)
    ax.text(7.35, 0.5, "row $t$: weights of target\ntoken $t$ over the source", ha="left", va="top",
            fontsize=FONT - 1)
    _matrix(ax, 9.6, 0.6, 1.0, 1.6, COLORS["op"], r"$\mathbf{A}\mathbf{V}$", rows="$T$", cols="$d$")
    arrow(ax, (7.3, 1.4), (9.15, 1.4))
    arrow(ax, (3.35, 3.6), (8.8, 1.9), dashed=True)
    ax.text(10.1, 2.75, "one output row\nper query", ha="center", va="bottom", fontsize=FONT - 1)
    ax.set_title(r"Cross-attention: $T$ target queries, $T_s$ source keys and values", fontsize=FONT + 1)
    return fig
