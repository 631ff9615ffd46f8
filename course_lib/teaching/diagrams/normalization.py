"""Diagram of chapter 7: where the layer norm sits in a residual block (post-norm and pre-norm)."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Circle

from ._draw import FONT, arrow, box, canvas

_PATH = "#1f4e79"  # the identity (residual) path from a block's input to its output


def _plus(ax, x: float, y: float, r: float = 0.22) -> None:
    ax.add_patch(Circle((x, y), r, facecolor="white", edgecolor="black", linewidth=1, zorder=3))
    ax.plot([x - r * 0.6, x + r * 0.6], [y, y], color="black", lw=1, zorder=4)
    ax.plot([x, x], [y - r * 0.6, y + r * 0.6], color="black", lw=1, zorder=4)


def _column(ax, x: float, pre_norm: bool) -> None:
    """One sublayer with its residual connection, bottom (input) to top (output)."""
    w, h = 2.6, 0.6
    ax.text(x, 0.25, r"$\mathbf{X}$", ha="center", va="center", fontsize=FONT)
    fork = 0.85
    ln_y, f_y = (1.7, 2.75) if pre_norm else (4.55, 1.9)
    plus_y = 3.6 if pre_norm else 3.25
    top = 4.55 if pre_norm else 5.55
    box(ax, x, f_y, w, h, r"sublayer $F$" + "\n(attention or FFN)", "attention", fontsize=FONT - 1)
    box(ax, x, ln_y, w, h, "LayerNorm", "norm", fontsize=FONT - 1)
    _plus(ax, x, plus_y)
    # the branch: input -> (LayerNorm ->) F -> sum (-> LayerNorm)
    arrow(ax, (x, 0.45), (x, (ln_y if pre_norm else f_y) - h / 2))
    if pre_norm:
        arrow(ax, (x, ln_y + h / 2), (x, f_y - h / 2))
    arrow(ax, (x, f_y + h / 2), (x, plus_y - 0.22))
    if not pre_norm:
        arrow(ax, (x, plus_y + 0.22), (x, ln_y - h / 2))
    arrow(ax, (x, (ln_y if not pre_norm else plus_y) + (h / 2 if not pre_norm else 0.22)), (x, top))
    ax.text(x, top + 0.25, r"$\mathbf{X}'$", ha="center", va="center", fontsize=FONT)
    # the residual connection, and the identity path it opens from X to X'
    edge = x - w / 2 - 0.45
    ax.plot([x, edge, edge], [fork, fork, plus_y], color="black", lw=1.1)
    arrow(ax, (edge, plus_y), (x - 0.22, plus_y))
    path_x = [x, edge, edge, x, x]
    path_y = [fork, fork, plus_y, plus_y, top]
    ax.plot(path_x, path_y, color=_PATH, lw=7, alpha=0.25, solid_capstyle="round", zorder=0)
    equation = (r"$\mathbf{X}' = \mathbf{X} + F(\mathrm{LN}(\mathbf{X}))$" if pre_norm
                else r"$\mathbf{X}' = \mathrm{LN}(\mathbf{X} + F(\mathbf{X}))$")
    ax.text(x, 6.35, ("pre-norm (most later models)" if pre_norm else "post-norm (the paper)") + "\n" + equation,
            ha="center", va="center", fontsize=FONT)
    note = ("identity path: a plain sum;\none more LayerNorm\nends the stack" if pre_norm
            else "identity path: through\nthe LayerNorm of\nevery sublayer")
    ax.text(x + w / 2 + 0.25, 2.6 if pre_norm else 4.55, note, ha="left", va="center", fontsize=FONT - 1,
            color=_PATH)


def norm_placement_diagram() -> Figure:
    """Post-norm and pre-norm residual blocks side by side (chapter 7).

    Post-norm (the paper): the layer norm follows the sum, so the identity path from a block's input
    to its output passes through it. Pre-norm: the layer norm normalises the sublayer's input only,
    the identity path is a plain sum, and a pre-norm stack ends with one more layer norm.

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = norm_placement_diagram()
        >>> len(fig.axes), fig.get_size_inches().tolist()  # one drawing, within the book's 8-inch column
        (1, [7.6, 4.3])
        >>> plt.close(fig)
    """
    fig, ax = canvas(7.6, 4.3, 13.0, 7.0)
    fig.subplots_adjust(left=0.01, right=0.99, bottom=0.01, top=0.93)
    _column(ax, 2.6, pre_norm=False)
    _column(ax, 8.6, pre_norm=True)
    ax.set_title("Where the layer norm sits: one sublayer and its residual connection", fontsize=FONT + 1)
    return fig
