"""Diagram of chapter 7: the Transformer encoder--decoder."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyBboxPatch

from ._draw import FONT, arrow, box, canvas

_RESIDUAL = "#1f4e79"  # the residual connections
_MEMORY = "#990000"  # the encoder's output and the masks
_W = 3.3  # width of a sublayer box
_H = 0.62  # height of a one-line box
_H2 = 0.95  # height of a two-line box


def _plus(ax, x: float, y: float, r: float = 0.22) -> None:
    """A sum node: a circle with a plus."""
    ax.add_patch(Circle((x, y), r, facecolor="white", edgecolor="black", linewidth=1))
    ax.plot([x - r * 0.6, x + r * 0.6], [y, y], color="black", lw=1)
    ax.plot([x, x], [y - r * 0.6, y + r * 0.6], color="black", lw=1)


def _embed(ax, x: float, y: float, tokens: str, pe_side: float) -> float:
    """Tokens, the scaled embedding, and a separate sum with the positional encoding; returns the top y."""
    box(ax, x, y, _W, _H, tokens, "query", fontsize=FONT - 1)
    box(ax, x, y + 1.05, _W, _H, r"embedding $\times\sqrt{d}$", "op", fontsize=FONT - 1)
    arrow(ax, (x, y + _H / 2), (x, y + 1.05 - _H / 2))
    _plus(ax, x, y + 1.95)
    arrow(ax, (x, y + 1.05 + _H / 2), (x, y + 1.73))
    pe_x = x + pe_side * (_W / 2 + 0.35)
    ax.text(pe_x, y + 1.95, "positional\nencoding", ha="right" if pe_side < 0 else "left", va="center",
            fontsize=FONT - 1)
    arrow(ax, (pe_x, y + 1.95), (x + pe_side * 0.22, y + 1.95))
    return y + 2.17


def _qkv(ax, x: float, y_from: float, y_box: float, inputs: tuple[tuple[str, float], ...]) -> None:
    """Inputs forking from the stream at (x, y_from) into a box's bottom: (label, x offset) each, one per
    projection."""
    fork = y_from + 0.25
    offsets = [dx for _, dx in inputs]
    ax.plot([x, x], [y_from, fork], color="black", lw=1.1)
    ax.plot([x + min(offsets + [0.0]), x + max(offsets + [0.0])], [fork, fork], color="black", lw=1.1)
    for label, dx in inputs:
        arrow(ax, (x + dx, fork), (x + dx, y_box))
        ax.text(x + dx + 0.1, (fork + y_box) / 2, label, ha="left", va="center", fontsize=FONT - 1)


_QKV = (("Q", -1.0), ("K", 0.0), ("V", 1.0))


def _residual(ax, x: float, y_from: float, y_to: float, side: float) -> None:
    """The residual connection: from the stream below a sublayer, around it, into its add & norm."""
    edge = x + side * (_W / 2 + 0.3)
    ax.plot([x, edge, edge], [y_from, y_from, y_to], color=_RESIDUAL, lw=1.3)
    arrow(ax, (edge, y_to), (x + side * _W / 2, y_to), color=_RESIDUAL)


def _sublayer(ax, x: float, y: float, text: str, kind: str, side: float, *, height: float = _H2,
              inputs: tuple[tuple[str, float], ...] | None = _QKV) -> tuple[float, float]:
    """A sublayer fed from the stream at y, its residual connection and its add & norm.

    Returns the centre y of the sublayer and the top of the add & norm box."""
    y_box = y + 0.75
    centre = y_box + height / 2
    box(ax, x, centre, _W, height, text, kind, fontsize=FONT - 1)
    if inputs:
        _qkv(ax, x, y, y_box, inputs)
    else:
        arrow(ax, (x, y), (x, y_box))
    norm_y = y_box + height + 0.55
    box(ax, x, norm_y, _W, 0.5, "add & norm", "norm", fontsize=FONT - 1)
    arrow(ax, (x, y_box + height), (x, norm_y - 0.25))
    _residual(ax, x, y + 0.12, norm_y, side)
    return centre, norm_y + 0.25


def _frame(ax, x: float, bottom: float, top: float, label: str, side: float, label_y: float) -> None:
    """The dashed frame of a block repeated N times, labelled outside at height ``label_y``."""
    ax.add_patch(FancyBboxPatch((x - _W / 2 - 0.55, bottom), _W + 1.1, top - bottom,
                                boxstyle="round,pad=0.02", fill=False, linestyle="--", linewidth=1))
    ax.text(x + side * (_W / 2 + 0.75), label_y, f"{label}\n× N", ha="left" if side > 0 else "right",
            va="center", fontsize=FONT)


def transformer_diagram() -> Figure:
    """The Transformer of chapter 7 (post-norm, as in the paper).

    Encoder and decoder stacks of N blocks; every sublayer has its own residual connection and add &
    norm; each attention sublayer gets separate query, key and value inputs (it projects each with
    its own matrices); the decoder's cross-attention takes its queries from the decoder below and its
    keys and values from the encoder's output (the memory); the positional encoding is added by its
    own sum node; the output layer is a linear map followed by a softmax.

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = transformer_diagram()
        >>> len(fig.axes), fig.get_size_inches().tolist()  # one drawing, within the book's 8-inch column
        (1, [7.6, 7.6])
        >>> plt.close(fig)
    """
    fig, ax = canvas(7.6, 7.6, 13.4, 12.95)
    fig.subplots_adjust(left=0.01, right=0.99, bottom=0.01, top=0.95)
    enc_x, dec_x = 4.35, 9.05
    left, right = -1, 1  # the side of each column where residuals and labels go

    def label(x: float, y: float, text: str, side: float, color: str = _MEMORY) -> None:
        ax.text(x + side * (_W / 2 + 0.75), y, text, ha="left" if side > 0 else "right", va="center",
                fontsize=FONT - 1, color=color)

    # encoder: tokens, embedding, + positions, then one block
    y = _embed(ax, enc_x, 0.45, r"source tokens $(B, T_s)$", left)
    block_lo = y + 0.15
    self_att, y = _sublayer(ax, enc_x, y, "multi-head\nself-attention", "attention", left)
    label(enc_x, self_att, "source\npadding mask", left)
    ffn, y = _sublayer(ax, enc_x, y, "feed-forward (FFN)", "ffn", left, height=_H, inputs=None)
    _frame(ax, enc_x, block_lo, y + 0.2, "encoder\nblock", left, ffn)
    enc_top = y
    # decoder: tokens, embedding, + positions, then one block
    y = _embed(ax, dec_x, 0.45, "target input $(B, T)$,\nshifted right", right)
    block_lo = y + 0.15
    masked, y = _sublayer(ax, dec_x, y, "masked multi-head\nself-attention", "attention", right)
    label(dec_x, masked, "look-ahead\nmask", right)
    # cross-attention: K and V from the encoder, Q from the decoder below
    k_dx, v_dx = -1.2, -0.45
    cross, top = _sublayer(ax, dec_x, y, "multi-head\ncross-attention", "attention", right, inputs=(("Q", 0.9),))
    label(dec_x, cross, "source\npadding mask", right)
    y_box = y + 0.75
    memory_y = enc_top + 0.75
    ax.plot([enc_x, enc_x], [enc_top, memory_y], color=_MEMORY, lw=1.3)
    ax.text(enc_x, memory_y + 0.25, r"memory $\mathbf{H}_{\mathrm{enc}}$ $(B, T_s, d)$", ha="center",
            fontsize=FONT - 1, color=_MEMORY)
    gap_x = (enc_x + _W / 2 + dec_x - _W / 2) / 2 - 0.25
    turn_y = y_box - 0.42
    ax.plot([enc_x, gap_x, gap_x, dec_x + v_dx], [memory_y, memory_y, turn_y, turn_y], color=_MEMORY, lw=1.3)
    for dx, name in ((k_dx, "K"), (v_dx, "V")):
        arrow(ax, (dec_x + dx, turn_y), (dec_x + dx, y_box), color=_MEMORY)
        ax.text(dec_x + dx + 0.08, (turn_y + y_box) / 2, name, ha="left", va="center", fontsize=FONT - 1,
                color=_MEMORY)
    ffn, y = _sublayer(ax, dec_x, top, "feed-forward (FFN)", "ffn", right, height=_H, inputs=None)
    _frame(ax, dec_x, block_lo, y + 0.2, "decoder\nblock", right, ffn)
    # output layer: linear, then softmax
    box(ax, dec_x, y + 0.85, _W, 0.55, r"linear $d \to |\mathcal{V}|$", "op", fontsize=FONT - 1)
    arrow(ax, (dec_x, y), (dec_x, y + 0.85 - 0.275))
    box(ax, dec_x, y + 1.7, _W, 0.55, "softmax", "op", fontsize=FONT - 1)
    arrow(ax, (dec_x, y + 0.85 + 0.275), (dec_x, y + 1.7 - 0.275))
    arrow(ax, (dec_x, y + 1.7 + 0.275), (dec_x, y + 2.25))
    ax.text(dec_x, y + 2.45, r"$P(y_{t+1} \mid y_{\leq t}, x)$ for every $t$", ha="center", fontsize=FONT)
    ax.set_title("The Transformer (post-norm, as in the paper)", fontsize=FONT + 1)
    return fig
