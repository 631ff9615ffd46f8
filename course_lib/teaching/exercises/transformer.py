"""Checkers for the exercises of chapter 7, the Transformer architecture.

References are computed here independently of the student's code: layer norm by Python loops in
float64, the encoder block by its equations written out in float64 on the weights of the student's own
parts, masks by a double loop over (query, key), and parameter counts by building the model and
counting its tensors (the student derives a closed form).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ...attention.multihead import MultiHeadAttention
from ...models.transformer import PositionWiseFFN, Transformer, TransformerConfig
from ...utils import global_state_preserved
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


# ---------------------------------------------------------------------------------- encoder block


def _attention64(attention: MultiHeadAttention, X: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """Multi-head self-attention of ``X`` (B, T, d) with the weights of ``attention``, written out in float64.

    ``keep``: (B, 1, T) bool, ``True`` = attend, or ``None``.
    """
    B, T, d = X.shape
    h = attention.num_heads

    def project(linear: nn.Linear) -> torch.Tensor:  # (B, T, d) -> (B, h, T, d / h)
        bias = None if linear.bias is None else linear.bias.detach().double()
        return F.linear(X, linear.weight.detach().double(), bias).view(B, T, h, d // h).transpose(1, 2)

    q, k, v = project(attention.W_q), project(attention.W_k), project(attention.W_v)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d // h)  # (B, h, T, T)
    if keep is not None:
        scores = scores.masked_fill(~keep[:, None], -math.inf)
    heads = torch.softmax(scores, dim=-1) @ v  # (B, h, T, d / h)
    W_o = attention.W_o
    bias = None if W_o.bias is None else W_o.bias.detach().double()
    return F.linear(heads.transpose(1, 2).reshape(B, T, d), W_o.weight.detach().double(), bias)


def _reference_block(block: nn.Module, X: torch.Tensor, keep: torch.Tensor | None, *,
                     mistake: str = "") -> torch.Tensor:
    """The post-norm encoder block on the parts of ``block``, in float64; ``mistake`` builds a typical wrong one."""
    ffn = block.ffn

    def F_(x: torch.Tensor) -> torch.Tensor:
        hidden = F.relu(F.linear(x, ffn.dense1.weight.detach().double(), ffn.dense1.bias.detach().double()))
        return F.linear(hidden, ffn.dense2.weight.detach().double(), ffn.dense2.bias.detach().double())

    def norm(which: int, x: torch.Tensor) -> torch.Tensor:
        ln = block.norm1 if which == 1 else block.norm2
        return F.layer_norm(x, ln.normalized_shape, ln.weight.detach().double(), ln.bias.detach().double(), ln.eps)

    def A(x: torch.Tensor) -> torch.Tensor:
        return _attention64(block.attention, x, None if mistake == "no mask" else keep)

    if mistake == "pre-norm":
        Y = X + A(norm(1, X))
        return Y + F_(norm(2, Y))
    if mistake == "no residual":
        Y = norm(1, A(X))
        return norm(2, F_(Y))
    if mistake == "norm the branch":
        Y = X + norm(1, A(X))
        return Y + norm(2, F_(Y))
    first, second = (2, 1) if mistake == "norms swapped" else (1, 2)
    Y = norm(first, X + A(X))
    if mistake == "ffn reads X":
        return norm(second, Y + F_(X))
    if mistake == "second residual adds X":
        return norm(second, X + F_(Y))
    return norm(second, Y + F_(Y))


def _encoder_block_cases() -> list[tuple[int, int, int, int, list[int] | None]]:
    """(d, d_ff, h, T, valid_lens or None): the book's cases, or drawn ones in a hidden variant."""
    def draw(g: torch.Generator) -> list[tuple[int, int, int, int, list[int] | None]]:
        cases = []
        for padded in (True, True, False):
            h = integer(g, 1, 4)
            d, d_ff, T = h * integer(g, 2, 5), integer(g, 4, 40), integer(g, 2, 7)
            lens = [integer(g, 1, T) for _ in range(integer(g, 1, 3))] if padded else None
            cases.append((d, d_ff, h, T, lens))
        return cases

    return book_or_drawn([(16, 32, 4, 5, [5, 3]), (12, 20, 3, 4, [4, 1, 2]), (8, 16, 2, 6, None)], 10, draw)


@checker("transformer.encoder_block",
         "EncoderBlock(num_hiddens, ffn_num_hiddens, num_heads): the post-norm encoder block from the chapter's parts")
def check_encoder_block(answer: Callable) -> int:
    g = generator(10)

    def one(case: tuple[int, int, int, int, list[int] | None]) -> int:
        d, d_ff, h, T, lens = case
        built = f"EncoderBlock({d}, {d_ff}, {h})"
        with global_state_preserved():  # the parts' initialisation draws from the global generator
            block = call(answer, built, d, d_ff, h)
        expect(isinstance(block, nn.Module), f"{built}: expected an nn.Module, got {type(block).__name__}")
        for attr, kind, hint in (
                ("attention", MultiHeadAttention, f"cl.MultiHeadAttention({d}, {h}, bias=True)"),
                ("ffn", PositionWiseFFN, f"cl.PositionWiseFFN({d}, {d_ff})"),
                ("norm1", nn.LayerNorm, f"nn.LayerNorm({d})"), ("norm2", nn.LayerNorm, f"nn.LayerNorm({d})")):
            part = getattr(block, attr, None)
            expect(isinstance(part, kind), f"{built}: expected self.{attr} = {hint}, got "
                                           f"{'nothing' if part is None else type(part).__name__}")
        expect(block.attention.num_hiddens == d and block.attention.num_heads == h,
               f"{built}: self.attention must have num_hiddens={d} and num_heads={h}, got "
               f"{block.attention.num_hiddens} and {block.attention.num_heads}")
        expect(block.ffn.dense1.out_features == d_ff,
               f"{built}: the FFN's hidden layer must have ffn_num_hiddens = {d_ff} units, got "
               f"{block.ffn.dense1.out_features}")
        expect(block.attention.W_q.bias is not None,
               f"{built}: the attention projections have no biases; build cl.MultiHeadAttention(..., bias=True), "
               "as in the paper and nn.MultiheadAttention.")
        expected_count = 4 * (d * d + d) + 2 * d * d_ff + d_ff + d + 4 * d
        count = sum(p.numel() for p in block.parameters())
        expect(count == expected_count, f"{built}: expected {expected_count:,} parameters (4(d^2 + d) for the "
                                        f"attention, 2 d d_ff + d_ff + d for the FFN, 2 d per layer norm), got "
                                        f"{count:,}: build the block from exactly these four parts.")
        with torch.no_grad():  # weights of the checker's choice: the norms' gamma and beta make their order matter
            for name, p in block.named_parameters():
                if name.startswith(("norm1", "norm2")):
                    base = 1.0 if name.endswith("weight") else 0.0
                    p.copy_(base + 0.5 * torch.randn(p.shape, generator=g, dtype=torch.float64))
                else:
                    fan_in = p.shape[-1] if p.dim() == 2 else d
                    p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) / math.sqrt(fan_in))
        block = block.double().eval()
        B = 1 if lens is None else len(lens)
        X = torch.randn(B, T, d, generator=g, dtype=torch.float64)
        keep = None if lens is None else torch.arange(T)[None, None, :] < torch.tensor(lens)[:, None, None]
        name = f"{built} on X of shape {(B, T, d)}" + ("" if lens is None else f", valid_lens = {lens}")
        args = (X,) if keep is None else (X, keep)
        with unchanged(f"{name}: your forward changed X in place; compute new tensors", X):
            got = call(block, name, *args)
        expect_tensor(got, name, (B, T, d), "(B, T, d)")
        mistakes = [
            (lambda: _reference_block(block, X, keep, mistake="pre-norm"),
             f"{name}: you normalise the sublayer's input (pre-norm, X + MHA(LN(X))). The paper's block, asked "
             "for here, is post-norm: Y = LN(X + MHA(X, X, X)), then LN(Y + FFN(Y))."),
            (lambda: _reference_block(block, X, keep, mistake="no residual"),
             f"{name}: the residual connections are missing: add the sublayer's input to its output before the "
             "layer norm, LN(X + MHA(X, X, X))."),
            (lambda: _reference_block(block, X, keep, mistake="norm the branch"),
             f"{name}: you normalise the sublayer's output and then add X (X + LN(MHA(X))); the layer norm comes "
             "after the addition: LN(X + MHA(X, X, X))."),
            (lambda: _reference_block(block, X, keep, mistake="norms swapped"),
             f"{name}: self.norm1 belongs to the attention sublayer and self.norm2 to the FFN; you use them the "
             "other way round."),
            (lambda: _reference_block(block, X, keep, mistake="ffn reads X"),
             f"{name}: the FFN must read Y = LN(X + MHA(X, X, X)), the output of the first sublayer, not X."),
            (lambda: _reference_block(block, X, keep, mistake="second residual adds X"),
             f"{name}: the second residual connection adds the FFN's input Y, not the block's input X: "
             "LN(Y + FFN(Y))."),
        ]
        if keep is not None:
            mistakes.append((lambda: _reference_block(block, X, keep, mistake="no mask"),
                             f"{name}: the padding mask is ignored: pass mask to self.attention, so that no "
                             "query attends to the padded keys."))
        expect_match(got, _reference_block(block, X, keep), name, mistakes, atol=1e-8, rtol=1e-6)
        return 1

    return count_cases(_encoder_block_cases(), one)


# ------------------------------------------------------------------------------------------- mask


def _loop_mask(T: int, valid_lens: list[int], *, causal: bool = True, padding: bool = True,
               diagonal: bool = True, upper: bool = False) -> torch.Tensor:
    """keep[b, i, j] = (j <= i) and (j < valid_lens[b]) by loops; the keywords build typical mistakes."""
    keep = torch.zeros(len(valid_lens), T, T, dtype=torch.bool)
    for b, length in enumerate(valid_lens):
        for i in range(T):
            for j in range(T):
                if upper:
                    sees = j >= i
                else:
                    sees = (j <= i if diagonal else j < i) if causal else True
                keep[b, i, j] = sees and (j < length if padding else True)
    return keep


def _mask_cases() -> list[tuple[list[int], int]]:
    """(valid_lens, T): the book's cases, or drawn ones in a hidden variant (lengths 0 and T included)."""
    def draw(g: torch.Generator) -> list[tuple[list[int], int]]:
        cases = []
        for _ in range(3):
            T = integer(g, 2, 7)
            cases.append(([integer(g, 0, T) for _ in range(integer(g, 1, 4))], T))
        return cases

    return book_or_drawn([([4, 3], 4), ([2, 5, 1], 5), ([3, 0], 3)], 8, draw)


@checker("transformer.look_ahead_and_padding_mask",
         "look_ahead_and_padding_mask(valid_lens, T): bool (batch, T, T), True = attend")
def check_look_ahead_and_padding_mask(answer: Callable) -> int:
    def one(case: tuple[list[int], int]) -> None:
        lens, T = case
        name = f"valid_lens={lens}, T={T}"
        got = call(answer, name, torch.tensor(lens), T)
        expected = _loop_mask(T, lens)
        expect_tensor(got, name)
        expect(tuple(got.shape) == tuple(expected.shape),
               f"{name}: expected shape (batch, T, T) = {tuple(expected.shape)}, got {tuple(got.shape)}")
        expect(got.dtype == torch.bool,
               f"{name}: expected a bool tensor (True = attend), got dtype {got.dtype}; comparisons such as "
               "j <= i give bool tensors, combine them with &")
        got = got.cpu()
        mistakes = [
            (~expected,
             f"{name}: your mask is inverted. Here True means *attend* (as in "
             "F.scaled_dot_product_attention and everywhere in course_lib), not *masked out* (the "
             "convention of nn.MultiheadAttention)."),
            (lambda: _loop_mask(T, lens, diagonal=False),
             f"{name}: query i must also see key i (itself): the look-ahead mask keeps j <= i, the diagonal "
             "included. With j < i the first query sees nothing."),
            (lambda: _loop_mask(T, lens, padding=False),
             f"{name}: the padding is ignored: key j must also satisfy j < valid_lens[b]."),
            (lambda: _loop_mask(T, lens, causal=False),
             f"{name}: the look-ahead part is missing: query i may only see keys j <= i."),
            (lambda: _loop_mask(T, lens, upper=True),
             f"{name}: your look-ahead part is transposed: query i must see the keys j <= i (the lower "
             "triangle, torch.tril), not j >= i (torch.triu)."),
            (expected.transpose(1, 2),
             f"{name}: your mask is transposed: entry [b, i, j] says whether query i (a row) sees key j "
             "(a column)."),
        ]

        def entry_message() -> str:
            wrong = (got != expected).nonzero()[0].tolist()
            return (f"{name}: entry [b, i, j] = {wrong} is {bool(got[tuple(wrong)])}, expected "
                    f"{bool(expected[tuple(wrong)])} (query i sees key j when j <= i and j < valid_lens[b]).\n"
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
