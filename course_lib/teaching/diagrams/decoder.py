"""Diagrams of chapter 11: today's decoder-only block, norm placement, and RoPE as a rotation."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Arc, FancyBboxPatch

from ._draw import FONT, arrow, box, canvas

_RESIDUAL = "#1f4e79"
_NOTE = "#990000"


def _plus(ax, x: float, y: float) -> tuple[float, float]:
    """A residual addition: a circled plus centred at (x, y); returns its bottom and top."""
    ax.add_patch(FancyBboxPatch((x - 0.22, y - 0.22), 0.44, 0.44, boxstyle="circle,pad=0", facecolor="white",
                                edgecolor="black", linewidth=1))
    ax.text(x, y, "+", ha="center", va="center", fontsize=FONT + 2)
    return y - 0.22, y + 0.22


def _residual(ax, x: float, y_from: float, y_plus: float, side: float) -> None:
    """The skip path: from the stream at y_from around the sublayer into the plus at y_plus."""
    ax.plot([x, side, side], [y_from, y_from, y_plus], color=_RESIDUAL, lw=1.2)
    arrow(ax, (side, y_plus), (x + (0.22 if side > x else -0.22), y_plus), color=_RESIDUAL)


def decoder_block_diagram() -> Figure:
    """The decoder-only model of Llama (chapter 11): token embedding, N pre-norm blocks (RMSNorm, causal
    grouped-query self-attention with RoPE on the queries and keys, a residual addition, RMSNorm, SwiGLU,
    a residual addition), a final RMSNorm and the linear layer to the vocabulary.

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = decoder_block_diagram()
        >>> len(fig.axes), fig.get_size_inches().tolist()  # one drawing, within the book's 8-inch column
        (1, [7.0, 7.4])
        >>> plt.close(fig)
    """
    fig, ax = canvas(7.0, 7.4, 10.0, 10.6)
    x, w = 3.9, 4.0
    box(ax, x, 0.45, w, 0.55, r"tokens $x_0, \dots, x_{T-1}$", "query")
    box(ax, x, 1.35, w + 0.5, 0.55, "token embedding (no positions)", "op")
    arrow(ax, (x, 0.73), (x, 1.07))
    # the block: the stream goes up the centre line, each sublayer on a branch
    norm1, attn, plus1 = 2.75, 3.75, 4.85
    norm2, ffn, plus2 = 5.8, 6.75, 7.75
    arrow(ax, (x, 1.63), (x, norm1 - 0.25))
    box(ax, x, norm1, w, 0.5, "RMSNorm", "norm")
    box(ax, x, attn, w, 0.95, "causal self-attention\n(grouped-query heads)", "attention")
    arrow(ax, (x, norm1 + 0.25), (x, attn - 0.48))
    low, high = _plus(ax, x, plus1)
    arrow(ax, (x, attn + 0.48), (x, low))
    _residual(ax, x, 2.2, plus1, x - w / 2 - 0.35)
    arrow(ax, (x, high), (x, norm2 - 0.25))
    box(ax, x, norm2, w, 0.5, "RMSNorm", "norm")
    box(ax, x, ffn, w, 0.75, "SwiGLU feed-forward", "ffn")
    arrow(ax, (x, norm2 + 0.25), (x, ffn - 0.38))
    low, high = _plus(ax, x, plus2)
    arrow(ax, (x, ffn + 0.38), (x, low))
    _residual(ax, x, plus1 + 0.45, plus2, x - w / 2 - 0.35)
    ax.add_patch(FancyBboxPatch((x - w / 2 - 0.6, 2.1), w + 1.2, plus2 - 2.1 + 0.45, boxstyle="round,pad=0.02",
                                fill=False, linestyle="--", linewidth=1))
    ax.text(x - w / 2 - 0.75, (2.15 + plus2) / 2, "decoder\nblock\n× N", ha="right", va="center", fontsize=FONT)
    box(ax, x, 8.75, w, 0.5, "RMSNorm", "norm")
    box(ax, x, 9.6, w, 0.5, "linear to the vocabulary", "op")
    arrow(ax, (x, high), (x, 8.5))
    arrow(ax, (x, 9.0), (x, 9.35))
    ax.text(x, 10.05, r"logits of $P(x_{t+1} \mid x_0, \dots, x_t)$", ha="center", va="bottom", fontsize=FONT)
    notes = [(attn + 0.3, "RoPE: q and k are turned\nby their positions"),
             (attn - 0.45, "causal mask; a KV cache\nwhen generating"),
             (norm1 - 0.2, "pre-norm: the sublayer\nreads a normalised copy"),
             (ffn + 0.2, r"$\mathbf{W}_{down}(\mathrm{SiLU}(\mathbf{W}_{gate}\mathbf{x})$"),
             (ffn - 0.2, r"$\quad\odot\,\mathbf{W}_{up}\mathbf{x})$, hidden $\approx 8d/3$")]
    for y, text in notes:
        ax.text(x + w / 2 + 0.75, y, text, ha="left", va="center", fontsize=FONT - 1, color=_NOTE)
    ax.text(x - w / 2 - 0.45, 1.75, "residual\nstream", ha="right", va="center", fontsize=FONT - 1,
            color=_RESIDUAL)
    ax.set_title("A decoder-only block as in Llama (pre-norm, no encoder)", fontsize=FONT + 1)
    return fig


def rope_rotation_diagram(theta: float = 0.35, pairs: tuple[tuple[int, int], ...] = ((2, 0), (7, 5))) -> Figure:
    r"""RoPE as a rotation (chapter 11): one pair of features of a query and of a key, drawn as 2-D vectors,
    turned by :math:`m\theta` and :math:`n\theta`; for every (m, n) with the same m - n the angle between
    them, and so their dot product, is the same.

    Args:
        theta: the pair's frequency :math:`\theta_i` (radians per position).
        pairs: the positions (m, n) of the query and the key, one panel each (1 to 3 panels).

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = rope_rotation_diagram()
        >>> len(fig.axes), bool(fig.get_size_inches()[0] <= 8)  # one panel per (m, n) pair, within the 8-inch column
        (2, True)
        >>> plt.close(fig)
    """
    if not 1 <= len(pairs) <= 3:
        raise ValueError(f"pairs must hold 1 to 3 (m, n) positions, got {len(pairs)}")
    fig, axes = plt.subplots(1, len(pairs), figsize=(2.6 * len(pairs) + 0.4, 3.3), squeeze=False)
    q0, k0 = 0.15, 1.25  # the angles of the unrotated query and key pairs
    for ax, (m, n) in zip(axes[0], pairs, strict=True):
        ax.set_xlim(-1.25, 1.25)
        ax.set_ylim(-1.25, 1.3)
        ax.set_aspect("equal")
        ax.axis("off")
        ax.add_patch(Arc((0, 0), 2.0, 2.0, color="#cccccc", lw=0.8))
        ax.plot([-1.15, 1.15], [0, 0], color="#bbbbbb", lw=0.6)
        ax.plot([0, 0], [-1.15, 1.15], color="#bbbbbb", lw=0.6)
        for angle0, pos, color, name in ((q0, m, "#1f4e79", "q"), (k0, n, "#b35806", "k")):
            angle = angle0 + pos * theta
            ax.annotate("", xy=(math.cos(angle0) * 0.55, math.sin(angle0) * 0.55), xytext=(0, 0),
                        arrowprops=dict(arrowstyle="-|>", color=color, lw=0.9, linestyle=":"))
            ax.annotate("", xy=(math.cos(angle), math.sin(angle)), xytext=(0, 0),
                        arrowprops=dict(arrowstyle="-|>", color=color, lw=1.6))
            ax.text(1.12 * math.cos(angle), 1.12 * math.sin(angle), rf"$R_{{{pos}}}\mathbf{{{name}}}$",
                    ha="center", va="center", fontsize=FONT, color=color)
        start, end = sorted((q0 + m * theta, k0 + n * theta))
        ax.add_patch(Arc((0, 0), 0.7, 0.7, theta1=math.degrees(start), theta2=math.degrees(end), color="black",
                         lw=1.2))
        ax.set_title(f"m = {m}, n = {n}: angle {abs(end - start):.2f} rad", fontsize=FONT)
    fig.suptitle(rf"RoPE turns a pair of q by $m\theta$, of k by $n\theta$ ($\theta$ = {theta})" "\n"
                 "the angle between them depends on m - n only", fontsize=FONT)
    fig.subplots_adjust(left=0.02, right=0.98, bottom=0.02, top=0.76, wspace=0.1)
    return fig
