"""Schematic diagrams of the book, drawn with matplotlib when the book is built.

One function per diagram; each returns the matplotlib figure and draws nothing else. The figures
are sized for the book's text column: at most 8 inches wide and no text smaller than 9 points
(10 px at the 80 dpi the notebooks use), so they stay legible at the column's width.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

__all__ = [
    "attention_pooling_diagram",
    "scoring_pipeline_diagram",
    "bahdanau_diagram",
    "multihead_diagram",
    "transformer_diagram",
]

_FONT = 10  # points
_COLORS = {
    "query": "#cfe2f3",
    "key": "#fde9c9",
    "value": "#d9ead3",
    "op": "#eeeeee",
    "attention": "#f4cccc",
    "norm": "#fff2cc",
    "ffn": "#d0e0e3",
    "rnn": "#e6d5ee",
}


def _canvas(width: float, height: float, xlim: float, ylim: float) -> tuple[Figure, plt.Axes]:
    fig, ax = plt.subplots(figsize=(width, height))
    ax.set_xlim(0, xlim)
    ax.set_ylim(0, ylim)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def _box(ax, x: float, y: float, w: float, h: float, text: str, kind: str = "op",
         fontsize: float = _FONT) -> tuple[float, float, float, float]:
    """A rounded box centred at (x, y); returns its (left, bottom, right, top)."""
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                facecolor=_COLORS[kind], edgecolor="black", linewidth=1))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize)
    return x - w / 2, y - h / 2, x + w / 2, y + h / 2


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], text: str | None = None,
           style: str = "-|>", color: str = "black", dashed: bool = False, rad: float = 0.0) -> None:
    ax.annotate("", xy=end, xytext=start,
                arrowprops=dict(arrowstyle=style, color=color, lw=1.1, shrinkA=0, shrinkB=0,
                                linestyle="--" if dashed else "-",
                                connectionstyle=f"arc3,rad={rad}"))
    if text:
        ax.text((start[0] + end[0]) / 2 + 0.08, (start[1] + end[1]) / 2, text, fontsize=_FONT - 1,
                ha="left", va="center")


def attention_pooling_diagram(num_keys: int = 3) -> Figure:
    """Attention pooling: a query is scored against every key, a softmax turns the scores into
    weights, and the output is the weighted sum of the values (chapter 1)."""
    if num_keys < 2 or num_keys > 4:
        raise ValueError(f"num_keys must be between 2 and 4, got {num_keys}")
    fig, ax = _canvas(7.8, 3.9, 13.0, 6.5)
    ys = [5.0 - (4.0 / (num_keys - 1)) * i for i in range(num_keys)]
    mid = (ys[0] + ys[-1]) / 2
    _box(ax, 0.6, mid, 1.1, 0.8, "query\n" r"$\mathbf{q}$", "query")
    _box(ax, 6.3, mid, 1.4, ys[0] - ys[-1] + 0.8, "softmax", "op")
    _box(ax, 10.5, mid, 1.5, 0.9, "weighted\nsum", "op")
    _box(ax, 12.3, mid, 1.1, 0.7, "output", "query")
    for i, y in enumerate(ys, start=1):
        label = str(i) if i < num_keys else "m"
        _box(ax, 2.3, y, 0.9, 0.6, rf"$\mathbf{{k}}_{label}$", "key")
        _box(ax, 4.2, y, 1.9, 0.7, rf"$a(\mathbf{{q}}, \mathbf{{k}}_{label})$", "op")
        _box(ax, 8.3, y + 0.38, 0.9, 0.55, rf"$\alpha_{label}$", "attention")
        _box(ax, 8.3, y - 0.38, 0.9, 0.55, rf"$\mathbf{{v}}_{label}$", "value")
        _arrow(ax, (1.15, mid), (1.85, y - 0.2))
        _arrow(ax, (2.75, y), (3.25, y))
        _arrow(ax, (5.15, y), (5.6, y))
        _arrow(ax, (7.0, y + 0.38), (7.85, y + 0.38))
        _arrow(ax, (8.75, y), (9.75, mid + 0.3 * (ys[0] - y > 0) - 0.3 * (y - ys[-1] > 0)))
    _arrow(ax, (11.25, mid), (11.75, mid))
    ax.text(4.2, ys[0] + 0.65, "scores", ha="center", fontsize=_FONT)
    ax.text(8.3, ys[0] + 0.95, r"weights $\alpha_i$, values $\mathbf{v}_i$", ha="center", fontsize=_FONT)
    ax.text(10.5, mid - 0.75, r"$\sum_i \alpha_i \mathbf{v}_i$", ha="center", va="top", fontsize=_FONT)
    ax.text(6.3, ys[-1] - 0.75, r"$\alpha_i \geq 0,\ \sum_i \alpha_i = 1$", ha="center", va="top",
            fontsize=_FONT)
    ax.set_title("Attention pooling", fontsize=_FONT + 1)
    return fig


def scoring_pipeline_diagram() -> Figure:
    """The pipeline of chapter 3: scores of every query against every key, a masked softmax over
    the valid keys, then a batched matrix product with the values."""
    fig, ax = _canvas(7.8, 2.9, 12.2, 4.6)
    _box(ax, 0.8, 4.0, 1.3, 0.7, r"queries $\mathbf{Q}$", "query", fontsize=_FONT - 1)
    _box(ax, 0.8, 2.6, 1.3, 0.7, r"keys $\mathbf{K}$", "key", fontsize=_FONT - 1)
    _box(ax, 0.8, 1.0, 1.3, 0.7, r"values $\mathbf{V}$", "value", fontsize=_FONT - 1)
    _box(ax, 3.5, 3.3, 2.6, 1.5, "scoring function\n" r"$a(\mathbf{q}, \mathbf{k})$:" "\n"
         r"dot, $/\sqrt{d}$, additive", "op", fontsize=_FONT - 1)
    _box(ax, 6.6, 3.3, 2.0, 1.2, "masked\nsoftmax", "attention")
    _box(ax, 6.6, 1.4, 2.0, 0.7, "valid_lens", "op", fontsize=_FONT - 1)
    _box(ax, 9.4, 2.2, 1.8, 1.2, "batched\nmatmul", "op")
    _box(ax, 11.5, 2.2, 1.2, 0.8, "output", "query", fontsize=_FONT - 1)
    _arrow(ax, (1.45, 4.0), (2.2, 3.6))
    _arrow(ax, (1.45, 2.6), (2.2, 3.0))
    _arrow(ax, (4.8, 3.3), (5.6, 3.3))
    ax.text(5.2, 3.55, "scores", ha="center", fontsize=_FONT - 1)
    _arrow(ax, (6.6, 1.75), (6.6, 2.7))
    _arrow(ax, (7.6, 3.1), (8.5, 2.5))
    ax.text(8.3, 3.05, "weights", ha="left", fontsize=_FONT - 1)
    _arrow(ax, (1.45, 1.0), (8.5, 1.9))
    _arrow(ax, (10.3, 2.2), (10.9, 2.2))
    ax.text(6.6, 4.15, "(batch, n_q, n_k)", ha="center", fontsize=_FONT - 1)
    ax.text(9.4, 1.35, "(batch, n_q, d_v)", ha="center", va="top", fontsize=_FONT - 1)
    ax.set_title("Attention scoring: score, mask, normalise, pool", fontsize=_FONT + 1)
    return fig


def bahdanau_diagram(num_steps: int = 4) -> Figure:
    """The RNN encoder-decoder with Bahdanau attention (chapter 4): at decoder step t' the previous
    decoder state queries all encoder states, and the context joins the GRU input."""
    if num_steps < 3 or num_steps > 5:
        raise ValueError(f"num_steps must be between 3 and 5, got {num_steps}")
    fig, ax = _canvas(7.8, 3.8, 12.0, 5.9)
    xs = [0.9 + 1.45 * i for i in range(num_steps)]
    labels = [str(i + 1) for i in range(num_steps - 1)] + ["T"]
    for j, (x, lab) in enumerate(zip(xs, labels, strict=True)):
        _box(ax, x, 0.6, 1.0, 0.6, rf"$x_{lab}$", "query")
        _box(ax, x, 2.0, 1.0, 0.8, "GRU", "rnn")
        ax.text(x, 2.6, rf"$\mathbf{{h}}_{lab}$", ha="center", fontsize=_FONT)
        _arrow(ax, (x, 0.9), (x, 1.6))
        if j:
            _arrow(ax, (xs[j - 1] + 0.5, 2.0), (x - 0.5, 2.0))
        _arrow(ax, (x, 2.85), (4.1, 4.1), color="#990000")
    ax.text(xs[0] - 0.5, 0.0, "encoder (source tokens)", fontsize=_FONT, ha="left")
    weights = r"$\alpha_{t'j} = \mathrm{softmax}_j\, a(\mathbf{s}_{t'-1}, \mathbf{h}_j)$"
    _box(ax, 4.6, 4.6, 3.6, 1.0, "additive attention\n" + weights, "attention", fontsize=_FONT - 1)
    ax.text(4.6, 5.25, "keys = values = encoder states", ha="center", fontsize=_FONT - 1)
    _box(ax, 9.0, 2.2, 1.6, 0.9, "GRU", "rnn")
    ax.text(9.0, 1.45, "decoder step $t'$", ha="center", fontsize=_FONT)
    _box(ax, 9.0, 0.55, 1.6, 0.6, r"$e(y_{t'-1})$", "value")
    _arrow(ax, (9.0, 0.85), (9.0, 1.3))
    _box(ax, 11.2, 4.0, 1.4, 0.6, r"$\mathbf{s}_{t'-1}$", "query")
    _arrow(ax, (10.5, 4.1), (6.1, 4.6))
    ax.text(8.4, 4.55, "query", fontsize=_FONT - 1)
    _box(ax, 7.1, 3.3, 1.6, 0.6, r"context $\mathbf{c}_{t'}$", "attention", fontsize=_FONT - 1)
    _arrow(ax, (5.6, 4.1), (6.5, 3.6))
    _arrow(ax, (7.5, 3.0), (8.6, 2.65))
    _arrow(ax, (11.2, 3.7), (9.8, 2.4))
    _box(ax, 11.2, 1.0, 1.4, 0.8, "dense,\nsoftmax", "op", fontsize=_FONT - 1)
    _arrow(ax, (9.8, 2.0), (10.5, 1.2))
    ax.text(11.2, 0.1, r"$P(y_{t'})$", ha="center", fontsize=_FONT)
    ax.text(10.35, 1.85, r"$\mathbf{s}_{t'}$", ha="left", fontsize=_FONT)
    ax.set_title("Encoder-decoder with Bahdanau attention: a new context at every step",
                 fontsize=_FONT + 1)
    return fig


def multihead_diagram(num_heads: int = 3) -> Figure:
    """Multi-head attention (chapter 5): h sets of projections, h scaled dot-product attentions
    side by side, concatenation and the output projection W_o."""
    if num_heads < 2 or num_heads > 4:
        raise ValueError(f"num_heads must be between 2 and 4, got {num_heads}")
    fig, ax = _canvas(7.8, 4.3, 12.0, 6.6)
    for x, text, kind in ((1.5, "queries", "query"), (3.5, "keys", "key"), (5.5, "values", "value")):
        _box(ax, x, 0.5, 1.5, 0.6, text, kind)
    head_x = [1.9 + (8.2 / (num_heads - 1)) * i for i in range(num_heads)]
    for i, x in enumerate(head_x):
        name = str(i + 1) if i < num_heads - 1 else "h"
        maps = ", ".join(rf"\mathbf{{W}}_{role}^{{({name})}}" for role in "qkv")
        _box(ax, x, 2.1, 2.7, 0.7, f"${maps}$", "op", fontsize=_FONT - 1)
        _box(ax, x, 3.5, 2.7, 0.9, f"scaled dot-product\nattention, head {name}", "attention", fontsize=_FONT - 1)
        for src in (1.5, 3.5, 5.5):
            _arrow(ax, (src, 0.8), (x + 0.3 * (src - 3.5) / 2, 1.75), color="#555555")
        _arrow(ax, (x, 2.45), (x, 3.05))
        _arrow(ax, (x, 3.95), (6.0 + 0.3 * (i - 1), 4.7))
        ax.text(x + 1.2, 2.75, r"$d_h = d/h$", fontsize=_FONT - 1, ha="left")
    _box(ax, 6.0, 5.0, 2.6, 0.6, "concatenate heads", "op")
    _box(ax, 6.0, 6.1, 2.6, 0.6, r"$\mathbf{W}_o$ ($d \times d$)", "op")
    _arrow(ax, (6.0, 5.3), (6.0, 5.8))
    ax.text(7.5, 6.1, "output $(T, d)$", fontsize=_FONT, ha="left", va="center")
    ax.set_title(f"Multi-head attention ({num_heads} heads drawn)", fontsize=_FONT + 1)
    return fig


def _stack(ax, x: float, y0: float, width: float, layers: list[tuple[str, str]], gap: float = 0.35,
           height: float = 0.62) -> list[float]:
    """Boxes stacked upwards from y0; returns the centre y of each."""
    ys = []
    y = y0
    for text, kind in layers:
        _box(ax, x, y, width, height, text, kind, fontsize=_FONT - 1)
        ys.append(y)
        y += height + gap
    for a, b in zip(ys, ys[1:], strict=False):
        _arrow(ax, (x, a + height / 2), (x, b - height / 2))
    return ys


def transformer_diagram() -> Figure:
    """The Transformer of chapter 7: encoder and decoder stacks of N blocks, each sublayer in a
    residual connection with layer normalisation, the look-ahead and padding masks, and
    cross-attention from the decoder to the encoder's output (the memory)."""
    fig, ax = _canvas(7.4, 6.9, 11.8, 10.6)
    enc_x, dec_x, w = 3.3, 8.2, 3.5
    enc = _stack(ax, enc_x, 0.5, w, [("source tokens", "query"), ("embedding + positions", "op"),
                                     ("multi-head self-attention", "attention"), ("add & norm", "norm"),
                                     ("feed-forward (FFN)", "ffn"), ("add & norm", "norm")])
    dec = _stack(ax, dec_x, 0.5, w, [("target input (shifted)", "query"), ("embedding + positions", "op"),
                                     ("masked self-attention", "attention"), ("add & norm", "norm"),
                                     ("cross-attention", "attention"), ("add & norm", "norm"),
                                     ("feed-forward (FFN)", "ffn"), ("add & norm", "norm"),
                                     ("linear + softmax", "op")])
    ax.text(dec_x, dec[-1] + 0.75, r"$P(y_t \mid y_{<t}, x)$", ha="center", fontsize=_FONT)
    # the N-times frames
    for x, lo, hi, label in ((enc_x, enc[2], enc[5], "encoder block"), (dec_x, dec[2], dec[7], "decoder block")):
        ax.add_patch(FancyBboxPatch((x - w / 2 - 0.25, lo - 0.55), w + 0.5, hi - lo + 1.1,
                                    boxstyle="round,pad=0.02", fill=False, linestyle="--", linewidth=1))
        side = x - w / 2 - 0.35 if x < 5 else x + w / 2 + 0.35
        ax.text(side, (lo + hi) / 2 + (0.9 if x < 5 else 1.6), f"{label}\n× N",
                ha="right" if x < 5 else "left", va="center", fontsize=_FONT)
    # residual connections: from below each sublayer to its add & norm
    for x, pairs in ((enc_x, [(2, 3), (4, 5)]), (dec_x, [(2, 3), (4, 5), (6, 7)])):
        ys = enc if x == enc_x else dec
        for sub, norm in pairs:
            start = ys[sub] - 0.5
            side = x + w / 2 + 0.12 if x == enc_x else x - w / 2 - 0.12
            ax.plot([x, side, side], [start, start, ys[norm]], color="#1f4e79", lw=1)
            _arrow(ax, (side, ys[norm]), (x + (w / 2 if x == enc_x else -w / 2), ys[norm]), color="#1f4e79")
    # memory to cross-attention
    ax.plot([enc_x, enc_x], [enc[5] + 0.31, enc[5] + 1.0], color="#990000", lw=1.3)
    _arrow(ax, (enc_x, enc[5] + 1.0), (dec_x - w / 2, dec[4]), color="#990000")
    ax.text(enc_x - 0.2, enc[5] + 1.25, "memory (keys, values)", fontsize=_FONT - 1, color="#990000",
            ha="center")
    ax.text(dec_x + w / 2 + 0.35, dec[2], "look-ahead\nmask", ha="left", va="center", fontsize=_FONT - 1,
            color="#990000")
    ax.text(dec_x + w / 2 + 0.35, dec[4], "source\npadding mask", ha="left", va="center",
            fontsize=_FONT - 1, color="#990000")
    ax.text(enc_x - w / 2 - 0.35, enc[2], "source\npadding mask", ha="right", va="center",
            fontsize=_FONT - 1, color="#990000")
    ax.set_title("The Transformer (post-norm, as in the paper)", fontsize=_FONT + 1)
    return fig
