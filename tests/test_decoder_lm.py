"""The decoder-only model of chapter 11 against torch's RMSNorm and Hugging Face's Llama (transformers 5.24).

Tolerances. Hugging Face's Llama runs two steps in float32 whatever the model's dtype:
``LlamaRotaryEmbedding`` forms the angles ``position * inv_freq`` in float32 (``inv_freq`` is a float32
buffer), and ``LlamaRMSNorm`` casts its input to float32 and back. A float64 Hugging Face layer therefore
differs from a float64 computation by about 1e-6 (measured below: 4e-7 for one layer at 16 positions);
with those two steps done in float64 the difference is 1e-15. The library's own float64 reference here
is Meta's original formulation (complex rotations of interleaved pairs), to 1e-12.
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing downloads: every model below is built from a local config

import dataclasses  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from hf_float64 import hf_in_float64  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.models.llama.modeling_llama import (  # noqa: E402
    LlamaDecoderLayer,
    LlamaMLP,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
)

from course_lib import (  # noqa: E402
    DecoderLM,
    DecoderLMBlock,
    DecoderLMConfig,
    LearnedPositionalEmbedding,
    PositionalEncoding,
    RMSNorm,
    SwiGLU,
    recording_attention,
    sample_next,
    sinusoidal_table,
    swiglu_hidden_size,
)

F64 = torch.float64
D, HEADS, FFN, VOCAB = 32, 4, 96, 64


def _hf_config(*, heads=HEADS, kv_heads=2, layers=2, tie=False, theta=10000.0, **extra) -> LlamaConfig:
    """A tiny Llama configuration. SDPA attention, as LlamaForCausalLM picks by default: a LlamaDecoderLayer
    built alone would otherwise use the eager path, which is causal only with an explicit mask and takes
    its softmax in float32."""
    extra.setdefault("rope_parameters", {"rope_type": "default", "rope_theta": theta})
    return LlamaConfig(vocab_size=VOCAB, hidden_size=D, intermediate_size=FFN, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=kv_heads, tie_word_embeddings=tie,
                       rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=None, pad_token_id=None,
                       attn_implementation="sdpa", **extra)


def _randomize(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Weights that give unit-scale activations (HF's std 0.02 makes each layer nearly the identity) and
    RMSNorm gains that are not all ones, so that every part shows in the outputs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            noise = torch.randn(p.shape, generator=g, dtype=F64).to(p.dtype)
            p.copy_(1.0 + 0.1 * noise if p.dim() == 1 else noise * p.shape[-1] ** -0.5)
    return module


def _hf_llama(dtype=F64, **config) -> LlamaForCausalLM:
    return _randomize(LlamaForCausalLM(_hf_config(**config)).to(dtype).eval())


# ----------------------------------------------------------------------------------------------- RMSNorm


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-6), (F64, 1e-14), (torch.bfloat16, 2e-2)])
def test_rmsnorm_equals_torch_rmsnorm(dtype, tol):
    torch.manual_seed(0)
    ours, theirs = RMSNorm(D, eps=1e-5).to(dtype), torch.nn.RMSNorm(D, eps=1e-5).to(dtype)
    with torch.no_grad():
        theirs.weight.normal_()
        ours.weight.copy_(theirs.weight)
    x = (torch.randn(3, 5, D) * 4).to(dtype)
    torch.testing.assert_close(ours(x), theirs(x), rtol=tol, atol=tol)


def test_rmsnorm_of_large_float16_inputs_stays_finite():
    """x^2 overflows float16 beyond 256: the mean of squares is taken in float32."""
    x = torch.full((2, D), 1000.0, dtype=torch.float16)
    out = RMSNorm(D).half()(x)
    assert out.dtype == torch.float16 and bool(out.isfinite().all())
    torch.testing.assert_close(out, torch.ones_like(out))


def test_rmsnorm_gradient():
    """The written-out gradient (training) against finite differences, in the input and the gain."""
    norm = RMSNorm(6).double()
    x = torch.randn(2, 3, 6, dtype=F64, requires_grad=True)
    gain = (torch.rand(6, dtype=F64) + 0.5).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, g: torch.func.functional_call(norm, {"weight": g}, (x,)), (x, gain))


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (F64, 1e-12)])
def test_rmsnorm_gradients_equal_torch_rmsnorms(dtype, tol):
    torch.manual_seed(0)
    ours, theirs = RMSNorm(D, eps=1e-5).to(dtype), torch.nn.RMSNorm(D, eps=1e-5).to(dtype)
    with torch.no_grad():
        theirs.weight.normal_()
        ours.weight.copy_(theirs.weight)
    x, upstream = torch.randn(4, 5, D, dtype=dtype) * 3, torch.randn(4, 5, D, dtype=dtype)
    grads = []
    for norm in (ours, theirs):
        xi = x.clone().requires_grad_()
        grads.append(torch.autograd.grad(norm(xi), (xi, norm.weight), upstream))
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


# ------------------------------------------------------------------------------------------------ SwiGLU


@pytest.mark.parametrize("d, multiple_of, hidden", [(4096, 256, 11008), (5120, 256, 13824), (8192, 256, 22016),
                                                    (32, 32, 96), (48, 32, 128), (100, 1, 266)])
def test_swiglu_hidden_size_is_llamas(d, multiple_of, hidden):
    """Llama 7B, 13B and 65B (Touvron et al. 2023, table 2 and the released configs) and small sizes."""
    assert swiglu_hidden_size(d, multiple_of) == hidden


def test_swiglu_keeps_the_parameter_count_of_a_4d_mlp():
    ffn = SwiGLU(48, multiple_of=1)  # floor(8 * 48 / 3) = 128
    assert sum(p.numel() for p in ffn.parameters()) == 3 * 48 * 128 == 2 * 48 * (4 * 48)


def test_swiglu_equals_hugging_faces_llama_mlp():
    torch.manual_seed(0)
    theirs = _randomize(LlamaMLP(_hf_config()).double())
    ours = SwiGLU(D, FFN).double()
    ours.load_state_dict({"W_gate.weight": theirs.gate_proj.weight, "W_up.weight": theirs.up_proj.weight,
                          "W_down.weight": theirs.down_proj.weight})
    x = torch.randn(2, 5, D, dtype=F64)
    torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=1e-12)
    # and the formula itself: W_down (silu(W_gate x) * W_up x), with silu(z) = z sigmoid(z)
    gate = x @ theirs.gate_proj.weight.T
    expected = (gate * torch.sigmoid(gate) * (x @ theirs.up_proj.weight.T)) @ theirs.down_proj.weight.T
    torch.testing.assert_close(ours(x), expected, rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------- one decoder layer


def _hf_layer_and_block(theta=10000.0, kv_heads=2):
    """A LlamaDecoderLayer from a local config and a DecoderLMBlock with its weights copied (float64)."""
    config = _hf_config(kv_heads=kv_heads, theta=theta)
    layer = _randomize(LlamaDecoderLayer(config, layer_idx=0).double().eval())
    block = DecoderLMBlock(D, HEADS, FFN, num_kv_heads=kv_heads, rope_base=theta,
                           norm_eps=config.rms_norm_eps).double().eval()
    block.load_state_dict(_hf_block_weights(layer))
    return config, layer, block


def _hf_block_weights(layer):
    """A LlamaDecoderLayer's weights under DecoderLMBlock's names (written out here, not from from_hf_llama)."""
    a, m = layer.self_attn, layer.mlp
    return {"norm1.weight": layer.input_layernorm.weight, "norm2.weight": layer.post_attention_layernorm.weight,
            "attention.W_q.weight": a.q_proj.weight, "attention.W_k.weight": a.k_proj.weight,
            "attention.W_v.weight": a.v_proj.weight, "attention.W_o.weight": a.o_proj.weight,
            "ffn.W_gate.weight": m.gate_proj.weight, "ffn.W_up.weight": m.up_proj.weight,
            "ffn.W_down.weight": m.down_proj.weight}


def _meta_reference(X, layer, heads, kv_heads, eps, base):
    """Meta's original Llama layer (llama/model.py), in float64: RoPE as complex multiplications of interleaved
    pairs. Hugging Face stores W_q and W_k in the rotate-half layout: convert_llama_weights_to_hf.py applies
    ``w.view(h, d_h // 2, 2, d).transpose(1, 2)``; its inverse gives Meta's rows back."""
    B, T, d = X.shape
    d_h = d // heads

    def rms(x, gain):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gain

    def to_meta(w, h):
        return w.view(h, 2, d_h // 2, d).transpose(1, 2).reshape(h * d_h, d)

    freqs = 1.0 / base ** (torch.arange(0, d_h, 2, dtype=F64) / d_h)
    cis = torch.polar(torch.ones(T, d_h // 2, dtype=F64), torch.outer(torch.arange(T, dtype=F64), freqs))

    def rope(x):  # (B, T, h, d_h): pair (2i, 2i + 1) is the complex number x_2i + i x_2i+1
        z = torch.view_as_complex(x.reshape(*x.shape[:-1], d_h // 2, 2).contiguous())
        return torch.view_as_real(z * cis[None, :, None]).flatten(3)

    att, mlp = layer.self_attn, layer.mlp
    h = rms(X, layer.input_layernorm.weight)
    q = rope((h @ to_meta(att.q_proj.weight, heads).T).view(B, T, heads, d_h))
    k = rope((h @ to_meta(att.k_proj.weight, kv_heads).T).view(B, T, kv_heads, d_h))
    v = (h @ att.v_proj.weight.T).view(B, T, kv_heads, d_h)
    k, v = (t.repeat_interleave(heads // kv_heads, dim=2) for t in (k, v))
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, h, T, d_h)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h) + torch.full((T, T), -math.inf, dtype=F64).triu(1)
    H = X + (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(B, T, d) @ att.o_proj.weight.T
    g = rms(H, layer.post_attention_layernorm.weight)
    return H + (F.silu(g @ mlp.gate_proj.weight.T) * (g @ mlp.up_proj.weight.T)) @ mlp.down_proj.weight.T


@pytest.mark.parametrize("theta, kv_heads", [(10000.0, 2), (500000.0, 1)])
def test_block_equals_hugging_faces_llama_decoder_layer(theta, kv_heads):
    """To the precision of HF's float32 angles and float32 RMSNorm (measured 4e-7 at 16 positions)."""
    config, layer, block = _hf_layer_and_block(theta, kv_heads)
    X = torch.randn(2, 16, D, dtype=F64, generator=torch.Generator().manual_seed(1))
    position_embeddings = LlamaRotaryEmbedding(config)(X, torch.arange(16)[None])
    with torch.no_grad():
        difference = (block(X) - layer(X, position_embeddings=position_embeddings)).abs().max().item()
    assert difference < 2e-6
    assert difference > 1e-12  # HF's float32 steps are visible: the tolerance is theirs, not ours


def test_block_equals_the_llama_layer_to_float64_precision_once_hfs_float32_steps_are_float64(monkeypatch):
    """HF's layer fed float64 cosines and sines, with its RMSNorm's float32 round trip removed: 1e-12."""
    config, layer, block = _hf_layer_and_block()

    def rmsnorm_in_float64(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))

    monkeypatch.setattr(LlamaRMSNorm, "forward", rmsnorm_in_float64)
    X = torch.randn(2, 16, D, dtype=F64, generator=torch.Generator().manual_seed(1))
    angles = torch.arange(16, dtype=F64)[:, None] / 10000.0 ** (torch.arange(0, 8, 2, dtype=F64) / 8)
    emb = torch.cat((angles, angles), dim=-1)[None]  # (1, T, d_h): HF's rotate-half layout
    with torch.no_grad():
        torch.testing.assert_close(block(X), layer(X, position_embeddings=(emb.cos(), emb.sin())), rtol=0,
                                   atol=1e-12)


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_block_equals_metas_original_formulation_in_float64(kv_heads):
    config, layer, block = _hf_layer_and_block(kv_heads=kv_heads)
    X = torch.randn(2, 16, D, dtype=F64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = _meta_reference(X, layer, HEADS, kv_heads, config.rms_norm_eps, 10000.0)
        torch.testing.assert_close(block(X), expected, rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------ whole model


@pytest.mark.parametrize("kv_heads, tie, theta", [(2, False, 10000.0), (4, True, 500000.0), (1, False, 10000.0)])
def test_model_logits_equal_llama_for_causal_lm(kv_heads, tie, theta):
    """Float64 weights; HF's float32 angles and RMSNorm give the tolerance (measured 1e-6)."""
    hf = _hf_llama(kv_heads=kv_heads, tie=tie, theta=theta)
    lm = DecoderLM.from_hf_llama(hf)
    c = lm.config
    assert (c.num_heads, c.kv_heads, c.num_layers, c.ffn_num_hiddens) == (HEADS, kv_heads, 2, FFN)
    assert (c.rope_base, c.norm_eps, c.tie_embeddings) == (theta, 1e-5, tie)
    assert (lm.lm_head.weight is lm.embedding.weight) == tie
    tokens = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(lm(tokens), hf(tokens).logits, rtol=0, atol=1e-5)


def test_model_logits_equal_llama_for_causal_lm_in_float32():
    hf = _hf_llama(dtype=torch.float32)
    lm = DecoderLM.from_hf_llama(hf)
    assert lm.embedding.weight.dtype == torch.float32
    tokens = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(lm(tokens), hf(tokens).logits, rtol=0, atol=2e-5)


# RoPE scalings: Llama configurations of each rope type that DecoderLM represents. The training context
# (max_position_embeddings for linear and dynamic, original_max_position_embeddings for yarn and llama3) is
# 8 or 16 tokens and the input 48, so that the scaling changes every logit (checked below).
ROPE_SCALINGS = {
    "linear": ({"rope_type": "linear", "factor": 4.0}, 16),
    "dynamic": ({"rope_type": "dynamic", "factor": 4.0}, 16),
    "yarn": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}, 32),
    "yarn-deepseek": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8, "mscale": 0.707,
                       "mscale_all_dim": 1.0, "beta_fast": 16.0, "beta_slow": 2.0, "truncate": False}, 32),
    "yarn-attention-factor": ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 16,
                               "attention_factor": 1.25}, 32),
    "llama3": ({"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8}, 32),
}


def _scaled_hf_llama(name, theta=10000.0, **config):
    rope, max_positions = ROPE_SCALINGS[name]
    return _hf_llama(rope_parameters={**rope, "rope_theta": theta}, max_position_embeddings=max_positions, **config)


def test_training_gradients_equal_llamas_in_float64():
    """The training path (RMSNorm's and RoPE's written-out gradients, the separate projections): the loss and the
    gradient of every weight equal Hugging Face's, run in float64 (tests/hf_float64.py), to 1e-10, with the
    gains and the key/value heads of a grouped model in play."""
    with hf_in_float64():
        hf = _hf_llama(kv_heads=2).train()
        lm = DecoderLM.from_hf_llama(hf).double().train()
        tokens = torch.randint(0, VOCAB, (2, 24), generator=torch.Generator().manual_seed(5))
        targets = F.pad(tokens[:, 1:], (0, 1), value=-100).flatten()  # (labels=tokens takes its loss in float32)
        hf_loss = F.cross_entropy(hf(tokens).logits.flatten(0, 1), targets, ignore_index=-100)
        hf_loss.backward()
    loss = F.cross_entropy(lm(tokens).flatten(0, 1), targets, ignore_index=-100)
    loss.backward()
    assert lm.config.kv_heads == 2 and abs(loss.item() - hf_loss.item()) < 1e-12
    theirs = _hf_named_parameters(hf)
    for name, param in lm.named_parameters():
        torch.testing.assert_close(param.grad, theirs[name].grad, rtol=0, atol=1e-10, msg=name)
        assert param.grad.abs().max() > 1e-6, name  # every weight's gradient is in play


def _hf_named_parameters(hf):
    """Hugging Face's parameters under DecoderLM's names (as from_hf_llama maps them)."""
    out = {"embedding.weight": hf.model.embed_tokens.weight, "norm.weight": hf.model.norm.weight,
           "lm_head.weight": hf.lm_head.weight}
    for i, layer in enumerate(hf.model.layers):
        out.update({f"blocks.{i}.{name}": weight for name, weight in _hf_block_weights(layer).items()})
    return out


@pytest.mark.parametrize("name", ROPE_SCALINGS)
@pytest.mark.parametrize("theta", [10000.0, 500000.0])
def test_model_logits_equal_llama_with_rope_scaling_in_float64(name, theta):
    """Hugging Face's code run in float64 (tests/hf_float64.py: its float32 frequencies, angles and RMSNorm in
    float64): logits to 1e-12 (measured 3e-15 to 6e-15 for logits of size about 4)."""
    with hf_in_float64():
        hf = _scaled_hf_llama(name, theta)
        lm = DecoderLM.from_hf_llama(hf)
        tokens = torch.randint(0, VOCAB, (2, 48), generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            expected = hf(tokens).logits
    assert lm.config.rope_base == theta and lm.config.rope_scaling["rope_type"] == name.split("-")[0]
    with torch.no_grad():
        got = lm(tokens)
        unscaled = DecoderLM(dataclasses.replace(lm.config, rope_scaling=None)).double().eval()
        unscaled.load_state_dict(lm.state_dict())
        assert (unscaled(tokens) - expected).abs().max() > 1e-2  # the scaling acts on these logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ROPE_SCALINGS)
def test_model_logits_equal_llama_with_rope_scaling_as_hugging_face_runs_it(name):
    """Hugging Face as it is: float64 weights, float32 frequencies, angles and RMSNorm; to 1e-5 (measured 1e-6
    to 3e-6 at 48 positions), the tolerance of the unscaled model."""
    hf = _scaled_hf_llama(name)
    lm = DecoderLM.from_hf_llama(hf)
    tokens = torch.randint(0, VOCAB, (2, 48), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(lm(tokens), hf(tokens).logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["linear", "dynamic", "yarn", "llama3"])
@pytest.mark.parametrize("prompt_len", [6, 20])
def test_greedy_generation_with_rope_scaling_equals_hugging_faces_generate(name, prompt_len):
    """Every key rotated once, when it enters the cache (RotaryEmbedding), as Hugging Face does. For dynamic
    NTK that rotation depends on the step (the base of the length at that step): a 6-token prompt crosses the
    16-token training context during generation, a 20-token prompt starts beyond it."""
    hf = _scaled_hf_llama(name)
    lm = DecoderLM.from_hf_llama(hf)
    prompt = torch.randint(0, VOCAB, (2, prompt_len), generator=torch.Generator().manual_seed(4))
    expected = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=24, do_sample=False,
                           pad_token_id=0)  # the mask: token 0 in a prompt is not padding
    assert torch.equal(lm.generate(prompt, 24, temperature=0.0), expected)


@pytest.mark.parametrize("prompt_len", [6, 20])
def test_dynamic_ntk_decoding_steps_equal_hugging_faces_cached_steps_in_float64(prompt_len):
    """Dynamic NTK, step by step with a cache, against LlamaForCausalLM with its DynamicCache (float64 HF, one
    fresh model, as in a generation): each step's logits to 1e-12. HF recomputes inv_freq when the length
    exceeds the longest seen (dynamic_rope_update), so each cached key keeps the base of its step; the
    steps therefore differ from scoring the whole sequence at once (checked: > 1e-3), and a table of the
    training context's angles read past it would fail too (checked: plain RoPE differs by > 1e-3)."""
    from transformers import DynamicCache

    with hf_in_float64():
        hf = _scaled_hf_llama("dynamic")
        lm = DecoderLM.from_hf_llama(hf)
        tokens = torch.randint(0, VOCAB, (2, 36), generator=torch.Generator().manual_seed(5))
        cache, expected = DynamicCache(config=hf.config), []
        with torch.no_grad():
            expected.append(hf(tokens[:, :prompt_len], cache=cache, use_cache=True).logits)
            for t in range(prompt_len, 36):
                expected.append(hf(tokens[:, t:t + 1], cache=cache, use_cache=True).logits)
    expected = torch.cat(expected, 1)
    plain = DecoderLM(dataclasses.replace(lm.config, rope_scaling=None)).double().eval()
    plain.load_state_dict(lm.state_dict())
    with torch.no_grad():
        for model, close in ((lm, True), (plain, False)):
            logits, state = model.step(tokens[:, :prompt_len])
            got = [logits]
            for t in range(prompt_len, 36):
                logits, state = model.step(tokens[:, t:t + 1], state)
                got.append(logits)
            got = torch.cat(got, 1)
            if close:
                torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
            else:
                assert (got - expected).abs().max() > 1e-3
        assert (lm(tokens) - expected).abs().max() > 1e-3  # decoding is not scoring the whole sequence


@pytest.mark.parametrize("hf_fields, scaling", [
    ({"rope_type": "yarn", "factor": None, "original_max_position_embeddings": 8},
     {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}),  # HF: max / original
    ({"rope_type": "yarn", "factor": 2.0, "beta_fast": None, "mscale": None},
     {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32}),  # None: HF's defaults
    ({"rope_type": "dynamic", "factor": 2.0},
     {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 32}),
    ({"type": "linear", "factor": 2.0}, {"rope_type": "linear", "factor": 2.0}),  # transformers 4's key
])
def test_from_hf_llama_reads_the_scaling_as_hugging_face_completes_it(hf_fields, scaling):
    hf = _hf_llama(layers=1, rope_parameters={**hf_fields, "rope_theta": 10000.0}, max_position_embeddings=32)
    assert DecoderLM.from_hf_llama(hf).config.rope_scaling == scaling


def test_from_hf_llama_reads_transformers_4_rope_scaling_and_rope_theta():
    """transformers 4 kept ``rope_theta`` on the config and the scaling in ``rope_scaling`` with ``"type"``."""
    from course_lib.models.hf_llama import _hf_rope

    old = SimpleNamespace(rope_theta=500000.0, rope_scaling={"type": "dynamic", "factor": 2.0},
                          max_position_embeddings=4096)
    assert _hf_rope(old) == {"rope_base": 500000.0,
                             "rope_scaling": {"rope_type": "dynamic", "factor": 2.0,
                                              "original_max_position_embeddings": 4096}}
    assert _hf_rope(SimpleNamespace(rope_theta=None, rope_scaling=None)) == {"rope_base": 10000.0,
                                                                             "rope_scaling": None}
    with pytest.raises(ValueError, match=r"rope_scaling\['rope_type'\] is 'su'"):
        _hf_rope(SimpleNamespace(rope_theta=10000.0, rope_scaling={"type": "su", "factor": 2.0}))


def test_from_hf_llama_copies_the_weights():
    hf = _hf_llama()
    lm = DecoderLM.from_hf_llama(hf)
    with torch.no_grad():
        hf.model.embed_tokens.weight.zero_()
    assert bool(lm.embedding.weight.abs().sum() > 0)


@pytest.mark.parametrize("change, error, words", [
    ({"rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * 4,
                          "long_factor": [2.0] * 4, "original_max_position_embeddings": 64}}, ValueError,
     r"rope_parameters\['rope_type'\] is 'longrope'"),
    ({"rope_parameters": {"rope_type": "proportional", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}},
     ValueError, r"rope_parameters\['rope_type'\] is 'proportional'"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}},
     ValueError, "partial_rotary_factor is 0.5"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2]}},
     ValueError, r"rope_parameters has fields .* \['mrope_section'\]"),
    ({"rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0, "beta_fast": 8.0}},
     ValueError, r"\['beta_fast'\]"),
    ({"attention_bias": True}, ValueError, "bias"),
    ({"mlp_bias": True}, ValueError, "bias"),
    ({"hidden_act": "gelu"}, ValueError, "gelu"),
    ({"head_dim": 16}, ValueError, "head_dim"),
])
def test_from_hf_llama_refuses_what_the_architecture_lacks(change, error, words):
    hf = LlamaForCausalLM(_hf_config(layers=1, **change))
    with pytest.raises(error, match=words):
        DecoderLM.from_hf_llama(hf)


def test_from_hf_llama_refuses_other_models():
    with pytest.raises(TypeError, match="LlamaForCausalLM"):
        DecoderLM.from_hf_llama(torch.nn.Linear(2, 2))


# --------------------------------------------------------------------------------- cache and generation


def _own_model(positional="rotary", seed=0, **config):
    torch.manual_seed(seed)
    config = DecoderLMConfig(vocab_size=VOCAB, num_hiddens=D, num_heads=HEADS, num_kv_heads=2,
                             positional=positional, **config)
    return _randomize(DecoderLM(config).double().eval(), seed)


@pytest.mark.parametrize("positional", ["rotary", "alibi", "none", "sinusoidal", "learned"])
def test_cached_steps_equal_the_uncached_forward(positional):
    lm = _own_model(positional)
    tokens = torch.randint(0, VOCAB, (3, 10), generator=torch.Generator().manual_seed(3))
    full = lm(tokens)
    pieces, state, start = [], None, 0
    for size in (3, 1, 1, 4, 1):
        logits, state = lm.step(tokens[:, start:start + size], state)
        pieces.append(logits)
        start += size
    assert len(state) == 10
    torch.testing.assert_close(torch.cat(pieces, 1), full, rtol=0, atol=1e-12)


@pytest.mark.parametrize("positional", ["rotary", "alibi", "learned"])
def test_a_cropped_state_continues_as_if_the_dropped_tokens_were_never_fed(positional):
    lm = _own_model(positional)
    tokens = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(4))
    _, state = lm.step(tokens[:, :7])
    assert len(state.crop(4)) == 4
    logits, _ = lm.step(tokens[:, 7:], state)  # now at positions 4 and 5
    expected = lm(torch.cat([tokens[:, :4], tokens[:, 7:]], 1))[:, 4:]
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="length must be at most the 4 cached steps"):
        state.crop(5)


def test_in_place_steps_equal_the_functional_ones():
    lm = _own_model()
    tokens = torch.randint(0, VOCAB, (2, 6), generator=torch.Generator().manual_seed(5))
    state = lm.init_state()
    pieces = [lm.step_(tokens[:, :4], state), lm.step_(tokens[:, 4:5], state), lm.step_(tokens[:, 5:], state)]
    assert len(state) == 6
    torch.testing.assert_close(torch.cat(pieces, 1), lm(tokens), rtol=0, atol=1e-12)


def test_step_leaves_the_given_state_unchanged():
    lm = _own_model()
    tokens = torch.randint(0, VOCAB, (2, 4))
    _, state = lm.step(tokens)
    logits_a, _ = lm.step(tokens[:, :1], state)
    logits_b, _ = lm.step(tokens[:, :1], state)  # the same state again: the same logits
    assert len(state) == 4
    torch.testing.assert_close(logits_a, logits_b, rtol=0, atol=0)
    reordered = state.index_select(torch.tensor([1, 1, 0]))
    assert reordered.batch_size == 3 and state.batch_size == 2


def _nucleus(logits, top_p):
    """Row by row, the most likely tokens until their probability reaches top_p (sorted, then cut)."""
    out = torch.full_like(logits, -math.inf)
    for row, z in enumerate(logits):
        probs, mass = torch.softmax(z, -1), 0.0
        for i in sorted(range(len(z)), key=lambda j: -z[j].item()):
            if mass >= top_p:
                break
            out[row, i], mass = z[i], mass + probs[i].item()
    return out


def _uncached_generation(lm, tokens, steps, temperature, top_k, generator, top_p=None):
    """The definition, without a cache: the whole sequence through forward at every step."""
    for _ in range(steps):
        logits = lm(tokens)[:, -1]
        if temperature == 0.0:
            nxt = logits.argmax(-1)
        else:
            logits = logits / temperature
            if top_k is not None:
                logits = logits.masked_fill(logits < logits.topk(top_k).values[:, -1:], -math.inf)
            if top_p is not None:
                logits = _nucleus(logits, top_p)
            nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)[:, 0]
        tokens = torch.cat([tokens, nxt[:, None]], 1)
    return tokens


def test_greedy_generation_equals_hugging_faces_generate():
    hf = _hf_llama()
    lm = DecoderLM.from_hf_llama(hf)
    prompt = torch.randint(0, VOCAB, (2, 5), generator=torch.Generator().manual_seed(4))
    expected = hf.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert expected.shape == (2, 17)
    assert torch.equal(lm.generate(prompt, 12, temperature=0.0), expected)


@pytest.mark.parametrize("temperature, top_k, top_p", [(0.0, None, None), (1.0, None, None), (0.7, 5, None),
                                                       (1.0, None, 0.6), (0.8, 6, 0.9)])
def test_cached_generation_equals_uncached_generation(temperature, top_k, top_p):
    lm = _own_model()
    prompt = torch.randint(0, VOCAB, (3, 4), generator=torch.Generator().manual_seed(5))
    cached = lm.generate(prompt, 15, temperature=temperature, top_k=top_k, top_p=top_p,
                         generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        uncached = _uncached_generation(lm, prompt, 15, temperature, top_k, torch.Generator().manual_seed(6), top_p)
    assert torch.equal(cached, uncached)


def test_generation_draws_each_token_with_sample_next():
    lm = _own_model()
    prompt = torch.randint(0, VOCAB, (2, 3), generator=torch.Generator().manual_seed(8))
    options = {"temperature": 0.9, "top_k": 7, "top_p": 0.8}
    out = lm.generate(prompt, 10, generator=torch.Generator().manual_seed(9), **options)
    g, tokens = torch.Generator().manual_seed(9), prompt
    with torch.no_grad():
        for _ in range(10):
            tokens = torch.cat([tokens, sample_next(lm(tokens)[:, -1], generator=g, **options)[:, None]], 1)
    assert torch.equal(out, tokens)
    assert torch.equal(lm.generate(prompt, 10, top_p=0.0, generator=g), lm.generate(prompt, 10, temperature=0.0))


def test_generation_runs_one_position_per_step_after_the_prompt():
    lm = _own_model()
    lengths, compute = [], lm.blocks[0].compute

    def recorded(X, *args, **kwargs):  # the positions the first block runs at each call
        lengths.append(X.shape[1])
        return compute(X, *args, **kwargs)

    lm.blocks[0].compute = recorded
    lm.generate(torch.zeros(2, 3, dtype=torch.long), 5)
    assert lengths == [3, 1, 1, 1, 1]  # the prompt once, then one new token per step (the cache holds the rest)


def test_sampling_follows_its_generator():
    lm = _own_model()
    prompt = torch.zeros(2, 1, dtype=torch.long)

    def sample(seed, **kw):
        return lm.generate(prompt, 20, generator=torch.Generator().manual_seed(seed), **kw)

    assert torch.equal(sample(0), sample(0))
    assert not torch.equal(sample(0), sample(1))
    assert torch.equal(sample(0, top_k=1), lm.generate(prompt, 20, temperature=0.0))  # top-1 is greedy


def test_generation_stops_after_eos():
    lm = _own_model()
    prompt = torch.randint(0, VOCAB, (2, 3), generator=torch.Generator().manual_seed(7))
    greedy = lm.generate(prompt, 10, temperature=0.0)
    eos = int(greedy[0, 5])  # the third token generated for the first sequence
    out = lm.generate(prompt, 10, temperature=0.0, eos_id=eos)
    first = (out[0, 3:] == eos).nonzero()[0, 0].item() + 3
    assert torch.equal(out[0, :first + 1], greedy[0, :first + 1]) and bool((out[0, first:] == eos).all())
    every_row_stopped = bool(((out[:, 3:] == eos).cumsum(1) > 0)[:, -1].all())
    assert out.shape[1] == 13 or every_row_stopped


def test_generate_leaves_grad_mode_and_global_rng_alone():
    lm = _own_model()
    state = torch.random.get_rng_state()
    lm.generate(torch.zeros(1, 2, dtype=torch.long), 3, generator=torch.Generator().manual_seed(0))
    assert torch.equal(torch.random.get_rng_state(), state) and torch.is_grad_enabled()


def test_recorded_attention_weights_are_causal_distributions():
    lm = _own_model()
    tokens = torch.randint(0, VOCAB, (2, 6))
    with recording_attention(lm):
        lm(tokens)
    weights = lm.blocks[1].attention.attention_weights  # (B, h, T, T)
    assert weights.shape == (2, HEADS, 6, 6)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, HEADS, 6, dtype=F64))
    assert bool((weights.triu(1) == 0).all())


def test_every_parameter_gets_a_finite_gradient():
    lm = DecoderLM(DecoderLMConfig(vocab_size=VOCAB, num_hiddens=D, num_heads=HEADS, num_kv_heads=1, dropout=0.1,
                                   tie_embeddings=True)).train()
    tokens = torch.randint(0, VOCAB, (2, 8))
    F.cross_entropy(lm(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten()).backward()
    assert all(p.grad is not None and bool(p.grad.isfinite().all()) for p in lm.parameters())


# ---------------------------------------------------------------------------------- config and checks


def test_default_feed_forward_size_and_initialisation():
    lm = DecoderLM(DecoderLMConfig(vocab_size=10, num_hiddens=48, num_heads=4, num_layers=3))
    assert lm.blocks[0].ffn.W_gate.out_features == 128  # swiglu_hidden_size(48, 32)
    assert lm.lm_head.weight is not lm.embedding.weight
    assert abs(lm.embedding.weight.std().item() - 0.02) < 0.004
    assert abs(lm.blocks[0].attention.W_o.weight.std().item() - 0.02 / math.sqrt(6)) < 0.002


@pytest.mark.parametrize("change, error, words", [
    ({"num_kv_heads": 3}, ValueError, "num_kv_heads"),
    ({"num_heads": 5}, ValueError, "num_heads"),
    ({"num_hiddens": 36, "num_heads": 12}, ValueError, "head size num_hiddens / num_heads = 36 / 12 must be even"),
    ({"positional": "absolute"}, ValueError, "positional"),
    ({"max_len": 0}, ValueError, "max_len"),
    ({"vocab_size": 0}, ValueError, "vocab_size"),
    ({"num_layers": 2.0}, TypeError, "num_layers"),
    ({"ffn_num_hiddens": -1}, ValueError, "ffn_num_hiddens"),
    ({"rope_base": 1.0}, ValueError, "rope_base"),
    ({"norm_eps": 0.0}, ValueError, "norm_eps"),
    ({"dropout": 1.0}, ValueError, "dropout"),
    ({"tie_embeddings": 1}, TypeError, "tie_embeddings"),
])
def test_config_refuses_bad_values_naming_the_field(change, error, words):
    with pytest.raises(error, match=words):
        DecoderLMConfig(**{"vocab_size": 10, "num_hiddens": 32, "num_heads": 4, **change})


def test_alibi_and_no_position_models_accept_any_head_size():
    DecoderLMConfig(vocab_size=10, num_hiddens=36, num_heads=12, positional="alibi")


@pytest.mark.parametrize("call, error, words", [
    (lambda lm: lm(torch.tensor([[1, 64]])), ValueError, r"\[0, 64\)"),
    (lambda lm: lm(torch.tensor([[1.0, 2.0]])), TypeError, "torch.long"),
    (lambda lm: lm(torch.zeros(2, 0, dtype=torch.long)), ValueError, "at least one token"),
    (lambda lm: lm(torch.zeros(3, dtype=torch.long)), ValueError, "2-D"),
    (lambda lm: lm.generate(torch.zeros(1, 2, dtype=torch.long), -1), ValueError, "max_new_tokens"),
    (lambda lm: lm.generate(torch.zeros(1, 2, dtype=torch.long), 2, temperature=-0.5), ValueError, "temperature"),
    (lambda lm: lm.generate(torch.zeros(1, 2, dtype=torch.long), 2, top_p=1.5), ValueError, r"top_p must be in \["),
    (lambda lm: lm.generate(torch.zeros(1, 2, dtype=torch.long), 2, top_p="0.5"), TypeError, "top_p"),
    (lambda lm: lm.generate(torch.zeros(1, 2, dtype=torch.long), 2, top_k=0), ValueError, "top_k"),
    (lambda lm: lm.generate(torch.zeros(1, 2, dtype=torch.long), 2, generator=0), TypeError, "generator"),
    (lambda lm: lm.generate(torch.zeros(1, 2, dtype=torch.long), 2, eos_id=64), ValueError, "eos_id"),
    (lambda lm: lm.step(torch.zeros(2, 1, dtype=torch.long), lm.step(torch.zeros(3, 1, dtype=torch.long))[1]),
     ValueError, "batch size 3"),
    (lambda lm: lm.step(torch.zeros(2, 1, dtype=torch.long), "state"), TypeError, "DecoderLMState"),
    (lambda lm: DecoderLM({"vocab_size": 10}), TypeError, "DecoderLMConfig"),
    (lambda lm: RMSNorm(4)(torch.randn(2, 5)), ValueError, "size 4"),
    (lambda lm: RMSNorm(4, eps=-1.0), ValueError, "eps"),
    (lambda lm: SwiGLU(4)(torch.randn(2, 5)), ValueError, "size 4"),
    (lambda lm: SwiGLU(4)(torch.ones(2, 4, dtype=torch.long)), TypeError, "floating"),
    (lambda lm: swiglu_hidden_size(32, multiple_of=0), ValueError, "multiple_of"),
])
def test_bad_input_is_refused_with_a_clear_message(call, error, words):
    lm = DecoderLM(DecoderLMConfig(vocab_size=VOCAB, num_hiddens=16, num_heads=2))
    with pytest.raises(error, match=words):
        call(lm)


def test_course_lib_never_imports_transformers():
    """transformers is a test and book dependency only: importing every course_lib module leaves it unloaded."""
    code = ("import importlib, pkgutil, sys, course_lib\n"
            "for m in pkgutil.walk_packages(course_lib.__path__, 'course_lib.'):\n"
            "    if not m.name.endswith('__main__'):\n"
            "        importlib.import_module(m.name)\n"
            "print(sorted(n for n in sys.modules if n.split('.')[0] in ('transformers', 'huggingface_hub')))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", result.stdout


# ------------------------------------------------------------------------ positions added to the embeddings


def test_sinusoidal_positions_are_chapter_6s_table_at_the_embeddings_scale():
    lm = DecoderLM(DecoderLMConfig(vocab_size=VOCAB, num_hiddens=D, num_heads=HEADS, positional="sinusoidal",
                                   max_len=40))
    assert isinstance(lm.positions, PositionalEncoding)
    expected = sinusoidal_table(40, D) * 0.02 * math.sqrt(2)
    torch.testing.assert_close(lm.positions.P[0], expected, rtol=0, atol=1e-7)
    # a full period of the fastest pair has mean square 1/2 per feature: the scaled table's is 0.02^2
    assert lm.positions.P[0, :, 0].pow(2).mean().sqrt().item() == pytest.approx(0.02, rel=0.05)
    assert "positions.P" not in lm.state_dict()  # a fixed buffer, recomputed when the model is built


def test_learned_positions_are_parameters_drawn_like_the_embeddings():
    torch.manual_seed(0)
    lm = DecoderLM(DecoderLMConfig(vocab_size=VOCAB, num_hiddens=64, num_heads=HEADS, positional="learned",
                                   max_len=512))
    assert isinstance(lm.positions, LearnedPositionalEmbedding)
    assert "positions.P" in dict(lm.named_parameters())
    assert lm.positions.P.std().item() == pytest.approx(0.02, rel=0.05)


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_added_positions_enter_as_embedding_plus_position_vector(positional):
    """The model equals its blocks run on E[x_t] + p_t, computed here by hand from the table."""
    lm = _own_model(positional, max_len=16)
    with torch.no_grad():
        lm.positions.P.copy_(torch.randn(lm.positions.P.shape, dtype=F64))  # any vectors, visibly large
    tokens = torch.randint(0, VOCAB, (2, 7), generator=torch.Generator().manual_seed(1))
    X = lm.embedding.weight[tokens] + lm.positions.P[0, :7]
    for block in lm.blocks:
        X = block(X)
    torch.testing.assert_close(lm(tokens), lm.lm_head(lm.norm(X)), rtol=0, atol=1e-12)
    # the positions matter: the same tokens in another order are not the same sequence shifted
    swapped = tokens.flip(1)
    assert not torch.allclose(lm(swapped).flip(1)[:, -1], lm(tokens)[:, 0])


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_added_positions_refuse_sequences_beyond_max_len(positional):
    lm = _own_model(positional, max_len=8)
    tokens = torch.zeros(1, 9, dtype=torch.long)
    with pytest.raises(ValueError, match=f"the {positional} positions of this model cover 8 tokens"):
        lm(tokens)
    _, state = lm.step(tokens[:, :8])
    with pytest.raises(ValueError, match="got a sequence of 9"):
        lm.step(tokens[:, :1], state)
    with pytest.raises(ValueError, match="max_len"):
        lm.generate(tokens[:, :5], 5)
    assert lm.generate(tokens[:, :5], 4, temperature=0.0).shape == (1, 9)  # the last token is never fed


def test_positions_inside_attention_have_no_length_limit():
    for positional in ("rotary", "alibi", "none"):
        lm = _own_model(positional, max_len=4)
        assert lm.positions is None
        assert lm(torch.zeros(1, 9, dtype=torch.long)).shape == (1, 9, VOCAB)
