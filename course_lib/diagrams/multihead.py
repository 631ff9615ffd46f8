"""Diagram of chapter 5: multi-head attention."""

from __future__ import annotations

from matplotlib.figure import Figure

from ._draw import FONT, arrow, box, canvas


def multihead_diagram(num_heads: int = 3) -> Figure:
    """Multi-head attention (chapter 5): h sets of projections, h scaled dot-product attentions
    side by side, concatenation and the output projection W_o.

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = multihead_diagram(num_heads=3)
        >>> len(fig.axes), fig.get_size_inches().tolist()  # one drawing, within the book's 8-inch column
        (1, [7.8, 4.3])
        >>> plt.close(fig)
    """
    if num_heads < 2 or num_heads > 4:
        raise ValueError(f"num_heads must be between 2 and 4, got {num_heads}")
    fig, ax = canvas(7.8, 4.3, 12.0, 6.6)
    for x, text, kind in ((1.5, "queries", "query"), (3.5, "keys", "key"), (5.5, "values", "value")):
        box(ax, x, 0.5, 1.5, 0.6, text, kind)
    head_x = [1.9 + (8.2 / (num_heads - 1)) * i for i in range(num_heads)]
    for i, x in enumerate(head_x):
        name = str(i + 1) if i < num_heads - 1 else "h"
        maps = ", ".join(rf"\mathbf{{W}}_{role}^{{({name})}}" for role in "qkv")
        box(ax, x, 2.1, 2.7, 0.7, f"${maps}$", "op", fontsize=FONT - 1)
        box(ax, x, 3.5, 2.7, 0.9, f"scaled dot-product\nattention, head {name}", "attention", fontsize=FONT - 1)
        for src in (1.5, 3.5, 5.5):
            arrow(ax, (src, 0.8), (x + 0.3 * (src - 3.5) / 2, 1.75), color="#555555")
        arrow(ax, (x, 2.45), (x, 3.05))
        arrow(ax, (x, 3.95), (6.0 + 0.3 * (i - 1), 4.7))
        ax.text(x + 1.2, 2.75, r"$d_h = d/h$", fontsize=FONT - 1, ha="left")
    box(ax, 6.0, 5.0, 2.6, 0.6, "concatenate heads", "op")
    box(ax, 6.0, 6.1, 2.6, 0.6, r"$\mathbf{W}_o$ ($d \times d$)", "op")
    arrow(ax, (6.0, 5.3), (6.0, 5.8))
    ax.text(7.5, 6.1, "output $(T, d)$", fontsize=FONT, ha="left", va="center")
    ax.set_title(f"Multi-head attention ({num_heads} heads drawn)", fontsize=FONT + 1)
    return fig
