"""Rotary position embedding: the paper's rotation matrices, the relative-position property, Hugging Face's Llama.

Hugging Face (transformers 5.24) computes the angles in float32: ``LlamaRotaryEmbedding`` stores
``inv_freq = 1 / base ** (arange(0, d, 2).float() / d)`` and forms ``position.float() * inv_freq`` in
float32 before the cosines and sines are cast to the input's dtype. course_lib forms them in float64.
Where the comparison uses Hugging Face's own cosines and sines, the tolerance is that of float32 angles.
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing downloads: every configuration below is built locally

import math  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from transformers import LlamaConfig  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb  # noqa: E402

import course_lib as cl  # noqa: E402
from course_lib import KVCache, MultiHeadAttention, RotaryKernel, explicit_kernel, rotary_embedding  # noqa: E402

F64 = torch.float64


def _paper_rotation(m: int, d: int, base: float) -> torch.Tensor:
    """Su et al. (2021), eq. (15): the block-diagonal rotation R_m, pair i = features (2i, 2i + 1)."""
    R = torch.zeros(d, d, dtype=F64)
    for i in range(d // 2):
        angle = m * base ** (-2 * i / d)
        R[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor([[math.cos(angle), -math.sin(angle)],
                                                            [math.sin(angle), math.cos(angle)]], dtype=F64)
    return R


@pytest.mark.parametrize("d", [2, 4, 8])
def test_interleaved_layout_is_the_papers_block_diagonal_rotation(d):
    torch.manual_seed(0)
    positions = [0, 1, 5, 37, 1000]
    x = torch.randn(len(positions), d, dtype=F64)
    expected = torch.stack([_paper_rotation(m, d, 100.0) @ x[t] for t, m in enumerate(positions)])
    got = rotary_embedding(x, positions, base=100.0, interleaved=True)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


@given(d=st.integers(1, 16).map(lambda h: 2 * h), m=st.integers(0, 4096), n=st.integers(0, 4096),
       shift=st.integers(-4096, 4096), interleaved=st.booleans(), seed=st.integers(0, 2**16))
def test_score_depends_only_on_the_offset(d, m, n, shift, interleaved, seed):
    """q_m . k_n = q_{m+s} . k_{n+s} for every shift s (float64, random vectors and positions)."""
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(1, d, dtype=F64, generator=g), torch.randn(1, d, dtype=F64, generator=g)

    def score(a, b):
        return float(rotary_embedding(q, [a], interleaved=interleaved) @ rotary_embedding(k, [b],
                                                                                        interleaved=interleaved).T)

    # the closed form: q^T R_{n-m} k, which depends on n - m only (the paper's R_m^T R_n = R_{n-m})
    relative = float(q @ rotary_embedding(k, [n - m], interleaved=interleaved).T)
    assert score(m, n) == pytest.approx(score(m + shift, n + shift), abs=1e-10)
    assert score(m, n) == pytest.approx(relative, abs=1e-10)


def test_score_changes_with_the_offset():
    """The property is not met trivially: another offset gives another score."""
    torch.manual_seed(0)
    q, k = torch.randn(1, 8, dtype=F64), torch.randn(1, 8, dtype=F64)
    scores = [float(rotary_embedding(q, [m]) @ rotary_embedding(k, [0]).T) for m in range(4)]
    assert len({round(s, 6) for s in scores}) == 4


def test_rotation_preserves_norms_and_leaves_position_zero_unchanged():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 16, dtype=F64)
    y = rotary_embedding(x)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1), rtol=0, atol=1e-12)
    torch.testing.assert_close(y[..., 0, :], x[..., 0, :], rtol=0, atol=0)


def test_layouts_differ_by_the_rotary_permutation():
    torch.manual_seed(0)
    d = 12
    perm = cl.rotary_permutation(d)
    assert perm.tolist() == [0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11]
    x = torch.randn(2, 9, d, dtype=F64)
    positions = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6, 5])
    interleaved = rotary_embedding(x, positions, interleaved=True)
    torch.testing.assert_close(rotary_embedding(x[..., perm], positions), interleaved[..., perm], rtol=0, atol=1e-12)
    back = perm.argsort()
    torch.testing.assert_close(rotary_embedding(x[..., back], positions, interleaved=True),
                               rotary_embedding(x, positions)[..., back], rtol=0, atol=1e-12)
    assert not torch.allclose(interleaved, rotary_embedding(x, positions))  # the layouts do differ


def test_permutation_is_hugging_faces_checkpoint_conversion():
    """convert_llama_weights_to_hf.py turns Meta's (interleaved) W_q into Hugging Face's (rotate-half) with
    ``w.view(n_heads, d_h // 2, 2, d).transpose(1, 2).reshape(d, d)``: the rows of each head permuted."""
    torch.manual_seed(0)
    heads, d_h, d = 3, 8, 24
    meta = torch.randn(heads * d_h, d)
    hf = meta.view(heads, d_h // 2, 2, d).transpose(1, 2).reshape(heads * d_h, d)
    torch.testing.assert_close(hf, meta.view(heads, d_h, d)[:, cl.rotary_permutation(d_h)].reshape(heads * d_h, d))


def _hf_config(d_h: int, base: float) -> LlamaConfig:
    return LlamaConfig(vocab_size=8, hidden_size=2 * d_h, intermediate_size=8, num_hidden_layers=1,
                       num_attention_heads=2, rope_parameters={"rope_type": "default", "rope_theta": base})


@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_frequencies_equal_hugging_faces_inv_freq(base):
    hf = LlamaRotaryEmbedding(_hf_config(16, base))
    assert hf.inv_freq.dtype == torch.float32  # Hugging Face's float32 frequencies, the reason for the tolerances
    torch.testing.assert_close(hf.inv_freq.double(), cl.rotary_frequencies(16, base), rtol=2e-7, atol=0)


def test_equals_hugging_face_apply_rotary_pos_emb_with_the_same_angles():
    """The rotate-half layout, to float64 precision: HF's formula fed with float64 cosines and sines."""
    torch.manual_seed(0)
    B, H, T, d_h = 2, 3, 10, 16
    q, k = torch.randn(B, H, T, d_h, dtype=F64), torch.randn(B, H, T, d_h, dtype=F64)
    position_ids = torch.stack([torch.arange(T), torch.arange(T) + 1000])  # (B, T), one row per sequence
    angles = position_ids[..., None].double() * cl.rotary_frequencies(d_h)  # (B, T, d_h / 2)
    emb = torch.cat((angles, angles), dim=-1)
    q_hf, k_hf = apply_rotary_pos_emb(q, k, emb.cos(), emb.sin())
    positions = position_ids[:, None, :]  # (B, 1, T): broadcast over the heads
    torch.testing.assert_close(rotary_embedding(q, positions), q_hf, rtol=0, atol=1e-12)
    torch.testing.assert_close(rotary_embedding(k, positions), k_hf, rtol=0, atol=1e-12)


def test_equals_hugging_face_llama_rotary_embedding_to_float32_angle_precision():
    """HF's whole path, LlamaRotaryEmbedding's float32 angles included: they differ from float64 angles by at
    most about position x 2^-23 radians (measured here: 5e-5 at positions 985 to 1000 with |x| <= 4, under
    the bound of 8e-4)."""
    torch.manual_seed(0)
    B, H, T, d_h = 1, 2, 16, 32
    q, k = torch.randn(B, H, T, d_h, dtype=F64), torch.randn(B, H, T, d_h, dtype=F64)
    position_ids = (torch.arange(T) + 985)[None]  # positions 985 .. 1000
    cos, sin = LlamaRotaryEmbedding(_hf_config(d_h, 10000.0))(q, position_ids)
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos, sin)
    bound = 1000 * 2.0**-23 * 2 * max(q.abs().max(), k.abs().max())  # |Δangle| x (|x_a| + |x_b|)
    assert (rotary_embedding(q, position_ids) - q_hf).abs().max() < bound
    assert (rotary_embedding(k, position_ids) - k_hf).abs().max() < bound
    assert (rotary_embedding(q, position_ids) - q_hf).abs().max() > 1e-9  # the float32 angles are visible


def test_rotary_embedding_has_the_gradient_of_a_rotation():
    x = torch.randn(1, 3, 4, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: rotary_embedding(t, [2, 7, 11]), (x,))


def test_rotary_embedding_in_training_turns_and_turns_the_gradient_back():
    """RotaryEmbedding under autograd (its own backward: the rotation back) on strided heads, as attention gives
    them: forward and gradient equal to autograd's through :func:`rotary_embedding`, and gradcheck."""
    torch.manual_seed(0)
    rope = cl.RotaryEmbedding(8, base=500.0)
    x = torch.randn(2, 5, 24, dtype=F64)[..., 4:20].view(2, 5, 2, 8).transpose(1, 2).requires_grad_()
    upstream = torch.randn(2, 2, 5, 8, dtype=F64)
    ours = rope(x, start=3)
    theirs = rotary_embedding(x, positions=[3, 4, 5, 6, 7], base=500.0)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)
    (g_ours,), (g_theirs,) = torch.autograd.grad(ours, x, upstream), torch.autograd.grad(theirs, x, upstream)
    torch.testing.assert_close(g_ours, g_theirs, rtol=0, atol=1e-12)
    assert torch.autograd.gradcheck(lambda t: rope(t, start=3), (x,))


@pytest.mark.parametrize("n_queries, interleaved", [(1, False), (3, False), (5, False), (3, True)])
def test_kernel_rotates_queries_and_keys_at_bottom_right_positions(n_queries, interleaved):
    torch.manual_seed(0)
    n_keys, base = 5, 100.0
    q = torch.randn(2, 4, n_queries, 8, dtype=F64)
    k, v = torch.randn(2, 2, n_keys, 8, dtype=F64), torch.randn(2, 2, n_keys, 6, dtype=F64)
    kernel = RotaryKernel(explicit_kernel, base=base, interleaved=interleaved)
    out, weights = kernel(q, k, v, causal=True, need_weights=True)
    q_pos = list(range(n_keys - n_queries, n_keys))
    expected, expected_weights = explicit_kernel(rotary_embedding(q, q_pos, base=base, interleaved=interleaved),
                                                 rotary_embedding(k, base=base, interleaved=interleaved), v,
                                                 causal=True)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(weights, expected_weights, rtol=0, atol=1e-12)
    fused, _ = RotaryKernel(base=base, interleaved=interleaved)(q, k, v, causal=True)
    torch.testing.assert_close(fused, expected, rtol=0, atol=1e-12)


def test_kernel_with_a_kv_cache_equals_attention_over_the_whole_sequence():
    """The cache keeps unrotated keys; the kernel rotates them at each step (float64)."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, num_kv_heads=2, kernel=RotaryKernel()).double().eval()
    x = torch.randn(2, 7, 16, dtype=F64)
    full = mha(x, x, x, causal=True)
    cache = KVCache()
    steps = [mha(x[:, :3], x[:, :3], x[:, :3], causal=True, kv_cache=cache)]
    steps += [mha(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], causal=True, kv_cache=cache) for t in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-12)
    plain = MultiHeadAttention(16, 4, num_kv_heads=2).double().eval()
    plain.load_state_dict(mha.state_dict())
    assert not torch.allclose(plain(x, x, x, causal=True), full)  # the rotation does act


def test_masked_left_padding_does_not_change_rotary_attention():
    """Only differences of positions matter: shifting a sequence right by masked padding changes nothing."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2, kernel=RotaryKernel()).double().eval()
    x = torch.randn(1, 5, 16, dtype=F64)
    padded = torch.cat([torch.randn(1, 3, 16, dtype=F64), x], dim=1)
    keep = (torch.arange(8) >= 3).view(1, 1, 8)  # (B, 1, n_keys): the three padding keys are masked
    torch.testing.assert_close(mha(padded, padded, padded, keep, causal=True)[:, 3:], mha(x, x, x, causal=True),
                               rtol=0, atol=1e-12)


def test_kernel_describes_itself():
    assert repr(RotaryKernel(base=500000.0, interleaved=True)) == \
        "RotaryKernel(fused_kernel, base=500000, interleaved=True)"
    assert "RotaryKernel(explicit_kernel" in repr(MultiHeadAttention(8, 2, kernel=RotaryKernel(explicit_kernel)))


@pytest.mark.parametrize("call, error, words", [
    (lambda: rotary_embedding(torch.randn(2, 5)), ValueError, "even"),
    (lambda: rotary_embedding(torch.randn(4)), ValueError, "(..., T, d_h)"),
    (lambda: rotary_embedding(torch.arange(8).view(2, 4)), TypeError, "floating"),
    (lambda: rotary_embedding(torch.randn(2, 4), torch.tensor([0.0, 1.5])), TypeError, "positions"),
    (lambda: rotary_embedding(torch.randn(2, 4), torch.tensor([True, False])), TypeError, "positions"),
    (lambda: rotary_embedding(torch.randn(2, 4), [0, 1, 2]), ValueError, "positions"),
    (lambda: rotary_embedding(torch.randn(3, 2, 4), torch.zeros(2, 2, dtype=torch.long)), ValueError, "positions"),
    (lambda: rotary_embedding(torch.randn(2, 4), base=1.0), ValueError, "base"),
    (lambda: rotary_embedding(torch.randn(2, 4), base="10"), TypeError, "base"),
    (lambda: rotary_embedding(torch.randn(2, 4), interleaved=1), TypeError, "interleaved"),
    (lambda: cl.rotary_permutation(5), ValueError, "even"),
    (lambda: cl.rotary_frequencies(0), ValueError, "head_size"),
    (lambda: RotaryKernel(inner=print), TypeError, "AttentionKernel"),
    (lambda: RotaryKernel(inner="fused"), TypeError, "AttentionKernel"),
    (lambda: cl.attention_kernel("rotary", inner="fuse"), ValueError, "kernel must be one of"),
    (lambda: RotaryKernel(base=0.5), ValueError, "base"),
    (lambda: RotaryKernel()(*(torch.randn(1, 1, 2, 3),) * 3), ValueError, "even head size"),
    (lambda: MultiHeadAttention(12, 4, kernel=RotaryKernel())(*(torch.randn(1, 2, 12),) * 3), ValueError, "even"),
])
def test_bad_input_is_refused_with_a_clear_message(call, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        call()


# --- rotated once, before the cache ----------------------------------------------------------------------


def test_rotating_before_the_cache_equals_rotating_in_the_kernel_and_caches_rotated_keys():
    torch.manual_seed(11)
    in_kernel = MultiHeadAttention(16, 4, num_kv_heads=2, kernel=RotaryKernel()).double().eval()
    before = MultiHeadAttention(16, 4, num_kv_heads=2, rotary=cl.RotaryEmbedding(4)).double().eval()
    before.load_state_dict(in_kernel.state_dict())
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    full = in_kernel(x, x, x, causal=True)
    cache = cl.KVCache()
    steps = [before(x[:, :4], x[:, :4], x[:, :4], causal=True, kv_cache=cache)]
    steps += [before(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], causal=True, kv_cache=cache) for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-12)
    torch.testing.assert_close(before(x, x, x, causal=True), full, rtol=0, atol=1e-12)
    keys = before.W_k(x).view(2, 9, 2, 4).transpose(1, 2)  # (B, H_kv, T, d_h), unrotated
    torch.testing.assert_close(cache.keys, rotary_embedding(keys), rtol=0, atol=1e-12)  # cached rotated


@pytest.mark.parametrize("start", [0, 3, 70, 200])
def test_the_rotary_table_gives_the_rotation_at_any_position(start):
    rope = cl.RotaryEmbedding(8, base=500.0)
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    expected = rotary_embedding(x, positions=torch.arange(start, start + 5), base=500.0)
    torch.testing.assert_close(rope(x, start), expected, rtol=0, atol=1e-12)
    assert rope.table(1, x.device, x.dtype)[0].shape[0] >= start + 5  # the table grew to cover it


def test_a_decoder_rotating_before_the_cache_equals_one_rotating_in_the_kernel():
    base = dict(vocab_size=40, num_hiddens=16, num_heads=4, num_kv_heads=2, num_layers=2)
    cl.set_seed(12)
    engine = cl.DecoderLM(cl.DecoderLMConfig(**base)).double().eval()
    kernel = cl.DecoderLM(cl.DecoderLMConfig(**base, positional="none", kernel="rotary")).double().eval()
    kernel.load_state_dict(engine.state_dict())
    tokens = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(12))
    torch.testing.assert_close(engine(tokens), kernel(tokens), rtol=0, atol=1e-12)
    assert torch.equal(engine.generate(tokens[:, :5], 7, temperature=0.0), kernel.generate(tokens[:, :5], 7,
                                                                                          temperature=0.0))
