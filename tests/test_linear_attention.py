"""Linear attention: its three modes, the causal recurrence, the Nadaraya-Watson form and the kernel.

References: a brute-force loop over queries and keys, chapter 2's ``nadaraya_watson`` (Gaussian kernel),
``scaled_dot_product_attention`` (the exponential kernel), autograd and ``gradcheck``.
"""

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import course_lib as cl


def _randn(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _elu_plus_one(x):
    return torch.where(x > 0, x + 1, torch.exp(x))  # elu(x) + 1, written out


def _brute_force(q, k, v, causal, feature_map=_elu_plus_one, keep_key=None):
    """Loop over every query and key: sum_j phi(q_i).phi(k_j) v_j / sum_j phi(q_i).phi(k_j) (0 for no key)."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    for index in itertools.product(*(range(s) for s in q.shape[:-2])):
        for i in range(n_q):
            num, den = 0, 0
            for j in range(n_k):
                if causal and j > i + n_k - n_q or keep_key is not None and not keep_key[(*index, j)]:
                    continue
                w = (feature_map(q[(*index, i)]) * feature_map(k[(*index, j)])).sum()
                num, den = num + w * v[(*index, j)], den + w
            out[(*index, i)] = num / den if den else 0
    return out


@settings(max_examples=40, deadline=None)
@given(shape=st.tuples(st.integers(1, 2), st.sampled_from([(1, 1), (2, 1), (4, 2)]), st.integers(0, 9),
                       st.integers(0, 9), st.integers(1, 4), st.integers(1, 3)),
       causal=st.booleans(), chunk=st.integers(1, 5), masked=st.booleans(), seed=st.integers(0, 2**20))
def test_parallel_recurrent_and_chunked_modes_agree_and_equal_a_loop(shape, causal, chunk, masked, seed):
    B, (H, H_kv), n_q, n_k, d, d_v = shape
    q, k, v = _randn(B, H, n_q, d, seed=seed), _randn(B, H_kv, n_k, d, seed=seed + 1), \
        _randn(B, H_kv, n_k, d_v, seed=seed + 2)
    lens = torch.randint(0, n_k + 1, (B,), generator=torch.Generator().manual_seed(seed))
    mask = cl.padding_mask(lens, n_k).unsqueeze(1) if masked else None  # (B, 1, 1, n_k)
    outs = {mode: cl.linear_attention(q, k, v, mask, causal=causal, mode=mode, chunk_size=chunk)
            for mode in cl.LINEAR_ATTENTION_MODES}
    group = H // H_kv
    keep_key = None if mask is None else mask[:, :, 0].expand(B, H, n_k)
    expected = _brute_force(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), causal,
                            keep_key=keep_key)
    for out in outs.values():
        assert out.shape == (B, H, n_q, d_v)
        torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-12)


def test_modes_agree_to_1e_6_in_float32_in_values_and_gradients():
    q, k, v = (_randn(2, 3, 70, 16, seed=s, dtype=torch.float32).requires_grad_() for s in (1, 2, 3))
    for causal in (False, True):
        outs = {mode: cl.linear_attention(q, k, v, causal=causal, mode=mode, chunk_size=16)
                for mode in cl.LINEAR_ATTENTION_MODES}
        grads = {m: torch.autograd.grad(o.sin().sum(), (q, k, v)) for m, o in outs.items()}
        for mode in ("recurrent", "chunked"):
            assert (outs[mode] - outs["parallel"]).abs().max() <= 1e-6
            for got, want in zip(grads[mode], grads["parallel"], strict=True):
                assert (got - want).abs().max() <= 1e-5


@pytest.mark.parametrize("mode", cl.LINEAR_ATTENTION_MODES)
def test_gradcheck(mode):
    q, k, v = (_randn(1, 2, 5, 3, seed=s).requires_grad_() for s in (4, 5, 6))
    mask = cl.padding_mask(torch.tensor([4]), 5).unsqueeze(1)
    assert torch.autograd.gradcheck(
        lambda q, k, v: cl.linear_attention(q, k, v, mask, causal=True, mode=mode, chunk_size=2), (q, k, v))


def test_linear_attention_is_nadaraya_watson_with_the_feature_map_kernel():
    q, k, v = _randn(2, 7, 4, seed=7), _randn(2, 9, 4, seed=8), _randn(2, 9, 3, seed=9)
    for causal in (False, True):
        out, weights = cl.nadaraya_watson_attention(q, k, v, cl.feature_map_kernel(), causal=causal)
        torch.testing.assert_close(cl.linear_attention(q, k, v, causal=causal), out, atol=1e-12, rtol=0)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 7, dtype=torch.float64))
    # A custom feature map with more features than inputs (d_phi = 2 d).
    phi = lambda x: torch.cat([torch.relu(x), torch.relu(-x)], -1) + 0.1  # noqa: E731
    out, _ = cl.nadaraya_watson_attention(q, k, v, cl.feature_map_kernel(phi))
    for mode in cl.LINEAR_ATTENTION_MODES:
        torch.testing.assert_close(cl.linear_attention(q, k, v, feature_map=phi, mode=mode, chunk_size=4), out)


def test_the_nadaraya_watson_form_with_softmax_and_gaussian_kernels_is_softmax_attention_and_chapter_2():
    q, k, v = _randn(2, 6, 4, seed=10), _randn(2, 8, 4, seed=11), _randn(2, 8, 5, seed=12)
    out, _ = cl.nadaraya_watson_attention(q, k, v, lambda q, k: torch.exp(q @ k.transpose(-2, -1) / 2))
    torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, k, v))
    x_train, y_train, x_query = _randn(20, seed=13), _randn(20, seed=14), _randn(6, seed=15)
    h = 0.7
    gaussian = lambda a, b: torch.exp(-((a - b.transpose(-2, -1)) / h) ** 2 / 2)  # noqa: E731
    out, weights = cl.nadaraya_watson_attention(x_query[:, None], x_train[:, None], y_train[:, None], gaussian)
    y_hat, expected_weights = cl.nadaraya_watson(x_train, y_train, x_query, "gaussian", bandwidth=h)
    torch.testing.assert_close(out[:, 0], y_hat)
    torch.testing.assert_close(weights, expected_weights)


def test_the_causal_recurrence_is_an_rnn_with_a_state_of_fixed_size():
    q, k, v = _randn(2, 11, 4, seed=16), _randn(2, 11, 4, seed=17), _randn(2, 11, 3, seed=18)
    state, outs = None, []
    for t in range(11):
        out, state = cl.linear_attention_step(q[:, t], k[:, t], v[:, t], state)
        assert state.S.shape == (2, 4, 3) and state.z.shape == (2, 4)
        outs.append(out)
    torch.testing.assert_close(torch.stack(outs, 1), _brute_force(q, k, v, causal=True), atol=1e-12, rtol=0)
    phi_k = _elu_plus_one(k)
    torch.testing.assert_close(state.S, phi_k.transpose(-2, -1) @ v)
    torch.testing.assert_close(state.z, phi_k.sum(1))


def test_linear_kernel_in_multihead_attention():
    torch.manual_seed(0)
    mha = cl.MultiHeadAttention(16, 4, num_kv_heads=2, kernel=cl.LinearKernel(mode="chunked", chunk_size=3))
    x = torch.randn(3, 8, 16)
    lens = torch.tensor([8, 5, 2])
    y = mha(x, x, x, cl.padding_mask(lens, 8), causal=True)
    for b, n in enumerate(lens.tolist()):  # padded keys change nothing: as if the sequence were cut
        torch.testing.assert_close(y[b, :n], mha(x[b:b + 1, :n], x[b:b + 1, :n], x[b:b + 1, :n], causal=True)[0],
                                   atol=1e-6, rtol=0)
    q = mha.W_q(x).view(3, 8, 4, 4).transpose(1, 2)
    k = mha.W_k(x).view(3, 8, 2, 4).transpose(1, 2).repeat_interleave(2, 1)
    v = mha.W_v(x).view(3, 8, 2, 4).transpose(1, 2).repeat_interleave(2, 1)
    heads = _brute_force(q.detach(), k.detach(), v.detach(), causal=True)
    torch.testing.assert_close(mha(x, x, x, causal=True), mha.W_o(heads.transpose(1, 2).reshape(3, 8, 16).float()),
                               atol=1e-5, rtol=0)
    with cl.recording_attention(mha):
        recorded = mha(x, x, x, causal=True)
    torch.testing.assert_close(recorded, mha(x, x, x, causal=True), atol=1e-6, rtol=0)
    assert mha.attention_weights.shape == (3, 4, 8, 8)
    assert torch.equal(mha.attention_weights > 0, cl.causal_mask(8).expand(3, 4, 8, 8))


def test_linear_kernel_refuses_what_it_cannot_honour():
    x = torch.randn(2, 5, 8)
    mha = cl.MultiHeadAttention(8, 2, kernel=cl.LinearKernel())
    with pytest.raises(ValueError, match="key"):
        mha(x, x, x, cl.causal_mask(5))  # a mask with a query axis
    with pytest.raises(ValueError, match="dropout_p"):
        cl.MultiHeadAttention(8, 2, dropout=0.1, kernel=cl.LinearKernel())(x, x, x)
    q = torch.randn(1, 1, 3, 4)
    with pytest.raises(ValueError, match="scale"):
        cl.LinearKernel()(q, q, q, scale=0.5)


def test_bad_arguments_are_refused_with_their_names():
    q = torch.randn(1, 3, 4)
    with pytest.raises(ValueError, match="mode"):
        cl.linear_attention(q, q, q, mode="fast")
    with pytest.raises(ValueError, match="mode"):
        cl.LinearKernel(mode="fast")
    with pytest.raises(ValueError, match="chunk_size"):
        cl.linear_attention(q, q, q, mode="chunked", chunk_size=0)
    with pytest.raises(TypeError, match="feature_map"):
        cl.linear_attention(q, q, q, feature_map="elu")
    with pytest.raises(TypeError, match="mask"):
        cl.linear_attention(q, q, q, torch.ones(1, 1, 3))
    with pytest.raises(ValueError, match="key"):
        cl.linear_attention(q, q, q, torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="heads"):
        cl.linear_attention(torch.randn(1, 4, 3, 4), torch.randn(1, 3, 3, 4), torch.randn(1, 3, 3, 4))
    with pytest.raises(TypeError, match="similarity"):
        cl.nadaraya_watson_attention(q, q, q, "gaussian")


def test_causal_linear_attention_memory_grows_linearly():
    """The O(n) claim as memory: the chunked form never forms an (n, n) tensor."""
    def peak_at(n):
        q, k, v = (_randn(1, n, 8, seed=s, dtype=torch.float32) for s in (19, 20, 21))
        with torch.no_grad():
            return cl.peak_memory(lambda: cl.linear_attention(q, k, v, causal=True, mode="chunked", chunk_size=32))

    peaks = {n: peak_at(n) for n in (256, 512)}
    assert peaks[512] / peaks[256] < 2.5
    assert peaks[512] < 512 * 512 * 4 / 4  # far below one (n, n) float32 matrix
