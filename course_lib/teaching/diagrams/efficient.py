"""Diagrams of chapter 10: FlashAttention's tiles and grouped-query attention's shared heads."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ._draw import FONT, arrow, box, canvas

# The three states of a tile (course_lib.flash_tile_map: 2, 1, 0).
_TILE_FULL, _TILE_PARTIAL, _TILE_SKIPPED = "#9ecae1", "#deebf7", "white"


def _tile(ax, x: float, y: float, size: float, state: str, text: str = "") -> None:
    """One tile of the score matrix, lower-left corner (x, y): full, partial (hatched) or skipped."""
    face = {"full": _TILE_FULL, "partial": _TILE_PARTIAL, "skipped": _TILE_SKIPPED}[state]
    ax.add_patch(Rectangle((x, y), size, size, facecolor=face, edgecolor="#555555", linewidth=0.8,
                           hatch="///" if state == "partial" else None))
    if text:
        # on a hatched tile the label sits on a patch of the tile's colour, so the hatching does not cross it
        background = {"facecolor": face, "edgecolor": "none", "pad": 1.5} if state == "partial" else None
        ax.text(x + size / 2, y + size / 2, text, ha="center", va="center", fontsize=FONT - 1,
                color="#777777" if state == "skipped" else "black", bbox=background)


def flash_tiling_diagram(n_blocks: int = 4, highlight: int = 2) -> Figure:
    """FlashAttention-2's forward pass (chapter 10): the causal score matrix cut into tiles, the loops over them,
    and what lives in fast on-chip memory (SRAM) against slow main memory (HBM).

    The outer loop takes one block of queries Q_i (row ``highlight``, outlined); the inner loop visits the key
    and value blocks K_j, V_j of that row, updating the running maximum, denominator and unnormalised output
    of the online softmax. Tiles above the diagonal are skipped, tiles on it are masked inside.

    Args:
        n_blocks: query blocks = key blocks drawn (3 to 5).
        highlight: the query block whose row is outlined (0-based).

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = flash_tiling_diagram()
        >>> len(fig.axes), fig.get_size_inches().tolist()  # one drawing, within the book's 8-inch column
        (1, [7.8, 4.8])
        >>> plt.close(fig)
    """
    if not 3 <= n_blocks <= 5:
        raise ValueError(f"n_blocks must be between 3 and 5, got {n_blocks}")
    if not 0 <= highlight < n_blocks:
        raise ValueError(f"highlight must be a query block in [0, {n_blocks}), got {highlight}")
    fig, ax = canvas(7.8, 4.8, 15.6, 9.6)
    size = 5.2 / n_blocks
    left, top = 2.0, 7.5  # the grid's upper-left corner
    bottom = top - n_blocks * size
    for i in range(n_blocks):
        y = top - (i + 1) * size
        box(ax, 1.25, y + size / 2, 1.0, 0.8 * size, rf"$\mathbf{{Q}}_{i + 1}$", "query")
        for j in range(n_blocks):
            state = "full" if j < i else "partial" if j == i else "skipped"
            text = {"full": rf"$\mathbf{{S}}_{{{i + 1}{j + 1}}}$", "partial": "mask", "skipped": "skip"}[state]
            _tile(ax, left + j * size, y, size, state, text)
    for j in range(n_blocks):
        box(ax, left + (j + 0.5) * size, top + 0.6, 0.88 * size, 0.8,
            rf"$\mathbf{{K}}_{j + 1}, \mathbf{{V}}_{j + 1}$", "key", fontsize=FONT - 1)
    ax.text(left + n_blocks * size / 2, top + 1.45, "scores $\\mathbf{S} = \\mathbf{Q}\\mathbf{K}^\\top/\\sqrt{d}$,"
            " never stored whole", fontsize=FONT, ha="center", va="center")
    # The loops: the outer one down the query blocks, the inner one along the outlined row.
    row_y = top - (highlight + 1) * size
    ax.add_patch(Rectangle((left - 0.06, row_y - 0.06), n_blocks * size + 0.12, size + 0.12, fill=False,
                           edgecolor="#d62728", linewidth=2.2))
    arrow(ax, (left + 0.15, row_y + 0.22), (left + (highlight + 1) * size - 0.15, row_y + 0.22), color="#d62728")
    ax.text(left, bottom - 0.45, f"red: the inner loop over key blocks j\nfor query block i = {highlight + 1}",
            fontsize=FONT - 1, color="#d62728", ha="left", va="top")
    arrow(ax, (0.55, top - 0.1), (0.55, bottom + 0.1))
    ax.text(0.2, (top + bottom) / 2, "outer loop over query blocks i", fontsize=FONT - 1, rotation=90,
            ha="center", va="center")
    # Legend of the tile states.
    for x, state, label in ((0.3, "full", "computed"), (2.7, "partial", "computed, masked\ninside the tile"),
                            (6.7, "skipped", "skipped")):
        _tile(ax, x, 0.2, 0.45, state)
        ax.text(x + 0.6, 0.425, label, fontsize=FONT - 1, ha="left", va="center")
    # Fast and slow memory.
    box(ax, 12.1, 6.45, 6.6, 4.1, "", "op")
    ax.text(12.1, 8.1, "on-chip SRAM (fast, small)", fontsize=FONT, ha="center", va="center", weight="bold")
    sram = ("one query block $\\mathbf{Q}_i$ and one tile $\\mathbf{S}_{ij}$;\n"
            "running max $m_i$, denominator $\\ell_i$ and\n"
            "unnormalised output $\\tilde{\\mathbf{O}}_i$, per tile:\n"
            "$m' = \\max(m, \\mathrm{rowmax}\\, \\mathbf{S}_{ij})$\n"
            "$\\ell' = e^{m - m'}\\ell + \\mathrm{rowsum}\\, e^{\\mathbf{S}_{ij} - m'}$\n"
            "$\\tilde{\\mathbf{O}}' = e^{m - m'}\\tilde{\\mathbf{O}} + e^{\\mathbf{S}_{ij} - m'}\\mathbf{V}_j$")
    ax.text(9.05, 7.7, sram, fontsize=FONT - 1, ha="left", va="top", linespacing=1.45)
    box(ax, 12.1, 1.45, 6.6, 1.9, "main memory, HBM (large, slow)\n"
        "$\\mathbf{Q}, \\mathbf{K}, \\mathbf{V}$ read; output $\\mathbf{O}$ and\n"
        "log-sum-exp $L = m + \\log \\ell$ written once", "key", fontsize=FONT - 1)
    arrow(ax, (10.0, 2.4), (10.0, 4.4), r"read $\mathbf{K}_j, \mathbf{V}_j$" + "\nfor every tile")
    arrow(ax, (13.6, 4.4), (13.6, 2.4), r"write $\mathbf{O}_i, L_i$" + "\nonce per block")
    ax.set_title("FlashAttention-2: causal attention tile by tile", fontsize=FONT + 1)
    return fig


def grouped_query_diagram(num_heads: int = 8, num_kv_heads: int = 2) -> Figure:
    """Multi-head, grouped-query and multi-query attention side by side (chapter 10): which key/value head each
    query head reads, and how many key/value heads a cache keeps.

    Args:
        num_heads: query heads (2 to 8).
        num_kv_heads: the key/value heads of the middle panel; must divide ``num_heads`` and lie strictly
            between 1 and ``num_heads``.

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig = grouped_query_diagram()
        >>> len(fig.axes), fig.get_size_inches().tolist()  # one drawing, within the book's 8-inch column
        (1, [7.8, 3.4])
        >>> plt.close(fig)
    """
    if not 2 <= num_heads <= 8:
        raise ValueError(f"num_heads must be between 2 and 8, got {num_heads}")
    if num_heads % num_kv_heads or not 1 < num_kv_heads < num_heads:
        raise ValueError(f"num_kv_heads must divide num_heads = {num_heads} and lie strictly between 1 and "
                         f"{num_heads}, got {num_kv_heads}")
    fig, ax = canvas(7.8, 3.4, 15.6, 6.8)
    panels = (("multi-head", num_heads), ("grouped-query", num_kv_heads), ("multi-query", 1))
    width, gap = 4.6, 0.6
    for p, (name, kv) in enumerate(panels):
        x0 = 0.3 + p * (width + gap)
        step = width / num_heads
        group = num_heads // kv
        kv_x = [x0 + (g * group + group / 2) * step for g in range(kv)]
        for h in range(num_heads):
            x = x0 + (h + 0.5) * step
            box(ax, x, 1.4, 0.8 * step, 0.7, "q", "query", fontsize=FONT - 1)
            arrow(ax, (x, 1.78), (kv_x[h // group], 3.35), color="#555555")
        for x in kv_x:
            box(ax, x, 3.95, min(0.8 * step * group, 1.5), 1.1, "k\nv", "key", fontsize=FONT - 1)
        heads = f"{kv} key/value head{'s' if kv > 1 else ''}"
        ax.text(x0 + width / 2, 5.0, f"{name}\n{heads}", fontsize=FONT, ha="center", va="bottom")
        ax.text(x0 + width / 2, 0.55, f"cache: {kv}/{num_heads} of multi-head", fontsize=FONT - 1, ha="center",
                va="center")
    ax.set_title(f"{num_heads} query heads: the key/value head each one reads", fontsize=FONT + 1)
    return fig


__all__ = ["flash_tiling_diagram", "grouped_query_diagram"]
