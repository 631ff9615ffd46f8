"""Training loop, masked loss, warm-up schedule and evaluation, on a toy reversal task."""

import math
import os
import random

import matplotlib
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.data import Seq2SeqData
from course_lib.models.rnn import BahdanauSeq2Seq, Seq2SeqRNNConfig
from course_lib.teaching.training_plots import plot_history
from course_lib.training.train import (
    TrainHistory,
    evaluate,
    evaluate_loss,
    masked_cross_entropy,
    predict_split,
    train_seq2seq,
    warmup_lr,
)

# --- a toy task: reverse a string of 1-5 letters --------------------------------------------------


def reverse_data(n_train=384, n_valid=48, n_test=48, seed=0, letters="abcdef"):
    rng = random.Random(seed)

    def split(n):
        pairs = []
        for _ in range(n):
            s = [rng.choice(letters) for _ in range(rng.randint(1, 5))]
            pairs.append((s, s[::-1]))
        return pairs

    train, valid, test = split(n_train), split(n_valid), split(n_test)
    test += [(list("ab"), list("aa")), (list("ab"), list("ba"))]  # a source with two references
    return Seq2SeqData.from_splits(train, valid, test, tokenizer="char", name="toy-reverse")


def _model(data, seed=0, dropout=0.0):
    torch.manual_seed(seed)
    config = Seq2SeqRNNConfig(len(data.src_vocab), len(data.tgt_vocab), embed_size=16, hidden_size=32,
                              num_layers=1, dropout=dropout)
    return BahdanauSeq2Seq(config)


# --- masked cross-entropy ------------------------------------------------------------------------


def _loop_loss(logits, targets, valid_lens):
    total, n = 0.0, 0
    for b in range(logits.shape[0]):
        for t in range(int(valid_lens[b])):
            row = logits[b, t].double()
            total += float(torch.logsumexp(row, 0) - row[targets[b, t]])
            n += 1
    return total / n


def test_masked_cross_entropy_matches_a_loop_over_valid_tokens():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 7, generator=g)
    targets = torch.randint(0, 7, (3, 5), generator=g)
    lens = torch.tensor([5, 2, 0])
    assert float(masked_cross_entropy(logits, targets, lens)) == pytest.approx(_loop_loss(logits, targets, lens),
                                                                               abs=1e-5)


def test_padding_changes_neither_the_loss_nor_gets_gradient():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 4, 6, generator=g, requires_grad=True)
    targets = torch.randint(0, 6, (2, 4), generator=g)
    lens = torch.tensor([4, 1])
    loss = masked_cross_entropy(logits, targets, lens)
    garbage_targets = targets.clone()
    garbage_targets[1, 1:] = -100  # padding ids need not even be valid
    garbage_logits = logits.detach().clone()
    garbage_logits[1, 1:] = 1e4
    torch.testing.assert_close(masked_cross_entropy(garbage_logits, garbage_targets, lens), loss.detach())
    loss.backward()
    assert torch.all(logits.grad[1, 1:] == 0) and torch.all(logits.grad[1, 0] != 0)


def test_label_smoothing_is_the_mix_of_the_target_and_the_uniform_cross_entropy_over_valid_tokens():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(3, 5, 7, generator=g, dtype=torch.float64)
    targets = torch.randint(0, 7, (3, 5), generator=g)
    lens = torch.tensor([5, 2, 1])
    eps, total, n = 0.1, 0.0, 0
    for b in range(3):  # closed form per valid token: (1 - eps) * (-log p_y) + eps * mean_v (-log p_v)
        for t in range(int(lens[b])):
            logp = torch.log_softmax(logits[b, t], -1)
            total += (1 - eps) * -logp[targets[b, t]] - eps * logp.mean()
            n += 1
    torch.testing.assert_close(masked_cross_entropy(logits, targets, lens, label_smoothing=eps), total / n)
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\)"):
        masked_cross_entropy(logits, targets, lens, label_smoothing=1.0)


def test_masked_cross_entropy_with_no_valid_token_is_zero_not_nan():
    loss = masked_cross_entropy(torch.randn(2, 3, 4), torch.zeros(2, 3, dtype=torch.long), torch.tensor([0, 0]))
    assert loss.item() == 0.0


def test_masked_cross_entropy_rejects_bad_inputs():
    logits, targets, lens = torch.randn(2, 3, 4), torch.zeros(2, 3, dtype=torch.long), torch.tensor([3, 1])
    with pytest.raises(ValueError, match=r"targets must have shape \(2, 3\)"):
        masked_cross_entropy(logits, targets[:, :2], lens)
    with pytest.raises(TypeError, match="torch.long"):
        masked_cross_entropy(logits, targets.float(), lens)
    with pytest.raises(ValueError, match=r"valid_lens must have shape \(2,\)"):
        masked_cross_entropy(logits, targets, lens[:1])
    with pytest.raises(ValueError, match=r"valid_lens must lie in \[0, 3\]"):
        masked_cross_entropy(logits, targets, torch.tensor([4, 1]))
    with pytest.raises(ValueError, match="logits must be 3-D"):
        masked_cross_entropy(logits[0], targets, lens)
    with pytest.raises(TypeError, match="floating"):
        masked_cross_entropy(targets, targets, lens)


# --- warm-up schedule ----------------------------------------------------------------------------


def test_warmup_lr_closed_forms():
    d, w = 512, 4000
    assert warmup_lr(w, d, w) == pytest.approx(d ** -0.5 * w ** -0.5)
    assert warmup_lr(w // 2, d, w) == pytest.approx(warmup_lr(w, d, w) / 2)  # linear growth
    assert warmup_lr(4 * w, d, w) == pytest.approx(warmup_lr(w, d, w) / 2)  # 1/sqrt(s) decay
    assert max(range(1, 3 * w, 97), key=lambda s: warmup_lr(s, d, w)) in range(w - 97, w + 97)


def test_warmup_lr_rejects_bad_arguments():
    for args in [(0, 512, 10), (1, 0, 10), (1, 512, 0)]:
        with pytest.raises(ValueError, match="must be positive"):
            warmup_lr(*args)


# --- training ------------------------------------------------------------------------------------


def test_training_lowers_the_validation_loss_and_records_a_consistent_history():
    data = reverse_data()
    model = _model(data)
    history = train_seq2seq(model, data, epochs=6, lr=1e-2, batch_size=32, device="cpu", progress=False)
    assert isinstance(history, TrainHistory)
    steps_per_epoch = math.ceil(len(data.train) / 32)
    assert history.steps == 6 * steps_per_epoch == len(history.train_loss) == len(history.learning_rates)
    assert history.epochs == 6 and len(history.epoch_loss) == 6 and history.stopped_by == "epochs"
    assert history.valid_steps == [steps_per_epoch * (e + 1) for e in range(6)]
    # From chance (log of the vocabulary size) to well below it.
    assert history.valid_loss[-1] < 0.5 * math.log(len(data.tgt_vocab))
    assert history.valid_loss[-1] < history.valid_loss[0]
    assert history.tokens == 6 * sum(len(t) + 1 for _, t in data.train)
    assert not model.training


def test_same_seed_reproduces_training_exactly_and_another_seed_does_not():
    data = reverse_data(n_train=96)

    def run(seed):
        model = _model(data, dropout=0.2)
        history = train_seq2seq(model, data, epochs=1, batch_size=16, seed=seed, device="cpu", progress=False)
        return history.train_loss, model.state_dict()

    (loss_a, state_a), (loss_b, state_b), (loss_c, _) = run(0), run(0), run(1)
    assert loss_a == loss_b
    for k in state_a:
        assert torch.equal(state_a[k], state_b[k]), k
    assert loss_a != loss_c


def test_time_budget_stops_training_mid_epoch():
    data = reverse_data(n_train=20000)
    history = train_seq2seq(_model(data), data, minutes=0.005, batch_size=8, device="cpu", progress=False)
    assert history.stopped_by == "time"
    assert 1 <= history.steps < len(data.train) / 8
    assert history.seconds >= 0.3
    assert history.valid_steps == [history.steps]  # the final validation


def test_warmup_schedule_peaks_at_lr_after_warmup_steps():
    data = reverse_data(n_train=160)
    history = train_seq2seq(_model(data), data, epochs=1, lr=2e-3, batch_size=8, warmup_steps=5, device="cpu",
                            progress=False)
    expected = [2e-3 * min(s / 5, math.sqrt(5 / s)) for s in range(1, history.steps + 1)]
    assert history.learning_rates == pytest.approx(expected, rel=1e-9)


def test_eval_every_measures_validation_loss_on_schedule():
    data = reverse_data(n_train=80)
    history = train_seq2seq(_model(data), data, epochs=1, batch_size=8, eval_every=3, device="cpu", progress=False)
    assert history.valid_steps == [3, 6, 9, 10]


def test_training_leaves_no_global_setting_changed(monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", "")
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    torch.use_deterministic_algorithms(False)
    data = reverse_data(n_train=16, n_valid=4)
    state = torch.random.get_rng_state()
    train_seq2seq(_model(data), data, epochs=1, batch_size=8, device="cpu", progress=False)
    assert not torch.are_deterministic_algorithms_enabled()
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    assert torch.equal(torch.random.get_rng_state(), state)


def test_train_rejects_a_model_without_the_seq2seq_methods():
    data = reverse_data(n_train=8)
    with pytest.raises(TypeError, match="Linear lacks encode, init_decoder_state, decode_step, reorder_state"):
        train_seq2seq(nn.Linear(2, 2), data, epochs=1, progress=False)


class _RecordingData:
    """Wraps a data set and records the number of target tokens of every training batch it yields."""

    def __init__(self, data):
        self.data, self.tokens = data, []

    def __getattr__(self, name):
        return getattr(self.data, name)

    def batches(self, split, *args, **kwargs):
        for batch in self.data.batches(split, *args, **kwargs):
            if split == "train":
                self.tokens.append(int(batch.tgt_valid_lens.sum()))
            yield batch


def test_epoch_loss_is_the_mean_over_the_epochs_target_tokens_not_over_its_steps():
    data = _RecordingData(reverse_data(n_train=100))
    history = train_seq2seq(_model(data.data), data, epochs=2, batch_size=16, device="cpu", progress=False)
    per_epoch = len(data.tokens) // 2
    assert len(history.train_loss) == len(data.tokens) == 2 * per_epoch
    for e in range(2):
        steps = slice(e * per_epoch, (e + 1) * per_epoch)
        losses, tokens = history.train_loss[steps], data.tokens[steps]
        by_token = sum(loss * n for loss, n in zip(losses, tokens, strict=True)) / sum(tokens)
        assert history.epoch_loss[e] == pytest.approx(by_token, rel=1e-6)
        assert by_token != pytest.approx(sum(losses) / len(losses), rel=1e-6)  # the per-step mean differs


def test_gradient_clipping_rescales_what_the_optimizer_sees_like_clip_grad_norm(monkeypatch):
    # Record each parameter's gradient right after backward and what Adam finds when it steps.
    data = reverse_data(n_train=48)
    model = _model(data)
    raw, seen = [], []
    params = list(model.parameters())
    current = {}
    for p in params:
        p.register_post_accumulate_grad_hook(lambda p: current.__setitem__(p, p.grad.detach().clone()))

    class RecordingAdam(torch.optim.Adam):
        def step(self, closure=None):
            raw.append([current[p] for p in params])
            seen.append([p.grad.detach().clone() for p in params])
            return super().step(closure)

    monkeypatch.setattr(torch.optim, "Adam", RecordingAdam)
    clip = 0.05
    train_seq2seq(model, data, epochs=1, batch_size=16, clip=clip, device="cpu", progress=False)
    assert len(raw) == 3
    for grads, clipped in zip(raw, seen, strict=True):
        norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
        assert norm > 2 * clip  # the clipping is active in every step
        scale = clip / (norm + 1e-6)  # torch.nn.utils.clip_grad_norm_'s factor
        for g, c in zip(grads, clipped, strict=True):
            torch.testing.assert_close(c, g * scale)


def test_history_records_each_steps_gradient_norm_before_clipping(monkeypatch):
    # The norm of the gradients as backward left them (before clipping), for every step; none without clipping.
    data = reverse_data(n_train=48)
    model = _model(data)
    params = list(model.parameters())
    current, norms = {}, []
    for p in params:
        p.register_post_accumulate_grad_hook(lambda p: current.__setitem__(p, p.grad.detach().clone()))

    class RecordingAdam(torch.optim.Adam):
        def step(self, closure=None):
            norms.append(math.sqrt(sum(float((current[p] ** 2).sum()) for p in params)))
            return super().step(closure)

    monkeypatch.setattr(torch.optim, "Adam", RecordingAdam)
    history = train_seq2seq(model, data, epochs=2, batch_size=16, clip=0.05, device="cpu", progress=False)
    assert len(history.grad_norms) == history.steps == len(norms) == 6
    assert history.grad_norms == pytest.approx(norms, rel=1e-5)
    unclipped = train_seq2seq(_model(data), data, epochs=1, batch_size=16, clip=None, device="cpu", progress=False)
    assert unclipped.grad_norms == []


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(), ValueError, "minutes= .* or epochs="),
        (dict(minutes=-1.0), ValueError, "minutes"),
        (dict(epochs=0), ValueError, "epochs"),
        (dict(epochs=1, lr=0.0), ValueError, "lr"),
        (dict(epochs=1, warmup_steps=-2), ValueError, "warmup_steps"),
        (dict(epochs=1, batch_size=0), ValueError, "batch_size"),
        (dict(epochs=1, eval_every=0), ValueError, "eval_every"),
        (dict(epochs=1, clip=-1.0), ValueError, "clip"),
    ],
)
def test_train_rejects_bad_arguments(kwargs, error, match):
    data = reverse_data(n_train=8)
    with pytest.raises(error, match=match):
        train_seq2seq(_model(data), data, progress=False, device="cpu", **kwargs)


# --- evaluation ----------------------------------------------------------------------------------


def test_evaluate_loss_is_the_token_weighted_mean_over_the_split_with_dropout_off():
    data = reverse_data()
    model = _model(data, dropout=0.5).train()
    loss_small = evaluate_loss(model, data, "valid", batch_size=5)
    assert model.training
    (batch,) = data.batches("valid", 10**6)
    model.eval()
    with torch.no_grad():
        logits = model(batch.src, batch.src_valid_lens, batch.tgt_in)
    assert loss_small == pytest.approx(_loop_loss(logits, batch.tgt_out, batch.tgt_valid_lens), abs=1e-5)


class OracleReverser(nn.Module):
    """Emits the reversed source (one-hot logits) through the decoding protocol."""

    def __init__(self, data):
        super().__init__()
        self.dummy = nn.Parameter(torch.zeros(()))
        self.V = len(data.tgt_vocab)
        self.src_to_tgt = {i: data.tgt_vocab[t] for i, t in enumerate(data.src_vocab.idx_to_token)}

    def encode(self, src, lens):
        answer = torch.full((src.shape[0], src.shape[1] + 1), 2)  # eos padding
        for b in range(src.shape[0]):
            n = int(lens[b]) - 1  # the source ends with eos
            answer[b, :n] = torch.tensor([self.src_to_tgt[i] for i in src[b, :n].flip(0).tolist()])
        return answer

    def init_decoder_state(self, memory, lens):
        return memory, 0

    def decode_step(self, tokens, state):
        answer, t = state
        return F.one_hot(answer[:, min(t, answer.shape[1] - 1)], self.V).float() * 10, (answer, t + 1)

    def reorder_state(self, state, index):
        return state[0][index], state[1]


@pytest.mark.parametrize("decoding", ["greedy", "beam"])
def test_evaluate_scores_a_perfect_model_as_perfect(decoding):
    data = reverse_data()
    result = evaluate(OracleReverser(data), data, "test", decoding=decoding, batch_size=7)
    assert result == {"exact_match": 1.0, "bleu": pytest.approx(100.0), "n": len(data.references["test"]), "n_unk": 0}


def test_predict_split_uses_every_reference_of_a_source_once():
    data = reverse_data()
    triples = predict_split(OracleReverser(data), data, "test")
    sources = [tuple(s) for s, _, _ in triples]
    assert len(sources) == len(set(sources)) == len(data.references["test"])
    refs_ab = dict((tuple(s), r) for s, _, r in triples)[("a", "b")]
    assert sorted(map(tuple, refs_ab)) == [("a", "a"), ("b", "a")]
    assert len(predict_split(OracleReverser(data), data, "test", limit=3)) == 3


def test_evaluate_after_training_beats_an_untrained_model():
    data = reverse_data()
    model = _model(data)
    before = evaluate(model, data, "valid")
    train_seq2seq(model, data, epochs=6, lr=1e-2, batch_size=32, device="cpu", progress=False)
    after = evaluate(model, data, "valid")
    assert after["exact_match"] > before["exact_match"] + 0.2
    assert after["bleu"] > before["bleu"]


def test_evaluate_rejects_bad_arguments():
    data = reverse_data(n_train=8)
    model = _model(data)
    with pytest.raises(ValueError, match="split"):
        evaluate(model, data, "dev")
    with pytest.raises(ValueError, match="decoding"):
        evaluate(model, data, "test", decoding="sample")
    with pytest.raises(ValueError, match="split"):
        evaluate_loss(model, data, "dev")


def test_plot_history_draws_train_and_valid_curves():
    history = TrainHistory(steps=30, train_loss=[3.0 - 0.05 * i for i in range(30)], valid_steps=[10, 20, 30],
                           valid_loss=[2.5, 2.0, 1.8])
    fig = plot_history(history, smooth=5)
    assert isinstance(fig, matplotlib.figure.Figure)
    lines = fig.axes[0].get_lines()
    assert len(lines) == 3
    assert list(lines[-1].get_xdata()) == [10, 20, 30]
    with pytest.raises(ValueError, match="smooth"):
        plot_history(history, smooth=0)


# --- language models (train_lm, evaluate_lm, lm_position_losses) ------------------------------------


def _lm_data():
    from course_lib.data import LMData, generated_sentences

    return LMData.from_sentences(generated_sentences(400, seed=1), vocab_size=300, seed=0)


def _lm(data, seed=0, **config):
    from course_lib import DecoderLM, DecoderLMConfig

    torch.manual_seed(seed)
    return DecoderLM(DecoderLMConfig(data.vocab_size, num_hiddens=32, num_heads=4, num_kv_heads=2, num_layers=2,
                                     **config))


def test_evaluate_lm_is_the_mean_of_hand_computed_token_cross_entropies():
    from course_lib.training.train import evaluate_lm, lm_position_losses

    data, length = _lm_data(), 12
    model = _lm(data).eval()
    stream = data.valid.tolist()
    per_position = [[] for _ in range(length)]
    with torch.no_grad():
        for start in range(0, len(stream) - length, length):  # non-overlapping windows of length + 1 tokens
            window = stream[start:start + length + 1]
            if len(window) < length + 1:
                break
            logits = model(torch.tensor([window[:-1]]))[0].double()
            for t in range(length):
                per_position[t].append(float(torch.logsumexp(logits[t], 0) - logits[t, window[t + 1]]))
    by_hand = [sum(v) / len(v) for v in per_position]
    got = lm_position_losses(model, data, "valid", length, batch_size=5)
    assert got.shape == (length,) and got.dtype == torch.float64
    torch.testing.assert_close(got, torch.tensor(by_hand, dtype=torch.float64), rtol=0, atol=1e-5)
    mean = sum(sum(v) for v in per_position) / sum(len(v) for v in per_position)
    assert evaluate_lm(model, data, "valid", length) == pytest.approx(mean, abs=1e-5)
    # perplexity of an untrained model: about the vocabulary size (a near-uniform prediction)
    assert math.exp(mean) == pytest.approx(data.vocab_size, rel=0.1)
    # overlapping windows, 3 tokens apart: each position averaged over every window that fits
    with torch.no_grad():
        windows = [stream[s:s + length + 1] for s in range(0, len(stream) - length, 3)]
        logits = model(torch.tensor([w[:-1] for w in windows])).double()
        targets = torch.tensor([w[1:] for w in windows])
        by_hand = (torch.logsumexp(logits, -1) - logits.gather(-1, targets[..., None])[..., 0]).mean(0)
    torch.testing.assert_close(lm_position_losses(model, data, "valid", length, stride=3), by_hand, rtol=0,
                               atol=1e-5)


def test_train_lm_first_step_loss_is_the_cross_entropy_of_the_epochs_first_windows():
    import copy

    from course_lib.training.train import train_lm

    data, length, batch = _lm_data(), 8, 6
    model = _lm(data)
    initial = copy.deepcopy(model).eval()
    history = train_lm(model, data, context=length, epochs=1, batch_size=batch, lr=1e-2, device="cpu",
                       progress=False, seed=7)
    starts = data.epoch_starts("train", length, torch.Generator().manual_seed(7))  # the run's generator
    first = data.batch("train", starts[:batch], length)
    with torch.no_grad():
        expected = F.cross_entropy(initial(first.inputs).flatten(0, 1), first.targets.flatten()).item()
    assert history.train_loss[0] == pytest.approx(expected, abs=1e-6)
    assert history.steps == math.ceil(len(starts) / batch) and history.epochs == 1
    assert history.tokens == len(starts) * length


def test_train_lm_learns_reproduces_and_records_the_validation_loss_of_evaluate_lm():
    from course_lib.training.train import evaluate_lm, train_lm

    data = _lm_data()
    runs = []
    for _ in range(2):
        model = _lm(data)
        history = train_lm(model, data, context=16, epochs=4, batch_size=8, lr=1e-2, warmup_steps=5,
                           device="cpu", progress=False)
        runs.append((model, history))
    (model, history), (_, again) = runs
    assert history.train_loss == again.train_loss  # the CPU run reproduces exactly
    assert len(history.valid_loss) == 4 and history.valid_loss[-1] < 0.5 * math.log(data.vocab_size)
    assert history.valid_loss[-1] == evaluate_lm(model, data, "valid", 16)
    assert not model.training


def test_train_lm_stops_on_the_time_budget():
    from course_lib.training.train import train_lm

    data = _lm_data()
    history = train_lm(_lm(data), data, context=16, minutes=0.002, batch_size=4, device="cpu", progress=False)
    assert history.stopped_by == "time" and history.steps >= 1


@pytest.mark.parametrize("call, error, words", [
    (lambda d: __import__("course_lib").train_lm(nn.Linear(2, 2), reverse_data(), context=4, epochs=1),
     TypeError, "LMData"),
    (lambda d: __import__("course_lib").train_lm("model", d, context=4, epochs=1), TypeError, "nn.Module"),
    (lambda d: __import__("course_lib").train_lm(_lm(d), d, context=10**6, epochs=1), ValueError, "no window"),
    (lambda d: __import__("course_lib").train_lm(_lm(d), d, context=0, epochs=1), ValueError, "context"),
    (lambda d: __import__("course_lib").train_lm(_lm(d), d, context=4), ValueError, "minutes= .* or epochs="),
    (lambda d: __import__("course_lib").evaluate_lm(_lm(d), reverse_data(), context=4), TypeError, "LMData"),
    (lambda d: __import__("course_lib").lm_position_losses(_lm(d), d, "dev", 4), ValueError, "split"),
])
def test_train_lm_and_evaluate_lm_refuse_bad_input(call, error, words):
    with pytest.raises(error, match=words):
        call(_lm_data())
