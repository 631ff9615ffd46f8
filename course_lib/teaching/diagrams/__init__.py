"""Schematic diagrams of the book, drawn with matplotlib when the book is built.

One function per diagram, in a module per chapter topic; each returns the matplotlib figure and draws
nothing else. The figures are sized for the book's text column: at most 8 inches wide and no text
smaller than 9 points (10 px at the 80 dpi the notebooks use), so they stay legible at the column's
width. The shared drawing primitives (canvas, boxes, arrows, stacks, the palette) are in ``_draw``.
"""

from .attention import (
    attention_pooling_diagram,
    qkv_projection_diagram,
    scoring_pipeline_diagram,
)
from .decoder import decoder_block_diagram, rope_rotation_diagram
from .decoding import beam_search_diagram, kv_cache_diagram, teacher_forcing_diagram
from .efficient import flash_tiling_diagram, grouped_query_diagram
from .multihead import cross_attention_diagram, head_split_diagram, multihead_diagram
from .normalization import norm_placement_diagram
from .rnn import bahdanau_diagram
from .subwords import bpe_merges_diagram
from .transformer import transformer_diagram

__all__ = [
    "attention_pooling_diagram",
    "scoring_pipeline_diagram",
    "qkv_projection_diagram",
    "bahdanau_diagram",
    "multihead_diagram",
    "head_split_diagram",
    "cross_attention_diagram",
    "transformer_diagram",
    "norm_placement_diagram",
    "teacher_forcing_diagram",
    "kv_cache_diagram",
    "beam_search_diagram",
    "bpe_merges_diagram",
    "flash_tiling_diagram",
    "grouped_query_diagram",
    "decoder_block_diagram",
    "rope_rotation_diagram",
]
