"""The Transformer diagram shows the data flow of chapter 7 (issue 19's redraw), and the pre-/post-norm picture
puts the layer norm where each variant has it."""

from collections import Counter

import matplotlib.pyplot as plt

from course_lib import diagrams


def _texts(fig) -> Counter:
    return Counter(t.get_text() for ax in fig.axes for t in ax.texts)


def test_every_attention_gets_separate_query_key_and_value_inputs():
    fig = diagrams.transformer_diagram()
    texts = _texts(fig)
    plt.close(fig)
    # three attention sublayers, each fed Q, K and V: self-attention in both stacks, cross-attention
    assert texts["Q"] == texts["K"] == texts["V"] == 3
    assert sum("multi-head" in t for t in texts) == 3


def test_cross_attention_reads_keys_and_values_from_the_encoder_and_queries_from_below():
    fig = diagrams.transformer_diagram()
    ax = fig.axes[0]
    memory = "#990000"
    coloured = {t.get_text() for t in ax.texts if t.get_color() == memory}
    plain = [t for t in ax.texts if t.get_text() == "Q"]
    plt.close(fig)
    assert {"K", "V"} <= coloured, "the cross-attention's K and V come from the encoder (the memory's colour)"
    assert all(t.get_color() != memory for t in plain), "every Q comes from its own stack"
    assert any(t.startswith("memory") for t in coloured)


def test_positions_are_added_by_their_own_sum_and_the_output_layer_is_linear_then_softmax():
    fig = diagrams.transformer_diagram()
    texts = _texts(fig)
    plt.close(fig)
    assert texts["positional\nencoding"] == 2
    assert not any("+ positions" in t for t in texts), "the positions get their own sum node, not a box label"
    assert texts["softmax"] == 1 and any(t.startswith("linear") for t in texts)
    assert not any("linear + softmax" in t for t in texts)


def test_norm_placement_shows_both_variants_with_their_equations():
    fig = diagrams.norm_placement_diagram()
    texts = _texts(fig)
    plt.close(fig)
    assert texts["LayerNorm"] == 2
    assert any(t.startswith("post-norm") and "LN}(\\mathbf{X} + F" in t for t in texts)
    assert any(t.startswith("pre-norm") and "F(\\mathrm{LN}" in t for t in texts)
