"""The chapter 7 checkers accept the notebook's solutions and reject typical mistakes
with a specific hint (their stubs: test_exercises_core.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from exercise_helpers import fails_with, passes
from torch import nn

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


# --- transformer.encoder_block -------------------------------------------------------------------


class PostNorm(nn.Module):
    """A right answer written independently of the notebook's: torch's functional multi-head attention."""

    def __init__(self, num_hiddens, ffn_num_hiddens, num_heads):
        super().__init__()
        self.attention = cl.MultiHeadAttention(num_hiddens, num_heads, bias=True)
        self.ffn = cl.PositionWiseFFN(num_hiddens, ffn_num_hiddens)
        self.norm1, self.norm2 = nn.LayerNorm(num_hiddens), nn.LayerNorm(num_hiddens)

    def mha(self, X, mask):
        a = self.attention
        weight = torch.cat([a.W_q.weight, a.W_k.weight, a.W_v.weight])
        bias = torch.cat([a.W_q.bias, a.W_k.bias, a.W_v.bias])
        X = X.transpose(0, 1)  # (T, B, d), torch's layout
        ignore = None if mask is None else ~mask[:, 0]  # (B, T), True = ignore
        out, _ = F.multi_head_attention_forward(
            X, X, X, X.shape[-1], a.num_heads, weight, bias, None, None, False, 0.0, a.W_o.weight, a.W_o.bias,
            training=False, key_padding_mask=ignore, need_weights=False)
        return out.transpose(0, 1)

    def forward(self, X, mask=None):
        Y = self.norm1(X + self.mha(X, mask))
        return self.norm2(Y + self.ffn(Y))


class PreNorm(PostNorm):
    def forward(self, X, mask=None):
        Y = X + self.mha(self.norm1(X), mask)
        return Y + self.ffn(self.norm2(Y))


class NoResidual(PostNorm):
    def forward(self, X, mask=None):
        return self.norm2(self.ffn(self.norm1(self.mha(X, mask))))


class NormTheBranch(PostNorm):
    def forward(self, X, mask=None):
        Y = X + self.norm1(self.mha(X, mask))
        return Y + self.norm2(self.ffn(Y))


class NormsSwapped(PostNorm):
    def forward(self, X, mask=None):
        Y = self.norm2(X + self.mha(X, mask))
        return self.norm1(Y + self.ffn(Y))


class FFNReadsX(PostNorm):
    def forward(self, X, mask=None):
        Y = self.norm1(X + self.mha(X, mask))
        return self.norm2(Y + self.ffn(X))


class SecondResidualAddsX(PostNorm):
    def forward(self, X, mask=None):
        Y = self.norm1(X + self.mha(X, mask))
        return self.norm2(X + self.ffn(Y))


class IgnoresTheMask(PostNorm):
    def forward(self, X, mask=None):
        return super().forward(X, None)


class NoAttentionBias(PostNorm):
    def __init__(self, num_hiddens, ffn_num_hiddens, num_heads):
        super().__init__(num_hiddens, ffn_num_hiddens, num_heads)
        self.attention = cl.MultiHeadAttention(num_hiddens, num_heads)


class SequentialFFN(PostNorm):
    def __init__(self, num_hiddens, ffn_num_hiddens, num_heads):
        super().__init__(num_hiddens, ffn_num_hiddens, num_heads)
        self.ffn = nn.Sequential(nn.Linear(num_hiddens, ffn_num_hiddens), nn.ReLU(),
                                 nn.Linear(ffn_num_hiddens, num_hiddens))


class ChangesXInPlace(PostNorm):
    def forward(self, X, mask=None):
        X += self.mha(X, mask)
        Y = self.norm1(X)
        return self.norm2(Y + self.ffn(Y))


def test_encoder_block_notebook_solution_passes(solutions):
    ns = solutions("ch07-ex-encoder-block")
    assert passes("transformer.encoder_block", ns["EncoderBlockFromParts"]).n_checks == 3


@pytest.mark.parametrize("variant", [0, 1, 2])
def test_encoder_block_independent_answer_passes(variant):
    # torch's functional attention on the same parts: the checker accepts any right computation.
    passes("transformer.encoder_block", PostNorm, variant=variant)


def test_encoder_block_hidden_variants_draw_other_sizes_with_and_without_padding():
    from course_lib.teaching.exercises import _core, transformer

    book = transformer._encoder_block_cases()
    for variant in (1, 2):
        token = _core._VARIANT.set(variant)
        try:
            cases = transformer._encoder_block_cases()
        finally:
            _core._VARIANT.reset(token)
        assert cases != book and all(d % h == 0 for d, _, h, _, _ in cases)
        assert any(lens is None for *_, lens in cases) and any(lens is not None for *_, lens in cases)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (PreNorm, "pre-norm"),
        (NoResidual, "residual connections are missing"),
        (NormTheBranch, "after the addition"),
        (NormsSwapped, "other way round"),
        (FFNReadsX, "not X"),
        (SecondResidualAddsX, "adds the FFN's input Y"),
        (IgnoresTheMask, "padding mask is ignored"),
        (NoAttentionBias, "bias=True"),
        (SequentialFFN, "cl.PositionWiseFFN"),
        (ChangesXInPlace, "in place"),
    ],
)
def test_encoder_block_wrong_answers_fail_with_hint(answer, hint):
    fails_with("transformer.encoder_block", answer, hint)


# --- transformer.look_ahead_and_padding_mask --------------------------------------------------------


def _parts(valid_lens, T):
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    return i, j, j < valid_lens[:, None, None]


def inverted(valid_lens, T):
    i, j, padding = _parts(valid_lens, T)
    return ~((j <= i) & padding)


def strict_diagonal(valid_lens, T):
    i, j, padding = _parts(valid_lens, T)
    return (j < i) & padding


def no_padding(valid_lens, T):
    i, j, _ = _parts(valid_lens, T)
    return (j <= i).expand(len(valid_lens), T, T)


def no_look_ahead(valid_lens, T):
    _, _, padding = _parts(valid_lens, T)
    return padding.expand(len(valid_lens), T, T)


def upper_triangle(valid_lens, T):
    i, j, padding = _parts(valid_lens, T)
    return (j >= i) & padding  # triu instead of tril


def transposed(valid_lens, T):
    i, j, padding = _parts(valid_lens, T)
    return ((j <= i) & padding).transpose(1, 2)  # rows are keys


def as_integers(valid_lens, T):
    i, j, padding = _parts(valid_lens, T)
    return ((j <= i) & padding).int()


def padding_off_by_one(valid_lens, T):
    i, j, _ = _parts(valid_lens, T)
    return (j <= i) & (j <= valid_lens[:, None, None])


def test_mask_notebook_solution_passes(solutions):
    ns = solutions("ch07-ex-mask")
    assert passes("transformer.look_ahead_and_padding_mask", ns["look_ahead_and_padding_mask"]).n_checks == 3


@pytest.mark.parametrize("variant", [0, 1, 2])
def test_mask_library_composition_passes(variant):
    # An independent right answer: the library's look-ahead mask and padding mask, combined.
    def composed(valid_lens, T):
        return cl.causal_mask(T) & cl.padding_mask(valid_lens, T)

    passes("transformer.look_ahead_and_padding_mask", composed, variant=variant, library=True)


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
