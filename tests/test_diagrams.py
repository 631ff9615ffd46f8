"""diagrams: every schematic returns a figure with its labels, sized for the book's column."""

import matplotlib
import pytest
from matplotlib.figure import Figure

from course_lib import diagrams

LABELS = {
    "attention_pooling_diagram": ["softmax", "weighted\nsum", "query\n$\\mathbf{q}$"],
    "scoring_pipeline_diagram": ["masked\nsoftmax", "valid_lens", "batched\nmatmul"],
    "bahdanau_diagram": ["GRU", "keys = values = encoder states", "query"],
    "multihead_diagram": ["concatenate heads", "scaled dot-product\nattention, head 1"],
    "transformer_diagram": ["cross-attention", "masked self-attention", "add & norm",
                            "feed-forward (FFN)", "look-ahead\nmask", "memory (keys, values)"],
    "flash_tiling_diagram": ["skip", "mask", "on-chip SRAM (fast, small)", "outer loop over query blocks i"],
    "grouped_query_diagram": ["multi-head\n8 key/value heads", "grouped-query\n2 key/value heads",
                              "multi-query\n1 key/value head", "cache: 2/8 of multi-head"],
}


@pytest.mark.parametrize("name", diagrams.__all__)
def test_diagram_returns_a_labelled_figure_that_fits_the_column(name):
    fig = getattr(diagrams, name)()
    try:
        assert isinstance(fig, Figure)
        texts = [t for ax in fig.axes for t in ax.texts]
        strings = {t.get_text() for t in texts}
        missing = [label for label in LABELS[name] if label not in strings]
        assert not missing, f"{name}: labels missing {missing}"
        assert fig.axes[0].get_title(), f"{name} has no title"
        assert min(t.get_fontsize() for t in texts) >= 9, f"{name}: text below 9 pt"
        assert fig.get_size_inches()[0] <= 8, f"{name} is wider than the column (8 in)"
    finally:
        matplotlib.pyplot.close(fig)


def test_diagrams_reject_sizes_they_cannot_draw():
    with pytest.raises(ValueError, match="num_heads"):
        diagrams.multihead_diagram(num_heads=9)
    with pytest.raises(ValueError, match="num_keys"):
        diagrams.attention_pooling_diagram(num_keys=1)
    with pytest.raises(ValueError, match="n_blocks"):
        diagrams.flash_tiling_diagram(n_blocks=8)
    with pytest.raises(ValueError, match="highlight"):
        diagrams.flash_tiling_diagram(n_blocks=4, highlight=4)
    with pytest.raises(ValueError, match="num_kv_heads"):
        diagrams.grouped_query_diagram(num_heads=8, num_kv_heads=3)
