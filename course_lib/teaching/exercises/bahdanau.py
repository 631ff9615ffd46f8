"""Checkers for the exercises of chapter 4, Bahdanau attention.

The references never go through the student's code path:

- ``bahdanau.context``: scores, masked softmax and context by Python loops in float64, one example
  and one source position at a time;
- ``bahdanau.greedy``: a scripted model whose greedy output is known in closed form (it copies its
  source back, but only while it is fed its own previous prediction), and small random GRU
  encoder--decoders decoded by :func:`course_lib.greedy_decode`, with and without its incremental
  cache.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ...decoding.search import greedy_decode
from ...models.rnn import BahdanauSeq2Seq, Seq2SeqRNN, Seq2SeqRNNConfig
from ...utils import seeded
from ._core import (
    ExerciseFailure,
    call,
    checker,
    close,
    count_cases,
    equal,
    expect,
    expect_close,
    expect_match,
    expect_none_of,
    expect_same,
    generator,
    hinted,
)

# --- bahdanau.context ---------------------------------------------------------------------------


def _loop_context(s: torch.Tensor, enc: torch.Tensor, lens: torch.Tensor, W_q: torch.Tensor, W_k: torch.Tensor,
                  w_v: torch.Tensor, activation: Callable[[torch.Tensor], torch.Tensor] = torch.tanh,
                  masked: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Context and weights by loops in float64.

    ``e_j = w_v . act(W_q s + W_k h_j)`` for ``j < lens[b]`` (every ``j`` when ``masked`` is False),
    ``alpha = softmax(e)`` over those positions (0 elsewhere), ``c = sum_j alpha_j h_j``.

    Returns:
        context (B, H_enc) and weights (B, S), float64.
    """
    Wq, Wk, wv = W_q.double(), W_k.double(), w_v.double()
    B, S, H_enc = enc.shape
    context = torch.zeros(B, H_enc, dtype=torch.float64)
    weights = torch.zeros(B, S, dtype=torch.float64)
    for b in range(B):
        n = int(lens[b]) if masked else S
        query = Wq @ s[b].double()  # (h,)
        scores = [float(torch.dot(wv, activation(query + Wk @ enc[b, j].double()))) for j in range(n)]
        top = max(scores)  # subtracting the max keeps exp finite
        exps = [math.exp(e - top) for e in scores]
        total = sum(exps)
        for j in range(n):
            weights[b, j] = exps[j] / total
            context[b] += weights[b, j] * enc[b, j].double()
    return context, weights


def _context_case(g: torch.Generator, B: int, S: int, H_dec: int, H_enc: int, h: int,
                  lens: list[int]) -> tuple[torch.Tensor, ...]:
    s = torch.randn(B, H_dec, generator=g)
    enc = torch.randn(B, S, H_enc, generator=g)
    valid = torch.arange(S)[None, :] < torch.tensor(lens)[:, None]
    # Large values at padded positions: a context that lets them in is far off, not subtly off.
    enc = torch.where(valid[..., None], enc, 5.0 + 5.0 * torch.rand(B, S, H_enc, generator=g))
    W_q = torch.randn(h, H_dec, generator=g) / math.sqrt(H_dec)
    W_k = torch.randn(h, H_enc, generator=g) / math.sqrt(H_enc)
    w_v = torch.randn(h, generator=g)
    return s, enc, torch.tensor(lens), W_q, W_k, w_v


@checker("bahdanau.context",
         "bahdanau_context(decoder_state, enc_outputs, valid_lens, W_q, W_k, w_v) -> (context, weights), "
         "padding ignored")
def check_context(answer: Callable) -> int:
    g = generator(4)
    # (B, S, H_dec, H_enc, h, valid lengths): sizes that all differ (a swapped W_q/W_k crashes), one
    # example with no padding, and H_dec == H_enc (a swap then runs and must be caught by its values).
    cases = [(3, 7, 5, 6, 4, [7, 2, 4]), (1, 5, 3, 4, 6, [3]), (4, 6, 8, 8, 8, [1, 6, 3, 5])]

    def one(case: tuple[int, int, int, int, int, list[int]]) -> int:
        B, S, H_dec, H_enc, h, lens = case
        s, enc, valid_lens, W_q, W_k, w_v = _context_case(g, B, S, H_dec, H_enc, h, lens)
        name = (f"decoder_state {(B, H_dec)}, enc_outputs {(B, S, H_enc)}, valid_lens {lens}, "
                f"W_q {(h, H_dec)}, W_k {(h, H_enc)}")
        got = call(answer, name, s.clone(), enc.clone(), valid_lens.clone(), W_q.clone(), W_k.clone(), w_v.clone())
        expect(isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(t, torch.Tensor) for t in got),
               f"{name}: return the pair (context, weights) of tensors, got {type(got).__name__}")
        context, weights = got
        ref_context, ref_weights = _loop_context(s, enc, valid_lens, W_q, W_k, w_v)
        if tuple(weights.shape) in ((B, 1, S), (B, S, 1)) or tuple(context.shape) == (B, 1, H_enc):
            raise ExerciseFailure(
                f"{name}: expected context of shape {(B, H_enc)} and weights of shape {(B, S)}, got "
                f"{tuple(context.shape)} and {tuple(weights.shape)}: there is one query per example, so "
                "squeeze the query axis away (e.g. .squeeze(1)).")
        expect(tuple(weights.shape) == (B, S),
               f"{name}: weights must have shape (batch, S) = {(B, S)}, got {tuple(weights.shape)}")
        expect(tuple(context.shape) == (B, H_enc),
               f"{name}: context must have shape (batch, H_enc) = {(B, H_enc)}, got {tuple(context.shape)}")
        w64 = weights.detach().to("cpu", torch.float64)
        expect(not bool(torch.isnan(w64).any()), f"{name}: your weights contain NaN: {w64.tolist()}")
        if not close(w64, ref_weights):
            # Properties a wrong answer lacks come first, then the results of anticipated mistakes.
            expect(not (B > 1 and bool(torch.allclose(w64.sum(0), torch.ones(S, dtype=torch.float64), atol=1e-4))),
                   f"{name}: your weights sum to 1 down each column (over the batch axis), not along each row: "
                   "the softmax must run over the source positions, dim=-1 of the (batch, S) scores.")
            padded = ~(torch.arange(S)[None, :] < valid_lens[:, None])
            if bool((w64[padded].abs() > 1e-6).any()):
                unmasked = _loop_context(s, enc, valid_lens, W_q, W_k, w_v, masked=False)[1]
                how = " (they equal a softmax over all S positions)" if close(w64, unmasked) else ""
                raise ExerciseFailure(
                    f"{name}: positions j >= valid_lens[b] are padding and must get weight 0, yours get "
                    f"{[round(v, 4) for v in w64[padded].tolist()]}{how}. Set their scores to -inf (or the most "
                    "negative finite float) before the softmax, e.g. with the mask "
                    "torch.arange(S) < valid_lens[:, None].")
            expect_none_of(w64, ref_weights, [(
                lambda: _loop_context(s, enc, valid_lens, W_q, W_k, w_v, activation=lambda x: x)[1],
                f"{name}: your weights are those of the score w_v^T (W_q s + W_k h_j): the tanh is missing. "
                "Without it the score is linear, the W_q s term is the same for every j and cancels in the "
                "softmax, so the weights would not depend on the decoder state at all.")])
            expect(bool(torch.allclose(w64.sum(-1), torch.ones(B, dtype=torch.float64), atol=1e-4)),
                   f"{name}: the weights of each example must sum to 1 over its valid positions; yours sum to "
                   f"{[round(v, 4) for v in w64.sum(-1).tolist()]}")
        swapped = [(lambda: _loop_context(s, enc, valid_lens, W_k, W_q, w_v)[1],
                    f"{name}: W_q and W_k are swapped: W_q projects the decoder state (the query) and W_k the "
                    "encoder outputs (the keys).")] if H_dec == H_enc else []
        expect_match(weights, ref_weights, f"{name}, weights (check the score w_v^T tanh(W_q s + W_k h_j): "
                                           "W_q multiplies the decoder state, W_k the encoder outputs)", swapped)
        with hinted("your weights are right; the context is c = sum_j alpha_j h_j, the weighted sum of the encoder "
                    "outputs (the values), e.g. (weights[:, :, None] * enc_outputs).sum(1) or "
                    "torch.bmm(weights[:, None, :], enc_outputs)[:, 0]."):
            expect_close(context, ref_context, f"{name}, context")
        return 2

    return count_cases(cases, one)


# --- bahdanau.greedy ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _ScriptState:
    src: torch.Tensor
    step: int
    prev: int
    call_id: int


class _ScriptedCopyModel(nn.Module):
    """A seq2seq "model" that copies its source ``x <eos>`` back one token per step.

    It predicts ``src[0, t]`` at step ``t`` (``<eos>`` at the end of the source), but only when the
    token fed at that step is its own previous prediction (``<bos>`` at step 0); fed anything else it
    predicts ``<unk>``. It records what it was fed, so the checker can say what went wrong.
    """

    def __init__(self, vocab_size: int = 10, bos: int = 1, eos: int = 2, unk: int = 3) -> None:
        super().__init__()
        self.vocab_size, self.bos, self.eos, self.unk = vocab_size, bos, eos, unk
        self.anchor = nn.Parameter(torch.zeros(()))  # gives the model a device and parameters
        self.fed: list[tuple[int, int, int]] = []  # (step, token fed, token expected)
        self.stale_state = False
        self._calls = 0

    def forward(self, *args: object) -> torch.Tensor:
        raise RuntimeError("this checker's model only supports encode, init_decoder_state and decode_step: "
                           "decode with decode_step, one token at a time")

    def encode(self, src: torch.Tensor, src_valid_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return src, src_valid_lens

    def init_decoder_state(self, memory: tuple[torch.Tensor, torch.Tensor],
                           src_valid_lens: torch.Tensor) -> _ScriptState:
        return _ScriptState(src=memory[0], step=0, prev=self.bos, call_id=-1)

    def decode_step(self, tokens: torch.Tensor, state: _ScriptState) -> tuple[torch.Tensor, _ScriptState]:
        if not isinstance(tokens, torch.Tensor) or tuple(tokens.shape) != (1, 1) or tokens.dtype != torch.long:
            shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise ValueError(f"tokens must be a (1, 1) long tensor (one token of one sequence), got {shape}")
        if not isinstance(state, _ScriptState):
            raise TypeError("state must be what init_decoder_state or the previous decode_step returned")
        if state.call_id != self._calls - 1:
            self.stale_state = True  # an old state was passed again
        self._calls += 1
        fed = int(tokens[0, 0])
        self.fed.append((state.step, fed, state.prev))
        S = state.src.shape[1]
        nxt = (int(state.src[0, state.step]) if state.step < S else self.eos) if fed == state.prev else self.unk
        logits = torch.full((1, self.vocab_size), -3.0)
        logits[0, nxt] = 3.0
        return logits, _ScriptState(state.src, state.step + 1, nxt, self._calls - 1)


def _as_ids(got: object, name: str) -> list[int]:
    if isinstance(got, torch.Tensor):
        expect(got.dim() == 1, f"{name}: return a flat list of token ids for the one example, got a tensor of shape "
                               f"{tuple(got.shape)}")
        return [int(v) for v in got.tolist()]
    expect(isinstance(got, (list, tuple)),
           f"{name}: return a list of token ids (ints), got {type(got).__name__}")
    if got and isinstance(got[0], (list, tuple)):
        raise ExerciseFailure(f"{name}: return one flat list of ids for the single example, not a batch of "
                              f"lists (got {got!r}).")
    try:
        return [int(v) for v in got]
    except (TypeError, ValueError):
        raise ExerciseFailure(f"{name}: return a list of token ids (ints), got {got!r}") from None


def _diagnose(ids: list[int], expected: list[int], max_len: int, bos: int, eos: int, name: str) -> None:
    expect_none_of(ids, expected, [([bos, *expected],
                                    f"{name}: your result starts with <bos> (id {bos}): it is the first input, not "
                                    "a prediction; return only the generated tokens.")], same=equal)
    if ids != expected and ids[: len(expected) + 1] == [*expected, eos]:
        raise ExerciseFailure(
            f"{name}: expected {expected}, got {ids}: stop at the first <eos> (id {eos}) and leave it out of the "
            "result." + (" You kept generating after it." if len(ids) > len(expected) + 1 else ""))
    expect(ids == expected or len(ids) <= max_len,
           f"{name}: you returned {len(ids)} tokens but max_len = {max_len}: generate at most max_len tokens "
           "(<eos> included).")
    expect_same(ids, expected, otherwise=f"{name}: expected {expected}, got {ids}.")


def _random_model(Model: type[nn.Module], seed: int, scale: float) -> nn.Module:
    """A small random GRU encoder-decoder whose greedy outputs depend on the source and end at different steps.

    Scaled-up weights and a larger <eos> bias: an untrained model at its initial scale repeats one token.
    Initialised under its own seed, leaving the caller's random state as it was.
    """
    config = Seq2SeqRNNConfig(src_vocab_size=13, tgt_vocab_size=11, embed_size=8, hidden_size=16,
                              num_layers=1, dropout=0.0)
    with seeded(seed, deterministic=False):
        model = Model(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
        model.decoder.dense.bias[2] += 2.0
    return model


@checker("bahdanau.greedy",
         "greedy_one(model, src, src_valid_lens, max_len, bos, eos): greedy decoding of one example with decode_step")
def check_greedy(answer: Callable) -> int:
    # A scripted model: its correct output is the source without <eos>, cut at max_len.
    scripted = [([5, 7, 4, 9, 6, 2], 6, 20), ([8, 4, 4, 2, 0, 0, 0], 4, 20), ([5, 7, 4, 9, 6, 2], 6, 3),
                ([2], 1, 5)]

    def one_scripted(case: tuple[list[int], int, int]) -> None:
        ids, length, max_len = case
        model = _ScriptedCopyModel()
        src, lens = torch.tensor([ids]), torch.tensor([length])
        name = f"a model that copies its source, src={ids}, max_len={max_len}"
        got = _as_ids(call(answer, name, model, src, lens, max_len, 1, 2), name)
        expected = ids[: length - 1][:max_len]
        expect(bool(model.fed), f"{name}: your function never called model.decode_step")
        expect(model.fed[0][1] == 1, f"{name}: the first token fed to decode_step must be <bos> (id 1), you fed "
                                     f"{model.fed[0][1]}.")
        expect(not model.stale_state,
               f"{name}: you passed an old state to decode_step again: use the state each call returns for the "
               "next call (state = new_state), it carries the decoder's hidden state forward.")
        wrong = [(t, fed, prev) for t, fed, prev in model.fed if fed != prev]
        if wrong:
            t, fed, prev = wrong[0]
            raise ExerciseFailure(
                f"{name}: at step {t} you fed token {fed}, but the previous prediction was {prev}: greedy decoding "
                "feeds back its own argmax, tokens = logits.argmax(-1) reshaped to (1, 1).")
        _diagnose(got, expected, max_len, 1, 2, name)

    # Small random GRU models (with and without attention), checked against course_lib.greedy_decode.
    randomised = []
    for Model, seed, scale in ((BahdanauSeq2Seq, 0, 4.0), (Seq2SeqRNN, 1, 3.0)):
        model, g = _random_model(Model, seed, scale), generator(10 + seed)
        for length in (3, 6, 9, 5):
            body = torch.randint(4, 13, (length - 1,), generator=g).tolist()
            randomised.append((model, torch.tensor([[*body, 2]]), torch.tensor([length])))

    def one_random(case: tuple[nn.Module, torch.Tensor, torch.Tensor]) -> None:
        model, src, lens = case
        max_len = 8
        with torch.no_grad():
            expected = greedy_decode(model, src, lens, max_len, bos=1, eos=2)[0]
            slow = greedy_decode(model, src, lens, max_len, bos=1, eos=2, use_cache=False)[0]
        assert expected == slow, "checker bug: cached and uncached greedy decoding disagree"
        name = f"a random {type(model).__name__}, src={src[0].tolist()}, max_len={max_len}"
        with torch.no_grad():
            got = _as_ids(call(answer, name, model, src.clone(), lens.clone(), max_len, 1, 2), name)
        _diagnose(got, expected, max_len, 1, 2, name)

    return count_cases(scripted, one_scripted) + count_cases(randomised, one_random)
