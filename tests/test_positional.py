"""Tests for course_lib.models.positional: sinusoidal table, PositionalEncoding, LearnedPositionalEmbedding."""

import math

import pytest
import torch

from course_lib.models.positional import LearnedPositionalEmbedding, PositionalEncoding, sinusoidal_table


@pytest.mark.parametrize("num_hiddens", [1, 6, 7, 32])
def test_table_matches_closed_form_double_loop(num_hiddens):
    max_len = 60
    P = PositionalEncoding(num_hiddens, max_len=max_len).P
    assert P.shape == (1, max_len, num_hiddens)
    expected = torch.empty(max_len, num_hiddens, dtype=torch.float64)
    for t in range(max_len):
        for col in range(num_hiddens):
            two_i = col - col % 2
            angle = t / 10000 ** (two_i / num_hiddens)
            expected[t, col] = math.sin(angle) if col % 2 == 0 else math.cos(angle)
    torch.testing.assert_close(P[0].double(), expected, atol=1e-6, rtol=0)


def test_table_is_accurate_at_large_positions():
    # Computed in float64: only the final rounding to float32 remains.
    table = sinusoidal_table(5000, 8)
    assert math.isclose(table[4999, 0].item(), math.sin(4999), abs_tol=1e-6)
    assert math.isclose(table[4999, 1].item(), math.cos(4999), abs_tol=1e-6)


@pytest.mark.parametrize("k", [0, 1, 5, 17])
def test_inner_product_depends_only_on_offset(k):
    P = sinusoidal_table(200, 64, dtype=torch.float64)
    inner = torch.stack([P[t] @ P[t + k] for t in (0, 3, 40, 101, 150)])
    # Closed form: sum_i cos(k w_i) over the d/2 frequencies w_i = 10000^(-2i/d).
    freqs = 10000 ** (-torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    torch.testing.assert_close(inner, torch.cos(k * freqs).sum().expand(5))


def test_different_offsets_give_different_inner_products():
    P = sinusoidal_table(50, 64, dtype=torch.float64)
    assert not math.isclose((P[0] @ P[1]).item(), (P[0] @ P[7]).item(), abs_tol=1e-3)


def test_forward_adds_the_rows_at_the_offset():
    pe = PositionalEncoding(8, max_len=20)
    X = torch.randn(2, 5, 8)
    torch.testing.assert_close(pe(X), X + pe.P[:, :5])
    torch.testing.assert_close(pe(X, offset=12), X + pe.P[:, 12:17])
    # Decoding one step at a time with offsets equals the whole sequence at once.
    steps = torch.cat([pe(X[:, t:t + 1], offset=t) for t in range(5)], dim=1)
    torch.testing.assert_close(steps, pe(X))


def test_buffer_is_not_persistent_and_follows_dtype():
    pe = PositionalEncoding(8, max_len=10)
    assert "P" not in pe.state_dict()
    assert "P" in dict(pe.named_buffers())
    pe = pe.to(torch.float64)
    assert pe.P.dtype == torch.float64
    assert pe(torch.randn(1, 3, 8, dtype=torch.float64)).dtype == torch.float64
    # A fresh module loads the (empty) state dict without complaint.
    PositionalEncoding(8, max_len=10).load_state_dict(pe.state_dict())


def test_dropout_acts_only_in_training():
    pe = PositionalEncoding(16, dropout=0.5)
    X = torch.randn(4, 10, 16)
    pe.eval()
    torch.testing.assert_close(pe(X), X + pe.P[:, :10])
    pe.train()
    assert (pe(X) == 0).any()


def test_learned_embedding_is_a_trained_parameter():
    torch.manual_seed(0)
    emb = LearnedPositionalEmbedding(8, max_len=12)
    assert emb.P.shape == (1, 12, 8)
    assert "P" in emb.state_dict()
    X = torch.randn(2, 4, 8)
    torch.testing.assert_close(emb(X, offset=3), X + emb.P[:, 3:7])
    emb(X).sum().backward()
    assert torch.equal(emb.P.grad[0, 4:], torch.zeros(8, 8))  # unused positions get no gradient
    assert torch.equal(emb.P.grad[0, :4], torch.full((4, 8), 2.0))  # two examples each


@pytest.mark.parametrize("cls", [PositionalEncoding, LearnedPositionalEmbedding])
def test_positions_past_max_len_raise(cls):
    module = cls(8, max_len=10)
    module(torch.randn(1, 10, 8))  # exactly max_len is fine
    with pytest.raises(ValueError, match="max_len = 10"):
        module(torch.randn(1, 11, 8))
    with pytest.raises(ValueError, match="max_len = 10"):
        module(torch.randn(1, 4, 8), offset=7)


@pytest.mark.parametrize("cls", [PositionalEncoding, LearnedPositionalEmbedding])
@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((torch.randn(2, 3, 9),), {}, ValueError, r"num_hiddens.*\(2, 3, 9\)"),
        ((torch.randn(3, 8),), {}, ValueError, "3-D"),
        ((torch.ones(2, 3, 8, dtype=torch.long),), {}, TypeError, "floating"),
        ((torch.randn(2, 3, 8),), {"offset": -1}, ValueError, "offset"),
        ((torch.randn(2, 3, 8),), {"offset": 1.0}, TypeError, "offset"),
    ],
)
def test_bad_forward_inputs_raise(cls, args, kwargs, error, match):
    with pytest.raises(error, match=match):
        cls(8, max_len=10)(*args, **kwargs)


@pytest.mark.parametrize("cls", [PositionalEncoding, LearnedPositionalEmbedding])
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_hiddens": 0}, ValueError, "num_hiddens"),
        ({"num_hiddens": 8, "max_len": 0}, ValueError, "max_len"),
        ({"num_hiddens": 8, "max_len": 10.0}, TypeError, "max_len"),
        ({"num_hiddens": 8, "dropout": -0.1}, ValueError, "dropout"),
    ],
)
def test_bad_construction_raises(cls, kwargs, error, match):
    with pytest.raises(error, match=match):
        cls(**kwargs)
