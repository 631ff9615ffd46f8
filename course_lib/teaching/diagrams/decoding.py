"""Diagrams of chapter 8: teacher forcing, the key/value cache and a beam-search tree."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from ._draw import COLORS, FONT, arrow, box, canvas

# 8's target for "dimanche 22 novembre 2026"
_DATE = "2026-11-22"


def teacher_forcing_diagram(target: str = _DATE) -> Figure:
    """Teacher forcing (chapter 8): the decoder reads ``<bos>`` and the target shifted right by one
    position, and position t is trained to predict the target's token t (the last one ``<eos>``).

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = teacher_forcing_diagram()
        >>> len(fig.axes), fig.get_size_inches().tolist()  # one drawing, within the book's 8-inch column
        (1, [7.8, 3.7])
        >>> plt.close(fig)
    """
    if not 2 <= len(target) <= 11:
        raise ValueError(f"target must have 2 to 11 characters (one box each), got {len(target)}")
    tokens = list(target)
    labels = [*tokens, "<eos>"]  # tgt_out
    inputs = ["<bos>", *tokens]  # tgt_in
    n = len(labels)
    step, x0 = 0.74, 2.75
    xs = [x0 + step * i for i in range(n)]
    fig, ax = canvas(7.8, 3.7, x0 + step * (n - 1) + 0.45, 5.0)
    low, high = 0.75, 3.85
    # The shift: target token t is the decoder input at position t + 1 (drawn behind the decoder box).
    for i in range(n - 1):
        ax.plot([xs[i] + 0.1, xs[i + 1] - 0.1], [high - 0.28, low + 0.28], color="#888888", lw=0.9, ls=":",
                zorder=0)
    box(ax, (xs[0] + xs[-1]) / 2, 2.3, xs[-1] - xs[0] + 0.64, 0.8,
        "decoder: position t reads tgt_in[1..t] (look-ahead mask)\nand the source", "attention")
    for x, inp, lab in zip(xs, inputs, labels, strict=True):
        box(ax, x, low, 0.68, 0.52, inp, "value" if inp != "<bos>" else "op", fontsize=FONT - 1)
        box(ax, x, high, 0.68, 0.52, lab, "query" if lab != "<eos>" else "op", fontsize=FONT - 1)
        arrow(ax, (x, low + 0.26), (x, 1.9))
        arrow(ax, (x, 2.7), (x, high - 0.26))
    for y, text in ((high - 0.05, "target tgt_out:\nwhat position t\nmust predict"),
                    (low, "decoder input tgt_in:\nthe target shifted\nright, <bos> first")):
        ax.text(x0 - 0.5, y, text, ha="right", va="center", fontsize=FONT - 1)
    for i, x in enumerate(xs):
        ax.text(x, high + 0.5, str(i + 1), ha="center", fontsize=FONT - 1, color="#555555")
    ax.text(x0 - 0.5, high + 0.5, "position t", ha="right", fontsize=FONT - 1, color="#555555")
    ax.text(xs[0] - 0.31, 0.0, "dotted: a target token is the decoder input one position later",
            ha="left", va="center", fontsize=FONT - 1, color="#555555")
    ax.set_ylim(-0.2, 5.0)
    ax.set_title("Teacher forcing: one pass trains every position on the true prefix", fontsize=FONT + 1)
    return fig


def kv_cache_diagram(steps: int = 4) -> Figure:
    """The key/value cache (chapter 8): at each decoding step only the new token is projected; its key
    and value are appended to the cache, and its query attends to every cached key.

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = kv_cache_diagram(steps=4)
        >>> len(fig.axes), fig.get_size_inches().tolist()  # one drawing, within the book's 8-inch column
        (1, [7.8, 3.9])
        >>> plt.close(fig)
    """
    if not 2 <= steps <= 4:
        raise ValueError(f"steps must be between 2 and 4, got {steps}")
    panel = 7.8 / steps
    fig, ax = canvas(7.8, 3.9, 7.8, 3.9)
    row, top = 0.42, 2.95
    for s in range(1, steps + 1):
        left = panel * (s - 1)
        qx, kx, vx = left + 0.32, left + 0.98, left + 1.6
        ax.text(left + panel / 2, 3.62, f"step {s}", ha="center", fontsize=FONT, weight="bold")
        ax.text(kx, top + 0.3, "K", ha="center", fontsize=FONT)
        ax.text(vx, top + 0.3, "V", ha="center", fontsize=FONT)
        ys = [top - row * (i + 0.5) for i in range(s)]
        for i, y in enumerate(ys, start=1):
            new = i == s
            box(ax, kx, y, 0.6, row * 0.84, f"$k_{i}$", "attention" if new else "key")
            box(ax, vx, y, 0.6, row * 0.84, f"$v_{i}$", "attention" if new else "value")
        box(ax, qx, ys[-1], 0.5, row * 0.84, f"$q_{s}$", "attention")
        for y in ys:
            arrow(ax, (qx + 0.25, ys[-1]), (kx - 0.3, y), color="#555555")
        ax.text(left + panel / 2, 0.62, f"$q_{s}$ attends to\n{s} cached key{'s' if s > 1 else ''}",
                ha="center", va="center", fontsize=FONT - 1)
        if s < steps:
            ax.plot([panel * s, panel * s], [0.3, 3.8], color="#bbbbbb", lw=0.8)
    ax.add_patch(FancyBboxPatch((0.15, -0.02), 0.3, 0.22, boxstyle="round,pad=0.02", facecolor=COLORS["attention"],
                                edgecolor="black", linewidth=1))
    ax.text(0.55, 0.09, "computed at this step from the new token; the other rows come from the cache",
            va="center", fontsize=FONT - 1)
    ax.set_title("The key/value cache of one self-attention layer, growing by one row per step",
                 fontsize=FONT + 1)
    return fig


# A toy next-token model for the beam-search picture: P(next | prefix) over A, B and <eos>.
_TOY = {
    "": {"A": 0.5, "B": 0.4, "<eos>": 0.1},
    "A": {"A": 0.15, "B": 0.45, "<eos>": 0.4},
    "B": {"A": 0.8, "B": 0.1, "<eos>": 0.1},
    "AB": {"A": 0.2, "B": 0.2, "<eos>": 0.6},
    "BA": {"A": 0.05, "B": 0.05, "<eos>": 0.9},
}


def _toy_beam(beam_size: int) -> list[list[tuple[str, str, float, bool]]]:
    """The candidates of each step of a beam search on ``_TOY`` (no length penalty): per step a list of
    (parent prefix, prefix, probability, kept)."""
    beam = [("", 1.0)]
    levels = []
    while beam:
        candidates = [(prefix, prefix + token if token != "<eos>" else prefix + "$", p * q)
                      for prefix, p in beam for token, q in _TOY[prefix].items()]
        kept = set(sorted(candidates, key=lambda c: -c[2])[:beam_size])
        levels.append([(parent, prefix, p, (parent, prefix, p) in kept) for parent, prefix, p in candidates])
        beam = [(prefix, p) for _, prefix, p in kept if not prefix.endswith("$")]
        if len(levels) == 3:
            break
    return levels


def beam_search_diagram() -> Figure:
    """A beam-search tree (chapter 8) with K = 2 on a toy model over the tokens A, B and ``<eos>``: at
    each step every kept prefix is extended by every token and the K most probable prefixes are kept.
    Greedy decoding (one prefix) ends with probability 0.135; the beam finds 0.288.

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = beam_search_diagram()
        >>> len(fig.axes), fig.get_size_inches().tolist()  # one drawing, within the book's 8-inch column
        (1, [7.8, 4.1])
        >>> plt.close(fig)
    """
    levels = _toy_beam(beam_size=2)
    fig, ax = canvas(7.8, 4.1, 10.4, 5.5)
    xs = [0.55, 3.0, 6.05, 9.1]
    pos = {"": (xs[0], 2.55)}
    greedy = {"A", "AB", "AB$"}

    def label(prefix: str) -> str:
        return "<eos>" if prefix.endswith("$") else prefix[-1]

    # Step 1 spread evenly; step 2 the children of each kept prefix in the order of their parents (top
    # down); step 3 the children of each kept prefix around it.
    for depth, level in enumerate(levels, start=1):
        parents = sorted(dict.fromkeys(parent for parent, _, _, _ in level), key=lambda q: -pos[q][1])
        children = {parent: [prefix for pa, prefix, _, _ in level if pa == parent] for parent in parents}
        y_slots = {}
        if depth == 1:
            y_slots = {prefix: 4.3 - 1.75 * i for i, prefix in enumerate(children[""])}
        elif depth == 2:
            rows = [prefix for parent in parents for prefix in children[parent]]
            y_slots = {prefix: 4.95 - 4.75 / (len(rows) - 1) * i for i, prefix in enumerate(rows)}
        else:
            for parent in parents:
                for i, prefix in enumerate(children[parent]):
                    y_slots[prefix] = pos[parent][1] + 0.62 * (1 - i)
        for parent, prefix, p, kept in level:
            x, y = xs[depth], y_slots[prefix]
            pos[prefix] = (x, y)
            px, py = pos[parent]
            on_greedy = prefix in greedy and (parent in greedy or parent == "")
            ax.annotate("", xy=(x - 0.7, y), xytext=(px + (0.7 if parent else 0.45), py),
                        arrowprops=dict(arrowstyle="-|>", lw=1.6 if on_greedy else 0.9,
                                        color="#cc0000" if on_greedy else ("black" if kept else "#aaaaaa"),
                                        linestyle="--" if on_greedy else "-", shrinkA=0, shrinkB=0))
            text = f"{label(prefix)}  {p:.3g}"
            if kept:
                box(ax, x, y, 1.4, 0.44, text, "query", fontsize=FONT - 1)
            else:
                ax.add_patch(FancyBboxPatch((x - 0.7, y - 0.22), 1.4, 0.44, boxstyle="round,pad=0.02",
                                            facecolor="white", edgecolor="#aaaaaa", linewidth=0.8,
                                            linestyle="--"))
                ax.text(x, y, text, ha="center", va="center", fontsize=FONT - 1, color="#777777")
    box(ax, xs[0], pos[""][1], 0.9, 0.44, "<bos>", "op", fontsize=FONT - 1)
    for depth, x in enumerate(xs[1:], start=1):
        ax.text(x, 5.35, f"step {depth}", ha="center", fontsize=FONT - 1, color="#555555")
    ax.text(7.3, 0.45, "filled: kept in the beam (K = 2)\ndashed grey: pruned\nred dashes: greedy decoding",
            fontsize=FONT - 1, va="center")
    ax.set_title("Beam search with K = 2: token and probability of the prefix it ends", fontsize=FONT + 1)
    ax.set_ylim(-0.1, 5.5)
    return fig

