"""Diagrams of chapters 1 and 3: attention pooling and the scoring pipeline."""

from __future__ import annotations

from matplotlib.figure import Figure

from ._draw import FONT, arrow, box, canvas


def attention_pooling_diagram(num_keys: int = 3) -> Figure:
    """Attention pooling: a query is scored against every key, a softmax turns the scores into
    weights, and the output is the weighted sum of the values (chapter 1).

    The query reaches every scoring box along one line (a dot marks each branch); each key enters
    its own scoring box, crossing that line without joining it.

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = attention_pooling_diagram(num_keys=3)
        >>> len(fig.axes), fig.get_size_inches().tolist()  # one drawing, within the book's 8-inch column
        (1, [7.8, 4.3])
        >>> plt.close(fig)
    """
    if num_keys < 2 or num_keys > 4:
        raise ValueError(f"num_keys must be between 2 and 4, got {num_keys}")
    fig, ax = canvas(7.8, 4.3, 13.0, 7.2)
    ys = [5.0 - (4.0 / (num_keys - 1)) * i for i in range(num_keys)]
    mid = (ys[0] + ys[-1]) / 2
    key_x, bus_x, score_x, score_w = 1.2, 2.45, 4.2, 1.9
    score_left = score_x - score_w / 2
    box(ax, key_x, 6.5, 1.3, 0.7, "query\n" r"$\mathbf{q}$", "query")
    box(ax, 6.3, mid, 1.4, ys[0] - ys[-1] + 0.8, "softmax", "op")
    box(ax, 10.5, mid, 1.5, 0.9, "weighted\nsum", "op")
    box(ax, 12.3, mid, 1.1, 0.7, "output", "query")
    # The query line: right from the query box, then down past every scoring box.
    ax.plot([key_x + 0.65, bus_x, bus_x], [6.5, 6.5, ys[-1] + 0.15], color="black", lw=1.1)
    for i, y in enumerate(ys, start=1):
        label = str(i) if i < num_keys else "n_k"
        box(ax, key_x, y - 0.15, 0.9, 0.6, rf"$\mathbf{{k}}_{{{label}}}$", "key")
        box(ax, score_x, y, score_w, 0.8, rf"$a(\mathbf{{q}}, \mathbf{{k}}_{{{label}}})$", "op")
        box(ax, 8.3, y + 0.38, 0.9, 0.55, rf"$\alpha_{{{label}}}$", "attention")
        box(ax, 8.3, y - 0.38, 0.9, 0.55, rf"$\mathbf{{v}}_{{{label}}}$", "value")
        ax.plot([bus_x], [y + 0.15], "o", color="black", ms=4)
        arrow(ax, (bus_x, y + 0.15), (score_left, y + 0.15))  # the query into score i
        arrow(ax, (key_x + 0.45, y - 0.15), (score_left, y - 0.15))  # key i into score i
        arrow(ax, (score_x + score_w / 2, y), (5.6, y))
        arrow(ax, (7.0, y + 0.38), (7.85, y + 0.38))
        arrow(ax, (8.75, y), (9.75, mid + 0.3 * (ys[0] - y > 0) - 0.3 * (y - ys[-1] > 0)))
    arrow(ax, (11.25, mid), (11.75, mid))
    ax.text(score_x, ys[0] + 0.65, "scores", ha="center", fontsize=FONT)
    ax.text(8.3, ys[0] + 0.95, r"weights $\alpha_i$, values $\mathbf{v}_i$", ha="center", fontsize=FONT)
    ax.text(10.5, mid - 0.75, r"$\sum_i \alpha_i \mathbf{v}_i$", ha="center", va="top", fontsize=FONT)
    ax.text(6.3, ys[-1] - 0.75, r"$\alpha_i \geq 0,\ \sum_i \alpha_i = 1$", ha="center", va="top",
            fontsize=FONT)
    ax.set_title("Attention pooling", fontsize=FONT + 1)
    return fig


def scoring_pipeline_diagram() -> Figure:
    """The pipeline of chapter 3: scores of every query against every key, a masked softmax over
    the valid keys, then a batched matrix product with the values.

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = scoring_pipeline_diagram()
        >>> len(fig.axes), fig.get_size_inches().tolist()  # one drawing, within the book's 8-inch column
        (1, [7.8, 2.9])
        >>> plt.close(fig)
    """
    fig, ax = canvas(7.8, 2.9, 12.2, 4.6)
    box(ax, 0.8, 4.0, 1.3, 0.7, r"queries $\mathbf{Q}$", "query", fontsize=FONT - 1)
    box(ax, 0.8, 2.6, 1.3, 0.7, r"keys $\mathbf{K}$", "key", fontsize=FONT - 1)
    box(ax, 0.8, 1.0, 1.3, 0.7, r"values $\mathbf{V}$", "value", fontsize=FONT - 1)
    box(ax, 3.5, 3.3, 2.6, 1.5, "scoring function\n" r"$a(\mathbf{q}, \mathbf{k})$:" "\n"
         r"dot, $/\sqrt{d}$, additive", "op", fontsize=FONT - 1)
    box(ax, 6.6, 3.3, 2.0, 1.2, "masked\nsoftmax", "attention")
    box(ax, 6.6, 1.4, 2.0, 0.7, "valid_lens", "op", fontsize=FONT - 1)
    box(ax, 9.4, 2.2, 1.8, 1.2, "batched\nmatmul", "op")
    box(ax, 11.5, 2.2, 1.2, 0.8, "output", "query", fontsize=FONT - 1)
    arrow(ax, (1.45, 4.0), (2.2, 3.6))
    arrow(ax, (1.45, 2.6), (2.2, 3.0))
    arrow(ax, (4.8, 3.3), (5.6, 3.3))
    ax.text(5.2, 3.55, "scores", ha="center", fontsize=FONT - 1)
    arrow(ax, (6.6, 1.75), (6.6, 2.7))
    arrow(ax, (7.6, 3.1), (8.5, 2.5))
    ax.text(8.3, 3.05, "weights", ha="left", fontsize=FONT - 1)
    arrow(ax, (1.45, 1.0), (8.5, 1.9))
    arrow(ax, (10.3, 2.2), (10.9, 2.2))
    ax.text(6.6, 4.15, "(batch, n_q, n_k)", ha="center", fontsize=FONT - 1)
    ax.text(9.4, 1.35, "(batch, n_q, d_v)", ha="center", va="top", fontsize=FONT - 1)
    ax.set_title("Attention scoring: score, mask, normalise, pool", fontsize=FONT + 1)
    return fig


def qkv_projection_diagram() -> Figure:
    """Where queries, keys and values come from (chapters 1 and 5): three learned linear maps of the same
    tokens, ``Q = X W_q^T``, ``K = X W_k^T``, ``V = X W_v^T``, with the tokens as rows.

    After the "Linear Transformations" figure of the GCPDS notes, in the book's layout (a weight
    matrix is out x in, as ``nn.Linear.weight``).

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = qkv_projection_diagram()
        >>> len(fig.axes), fig.get_size_inches().tolist()  # one drawing, within the book's 8-inch column
        (1, [7.8, 3.3])
        >>> plt.close(fig)
    """
    fig, ax = canvas(7.8, 3.3, 13.0, 5.5)
    x_box = box(ax, 1.4, 2.75, 2.0, 1.4, "tokens $\\mathbf{X}$\n$T \\times d$", "op")
    rows = [
        (4.5, "q", "query", "d_k", "queries", "Q"),
        (2.75, "k", "key", "d_k", "keys", "K"),
        (1.0, "v", "value", "d_v", "values", "V"),
    ]
    for y, sub, kind, size, name, big in rows:
        w_box = box(ax, 5.6, y, 2.6, 1.0, rf"$\mathbf{{W}}_{sub}$" "\n" rf"${size} \times d$", "op")
        out_box = box(ax, 10.4, y, 3.6, 1.0,
                      rf"{name} $\mathbf{{{big}}} = \mathbf{{X}}\mathbf{{W}}_{sub}^\top$" "\n"
                      rf"$T \times {size}$", kind)
        arrow(ax, (x_box[2], 2.75), (w_box[0], y))
        arrow(ax, (w_box[2], y), (out_box[0], y))
    ax.text(5.6, 5.3, "learned linear maps", ha="center", fontsize=FONT)
    ax.set_title("Queries, keys and values: three projections of the same tokens", fontsize=FONT + 1)
    return fig
