"""RoPE's defaults and its scalings for longer contexts, against Hugging Face (transformers 5.24).

The reference is Hugging Face's own code: ``ROPE_INIT_FUNCTIONS`` (``modeling_rope_utils``), the config
classes' defaults and ``LlamaRotaryEmbedding``. Hugging Face computes the frequencies in float32; run as it
is, it agrees with course_lib's float64 frequencies to float32's relative rounding (rtol 1e-6 to 1e-5 below).
Run in float64 (``tests/hf_float64.py``: its float32 names read as float64, the same formulas), it
agrees to 1e-12, which is what pins every formula and default. Besides Hugging Face, the scalings are
checked against the closed forms of the papers (position interpolation reads position ``s m`` as ``m``,
NTK keeps the fastest pair and divides the slowest by ``s``, YaRN's and Llama 3's bands).
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing downloads: every configuration below is built locally

import inspect  # noqa: E402
import math  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from hf_float64 import hf_in_float64  # noqa: E402
from hypothesis import example, given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, RotaryEmbeddingConfigMixin  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

import course_lib as cl  # noqa: E402
from course_lib import (  # noqa: E402
    DecoderLMConfig,
    RotaryKernel,
    explicit_kernel,
    rope_angles,
    rope_scaling_parameters,
    rotary_embedding,
    rotary_frequencies,
)

F64 = torch.float64
hf_logging.set_verbosity_error()  # HF warns (only warns) about some configs drawn below: YaRN's implicit factor


def _hf_config(head_size: int, rope_parameters: dict | None = None, max_position_embeddings: int = 2048
               ) -> LlamaConfig:
    """A Llama config with heads of ``head_size``; ``rope_parameters=None`` leaves HF's defaults."""
    extra = {} if rope_parameters is None else {"rope_parameters": dict(rope_parameters)}
    return LlamaConfig(vocab_size=8, hidden_size=2 * head_size, intermediate_size=8, num_hidden_layers=1,
                       num_attention_heads=2, max_position_embeddings=max_position_embeddings, **extra)


def _hf_inv_freq(head_size, base, scaling, seq_len=None, max_position_embeddings=2048, float64=True):
    """Hugging Face's (inv_freq, attention_factor) for our scaling dict, read as HF reads a config."""
    scaling = dict(scaling)
    if scaling["rope_type"] == "dynamic":  # HF's dynamic NTK takes the training context from the config
        max_position_embeddings = scaling.pop("original_max_position_embeddings")
    rope_parameters = {**scaling, "rope_theta": base}
    with hf_in_float64() if float64 else _nothing():
        config = _hf_config(head_size, rope_parameters, max_position_embeddings)
        inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](config, seq_len=seq_len)
    return inv_freq.double(), attention_factor


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# -------------------------------------------------------------------------- the base 10000, pinned


def test_hugging_faces_default_base_is_10000():
    """The value every default below is pinned to, read from Hugging Face (not typed in our code)."""
    assert RotaryEmbeddingConfigMixin.default_theta == 10000.0
    assert LlamaConfig().rope_parameters == {"rope_theta": 10000.0, "rope_type": "default"}


@pytest.mark.parametrize("entry", [rotary_frequencies, rope_angles, rotary_embedding, RotaryKernel.__init__,
                                   cl.RotaryEmbedding.__init__, DecoderLMConfig, cl.DecoderLMBlock.__init__])
def test_every_default_base_is_hugging_faces(entry):
    name = "rope_base" if entry in (DecoderLMConfig, cl.DecoderLMBlock.__init__) else "base"
    default = inspect.signature(entry).parameters[name].default
    assert default == RotaryEmbeddingConfigMixin.default_theta


def test_default_frequencies_are_hugging_faces_default_inv_freq():
    """rotary_frequencies(d) without a base: HF's LlamaRotaryEmbedding of a config without RoPE fields."""
    for head_size in (8, 64, 128):
        hf = LlamaRotaryEmbedding(_hf_config(head_size))
        torch.testing.assert_close(rotary_frequencies(head_size), hf.inv_freq.double(), rtol=1e-6, atol=0)
        cos, sin = rope_angles(torch.arange(50), head_size)
        hf_cos, hf_sin = hf(torch.zeros(1, dtype=F64), torch.arange(50)[None])
        torch.testing.assert_close(cos, hf_cos[0, :, :head_size // 2].double(), rtol=0, atol=5e-5)
        torch.testing.assert_close(sin, hf_sin[0, :, :head_size // 2].double(), rtol=0, atol=5e-5)


def test_default_rotary_embedding_and_kernel_rotate_as_hugging_faces_default_llama():
    """rotary_embedding(x) and RotaryKernel() with no base: HF's default rotation, to float32 angle precision."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 16, dtype=F64) for _ in range(3))
    cos, sin = LlamaRotaryEmbedding(_hf_config(16))(q, torch.arange(40)[None])
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos, sin)
    torch.testing.assert_close(rotary_embedding(q), q_hf, rtol=0, atol=1e-4)
    expected, _ = explicit_kernel(q_hf, k_hf, v, causal=True)
    for kernel in (RotaryKernel(explicit_kernel), cl.attention_kernel("rotary", inner="explicit")):
        torch.testing.assert_close(kernel(q, k, v, causal=True)[0], expected, rtol=0, atol=1e-4)
    rope = cl.RotaryEmbedding(16)
    torch.testing.assert_close(rope(q), q_hf, rtol=0, atol=1e-4)
    torch.testing.assert_close(rope(k[..., 7:, :], start=7), k_hf[..., 7:, :], rtol=0, atol=1e-4)


def test_decoder_lm_config_default_base_builds_hugging_faces_rotation():
    config = DecoderLMConfig(vocab_size=8, num_hiddens=32, num_heads=2)
    assert config.rope_base == LlamaConfig().rope_parameters["rope_theta"]
    rotary = cl.DecoderLMBlock.from_config(config).attention.rotary
    assert rotary.base == RotaryEmbeddingConfigMixin.default_theta and rotary.scaling is None


# ------------------------------------------------------------------- each scaling type's defaults


YARN_MINIMAL = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 256}


def test_yarn_defaults_are_hugging_faces():
    """The defaults filled in equal what Hugging Face reads for absent fields: the same frequencies and
    attention factor from the minimal dict. The configuration is one where each default matters: HF's
    own result moves when any of them is set to another value (so a wrong default here would fail)."""
    head_size, base = 64, 10000.0
    theirs, their_factor = _hf_inv_freq(head_size, base, YARN_MINIMAL)
    ours = rotary_frequencies(head_size, base, YARN_MINIMAL)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=0)
    params = rope_scaling_parameters(YARN_MINIMAL)
    assert params["attention_factor"] == pytest.approx(their_factor, rel=1e-15, abs=0)
    assert params["attention_factor"] == pytest.approx(0.1 * math.log(8.0) + 1)  # the paper's sqrt(1/t)
    for key, other in (("beta_fast", 16.0), ("beta_slow", 2.0), ("truncate", False)):
        moved, _ = _hf_inv_freq(head_size, base, {**YARN_MINIMAL, key: other})
        assert not torch.allclose(moved, theirs, rtol=1e-6, atol=0), key
        torch.testing.assert_close(rotary_frequencies(head_size, base, {**YARN_MINIMAL, key: other}), moved,
                                   rtol=1e-12, atol=0)
    _, moved_factor = _hf_inv_freq(head_size, base, {**YARN_MINIMAL, "mscale": 0.7, "mscale_all_dim": 1.0})
    assert moved_factor != pytest.approx(their_factor)


@pytest.mark.parametrize("minimal", [
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 64},
    YARN_MINIMAL,
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 8192},
])
def test_the_fields_each_type_requires_are_hugging_faces(minimal):
    """What the minimal dict holds is what HF requires (less rope_theta, and dynamic's training context,
    which HF reads from config.max_position_embeddings); HF refuses a config without any of them."""
    params = rope_scaling_parameters(minimal)
    assert set(params) >= set(minimal)
    for key in set(minimal) - {"rope_type", "original_max_position_embeddings"}:
        with pytest.raises(ValueError, match=key):
            rope_scaling_parameters({k: v for k, v in minimal.items() if k != key})
        if minimal["rope_type"] != "dynamic":
            with pytest.raises(KeyError, match=key):
                _hf_config(16, {k: v for k, v in minimal.items() if k != key} | {"rope_theta": 1e4}).validate_rope()


# ------------------------------------------------------------ frequencies and factors equal HF's


def _scalings(draw):
    """A scaling dict of any type with plausible, varied fields."""
    rope_type = draw(st.sampled_from(["linear", "dynamic", "yarn", "llama3"]))
    factor = draw(st.sampled_from([1.0, 2.0, 4.0, 8.0, 16.0, 32.0]) | st.floats(1.0, 40.0))
    original = draw(st.sampled_from([8, 32, 256, 2048, 8192]) | st.integers(2, 10000))
    scaling = {"rope_type": rope_type, "factor": factor}
    if rope_type in ("dynamic", "yarn", "llama3"):
        scaling["original_max_position_embeddings"] = original
    if rope_type == "yarn":
        beta_slow = draw(st.floats(0.25, 4.0))
        scaling.update({"beta_fast": beta_slow + draw(st.floats(0.5, 64.0)), "beta_slow": beta_slow,
                        "truncate": draw(st.booleans())})
        if draw(st.booleans()):
            scaling.update({"mscale": draw(st.floats(0.1, 2.0)), "mscale_all_dim": draw(st.floats(0.1, 2.0))})
        if draw(st.booleans()):
            scaling["attention_factor"] = draw(st.floats(0.5, 2.0))
    if rope_type == "llama3":
        low = draw(st.floats(0.25, 4.0))
        scaling.update({"low_freq_factor": low, "high_freq_factor": low + draw(st.floats(0.25, 8.0))})
    return scaling


scalings = st.composite(_scalings)


@given(head_size=st.integers(2, 96).map(lambda h: 2 * h), base=st.sampled_from([10000.0, 500000.0, 1e6])
       | st.floats(10.0, 1e7), scaling=scalings(), seq_len=st.integers(1, 60000))
# YaRN's ramp ending past the last pair (HF clips it at d - 1, not d/2 - 1), and Llama 3.1's scaling:
@example(head_size=16, base=100.0, scaling={"rope_type": "yarn", "factor": 4.0,
                                            "original_max_position_embeddings": 4096}, seq_len=1)
@example(head_size=128, base=500000.0, scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
         seq_len=1)
def test_frequencies_and_attention_factor_equal_hugging_faces(head_size, base, scaling, seq_len):
    """Every type, random fields: HF's inv_freq in float64 to 1e-12 (relative). As HF runs it, in float32, to
    float32's rounding: relative 1e-5, or 2e-7 absolute (float32's epsilon times the fastest frequency, 1),
    for the blended pairs of Llama 3 and YaRN, whose float32 weights are off by up to 1e-7 times the turns
    and the factor (a relative 1.7e-5 seen at factor 32); the attention factor (cos^2 + sin^2 at any
    position) to 1e-12."""
    seq = seq_len if scaling["rope_type"] == "dynamic" else None
    theirs, their_factor = _hf_inv_freq(head_size, base, scaling, seq_len=seq)
    ours = rotary_frequencies(head_size, base, scaling, seq_len=seq)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=0)
    as_run, _ = _hf_inv_freq(head_size, base, scaling, seq_len=seq, float64=False)
    torch.testing.assert_close(ours, as_run, rtol=1e-5, atol=2e-7)
    cos, sin = rope_angles([0, 7, seq_len - 1], head_size, base, scaling)
    torch.testing.assert_close((cos**2 + sin**2).sqrt(), torch.full_like(cos, their_factor), rtol=1e-12, atol=0)


@pytest.mark.parametrize("scaling", [
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 16},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 16},
])
def test_angles_equal_llama_rotary_embedding_in_float64(scaling):
    """HF's whole rotary module (dynamic's length-dependent update and YaRN's attention scaling included)
    on 40 positions, 2.5 times the training context: cos and sin to 1e-12."""
    params = dict(scaling)
    max_pos = params.pop("original_max_position_embeddings") if scaling["rope_type"] == "dynamic" else 64
    with hf_in_float64():
        hf = LlamaRotaryEmbedding(_hf_config(16, {**params, "rope_theta": 10000.0}, max_pos))
        hf_cos, hf_sin = hf(torch.zeros(1, dtype=F64), torch.arange(40)[None])
    cos, sin = rope_angles(torch.arange(40), 16, scaling=scaling)
    torch.testing.assert_close(cos, hf_cos[0, :, :8], rtol=0, atol=1e-12)
    torch.testing.assert_close(sin, hf_sin[0, :, :8], rtol=0, atol=1e-12)
    torch.testing.assert_close(hf_cos[0, :, 8:], hf_cos[0, :, :8], rtol=0, atol=0)  # HF repeats each pair's


@pytest.mark.parametrize("scaling", [
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 16},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 16},
])
def test_rotary_embedding_steps_equal_llama_rotary_embedding_steps_in_float64(scaling):
    """A prompt of 10 positions, then one position at a time to 100 (past the training context of 16 and the
    table's first 64 rows): RotaryEmbedding's rotation at each call equals what one fresh LlamaRotaryEmbedding
    gives at that call (HF recomputes dynamic's inv_freq whenever the length exceeds the longest seen), to
    1e-12. For dynamic, a call's angles are those of its own length, not the whole sequence's (checked)."""
    params = dict(scaling)
    max_pos = params.pop("original_max_position_embeddings") if scaling["rope_type"] == "dynamic" else 64
    torch.manual_seed(0)
    x = torch.randn(1, 2, 100, 16, dtype=F64)
    rope = cl.RotaryEmbedding(16, scaling=scaling)
    with hf_in_float64():
        hf = LlamaRotaryEmbedding(_hf_config(16, {**params, "rope_theta": 10000.0}, max_pos))
        calls = [(0, 10)] + [(t, t + 1) for t in range(10, 100)]
        for start, stop in calls:
            hf_cos, hf_sin = hf(x, torch.arange(start, stop)[None])
            x_hf, _ = apply_rotary_pos_emb(x[..., start:stop, :], x[..., start:stop, :], hf_cos, hf_sin)
            torch.testing.assert_close(rope(x[..., start:stop, :], start), x_hf, rtol=0, atol=1e-12)
    whole = rotary_embedding(x, scaling=scaling)  # all 100 positions with the base of length 100
    differs = (rope(x[..., 50:51, :], 50) - whole[..., 50:51, :]).abs().max() > 1e-3
    assert differs == (scaling["rope_type"] == "dynamic")


@pytest.mark.parametrize("scaling", [None, {"rope_type": "linear", "factor": 4.0},
                                     {"rope_type": "ntk", "factor": 4.0}, YARN_MINIMAL,
                                     {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32}])
def test_rotary_embedding_table_is_rope_angles_and_caches_rotated_keys_exactly(scaling):
    """The table (extended by doubling past 64 rows) gives rope_angles' rotation at any start, and attention
    with keys rotated once into a cache equals the re-rotating kernel over the whole sequence (1e-12)."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 150, 8, dtype=F64)
    rope = cl.RotaryEmbedding(8, scaling=scaling)
    for start, n in ((0, 5), (3, 100), (149, 1), (0, 150)):
        cos, sin = rope_angles(torch.arange(start, start + n), 8, scaling=scaling)
        torch.testing.assert_close(rope(x[..., :n, :], start), cl.apply_rotary(x[..., :n, :], cos, sin),
                                   rtol=0, atol=1e-12)
    rotated = cl.MultiHeadAttention(16, 4, num_kv_heads=2, rotary=cl.RotaryEmbedding(4, scaling=scaling))
    kernel = cl.MultiHeadAttention(16, 4, num_kv_heads=2, kernel=RotaryKernel(scaling=scaling))
    kernel.load_state_dict(rotated.state_dict())
    rotated, kernel = rotated.double().eval(), kernel.double().eval()
    h = torch.randn(2, 70, 16, dtype=F64)
    cache = cl.KVCache()
    steps = [rotated(h[:, :30], h[:, :30], h[:, :30], causal=True, kv_cache=cache)]
    steps += [rotated(h[:, t:t + 1], h[:, t:t + 1], h[:, t:t + 1], causal=True, kv_cache=cache) for t in range(30, 70)]
    torch.testing.assert_close(torch.cat(steps, 1), kernel(h, h, h, causal=True), rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- the papers' closed forms


@given(head_size=st.integers(1, 32).map(lambda h: 2 * h), factor=st.integers(1, 16),
       m=st.integers(0, 5000), seed=st.integers(0, 2**16))
def test_position_interpolation_reads_position_s_m_as_m(head_size, factor, m, seed):
    """Chen et al. (2023): with factor s, position s m is rotated as the unscaled position m."""
    x = torch.randn(3, head_size, dtype=F64, generator=torch.Generator().manual_seed(seed))
    linear = {"rope_type": "linear", "factor": float(factor)}
    torch.testing.assert_close(rotary_embedding(x, [factor * m] * 3, scaling=linear), rotary_embedding(x, [m] * 3),
                               rtol=0, atol=1e-9)


@given(head_size=st.integers(2, 64).map(lambda h: 2 * h), factor=st.floats(1.0, 64.0), base=st.floats(10.0, 1e6))
def test_ntk_keeps_the_fastest_pair_and_divides_the_slowest_by_the_factor(head_size, factor, base):
    """bloc97's base b s^(d/(d-2)): pair i divided by s^(2i/(d-2)), so 1 at i = 0 and s at i = d/2 - 1."""
    theta = rotary_frequencies(head_size, base)
    ntk = rotary_frequencies(head_size, base, {"rope_type": "ntk", "factor": factor})
    i = torch.arange(head_size // 2, dtype=F64)
    torch.testing.assert_close(theta / ntk, factor ** (2 * i / (head_size - 2)), rtol=1e-12, atol=0)
    assert ntk[0] == pytest.approx(1.0, rel=1e-14) and theta[-1] / ntk[-1] == pytest.approx(factor, rel=1e-12)


@given(head_size=st.integers(2, 64).map(lambda h: 2 * h), factor=st.floats(1.0, 16.0),
       original=st.integers(1, 4096), extra=st.integers(1, 20000))
def test_dynamic_ntk_is_plain_rope_up_to_the_training_context_then_ntk_at_the_length_s_scale(
        head_size, factor, original, extra):
    dynamic = {"rope_type": "dynamic", "factor": factor, "original_max_position_embeddings": original}
    plain = rotary_frequencies(head_size)
    for seq_len in (1, original):
        torch.testing.assert_close(rotary_frequencies(head_size, scaling=dynamic, seq_len=seq_len), plain,
                                   rtol=1e-14, atol=0)  # s T / L - (s - 1) is 1 up to rounding at T = L
    length = original + extra
    scale = factor * length / original - (factor - 1)
    torch.testing.assert_close(rotary_frequencies(head_size, scaling=dynamic, seq_len=length),
                               rotary_frequencies(head_size, scaling={"rope_type": "ntk", "factor": scale}),
                               rtol=1e-12, atol=0)
    cos, _ = rope_angles(torch.arange(length), head_size, scaling=dynamic)  # the length is the largest position + 1
    angles = torch.arange(length, dtype=F64)[:, None] * rotary_frequencies(head_size, scaling=dynamic, seq_len=length)
    torch.testing.assert_close(cos, angles.cos(), rtol=0, atol=1e-12)


def test_yarn_keeps_fast_pairs_interpolates_slow_ones_and_ramps_between():
    """Peng et al. (2023), Llama 2's numbers (d_h 128, base 10000, L = 4096, s = 16, beta 32 and 1): pair i
    turns r_i = L theta_i / 2 pi times over L; r_i > 32 keeps theta_i, r_i < 1 gets theta_i / s, and the
    weight of theta_i falls linearly in i between the two (indices rounded outwards)."""
    d, L, s = 128, 4096, 16.0
    yarn = {"rope_type": "yarn", "factor": s, "original_max_position_embeddings": L}
    theta, ours = rotary_frequencies(d), rotary_frequencies(d, scaling=yarn)
    turns = L * theta / (2 * math.pi)
    low = math.floor(d * math.log(L / (32 * 2 * math.pi)) / (2 * math.log(10000.0)))
    high = math.ceil(d * math.log(L / (1 * 2 * math.pi)) / (2 * math.log(10000.0)))
    assert bool((turns[:low + 1] > 32).all()) and bool((turns[high:] < 1).all())
    torch.testing.assert_close(ours[:low + 1], theta[:low + 1], rtol=1e-15, atol=0)
    torch.testing.assert_close(ours[high:], theta[high:] / s, rtol=1e-15, atol=0)
    kept = (ours - theta / s) / (theta - theta / s)  # the weight of theta_i
    i = torch.arange(d // 2, dtype=F64)
    torch.testing.assert_close(kept[low:high + 1], 1 - (i[low:high + 1] - low) / (high - low), rtol=0, atol=1e-12)


def test_llama3_bands_follow_the_wavelengths():
    """Meta's Llama 3.1 (d_h 128, base 500000, s = 8, factors 1 and 4, L = 8192): wavelengths under
    L / 4 = 2048 keep theta_i, those over L / 1 = 8192 get theta_i / 8, and in between the weight of
    theta_i is (L / lambda_i - 1) / (4 - 1), linear in the number of turns."""
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}
    theta = rotary_frequencies(128, 500000.0)
    ours = rotary_frequencies(128, 500000.0, llama3)
    wavelength = 2 * math.pi / theta
    short, long = wavelength < 2048, wavelength > 8192
    assert short.sum() > 0 and long.sum() > 0 and (~short & ~long).sum() > 0  # all three bands are populated
    torch.testing.assert_close(ours[short], theta[short], rtol=0, atol=0)
    torch.testing.assert_close(ours[long], theta[long] / 8, rtol=1e-15, atol=0)
    middle = ~short & ~long
    weight = (8192 / wavelength[middle] - 1) / 3
    torch.testing.assert_close(ours[middle], weight * theta[middle] + (1 - weight) * theta[middle] / 8,
                               rtol=1e-14, atol=0)
    assert bool((ours[1:] < ours[:-1]).all())  # still one frequency per pair, in order


@pytest.mark.parametrize("scaling", [{"rope_type": "linear", "factor": 3.0}, {"rope_type": "ntk", "factor": 3.0},
                                     YARN_MINIMAL | {"original_max_position_embeddings": 8},
                                     {"rope_type": "llama3", "factor": 3.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8}])
def test_static_scalings_keep_the_relative_position_property(scaling):
    """The frequencies change, not the form: scores still depend on m - n only (YaRN's factor scales them all)."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 16, dtype=F64, generator=g), torch.randn(1, 16, dtype=F64, generator=g)

    def score(m, n):
        return float(rotary_embedding(q, [m], scaling=scaling) @ rotary_embedding(k, [n], scaling=scaling).T)

    assert score(40, 3) == pytest.approx(score(140, 103), abs=1e-10)
    assert score(40, 3) != pytest.approx(score(40, 4), abs=1e-3)


# ------------------------------------------------------------------------ the kernel and the model


@pytest.mark.parametrize("scaling", [None, {"rope_type": "linear", "factor": 2.0}, YARN_MINIMAL,
                                     {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4}])
@pytest.mark.parametrize("n_queries", [1, 6, 9])
def test_kernel_rotates_with_rope_angles_at_bottom_right_positions(scaling, n_queries):
    torch.manual_seed(0)
    n_keys = 6
    q = torch.randn(2, 4, n_queries, 8, dtype=F64)
    k, v = torch.randn(2, 2, n_keys, 8, dtype=F64), torch.randn(2, 2, n_keys, 8, dtype=F64)
    out, _ = RotaryKernel(explicit_kernel, scaling=scaling)(q, k, v, causal=True)
    q_pos = torch.arange(n_keys - n_queries, n_keys)
    cos, sin = rope_angles(torch.arange(min(0, n_keys - n_queries), n_keys), 8, scaling=scaling)
    expected, _ = explicit_kernel(cl.apply_rotary(q, cos[-n_queries:], sin[-n_queries:]),
                                  cl.apply_rotary(k, cos[-n_keys:], sin[-n_keys:]), v, causal=True)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    if scaling is None or scaling["rope_type"] != "dynamic":  # dynamic: the length is the keys', not the queries'
        by_hand, _ = explicit_kernel(rotary_embedding(q, q_pos, scaling=scaling), rotary_embedding(k, scaling=scaling),
                                     v, causal=True)
        torch.testing.assert_close(out, by_hand, rtol=0, atol=1e-12)


def test_apply_rotary_is_hugging_faces_apply_rotary_pos_emb():
    torch.manual_seed(0)
    q, k = torch.randn(2, 3, 10, 16, dtype=F64), torch.randn(2, 3, 10, 16, dtype=F64)
    cos, sin = rope_angles(torch.arange(10) + 5, 16, scaling=YARN_MINIMAL)
    q_hf, k_hf = apply_rotary_pos_emb(q, k, torch.cat([cos, cos], -1)[None], torch.cat([sin, sin], -1)[None])
    torch.testing.assert_close(cl.apply_rotary(q, cos, sin), q_hf, rtol=0, atol=1e-15)
    torch.testing.assert_close(cl.apply_rotary(k, cos, sin), k_hf, rtol=0, atol=1e-15)


@pytest.mark.parametrize("scaling", [{"rope_type": "linear", "factor": 4.0}, YARN_MINIMAL])
def test_scaled_kernel_with_a_kv_cache_equals_the_whole_sequence(scaling):
    torch.manual_seed(0)
    mha = cl.MultiHeadAttention(16, 4, num_kv_heads=2, kernel=RotaryKernel(scaling=scaling)).double().eval()
    x = torch.randn(2, 7, 16, dtype=F64)
    cache = cl.KVCache()
    steps = [mha(x[:, :3], x[:, :3], x[:, :3], causal=True, kv_cache=cache)]
    steps += [mha(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], causal=True, kv_cache=cache) for t in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, 1), mha(x, x, x, causal=True), rtol=0, atol=1e-12)


def test_decoder_lm_config_passes_its_scaling_to_the_rotary_embedding_and_keeps_a_copy():
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}
    config = DecoderLMConfig(vocab_size=10, num_hiddens=16, num_heads=2, rope_scaling=scaling, rope_base=500000.0)
    scaling["factor"] = 8.0  # the caller's dict changes; the config's does not
    assert config.rope_scaling["factor"] == 4.0
    model = cl.DecoderLM(config)
    assert all(block.attention.rotary.scaling == config.rope_scaling and block.attention.rotary.base == 500000.0
               for block in model.blocks)
    assert config == DecoderLMConfig(vocab_size=10, num_hiddens=16, num_heads=2, rope_base=500000.0,
                                     rope_scaling={**scaling, "factor": 4.0})


# ---------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("scaling, error, words", [
    ("linear", TypeError, "scaling must be None or a dict"),
    ({"factor": 2.0}, ValueError, "'rope_type'"),
    ({"type": "linear", "factor": 2.0}, ValueError, "older name 'type'"),
    ({"rope_type": "longrope", "factor": 2.0}, ValueError, r"scaling\['rope_type'\] must be one of"),
    ({"rope_type": "default"}, ValueError, r"scaling\['rope_type'\]"),
    ({"rope_type": ["linear"]}, ValueError, r"scaling\['rope_type'\]"),
    ({"rope_type": "linear"}, ValueError, r"needs \['factor'\]"),
    ({"rope_type": "linear", "factor": 0.5}, ValueError, r"scaling\['factor'\] must be at least 1"),
    ({"rope_type": "linear", "factor": "4"}, TypeError, r"scaling\['factor'\]"),
    ({"rope_type": "linear", "factor": float("nan")}, ValueError, r"scaling\['factor'\] must be finite"),
    ({"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5}, ValueError, r"scaling\['rope_theta'\]"),
    ({"rope_type": "linear", "factor": 2.0, "beta_fast": 32}, ValueError, "does not take: \\['beta_fast'\\]"),
    ({"rope_type": "dynamic", "factor": 2.0}, ValueError, "original_max_position_embeddings"),
    ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 0}, ValueError,
     r"scaling\['original_max_position_embeddings'\] must be a positive int"),
    ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64.0}, TypeError,
     r"scaling\['original_max_position_embeddings'\]"),
    ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64, "beta_fast": 1.0}, ValueError,
     r"scaling\['beta_fast'\] must be greater than scaling\['beta_slow'\]"),
    ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64, "truncate": 1}, TypeError,
     r"scaling\['truncate'\]"),
    ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64, "attention_factor": -1.0},
     ValueError, r"scaling\['attention_factor'\]"),
    ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 64, "low_freq_factor": 4.0,
      "high_freq_factor": 1.0}, ValueError, r"scaling\['high_freq_factor'\] must be greater"),
])
def test_a_malformed_scaling_is_refused_naming_the_field(scaling, error, words):
    for call in (lambda: rope_scaling_parameters(scaling), lambda: RotaryKernel(scaling=scaling),
                 lambda: rotary_embedding(torch.randn(2, 4), scaling=scaling),
                 lambda: rotary_frequencies(4, scaling=scaling), lambda: rope_angles([0], 4, scaling=scaling)):
        with pytest.raises(error, match=words):
            call()
    with pytest.raises(error, match=words.replace("scaling", "rope_scaling")):
        DecoderLMConfig(vocab_size=10, rope_scaling=scaling)


@pytest.mark.parametrize("call, error, words", [
    (lambda: DecoderLMConfig(vocab_size=10, positional="alibi", rope_scaling={"rope_type": "linear", "factor": 2.0}),
     ValueError, "rope_scaling scales rotary positions"),
    (lambda: rotary_frequencies(2, scaling={"rope_type": "ntk", "factor": 2.0}), ValueError, "head size above 2"),
    (lambda: rotary_frequencies(8, seq_len=1.5), TypeError, "seq_len"),
    (lambda: rotary_frequencies(8, seq_len=-1), ValueError, "seq_len"),
    (lambda: rope_angles([0.5], 8), TypeError, "positions"),
    (lambda: rope_angles([0], 7), ValueError, "head_size"),
    (lambda: rope_angles([0], 8, base=1.0), ValueError, "base"),
    (lambda: cl.apply_rotary(torch.randn(3, 8), *rope_angles([0, 1, 2], 6)), ValueError, "cos must have"),
    (lambda: cl.apply_rotary(torch.randn(3, 8), torch.ones(3, 4, dtype=torch.long), torch.ones(3, 4)),
     TypeError, "cos"),
])
def test_other_bad_input_is_refused_with_a_clear_message(call, error, words):
    with pytest.raises(error, match=words):
        call()
