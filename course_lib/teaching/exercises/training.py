"""Checkers for the exercises of chapter 8, training and inference on the dates task.

The references are computed independently of the code paths the exercises ask for: greedy
decoding by rerunning the teacher-forcing ``forward`` on the whole prefix, one sentence at a time
and without padding (never ``decode_step`` or the key/value cache); the label-smoothed loss with
``torch.nn.functional.cross_entropy(..., label_smoothing=eps, ignore_index=...)`` in float64; beam
search by a list-based search over a next-token function (never ``course_lib.decoding.search``'s batched one).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from ...utils import seeded
from ._core import (
    ExerciseFailure,
    book_or_drawn,
    call,
    checker,
    close,
    count_cases,
    equal,
    expect,
    expect_close,
    expect_none_of,
    expect_same,
    generator,
    integer,
)

_BOS, _EOS = 1, 2


# --- greedy decoding with the cache ------------------------------------------------------------


def _small_transformer():
    """A fixed, untrained Transformer with peaked, varied next-token distributions (7 target ids).

    Built under its own seed without touching the caller's random state; dropout 0.1 so that a
    loop that forgets ``model.eval()`` decodes differently.
    """
    from ...models.transformer import Transformer, TransformerConfig

    with seeded(8, deterministic=False):
        config = TransformerConfig(11, 7, num_hiddens=16, ffn_num_hiddens=32, num_heads=2, num_enc_layers=1,
                                   num_dec_layers=2, dropout=0.1, max_len=64)
        model = Transformer(config)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(2.0)  # larger weights: confident, input-dependent predictions
            # Never <pad> or <bos>; <eos> a little likelier, so sequences end at different steps.
            model.decoder.dense.bias[:_EOS] = -30.0
            model.decoder.dense.bias[_EOS] += 1.0
    return model.eval()


def _greedy_cases() -> list[tuple[str, torch.Tensor, torch.Tensor, int]]:
    """(name, src (B, S), src_valid_lens (B,), max_len): padded batches, early and late <eos>."""
    g = generator(5)
    src = torch.randint(3, 11, (6, 7), generator=g)
    lens = torch.tensor([7, 3, 5, 1, 6, 2])
    src = src.masked_fill(torch.arange(7) >= lens[:, None], 0)  # <pad> = 0 after each length
    return [
        ("a padded batch of 6 sources, max_len=9", src, lens, 9),
        ("the same batch with max_len=2", src, lens, 2),
        ("one source of length 7, max_len=12", src[:1].clone(), torch.tensor([7]), 12),
    ]


def _reference_greedy(model, src: torch.Tensor, src_valid_lens: torch.Tensor, max_len: int,
                      use_lens: bool = True, decoder_input: str = "prefix") -> list[list[int]]:
    """Greedy decoding by the full forward pass, one unpadded source at a time.

    ``decoder_input`` selects what the decoder reads at each step: ``"prefix"`` (right: ``<bos>`` and
    every token chosen so far), or two typical mistakes, ``"bos"`` (``<bos>`` fed again at every
    step) and ``"last"`` (only the last token, at position 0: the initial state reused at every step).
    ``use_lens=False`` encodes the padding as if it were part of the source.
    """
    out = []
    with torch.no_grad():
        for b in range(src.shape[0]):
            n = int(src_valid_lens[b]) if use_lens else src.shape[1]
            x = src[b:b + 1, :n]
            tokens = [_BOS]
            for t in range(max_len):
                tgt_in = {"prefix": tokens, "bos": [_BOS] * (t + 1), "last": tokens[-1:]}[decoder_input]
                logits = model(x, torch.tensor([n]), torch.tensor([tgt_in]))[0, -1]  # (V,)
                nxt = int(logits.argmax())
                if nxt == _EOS:
                    break
                tokens.append(nxt)
            out.append(tokens[1:])
    return out


def _as_id_lists(got: object, batch: int, case: str) -> list[list[int]]:
    if isinstance(got, torch.Tensor):
        raise ExerciseFailure(f"{case}: return a list of {batch} lists of token ids (sequences have different "
                              f"lengths), got a tensor of shape {tuple(got.shape)}")
    expect(isinstance(got, (list, tuple)) and len(got) == batch,
           f"{case}: expected a list with one list of token ids per source ({batch}), got "
           f"{type(got).__name__}{f' of length {len(got)}' if isinstance(got, (list, tuple)) else ''}")
    rows = []
    for i, row in enumerate(got):
        if isinstance(row, torch.Tensor):
            row = row.tolist()
        expect(isinstance(row, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in row),
               f"{case}: sequence {i} must be a list of int token ids, got {row!r}")
        rows.append(list(row))
    return rows


class _Counting:
    """Count the calls of ``model.forward`` and ``model.decode_step`` (instance attributes shadow the methods)."""

    def __init__(self, model) -> None:
        self.model, self.forward, self.decode_step = model, 0, 0
        forward, decode_step = model.forward, model.decode_step

        def counted_forward(*args, **kwargs):
            self.forward += 1
            return forward(*args, **kwargs)

        def counted_decode_step(*args, **kwargs):
            self.decode_step += 1
            return decode_step(*args, **kwargs)

        model.forward, model.decode_step = counted_forward, counted_decode_step

    def restore(self) -> None:
        del self.model.forward, self.model.decode_step


def _diagnose_greedy(got: list[list[int]], model, src: torch.Tensor, lens: torch.Tensor, max_len: int,
                     case: str) -> None:
    expected = _reference_greedy(model, src, lens, max_len)
    if got == expected:
        return
    for i, row in enumerate(got):
        if row[:1] == [_BOS]:
            raise ExerciseFailure(f"{case}: sequence {i} starts with <bos> (id {_BOS}): <bos> is only the first "
                                  f"decoder input; return the generated tokens, got {row}")
        if len(row) > max_len:
            raise ExerciseFailure(f"{case}: sequence {i} has {len(row)} tokens but max_len={max_len} allows at most "
                                  f"{max_len} (the <eos> counts as one of them)")
    for i, (row, ref) in enumerate(zip(got, expected, strict=True)):
        if _EOS in row:
            more = " and stop the sequence there" if row[:row.index(_EOS)] == ref else ""
            raise ExerciseFailure(f"{case}: sequence {i} contains <eos> (id {_EOS}): leave the <eos> out{more}. "
                                  f"Expected {ref}, got {row}")
    mistakes = [
        (dict(use_lens=False), "your outputs are what the model gives when the padding is *not* masked. Pass "
         "src_valid_lens to model.encode and model.init_decoder_state so that the encoder and the "
         "cross-attention ignore the padded source positions"),
        (dict(decoder_input="bos"), "your outputs are what the model gives when <bos> is fed at every step. "
         "Feed the token just chosen (the argmax, shape (batch, 1)) as the next input"),
        (dict(decoder_input="last"), "your outputs are what the model gives when every step starts again from "
         "the initial state. Keep the state that decode_step returns: logits, state = model.decode_step(tokens, "
         "state)"),
    ]
    expect_none_of(got, expected, [(partial(_reference_greedy, model, src, lens, max_len, **kwargs), f"{case}: {hint}")
                                   for kwargs, hint in mistakes], same=equal)
    for i, (row, ref) in enumerate(zip(got, expected, strict=True)):
        if len(row) > len(ref) and row[:len(ref)] == ref:
            raise ExerciseFailure(
                f"{case}: sequence {i} goes on after its <eos>: expected {ref}, got {row}. Each sequence stops at "
                "its own <eos> (keep a `finished` flag per sequence; stop the loop when all are finished)")
    for i, (row, ref) in enumerate(zip(got, expected, strict=True)):
        if row != ref:
            t = next((k for k, (a, b) in enumerate(zip(row, ref, strict=False)) if a != b), min(len(row), len(ref)))
            raise ExerciseFailure(
                f"{case}: sequence {i}: expected {ref}, got {row} (first difference at step {t}). At every step feed "
                "the token just chosen (the argmax of the logits) as the next input, shape (batch, 1), and keep "
                "the state that decode_step returns")


@checker("training.greedy_decode_loop",
         "greedy_decode_loop(model, src, src_valid_lens, bos, eos, max_len) with encode/init_decoder_state/decode_step")
def check_greedy_decode_loop(answer: Callable) -> int:
    model = _small_transformer()

    def one(case: tuple[str, torch.Tensor, torch.Tensor, int]) -> None:
        name, src, lens, max_len = case
        counter = _Counting(model)
        try:
            got = call(answer, name, model, src.clone(), lens.clone(), _BOS, _EOS, max_len)
        finally:
            counter.restore()
        rows = _as_id_lists(got, src.shape[0], name)
        expect(counter.decode_step > 0,
               f"{name}: your function never called model.decode_step. Decode incrementally: "
               "state = model.init_decoder_state(model.encode(src, src_valid_lens), src_valid_lens), then "
               "logits, state = model.decode_step(previous_tokens, state) once per step")
        expect(counter.decode_step <= max_len,
               f"{name}: model.decode_step was called {counter.decode_step} times for max_len={max_len}: at most "
               "one call per generated token (stop after max_len steps, or when every sequence has its <eos>)")
        _diagnose_greedy(rows, model, src, lens, max_len, name)

    def in_training_mode(case: tuple[str, torch.Tensor, torch.Tensor, int]) -> None:
        # Dropout must be off while decoding, whatever mode the caller left the model in.
        name, src, lens, max_len = case
        expected = _reference_greedy(model, src, lens, max_len)
        model.train()
        with seeded(0, deterministic=False):
            got = _as_id_lists(call(answer, f"{name}, model in training mode", model, src.clone(), lens.clone(),
                                     _BOS, _EOS, max_len), src.shape[0], name)
        expect(got == expected,
               "with the model left in training mode (dropout on) your tokens change: decoding must run with "
               "dropout off. Call model.eval() first (and torch.no_grad() saves memory)")

    cases = _greedy_cases()
    return count_cases(cases, one) + count_cases(cases[:1], in_training_mode)


# --- label-smoothed masked cross-entropy -------------------------------------------------------


def _reference_ls(logits: torch.Tensor, targets: torch.Tensor, valid_lens: torch.Tensor, eps: float) -> torch.Tensor:
    """torch's label-smoothed cross-entropy over the valid positions only (padding marked -100)."""
    keep = torch.arange(targets.shape[1]) < valid_lens[:, None]
    return F.cross_entropy(logits.double().transpose(1, 2), targets.masked_fill(~keep, -100),
                           ignore_index=-100, label_smoothing=eps)


def _ls_cases() -> list[tuple[str, torch.Tensor, torch.Tensor, torch.Tensor, float]]:
    g = generator(11)
    B, T, V = 3, 5, 6
    logits = 2.0 * torch.randn(B, T, V, generator=g)
    # Padded positions hold ordinary ids, not <pad>: only valid_lens says where a target ends.
    targets = torch.randint(0, V, (B, T), generator=g)
    lens = torch.tensor([5, 2, 3])
    return [
        ("eps=0.1, valid_lens [5, 2, 3]", logits, targets, lens, 0.1),
        ("eps=0 (no smoothing), valid_lens [5, 2, 3]", logits, targets, lens, 0.0),
        ("eps=0.3, valid_lens [1, 4, 0]", logits, targets, torch.tensor([1, 4, 0]), 0.3),
        ("eps=0.1, one sequence without padding", logits[:1], targets[:1], torch.tensor([5]), 0.1),
    ]


def _ls_other_classes(logits, targets, valid_lens, eps):
    """eps spread over the V - 1 wrong classes only (a common variant, not torch's nor the paper's)."""
    logp = F.log_softmax(logits.double(), -1)
    V = logits.shape[-1]
    q = torch.full_like(logp, eps / (V - 1)).scatter(-1, targets[..., None], 1 - eps)
    keep = (torch.arange(targets.shape[1]) < valid_lens[:, None]).double()
    return (-(q * logp).sum(-1) * keep).sum() / keep.sum()


@checker("training.label_smoothed_masked_ce",
         "label_smoothed_masked_ce(logits, targets, valid_lens, eps): mean over real tokens, smoothing over all V")
def check_label_smoothed_masked_ce(answer: Callable) -> int:
    def one(case: tuple[str, torch.Tensor, torch.Tensor, torch.Tensor, float]) -> int:
        name, logits, targets, lens, eps = case
        x = logits.clone().requires_grad_(True)
        got = call(answer, name, x, targets.clone(), lens.clone(), eps)
        expect(isinstance(got, torch.Tensor), f"{name}: expected a scalar tensor, got {type(got).__name__}")
        expect(got.dim() == 0, f"{name}: expected a scalar (shape ()), got shape {tuple(got.shape)}: average "
                               "the token losses over the valid positions")
        expected = _reference_ls(logits, targets, lens, eps)
        keep = (torch.arange(targets.shape[1]) < lens[:, None]).double()
        scores = logits.double().transpose(1, 2)

        def token_losses() -> torch.Tensor:
            return F.cross_entropy(scores, targets, label_smoothing=eps, reduction="none")

        def by_pad_id() -> torch.Tensor:
            nonzero = (targets != 0).double()
            return (token_losses() * nonzero).sum() / nonzero.sum()

        mistakes = [
            (lambda: F.cross_entropy(scores, targets, label_smoothing=eps),
             "the padded positions are counted: keep only the positions t < valid_lens[b] "
             "(a mask from valid_lens, not from the ids: padded targets may hold any id)"),
            (lambda: _ls_other_classes(logits, targets, lens, eps),
             "you spread eps over the V - 1 wrong classes; here (as in torch and Vaswani et al.) the "
             "smoothed target is q = (1 - eps) one_hot(y) + eps / V over *all* V classes"),
            (by_pad_id, "you masked the positions whose target is the <pad> id 0; padded positions may hold "
                        "any id, so build the mask from valid_lens: t < valid_lens[b]"),
            (lambda: ((token_losses() * keep).sum(1)[lens > 0] / lens[lens > 0]).mean(),
             "you averaged per sequence and then over sequences; average over all valid "
             "tokens at once (sum of token losses / number of valid tokens)"),
            (lambda: (token_losses() * keep).sum(),
             "you returned the sum of the token losses; divide by the number of valid tokens"),
        ]
        extra = (" With eps=0 it must equal the masked cross-entropy cl.masked_cross_entropy."
                 if eps == 0 else " The token loss is (1 - eps) (-log p_y) + eps mean_v (-log p_v).")
        e, g = expected.item(), got.item()
        expect_same(got, expected, [(result, f"{name}: {hint}. Expected {e:.5f}, got {g:.5f}")
                                    for result, hint in mistakes],
                    same=close, otherwise=f"{name}: expected {e:.5f}, got {g:.5f}.{extra}")
        expect(got.requires_grad, f"{name}: the result does not depend on logits through autograd (no .item(), "
                                  "no .detach(), no numpy); the loss must be differentiable")
        got.backward()
        ref_x = logits.clone().double().requires_grad_(True)
        _reference_ls(ref_x, targets, lens, eps).backward()
        expect_close(x.grad, ref_x.grad, f"{name}: gradient with respect to logits")
        return 2

    return count_cases(_ls_cases(), one)


# --- beam search over a next-token model ---------------------------------------------------------
#
# The student's beam_search(next_log_probs, eos, max_len, beam_size, alpha) sees the model only through
# next_log_probs(prefix) -> (V,) log-probabilities of the next token after the list ``prefix`` (no <bos>).
# The reference below is written for clarity (lists, one sort per step), independently of
# course_lib.decoding.search.beam_search's batched tensors; the tests pin the two together on a Transformer.


def _lp(length: int, alpha: float) -> float:
    """GNMT's length penalty ((5 + |y|) / 6) ** alpha, |y| counting <eos>."""
    return ((5 + length) / 6) ** alpha


def _reference_beam(next_log_probs: Callable, eos: int, max_len: int, beam_size: int, alpha: float, *,
                    penalty: bool = True, keep_finished: bool = True, stop: str = "all",
                    eos_in_length: bool = True) -> list[int]:
    """Beam search as the exercise states it; the keyword switches are typical mistakes (for the hints).

    ``penalty=False`` ranks by the raw log-probability; ``keep_finished=False`` moves a finished
    hypothesis out of the beam into a list and refills the beam with live ones; ``stop="best"`` stops as
    soon as the best hypothesis has finished; ``eos_in_length=False`` leaves <eos> out of |y|.
    """
    def done(tokens: tuple[int, ...]) -> bool:
        return bool(tokens) and tokens[-1] == eos

    def key(hyp: tuple[tuple[int, ...], float]) -> float:
        tokens, score = hyp
        if not penalty:
            return score
        return score / _lp(len(tokens) - (0 if eos_in_length or not done(tokens) else 1), alpha)

    beam: list[tuple[tuple[int, ...], float]] = [((), 0.0)]
    finished: list[tuple[tuple[int, ...], float]] = []
    for _ in range(max_len):
        candidates = []
        for tokens, score in beam:
            if done(tokens):
                candidates.append((tokens, score))
                continue
            logp = next_log_probs(list(tokens))
            candidates += [(tokens + (v,), score + float(logp[v])) for v in range(logp.shape[0])]
        ranked = sorted(candidates, key=key, reverse=True)
        if keep_finished:
            beam = ranked[:beam_size]
        else:
            finished += [h for h in ranked[:beam_size] if done(h[0])]
            beam = [h for h in ranked if not done(h[0])][:beam_size]
        if not beam or all(done(t) for t, _ in beam) or (stop == "best" and done(max(beam, key=key)[0])):
            break
    best = max(beam + finished, key=key)[0]
    return list(best[:-1]) if done(best) else list(best)


class _TableModel:
    """A next-token model from a table {prefix (tuple): probabilities}, ``default`` for the other prefixes."""

    def __init__(self, table: dict[tuple[int, ...], list[float]], default: list[float]) -> None:
        self.table, self.default = table, default

    def __call__(self, prefix) -> torch.Tensor:
        probs = self.table.get(tuple(int(t) for t in prefix), self.default)
        return torch.tensor(probs, dtype=torch.float64).log()


class _RandomModel:
    """A fixed random next-token model over V tokens: the log-probabilities after a prefix are drawn from
    a generator seeded by the prefix, so the same prefix always gets the same distribution."""

    def __init__(self, seed: int, V: int, eos: int, sharpness: float) -> None:
        self.seed, self.V, self.eos, self.sharpness = seed, V, eos, sharpness

    def __call__(self, prefix) -> torch.Tensor:
        key = self.seed
        for t in prefix:
            key = (key * 1_000_003 + int(t) + 1) % (2**61 - 1)
        g = torch.Generator().manual_seed(key)
        logits = self.sharpness * torch.randn(self.V, generator=g, dtype=torch.float64)
        logits[self.eos] += 0.7 * len(prefix) - 1.5  # rarely at once, more often as the prefix grows
        return torch.log_softmax(logits, dim=0)


# The figure's toy model (course_lib.teaching.diagrams.beam_search_diagram): tokens A = 0, B = 1, <eos> = 2.
_TOY_TABLE = {
    (): [0.5, 0.4, 0.1],
    (0,): [0.15, 0.45, 0.4],
    (1,): [0.8, 0.1, 0.1],
    (0, 1): [0.2, 0.2, 0.6],
    (1, 0): [0.05, 0.05, 0.9],
}
_TOY_DEFAULT = [0.3, 0.3, 0.4]


def _beam_cases() -> list[tuple[str, Callable, int, int, int, float]]:
    """(description, model, eos, max_len, beam_size, alpha): random models of several sizes and widths, drawn
    until each mistake of ``_BEAM_MISTAKES`` and greedy decoding gives a wrong answer on two of them."""
    g = generator(23)
    cases, exposes = [], [0] * (len(_BEAM_MISTAKES) + 1)
    for k in range(400):
        V = integer(g, 3, 6)
        eos = integer(g, 0, V - 1)
        beam_size = integer(g, 2, min(4, V))
        alpha = (0.0, 0.6, 1.0, 2.0)[k % 4]
        model = _RandomModel(integer(g, 0, 2**31 - 1), V, eos, (1.0, 2.0, 3.0)[k % 3])
        max_len = integer(g, 3, 7)
        expected = _reference_beam(model, eos, max_len, beam_size, alpha)
        wrong = [_reference_beam(model, eos, max_len, beam_size, alpha, **kw) != expected for kw, _ in _BEAM_MISTAKES]
        wrong.append(_reference_beam(model, eos, max_len, 1, alpha) != expected)
        new = [i for i, w in enumerate(wrong) if w and exposes[i] < 2]
        if new or (len(cases) < 8 and k % 5 == 0):
            for i in new:
                exposes[i] += 1
            cases.append((f"a random model over {V} tokens (<eos> = {eos}), beam_size={beam_size}, alpha={alpha}, "
                          f"max_len={max_len}", model, eos, max_len, beam_size, alpha))
        if min(exposes) >= 2 and len(cases) >= 12:
            break
    return cases


def _as_tokens(got: object, case: str) -> list[int]:
    if isinstance(got, torch.Tensor):
        got = got.tolist()
    expect(isinstance(got, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in got),
           f"{case}: return the best sequence as a list of int token ids, got {got!r}")
    return list(got)


_BEAM_MISTAKES = [
    (dict(penalty=False), "you ranked the hypotheses by their log-probability alone; with alpha > 0 rank them by "
                          "log P(y|x) / lp(y), lp(y) = ((5 + |y|) / 6) ** alpha, when choosing the beam at every "
                          "step and the answer at the end"),
    (dict(eos_in_length=False), "your length penalty leaves <eos> out of |y|; here |y| counts it (as cl.beam_search "
                                "does)"),
    (dict(keep_finished=False), "you moved finished hypotheses out of the beam; here a hypothesis that has produced "
                                "<eos> stays in the beam, unchanged, and competes with the live ones for the "
                                "beam_size places at every step"),
    (dict(stop="best"), "you stopped as soon as the best hypothesis had finished; go on until every hypothesis in "
                        "the beam has finished (or max_len steps): with alpha > 0 a longer one can still overtake"),
]


@checker("training.beam_search",
         "beam_search(next_log_probs, eos, max_len, beam_size, alpha): the best sequence by log P / lp, <eos> cut off")
def check_beam_search(answer: Callable) -> int:
    def toy() -> None:
        # The figure's model: greedy decoding gives A B (probability 0.135), the beam of 2 finds B A (0.288).
        model = _TableModel(_TOY_TABLE, _TOY_DEFAULT)
        got = _as_tokens(call(answer, "the figure's toy model, beam_size=2", model, 2, 5, 2, 0.0), "toy model")
        expect(2 not in got, f"on the figure's toy model (<eos> = 2) you returned {got}: leave <eos> out of the "
                             "returned sequence")
        greedy = _reference_beam(model, 2, 5, 1, 0.0)
        expect_same(got, [1, 0], [(greedy, f"on the figure's toy model you returned {got}, greedy decoding's answer "
                                           "(A B, probability 0.135): keep the beam_size best prefixes at every step, "
                                           "not only the best one")],
                    otherwise=f"on the figure's toy model (A = 0, B = 1, <eos> = 2) with beam_size=2 the answer is "
                              f"[1, 0] (B A, probability 0.288), got {got}")

    cases = _beam_cases()

    def random_models(_: None) -> int:
        # All answers first: a hint names a mistake only when it explains every answer.
        got = [_as_tokens(call(answer, name, model, eos, max_len, beam_size, alpha), name)
               for name, model, eos, max_len, beam_size, alpha in cases]
        expected = [_reference_beam(model, eos, max_len, k, alpha) for _, model, eos, max_len, k, alpha in cases]
        wrong = [i for i, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b]
        if not wrong:
            return len(cases)
        i = wrong[0]
        name, model, eos, max_len, beam_size, alpha = cases[i]
        expect(eos not in got[i], f"{name}: your sequence {got[i]} contains <eos> ({eos}); leave it out (and stop a "
                                  "hypothesis there)")
        expect(len(got[i]) <= max_len, f"{name}: your sequence has {len(got[i])} tokens; at most max_len={max_len}")
        for kw, hint in _BEAM_MISTAKES:
            if all(g == _reference_beam(m, e, n, k, a, **kw) for g, (_, m, e, n, k, a) in zip(got, cases, strict=True)):
                raise ExerciseFailure(f"{name}: {hint}. Expected {expected[i]}, got {got[i]}")
        greedy = [_reference_beam(m, e, n, 1, a) for _, m, e, n, _, a in cases]
        expect(got != greedy, f"{name}: you returned greedy decoding's answer {got[i]}; keep beam_size={beam_size} "
                              f"hypotheses at every step (expected {expected[i]})")
        raise ExerciseFailure(f"{name}: expected {expected[i]}, got {got[i]}. At every step extend each live "
                              "hypothesis by every token, keep finished ones as they are, and keep the beam_size "
                              "candidates with the best log P / lp")

    toy_case = book_or_drawn([toy], 29, lambda g: [])  # the hidden variants draw only random models
    return count_cases(toy_case, lambda step: step()) + count_cases([None], random_models)
