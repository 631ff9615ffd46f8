"""The chapter 4 checkers accept the notebook's solutions and the library's own code, and reject typical
mistakes with a specific hint (their stubs: test_exercises_core.py)."""

from __future__ import annotations

import pytest
import torch
from exercise_helpers import fails_with, passes

import course_lib as cl
from course_lib.teaching.exercises import check
from course_lib.teaching.exercises.bahdanau import _loop_context

NOTEBOOK = "04_bahdanau_attention.ipynb"


# --- bahdanau.context ---------------------------------------------------------------------------


def _scores(s, enc, W_q, W_k, w_v, activation=torch.tanh):
    return activation((s @ W_q.T)[:, None, :] + enc @ W_k.T) @ w_v  # (B, S)


def _valid(enc, valid_lens):
    return torch.arange(enc.shape[1])[None, :] < valid_lens[:, None]


def _pool(weights, enc):
    return (weights[:, :, None] * enc).sum(1), weights


def context_unmasked(s, enc, valid_lens, W_q, W_k, w_v):
    return _pool(torch.softmax(_scores(s, enc, W_q, W_k, w_v), -1), enc)


def context_softmax_over_batch(s, enc, valid_lens, W_q, W_k, w_v):
    keep = _valid(enc, valid_lens)
    return _pool(torch.softmax(_scores(s, enc, W_q, W_k, w_v).masked_fill(~keep, -1e9), dim=0) * keep, enc)


def context_without_tanh(s, enc, valid_lens, W_q, W_k, w_v):
    scores = _scores(s, enc, W_q, W_k, w_v, activation=lambda x: x)
    return _pool(torch.softmax(scores.masked_fill(~_valid(enc, valid_lens), float("-inf")), -1), enc)


def context_swapped_projections(s, enc, valid_lens, W_q, W_k, w_v):
    # Crashes when H_dec != H_enc, runs (wrongly) when they are equal.
    return context_unmasked_right(s, enc, valid_lens, W_k, W_q, w_v)


def context_unmasked_right(s, enc, valid_lens, W_q, W_k, w_v):
    scores = _scores(s, enc, W_q, W_k, w_v)
    return _pool(torch.softmax(scores.masked_fill(~_valid(enc, valid_lens), float("-inf")), -1), enc)


def context_mean_of_values(s, enc, valid_lens, W_q, W_k, w_v):
    _, weights = context_unmasked_right(s, enc, valid_lens, W_q, W_k, w_v)
    return enc.mean(1), weights


def context_keeps_query_axis(s, enc, valid_lens, W_q, W_k, w_v):
    context, weights = context_unmasked_right(s, enc, valid_lens, W_q, W_k, w_v)
    return context[:, None], weights[:, None]


def test_context_notebook_solution_passes(solution_function):
    answer = solution_function("ch04-ex-context", "bahdanau_context")
    assert passes("bahdanau.context", answer).n_checks == 6


def test_context_through_the_library_module_passes():
    # cl.AdditiveAttention is an implementation independent of the checker's loops: both must agree.
    def via_library(s, enc, valid_lens, W_q, W_k, w_v):
        module = cl.AdditiveAttention(W_q.shape[0], query_size=W_q.shape[1], key_size=W_k.shape[1])
        with torch.no_grad():
            module.W_q.weight.copy_(W_q)
            module.W_k.weight.copy_(W_k)
            module.w_v.weight.copy_(w_v[None, :])
            with cl.recording_attention(module):
                context = module(s[:, None, :], enc, enc, cl.padding_mask(valid_lens, enc.shape[1]))[:, 0]
        return context, module.attention_weights[:, 0]

    passes("bahdanau.context", via_library)


def test_loop_reference_matches_the_library_with_padding():
    g = torch.Generator().manual_seed(0)
    s, enc = torch.randn(3, 5, generator=g), torch.randn(3, 6, 4, generator=g)
    W_q, W_k, w_v = torch.randn(7, 5, generator=g), torch.randn(7, 4, generator=g), torch.randn(7, generator=g)
    lens = torch.tensor([6, 1, 3])
    context, weights = _loop_context(s, enc, lens, W_q, W_k, w_v)
    assert torch.allclose(weights.sum(-1), torch.ones(3, dtype=torch.float64))
    assert bool((weights[1, 1:] == 0).all()) and bool((weights[2, 3:] == 0).all())
    assert torch.allclose(context[1], enc[1, 0].double())  # one valid position: its value, exactly
    lib_weights = cl.masked_softmax(cl.additive_scores(s[:, None], enc, W_q, W_k, w_v), lens)[:, 0]
    assert torch.allclose(weights, lib_weights.double(), atol=1e-6)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (context_unmasked, "must get weight 0"),
        (context_softmax_over_batch, "over the batch axis"),
        (context_without_tanh, "the tanh is missing"),
        (context_swapped_projections, "your function raised"),
        (context_mean_of_values, "your weights are right"),
        (context_keeps_query_axis, "squeeze the query axis"),
    ],
)
def test_context_wrong_answers_fail_with_hint(answer, hint):
    fails_with("bahdanau.context", answer, hint)


def test_context_swap_is_named_when_sizes_agree():
    def swapped_only_when_square(s, enc, valid_lens, W_q, W_k, w_v):
        if W_q.shape == W_k.shape:
            return context_unmasked_right(s, enc, valid_lens, W_k, W_q, w_v)
        return context_unmasked_right(s, enc, valid_lens, W_q, W_k, w_v)

    fails_with("bahdanau.context", swapped_only_when_square, "swapped")


# --- bahdanau.greedy ----------------------------------------------------------------------------


def _loop(model, src, src_valid_lens, max_len, bos, *, feed_back=True, fresh_state=True):
    """Yield (step, predicted id) of a greedy loop with optional deliberate mistakes."""
    state0 = model.init_decoder_state(model.encode(src, src_valid_lens), src_valid_lens)
    state, token = state0, torch.tensor([[bos]])
    for step in range(max_len):
        logits, new_state = model.decode_step(token, state if fresh_state else state0)
        state = new_state
        pred = logits.argmax(-1, keepdim=True)
        token = pred if feed_back else torch.tensor([[bos]])
        yield step, int(pred)


def greedy_keeps_bos(model, src, src_valid_lens, max_len, bos, eos):
    out = [bos]
    for _, t in _loop(model, src, src_valid_lens, max_len, bos):
        if t == eos:
            break
        out.append(t)
    return out


def greedy_keeps_eos(model, src, src_valid_lens, max_len, bos, eos):
    out = []
    for _, t in _loop(model, src, src_valid_lens, max_len, bos):
        out.append(t)
        if t == eos:
            break
    return out


def greedy_never_stops(model, src, src_valid_lens, max_len, bos, eos):
    return [t for _, t in _loop(model, src, src_valid_lens, max_len, bos)]


def greedy_always_feeds_bos(model, src, src_valid_lens, max_len, bos, eos):
    out = []
    for _, t in _loop(model, src, src_valid_lens, max_len, bos, feed_back=False):
        if t == eos:
            break
        out.append(t)
    return out


def greedy_reuses_first_state(model, src, src_valid_lens, max_len, bos, eos):
    out = []
    for _, t in _loop(model, src, src_valid_lens, max_len, bos, fresh_state=False):
        if t == eos:
            break
        out.append(t)
    return out


def greedy_returns_a_batch(model, src, src_valid_lens, max_len, bos, eos):
    return cl.greedy_decode(model, src, src_valid_lens, max_len, bos=bos, eos=eos)


def greedy_flat_tokens(model, src, src_valid_lens, max_len, bos, eos):
    state = model.init_decoder_state(model.encode(src, src_valid_lens), src_valid_lens)
    logits, state = model.decode_step(torch.tensor([bos]), state)  # (1,) instead of (1, 1)
    return [int(logits.argmax())]


def test_greedy_notebook_solution_passes(solution_function):
    answer = solution_function("ch04-ex-greedy", "greedy_one")
    assert passes("bahdanau.greedy", answer).n_checks == 12


def test_greedy_through_the_library_passes():
    def via_library(model, src, src_valid_lens, max_len, bos, eos):
        return cl.greedy_decode(model, src, src_valid_lens, max_len, bos=bos, eos=eos)[0]

    passes("bahdanau.greedy", via_library)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (greedy_keeps_bos, "starts with <bos>"),
        (greedy_keeps_eos, "leave it out of the result"),
        (greedy_never_stops, "You kept generating after it"),
        (greedy_always_feeds_bos, "feeds back its own argmax"),
        (greedy_reuses_first_state, "passed an old state"),
        (greedy_returns_a_batch, "not a batch"),
        (greedy_flat_tokens, "(1, 1) long tensor"),
    ],
)
def test_greedy_wrong_answers_fail_with_hint(answer, hint):
    fails_with("bahdanau.greedy", answer, hint)


def test_greedy_ignoring_max_len_fails():
    def ignores_max_len(model, src, src_valid_lens, max_len, bos, eos):
        out = []
        for _, t in _loop(model, src, src_valid_lens, 50, bos):
            if t == eos:
                break
            out.append(t)
        return out

    fails_with("bahdanau.greedy", ignores_max_len, "max_len = 3")


def test_checkers_leave_the_global_rng_alone(solution_function):
    answer = solution_function("ch04-ex-greedy", "greedy_one")
    before = torch.random.get_rng_state()
    check("bahdanau.greedy", answer, quiet=True)
    check("bahdanau.context", solution_function("ch04-ex-context", "bahdanau_context"), quiet=True)
    assert torch.equal(before, torch.random.get_rng_state())
