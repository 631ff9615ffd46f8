"""Checkers for the exercises of chapter 5, multi-head attention.

The references are computed here independently of ``course_lib.attention.multihead``: head splitting by
slicing the feature axis one head at a time, and multi-head attention by brute-force loops over
(example, head, query) in float64. Typical mistakes (a reshape without the transpose, heads taken
as strided instead of contiguous features, weights used untransposed, scaling by sqrt(d) instead of
sqrt(d_h), padding ignored, softmax over the wrong axis) are recognised by comparing the answer
with the result of that mistake, so the message can say what to fix.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ._core import (
    ExerciseFailure,
    call,
    checker,
    count_cases,
    expect,
    expect_close,
    expect_match,
    expect_raises,
    expect_tensor,
    generator,
    unchanged,
)

# ----------------------------------------------------------------------------- split / merge heads


def _split_by_slices(X: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(batch, T, d) -> (batch, h, T, d_h): head i is the column block i*d_h:(i+1)*d_h."""
    d_h = X.shape[-1] // num_heads
    return torch.stack([X[..., i * d_h:(i + 1) * d_h] for i in range(num_heads)], dim=1)


def _merge_by_concat(X: torch.Tensor) -> torch.Tensor:
    """(batch, h, T, d_h) -> (batch, T, h*d_h): the heads side by side along the features."""
    return torch.cat([X[:, i] for i in range(X.shape[1])], dim=-1)


_SPLIT_CASES = [(2, 5, 12, 3), (1, 7, 8, 2), (3, 4, 6, 1), (2, 3, 8, 8)]  # (batch, T, d, h)


@checker("multihead.split_heads",
         "split_heads(X, num_heads): (batch, T, d) -> (batch, h, T, d/h), head i = features i*d_h:(i+1)*d_h")
def check_split_heads(answer: Callable) -> int:
    g = generator(0)

    def one(case: tuple[int, int, int, int]) -> None:
        batch, T, d, h = case
        d_h = d // h
        name = f"X of shape {(batch, T, d)}, num_heads={h}"
        X = torch.randn(batch, T, d, generator=g, dtype=torch.float64)
        with unchanged(f"{name}: your function changed X in place", X):
            got = call(answer, name, X, h)
        expect_tensor(got, name)
        if tuple(got.shape) == (batch, T, h, d_h) and T != h:
            raise ExerciseFailure(
                f"{name}: got shape {tuple(got.shape)} = (batch, T, h, d_h): the transpose is missing. After "
                "splitting the last axis into (h, d_h), move the head axis before the token axis "
                "(.transpose(1, 2)) so that each head is an independent (T, d_h) attention problem."
            )
        expect_tensor(got, name, (batch, h, T, d_h), "(batch, num_heads, T, d_h)")
        mistakes = [
            (X.reshape(batch, h, T, d_h),
             f"{name}: you reshaped (batch, T, d) straight to (batch, h, T, d_h). The shape is right but "
             "tokens and heads are mixed: row r of 'head 0' is head r % h of token r // h. Reshape to "
             "(batch, T, h, d_h) first, then .transpose(1, 2)."),
            (X.reshape(batch, T, d_h, h).permute(0, 3, 1, 2),
             f"{name}: the heads are split along the wrong axis: your head i holds every h-th feature "
             f"(i, i + h, ...), but head i must hold the contiguous block i*d_h, ..., (i+1)*d_h - 1 "
             "(the rows of W_q that belong to it). Reshape to (batch, T, h, d_h), not (batch, T, d_h, h)."),
        ]
        expect_match(got, _split_by_slices(X, h), f"{name} (head i must be X[..., i*d_h:(i+1)*d_h])",
                     mistakes if h > 1 else (), atol=1e-6)

    def indivisible(size: tuple[int, int]) -> None:
        d, h = size
        X = torch.randn(2, 5, d, generator=g)
        expect_raises(answer, (X, h), ValueError, other=lambda error: (
            f"num_heads={h} with d={d}: expected a ValueError ({h} does not divide {d}), got {type(error).__name__}: "
            f"{error}. Check d % num_heads first and raise ValueError with a message that names both."),
            returned=lambda _: (
            f"num_heads={h} with d={d}: expected a ValueError, since {h} heads cannot share {d} features equally; "
            "your function returned a result. Check d % num_heads and raise ValueError."))

    return count_cases(_SPLIT_CASES, one) + count_cases([(10, 3)], indivisible)


@checker("multihead.merge_heads",
         "merge_heads(X): (batch, h, T, d_h) -> (batch, T, h*d_h), the inverse of split_heads")
def check_merge_heads(answer: Callable) -> int:
    g = generator(1)

    def one(case: tuple[int, int, int, int]) -> int:
        batch, T, d, h = case
        d_h = d // h
        name = f"X of shape {(batch, h, T, d_h)}"
        X = torch.randn(batch, h, T, d_h, generator=g, dtype=torch.float64)
        got = call(answer, name, X)
        expect_tensor(got, name, (batch, T, d), "(batch, T, h * d_h)")
        mistakes = [
            (X.reshape(batch, T, d),
             f"{name}: you reshaped (batch, h, T, d_h) straight to (batch, T, h*d_h), which mixes tokens "
             "and heads. Move the token axis back in front of the heads first: "
             ".transpose(1, 2).reshape(batch, T, h * d_h)."),
            (X.permute(0, 2, 3, 1).reshape(batch, T, d),
             f"{name}: the features of the heads are interleaved (head 0's first feature, head 1's first "
             "feature, ...). Concatenate them instead: head i must fill the features i*d_h:(i+1)*d_h, "
             "so transpose to (batch, T, h, d_h) before the reshape."),
        ]
        expect_match(got, _merge_by_concat(X), f"{name} (the heads concatenated along the features)",
                     mistakes if h > 1 else (), atol=1e-6)
        # merge_heads must undo the split: the original tokens come back.
        tokens = torch.randn(batch, T, d, generator=g, dtype=torch.float64)
        expect_close(call(answer, name, _split_by_slices(tokens, h)), tokens,
                     f"merge_heads(split(X)) must give X back, for X of shape {(batch, T, d)}", atol=1e-6)
        return 2

    return count_cases(_SPLIT_CASES, one)


# ----------------------------------------------------------------------------- multi-head attention


def _loop_mha(queries, keys, values, W_q, W_k, W_v, W_o, num_heads, valid_lens=None) -> torch.Tensor:
    """Brute force in float64: one (example, head, query) at a time, softmax written out."""
    q, k, v = (x.double() for x in (queries, keys, values))
    Q, K, V = q @ W_q.double().T, k @ W_k.double().T, v @ W_v.double().T
    batch, n_q, d = Q.shape
    n_k = K.shape[1]
    d_h = d // num_heads
    heads = torch.zeros(batch, n_q, d, dtype=torch.float64)
    for b in range(batch):
        length = n_k if valid_lens is None else int(valid_lens[b])
        for head in range(num_heads):
            cols = slice(head * d_h, (head + 1) * d_h)
            for i in range(n_q):
                scores = [float(Q[b, i, cols] @ K[b, j, cols]) / math.sqrt(d_h) for j in range(length)]
                top = max(scores)
                exps = [math.exp(s - top) for s in scores]
                total = sum(exps)
                heads[b, i, cols] = sum((e / total) * V[b, j, cols] for j, e in enumerate(exps))
    return heads @ W_o.double().T


def _variant_mha(queries, keys, values, W_q, W_k, W_v, W_o, num_heads, valid_lens=None, *, scale=None,
                 split="right", softmax_dim=-1, use_mask=True) -> torch.Tensor:
    """Vectorised multi-head attention with one deliberate mistake switched on (for the hints)."""
    Q, K, V = queries @ W_q.T, keys @ W_k.T, values @ W_v.T
    batch, n_q, d = Q.shape
    d_h = d // num_heads

    def split_(X):
        if split == "no_transpose":
            return X.reshape(X.shape[0], num_heads, X.shape[1], d_h)
        return X.reshape(X.shape[0], X.shape[1], num_heads, d_h).transpose(1, 2)

    q, k, v = split_(Q), split_(K), split_(V)
    scores = q @ k.transpose(-2, -1) / (math.sqrt(d_h) if scale is None else scale)
    if valid_lens is not None and use_mask:
        keep = torch.arange(k.shape[2]) < valid_lens[:, None, None, None]
        scores = scores.masked_fill(~keep, float("-inf"))
    out = torch.softmax(scores, dim=softmax_dim) @ v
    if split == "no_transpose":
        out = out.reshape(batch, n_q, d)
    else:
        out = out.transpose(1, 2).reshape(batch, n_q, d)
    return out @ W_o.T


def _mha_mistakes(args: tuple, kwargs: dict, num_heads: int, d: int) -> list[tuple[Callable, str]]:
    """The anticipated mistakes: ``(function computing that mistake's result, hint)``."""
    queries, keys, values, W_q, W_k, W_v, W_o = args
    transposed = (queries, keys, values, W_q.T, W_k.T, W_v.T, W_o.T)
    mistakes = [
        (lambda: _variant_mha(*transposed, num_heads, **kwargs),
         "you used the weights untransposed (X @ W_q instead of X @ W_q.T). The matrices are in nn.Linear's "
         "layout (out, in): Q = queries @ W_q.T, and likewise for W_k, W_v and W_o."),
        (lambda: _variant_mha(*args, num_heads, **kwargs, scale=math.sqrt(d)),
         f"your scores are divided by sqrt(d) = sqrt({d}); each head's dot products have d_h = d / h = "
         f"{d // num_heads} terms, so divide by sqrt(d_h)."),
        (lambda: _variant_mha(*args, num_heads, **kwargs, scale=1.0),
         "your scores are not scaled: divide them by sqrt(d_h) before the softmax."),
        (lambda: _variant_mha(*args, num_heads, **kwargs, split="no_transpose"),
         "the heads are split with a reshape to (batch, h, T, d_h) without a transpose, which mixes tokens and "
         "heads. Reshape to (batch, T, h, d_h), then .transpose(1, 2) (and undo both when merging)."),
        (lambda: _variant_mha(*args, num_heads, **kwargs, softmax_dim=-2),
         "the softmax is taken over the queries (dim=-2); the weights of a query must sum to 1 over the keys "
         "(dim=-1)."),
    ]
    if kwargs.get("valid_lens") is not None:
        mistakes.append(
            (lambda: _variant_mha(*args, num_heads, **kwargs, use_mask=False),
             "the padded keys are not masked: keys j >= valid_lens[b] must get weight 0 in every head (set "
             "their scores to -inf, with a mask of shape (batch, 1, 1, n_keys), before the softmax)."))
    return mistakes


@checker("multihead.multihead_attention",
         "multihead_attention(queries, keys, values, W_q, W_k, W_v, W_o, num_heads, valid_lens): all heads at once")
def check_multihead_attention(answer: Callable) -> int:
    g = generator(2)
    # (batch, n_q, n_k, d, h, valid_lens, self-attention?)
    cases = [
        (2, 5, 5, 12, 3, None, True),
        (2, 3, 6, 8, 2, torch.tensor([6, 2]), False),
        (3, 4, 4, 16, 4, torch.tensor([4, 1, 3]), True),
        (1, 2, 3, 6, 1, None, False),
    ]

    def one(case: tuple) -> None:
        batch, n_q, n_k, d, h, valid_lens, is_self = case
        kind = "self-attention" if is_self else "cross-attention"
        name = (f"{kind}, queries {(batch, n_q, d)}, keys {(batch, n_k, d)}, num_heads={h}"
                + ("" if valid_lens is None else f", valid_lens={valid_lens.tolist()}"))
        X = torch.randn(batch, n_k, d, generator=g, dtype=torch.float64)
        queries = X if is_self else torch.randn(batch, n_q, d, generator=g, dtype=torch.float64)
        keys = X
        values = X if is_self else torch.randn(batch, n_k, d, generator=g, dtype=torch.float64)
        # Non-symmetric weights, scaled so that the softmax is neither uniform nor one-hot.
        W = [torch.randn(d, d, generator=g, dtype=torch.float64) * (1.5 / math.sqrt(d)) for _ in range(4)]
        args = (queries, keys, values, *W)
        kwargs = {} if valid_lens is None else {"valid_lens": valid_lens}
        got = call(answer, name, *args, h, **kwargs)
        expect_tensor(got, name, (batch, n_q, d), "(batch, n_queries, d)")
        expect(not bool(torch.isnan(got.detach()).any()), f"{name}: your output contains NaN")
        mistakes = [(result, f"{name}: {hint}") for result, hint in _mha_mistakes(args, kwargs, h, d)]
        expect_match(got, _loop_mha(*args, h, **kwargs), name, mistakes, atol=1e-6)

    return count_cases(cases, one)
