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
    "decoder_block_diagram": ["RMSNorm", "causal self-attention\n(grouped-query heads)", "SwiGLU feed-forward",
                              "token embedding (no positions)", "linear to the vocabulary", "decoder\nblock\n× N"],
    "norm_placement_diagram": ["post-norm (2017)", "pre-norm (GPT-2, Llama)", "LayerNorm", "RMSNorm",
                               "sublayer F"],
    "rope_rotation_diagram": ["$R_{2}\\mathbf{q}$", "$R_{0}\\mathbf{k}$", "$R_{7}\\mathbf{q}$"],
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
    with pytest.raises(ValueError, match="pairs"):
        diagrams.rope_rotation_diagram(pairs=())


def test_the_rope_picture_shows_the_same_angle_for_the_same_offset():
    fig = diagrams.rope_rotation_diagram(theta=0.3, pairs=((3, 1), (9, 7), (4, 0)))
    try:
        titles = [ax.get_title() for ax in fig.axes]
        angles = [t.split("angle ")[1] for t in titles]
        assert angles[0] == angles[1] != angles[2], titles
    finally:
        matplotlib.pyplot.close(fig)
