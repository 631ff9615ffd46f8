"""The chapter 5 checkers accept the notebook's solutions and reject typical mistakes
with a specific hint (their stubs: test_exercises_core.py)."""

from __future__ import annotations

import math

import pytest
import torch
from exercise_helpers import fails_with, passes

import course_lib as cl

NOTEBOOK = "05_multihead_attention.ipynb"


# --- split_heads / merge_heads ------------------------------------------------------------------


def _right_split(X, num_heads):
    batch, T, d = X.shape
    if d % num_heads:
        raise ValueError("num_heads must divide d")
    return X.reshape(batch, T, num_heads, d // num_heads).transpose(1, 2)


def split_without_transpose(X, num_heads):
    batch, T, d = X.shape
    if d % num_heads:
        raise ValueError("num_heads must divide d")
    return X.reshape(batch, num_heads, T, d // num_heads)


def split_strided(X, num_heads):
    batch, T, d = X.shape
    if d % num_heads:
        raise ValueError("num_heads must divide d")
    return X.reshape(batch, T, d // num_heads, num_heads).permute(0, 3, 1, 2)


def split_keeps_token_axis_first(X, num_heads):
    batch, T, d = X.shape
    if d % num_heads:
        raise ValueError("num_heads must divide d")
    return X.reshape(batch, T, num_heads, d // num_heads)


def split_without_divisibility_check(X, num_heads):
    batch, T, d = X.shape
    return X[..., : (d // num_heads) * num_heads].reshape(batch, T, num_heads, d // num_heads).transpose(1, 2)


def merge_without_transpose(X):
    batch, h, T, d_h = X.shape
    return X.reshape(batch, T, h * d_h)


def merge_interleaved(X):
    batch, h, T, d_h = X.shape
    return X.permute(0, 2, 3, 1).reshape(batch, T, h * d_h)


def test_split_and_merge_notebook_solutions_pass(solutions):
    ns = solutions("ch05-ex-split-merge")
    for exercise, fn in (("multihead.split_heads", ns["split_heads"]), ("multihead.merge_heads", ns["merge_heads"])):
        assert passes(exercise, fn).n_checks >= 5


def test_library_split_passes_the_checker():
    # MultiHeadAttention's own split (through its W_q set to the identity) is independent of the
    # checker's slicing reference.
    def library_split(X, num_heads):
        if X.shape[-1] % num_heads:
            raise ValueError("num_heads must divide d")
        mha = cl.MultiHeadAttention(X.shape[-1], num_heads).to(X.dtype)
        with torch.no_grad():
            mha.W_q.weight.copy_(torch.eye(X.shape[-1]))
        q, _, _ = mha._project(X, X[:, :1] * 0, X[:, :1] * 0, None)
        return q

    passes("multihead.split_heads", library_split, library=True)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (split_without_transpose, "tokens and heads are mixed"),
        (split_strided, "split along the wrong axis"),
        (split_keeps_token_axis_first, "the transpose is missing"),
        (split_without_divisibility_check, "expected a ValueError"),
    ],
)
def test_split_wrong_answers_fail_with_hint(answer, hint):
    fails_with("multihead.split_heads", answer, hint)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (merge_without_transpose, "mixes tokens and heads"),
        (merge_interleaved, "interleaved"),
    ],
)
def test_merge_wrong_answers_fail_with_hint(answer, hint):
    fails_with("multihead.merge_heads", answer, hint)


# --- multihead_attention ------------------------------------------------------------------------


def _mha(queries, keys, values, W_q, W_k, W_v, W_o, num_heads, valid_lens=None, *, transpose_weights=True,
         scale_by_d=False, no_transpose_split=False, mask=True, softmax_dim=-1):
    """A vectorised answer with one deliberate mistake switched on."""
    Ws = [W.T if transpose_weights else W for W in (W_q, W_k, W_v, W_o)]
    Q, K, V = queries @ Ws[0], keys @ Ws[1], values @ Ws[2]
    batch, n_q, d = Q.shape
    d_h = d // num_heads

    def split(X):
        if no_transpose_split:
            return X.reshape(X.shape[0], num_heads, X.shape[1], d_h)
        return X.reshape(X.shape[0], X.shape[1], num_heads, d_h).transpose(1, 2)

    q, k, v = split(Q), split(K), split(V)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d if scale_by_d else d_h)
    if valid_lens is not None and mask:
        keep = torch.arange(k.shape[2]) < valid_lens[:, None, None, None]
        scores = scores.masked_fill(~keep, float("-inf"))
    out = torch.softmax(scores, dim=softmax_dim) @ v
    out = out.reshape(batch, n_q, d) if no_transpose_split else out.transpose(1, 2).reshape(batch, n_q, d)
    return out @ Ws[3]


def test_multihead_attention_notebook_solution_passes(solutions):
    ns = solutions("ch05-ex-split-merge", "ch05-ex-mha")
    assert passes("multihead.multihead_attention", ns["multihead_attention"]).n_checks == 4


def test_correct_vectorised_answer_passes():
    passes("multihead.multihead_attention", _mha)


def test_library_module_passes_the_checker():
    # cl.MultiHeadAttention with the given weights copied in is an independent implementation.
    def via_module(queries, keys, values, W_q, W_k, W_v, W_o, num_heads, valid_lens=None):
        mha = cl.MultiHeadAttention(queries.shape[-1], num_heads).double()
        with torch.no_grad():
            for layer, W in zip((mha.W_q, mha.W_k, mha.W_v, mha.W_o), (W_q, W_k, W_v, W_o), strict=True):
                layer.weight.copy_(W)
        mask = None if valid_lens is None else cl.padding_mask(valid_lens, keys.shape[1])
        return mha(queries, keys, values, mask)

    passes("multihead.multihead_attention", via_module, library=True)


@pytest.mark.parametrize(
    ("mistake", "hint"),
    [
        ({"transpose_weights": False}, "untransposed"),
        ({"scale_by_d": True}, "divide by sqrt(d_h)"),
        ({"no_transpose_split": True}, "without a transpose"),
        ({"mask": False}, "padded keys are not masked"),
        ({"softmax_dim": -2}, "over the queries"),
    ],
)
def test_multihead_attention_wrong_answers_fail_with_hint(mistake, hint):
    fails_with("multihead.multihead_attention", lambda *a, **k: _mha(*a, **k, **mistake), hint)


def test_multihead_attention_wrong_output_shape_is_reported():
    def heads_not_merged(queries, keys, values, W_q, W_k, W_v, W_o, num_heads, valid_lens=None):
        return _mha(queries, keys, values, W_q, W_k, W_v, W_o, num_heads, valid_lens)[:, None]

    fails_with("multihead.multihead_attention", heads_not_merged, "expected shape")

