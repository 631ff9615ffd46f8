"""Diagram of chapter 7: the Transformer encoder--decoder."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from ._draw import FONT, arrow, canvas, stack


def transformer_diagram() -> Figure:
    """The Transformer of chapter 7: encoder and decoder stacks of N blocks, each sublayer in a
    residual connection with layer normalisation, the look-ahead and padding masks, and
    cross-attention from the decoder to the encoder's output (the memory).

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = transformer_diagram()
        >>> len(fig.axes), fig.get_size_inches().tolist()  # one drawing, within the book's 8-inch column
        (1, [7.4, 6.9])
        >>> plt.close(fig)
    """
    fig, ax = canvas(7.4, 6.9, 11.8, 10.6)
    enc_x, dec_x, w = 3.3, 8.2, 3.5
    enc = stack(ax, enc_x, 0.5, w, [("source tokens", "query"), ("embedding + positions", "op"),
                                     ("multi-head self-attention", "attention"), ("add & norm", "norm"),
                                     ("feed-forward (FFN)", "ffn"), ("add & norm", "norm")])
    dec = stack(ax, dec_x, 0.5, w, [("target input (shifted)", "query"), ("embedding + positions", "op"),
                                     ("masked self-attention", "attention"), ("add & norm", "norm"),
                                     ("cross-attention", "attention"), ("add & norm", "norm"),
                                     ("feed-forward (FFN)", "ffn"), ("add & norm", "norm"),
                                     ("linear + softmax", "op")])
    ax.text(dec_x, dec[-1] + 0.75, r"$P(y_t \mid y_{<t}, x)$", ha="center", fontsize=FONT)
    # the N-times frames
    for x, lo, hi, label in ((enc_x, enc[2], enc[5], "encoder block"), (dec_x, dec[2], dec[7], "decoder block")):
        ax.add_patch(FancyBboxPatch((x - w / 2 - 0.25, lo - 0.55), w + 0.5, hi - lo + 1.1,
                                    boxstyle="round,pad=0.02", fill=False, linestyle="--", linewidth=1))
        side = x - w / 2 - 0.35 if x < 5 else x + w / 2 + 0.35
        ax.text(side, (lo + hi) / 2 + (0.9 if x < 5 else 1.6), f"{label}\n× N",
                ha="right" if x < 5 else "left", va="center", fontsize=FONT)
    # residual connections: from below each sublayer to its add & norm
    for x, pairs in ((enc_x, [(2, 3), (4, 5)]), (dec_x, [(2, 3), (4, 5), (6, 7)])):
        ys = enc if x == enc_x else dec
        for sub, norm in pairs:
            start = ys[sub] - 0.5
            side = x + w / 2 + 0.12 if x == enc_x else x - w / 2 - 0.12
            ax.plot([x, side, side], [start, start, ys[norm]], color="#1f4e79", lw=1)
            arrow(ax, (side, ys[norm]), (x + (w / 2 if x == enc_x else -w / 2), ys[norm]), color="#1f4e79")
    # memory to cross-attention
    ax.plot([enc_x, enc_x], [enc[5] + 0.31, enc[5] + 1.0], color="#990000", lw=1.3)
    arrow(ax, (enc_x, enc[5] + 1.0), (dec_x - w / 2, dec[4]), color="#990000")
    ax.text(enc_x - 0.2, enc[5] + 1.25, "memory (keys, values)", fontsize=FONT - 1, color="#990000",
            ha="center")
    ax.text(dec_x + w / 2 + 0.35, dec[2], "look-ahead\nmask", ha="left", va="center", fontsize=FONT - 1,
            color="#990000")
    ax.text(dec_x + w / 2 + 0.35, dec[4], "source\npadding mask", ha="left", va="center",
            fontsize=FONT - 1, color="#990000")
    ax.text(enc_x - w / 2 - 0.35, enc[2], "source\npadding mask", ha="right", va="center",
            fontsize=FONT - 1, color="#990000")
    ax.set_title("The Transformer (post-norm, as in the paper)", fontsize=FONT + 1)
    return fig
