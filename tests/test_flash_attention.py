"""FlashAttention in plain PyTorch: the tiled forward pass, the recomputing backward pass, the tile plan and the kernel.

References: ``torch.nn.functional.scaled_dot_product_attention`` (outputs and gradients), ``torch.logsumexp``
and ``flex_attention`` (the log-sum-exp), ``torch.autograd.gradcheck``, ``torch.utils.flop_counter`` (the
tiles actually computed), ``MaskMod.blocks`` and brute force over the keep-mask (the plan), ``torch.softmax``
(the online softmax), the default ``MultiHeadAttention`` (the kernel).
"""

import math
import warnings
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

import course_lib as cl
from course_lib.attention.masks import keep_mask


def _randn(*shape, seed=0, dtype=torch.float64, requires_grad=False):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    return x.requires_grad_(requires_grad)


def _inputs(B, H, H_kv, n_q, n_k, d, d_v, seed, dtype=torch.float64):
    return (_randn(B, H, n_q, d, seed=seed, dtype=dtype, requires_grad=True),
            _randn(B, H_kv, n_k, d, seed=seed + 1, dtype=dtype, requires_grad=True),
            _randn(B, H_kv, n_k, d_v, seed=seed + 2, dtype=dtype, requires_grad=True))


def _mask(kind, B, H, n_q, n_k, seed):
    gen = torch.Generator().manual_seed(seed)
    if kind == "padding":  # (B, 1, 1, n_k): some rows may keep no key at all
        return cl.padding_mask(torch.randint(0, n_k + 1, (B,), generator=gen), n_k).unsqueeze(1)
    if kind == "random":  # per head and query
        return torch.rand(B, H, n_q, n_k, generator=gen) > 0.4
    return None


def _sdpa(q, k, v, mask, causal):
    """SDPA with the key/value heads repeated by hand, bottom-right causal as a mask, empty rows set to 0."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    keep = keep_mask(mask, causal, q.shape[-2], k.shape[-2])
    if keep is None:
        return F.scaled_dot_product_attention(q, k, v)
    row_ok = keep.any(-1, keepdim=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep | ~row_ok) * row_ok


def _lse(q, k, mask, causal):
    """log sum_j exp(q.k_j / sqrt d) over the kept keys (-inf for none), from the whole score matrix."""
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    keep = keep_mask(mask, causal, q.shape[-2], k.shape[-2])
    return (scores if keep is None else scores.masked_fill(~keep, -math.inf)).logsumexp(-1)


shapes = st.tuples(st.integers(1, 2), st.sampled_from([(1, 1), (2, 1), (4, 2), (3, 3)]), st.integers(1, 9),
                   st.integers(1, 9), st.integers(1, 5), st.integers(1, 4))


@settings(max_examples=40, deadline=None)
@given(shape=shapes, blocks=st.tuples(st.integers(1, 5), st.integers(1, 5)), causal=st.booleans(),
       kind=st.sampled_from([None, "padding", "random"]), seed=st.integers(0, 2**20))
def test_flash_equals_sdpa_in_values_lse_and_gradients(shape, blocks, causal, kind, seed):
    B, (H, H_kv), n_q, n_k, d, d_v = shape
    q, k, v = _inputs(B, H, H_kv, n_q, n_k, d, d_v, seed)
    mask = _mask(kind, B, H, n_q, n_k, seed)
    out, lse = cl.flash_attention(q, k, v, mask, causal=causal, block_q=blocks[0], block_k=blocks[1],
                                  return_lse=True)
    expected = _sdpa(q, k, v, mask, causal)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(lse, _lse(q, k, mask, causal).detach(), atol=1e-12, rtol=0)
    d_out = _randn(*out.shape, seed=seed + 3)
    grads = torch.autograd.grad(out, (q, k, v), d_out)
    expected_grads = torch.autograd.grad(expected, (q, k, v), d_out)
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0)


def test_flash_equals_sdpa_in_float32_to_1e_6():
    q, k, v = _inputs(2, 4, 2, 67, 83, 16, 16, seed=1, dtype=torch.float32)
    mask = _mask("padding", 2, 4, 67, 83, seed=1)
    for causal in (False, True):
        out = cl.flash_attention(q, k, v, mask, causal=causal, block_q=16, block_k=24)
        expected = _sdpa(q, k, v, mask, causal)
        assert (out - expected).abs().max() <= 1e-6
        d_out = _randn(*out.shape, seed=2, dtype=torch.float32)
        for got, want in zip(torch.autograd.grad(out, (q, k, v), d_out),
                             torch.autograd.grad(expected, (q, k, v), d_out), strict=True):
            assert (got - want).abs().max() <= 1e-5 * max(1.0, want.abs().max().item())


@pytest.mark.parametrize("causal, kind, heads", [(False, None, (1, 1)), (True, "padding", (4, 2)),
                                                 (True, "random", (2, 1))])
def test_gradcheck_of_output_and_lse(causal, kind, heads):
    q, k, v = _inputs(2, heads[0], heads[1], 5, 7, 3, 2, seed=4)
    mask = _mask(kind, 2, heads[0], 5, 7, seed=5)
    if mask is not None:  # the lse of a query with no key is -inf, where finite differences mean nothing
        mask = mask.clone()
        mask[..., -1] = True

    def f(q, k, v):
        return cl.flash_attention(q, k, v, mask, causal=causal, block_q=2, block_k=3, return_lse=True)

    assert torch.autograd.gradcheck(f, (q, k, v))


def test_a_query_with_no_key_outputs_zero_with_lse_minus_inf_and_zero_gradient():
    q, k, v = _inputs(1, 2, 2, 4, 6, 3, 3, seed=6)
    mask = torch.ones(1, 1, 4, 6, dtype=torch.bool)
    mask[..., 1, :] = False  # query 1 sees nothing
    out, lse = cl.flash_attention(q, k, v, mask, block_q=3, block_k=4, return_lse=True)
    assert torch.equal(out[:, :, 1], torch.zeros_like(out[:, :, 1]))
    assert torch.isneginf(lse[:, :, 1]).all() and torch.isfinite(lse[:, :, [0, 2, 3]]).all()
    (out.sum() + lse[:, :, [0, 2, 3]].sum()).backward()
    assert torch.equal(q.grad[:, :, 1], torch.zeros_like(q.grad[:, :, 1]))
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    # More queries than keys with causal: the first ones sit before every key.
    out, lse = cl.flash_attention(q[:, :, :4], k[:, :, :2], v[:, :, :2], causal=True, block_q=3, return_lse=True)
    assert torch.equal(out[:, :, :2], torch.zeros_like(out[:, :, :2])) and torch.isneginf(lse[:, :, :2]).all()


def test_lse_equals_flex_attention_including_empty_rows():
    from torch.nn.attention import flex_attention as flex

    q, k, v = (t.detach() for t in _inputs(1, 2, 2, 12, 12, 4, 4, seed=7))
    rule = cl.causal_mod() & cl.MaskMod(lambda b, h, q_pos, kv_pos: q_pos >= 3, "from position 3")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()": eager is the point
        block_mask = flex.create_block_mask(rule.flex(12, 12), 1, 2, 12, 12, device="cpu")
        if hasattr(flex, "AuxRequest"):  # torch's newer spelling of the request
            expected, aux = flex.flex_attention(q, k, v, block_mask=block_mask, return_aux=flex.AuxRequest(lse=True))
            expected_lse = aux.lse
        else:  # torch 2.5, the lowest version course_lib supports (make lower-bounds)
            expected, expected_lse = flex.flex_attention(q, k, v, block_mask=block_mask, return_lse=True)
    out, lse = cl.flash_attention(q, k, v, rule.materialize(12), block_q=5, block_k=4, return_lse=True)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(lse, expected_lse, atol=1e-12, rtol=0)  # -inf where flex_attention has -inf
    assert torch.isneginf(lse[..., :3]).all()


def test_only_inputs_output_and_lse_are_saved_for_backward():
    q, k, v = _inputs(1, 2, 2, 40, 40, 4, 4, seed=8)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        out = cl.flash_attention(q, k, v, causal=True, block_q=8, block_k=8)
    assert set(saved) <= {tuple(q.shape), tuple(k.shape), tuple(v.shape), tuple(out.shape), (1, 2, 40)}
    assert all(math.prod(s) < 40 * 40 for s in saved)  # no (n_q, n_k) tensor
    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        cl.explicit_kernel(q, k, v, causal=True)
    assert (1, 2, 40, 40) in saved  # the explicit kernel keeps the weights: what flash avoids


def _tiles_by_brute_force(keep, block_q, block_k):
    """(rows, cols) of every tile holding a kept pair, from the whole keep-mask."""
    n_q, n_k = keep.shape[-2:]
    keep = keep.reshape(-1, n_q, n_k).any(0)
    return [(i, j) for i in range(math.ceil(n_q / block_q)) for j in range(math.ceil(n_k / block_k))
            if keep[i * block_q:(i + 1) * block_q, j * block_k:(j + 1) * block_k].any()]


@pytest.mark.parametrize("n_q, n_k, block_q, block_k, kind", [(16, 16, 4, 4, None), (10, 17, 3, 5, None),
                                                              (12, 12, 5, 3, "band"), (9, 14, 4, 4, "padding")])
def test_tiles_are_skipped_where_nothing_is_kept(n_q, n_k, block_q, block_k, kind):
    d, d_v = 3, 2
    q, k, v = _inputs(2, 2, 2, n_q, n_k, d, d_v, seed=9)
    mask = {"band": cl.sliding_window_mod(4).materialize(n_q, n_k),
            "padding": cl.padding_mask(torch.tensor([5, 9]), n_k).unsqueeze(1)}.get(kind)
    keep = keep_mask(mask, True, n_q, n_k).expand(2, 2, n_q, n_k)
    tiles = _tiles_by_brute_force(keep, block_q, block_k)
    assert len(tiles) < math.ceil(n_q / block_q) * math.ceil(n_k / block_k)  # some tiles are skipped
    rows = {i: min(block_q, n_q - i * block_q) for i in range(n_q)}
    cols = {j: min(block_k, n_k - j * block_k) for j in range(n_k)}
    # Each computed tile costs two matrix products, S = Q_i K_j^T and P V_j: 2 rows cols (d + d_v) per head.
    expected = sum(2 * rows[i] * cols[j] * (d + d_v) for i, j in tiles) * 2 * 2
    with FlopCounterMode(display=False) as counter:
        out = cl.flash_attention(q, k, v, mask, causal=True, block_q=block_q, block_k=block_k)
    assert counter.get_total_flops() == expected
    # The backward pass recomputes the same tiles: S, dV += P^T dO, dP = dO V^T, dQ += dS K, dK += dS^T Q.
    with FlopCounterMode(display=False) as counter:
        out.sum().backward()
    assert counter.get_total_flops() == sum(2 * rows[i] * cols[j] * (3 * d + 2 * d_v) for i, j in tiles) * 2 * 2
    states = cl.flash_tile_map(n_q, n_k, block_q, block_k, mask, causal=True)
    assert sorted(map(tuple, (states > 0).nonzero().tolist())) == tiles
    io = cl.flash_io(n_q, n_k, d, block_q, block_k, mask, causal=True, d_v=d_v)
    assert io.tiles == len(tiles) and io.k_reads == sum(cols[j] for _, j in tiles) * d


@settings(max_examples=30, deadline=None)
@given(n=st.tuples(st.integers(0, 13), st.integers(0, 13)), blocks=st.tuples(st.integers(1, 5), st.integers(1, 5)),
       window=st.integers(1, 6))
def test_tile_map_equals_the_mask_mods_block_lists(n, blocks, window):
    (n_q, n_k), (block_q, block_k) = n, blocks
    band = cl.sliding_window_mod(window)
    band_mask = band.materialize(n_q, n_k)
    # (causal flag, mask, the same rule as a MaskMod)
    for causal, mask, rule in ((True, None, cl.causal_mod()), (True, band_mask, cl.causal_mod() & band),
                               (False, band_mask, band)):
        some, every = rule.blocks(n_q, n_k, block_q, block_k)
        states = cl.flash_tile_map(n_q, n_k, block_q, block_k, mask, causal=causal)
        assert torch.equal(states, some.to(torch.int8) + (some & every).to(torch.int8))


def test_flash_io_counts_the_paper_reads():
    io = cl.flash_io(1000, 900, 32, block_q=128, block_k=128, d_v=16)  # blocks that do not divide the lengths
    t_q = math.ceil(1000 / 128)
    assert (io.q_reads, io.k_reads, io.v_reads) == (1000 * 32, t_q * 900 * 32, t_q * 900 * 16)
    assert io.o_writes == 1000 * 17 and io.tiles == io.total_tiles == t_q * 8
    assert io.standard == 1000 * 32 + 900 * 32 + 4 * 1000 * 900 + 900 * 16 + 1000 * 16
    causal = cl.flash_io(1024, 1024, 32, block_q=128, block_k=128, causal=True)
    assert causal.tiles == 8 * 9 // 2 and causal.k_reads == 36 * 128 * 32
    # Doubling the blocks (the on-chip memory M) halves the K and V reads: Theta(n^2 d^2 / M).
    assert cl.flash_io(1024, 1024, 32, 256, 256).k_reads * 2 == cl.flash_io(1024, 1024, 32, 128, 128).k_reads


# --- The IO counters against the loops themselves, run on a simulated GPU that counts its main-memory traffic.


class _HBM:
    """The slow main memory of a simulated GPU: named tensors, and every element read from or written to each.

    The loops below keep in local variables only what the algorithm keeps on chip; every other access goes
    through ``read`` and ``write``, so the counts are what the loop does, whatever formula the library uses.
    """

    def __init__(self, **tensors):
        self.data = {name: t.clone() for name, t in tensors.items()}
        self.reads, self.writes = Counter(), Counter()

    def read(self, name, rows):
        self.reads[name] += self.data[name][rows].numel()
        return self.data[name][rows].clone()

    def write(self, name, rows, value):
        self.data[name][rows] = value
        self.writes[name] += value.numel()

    def allocate(self, name, value):  # initialised in HBM: every element written once
        self.data[name] = value.clone()
        self.writes[name] += value.numel()


def _keep(n_q, n_k, mask, causal):
    """The (n_q, n_k) pairs kept, by brute force: the mask, and j <= i + n_k - n_q with the causal rule."""
    keep = torch.ones(n_q, n_k, dtype=torch.bool) if mask is None else mask.clone()
    if causal:
        keep &= torch.arange(n_k)[None, :] <= torch.arange(n_q)[:, None] + n_k - n_q
    return keep


def _shift(m):
    return torch.where(torch.isinf(m), torch.zeros_like(m), m)  # 0 where nothing was kept yet (m = -inf)


def _scores(q_i, k_j, keep_ij):
    return (q_i @ k_j.T / math.sqrt(q_i.shape[1])).masked_fill(~keep_ij, -math.inf)


def _run_flash2(q, k, v, keep, block_q, block_k):
    """FlashAttention-2's forward loop (query blocks outside), one head; returns the memory and the tiles computed."""
    (n_q, d_v), n_k = (q.shape[0], v.shape[1]), k.shape[0]
    hbm = _HBM(Q=q, K=k, V=v, O=torch.zeros(n_q, d_v, dtype=q.dtype), L=torch.zeros(n_q, dtype=q.dtype))
    tiles = 0
    for q0 in range(0, n_q, block_q):
        rows = slice(q0, q0 + block_q)
        cols = [slice(k0, k0 + block_k) for k0 in range(0, n_k, block_k) if keep[rows, k0:k0 + block_k].any()]
        size = len(range(n_q)[rows])
        m = torch.full((size,), -math.inf, dtype=q.dtype)  # on chip for the whole inner loop
        ell, acc = torch.zeros(size, dtype=q.dtype), torch.zeros(size, d_v, dtype=q.dtype)
        q_i = hbm.read("Q", rows) if cols else None
        for c in cols:
            k_j, v_j = hbm.read("K", c), hbm.read("V", c)
            s = _scores(q_i, k_j, keep[rows, c])
            m_new = torch.maximum(m, s.amax(1))
            p, r = torch.exp(s - _shift(m_new)[:, None]), torch.exp(m - _shift(m_new))
            ell, acc, m = r * ell + p.sum(1), r[:, None] * acc + p @ v_j, m_new
            tiles += 1
        hbm.write("O", rows, torch.where(ell[:, None] > 0, acc / ell.clamp_min(1e-300)[:, None], 0.0))  # divided once
        hbm.write("L", rows, m + torch.log(ell))
    return hbm, tiles


def _run_flash1(q, k, v, keep, block_q, block_k):
    """FlashAttention-1's forward loop (Dao et al. 2022, Algorithm 1: key/value blocks outside), one head."""
    (n_q, d_v), n_k = (q.shape[0], v.shape[1]), k.shape[0]
    hbm = _HBM(Q=q, K=k, V=v)
    hbm.allocate("O", torch.zeros(n_q, d_v, dtype=q.dtype))
    hbm.allocate("l", torch.zeros(n_q, dtype=q.dtype))
    hbm.allocate("m", torch.full((n_q,), -math.inf, dtype=q.dtype))
    tiles = 0
    for k0 in range(0, n_k, block_k):
        c = slice(k0, k0 + block_k)
        rows_list = [slice(q0, q0 + block_q) for q0 in range(0, n_q, block_q) if keep[q0:q0 + block_q, c].any()]
        if not rows_list:
            continue
        k_j, v_j = hbm.read("K", c), hbm.read("V", c)  # on chip for the whole inner loop
        for rows in rows_list:
            q_i, o_i, l_i, m_i = (hbm.read(name, rows) for name in ("Q", "O", "l", "m"))
            s = _scores(q_i, k_j, keep[rows, c])
            m_tile = s.amax(1)
            p = torch.exp(s - _shift(m_tile)[:, None])
            m_new = torch.maximum(m_i, m_tile)
            old, new = torch.exp(m_i - _shift(m_new)), torch.exp(m_tile - _shift(m_new))
            l_new = old * l_i + new * p.sum(1)
            o_new = (l_i * old)[:, None] * o_i + new[:, None] * (p @ v_j)  # diag(l) e^(m - m') O + e^(m~ - m') P V
            hbm.write("O", rows, torch.where(l_new[:, None] > 0, o_new / l_new.clamp_min(1e-300)[:, None], 0.0))
            hbm.write("l", rows, l_new)
            hbm.write("m", rows, m_new)
            tiles += 1
    return hbm, tiles


def _reference(q, k, v, keep):
    """SDPA with the keep-mask; a query that keeps no key outputs 0."""
    rows = keep.any(1, keepdim=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep | ~rows) * rows


io_cases = st.tuples(st.integers(1, 13), st.integers(1, 13), st.integers(1, 5), st.integers(1, 5),
                     st.integers(1, 4), st.integers(1, 4))


@settings(max_examples=60, deadline=None)
@given(case=io_cases, causal=st.booleans(), kind=st.sampled_from([None, "random", "band"]),
       seed=st.integers(0, 2**20))
def test_both_io_counters_equal_a_count_of_their_loops_run_on_a_simulated_gpu(case, causal, kind, seed):
    n_q, n_k, block_q, block_k, d, d_v = case
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(n, size, generator=gen, dtype=torch.float64) for n, size in ((n_q, d), (n_k, d), (n_k, d_v)))
    mask = {"random": torch.rand(n_q, n_k, generator=gen) > 0.6,
            "band": (torch.arange(n_q)[:, None] - torch.arange(n_k)[None, :]).abs() < 3}.get(kind)
    keep = _keep(n_q, n_k, mask, causal)
    expected = _reference(q, k, v, keep)
    for run, counter in ((_run_flash2, cl.flash_io), (_run_flash1, cl.flash1_io)):
        hbm, tiles = run(q, k, v, keep, block_q, block_k)
        assert (hbm.data["O"] - expected).abs().max() < 1e-12  # the loop computes attention
        io = counter(n_q, n_k, d, block_q, block_k, mask, causal=causal, d_v=d_v)
        outputs = set(hbm.data) - {"Q", "K", "V"}  # O and its statistics
        assert (io.q_reads, io.k_reads, io.v_reads) == (hbm.reads["Q"], hbm.reads["K"], hbm.reads["V"])
        assert io.o_reads == sum(hbm.reads[name] for name in outputs)
        assert io.o_writes == sum(hbm.writes[name] for name in outputs)
        assert not hbm.writes["Q"] + hbm.writes["K"] + hbm.writes["V"]
        assert io.tiles == tiles and io.total_tiles == math.ceil(n_q / block_q) * math.ceil(n_k / block_k)
    # The two orders read the same tiles, in a different order: FlashAttention-1 re-reads Q and O.
    assert cl.flash_io(n_q, n_k, d, block_q, block_k, mask, causal=causal, d_v=d_v).tiles == tiles


@pytest.mark.parametrize("n_q, n_k, block_q, block_k, causal", [(64, 64, 8, 16, False), (48, 80, 16, 8, True),
                                                                 (50, 37, 7, 9, True)])
def test_io_counters_equal_their_loops_at_larger_shapes(n_q, n_k, block_q, block_k, causal):
    gen = torch.Generator().manual_seed(n_q)
    q, k, v = (torch.randn(n, 8, generator=gen, dtype=torch.float64) for n in (n_q, n_k, n_k))
    keep = _keep(n_q, n_k, None, causal)
    for run, counter in ((_run_flash2, cl.flash_io), (_run_flash1, cl.flash1_io)):
        hbm, tiles = run(q, k, v, keep, block_q, block_k)
        io = counter(n_q, n_k, 8, block_q, block_k, causal=causal)
        assert io.total == sum(hbm.reads.values()) + sum(hbm.writes.values()) and io.tiles == tiles


def test_flash1_io_with_the_papers_blocks_follows_theorem_2():
    """FlashAttention-1 takes B_c = ceil(M / 4d), B_r = min(B_c, d) (Algorithm 1); its count is Theta(N^2 d^2 / M)."""
    n, d = 4096, 64
    ratios, ratios2 = {}, {}
    for M in (2**10, 2**12, 2**14, 2**16, 2**18):  # d <= M <= N d, as the theorem asks
        b_c = math.ceil(M / (4 * d))
        b_r = min(b_c, d)
        io = cl.flash1_io(n, n, d, block_q=b_r, block_k=b_c)
        t_c = math.ceil(n / b_c)
        # The proof's count: K, V once; Q and O, l, m read and O, l, m written once per key block; the initialisation.
        assert io.total == 2 * n * d + t_c * (n * d + 2 * n * (d + 2)) + n * (d + 2)
        ratios[M] = io.total / (n * n * d * d / M)
        # FlashAttention-2's order with the mirror choice (the outer, query block as large): K, V once per query block.
        io2 = cl.flash_io(n, n, d, block_q=b_c, block_k=b_r)
        assert io2.total == 2 * n * d * t_c + n * d + n * (d + 1)
        ratios2[M] = io2.total / (n * n * d * d / M)
    # Bounded above and below over a 256-fold range of M: Theta(N^2 d^2 / M), about 12 and 8 times it.
    assert all(12 < r < 16 for r in ratios.values()) and all(8 < r < 10.1 for r in ratios2.values())


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 12), block=st.integers(1, 5), seed=st.integers(0, 2**20), masked=st.booleans())
def test_online_softmax_equals_softmax_and_its_history_is_the_prefix_max_and_sum(n, block, seed, masked):
    x = _randn(3, n, seed=seed) * 4
    if masked:
        x = x.masked_fill(torch.rand(3, n, generator=torch.Generator().manual_seed(seed)) > 0.6, -math.inf)
        x[0] = -math.inf  # a row with nothing kept
    steps = cl.online_softmax(x, block)
    expected = torch.softmax(x, -1).nan_to_num(0.0)
    torch.testing.assert_close(steps.weights, expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(steps.lse, x.logsumexp(-1), atol=1e-12, rtol=0)
    for b, end in enumerate(range(block, n + block, block)):
        prefix = x[:, :min(end, n)]
        m = prefix.amax(-1)
        assert torch.equal(steps.maxima[:, b], m)
        safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        torch.testing.assert_close(steps.denominators[:, b], torch.exp(prefix - safe[:, None]).sum(-1))


def test_flash_kernel_in_multihead_attention_equals_the_default_module():
    torch.manual_seed(0)
    for heads in (None, 2):
        flash = cl.MultiHeadAttention(24, 4, num_kv_heads=heads, kernel=cl.FlashKernel(block_q=3, block_k=5))
        default = cl.MultiHeadAttention(24, 4, num_kv_heads=heads)
        default.load_state_dict(flash.state_dict())
        x, memory = torch.randn(3, 11, 24), torch.randn(3, 7, 24)
        pad = cl.padding_mask(torch.tensor([7, 3, 5]), 7)
        torch.testing.assert_close(flash(x, memory, memory, pad), default(x, memory, memory, pad), atol=1e-6, rtol=0)
        x.requires_grad_()
        y_flash, y_default = flash(x, x, x, causal=True), default(x, x, x, causal=True)
        torch.testing.assert_close(y_flash, y_default, atol=1e-6, rtol=0)
        g_flash = torch.autograd.grad(y_flash.square().sum(), [x, *flash.parameters()])
        g_default = torch.autograd.grad(y_default.square().sum(), [x, *default.parameters()])
        for got, want in zip(g_flash, g_default, strict=True):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        cache, steps = cl.KVCache(), []
        with torch.no_grad():
            for t in range(0, 11, 4):  # cached decoding, a few steps at a time
                steps.append(flash(x[:, t:t + 4], x[:, t:t + 4], x[:, t:t + 4], causal=True, kv_cache=cache))
        torch.testing.assert_close(torch.cat(steps, 1), y_default.detach(), atol=1e-6, rtol=0)


def test_flash_kernel_hands_need_weights_to_the_explicit_kernel_and_refuses_dropout():
    torch.manual_seed(1)
    mha = cl.MultiHeadAttention(16, 2, kernel=cl.FlashKernel(4, 4))
    x = torch.randn(2, 9, 16)
    plain = mha(x, x, x, causal=True)
    with cl.recording_attention(mha):
        recorded = mha(x, x, x, causal=True)
    torch.testing.assert_close(recorded, plain, atol=1e-6, rtol=0)
    q = mha.W_q(x).view(2, 9, 2, 8).transpose(1, 2)
    k = mha.W_k(x).view(2, 9, 2, 8).transpose(1, 2)
    _, expected = cl.explicit_kernel(q, k, k, causal=True)
    torch.testing.assert_close(mha.attention_weights, expected.detach())
    dropping = cl.MultiHeadAttention(16, 2, dropout=0.1, kernel=cl.FlashKernel())
    with pytest.raises(ValueError, match="dropout_p=0.1"):
        dropping(x, x, x)
    assert dropping.eval()(x, x, x).shape == (2, 9, 16)  # no dropout in evaluation


def test_half_precision_inputs_accumulate_in_float32():
    q, k, v = (t.detach() for t in _inputs(1, 2, 2, 33, 33, 8, 8, seed=10, dtype=torch.float32))
    out, lse = cl.flash_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), causal=True, block_q=8, block_k=8,
                                  return_lse=True)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    torch.testing.assert_close(out.float(), _sdpa(q, k, v, None, True), atol=3e-2, rtol=0)


def test_extra_memory_grows_linearly_for_flash_and_quadratically_for_the_explicit_kernel():
    def peaks_at(n):
        q, k, v = (t.detach().float() for t in _inputs(1, 1, 1, n, n, 8, 8, seed=11))
        with torch.no_grad():
            return (cl.peak_memory(lambda: cl.flash_attention(q, k, v, causal=True, block_q=32, block_k=32)),
                    cl.peak_memory(lambda: cl.explicit_kernel(q, k, v, causal=True)))

    peaks = {n: peaks_at(n) for n in (128, 256)}
    assert peaks[256][0] / peaks[128][0] < 2.5  # linear (plus the fixed tiles)
    assert peaks[256][1] / peaks[128][1] > 3.5  # quadratic
    assert peaks[256][0] * 8 < peaks[256][1]


def test_bad_arguments_are_refused_with_their_names():
    q, k, v = (t.detach() for t in _inputs(1, 4, 2, 3, 5, 4, 4, seed=12))
    with pytest.raises(ValueError, match="block_q"):
        cl.flash_attention(q, k, v, block_q=0)
    with pytest.raises(ValueError, match="block_k"):
        cl.flash_attention(q, k, v, block_k=-2)
    with pytest.raises(TypeError, match="block_k"):
        cl.flash_attention(q, k, v, block_k=2.0)
    with pytest.raises(ValueError, match="block_q"):
        cl.FlashKernel(block_q=0)
    with pytest.raises(ValueError, match="heads"):
        cl.flash_attention(q, torch.zeros(1, 3, 5, 4, dtype=q.dtype), torch.zeros(1, 3, 5, 4, dtype=q.dtype))
    with pytest.raises(TypeError, match="mask"):
        cl.flash_attention(q, k, v, torch.ones(3, 5))
    with pytest.raises(ValueError, match="mask"):
        cl.flash_attention(q, k, v, torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="causal"):
        cl.flash_attention(q, k, v, causal=1)
    with pytest.raises(ValueError, match="block"):
        cl.online_softmax(torch.zeros(3), 0)
    with pytest.raises(ValueError, match="block_k"):
        cl.flash_tile_map(4, 4, 2, 0)
