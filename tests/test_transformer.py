"""Tests for course_lib.models.transformer: FFN, AddNorm, encoder/decoder blocks and stacks, the Transformer.

References, all independent of the module's own code paths: Linear-ReLU-Linear and the layer-norm
formula written out; multi-head attention one head at a time with an explicit mask; the block
equations of the notes step by step; ``torch.nn.TransformerEncoderLayer`` / ``TransformerDecoderLayer``
/ ``TransformerEncoder`` / ``TransformerDecoder`` with copied weights; ``torch.nn.Transformer`` and closed
forms for the parameter counts; perturbation and gradient tests for causality and padding;
``torch.autograd.gradcheck`` in float64.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.func import functional_call

from course_lib import attention_modules, padding_mask
from course_lib.models.transformer import (
    AddNorm,
    PositionWiseFFN,
    Transformer,
    TransformerConfig,
    TransformerDecoder,
    TransformerDecoderBlock,
    TransformerDecoderState,
    TransformerEncoder,
    TransformerEncoderBlock,
)
from course_lib.utils import num_parameters

D, H, F = 8, 2, 16  # num_hiddens, num_heads, ffn_num_hiddens
DT = torch.float64


# ------------------------------------------------------------------------------------- references


def randomize_(module: nn.Module, seed: int = 0) -> nn.Module:
    """Give every bias and layer-norm parameter a visible value (their defaults are 0 and 1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            owner = module.get_submodule(name.rpartition(".")[0])
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if isinstance(owner, nn.LayerNorm):
                p.copy_((1.0 + 0.3 * noise) if name.endswith("weight") else 0.3 * noise)
            elif name.endswith("bias"):
                p.copy_(0.3 * noise)
    return module


def layer_norm_by_hand(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """gamma * (x - mean) / sqrt(var + eps) + beta over the last axis, var the biased (1/d) variance."""
    d = x.shape[-1]
    mean = x.sum(-1, keepdim=True) / d
    var = ((x - mean) ** 2).sum(-1, keepdim=True) / d
    return gamma * (x - mean) / torch.sqrt(var + eps) + beta


def ln(x: torch.Tensor, layer: nn.LayerNorm) -> torch.Tensor:
    assert layer.eps == 1e-5
    return layer_norm_by_hand(x, layer.weight, layer.bias)


def linear(x: torch.Tensor, layer: nn.Linear) -> torch.Tensor:
    out = x @ layer.weight.T
    return out if layer.bias is None else out + layer.bias


def ffn_by_hand(x: torch.Tensor, ffn: PositionWiseFFN) -> torch.Tensor:
    return linear(torch.clamp(linear(x, ffn.dense1), min=0.0), ffn.dense2)


def mha_by_hand(attn, queries: torch.Tensor, keys: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Multi-head attention one head at a time; ``keep`` (B, Tq, Tk) bool, True = attend.

    A query with no allowed key pools the zero vector (the library's specification).
    """
    h, d = attn.num_heads, attn.num_hiddens
    dh = d // h
    q, k, v = linear(queries, attn.W_q), linear(keys, attn.W_k), linear(keys, attn.W_v)
    heads = []
    for i in range(h):
        cols = slice(i * dh, (i + 1) * dh)
        scores = q[..., cols] @ k[..., cols].transpose(1, 2) / math.sqrt(dh)  # (B, Tq, Tk)
        weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1).nan_to_num(0.0)
        heads.append(weights @ v[..., cols])
    return linear(torch.cat(heads, dim=-1), attn.W_o)


def padding_keep(valid_lens: torch.Tensor, n_queries: int, n_keys: int) -> torch.Tensor:
    B = valid_lens.shape[0]
    keep = torch.zeros(B, n_queries, n_keys, dtype=torch.bool)
    for b in range(B):
        keep[b, :, : int(valid_lens[b])] = True
    return keep


def causal_keep(B: int, T: int) -> torch.Tensor:
    keep = torch.zeros(B, T, T, dtype=torch.bool)
    for i in range(T):
        keep[:, i, : i + 1] = True  # query i sees keys j <= i, itself included
    return keep


def encoder_block_by_hand(block: TransformerEncoderBlock, X: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    a1, a2 = block.addnorm1, block.addnorm2
    if not a1.norm_first:  # post-norm: Y = LN(X + MHA(X)), out = LN(Y + FFN(Y))
        Y = ln(X + mha_by_hand(block.attention, X, X, keep), a1.ln)
        return ln(Y + ffn_by_hand(Y, block.ffn), a2.ln)
    Z = ln(X, a1.ln)  # pre-norm: Y = X + MHA(LN(X)), out = Y + FFN(LN(Y))
    Y = X + mha_by_hand(block.attention, Z, Z, keep)
    return Y + ffn_by_hand(ln(Y, a2.ln), block.ffn)


def decoder_block_by_hand(block: TransformerDecoderBlock, X: torch.Tensor, memory: torch.Tensor,
                          memory_keep: torch.Tensor) -> torch.Tensor:
    B, T, _ = X.shape
    a1, a2, a3 = block.addnorm1, block.addnorm2, block.addnorm3
    if not a1.norm_first:
        Y1 = ln(X + mha_by_hand(block.self_attention, X, X, causal_keep(B, T)), a1.ln)
        Y2 = ln(Y1 + mha_by_hand(block.cross_attention, Y1, memory, memory_keep), a2.ln)
        return ln(Y2 + ffn_by_hand(Y2, block.ffn), a3.ln)
    Z = ln(X, a1.ln)
    Y1 = X + mha_by_hand(block.self_attention, Z, Z, causal_keep(B, T))
    Y2 = Y1 + mha_by_hand(block.cross_attention, ln(Y1, a2.ln), memory, memory_keep)
    return Y2 + ffn_by_hand(ln(Y2, a3.ln), block.ffn)


def sinusoids(T: int, d: int) -> torch.Tensor:
    """P[t, 2i] = sin(t / 10000^(2i/d)), P[t, 2i+1] = cos(t / 10000^(2i/d)), by loops."""
    P = torch.zeros(T, d, dtype=DT)
    for t in range(T):
        for i in range(0, d, 2):
            P[t, i] = math.sin(t / 10000 ** (i / d))
            if i + 1 < d:
                P[t, i + 1] = math.cos(t / 10000 ** (i / d))
    return P


def make_encoder_block(norm_first: bool = False, dropout: float = 0.0, seed: int = 0) -> TransformerEncoderBlock:
    torch.manual_seed(seed)
    block = TransformerEncoderBlock(D, F, H, dropout=dropout, norm_first=norm_first).to(DT)
    return randomize_(block, seed).eval()


def make_decoder_block(norm_first: bool = False, dropout: float = 0.0, seed: int = 0) -> TransformerDecoderBlock:
    torch.manual_seed(seed)
    block = TransformerDecoderBlock(D, F, H, dropout=dropout, norm_first=norm_first).to(DT)
    return randomize_(block, seed).eval()


def make_model(seed: int = 0, dropout: float = 0.0, norm_first: bool = False, positional: str = "sinusoidal",
               layers: int = 2, dtype: torch.dtype = DT, max_len: int = 32) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig(11, 13, num_hiddens=D, ffn_num_hiddens=F, num_heads=H, num_enc_layers=layers,
                               num_dec_layers=layers, dropout=dropout, max_len=max_len, norm_first=norm_first,
                               positional=positional)
    return randomize_(Transformer(config).to(dtype), seed).eval()


def toy_batch(seed: int = 0, B: int = 3, S: int = 6, T: int = 5):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(1, 11, (B, S), generator=g)
    lens = torch.tensor([S, 3, 1][:B])
    tgt = torch.randint(1, 13, (B, T), generator=g)
    return src, lens, tgt


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=DT)


# -------------------------------------------------------------------------------- PositionWiseFFN


def test_ffn_equals_linear_relu_linear_by_hand():
    torch.manual_seed(0)
    ffn = randomize_(PositionWiseFFN(D, F).to(DT))
    X = randn(2, 5, D)
    expected = torch.empty(2, 5, D, dtype=DT)
    for b in range(2):
        for t in range(5):  # one position at a time: W2 max(0, W1 x + b1) + b2
            hidden = ffn.dense1.weight @ X[b, t] + ffn.dense1.bias
            expected[b, t] = ffn.dense2.weight @ torch.where(hidden > 0, hidden, 0.0) + ffn.dense2.bias
    torch.testing.assert_close(ffn(X), expected)


def test_ffn_acts_on_each_position_alone_and_accepts_any_leading_axes():
    torch.manual_seed(1)
    ffn = PositionWiseFFN(D, F).to(DT)
    X = randn(2, 3, 4, D, seed=1)
    full = ffn(X)
    torch.testing.assert_close(ffn(X[1, 2, 3]), full[1, 2, 3])  # a single vector (d,)
    X2 = X.clone()
    X2[0, 0, 0] += 1.0
    changed = (ffn(X2) - full).abs().sum(-1) > 0
    assert changed[0, 0, 0] and int(changed.sum()) == 1  # no mixing across positions


def test_ffn_dropout_acts_only_in_training():
    torch.manual_seed(2)
    ffn = PositionWiseFFN(D, F, dropout=0.5).to(DT)
    X = randn(4, 6, D, seed=2)
    ffn.eval()
    torch.testing.assert_close(ffn(X), ffn_by_hand(X, ffn))
    ffn.train()
    torch.manual_seed(3)
    out = ffn(X)
    torch.manual_seed(3)
    mask = torch.nn.functional.dropout(torch.ones(4, 6, F, dtype=DT), 0.5, training=True)  # same draws
    expected = linear(torch.clamp(linear(X, ffn.dense1), min=0.0) * mask, ffn.dense2)
    torch.testing.assert_close(out, expected)
    assert not torch.allclose(out, ffn_by_hand(X, ffn))


# -------------------------------------------------------------------------------------- AddNorm


def test_layer_norm_by_hand_agrees_with_torch_layer_norm():
    # Guards the reference: biased variance, eps inside the square root.
    x = randn(3, 5, D) * 4 + 2
    g, b = randn(D, seed=1), randn(D, seed=2)
    torch.testing.assert_close(layer_norm_by_hand(x, g, b),
                               torch.nn.functional.layer_norm(x, (D,), g, b, eps=1e-5))


def test_post_norm_addnorm_is_layer_norm_of_the_sum():
    addnorm = randomize_(AddNorm(D).to(DT)).eval()
    X, Y = randn(2, 5, D, seed=1), randn(2, 5, D, seed=2)
    expected = layer_norm_by_hand(X + Y, addnorm.ln.weight, addnorm.ln.bias, eps=1e-5)
    torch.testing.assert_close(addnorm(X, Y), expected)
    torch.testing.assert_close(addnorm.pre_norm(X), X)  # post-norm: the sublayer reads X itself


def test_post_norm_output_rows_have_mean_beta_and_variance_gamma_squared_when_affine_is_trivial():
    addnorm = AddNorm(D).to(DT)
    out = addnorm(randn(4, 6, D) * 10 + 3, randn(4, 6, D, seed=1))
    torch.testing.assert_close(out.mean(-1), torch.zeros(4, 6, dtype=DT))
    var = ((out - out.mean(-1, keepdim=True)) ** 2).mean(-1)
    assert torch.all((var - 1).abs() < 1e-4)  # 1 - eps / (var + eps), up to float error


def test_pre_norm_addnorm_normalises_the_sublayer_input_and_leaves_the_residual_alone():
    addnorm = randomize_(AddNorm(D, norm_first=True).to(DT)).eval()
    X, Y = randn(2, 5, D, seed=3), randn(2, 5, D, seed=4)
    torch.testing.assert_close(addnorm.pre_norm(X), layer_norm_by_hand(X, addnorm.ln.weight, addnorm.ln.bias))
    torch.testing.assert_close(addnorm(X, Y), X + Y)


def test_addnorm_dropout_acts_on_the_sublayer_output_in_training_only():
    addnorm = AddNorm(D, dropout=0.5).to(DT)
    X, Y = randn(3, 4, D, seed=5), randn(3, 4, D, seed=6)
    torch.testing.assert_close(addnorm.eval()(X, Y), layer_norm_by_hand(X + Y, addnorm.ln.weight, addnorm.ln.bias))
    addnorm.train()
    torch.manual_seed(7)
    out = addnorm(X, Y)
    torch.manual_seed(7)
    mask = torch.nn.functional.dropout(torch.ones_like(Y), 0.5, training=True)
    torch.testing.assert_close(out, layer_norm_by_hand(X + Y * mask, addnorm.ln.weight, addnorm.ln.bias))


def test_addnorm_layer_norm_matches_torch_layer_norm_module():
    ref = nn.LayerNorm(D).to(DT)
    randomize_(ref)
    addnorm = AddNorm(D).to(DT)
    addnorm.ln.load_state_dict(ref.state_dict())
    X, Y = randn(5, D, seed=8), randn(5, D, seed=9)
    torch.testing.assert_close(addnorm(X, Y), ref(X + Y))


# ------------------------------------------------------------------------------- encoder block


def explicit_path(model: nn.Module, on: bool) -> None:
    """Run every attention module of ``model`` through the explicit kernel (recording) or the fused one."""
    for module in attention_modules(model):
        module.record_weights = on


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("explicit", [False, True])
def test_encoder_block_equals_its_equations_step_by_step(norm_first, explicit):
    block = make_encoder_block(norm_first)
    explicit_path(block, explicit)
    X, lens = randn(3, 5, D), torch.tensor([5, 3, 1])
    expected = encoder_block_by_hand(block, X, padding_keep(lens, 5, 5))
    torch.testing.assert_close(block(X, padding_mask(lens, 5)), expected)
    torch.testing.assert_close(block(X), encoder_block_by_hand(block, X, torch.ones(3, 5, 5, dtype=torch.bool)))


def _torch_encoder_layer(block: TransformerEncoderBlock) -> nn.TransformerEncoderLayer:
    """nn.TransformerEncoderLayer (relu, batch_first, dropout 0) holding the block's weights."""
    theirs = nn.TransformerEncoderLayer(D, H, dim_feedforward=F, dropout=0.0, activation="relu", batch_first=True,
                                        norm_first=block.addnorm1.norm_first).to(DT).eval()
    theirs.load_state_dict(_encoder_layer_state(block), strict=True)
    return theirs


def _encoder_layer_state(block: TransformerEncoderBlock) -> dict[str, torch.Tensor]:
    a = block.attention
    return {
        "self_attn.in_proj_weight": torch.cat([a.W_q.weight, a.W_k.weight, a.W_v.weight]),
        "self_attn.in_proj_bias": torch.cat([a.W_q.bias, a.W_k.bias, a.W_v.bias]),
        "self_attn.out_proj.weight": a.W_o.weight, "self_attn.out_proj.bias": a.W_o.bias,
        "linear1.weight": block.ffn.dense1.weight, "linear1.bias": block.ffn.dense1.bias,
        "linear2.weight": block.ffn.dense2.weight, "linear2.bias": block.ffn.dense2.bias,
        "norm1.weight": block.addnorm1.ln.weight, "norm1.bias": block.addnorm1.ln.bias,
        "norm2.weight": block.addnorm2.ln.weight, "norm2.bias": block.addnorm2.ln.bias,
    }


def _decoder_layer_state(block: TransformerDecoderBlock) -> dict[str, torch.Tensor]:
    state = {}
    for ours, theirs in ((block.self_attention, "self_attn"), (block.cross_attention, "multihead_attn")):
        state[f"{theirs}.in_proj_weight"] = torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight])
        state[f"{theirs}.in_proj_bias"] = torch.cat([ours.W_q.bias, ours.W_k.bias, ours.W_v.bias])
        state[f"{theirs}.out_proj.weight"] = ours.W_o.weight
        state[f"{theirs}.out_proj.bias"] = ours.W_o.bias
    for i, addnorm in enumerate((block.addnorm1, block.addnorm2, block.addnorm3), start=1):
        state[f"norm{i}.weight"], state[f"norm{i}.bias"] = addnorm.ln.weight, addnorm.ln.bias
    state.update({"linear1.weight": block.ffn.dense1.weight, "linear1.bias": block.ffn.dense1.bias,
                  "linear2.weight": block.ffn.dense2.weight, "linear2.bias": block.ffn.dense2.bias})
    return state


def _torch_decoder_layer(block: TransformerDecoderBlock) -> nn.TransformerDecoderLayer:
    theirs = nn.TransformerDecoderLayer(D, H, dim_feedforward=F, dropout=0.0, activation="relu", batch_first=True,
                                        norm_first=block.addnorm1.norm_first).to(DT).eval()
    theirs.load_state_dict(_decoder_layer_state(block), strict=True)
    return theirs


def _torch_causal(T: int) -> torch.Tensor:
    return torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # True = masked out (torch.nn)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_matches_torch_transformer_encoder_layer(norm_first):
    block = make_encoder_block(norm_first, seed=1)
    theirs = _torch_encoder_layer(block)
    X, lens = randn(3, 6, D, seed=1), torch.tensor([6, 4, 2])
    pad = torch.arange(6) >= lens[:, None]  # torch.nn: True = ignore this key
    torch.testing.assert_close(block(X, padding_mask(lens, 6)), theirs(X, src_key_padding_mask=pad))
    torch.testing.assert_close(block(X), theirs(X))


def test_encoder_block_is_permutation_equivariant_without_positions():
    block = make_encoder_block(seed=2)
    X = randn(2, 7, D, seed=2)
    perm = torch.randperm(7, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(block(X[:, perm]), block(X)[:, perm])
    # With padding, permuting the valid positions among themselves (padding stays at the end).
    lens = torch.tensor([5, 5])
    perm5 = torch.cat([torch.tensor([3, 0, 4, 1, 2]), torch.arange(5, 7)])
    out = block(X, padding_mask(lens, 7))
    torch.testing.assert_close(block(X[:, perm5], padding_mask(lens, 7))[:, :5], out[:, perm5][:, :5])


def test_encoder_stack_with_positions_is_not_permutation_equivariant():
    # The guard of the test above: the encoding of positions is what breaks the symmetry.
    torch.manual_seed(0)
    encoder = TransformerEncoder(11, D, F, H, 1).to(DT).eval()
    src = torch.tensor([[1, 2, 3, 4, 5]])
    perm = torch.tensor([4, 3, 2, 1, 0])
    assert not torch.allclose(encoder(src[:, perm]), encoder(src)[:, perm], atol=1e-3)


def test_encoder_padding_does_not_change_the_valid_positions():
    block = make_encoder_block(seed=3)
    X, lens = randn(2, 6, D, seed=3), torch.tensor([4, 2])
    X2 = X.clone()
    X2[0, 4:] = randn(2, D, seed=4) * 5
    X2[1, 2:] = randn(4, D, seed=5) * 5
    out, out2 = block(X, padding_mask(lens, 6)), block(X2, padding_mask(lens, 6))
    torch.testing.assert_close(out2[0, :4], out[0, :4])
    torch.testing.assert_close(out2[1, :2], out[1, :2])


# ------------------------------------------------------------------------------- decoder block


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("explicit", [False, True])
def test_decoder_block_equals_its_equations_step_by_step(norm_first, explicit):
    block = make_decoder_block(norm_first, seed=4)
    explicit_path(block, explicit)
    X, memory, lens = randn(3, 5, D, seed=4), randn(3, 6, D, seed=5), torch.tensor([6, 2, 1])
    expected = decoder_block_by_hand(block, X, memory, padding_keep(lens, 5, 6))
    torch.testing.assert_close(block(X, memory, padding_mask(lens, 6)), expected)
    mask = (torch.arange(6) < lens[:, None])[:, None, None, :]  # the same padding as a (B, 1, 1, S) key mask
    torch.testing.assert_close(block(X, memory, mask), expected)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_matches_torch_transformer_decoder_layer(norm_first):
    block = make_decoder_block(norm_first, seed=5)
    theirs = _torch_decoder_layer(block)
    X, memory, lens = randn(3, 5, D, seed=6), randn(3, 4, D, seed=7), torch.tensor([4, 3, 1])
    expected = theirs(X, memory, tgt_mask=_torch_causal(5), memory_key_padding_mask=torch.arange(4) >= lens[:, None])
    torch.testing.assert_close(block(X, memory, padding_mask(lens, 4)), expected)


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_position_i_ignores_later_positions(mode, explicit, norm_first):
    block = make_decoder_block(norm_first, seed=6).train(mode == "train")
    explicit_path(block, explicit)
    X, memory = randn(2, 6, D, seed=8), randn(2, 4, D, seed=9)
    out = block(X, memory)
    for i in range(5):
        X2 = X.clone()
        X2[:, i + 1 :] = randn(2, 5 - i, D, seed=10 + i) * 3
        out2 = block(X2, memory)
        torch.testing.assert_close(out2[:, : i + 1], out[:, : i + 1])
        assert not torch.allclose(out2[:, i + 1], out[:, i + 1])  # the change is visible where it may be


def test_decoder_block_gradient_of_position_i_is_zero_for_later_inputs():
    block = make_decoder_block(seed=7).train()
    X = randn(2, 5, D, seed=11).requires_grad_(True)
    out = block(X, randn(2, 3, D, seed=12))
    for i in range(5):
        (grad,) = torch.autograd.grad(out[:, i].sum(), X, retain_graph=True)
        assert torch.all(grad[:, i + 1 :] == 0)
        assert torch.all(grad[:, : i + 1].abs().sum(-1) > 0)  # every earlier position (and i) matters


def test_decoder_block_ignores_padded_memory_positions():
    block = make_decoder_block(seed=8)
    X, memory, lens = randn(2, 4, D, seed=13), randn(2, 5, D, seed=14), torch.tensor([3, 5])
    memory2 = memory.clone()
    memory2[0, 3:] = randn(2, D, seed=15) * 5
    torch.testing.assert_close(block(X, memory2, padding_mask(lens, 5)), block(X, memory, padding_mask(lens, 5)))


# --------------------------------------------------------------------------------------- gradcheck


def _gradcheck_with_parameters(module: nn.Module, fn, *inputs: torch.Tensor) -> bool:
    """gradcheck with respect to the inputs *and* every parameter (through functional_call)."""
    names = [n for n, _ in module.named_parameters()]
    params = [p.detach().clone().requires_grad_(True) for _, p in module.named_parameters()]
    n_in = len(inputs)

    def call(*args):
        return fn(lambda *a, **k: functional_call(module, dict(zip(names, args[n_in:], strict=True)), a, k),
                  *args[:n_in])

    return torch.autograd.gradcheck(call, (*inputs, *params), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_gradcheck_float64(norm_first):
    torch.manual_seed(9)
    block = randomize_(TransformerEncoderBlock(4, 6, 2, norm_first=norm_first).to(DT), 9).eval()
    X = randn(2, 3, 4, seed=16).requires_grad_(True)
    lens = torch.tensor([3, 2])
    assert _gradcheck_with_parameters(block, lambda f, x: f(x, padding_mask(lens, 3)), X)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_gradcheck_float64(norm_first):
    torch.manual_seed(10)
    block = randomize_(TransformerDecoderBlock(4, 6, 2, norm_first=norm_first).to(DT), 10).eval()
    X = randn(2, 3, 4, seed=17).requires_grad_(True)
    memory = randn(2, 4, 4, seed=18).requires_grad_(True)
    lens = torch.tensor([4, 2])
    assert _gradcheck_with_parameters(block, lambda f, x, m: f(x, m, padding_mask(lens, 4)), X, memory)


# ------------------------------------------------------------------------- stacks and the model


def _torch_stacks(model: Transformer) -> tuple[nn.TransformerEncoder, nn.TransformerDecoder]:
    """nn.TransformerEncoder / nn.TransformerDecoder holding the model's block weights."""
    c = model.config
    final_norm = (lambda: nn.LayerNorm(D)) if c.norm_first else (lambda: None)
    enc_layer = nn.TransformerEncoderLayer(D, H, F, 0.0, "relu", batch_first=True, norm_first=c.norm_first)
    dec_layer = nn.TransformerDecoderLayer(D, H, F, 0.0, "relu", batch_first=True, norm_first=c.norm_first)
    enc = nn.TransformerEncoder(enc_layer, c.num_enc_layers, norm=final_norm(), enable_nested_tensor=False)
    dec = nn.TransformerDecoder(dec_layer, c.num_dec_layers, norm=final_norm())
    enc_state, dec_state = {}, {}
    for i, block in enumerate(model.encoder.blocks):
        enc_state.update({f"layers.{i}.{k}": v for k, v in _encoder_layer_state(block).items()})
    for i, block in enumerate(model.decoder.blocks):
        dec_state.update({f"layers.{i}.{k}": v for k, v in _decoder_layer_state(block).items()})
    if c.norm_first:
        enc_state.update({"norm.weight": model.encoder.norm.weight, "norm.bias": model.encoder.norm.bias})
        dec_state.update({"norm.weight": model.decoder.norm.weight, "norm.bias": model.decoder.norm.bias})
    enc.load_state_dict(enc_state, strict=True)
    dec.load_state_dict(dec_state, strict=True)
    return enc.to(DT).eval(), dec.to(DT).eval()


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_forward_matches_torch_stacks_with_scaled_embeddings_and_sinusoids(norm_first):
    model = make_model(seed=11, norm_first=norm_first)
    enc, dec = _torch_stacks(model)
    src, lens, tgt = toy_batch(1)
    S, T = src.shape[1], tgt.shape[1]
    P = sinusoids(max(S, T), D)
    src_emb = math.sqrt(D) * model.encoder.embed.embedding.weight[src] + P[:S]
    tgt_emb = math.sqrt(D) * model.decoder.embed.embedding.weight[tgt] + P[:T]
    pad = torch.arange(S) >= lens[:, None]
    memory = enc(src_emb, src_key_padding_mask=pad)
    hidden = dec(tgt_emb, memory, tgt_mask=_torch_causal(T), memory_key_padding_mask=pad)
    expected = linear(hidden, model.decoder.dense)
    torch.testing.assert_close(model(src, lens, tgt), expected)


def test_transformer_forward_shapes():
    model = make_model(seed=12, layers=1, dtype=torch.float32)
    src, lens, tgt = toy_batch(2, B=3, S=7, T=4)
    assert model.encode(src, lens).shape == (3, 7, D)
    assert model(src, lens, tgt).shape == (3, 4, 13)


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("explicit", [False, True])
def test_transformer_is_causal_in_training_and_in_evaluation(mode, norm_first, explicit):
    model = make_model(seed=13, norm_first=norm_first).train(mode == "train")
    explicit_path(model, explicit)
    src, lens, tgt = toy_batch(3, T=6)
    logits = model(src, lens, tgt)
    for i in range(5):
        tgt2 = tgt.clone()
        tgt2[:, i + 1 :] = (tgt[:, i + 1 :] + 1 + i) % 12 + 1  # different real tokens after position i
        logits2 = model(src, lens, tgt2)
        torch.testing.assert_close(logits2[:, : i + 1], logits[:, : i + 1])
        assert not torch.allclose(logits2[:, i + 1], logits[:, i + 1])


def test_transformer_is_causal_in_training_with_dropout():
    # Same seed, same shapes: the same dropout masks, so only the look-ahead mask can keep row i fixed.
    model = make_model(seed=14, dropout=0.3).train()
    src, lens, tgt = toy_batch(4, T=6)
    torch.manual_seed(0)
    logits = model(src, lens, tgt)
    tgt2 = tgt.clone()
    tgt2[:, 3:] = (tgt[:, 3:] + 5) % 12 + 1
    torch.manual_seed(0)
    logits2 = model(src, lens, tgt2)
    torch.testing.assert_close(logits2[:, :3], logits[:, :3])
    torch.manual_seed(1)
    assert not torch.allclose(model(src, lens, tgt)[:, :3], logits[:, :3])  # dropout is really on


@pytest.mark.parametrize("norm_first", [False, True])
def test_source_tokens_beyond_valid_lens_change_nothing(norm_first):
    model = make_model(seed=15, norm_first=norm_first)
    src, lens, tgt = toy_batch(5)
    src2 = src.clone()
    for b, n in enumerate(lens.tolist()):
        src2[b, n:] = (src[b, n:] + 3) % 10 + 1
    assert not torch.equal(src, src2)
    torch.testing.assert_close(model(src2, lens, tgt), model(src, lens, tgt))
    memory, memory2 = model.encode(src, lens), model.encode(src2, lens)
    for b, n in enumerate(lens.tolist()):
        torch.testing.assert_close(memory2[b, :n], memory[b, :n])
    # ... and the valid source tokens do matter.
    src3 = src.clone()
    src3[:, 0] = src[:, 0] % 10 + 1
    assert not torch.allclose(model(src3, lens, tgt), model(src, lens, tgt))


def test_empty_source_gives_finite_logits():
    model = make_model(seed=16)
    src, _, tgt = toy_batch(6)
    logits = model(src, torch.tensor([0, 2, 6]), tgt)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
@pytest.mark.parametrize("explicit", [False, True])
def test_decode_step_with_cache_equals_full_forward(norm_first, positional, explicit):
    model = make_model(seed=17, norm_first=norm_first, positional=positional)
    explicit_path(model, explicit)
    src, lens, tgt = toy_batch(7, T=6)
    full = model(src, lens, tgt)  # (B, T, V)
    state = model.init_decoder_state(model.encode(src, lens), lens)
    for t in range(tgt.shape[1]):
        logits, state = model.decode_step(tgt[:, t : t + 1], state)
        torch.testing.assert_close(logits, full[:, t])
    assert state.offset == tgt.shape[1]


def test_decode_step_leaves_its_state_unchanged():
    model = make_model(seed=18)
    src, lens, tgt = toy_batch(8)
    state = model.init_decoder_state(model.encode(src, lens), lens)
    _, state1 = model.decode_step(tgt[:, :1], state)
    first, _ = model.decode_step(tgt[:, 1:2], state1)
    second, _ = model.decode_step(tgt[:, 1:2], state1)  # the same state again
    torch.testing.assert_close(first, second)
    assert state.offset == 0 and all(len(c) == 0 for c in state.self_caches)
    assert state1.offset == 1 and all(len(c) == 1 for c in state1.self_caches)


def test_reorder_state_then_decoding_equals_forward_on_the_reordered_batch():
    model = make_model(seed=19)
    src, lens, tgt = toy_batch(9)
    state = model.init_decoder_state(model.encode(src, lens), lens)
    for t in range(2):
        _, state = model.decode_step(tgt[:, t : t + 1], state)
    index = torch.tensor([2, 0, 2, 1])  # reorder and repeat rows, as beam search does
    state = model.reorder_state(state, index)
    assert isinstance(state, TransformerDecoderState) and state.batch_size == 4
    full = model(src[index], lens[index], tgt[index])
    for t in range(2, tgt.shape[1]):
        logits, state = model.decode_step(tgt[index, t : t + 1], state)
        torch.testing.assert_close(logits, full[:, t])


def test_pad_embedding_is_zero_and_gets_no_gradient():
    model = make_model(seed=20, dtype=torch.float32)
    for embed in (model.encoder.embed, model.decoder.embed):
        assert torch.all(embed.embedding.weight[0] == 0)
    src, lens, tgt = toy_batch(10)
    src[:, -1], tgt[:, -1] = 0, 0
    model(src, lens, tgt).sum().backward()
    assert torch.all(model.decoder.embed.embedding.weight.grad[0] == 0)
    assert torch.all(model.encoder.embed.embedding.weight.grad[0] == 0)


# ------------------------------------------------------------------ grouped-query attention (num_kv_heads)


def _gqa_model(num_kv_heads, seed: int = 23, heads: int = 4) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig(11, 13, num_hiddens=16, ffn_num_hiddens=F, num_heads=heads, num_enc_layers=2,
                               num_dec_layers=2, max_len=32, num_kv_heads=num_kv_heads)
    return randomize_(Transformer(config).to(DT), seed).eval()


def _repeat_kv_heads_(target: nn.Module, source: nn.Module) -> None:
    """Copy ``source`` (grouped) into ``target`` (ordinary multi-head attention): query head h reads key/value head
    h // groups, so each key/value head's rows of W_k and W_v are repeated ``groups`` times."""
    with torch.no_grad():
        for name, p in target.named_parameters():
            q = source.get_parameter(name)
            if p.shape == q.shape:
                p.copy_(q)
                continue
            rows = q.unflatten(0, (-1, 16 // 4))  # (kv heads, d_h, ...)
            p.copy_(rows.repeat_interleave(p.shape[0] // q.shape[0], dim=0).flatten(0, 1))


def test_num_kv_heads_equal_to_num_heads_is_ordinary_multi_head_attention():
    plain, same = _gqa_model(None), _gqa_model(4)
    assert {k: v.shape for k, v in plain.state_dict().items()} == {k: v.shape for k, v in same.state_dict().items()}
    src, lens, tgt = toy_batch(24)
    torch.testing.assert_close(same(src, lens, tgt), plain(src, lens, tgt), rtol=0, atol=0)


@pytest.mark.parametrize("num_kv_heads", [1, 2])
def test_grouped_decoder_equals_multi_head_attention_with_repeated_key_value_heads(num_kv_heads):
    grouped, reference = _gqa_model(num_kv_heads), _gqa_model(None, seed=99)
    _repeat_kv_heads_(reference, grouped)
    src, lens, tgt = toy_batch(25)
    torch.testing.assert_close(grouped(src, lens, tgt), reference(src, lens, tgt))


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_grouped_decoder_shrinks_the_decoder_caches_only(num_kv_heads):
    model = _gqa_model(num_kv_heads)
    d_h, kv_size = 16 // 4, num_kv_heads * 16 // 4
    for block in model.decoder.blocks:
        for attention in (block.self_attention, block.cross_attention):
            assert (attention.W_k.out_features, attention.W_v.out_features) == (kv_size, kv_size)
    for block in model.encoder.blocks:  # as in Ainslie et al. (2023): the encoder keeps its heads
        assert block.attention.num_kv_heads == 4
    src, lens, tgt = toy_batch(26, T=5)
    full = model(src, lens, tgt)
    state = model.init_decoder_state(model.encode(src, lens), lens)
    for t in range(tgt.shape[1]):
        logits, state = model.decode_step(tgt[:, t : t + 1], state)
        torch.testing.assert_close(logits, full[:, t])
    # 2 (keys and values) x batch x kv heads x steps x head size x 8 bytes (float64), per block
    assert [c.nbytes for c in state.self_caches] == [2 * 3 * num_kv_heads * 5 * d_h * 8] * 2
    assert all(k.shape == (3, num_kv_heads, 6, d_h) for k, _ in state.memory_kv)


# ------------------------------------------------------------------------------ parameter counts


def _block_counts(d: int, f: int) -> tuple[int, int]:
    """Closed forms: an attention sublayer has 4 (d^2 + d), the FFN 2 d f + f + d, a layer norm 2 d."""
    attention, ffn, norm = 4 * (d * d + d), 2 * d * f + f + d, 2 * d
    return attention + ffn + 2 * norm, 2 * attention + ffn + 3 * norm


@pytest.mark.parametrize("d, h, f", [(8, 2, 16), (16, 4, 24), (512, 8, 2048)])
def test_block_parameter_counts_follow_the_closed_form(d, h, f):
    enc, dec = _block_counts(d, f)
    assert num_parameters(TransformerEncoderBlock(d, f, h)) == enc
    assert num_parameters(TransformerDecoderBlock(d, f, h)) == dec
    if d == 512:  # the base model of the paper: about 3.15 M and 4.20 M per block
        assert (enc, dec) == (3_152_384, 4_204_032)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_transformer_has_the_parameters_of_torch_transformer_plus_embeddings_and_output_layer(norm_first, positional):
    Vs, Vt, d, h, f, n_enc, n_dec, max_len = 11, 13, 16, 4, 24, 2, 3, 20
    config = TransformerConfig(Vs, Vt, num_hiddens=d, ffn_num_hiddens=f, num_heads=h, num_enc_layers=n_enc,
                               num_dec_layers=n_dec, max_len=max_len, norm_first=norm_first, positional=positional)
    ours = num_parameters(Transformer(config))
    reference = nn.Transformer(d, h, n_enc, n_dec, f, batch_first=True, norm_first=norm_first)
    theirs = sum(p.numel() for p in reference.parameters())
    # nn.Transformer always ends each stack with a layer norm; the post-norm stacks here do not.
    final_norms = 0 if norm_first else 2 * 2 * d
    extras = Vs * d + Vt * d + (d * Vt + Vt) + (2 * max_len * d if positional == "learned" else 0)
    assert ours == theirs - final_norms + extras
    enc, dec = _block_counts(d, f)
    assert ours == n_enc * enc + n_dec * dec + extras + (2 * 2 * d if norm_first else 0)


# ------------------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"src_vocab_size": 0}, ValueError, "src_vocab_size must be positive"),
        ({"tgt_vocab_size": 2.5}, TypeError, "tgt_vocab_size must be an int"),
        ({"num_hiddens": 10, "num_heads": 4}, ValueError, r"num_hiddens \(10\) must be divisible by num_heads \(4\)"),
        ({"num_enc_layers": 0}, ValueError, "num_enc_layers must be positive"),
        ({"num_dec_layers": True}, TypeError, "num_dec_layers must be an int"),
        ({"max_len": -1}, ValueError, "max_len must be positive"),
        ({"dropout": 1.0}, ValueError, r"dropout must be in \[0, 1\)"),
        ({"dropout": "0.1"}, TypeError, "dropout must be a float"),
        ({"norm_first": 1}, TypeError, "norm_first must be a bool"),
        ({"positional": "rotary"}, ValueError, 'positional must be "sinusoidal" or "learned"'),
        ({"pad_id": 1.0}, TypeError, "pad_id must be an int"),
        ({"pad_id": True}, TypeError, "pad_id must be an int"),
        ({"pad_id": 11}, ValueError, "pad_id must be a valid id in every vocabulary"),
        ({"pad_id": -1}, ValueError, "pad_id must be a valid id in every vocabulary"),
        ({"num_kv_heads": 3, "num_heads": 4}, ValueError, r"num_kv_heads \(3\) must divide num_heads \(4\)"),
        ({"num_kv_heads": 0}, ValueError, "num_kv_heads must be positive"),
        ({"num_kv_heads": 1.0}, TypeError, "num_kv_heads must be an int"),
    ],
)
def test_bad_config_raises(kwargs, error, match):
    base = {"src_vocab_size": 11, "tgt_vocab_size": 13, "num_hiddens": 8, "num_heads": 2}
    with pytest.raises(error, match=match):
        TransformerConfig(**{**base, **kwargs})


def test_transformer_rejects_a_non_config():
    with pytest.raises(TypeError, match="config must be a TransformerConfig"):
        Transformer({"src_vocab_size": 11})


@pytest.mark.parametrize("cls", [TransformerEncoder, TransformerDecoder])
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"vocab_size": 0}, ValueError, "vocab_size must be positive"),
        ({"num_layers": 1.0}, TypeError, "num_layers must be an int"),
        ({"num_heads": 3}, ValueError, r"num_hiddens \(8\) must be divisible by num_heads \(3\)"),
        ({"dropout": -0.1}, ValueError, "dropout must be in"),
        ({"pad_id": 11}, ValueError, r"pad_id must be a valid id in every vocabulary \(sizes 11\)"),
        ({"pad_id": False}, TypeError, "pad_id must be an int"),
        ({"positional": "rope"}, ValueError, 'positional must be "sinusoidal" or "learned"'),
        ({"max_len": 0}, ValueError, "max_len must be positive"),
        ({"kernel": "flashy"}, ValueError, "kernel must be one of"),
        ({"kernel": "flash", "kernel_options": {"block": 4}}, TypeError, "'flash' kernel takes the options"),
    ],
)
def test_bad_stack_arguments_raise(cls, kwargs, error, match):
    args = {"vocab_size": 11, "num_hiddens": 8, "ffn_num_hiddens": 16, "num_heads": 2, "num_layers": 1}
    with pytest.raises(error, match=match):
        cls(**{**args, **kwargs})


def test_the_decoders_key_value_heads_must_divide_its_heads():
    with pytest.raises(ValueError, match=r"num_kv_heads \(3\) must divide num_heads \(2\)"):
        TransformerDecoder(11, 8, 16, 2, 1, num_kv_heads=3)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: PositionWiseFFN(0, 4), ValueError, "num_hiddens must be positive"),
        (lambda: PositionWiseFFN(4, 2.0), TypeError, "ffn_num_hiddens must be an int"),
        (lambda: PositionWiseFFN(4, 8, dropout=1.5), ValueError, "dropout must be in"),
        (lambda: AddNorm(4, norm_first="yes"), TypeError, "norm_first must be a bool"),
        (lambda: AddNorm(-4), ValueError, "num_hiddens must be positive"),
        (lambda: TransformerEncoderBlock(6, 8, 4), ValueError, r"num_hiddens \(6\) must be divisible"),
        (lambda: TransformerDecoderBlock(6, 8, 4), ValueError, r"num_hiddens \(6\) must be divisible"),
    ],
)
def test_bad_module_arguments_raise(make, error, match):
    with pytest.raises(error, match=match):
        make()


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((torch.ones(2, 3, 8, dtype=torch.long),), TypeError, "X must be a floating-point tensor"),
        ((torch.ones(2, 3, 7),), ValueError,
         r"X must have size num_hiddens = 8 in its last axis, got shape \(2, 3, 7\)"),
        ((torch.tensor(1.0),), ValueError, "X must have size num_hiddens = 8"),
        (([1.0] * 8,), TypeError, "X must be a torch.Tensor"),
    ],
)
def test_bad_ffn_inputs_raise(args, error, match):
    with pytest.raises(error, match=match):
        PositionWiseFFN(8, 16)(*args)


@pytest.mark.parametrize(
    ("X", "Y", "error", "match"),
    [
        (torch.ones(2, 8), torch.ones(3, 8), ValueError,
         r"X and Y must have the same shape, got \(2, 8\) and \(3, 8\)"),
        (torch.ones(2, 5), torch.ones(2, 5), ValueError, "X must have size num_hiddens = 8 in its last axis"),
        (torch.ones(2, 8, dtype=torch.long), torch.ones(2, 8), TypeError, "X must be a floating-point tensor"),
        (torch.ones(2, 8), torch.ones(2, 8, dtype=torch.int32), TypeError, "Y must be a floating-point tensor"),
    ],
)
def test_bad_addnorm_inputs_raise(X, Y, error, match):
    with pytest.raises(error, match=match):
        AddNorm(8)(X, Y)


def _model32():
    return make_model(seed=21, dtype=torch.float32, max_len=8)


SRC = torch.ones(2, 4, dtype=torch.long)
LENS = torch.tensor([4, 2])
TGT = torch.ones(2, 3, dtype=torch.long)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((SRC.float(), LENS, TGT), TypeError, "src must hold token ids as torch.long"),
        ((SRC, LENS, TGT.int()), TypeError, "tgt_in must hold token ids as torch.long"),
        ((SRC[0], LENS, TGT), ValueError, r"src must be 2-D \(batch, S\)"),
        ((SRC, LENS, TGT[0]), ValueError, r"tgt_in must be 2-D \(batch, T\)"),
        ((SRC.tolist(), LENS, TGT), TypeError, "src must be a torch.Tensor"),
        ((SRC, LENS, "tgt"), TypeError, "tgt_in must be a torch.Tensor"),
        ((SRC * 11, LENS, TGT), ValueError, r"src holds ids outside \[0, 11\)"),
        ((SRC, LENS, TGT * -1), ValueError, r"tgt_in holds ids outside \[0, 13\)"),
        ((SRC, LENS, TGT[:1]), ValueError, "src and tgt_in must have the same batch size"),
        ((SRC, LENS, torch.ones(2, 9, dtype=torch.long)), ValueError, "tgt_in has 9 positions but the model covers "
                                                                      "max_len = 8"),
        ((torch.ones(2, 9, dtype=torch.long), LENS, TGT), ValueError, "src has 9 positions"),
        ((SRC, ["4", "2"], TGT), TypeError, "src_valid_lens must be a tensor"),
        ((SRC, LENS.float() - 0.5, TGT), TypeError, "src_valid_lens must be an integer tensor"),
        ((SRC, LENS.bool(), TGT), TypeError, "src_valid_lens must be an integer tensor"),
        ((SRC, LENS[:1], TGT), ValueError, r"src_valid_lens must have shape \(2,\)"),
        ((SRC, torch.tensor([5, 2]), TGT), ValueError, r"src_valid_lens must lie in \[0, 4\]"),
        ((SRC, torch.tensor([-1, 2]), TGT), ValueError, r"src_valid_lens must lie in \[0, 4\]"),
    ],
)
def test_bad_forward_inputs_raise(args, error, match):
    with pytest.raises(error, match=match):
        _model32()(*args)


def test_bad_decoder_inputs_raise():
    model = _model32()
    memory = model.encode(SRC, LENS)
    with pytest.raises(TypeError, match="memory must be a floating-point tensor"):
        model.decoder(TGT, memory.long())
    with pytest.raises(ValueError, match=r"memory must be 3-D \(batch, S, num_hiddens\)"):
        model.decoder(TGT, memory[0])
    with pytest.raises(ValueError, match=r"memory must have shape \(2, S, 8\)"):
        model.decoder(TGT, memory[:1])
    with pytest.raises(ValueError, match=r"memory must have shape \(2, S, 8\)"):
        model.decoder(TGT, memory[..., :4])
    with pytest.raises(ValueError, match=r"src_valid_lens must lie in \[0, 4\] for memory"):
        model.decoder(TGT, memory, torch.tensor([6, 1]))


def test_bad_decoding_inputs_raise():
    model = _model32()
    memory = model.encode(SRC, LENS)
    with pytest.raises(TypeError, match="memory must be a floating-point tensor"):
        model.init_decoder_state(memory.long(), LENS)
    with pytest.raises(ValueError, match=r"memory must be 3-D"):
        model.init_decoder_state(memory[0], LENS)
    with pytest.raises(ValueError, match=r"memory must have shape \(batch, S, 8\)"):
        model.init_decoder_state(memory[..., :4], LENS)
    with pytest.raises(ValueError, match=r"src_valid_lens must have shape \(2,\)"):
        model.init_decoder_state(memory, LENS[:1])
    with pytest.raises(TypeError, match="src_valid_lens must be an integer tensor"):
        model.init_decoder_state(memory, LENS.double() / 3)
    state = model.init_decoder_state(memory, LENS)
    with pytest.raises(ValueError, match=r"tokens must have shape \(2, 1\)"):
        model.decode_step(torch.ones(2, 2, dtype=torch.long), state)
    with pytest.raises(ValueError, match=r"tokens must have shape \(2, 1\)"):
        model.decode_step(torch.ones(3, 1, dtype=torch.long), state)
    with pytest.raises(TypeError, match="tokens must hold token ids as torch.long"):
        model.decode_step(torch.ones(2, 1), state)
    with pytest.raises(ValueError, match=r"tokens holds ids outside \[0, 13\)"):
        model.decode_step(torch.full((2, 1), 13), state)
    with pytest.raises(TypeError, match="state must be a TransformerDecoderState"):
        model.decode_step(torch.ones(2, 1, dtype=torch.long), {"offset": 0})
    for _ in range(8):
        _, state = model.decode_step(torch.ones(2, 1, dtype=torch.long), state)
    with pytest.raises(ValueError, match="the decoded sequence has 9 positions but the model covers max_len = 8"):
        model.decode_step(torch.ones(2, 1, dtype=torch.long), state)
    with pytest.raises(TypeError, match="index must be an integer tensor"):
        model.reorder_state(state, torch.tensor([0.0, 1.0]))
    with pytest.raises(TypeError, match="index must be a torch.Tensor"):
        model.reorder_state(state, [0, 1])
    with pytest.raises(ValueError, match=r"index must be 1-D"):
        model.reorder_state(state, torch.tensor([[0, 1]]))
    with pytest.raises(ValueError, match=r"index must lie in \[0, 2\) for a batch of 2"):
        model.reorder_state(state, torch.tensor([0, 2]))
    with pytest.raises(ValueError, match=r"index must lie in \[0, 2\)"):
        model.reorder_state(state, torch.tensor([-1]))


@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_token_embedding_is_drawn_with_variance_one_over_d(side):
    # N(0, 1/d): after the sqrt(d) scaling the tokens have the unit scale of the sinusoids.
    torch.manual_seed(0)
    d = 64
    model = Transformer(TransformerConfig(2000, 2000, num_hiddens=d, ffn_num_hiddens=8, num_heads=2))
    table = getattr(model, side).embed.embedding.weight.detach()
    rows = torch.cat([table[:0], table[1:]])  # the <pad> row (id 0) is zero
    assert float(table[0].abs().max()) == 0.0
    assert float(rows.std()) == pytest.approx(d**-0.5, rel=0.03)
    assert float(rows.mean()) == pytest.approx(0.0, abs=0.01)


def test_source_lengths_may_be_a_list_or_a_tensor():
    model = _model32()
    torch.testing.assert_close(model(SRC, LENS.tolist(), TGT), model(SRC, LENS, TGT))
    memory = model.encode(SRC, LENS.tolist())
    torch.testing.assert_close(memory, model.encode(SRC, LENS))
    state = model.init_decoder_state(memory, LENS.tolist())
    torch.testing.assert_close(model.decode_step(TGT[:, :1], state)[0],
                               model.decode_step(TGT[:, :1], model.init_decoder_state(memory, LENS))[0])
