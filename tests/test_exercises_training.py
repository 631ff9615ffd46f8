"""The chapter 8 checkers accept the notebook's solutions and reject typical mistakes
with a specific hint (their stubs: test_exercises_core.py)."""

from __future__ import annotations

import pytest
import torch
from exercise_helpers import fails_with, passes

import course_lib as cl
from course_lib.teaching.exercises import check
from course_lib.teaching.exercises import training as training_checkers

NOTEBOOK = "08_training_and_inference.ipynb"


# --- training.greedy_decode_loop ----------------------------------------------------------------


def _loop(model, src, src_valid_lens, bos, eos, max_len, *, feed="argmax", keep_state=True, stop_at_eos=True,
          keep_eos=False, eval_mode=True):
    """A configurable greedy loop through decode_step: the defaults are right, each switch is a typical bug."""
    if eval_mode:
        model.eval()
    B = src.shape[0]
    out = [[] for _ in range(B)]
    finished = [False] * B
    with torch.no_grad():
        state0 = state = model.init_decoder_state(model.encode(src, src_valid_lens), src_valid_lens)
        tokens = torch.full((B, 1), bos, dtype=torch.long)
        for _ in range(max_len):
            logits, new_state = model.decode_step(tokens, state)
            state = new_state if keep_state else state0
            chosen = logits.argmax(-1, keepdim=True)
            if feed == "argmax":
                tokens = chosen
            for b in range(B):
                t = int(chosen[b, 0])
                if stop_at_eos and finished[b]:
                    continue
                if t == eos:
                    finished[b] = True
                    if keep_eos:
                        out[b].append(t)
                    continue
                out[b].append(t)
            if stop_at_eos and all(finished):
                break
    return out


def right_loop(model, src, src_valid_lens, bos, eos, max_len):
    return _loop(model, src, src_valid_lens, bos, eos, max_len)


def no_stop_at_eos(model, src, src_valid_lens, bos, eos, max_len):
    return _loop(model, src, src_valid_lens, bos, eos, max_len, stop_at_eos=False)


def keeps_eos(model, src, src_valid_lens, bos, eos, max_len):
    return _loop(model, src, src_valid_lens, bos, eos, max_len, keep_eos=True)


def ignores_valid_lens(model, src, src_valid_lens, bos, eos, max_len):
    return _loop(model, src, torch.full_like(src_valid_lens, src.shape[1]), bos, eos, max_len)


def reuses_initial_state(model, src, src_valid_lens, bos, eos, max_len):
    return _loop(model, src, src_valid_lens, bos, eos, max_len, keep_state=False)


def always_feeds_bos(model, src, src_valid_lens, bos, eos, max_len):
    return _loop(model, src, src_valid_lens, bos, eos, max_len, feed="bos")


def forgets_eval(model, src, src_valid_lens, bos, eos, max_len):
    return _loop(model, src, src_valid_lens, bos, eos, max_len, eval_mode=False)


def returns_bos(model, src, src_valid_lens, bos, eos, max_len):
    return [[bos, *row] for row in _loop(model, src, src_valid_lens, bos, eos, max_len)]


def returns_tensor(model, src, src_valid_lens, bos, eos, max_len):
    return torch.zeros(src.shape[0], max_len, dtype=torch.long)


def uncached_library(model, src, src_valid_lens, bos, eos, max_len):
    return cl.greedy_decode(model, src, src_valid_lens, max_len, bos=bos, eos=eos, use_cache=False)


def test_greedy_notebook_solution_passes(solutions):
    ns = solutions("ch08-ex-greedy")
    assert passes("training.greedy_decode_loop", ns["greedy_decode_loop"]).n_checks == 4


def test_greedy_reference_loop_and_library_pass():
    # Two implementations independent of the checker's uncached reference must agree with it.
    passes("training.greedy_decode_loop", right_loop)
    passes("training.greedy_decode_loop",
           lambda m, s, lens, bos, eos, n: cl.greedy_decode(m, s, lens, n, bos=bos, eos=eos))


def test_greedy_fixture_has_early_eos_full_length_and_padding_effects():
    # The checker can only catch these mistakes if its cases contain them.
    model = training_checkers._small_transformer()
    case, src, lens, max_len = training_checkers._greedy_cases()[0]
    expected = training_checkers._reference_greedy(model, src, lens, max_len)
    lengths = [len(row) for row in expected]
    assert min(lengths) < max_len and max(lengths) == max_len and len(set(lengths)) >= 3
    assert (lens < src.shape[1]).any()
    assert expected != training_checkers._reference_greedy(model, src, lens, max_len, use_lens=False)
    for variant in ("bos", "last"):
        assert expected != training_checkers._reference_greedy(model, src, lens, max_len, decoder_input=variant)


def test_greedy_checker_leaves_the_global_random_state_alone():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    check("training.greedy_decode_loop", right_loop, quiet=True)
    assert torch.equal(torch.random.get_rng_state(), before)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (no_stop_at_eos, "goes on after its <eos>"),
        (keeps_eos, "leave the <eos> out"),
        (ignores_valid_lens, "Pass src_valid_lens"),
        (reuses_initial_state, "Keep the state that decode_step returns"),
        (always_feeds_bos, "<bos> is fed at every step"),
        (forgets_eval, "model.eval()"),
        (returns_bos, "starts with <bos>"),
        (returns_tensor, "return a list"),
        (uncached_library, "never called model.decode_step"),
    ],
)
def test_greedy_wrong_answers_fail_with_hint(answer, hint):
    fails_with("training.greedy_decode_loop", answer, hint)


def test_greedy_crash_names_the_case():
    def crashes(model, src, src_valid_lens, bos, eos, max_len):
        raise RuntimeError("boom")

    fails_with("training.greedy_decode_loop", crashes, "padded batch", "RuntimeError: boom")


# --- training.label_smoothed_masked_ce ----------------------------------------------------------


def _mask(targets, valid_lens):
    return (torch.arange(targets.shape[1]) < valid_lens[:, None]).to(torch.float32)


def _token_loss(logits, targets, eps):
    log_p = torch.log_softmax(logits, -1)
    nll = -log_p.gather(-1, targets[..., None]).squeeze(-1)
    return (1 - eps) * nll + eps * (-log_p.mean(-1))


def ls_unmasked(logits, targets, valid_lens, eps):
    return _token_loss(logits, targets, eps).mean()


def ls_mask_from_pad_id(logits, targets, valid_lens, eps):
    keep = (targets != 0).float()  # padded positions may hold any id: this mask is wrong
    return (_token_loss(logits, targets, eps) * keep).sum() / keep.sum()


def ls_over_other_classes(logits, targets, valid_lens, eps):
    log_p = torch.log_softmax(logits, -1)
    V = logits.shape[-1]
    q = torch.full_like(log_p, eps / (V - 1)).scatter(-1, targets[..., None], 1 - eps)
    m = _mask(targets, valid_lens)
    return (-(q * log_p).sum(-1) * m).sum() / m.sum()


def ls_per_sequence(logits, targets, valid_lens, eps):
    m = _mask(targets, valid_lens)
    per_seq = (_token_loss(logits, targets, eps) * m).sum(1)
    keep = valid_lens > 0
    return (per_seq[keep] / valid_lens[keep]).mean()


def ls_sum(logits, targets, valid_lens, eps):
    return (_token_loss(logits, targets, eps) * _mask(targets, valid_lens)).sum()


def ls_detached(logits, targets, valid_lens, eps):
    m = _mask(targets, valid_lens)
    return ((_token_loss(logits, targets, eps) * m).sum() / m.sum()).detach()


def ls_sum_over_classes(logits, targets, valid_lens, eps):
    log_p = torch.log_softmax(logits, -1)
    nll = -log_p.gather(-1, targets[..., None]).squeeze(-1)
    token = (1 - eps) * nll + eps * (-log_p.sum(-1))  # sum instead of mean over the V classes
    m = _mask(targets, valid_lens)
    return (token * m).sum() / m.sum()


def test_label_smoothing_notebook_solution_passes(solutions):
    ns = solutions("ch08-ex-label-smoothing")
    assert passes("training.label_smoothed_masked_ce", ns["label_smoothed_masked_ce"]).n_checks == 8


def test_label_smoothing_solution_with_eps_zero_is_the_library_masked_ce(solutions):
    ns = solutions("ch08-ex-label-smoothing")
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 6, 9, generator=g)
    targets = torch.randint(0, 9, (3, 6), generator=g)
    lens = torch.tensor([6, 1, 4])
    assert torch.allclose(ns["label_smoothed_masked_ce"](logits, targets, lens, 0.0),
                          cl.masked_cross_entropy(logits, targets, lens))


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (ls_unmasked, "padded positions are counted"),
        (ls_mask_from_pad_id, "build the mask from valid_lens"),
        (ls_over_other_classes, "V - 1 wrong classes"),
        (ls_per_sequence, "averaged per sequence"),
        (ls_sum, "returned the sum"),
        (ls_detached, "differentiable"),
        (ls_sum_over_classes, "eps mean_v (-log p_v)"),
    ],
)
def test_label_smoothing_wrong_answers_fail_with_hint(answer, hint):
    fails_with("training.label_smoothed_masked_ce", answer, hint)


def test_label_smoothing_python_float_is_rejected():
    def returns_float(logits, targets, valid_lens, eps):
        m = _mask(targets, valid_lens)
        return ((_token_loss(logits, targets, eps) * m).sum() / m.sum()).item()

    fails_with("training.label_smoothed_masked_ce", returns_float, "expected a scalar tensor")



# --- training.beam_search -----------------------------------------------------------------------


def _beam(next_log_probs, eos, max_len, beam_size, alpha, *, penalty=True, refill=False, stop_at_best=False,
          eos_in_length=True, keep_eos=False, greedy=False, best_child_only=False):
    """A beam search written for these tests (dicts, not the checker's lists): the defaults are right, each switch
    is a typical bug."""
    K = 1 if greedy else beam_size

    def norm(tokens, score):
        n = len(tokens) - (1 if tokens and tokens[-1] == eos and not eos_in_length else 0)
        return score / ((5 + n) / 6) ** alpha if penalty else score

    beam, done = {(): 0.0}, {}
    for _ in range(max_len):
        candidates = {}
        for tokens, score in beam.items():
            if tokens and tokens[-1] == eos:
                candidates[tokens] = score
                continue
            logp = next_log_probs(list(tokens)).tolist()
            options = range(len(logp)) if not best_child_only else [max(range(len(logp)), key=logp.__getitem__)]
            for v in options:
                candidates[tokens + (v,)] = score + logp[v]
        order = sorted(candidates, key=lambda t: norm(t, candidates[t]), reverse=True)
        if refill:
            done.update({t: candidates[t] for t in order[:K] if t[-1] == eos})
            order = [t for t in order if t[-1] != eos]
        beam = {t: candidates[t] for t in order[:K]}
        best = max(beam, key=lambda t: norm(t, beam[t]), default=None)
        if not beam or all(t[-1] == eos for t in beam) or (stop_at_best and best[-1] == eos):
            break
    pool = {**done, **beam}
    best = max(pool, key=lambda t: norm(t, pool[t]))
    return list(best) if keep_eos or not best or best[-1] != eos else list(best[:-1])


def test_beam_notebook_solution_passes(solution_function):
    answer = solution_function("ch08-ex-beam", "beam_search")
    assert passes("training.beam_search", answer).n_checks >= 13
    for variant in (1, 2):
        passes("training.beam_search", answer, variant=variant)


def test_beam_independent_implementation_passes_every_variant():
    for variant in (0, 1, 2, 3):
        passes("training.beam_search", _beam, variant=variant)


def test_beam_reference_is_the_librarys_beam_search_on_a_transformer():
    # The checker's list-based reference and course_lib's batched, cached beam search agree token for token.
    torch.manual_seed(0)
    model = cl.Transformer(cl.TransformerConfig(9, 8, num_hiddens=16, ffn_num_hiddens=32, num_heads=2,
                                                num_enc_layers=1, num_dec_layers=2, dropout=0.0)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2.5)  # confident, varied distributions
    src = torch.tensor([[4, 5, 6, 2], [7, 2, 0, 0], [8, 3, 5, 2]])
    lens = torch.tensor([4, 2, 4])
    for b in range(3):
        def next_log_probs(prefix, b=b):
            tgt_in = torch.tensor([[1, *prefix]])
            with torch.no_grad():
                return torch.log_softmax(model(src[b:b + 1], lens[b:b + 1], tgt_in)[0, -1].double(), -1)

        for beam_size in (1, 2, 3, 5):
            for alpha in (0.0, 0.6, 1.5):
                ours = training_checkers._reference_beam(next_log_probs, 2, 7, beam_size, alpha)
                lib = cl.beam_search(model, src[b:b + 1], lens[b:b + 1], 7, bos=1, eos=2, beam_size=beam_size,
                                     length_penalty=alpha)[0]
                assert ours == lib, (b, beam_size, alpha)
                assert _beam(next_log_probs, 2, 7, beam_size, alpha) == ours


def test_beam_cases_expose_every_mistake_in_every_variant():
    from course_lib.teaching.exercises._core import _VARIANT

    for variant in (0, 1, 2):
        token = _VARIANT.set(variant)
        try:
            cases = training_checkers._beam_cases()
        finally:
            _VARIANT.reset(token)
        for kw, _ in training_checkers._BEAM_MISTAKES:
            wrong = sum(training_checkers._reference_beam(m, e, n, k, a, **kw)
                        != training_checkers._reference_beam(m, e, n, k, a) for _, m, e, n, k, a in cases)
            assert wrong >= 2, (variant, kw)


@pytest.mark.parametrize(
    ("switch", "hint"),
    [
        (dict(penalty=False), "log-probability alone"),
        (dict(eos_in_length=False), "leaves <eos> out of |y|"),
        (dict(refill=True), "stays in the beam"),
        (dict(stop_at_best=True), "as soon as the best hypothesis had finished"),
        (dict(keep_eos=True), "leave <eos> out"),
        (dict(greedy=True), "greedy decoding's answer"),
        (dict(best_child_only=True), "greedy decoding's answer"),
    ],
)
def test_beam_wrong_answers_fail_with_hint(switch, hint):
    fails_with("training.beam_search", lambda *args: _beam(*args, **switch), hint)


def test_beam_answers_of_the_wrong_type_are_refused():
    fails_with("training.beam_search", lambda *args: torch.tensor(_beam(*args)).float(), "list of int")
    fails_with("training.beam_search", lambda *args: None, "list of int")
