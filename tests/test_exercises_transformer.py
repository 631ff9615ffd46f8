"""The chapter 7 checkers accept the notebook's solutions and reject typical mistakes
with a specific hint (their stubs: test_exercises_core.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from exercise_helpers import fails_with, passes

import course_lib as cl

NOTEBOOK = "07_transformer_architecture.ipynb"


# --- transformer.layer_norm ----------------------------------------------------------------------


def unbiased_variance(X, gamma, beta, eps=1e-5):
    mu = X.mean(-1, keepdim=True)
    return gamma * (X - mu) / torch.sqrt(X.var(-1, keepdim=True) + eps) + beta  # torch.var: divides by d - 1


def eps_outside_sqrt(X, gamma, beta, eps=1e-5):
    mu = X.mean(-1, keepdim=True)
    return gamma * (X - mu) / (X.std(-1, unbiased=False, keepdim=True) + eps) + beta


def no_affine(X, gamma, beta, eps=1e-5):
    mu = X.mean(-1, keepdim=True)
    return (X - mu) / torch.sqrt(X.var(-1, unbiased=False, keepdim=True) + eps)


def over_the_batch(X, gamma, beta, eps=1e-5):
    mu = X.mean(0, keepdim=True)  # batch norm's axis
    return gamma * (X - mu) / torch.sqrt(X.var(0, unbiased=False, keepdim=True) + eps) + beta


def subtracts_in_place(X, gamma, beta, eps=1e-5):
    var = X.var(-1, unbiased=False, keepdim=True)
    X -= X.mean(-1, keepdim=True)
    return gamma * X / torch.sqrt(var + eps) + beta


def casts_to_float32(X, gamma, beta, eps=1e-5):
    return F.layer_norm(X.float(), (X.shape[-1],), gamma.float(), beta.float(), eps)


def test_layer_norm_notebook_solution_passes(solutions):
    ns = solutions("ch07-ex-layer-norm")
    assert passes("transformer.layer_norm", ns["layer_norm"]).n_checks >= 5


def test_layer_norm_builtin_passes():
    # An independent correct answer: the checker must not demand one particular implementation.
    passes("transformer.layer_norm", lambda X, g, b, eps: F.layer_norm(X, (X.shape[-1],), g, b, eps))


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (unbiased_variance, "d - 1"),
        (eps_outside_sqrt, "inside the square root"),
        (no_affine, "gamma and beta are ignored"),
        (over_the_batch, "batch norm"),
        (subtracts_in_place, "in place"),
        (casts_to_float32, "dtype float64"),
    ],
)
def test_layer_norm_wrong_answers_fail_with_hint(answer, hint):
    fails_with("transformer.layer_norm", answer, hint)


# --- transformer.look_ahead_and_padding_mask --------------------------------------------------------


def _parts(n_queries, n_keys, valid_lens):
    i = torch.arange(n_queries)[:, None]
    j = torch.arange(n_keys)[None, :]
    return i, j, j < valid_lens[:, None, None]


def inverted(n_queries, n_keys, valid_lens):
    i, j, padding = _parts(n_queries, n_keys, valid_lens)
    return ~((j <= i) & padding)


def strict_diagonal(n_queries, n_keys, valid_lens):
    i, j, padding = _parts(n_queries, n_keys, valid_lens)
    return (j < i) & padding


def no_padding(n_queries, n_keys, valid_lens):
    i, j, _ = _parts(n_queries, n_keys, valid_lens)
    return (j <= i).expand(len(valid_lens), n_queries, n_keys)


def no_look_ahead(n_queries, n_keys, valid_lens):
    _, _, padding = _parts(n_queries, n_keys, valid_lens)
    return padding.expand(len(valid_lens), n_queries, n_keys)


def upper_triangle(n_queries, n_keys, valid_lens):
    i, j, padding = _parts(n_queries, n_keys, valid_lens)
    return (j >= i) & padding  # triu instead of tril


def transposed(n_queries, n_keys, valid_lens):
    i, j, padding = _parts(n_queries, n_keys, valid_lens)
    return ((j <= i) & padding).transpose(1, 2)  # rows are keys


def as_integers(n_queries, n_keys, valid_lens):
    i, j, padding = _parts(n_queries, n_keys, valid_lens)
    return ((j <= i) & padding).int()


def padding_off_by_one(n_queries, n_keys, valid_lens):
    i, j, _ = _parts(n_queries, n_keys, valid_lens)
    return (j <= i) & (j <= valid_lens[:, None, None])


def test_mask_notebook_solution_passes(solutions):
    ns = solutions("ch07-ex-mask")
    assert passes("transformer.look_ahead_and_padding_mask", ns["look_ahead_and_padding_mask"]).n_checks == 3


def _library_mask(n_queries, n_keys, valid_lens, **causal):
    return cl.causal_mask(n_queries, n_keys, **causal) & cl.valid_lens_to_mask(
        valid_lens, len(valid_lens), n_queries, n_keys)


@pytest.mark.parametrize("variant", [0, 1, 2])
def test_mask_library_composition_passes(variant):
    # The exercise follows the library's convention: the queries are the last positions (bottom-right).
    passes("transformer.look_ahead_and_padding_mask", _library_mask, variant=variant)


def test_mask_aligned_top_left_fails_with_the_convention_named():
    # cl.causal_mask(..., offset=0) is scaled_dot_product_attention's is_causal: right only when n_q == n_k.
    def top_left(n_q, n_k, lens):
        return _library_mask(n_q, n_k, lens, offset=0)

    fails_with("transformer.look_ahead_and_padding_mask", top_left,
               "n_queries=3, n_keys=5", "aligned with the first keys")


def test_mask_hidden_variants_include_fewer_queries_than_keys():
    from course_lib.exercises import _core, transformer

    for variant in (1, 2, 3):
        token = _core._VARIANT.set(variant)
        try:
            cases = transformer._mask_cases()
        finally:
            _core._VARIANT.reset(token)
        assert any(n_q < n_k for n_q, n_k, _ in cases) and any(n_q == n_k for n_q, n_k, _ in cases)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (inverted, "inverted"),
        (strict_diagonal, "itself"),
        (no_padding, "padding is ignored"),
        (no_look_ahead, "look-ahead part is missing"),
        (upper_triangle, "look-ahead part is transposed"),
        (transposed, "your mask is transposed"),
        (as_integers, "bool tensor"),
        (padding_off_by_one, "j < valid_lens[b]"),
    ],
)
def test_mask_wrong_answers_fail_with_hint(answer, hint):
    fails_with("transformer.look_ahead_and_padding_mask", answer, hint)


# --- transformer.num_parameters ----------------------------------------------------------------------


def _parts_count(c):
    d, f = c.num_hiddens, c.ffn_num_hiddens
    return d, f, 4 * (d * d + d), 2 * d * f + f + d, 2 * d


def _total(c, attention, ffn, norm, *, outputs_bias=True, finals=True, learned=True, sinusoids=False):
    d = c.num_hiddens
    total = c.num_enc_layers * (attention + ffn + 2 * norm) + c.num_dec_layers * (2 * attention + ffn + 3 * norm)
    total += (c.src_vocab_size + c.tgt_vocab_size) * d + d * c.tgt_vocab_size + (c.tgt_vocab_size if outputs_bias
                                                                                   else 0)
    if c.norm_first and finals:
        total += 2 * norm
    if (c.positional == "learned" and learned) or sinusoids:
        total += 2 * c.max_len * d
    return total


def no_output_projection(c):
    d, f, _, ffn, norm = _parts_count(c)
    return _total(c, 3 * (d * d + d), ffn, norm)


def no_attention_biases(c):
    d, f, _, ffn, norm = _parts_count(c)
    return _total(c, 4 * d * d, ffn, norm)


def no_layer_norms(c):
    d, f, attention, ffn, _ = _parts_count(c)
    return _total(c, attention, ffn, 0)


def no_output_bias(c):
    d, f, attention, ffn, norm = _parts_count(c)
    return _total(c, attention, ffn, norm, outputs_bias=False)


def counts_sinusoids(c):
    d, f, attention, ffn, norm = _parts_count(c)
    return _total(c, attention, ffn, norm, sinusoids=True)


def ignores_pre_norm(c):
    d, f, attention, ffn, norm = _parts_count(c)
    return _total(c, attention, ffn, norm, finals=False)


def ignores_learned_positions(c):
    d, f, attention, ffn, norm = _parts_count(c)
    return _total(c, attention, ffn, norm, learned=False)


def returns_a_float(c):
    d, f, attention, ffn, norm = _parts_count(c)
    return float(_total(c, attention, ffn, norm))


def test_num_parameters_notebook_solution_passes(solutions):
    ns = solutions("ch07-ex-num-parameters")
    assert passes("transformer.num_parameters", ns["transformer_num_parameters"]).n_checks == 5


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (no_output_projection, "you seem to miss W_o"),
        (no_attention_biases, "projections have biases"),
        (no_layer_norms, "every layer norm has a scale gamma and a shift beta"),
        (no_output_bias, "the output layer has a bias"),
        (counts_sinusoids, "fixed, not parameters"),
        (ignores_pre_norm, "final layer norm"),
        (ignores_learned_positions, "learned positions are parameters"),
        (returns_a_float, "Python int"),
    ],
)
def test_num_parameters_wrong_answers_fail_with_hint(answer, hint):
    fails_with("transformer.num_parameters", answer, hint)
