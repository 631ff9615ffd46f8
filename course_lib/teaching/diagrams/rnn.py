"""Diagram of chapter 4: the Bahdanau encoder--decoder."""

from __future__ import annotations

from matplotlib.figure import Figure

from ._draw import FONT, arrow, box, canvas


def bahdanau_diagram(num_steps: int = 4) -> Figure:
    """The RNN encoder-decoder with Bahdanau attention (chapter 4).

    The encoder embeds the source tokens and runs a GRU over them; its last state starts the decoder
    (s_0 = h_T). At decoder step t' the previous decoder state queries all encoder states, and the
    context joins the embedding of the previous output token as the input of the decoder's GRU, whose
    new state feeds the output layer and the next step.

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = bahdanau_diagram()
        >>> len(fig.axes), fig.get_size_inches().tolist()  # one drawing, within the book's 8-inch column
        (1, [7.8, 4.6])
        >>> plt.close(fig)
    """
    if num_steps < 3 or num_steps > 5:
        raise ValueError(f"num_steps must be between 3 and 5, got {num_steps}")
    fig, ax = canvas(7.8, 4.6, 12.6, 7.4)
    step = 4.4 / (num_steps - 1)
    xs = [0.7 + step * i for i in range(num_steps)]
    labels = [str(i + 1) for i in range(num_steps - 1)] + ["T_s"]
    red = "#990000"
    for j, (x, lab) in enumerate(zip(xs, labels, strict=True)):
        box(ax, x, 0.45, 0.95, 0.55, rf"$x_{{{lab}}}$", "query")
        box(ax, x, 1.55, 0.95, 0.6, rf"$\mathbf{{e}}(x_{{{lab}}})$", "value", fontsize=FONT - 1)
        box(ax, x, 2.85, 0.95, 0.75, "GRU", "rnn")
        target = 3.0 + 0.25 * j  # where this state's arrow meets the attention box
        ax.text(x - 0.08 if target > x else x + 0.08, 3.45, rf"$\mathbf{{h}}_{{{lab}}}$",
                ha="right" if target > x else "left", fontsize=FONT)
        arrow(ax, (x, 0.73), (x, 1.25))
        arrow(ax, (x, 1.85), (x, 2.47))
        if j:
            arrow(ax, (xs[j - 1] + 0.48, 2.85), (x - 0.48, 2.85))
        arrow(ax, (x, 3.23), (target, 5.3), color=red)
    ax.text(xs[0] - 0.45, -0.2, "encoder: embedding, then a GRU over the source", fontsize=FONT - 1, ha="left")
    weights = r"$\alpha_{t'j} = \mathrm{softmax}_j\, a(\mathbf{s}_{t'-1}, \mathbf{h}_j)$"
    box(ax, 3.7, 5.85, 3.9, 1.05, "additive attention\n" + weights, "attention", fontsize=FONT - 1)
    ax.text(3.7, 6.6, "keys = values = encoder states", ha="center", fontsize=FONT - 1)
    # decoder: s_0 = h_T, ..., s_{t'-1} -> GRU -> s_{t'} -> next step
    box(ax, 6.75, 2.85, 1.25, 0.75, r"$\mathbf{s}_0 = \mathbf{h}_{T_s}$", "query", fontsize=FONT - 1)
    arrow(ax, (xs[-1] + 0.48, 2.85), (6.12, 2.85))
    ax.text(7.75, 2.85, r"$\cdots$", ha="center", va="center", fontsize=FONT)
    box(ax, 8.75, 2.85, 1.1, 0.75, r"$\mathbf{s}_{t'-1}$", "query")
    arrow(ax, (7.4, 2.85), (7.55, 2.85), style="-")
    arrow(ax, (7.95, 2.85), (8.2, 2.85))
    box(ax, 10.3, 2.85, 1.1, 0.75, "GRU", "rnn")
    arrow(ax, (9.3, 2.85), (9.75, 2.85))
    box(ax, 11.85, 2.85, 1.1, 0.75, r"$\mathbf{s}_{t'}$", "query")
    arrow(ax, (10.85, 2.85), (11.3, 2.85))
    arrow(ax, (11.85, 2.47), (8.75, 2.47), dashed=True, rad=-0.45)
    ax.text(11.45, 1.95, "next step", ha="left", fontsize=FONT - 1)
    ax.text(8.75, 1.6, "decoder", ha="center", fontsize=FONT)
    arrow(ax, (8.75, 3.23), (5.65, 5.6))
    ax.text(7.6, 4.75, "query", fontsize=FONT - 1)
    box(ax, 10.3, 4.45, 1.55, 0.6, r"context $\mathbf{c}_{t'}$", "attention", fontsize=FONT - 1)
    arrow(ax, (5.65, 5.95), (10.3, 4.75))
    arrow(ax, (10.3, 4.15), (10.3, 3.23))
    box(ax, 10.3, 0.45, 1.55, 0.6, r"$\mathbf{e}(y_{t'-1})$", "value", fontsize=FONT - 1)
    arrow(ax, (10.3, 0.75), (10.3, 2.47))
    box(ax, 11.85, 5.85, 1.35, 0.8, "dense,\nsoftmax", "op", fontsize=FONT - 1)
    arrow(ax, (11.85, 3.23), (11.85, 5.45))
    ax.text(11.85, 6.45, r"$P(y_{t'})$", ha="center", fontsize=FONT)
    ax.set_title("Encoder-decoder with Bahdanau attention: a new context at every step", fontsize=FONT + 1)
    return fig
