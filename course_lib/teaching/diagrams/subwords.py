"""Diagram of section 8.1: byte-pair encoding's merges on a small word list."""

from __future__ import annotations

from collections.abc import Mapping

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ...data.subword import bpe_merge_step
from ._draw import COLORS, FONT, canvas

# French words and how often they occur: no two pairs tie in the first seven merges.
LES_WORDS = {"les": 9, "des": 1, "ses": 2, "est": 4, "elle": 5, "elles": 1, "belle": 3, "belles": 1}


def bpe_merges_diagram(word_counts: Mapping[str, int] = LES_WORDS, num_merges: int = 7) -> Figure:
    """Byte-pair encoding on a word list (section 8.1): one row per word (with its count), one column per
    merge; each word is drawn as its symbols, the symbol made by the column's merge highlighted.

    Args:
        word_counts: ``{word: count}``, at most 9 words of at most 7 characters.
        num_merges: the merges drawn (1 to 7), made with :func:`course_lib.data.bpe_merge_step`.

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = bpe_merges_diagram()
        >>> len(fig.axes), fig.get_size_inches().tolist()  # one drawing, within the book's 8-inch column
        (1, [7.8, 3.58])
        >>> plt.close(fig)
    """
    if not 1 <= num_merges <= 7:
        raise ValueError(f"num_merges must be between 1 and 7, got {num_merges}")
    if not 1 <= len(word_counts) <= 9 or max(map(len, word_counts)) > 7:
        raise ValueError("word_counts must hold 1 to 9 words of at most 7 characters")
    words = {tuple(w): c for w, c in word_counts.items()}
    columns = [("start", None, words)]
    for k in range(1, num_merges + 1):
        step = bpe_merge_step(words)
        if step is None:
            break
        pair, words = step
        columns.append((f"{k}: {pair[0]}+{pair[1]}", pair[0] + pair[1], words))
    label_w, col_w, row_h, char_w = 1.2, 1.0, 0.42, 0.1
    n_rows = len(word_counts)
    width = label_w + col_w * len(columns)
    fig, ax = canvas(7.8, 0.7 + 0.36 * n_rows, width, row_h * (n_rows + 1.3))
    fig.subplots_adjust(left=0.01, right=0.99, bottom=0.02, top=0.9)
    top = row_h * n_rows
    for c, (title, made, segmented) in enumerate(columns):
        x_left = label_w + col_w * c
        ax.text(x_left + col_w / 2, top + 0.22, title, ha="center", va="center", fontsize=FONT - 1,
                family="monospace", weight="bold" if made else "normal")
        for r, word in enumerate(segmented):
            y = top - row_h * (r + 0.5)
            x = x_left + 0.05
            for symbol in word:
                w = char_w * len(symbol) + 0.04
                fresh = symbol == made
                ax.add_patch(Rectangle((x, y - 0.15), w, 0.3, facecolor=COLORS["attention"] if fresh else "white",
                                       edgecolor="#444444", linewidth=0.6))
                ax.text(x + w / 2, y, symbol, ha="center", va="center", fontsize=FONT - 1, family="monospace")
                x += w + 0.012
        if c:
            ax.plot([x_left, x_left], [0, top + 0.4], color="#cccccc", lw=0.6)
    for r, (word, count) in enumerate(word_counts.items()):
        ax.text(label_w - 0.1, top - row_h * (r + 0.5), f"{word} ×{count}", ha="right", va="center",
                fontsize=FONT - 1, family="monospace")
    ax.set_title("Byte-pair encoding: each merge joins the most frequent adjacent pair into one symbol",
                 fontsize=FONT + 1)
    return fig
