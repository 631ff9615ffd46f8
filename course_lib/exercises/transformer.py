"""Checkers for the exercises of chapter 7, the Transformer architecture.

References are computed here independently of the student's code: layer norm by Python loops in
float64, masks by a double loop over (query, key), and parameter counts by building the model and
counting its tensors (the student derives a closed form).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..transformer import Transformer, TransformerConfig
from ..utils import global_state_preserved
from ._core import (
    book_or_drawn,
    call,
    checker,
    count_cases,
    expect,
    expect_close,
    expect_match,
    expect_same,
    expect_tensor,
    generator,
    integer,
    unchanged,
)

# ----------------------------------------------------------------------------------- layer norm


def _loop_layer_norm(X: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float, *,
                     ddof: int = 0, eps_outside: bool = False, affine: bool = True) -> torch.Tensor:
    """Layer norm of every row (last axis) by loops in float64; the keywords build typical mistakes.

    ``ddof=1`` divides the variance by d - 1 (``torch.var``'s default); ``eps_outside`` computes
    ``(x - mu) / (sigma + eps)``; ``affine=False`` drops gamma and beta.
    """
    rows = X.detach().double().reshape(-1, X.shape[-1])
    g, b = gamma.detach().double().tolist(), beta.detach().double().tolist()
    d = rows.shape[1]
    out = torch.empty_like(rows)
    for r, row in enumerate(rows.tolist()):
        mu = sum(row) / d
        var = sum((x - mu) ** 2 for x in row) / (d - ddof)
        scale = 1.0 / (math.sqrt(var) + eps) if eps_outside else 1.0 / math.sqrt(var + eps)
        for j, x in enumerate(row):
            z = (x - mu) * scale
            out[r, j] = g[j] * z + b[j] if affine else z
    return out.reshape(X.shape)


@checker("transformer.layer_norm",
         "layer_norm(X, gamma, beta, eps): normalise each row over its last axis (biased variance), scale, shift")
def check_layer_norm(answer: Callable) -> int:
    g = generator(7)
    cases = [
        ("X of shape (3, 4), gamma = 1, beta = 0", torch.randn(3, 4, generator=g) * 3 + 1, None, 1e-5),
        ("X of shape (2, 3, 6), random gamma and beta", torch.randn(2, 3, 6, generator=g) * 2 - 1, "random", 1e-5),
        ("X of shape (4, 5) with nearly constant rows, eps = 0.01",
         1.0 + 0.05 * torch.randn(4, 5, generator=g), "random", 1e-2),
    ]

    def one(case: tuple[str, torch.Tensor, str | None, float]) -> None:
        name, X, affine, eps = case
        d = X.shape[-1]
        if affine is None:
            gamma, beta = torch.ones(d), torch.zeros(d)
        else:
            gamma, beta = 1.0 + 0.5 * torch.randn(d, generator=g), torch.randn(d, generator=g)
        with unchanged(f"{name}: your function changed X in place; compute a new tensor", X):
            got = call(answer, name, X, gamma, beta, eps)
        expect_tensor(got, name)
        expect(tuple(got.shape) == tuple(X.shape),
               f"{name}: the output must have the shape of X, {tuple(X.shape)}, got {tuple(got.shape)}")
        mistakes = [
            (lambda: _loop_layer_norm(X, gamma, beta, eps, ddof=1),
             f"{name}: you divide the variance by d - 1 (the unbiased estimate, the default of torch.var "
             "and torch.std). Layer norm uses the biased variance, the mean of (x - mu)^2 over the d "
             "features: use X.var(-1, unbiased=False) (or correction=0)."),
            (lambda: _loop_layer_norm(X, gamma, beta, eps, eps_outside=True),
             f"{name}: you compute (x - mu) / (sigma + eps); eps belongs inside the square root, "
             "(x - mu) / sqrt(sigma^2 + eps), as in torch.nn.LayerNorm. The two differ when the "
             "variance is small."),
        ]
        if affine is not None:
            mistakes.append((lambda: _loop_layer_norm(X, gamma, beta, eps, affine=False),
                             f"{name}: gamma and beta are ignored; return gamma * x_hat + beta."))
        if X.dim() == 2 and affine is None:
            mistakes.append((
                lambda: _loop_layer_norm(X.T.contiguous(), torch.ones(X.shape[0]), torch.zeros(X.shape[0]), eps).T,
                f"{name}: you normalise each feature over the rows (axis 0): that is batch norm. Layer "
                "norm normalises each row (one token) over its last axis, the d features: "
                "mean(-1, keepdim=True)."))
        expect_match(got, _loop_layer_norm(X, gamma, beta, eps), name, mistakes)

    def constant_row(_: None) -> None:
        # A constant row has variance 0: eps keeps the division finite and the output is beta.
        const = torch.full((2, 4), 3.0)
        gamma, beta = torch.full((4,), 2.0), torch.tensor([0.5, -1.0, 0.0, 2.0])
        got = call(answer, "a constant row (variance 0)", const, gamma, beta, 1e-5)
        expect(isinstance(got, torch.Tensor) and bool(torch.isfinite(got).all()),
               "a constant row (variance 0): your output is not finite; add eps to the variance before the square "
               "root")
        expect_close(got, beta.expand(2, 4), "a constant row (variance 0): x - mu = 0, so the output is beta")

    def float64_input(_: None) -> None:
        # float64 in, float64 out (no silent downcast).
        X64 = torch.randn(2, 3, dtype=torch.float64, generator=g)
        got = call(answer, "float64 input", X64, torch.ones(3, dtype=torch.float64),
                   torch.zeros(3, dtype=torch.float64), 1e-5)
        expect(isinstance(got, torch.Tensor) and got.dtype == torch.float64,
               f"float64 input: the output must keep dtype float64, got "
               f"{got.dtype if isinstance(got, torch.Tensor) else type(got).__name__}")
        expect_close(got, _loop_layer_norm(X64, torch.ones(3), torch.zeros(3), 1e-5), "float64 input", atol=1e-10,
                     rtol=1e-8)

    return count_cases(cases, one) + count_cases([None], constant_row) + count_cases([None], float64_input)


# ------------------------------------------------------------------------------------------- mask


def _loop_mask(n_queries: int, n_keys: int, valid_lens: list[int], *, offset: int | None = None,
               causal: bool = True, padding: bool = True, diagonal: bool = True, upper: bool = False) -> torch.Tensor:
    """keep[b, i, j] = (j <= i + offset) and (j < valid_lens[b]) by loops; the keywords build typical mistakes.

    ``offset`` is the key position of query 0, by default ``n_keys - n_queries``: the queries are the last
    positions (bottom-right), the convention of ``cl.causal_mask``; ``offset=0`` aligns them top-left.
    """
    offset = n_keys - n_queries if offset is None else offset
    keep = torch.zeros(len(valid_lens), n_queries, n_keys, dtype=torch.bool)
    for b, length in enumerate(valid_lens):
        for i in range(n_queries):
            position = i + offset  # the key position of query i
            for j in range(n_keys):
                if upper:
                    sees = j >= position
                else:
                    sees = (j <= position if diagonal else j < position) if causal else True
                keep[b, i, j] = sees and (j < length if padding else True)
    return keep


def _mask_cases() -> list[tuple[int, int, list[int]]]:
    """(n_queries, n_keys, valid_lens): square masks and one with fewer queries than keys (a cache's case)."""
    def draw(g: torch.Generator) -> list[tuple[int, int, list[int]]]:
        cases = []
        for square in (True, True, False):
            n_k = integer(g, 3, 7)
            n_q = n_k if square else integer(g, 1, n_k - 1)
            cases.append((n_q, n_k, [integer(g, 0, n_k) for _ in range(integer(g, 1, 4))]))
        return cases

    return book_or_drawn([(4, 4, [4, 3]), (5, 5, [2, 5, 1]), (3, 5, [5, 2, 0])], 8, draw)


@checker("transformer.look_ahead_and_padding_mask",
         "look_ahead_and_padding_mask(n_queries, n_keys, valid_lens): bool (batch, n_queries, n_keys), True = attend")
def check_look_ahead_and_padding_mask(answer: Callable) -> int:
    def one(case: tuple[int, int, list[int]]) -> None:
        n_q, n_k, lens = case
        name = f"n_queries={n_q}, n_keys={n_k}, valid_lens={lens}"
        got = call(answer, name, n_q, n_k, torch.tensor(lens))
        expected = _loop_mask(n_q, n_k, lens)
        expect_tensor(got, name)
        expect(tuple(got.shape) == tuple(expected.shape),
               f"{name}: expected shape (batch, n_queries, n_keys) = {tuple(expected.shape)}, got {tuple(got.shape)}")
        expect(got.dtype == torch.bool,
               f"{name}: expected a bool tensor (True = attend), got dtype {got.dtype}; comparisons such as "
               "j <= i give bool tensors, combine them with &")
        got = got.cpu()
        mistakes = [
            (~expected,
             f"{name}: your mask is inverted. Here True means *attend* (as in "
             "F.scaled_dot_product_attention and everywhere in course_lib), not *masked out* (the "
             "convention of nn.MultiheadAttention)."),
            (lambda: _loop_mask(n_q, n_k, lens, offset=0),
             f"{name}: your queries are aligned with the first keys (query i sees the keys j <= i). As in "
             "cl.causal_mask, the n_queries queries are the last n_queries positions: query i sits at key "
             f"position i + n_keys - n_queries = i + {n_k - n_q} and sees the keys j <= i + {n_k - n_q} (with a "
             "key/value cache, the newest query sees every key)."),
            (lambda: _loop_mask(n_q, n_k, lens, diagonal=False),
             f"{name}: query i must also see key i (itself): the look-ahead mask keeps j <= i, the diagonal "
             "included. With j < i the first query sees nothing."),
            (lambda: _loop_mask(n_q, n_k, lens, padding=False),
             f"{name}: the padding is ignored: key j must also satisfy j < valid_lens[b]."),
            (lambda: _loop_mask(n_q, n_k, lens, causal=False),
             f"{name}: the look-ahead part is missing: query i may only see keys j <= i."),
            (lambda: _loop_mask(n_q, n_k, lens, upper=True),
             f"{name}: your look-ahead part is transposed: query i must see the keys j <= i (the lower "
             "triangle, torch.tril), not j >= i (torch.triu)."),
        ]
        if n_q == n_k:
            mistakes.append((expected.transpose(1, 2),
                             f"{name}: your mask is transposed: entry [b, i, j] says whether query i (a row) sees "
                             "key j (a column)."))

        def entry_message() -> str:
            wrong = (got != expected).nonzero()[0].tolist()
            return (f"{name}: entry [b, i, j] = {wrong} is {bool(got[tuple(wrong)])}, expected "
                    f"{bool(expected[tuple(wrong)])} (query i sees key j when j <= i + n_keys - n_queries and "
                    "j < valid_lens[b]).\n"
                    f"  expected for b = {wrong[0]}: {expected[wrong[0]].int().tolist()}\n"
                    f"  got:                  {got[wrong[0]].int().tolist()}")

        expect_same(got, expected, mistakes, otherwise=entry_message)

    return count_cases(_mask_cases(), one)


# ------------------------------------------------------------------------------- parameter count


def _count(config) -> int:
    """Build the model and count its trainable tensors' entries: independent of any formula.

    The model's initialisation draws from the global generator: its state is put back afterwards.
    """
    with global_state_preserved():
        model = Transformer(config)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _diagnose_count(delta: int, c) -> str:
    """Name the part of the model that a wrong count of ``true + delta`` misses or adds."""
    d, f, n_e, n_d = c.num_hiddens, c.ffn_num_hiddens, c.num_enc_layers, c.num_dec_layers
    n_attn = n_e + 2 * n_d  # attention sublayers: one per encoder block, two per decoder block
    n_norm = 2 * n_e + 3 * n_d + (2 if c.norm_first else 0)
    hints = [
        (-(d * d + d) * n_attn, "each attention sublayer has four d x d projections W_q, W_k, W_v and W_o, "
                                "each with a bias: 4 (d^2 + d); you seem to miss W_o"),
        (-4 * d * n_attn, "the four attention projections have biases: 4 d per attention sublayer"),
        (-d * n_attn, "the output projection W_o has a bias too"),
        (-(f + d) * (n_e + n_d), "the FFN's two linear layers have biases: d_ff + d per block"),
        (-2 * d * n_norm, "every layer norm has a scale gamma and a shift beta: 2 d each (two per encoder block, "
                          "three per decoder block, plus a final one per stack with pre-norm)"),
        (-d * n_norm, "a layer norm has 2 d parameters: gamma and beta"),
        (-4 * d, "pre-norm stacks end with a final layer norm (2 d) in the encoder and in the decoder"),
        (-c.tgt_vocab_size, "the output layer has a bias: |V_tgt| more"),
        (-(d * c.tgt_vocab_size + c.tgt_vocab_size), "the output layer Linear(d, |V_tgt|) is missing"),
        (-c.src_vocab_size * d, "the source embedding (|V_src| x d) is missing"),
        (-c.tgt_vocab_size * d, "the target embedding (|V_tgt| x d) is missing"),
        (2 * c.max_len * d, "sinusoidal positional encodings are fixed, not parameters"),
        (-2 * c.max_len * d, "learned positions are parameters: max_len x d in the encoder and in the decoder"),
    ]
    for value, hint in hints:
        if delta == value:
            return hint
    return "compare your sum part by part with the formula derived in the chapter"


def _small_configs() -> list[TransformerConfig]:
    """Small models to count: post-norm, several layers, pre-norm, learned positions."""
    def draw(g: torch.Generator) -> list[TransformerConfig]:
        configs = []
        for extra in ({}, {}, {"norm_first": True}, {"positional": "learned"}):
            heads = integer(g, 1, 4)
            configs.append(TransformerConfig(
                integer(g, 5, 60), integer(g, 5, 60), num_hiddens=heads * integer(g, 2, 5),
                ffn_num_hiddens=integer(g, 8, 48), num_heads=heads, num_enc_layers=integer(g, 1, 3),
                num_dec_layers=integer(g, 1, 3), max_len=integer(g, 8, 24), **extra))
        return configs

    return book_or_drawn([
        TransformerConfig(11, 13, num_hiddens=8, ffn_num_hiddens=16, num_heads=2, num_enc_layers=1,
                          num_dec_layers=1, max_len=10),
        TransformerConfig(50, 70, num_hiddens=16, ffn_num_hiddens=24, num_heads=4, num_enc_layers=2,
                          num_dec_layers=3, max_len=20),
        TransformerConfig(30, 20, num_hiddens=12, ffn_num_hiddens=40, num_heads=3, num_enc_layers=3,
                          num_dec_layers=2, max_len=16, norm_first=True),
        TransformerConfig(30, 20, num_hiddens=12, ffn_num_hiddens=40, num_heads=3, num_enc_layers=2,
                          num_dec_layers=2, max_len=16, positional="learned"),
    ], 9, draw)


@checker("transformer.num_parameters",
         "transformer_num_parameters(config): closed-form parameter count of cl.Transformer(config)")
def check_num_parameters(answer: Callable) -> int:
    def one(c: TransformerConfig) -> None:
        name = (f"d={c.num_hiddens}, d_ff={c.ffn_num_hiddens}, {c.num_enc_layers}+{c.num_dec_layers} layers, "
                f"vocabularies {c.src_vocab_size}/{c.tgt_vocab_size}"
                f"{', pre-norm' if c.norm_first else ''}{', learned positions' if c.positional == 'learned' else ''}")
        got = call(answer, name, c)
        expect(isinstance(got, int) and not isinstance(got, bool),
               f"{name}: expected a Python int, got {type(got).__name__} (use int(...) on a tensor or float)")
        expected = _count(c)
        expect(got == expected, f"{name}: expected {expected:,}, got {got:,} (off by {got - expected:+,}): "
                                f"{_diagnose_count(got - expected, c)}.")

    def base_model(c: TransformerConfig) -> None:
        # The base model of the paper with separate vocabularies of 37 000 tokens (closed form, no model built).
        d, f, V = c.num_hiddens, c.ffn_num_hiddens, c.src_vocab_size
        base = (6 * (4 * (d * d + d) + 2 * d * f + f + d + 4 * d)
                + 6 * (8 * (d * d + d) + 2 * d * f + f + d + 6 * d))
        expected = base + 2 * V * d + d * V + V
        got = call(answer, "the base model (d = 512, 6 + 6 layers, |V| = 37000)", c)
        expect(got == expected, f"the base model (d = 512, d_ff = 2048, 6 + 6 layers, |V| = 37000): expected "
                                f"{expected:,}, got {got!r}")

    base = TransformerConfig(37000, 37000, num_hiddens=512, ffn_num_hiddens=2048, num_heads=8, num_enc_layers=6,
                             num_dec_layers=6, max_len=256)
    return count_cases(_small_configs(), one) + count_cases([base], base_model)
