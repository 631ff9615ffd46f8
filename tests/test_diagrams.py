"""diagrams: every schematic returns a figure with its labels, sized for the book's column."""

import matplotlib
import pytest
from matplotlib.figure import Figure

from course_lib import diagrams

LABELS = {
    "attention_pooling_diagram": ["softmax", "weighted\nsum", "query\n$\\mathbf{q}$"],
    "scoring_pipeline_diagram": ["masked\nsoftmax", "valid_lens", "batched\nmatmul"],
    "qkv_projection_diagram": ["tokens $\\mathbf{X}$\n$T \\times d$", "learned linear maps"],
    "bahdanau_diagram": ["GRU", "keys = values = encoder states", "query", "next step",
                         "$\\mathbf{s}_0 = \\mathbf{h}_{T_s}$", "$\\mathbf{e}(x_{1})$"],
    "multihead_diagram": ["concatenate heads", "scaled dot-product\nattention, head 1", "mask\n(optional)",
                          "$\\mathbf{W}_q^{(1)}$", "$\\mathbf{W}_v^{(h)}$"],
    "head_split_diagram": ["head", "h", "$d_h$", "(batch, $h$, $T$, $d_h$)"],
    "cross_attention_diagram": ["$T_s$", "$\\mathbf{A}$", "$\\mathbf{A}\\mathbf{V}$", "decoder\n(target)"],
    "transformer_diagram": ["multi-head\ncross-attention", "masked multi-head\nself-attention", "add & norm",
                            "feed-forward (FFN)", "look-ahead\nmask", "softmax", "positional\nencoding"],
    "norm_placement_diagram": ["LayerNorm", "post-norm (the paper)\n$\\mathbf{X}' = \\mathrm{LN}(\\mathbf{X} + "
                               "F(\\mathbf{X}))$"],
    "teacher_forcing_diagram": ["<bos>", "<eos>", "position t"],
    "kv_cache_diagram": ["$k_4$", "$v_4$", "$q_4$", "step 4"],
    "beam_search_diagram": ["<bos>", "A  0.5", "<eos>  0.288", "<eos>  0.135", "step 3"],
    "bpe_merges_diagram": ["1: l+e", "7: b+elle", "belles ×1", "elle"],
    "flash_tiling_diagram": ["skip", "mask", "on-chip SRAM (fast, small)", "outer loop over query blocks i"],
    "grouped_query_diagram": ["multi-head\n8 key/value heads", "grouped-query\n2 key/value heads",
                              "multi-query\n1 key/value head", "cache: 2/8 of multi-head"],
    "decoder_block_diagram": ["RMSNorm", "causal self-attention\n(grouped-query heads)", "SwiGLU feed-forward",
                              "token embedding (no positions)", "linear to the vocabulary", "decoder\nblock\n× N"],
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
    with pytest.raises(ValueError, match="num_heads"):
        diagrams.head_split_diagram(num_heads=1)
    with pytest.raises(ValueError, match="num_keys"):
        diagrams.attention_pooling_diagram(num_keys=1)
    with pytest.raises(ValueError, match="n_blocks"):
        diagrams.flash_tiling_diagram(n_blocks=8)
    with pytest.raises(ValueError, match="highlight"):
        diagrams.flash_tiling_diagram(n_blocks=4, highlight=4)
    with pytest.raises(ValueError, match="num_kv_heads"):
        diagrams.grouped_query_diagram(num_heads=8, num_kv_heads=3)
    with pytest.raises(ValueError, match="pairs"):
        diagrams.rope_rotation_diagram(pairs=())


def test_chapter_8_diagrams_reject_sizes_they_cannot_draw():
    with pytest.raises(ValueError, match="steps"):
        diagrams.kv_cache_diagram(steps=6)
    with pytest.raises(ValueError, match="target"):
        diagrams.teacher_forcing_diagram("a" * 12)
    with pytest.raises(ValueError, match="num_merges"):
        diagrams.bpe_merges_diagram(num_merges=0)


def test_the_bpe_figure_draws_the_merges_of_bpe_merge_step():
    from course_lib.data import bpe_merge_step

    fig = diagrams.bpe_merges_diagram({"low": 5, "lower": 2, "newest": 6, "widest": 3}, num_merges=3)
    try:
        headers = [t.get_text() for t in fig.axes[0].texts if t.get_text()[:1].isdigit()]
        words, pairs = {("l", "o", "w"): 5, ("l", "o", "w", "e", "r"): 2, tuple("newest"): 6, tuple("widest"): 3}, []
        for _ in range(3):
            pair, words = bpe_merge_step(words)
            pairs.append(pair)
        assert headers == [f"{k}: {a}+{b}" for k, (a, b) in enumerate(pairs, start=1)]
    finally:
        matplotlib.pyplot.close(fig)


def test_the_rope_picture_shows_the_same_angle_for_the_same_offset():
    fig = diagrams.rope_rotation_diagram(theta=0.3, pairs=((3, 1), (9, 7), (4, 0)))
    try:
        titles = [ax.get_title() for ax in fig.axes]
        angles = [t.split("angle ")[1] for t in titles]
        assert angles[0] == angles[1] != angles[2], titles
    finally:
        matplotlib.pyplot.close(fig)
