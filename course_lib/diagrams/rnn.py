"""Diagram of chapter 4: the Bahdanau encoder--decoder."""

from __future__ import annotations

from matplotlib.figure import Figure

from ._draw import FONT, arrow, box, canvas


def bahdanau_diagram(num_steps: int = 4) -> Figure:
    """The RNN encoder-decoder with Bahdanau attention (chapter 4): at decoder step t' the previous
    decoder state queries all encoder states, and the context joins the GRU input.

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = bahdanau_diagram(num_steps=4)
        >>> len(fig.axes), fig.get_size_inches().tolist()  # one drawing, within the book's 8-inch column
        (1, [7.8, 3.8])
        >>> plt.close(fig)
    """
    if num_steps < 3 or num_steps > 5:
        raise ValueError(f"num_steps must be between 3 and 5, got {num_steps}")
    fig, ax = canvas(7.8, 3.8, 12.0, 5.9)
    xs = [0.9 + 1.45 * i for i in range(num_steps)]
    labels = [str(i + 1) for i in range(num_steps - 1)] + ["T"]
    for j, (x, lab) in enumerate(zip(xs, labels, strict=True)):
        box(ax, x, 0.6, 1.0, 0.6, rf"$x_{lab}$", "query")
        box(ax, x, 2.0, 1.0, 0.8, "GRU", "rnn")
        ax.text(x, 2.6, rf"$\mathbf{{h}}_{lab}$", ha="center", fontsize=FONT)
        arrow(ax, (x, 0.9), (x, 1.6))
        if j:
            arrow(ax, (xs[j - 1] + 0.5, 2.0), (x - 0.5, 2.0))
        arrow(ax, (x, 2.85), (4.1, 4.1), color="#990000")
    ax.text(xs[0] - 0.5, 0.0, "encoder (source tokens)", fontsize=FONT, ha="left")
    weights = r"$\alpha_{t'j} = \mathrm{softmax}_j\, a(\mathbf{s}_{t'-1}, \mathbf{h}_j)$"
    box(ax, 4.6, 4.6, 3.6, 1.0, "additive attention\n" + weights, "attention", fontsize=FONT - 1)
    ax.text(4.6, 5.25, "keys = values = encoder states", ha="center", fontsize=FONT - 1)
    box(ax, 9.0, 2.2, 1.6, 0.9, "GRU", "rnn")
    ax.text(9.0, 1.45, "decoder step $t'$", ha="center", fontsize=FONT)
    box(ax, 9.0, 0.55, 1.6, 0.6, r"$e(y_{t'-1})$", "value")
    arrow(ax, (9.0, 0.85), (9.0, 1.3))
    box(ax, 11.2, 4.0, 1.4, 0.6, r"$\mathbf{s}_{t'-1}$", "query")
    arrow(ax, (10.5, 4.1), (6.1, 4.6))
    ax.text(8.4, 4.55, "query", fontsize=FONT - 1)
    box(ax, 7.1, 3.3, 1.6, 0.6, r"context $\mathbf{c}_{t'}$", "attention", fontsize=FONT - 1)
    arrow(ax, (5.6, 4.1), (6.5, 3.6))
    arrow(ax, (7.5, 3.0), (8.6, 2.65))
    arrow(ax, (11.2, 3.7), (9.8, 2.4))
    box(ax, 11.2, 1.0, 1.4, 0.8, "dense,\nsoftmax", "op", fontsize=FONT - 1)
    arrow(ax, (9.8, 2.0), (10.5, 1.2))
    ax.text(11.2, 0.1, r"$P(y_{t'})$", ha="center", fontsize=FONT)
    ax.text(10.35, 1.85, r"$\mathbf{s}_{t'}$", ha="left", fontsize=FONT)
    ax.set_title("Encoder-decoder with Bahdanau attention: a new context at every step",
                 fontsize=FONT + 1)
    return fig
