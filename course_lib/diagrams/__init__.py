"""Schematic diagrams of the book, drawn with matplotlib when the book is built.

One function per diagram, in a module per chapter topic; each returns the matplotlib figure and draws
nothing else. The figures are sized for the book's text column: at most 8 inches wide and no text
smaller than 9 points (10 px at the 80 dpi the notebooks use), so they stay legible at the column's
width. The shared drawing primitives (canvas, boxes, arrows, stacks, the palette) are in ``_draw``.
"""

from .attention import attention_pooling_diagram, scoring_pipeline_diagram
from .decoder import decoder_block_diagram, norm_placement_diagram, rope_rotation_diagram
from .multihead import multihead_diagram
from .rnn import bahdanau_diagram
from .transformer import transformer_diagram

__all__ = [
    "attention_pooling_diagram",
    "scoring_pipeline_diagram",
    "bahdanau_diagram",
    "multihead_diagram",
    "transformer_diagram",
    "decoder_block_diagram",
    "norm_placement_diagram",
    "rope_rotation_diagram",
]
