r"""Training and evaluating seq2seq models (teacher forcing, masked cross-entropy, BLEU) and language models.

Teacher forcing: the decoder reads the true previous token ``<bos> y_1 ... y_{T-1}`` and is trained
to predict ``y_1 ... y_T <eos>``; the loss is the cross-entropy averaged over the real (non-padding)
target tokens,

.. math:: \mathcal L = -\frac{1}{\sum_b n_b} \sum_b \sum_{t=1}^{n_b} \log P(y_{b,t} \mid y_{b,<t}, x_b).

:func:`train_seq2seq` works with any model that follows the seq2seq protocol (see
:mod:`course_lib.models.rnn`) and any data object with the :class:`course_lib.data.Seq2SeqData` interface.

A language model (chapter 11) is trained the same way on windows of one token stream
(:class:`course_lib.data.LMData`): :func:`train_lm` predicts every token of a window from the ones before
it, and :func:`evaluate_lm` / :func:`lm_position_losses` measure the held-out cross-entropy, whose
exponential is the perplexity. Both trainers share one loop: the time budget, the seed, mixed precision,
``torch.distributed`` data parallelism and the progress bar behave the same.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from .._validation import (
    as_lengths,
    check_choice,
    check_floating,
    check_ndim,
    check_positive,
    check_positive_int,
    check_probability,
    check_tensor,
)
from ..attention.masks import lengths_to_mask
from ..decoding.protocol import Seq2SeqModel, check_seq2seq_model
from ..decoding.search import decode_batch
from ..metrics import corpus_bleu, detokenized_bleu, exact_match
from ..progress import progress as progress_bar
from ..utils import global_state_preserved, model_device, set_seed, try_gpu
from .loss import cross_entropy

__all__ = [
    "masked_cross_entropy",
    "warmup_lr",
    "TrainHistory",
    "train_seq2seq",
    "train_lm",
    "evaluate_loss",
    "evaluate_lm",
    "lm_position_losses",
    "predict_split",
    "evaluate",
]


def masked_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, tgt_valid_lens: torch.Tensor,
                         label_smoothing: float = 0.0) -> torch.Tensor:
    """Cross-entropy averaged over the valid target positions only (padding ignored).

    Args:
        logits: (B, T, V) unnormalised scores.
        targets: (B, T) token ids.
        tgt_valid_lens: (B,) number of real tokens of each target, a tensor or a list (positions
            ``t >= tgt_valid_lens`` are padding and contribute nothing).
        label_smoothing: epsilon in [0, 1): the target distribution puts 1 - epsilon on the true token
            and epsilon spread evenly over the whole vocabulary (as ``torch.nn.functional.cross_entropy``).

    Returns:
        Scalar: the sum of the token losses over the valid positions divided by their number
        (0 when there is none).

    Examples:
        >>> logits = torch.zeros(2, 3, 5)  # uniform over V = 5 tokens: every token costs log 5
        >>> targets = torch.tensor([[1, 2, 0], [3, 0, 0]])
        >>> masked_cross_entropy(logits, targets, torch.tensor([3, 1]))  # 4 real tokens, the padding ignored
        tensor(1.6094)
    """
    check_floating(logits, "logits")
    check_ndim(logits, "logits", 3, "(batch, T, vocab)")
    check_tensor(targets, "targets")
    if targets.shape != logits.shape[:2]:
        raise ValueError(
            f"targets must have shape {tuple(logits.shape[:2])} (batch, T) for logits of shape "
            f"{tuple(logits.shape)}, got {tuple(targets.shape)}"
        )
    if targets.dtype != torch.long:
        raise TypeError(f"targets must hold token ids as torch.long, got dtype {targets.dtype}")
    label_smoothing = check_probability(label_smoothing, "label_smoothing")
    T = logits.shape[1]
    lens = as_lengths(tgt_valid_lens, "tgt_valid_lens", max_len=T, shape=(logits.shape[0],),
                      what=f"logits of shape {tuple(logits.shape)}", device=logits.device)
    mask = lengths_to_mask(lens, T)  # (B, T)
    # Padding may hold any id; the mask decides, so clamp it into range for the gather.
    # Flattened (B*T, V) rows: about 3x faster on CPU than the (B, V, T) layout cross_entropy also takes.
    # The token losses' masked mean, as chapter 8's loop computes it, so that cl.train_seq2seq's losses equal the
    # chapter's step by step, bit for bit on a CPU (cl.cross_entropy, the language models' loss, rounds otherwise).
    batch, steps, vocab = logits.shape
    token_loss = F.cross_entropy(logits.reshape(batch * steps, vocab), targets.masked_fill(~mask, 0).reshape(-1),
                                 reduction="none", label_smoothing=label_smoothing).view(batch, steps)
    return (token_loss * mask).sum() / mask.sum().clamp(min=1)


def warmup_lr(step: int, d_model: int, warmup: int) -> float:
    r"""The Transformer's learning rate with warm-up (Vaswani et al., 2017, "Noam" schedule).

    .. math:: \mathrm{lr}(s) = d_\text{model}^{-1/2}\,\min\big(s^{-1/2},\; s\cdot \mathrm{warmup}^{-3/2}\big)

    It grows linearly for ``warmup`` steps, peaks at step ``warmup`` and then decays as
    :math:`1/\sqrt s`.

    Args:
        step: s >= 1, the optimiser step.
        d_model: the model width.
        warmup: the number of warm-up steps.

    Returns:
        The learning rate at step ``step``.

    Examples:
        >>> [round(warmup_lr(step, d_model=512, warmup=4000), 6) for step in (1, 4000, 16000)]  # up, peak, halved
        [0.0, 0.000699, 0.000349]
    """
    check_positive_int(step, "step")
    check_positive_int(d_model, "d_model")
    check_positive_int(warmup, "warmup")
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


@dataclass
class TrainHistory:
    """What happened during :func:`train_seq2seq` (plot it with :func:`course_lib.plot_history`).

    Attributes:
        steps: optimiser steps taken.
        train_loss: the training loss of every step (``train_loss[i]`` is step ``i + 1``).
        learning_rates: the learning rate of every step.
        grad_norms: the global gradient norm of every step, before clipping (empty when ``clip`` is off):
            how often, and by how much, clipping shrank the step.
        epoch_loss: the token-weighted mean training loss of every completed epoch.
        valid_steps: the step after which each validation loss was measured.
        valid_loss: the validation losses (token-weighted mean over the whole split).
        seconds: wall-clock training time (validation included).
        epochs: completed epochs.
        tokens: target tokens trained on.
        stopped_by: ``"epochs"`` or ``"time"``.
        device: where it trained; ``amp``: the autocast dtype (``"off"`` when not used).
        world_size: the number of data-parallel processes (1 without ``torch.distributed``).

    Examples:
        >>> history = TrainHistory(steps=2, train_loss=[2.5, 2.1], tokens=300, seconds=1.5)
        >>> history.tokens_per_second, history.valid_loss
        (200.0, [])
    """

    steps: int = 0
    train_loss: list[float] = field(default_factory=list)
    learning_rates: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    epoch_loss: list[float] = field(default_factory=list)
    valid_steps: list[int] = field(default_factory=list)
    valid_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0
    epochs: int = 0
    tokens: int = 0
    stopped_by: str = ""
    device: str = ""
    amp: str = "off"
    world_size: int = 1

    @property
    def tokens_per_second(self) -> float:
        """Target tokens trained on per second of wall-clock time."""
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@global_state_preserved()
def train_seq2seq(model: Seq2SeqModel, data, *, minutes: float | None = None, epochs: int | None = None,
                  lr: float = 1e-3, batch_size: int = 64, warmup_steps: int = 0, clip: float | None = 1.0,
                  device: torch.device | str | None = None, seed: int = 0, progress: bool = True,
                  eval_every: int | None = None, amp: bool | str = True, compile: bool = False,
                  label_smoothing: float = 0.0) -> TrainHistory:
    r"""Train a seq2seq model with teacher forcing and Adam, within a time and/or epoch budget.

    Training stops after ``epochs`` epochs or once ``minutes`` of wall-clock time have passed
    (checked after every step, so at least one step is taken), whichever comes first. With
    ``warmup_steps > 0`` the learning rate follows :func:`warmup_lr` rescaled to peak at ``lr``:
    :math:`\mathrm{lr}\cdot\min(s/w, \sqrt{w/s})`. On CUDA the forward pass runs under autocast
    (bfloat16 where supported, else float16 with a gradient scaler); on the CPU in float32, and a run
    with the same seed reproduces exactly.

    **Data parallel.** When a ``torch.distributed`` process group is initialised (the processes were
    started by ``torchrun``, see :mod:`course_lib.training.distributed`) with N > 1 processes, the model is
    wrapped in :class:`~torch.nn.parallel.DistributedDataParallel`, every step deals each process
    ``batch_size`` pairs of a global batch of N * ``batch_size`` (the same shuffled order on every
    rank), and each rank's loss is weighted by its share of the global target tokens, so that the
    averaged gradient is exactly the gradient of the global batch's token-mean loss: one step on N
    processes equals one step on one process with N times the batch. All ranks stop at the same step
    (rank 0's clock decides); only rank 0 measures the validation loss and shows progress.

    Args:
        model: a seq2seq model; it is moved to ``device``.
        data: a :class:`course_lib.data.Seq2SeqData` (``batches``, ``train``, ``valid``).
        minutes: wall-clock budget (> 0).
        epochs: number of passes over the training split (> 0).
        lr: peak learning rate of Adam.
        batch_size: sentence pairs per step.
        warmup_steps: w, linear warm-up length then :math:`1/\sqrt s` decay; 0 keeps ``lr`` constant.
        clip: maximum global gradient norm; ``None`` or 0 disables clipping.
        device: default :func:`course_lib.try_gpu`.
        seed: seeds the run (as :func:`course_lib.set_seed`, and the shuffling generator); the caller's
            random states, PyTorch's deterministic-algorithms flag and ``CUBLAS_WORKSPACE_CONFIG`` are
            put back on return.
        progress: show a progress bar on stderr (:func:`course_lib.progress`: live, or one line).
        eval_every: measure the validation loss every this many steps; default once per epoch.
            The loss at the end of training is always measured (when there is a validation split).
        amp: ``True``: mixed precision on CUDA (ignored on the CPU); ``"bf16"``: bfloat16 autocast on
            any device (on the CPU where it supports bf16); ``False``: float32.
        compile: run the training forward through ``torch.compile`` (slow to start; pays off on long
            GPU runs).
        label_smoothing: epsilon of the training loss (:func:`masked_cross_entropy`); the recorded
            training loss includes it, the validation loss is the plain cross-entropy.

    Returns:
        A :class:`TrainHistory`. The model is left in eval mode on ``device``.

    Examples:
        Two epochs of a tiny model on 16 training pairs, two steps each:

        >>> data = load_dates(n_examples=20, locales=("en_US",), years=(2000, 2009), seed=0)
        >>> model = Transformer(TransformerConfig(len(data.src_vocab), len(data.tgt_vocab), num_hiddens=8,
        ...                                       ffn_num_hiddens=16, num_heads=2))
        >>> history = train_seq2seq(model, data, epochs=2, batch_size=8, device="cpu", progress=False)
        >>> history.steps, history.epochs, history.stopped_by, history.valid_steps, len(history.train_loss)
        (4, 2, 'epochs', [2, 4], 4)
    """
    check_seq2seq_model(model)
    label_smoothing = _check_training_arguments(
        minutes=minutes, epochs=epochs, lr=lr, batch_size=batch_size, warmup_steps=warmup_steps,
        clip=clip, eval_every=eval_every, label_smoothing=label_smoothing, amp=amp)
    if not len(data.train):
        raise ValueError("data.train is empty: nothing to train on")
    task = _Seq2SeqTask(data, label_smoothing)
    return _train(model, task, minutes=minutes, epochs=epochs, lr=lr, batch_size=batch_size,
                  warmup_steps=warmup_steps, clip=clip, device=device, seed=seed, progress=progress,
                  eval_every=eval_every, amp=amp, compile=compile)


def _train(model: nn.Module, task: _Task, *, minutes: float | None, epochs: int | None, lr: float,
           batch_size: int, warmup_steps: int, clip: float | None, device: torch.device | str | None, seed: int,
           progress: bool, eval_every: int | None, amp: bool | str, compile: bool) -> TrainHistory:
    """The training loop both trainers share, on checked arguments."""
    # Set up: seeds, the model on its device (DDP-wrapped, compiled), Adam and its schedule, autocast.
    run = _TrainingRun(model, task, device=device, seed=seed, lr=lr, warmup_steps=warmup_steps, amp=amp,
                       compile=compile)
    total = epochs * task.steps_per_epoch(batch_size, run.world.size) if epochs is not None else None
    with run.started(minutes, progress=progress, total=total):  # the clock and the progress bar
        while epochs is None or run.history.epochs < epochs:
            for batch in run.batches(batch_size):
                run.step(batch, clip=clip)  # forward, loss, backward, Adam
                if eval_every is not None and run.history.steps % eval_every == 0:
                    run.validate()
                if run.out_of_time():
                    break
            if run.history.stopped_by == "time":
                break
            run.end_epoch()
            if eval_every is None:
                run.validate()
        run.validate()  # the loss at the end is always measured
    return run.history


@global_state_preserved()
def train_lm(model: nn.Module, data, *, context: int, minutes: float | None = None, epochs: int | None = None,
             lr: float = 1e-3, batch_size: int = 32, warmup_steps: int = 0, clip: float | None = 1.0,
             device: torch.device | str | None = None, seed: int = 0, progress: bool = True,
             eval_every: int | None = None, amp: bool | str = True, compile: bool = False,
             label_smoothing: float = 0.0) -> TrainHistory:
    r"""Train a language model on windows of a token stream with Adam, within a time and/or epoch budget.

    Each step takes ``batch_size`` windows of ``context + 1`` contiguous tokens of the training stream
    (:class:`course_lib.data.LMData`) and minimises the mean next-token cross-entropy over their
    ``batch_size * context`` predictions,

    .. math:: \mathcal L = -\frac{1}{BL}\sum_{b=1}^{B}\sum_{t=1}^{L} \log P(x_{b,t} \mid x_{b,0}, \dots, x_{b,t-1}).

    An epoch visits the non-overlapping windows of the stream once, from a random offset in
    ``[0, context)`` and in a random order (:meth:`course_lib.data.LMData.epoch_starts`). Everything else
    is :func:`train_seq2seq`'s loop: the budget (``minutes`` and/or ``epochs``, checked after every step),
    the warm-up schedule, gradient clipping, the seed (a run on the CPU reproduces exactly), autocast on
    CUDA (``amp``), ``torch.compile``, and data parallelism under ``torchrun`` (each rank takes
    ``batch_size`` windows of every global batch; one step on N processes equals one step on one process
    with N times the batch). The validation loss is :func:`evaluate_lm` at the training context.

    Args:
        model: maps (B, T) token ids to (B, T, V) next-token logits (a :class:`course_lib.DecoderLM`); it
            is moved to ``device``.
        data: a :class:`course_lib.data.LMData`.
        context: L, the tokens of a training window (the model is trained at positions 0 .. L - 1).
        minutes, epochs, lr, batch_size, warmup_steps, clip, device, seed, progress, eval_every, amp,
            compile, label_smoothing: as in :func:`train_seq2seq` (``batch_size`` counts windows).

    Returns:
        A :class:`TrainHistory` (``tokens``: predicted tokens). The model is left in eval mode on ``device``.

    Raises:
        TypeError: ``model`` is not an ``nn.Module`` or ``data`` not an ``LMData``.
        ValueError: a bad budget or size, or a training stream without one window of ``context + 1`` tokens.

    Examples:
        >>> from course_lib.data import LMData, generated_sentences
        >>> data = LMData.from_sentences(generated_sentences(200), vocab_size=280)
        >>> model = DecoderLM(DecoderLMConfig(data.vocab_size, num_hiddens=16, num_heads=2, num_layers=1))
        >>> history = train_lm(model, data, context=16, epochs=2, lr=1e-2, progress=False, device="cpu")
        >>> history.epochs, history.valid_loss[-1] < history.train_loss[0]
        (2, True)
    """
    from ..data.lm import LMData

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module mapping (B, T) tokens to (B, T, V) logits, got "
                        f"{type(model).__name__}")
    if not isinstance(data, LMData):
        raise TypeError(f"data must be a course_lib.data.LMData (token streams), got {type(data).__name__}")
    context = check_positive_int(context, "context")
    label_smoothing = _check_training_arguments(
        minutes=minutes, epochs=epochs, lr=lr, batch_size=batch_size, warmup_steps=warmup_steps,
        clip=clip, eval_every=eval_every, label_smoothing=label_smoothing, amp=amp)
    data.window_starts("train", context)  # at least one window, or a clear error
    return _train(model, _LMTask(data, context, label_smoothing), minutes=minutes, epochs=epochs, lr=lr,
                  batch_size=batch_size, warmup_steps=warmup_steps, clip=clip, device=device, seed=seed,
                  progress=progress, eval_every=eval_every, amp=amp, compile=compile)


def _check_training_arguments(*, minutes: float | None, epochs: int | None, lr: float, batch_size: int,
                              warmup_steps: int, clip: float | None, eval_every: int | None,
                              label_smoothing: float, amp: bool | str) -> float:
    """Validate the arguments both trainers share; returns ``label_smoothing`` as a float."""
    if minutes is None and epochs is None:
        raise ValueError("give minutes= (a wall-clock budget) or epochs= (or both); got neither")
    if minutes is not None:
        check_positive(minutes, "minutes")
    if epochs is not None:
        check_positive_int(epochs, "epochs")
    check_positive(lr, "lr")
    check_positive_int(batch_size, "batch_size")
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ValueError(f"warmup_steps must be an int >= 0, got {warmup_steps!r}")
    if clip is not None and clip != 0:
        check_positive(clip, "clip")
    if eval_every is not None:
        check_positive_int(eval_every, "eval_every")
    label_smoothing = check_probability(label_smoothing, "label_smoothing")
    if amp not in (True, False, "bf16"):
        raise ValueError(f'amp must be True, False or "bf16", got {amp!r}')
    return label_smoothing


def _amp_dtype(device: torch.device, amp: bool | str) -> torch.dtype | None:
    # amp=True: mixed precision on CUDA only (bf16 where supported, else fp16 with a gradient scaler);
    # amp="bf16": bf16 autocast on any device, the CPU included (where the CPU supports it).
    if amp == "bf16":
        return torch.bfloat16
    if not amp or device.type != "cuda":
        return None
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def _warmup_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int) -> torch.optim.lr_scheduler.LambdaLR | None:
    """:func:`warmup_lr` rescaled to peak at the optimiser's ``lr`` after ``warmup_steps``; ``None`` for 0."""
    if warmup_steps == 0:
        return None
    peak = warmup_lr(warmup_steps, 1, warmup_steps)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_lr(s + 1, 1, warmup_steps) / peak)


@dataclass(frozen=True)
class _DataParallel:
    """This process's place in data-parallel training: rank 0 of 1 without a ``torch.distributed`` group."""

    rank: int
    size: int
    device: torch.device

    @classmethod
    def current(cls, device: torch.device) -> _DataParallel:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return cls(dist.get_rank(), dist.get_world_size(), device)
        return cls(0, 1, device)

    def wrap(self, model: nn.Module) -> nn.Module:
        """The model the steps run: ``model`` itself, or its DDP wrapper when there are several ranks."""
        if self.size == 1:
            return model
        from torch.nn.parallel import DistributedDataParallel

        # DDP broadcasts rank 0's weights, then averages the gradients during backward.
        return DistributedDataParallel(model, device_ids=[self.device.index] if self.device.type == "cuda" else None)

    def batches(self, task: _Task, batch_size: int, generator: torch.Generator) -> Iterator:
        """One epoch of shuffled training batches; with several ranks, this rank's part of each global
        batch of ``size * batch_size`` examples (the same shuffled order on every rank)."""
        if self.size == 1:
            yield from task.batches(batch_size, generator)
            return
        from .distributed import shard_batches

        for examples in shard_batches(task.epoch_order(generator), batch_size, self.rank, self.size):
            yield task.batch(examples)

    def token_mean(self, loss: torch.Tensor,
                   n_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(global token-mean loss, global token count, this rank's objective to backpropagate).

        DDP *averages* the ranks' gradients. Rank r's loss is a mean over its n_r tokens; weighting it by
        N * n_r / n (n the total over ranks) makes the average of the weighted gradients the gradient of
        the mean over all n tokens, whatever the ranks' token counts.
        """
        if self.size == 1:
            return loss, n_tokens, loss
        import torch.distributed as dist

        totals = torch.stack([loss.detach().float() * n_tokens, n_tokens])
        dist.all_reduce(totals)
        n_global = totals[1].clamp(min=1)
        return totals[0] / n_global, totals[1], loss * (n_tokens * self.size / n_global)

    def agree(self, stop: bool) -> bool:
        """Rank 0's decision to stop, shared with every rank (so all take the same number of steps)."""
        if self.size == 1:
            return stop
        import torch.distributed as dist

        flag = torch.tensor([float(stop)], device=self.device)
        dist.broadcast(flag, src=0)
        return bool(flag.item())


class _Task:
    """What a trainer trains on: the epoch's examples, their batches, the model's loss, the validation loss.

    ``epoch_order`` (one epoch's examples, shuffled with the run's generator) and ``batch`` (the batch of
    some of them) serve data parallelism, which deals each rank its part of every global batch; a single
    process takes ``batches``.
    """

    has_valid: bool

    def steps_per_epoch(self, batch_size: int, world_size: int) -> int:
        raise NotImplementedError

    def batches(self, batch_size: int, generator: torch.Generator) -> Iterator:
        raise NotImplementedError

    def epoch_order(self, generator: torch.Generator) -> list[int]:
        raise NotImplementedError

    def batch(self, examples: list[int]):
        raise NotImplementedError

    def forward(self, model: nn.Module, batch) -> torch.Tensor:
        """The model's logits on the batch (run under autocast)."""
        raise NotImplementedError

    def loss(self, logits: torch.Tensor, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(the batch's token-mean training loss, its number of target tokens as a float tensor)."""
        raise NotImplementedError

    def valid_loss(self, model: nn.Module, device: torch.device) -> float:
        raise NotImplementedError


class _Seq2SeqTask(_Task):
    """Sentence pairs, teacher forcing, masked cross-entropy (with label smoothing): :func:`train_seq2seq`."""

    def __init__(self, data, label_smoothing: float) -> None:
        self.data, self.label_smoothing = data, label_smoothing
        self.has_valid = len(data.valid) > 0

    def steps_per_epoch(self, batch_size: int, world_size: int) -> int:
        return math.ceil(len(self.data.train) / batch_size)

    def batches(self, batch_size: int, generator: torch.Generator) -> Iterator:
        return self.data.batches("train", batch_size, shuffle=True, generator=generator)

    def epoch_order(self, generator: torch.Generator) -> list[int]:
        return torch.randperm(len(self.data.train), generator=generator).tolist()

    def batch(self, examples: list[int]):
        from ..data import make_batch

        return make_batch([self.data.train[i] for i in examples], self.data.src_vocab, self.data.tgt_vocab)

    def forward(self, model: nn.Module, batch) -> torch.Tensor:
        return model(batch.src, batch.src_valid_lens, batch.tgt_in)

    def loss(self, logits: torch.Tensor, batch) -> tuple[torch.Tensor, torch.Tensor]:
        loss = masked_cross_entropy(logits.float(), batch.tgt_out, batch.tgt_valid_lens, self.label_smoothing)
        return loss, batch.tgt_valid_lens.sum().float()

    def valid_loss(self, model: nn.Module, device: torch.device) -> float:
        return evaluate_loss(model, self.data, "valid", device=device)


class _LMTask(_Task):
    """Windows of a token stream, next-token cross-entropy: :func:`train_lm`."""

    def __init__(self, data, context: int, label_smoothing: float) -> None:
        self.data, self.context, self.label_smoothing = data, context, label_smoothing
        self.has_valid = len(data.valid) > context

    def steps_per_epoch(self, batch_size: int, world_size: int) -> int:
        return math.ceil((len(self.data.train) - 1) // self.context / (batch_size * world_size))

    def batches(self, batch_size: int, generator: torch.Generator) -> Iterator:
        return self.data.batches("train", batch_size, self.context, shuffle=True, generator=generator)

    def epoch_order(self, generator: torch.Generator) -> list[int]:
        return self.data.epoch_starts("train", self.context, generator)

    def batch(self, examples: list[int]):
        return self.data.batch("train", examples, self.context)

    def forward(self, model: nn.Module, batch) -> torch.Tensor:
        return model(batch.inputs)  # (B, L, V)

    def loss(self, logits: torch.Tensor, batch) -> tuple[torch.Tensor, torch.Tensor]:
        loss = cross_entropy(logits, batch.targets, label_smoothing=self.label_smoothing)  # float32
        return loss, torch.full((), float(batch.n_tokens), device=logits.device)  # no copy from the host

    def valid_loss(self, model: nn.Module, device: torch.device) -> float:
        return evaluate_lm(model, self.data, "valid", self.context, device=device)


class _TrainingRun:
    """The state of one training run and what its loop does: step, validate, end an epoch.

    Set-up seeds the run, moves the model to its device in training mode, wraps it for data
    parallelism and ``torch.compile``, and makes Adam, its warm-up schedule and the autocast /
    gradient-scaler pair. Step losses stay on the device and are read back in chunks (:meth:`_flush`).
    """

    def __init__(self, model: nn.Module, task: _Task, *, device: torch.device | str | None, seed: int, lr: float,
                 warmup_steps: int, amp: bool | str, compile: bool) -> None:
        self.model, self.task = model, task
        self.device = torch.device(device) if device is not None else try_gpu()
        # Deterministic kernels are requested on the CPU only: on CUDA they would cost speed and warn.
        set_seed(seed, deterministic=self.device.type == "cpu")
        self.generator = torch.Generator().manual_seed(seed)
        model.to(self.device).train()
        self.world = _DataParallel.current(self.device)
        self.step_model = self.world.wrap(model)
        if compile:
            self.step_model = torch.compile(self.step_model)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        self.scheduler = _warmup_schedule(self.optimizer, warmup_steps)
        self.amp_dtype = _amp_dtype(self.device, amp)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        self.history = TrainHistory(device=str(self.device), world_size=self.world.size,
                                    amp=str(self.amp_dtype).replace("torch.", "") if self.amp_dtype else "off")
        self.has_valid = task.has_valid and self.world.rank == 0
        self.pending: list[tuple[torch.Tensor, torch.Tensor]] = []  # (loss, n_tokens), read back in chunks
        self.pending_norms: list[torch.Tensor] = []  # gradient norms before clipping, read back with them
        self.epoch_loss = self.epoch_tokens = 0.0

    @contextlib.contextmanager
    def started(self, minutes: float | None, *, progress: bool, total: int | None) -> Iterator[None]:
        """Start the clock and the progress bar; on exit, close the bar and finish the history."""
        # A live bar, or one line in a stored notebook (course_lib.progress, COURSE_PROGRESS).
        self.bar = progress_bar(total=total, disable=not progress or self.world.rank != 0, unit="step",
                                dynamic_ncols=True)
        start = time.perf_counter()
        self.deadline = start + 60.0 * minutes if minutes is not None else math.inf
        try:
            yield
        finally:
            self.bar.close()
        self.history.stopped_by = self.history.stopped_by or "epochs"
        self.history.seconds = time.perf_counter() - start
        self.model.eval()

    def batches(self, batch_size: int) -> Iterator:
        """This epoch's shuffled training batches, on the device."""
        for batch in self.world.batches(self.task, batch_size, self.generator):
            yield batch.to(self.device)

    def step(self, batch, *, clip: float | None) -> None:
        """One optimiser step: forward (under autocast), the task's loss, backward, clip, Adam."""
        with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None):
            logits = self.task.forward(self.step_model, batch)
        loss, n_tokens = self.task.loss(logits, batch)
        loss, n_tokens, objective = self.world.token_mean(loss, n_tokens)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(objective).backward()
        if clip:
            self.scaler.unscale_(self.optimizer)
            # the norm before clipping, read back with the losses
            norm = nn.utils.clip_grad_norm_(self.model.parameters(), clip)
            self.pending_norms.append(norm.detach().float())
        self.history.learning_rates.append(self.optimizer.param_groups[0]["lr"])
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.scheduler is not None:
            self.scheduler.step()
        self.history.steps += 1
        self.pending.append((loss.detach().float(), n_tokens))
        if len(self.pending) >= 25:
            self._flush()
        self.bar.update(1)

    def out_of_time(self) -> bool:
        """Whether the time budget is spent (rank 0's clock decides for every rank)."""
        if self.world.agree(time.perf_counter() >= self.deadline):
            self.history.stopped_by = "time"
        return self.history.stopped_by == "time"

    def validate(self) -> None:
        """Measure the validation loss after the current step (once per step; rank 0 only)."""
        self._flush()
        history = self.history
        if self.has_valid and (not history.valid_steps or history.valid_steps[-1] != history.steps):
            history.valid_steps.append(history.steps)
            history.valid_loss.append(self.task.valid_loss(self.model, self.device))
            self.model.train()

    def end_epoch(self) -> None:
        """Count a completed epoch and record its token-weighted mean training loss."""
        self.history.epochs += 1
        self._flush()
        self.history.epoch_loss.append(self.epoch_loss / max(self.epoch_tokens, 1.0))
        self.epoch_loss = self.epoch_tokens = 0.0

    def _flush(self) -> None:
        # One device sync for many steps instead of one per step keeps a GPU busy.
        if not self.pending:
            return
        values = torch.stack([torch.stack([loss, n]) for loss, n in self.pending]).cpu().tolist()
        self.pending.clear()
        if self.pending_norms:
            self.history.grad_norms += torch.stack(self.pending_norms).cpu().tolist()
            self.pending_norms.clear()
        for loss, n in values:
            self.history.train_loss.append(loss)
            self.history.tokens += int(n)
            self.epoch_loss += loss * n
            self.epoch_tokens += n
        self.bar.set_postfix(loss=f"{self.history.train_loss[-1]:.3f}", refresh=False)


def evaluate_loss(model: Seq2SeqModel, data, split: str = "valid", batch_size: int = 256,
                  device: torch.device | str | None = None) -> float:
    """Teacher-forcing loss on a whole split, averaged over its target tokens (dropout off).

    Args:
        model: a seq2seq model.
        data: a :class:`course_lib.data.Seq2SeqData`.
        split: ``"train"``, ``"valid"`` or ``"test"``.
        batch_size: pairs per forward pass.
        device: default the model's device.

    Returns:
        The mean token loss (``nan`` for an empty split).

    Examples:
        >>> data = load_dates(n_examples=20, locales=("en_US",), years=(2000, 2009), seed=0)
        >>> model = Transformer(TransformerConfig(len(data.src_vocab), len(data.tgt_vocab), num_hiddens=8,
        ...                                       ffn_num_hiddens=16, num_heads=2))
        >>> loss = evaluate_loss(model, data, "valid")
        >>> isinstance(loss, float), loss > 0
        (True, True)
    """
    _check_split(split)
    device = torch.device(device) if device is not None else model_device(model)
    was_training = model.training
    model.eval()
    total = torch.zeros((), device=device)
    n_tokens = 0
    try:
        with torch.no_grad():
            for batch in data.batches(split, batch_size, shuffle=False):
                batch = batch.to(device)
                n = int(batch.tgt_valid_lens.sum())
                logits = model(batch.src, batch.src_valid_lens, batch.tgt_in).float()
                total += masked_cross_entropy(logits, batch.tgt_out, batch.tgt_valid_lens) * n
                n_tokens += n
    finally:
        model.train(was_training)
    return float(total) / n_tokens if n_tokens else float("nan")


def lm_position_losses(model: nn.Module, data, split: str = "valid", length: int = 64, batch_size: int = 64,
                       device: torch.device | str | None = None, stride: int | None = None) -> torch.Tensor:
    r"""The mean next-token cross-entropy at each position of the windows of a split (dropout off).

    The stream is cut into windows of ``length + 1`` tokens from offset 0, ``stride`` apart
    (:meth:`course_lib.data.LMData.window_starts`; by default they do not overlap); position ``t`` of a
    window predicts its token ``t + 1`` from tokens ``0 .. t``. Entry ``t`` of the result is that
    cross-entropy averaged over the windows, so ``exp`` of it is the perplexity at position ``t`` and,
    without overlap, ``exp`` of the mean over positions the perplexity of the split read in windows of
    ``length`` (:func:`evaluate_lm`). Evaluated at a ``length`` beyond the training context, it shows
    how a model's positions extrapolate; a ``stride`` below ``length`` averages each position over more
    windows (a smoother curve, ``length / stride`` times the work).

    Args:
        model: maps (B, T) token ids to (B, T, V) logits.
        data: a :class:`course_lib.data.LMData`.
        split: ``"train"``, ``"valid"`` or ``"test"``.
        length: the window's predicted tokens.
        batch_size: windows per forward pass.
        device: default the model's device.
        stride: the distance between the starts of consecutive windows (default ``length``).

    Returns:
        (length,) float64 on the CPU, in nats.

    Examples:
        >>> from course_lib import DecoderLM, DecoderLMConfig
        >>> from course_lib.data import LMData, generated_sentences
        >>> data = LMData.from_sentences(generated_sentences(200), vocab_size=270)
        >>> model = DecoderLM(DecoderLMConfig(data.vocab_size, num_hiddens=16, num_heads=2, num_layers=1))
        >>> losses = lm_position_losses(model, data, "valid", length=8, device="cpu")
        >>> losses.shape, losses.dtype  # one mean cross-entropy (nats) per position
        (torch.Size([8]), torch.float64)
        >>> mean = evaluate_lm(model, data, "valid", context=8, device="cpu")  # the same windows
        >>> abs(losses.mean().item() - mean) < 1e-4
        True
    """
    from ..data.lm import LMData

    if not isinstance(data, LMData):
        raise TypeError(f"data must be a course_lib.data.LMData (token streams), got {type(data).__name__}")
    starts = data.window_starts(split, length, stride=stride)
    batch_size = check_positive_int(batch_size, "batch_size")
    device = torch.device(device) if device is not None else model_device(model)
    total = torch.zeros(length, dtype=torch.float64, device=device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for i in range(0, len(starts), batch_size):
                batch = data.batch(split, starts[i:i + batch_size], length).to(device)
                logits = model(batch.inputs).float()  # (b, L, V)
                token_loss = F.cross_entropy(logits.transpose(1, 2), batch.targets, reduction="none")  # (b, L)
                total += token_loss.sum(0).double()
    finally:
        model.train(was_training)
    return (total / len(starts)).cpu()


def evaluate_lm(model: nn.Module, data, split: str = "valid", context: int = 64, batch_size: int = 64,
                device: torch.device | str | None = None) -> float:
    """The held-out mean next-token cross-entropy of a split read in windows of ``context`` (dropout off).

    Every position of every non-overlapping window counts once (:func:`lm_position_losses`); the
    perplexity is ``math.exp`` of the result.

    Args:
        model, data, split, batch_size, device: as in :func:`lm_position_losses`.
        context: the predicted tokens of a window.

    Returns:
        The mean cross-entropy in nats per token.

    Examples:
        >>> from course_lib.data import LMData, generated_sentences
        >>> data = LMData.from_sentences(generated_sentences(200), vocab_size=280)
        >>> model = DecoderLM(DecoderLMConfig(data.vocab_size, num_hiddens=16, num_heads=2, num_layers=1))
        >>> untrained = math.exp(evaluate_lm(model, data, "valid", context=16))
        >>> abs(untrained - data.vocab_size) / data.vocab_size < 0.1  # about uniform over the vocabulary
        True
    """
    return float(lm_position_losses(model, data, split, context, batch_size, device).mean())


def _check_split(split: str) -> None:
    if split not in ("train", "valid", "test"):
        raise ValueError(f'split must be "train", "valid" or "test", got {split!r}')


def predict_split(model: Seq2SeqModel, data, split: str = "test", decoding: Literal["greedy", "beam"] = "greedy",
                  max_len: int | None = None, beam_size: int = 4, batch_size: int = 256,
                  limit: int | None = None) -> list[tuple[list[str], list[str], list[list[str]]]]:
    """Decode every distinct source sentence of a split.

    Args:
        model: a trained seq2seq model.
        data: a :class:`course_lib.data.Seq2SeqData`; ``data.references[split]`` lists the sources.
        split: ``"train"``, ``"valid"`` or ``"test"``.
        decoding: ``"greedy"`` or ``"beam"`` (GNMT length penalty 0.6).
        max_len: tokens to generate at most; default :func:`course_lib.decoding.search.default_max_len`.
        beam_size: for beam search.
        batch_size: sources decoded together.
        limit: decode only the first ``limit`` sources.

    Returns:
        One ``(source tokens, predicted tokens, every reference's tokens)`` triple per source.

    Examples:
        >>> data = load_dates(n_examples=20, locales=("en_US",), years=(2000, 2009), seed=0)
        >>> model = Transformer(TransformerConfig(len(data.src_vocab), len(data.tgt_vocab), num_hiddens=8,
        ...                                       ffn_num_hiddens=16, num_heads=2))
        >>> triples = predict_split(model, data, "test", limit=1)
        >>> source, predicted, references = triples[0]
        >>> data.to_text(source, "src"), [data.to_text(r) for r in references]  # an untrained model's guess aside
        ('Dec 21, 2005', ['2005-12-21'])
    """
    _check_split(split)
    check_choice(decoding, "decoding", ("greedy", "beam"))
    if limit is not None:
        check_positive_int(limit, "limit")
    items = list(data.references[split].items())[:limit]
    device = model_device(model)
    tgt_vocab = data.tgt_vocab
    out = []
    for start in range(0, len(items), batch_size):
        chunk = items[start:start + batch_size]
        src, src_valid_lens = data.encode_sources([list(s) for s, _ in chunk])
        src, src_valid_lens = src.to(device), src_valid_lens.to(device)
        ids = decode_batch(model, src, src_valid_lens, decoding, max_len=max_len, bos=tgt_vocab.bos,
                           eos=tgt_vocab.eos, beam_size=beam_size)
        for (source, refs), pred in zip(chunk, ids, strict=True):
            out.append((list(source), tgt_vocab.decode(pred), [list(r) for r in refs]))
    return out


def evaluate(model: Seq2SeqModel, data, split: str = "test", decoding: Literal["greedy", "beam"] = "greedy",
             max_len: int | None = None, beam_size: int = 4, batch_size: int = 256,
             limit: int | None = None) -> dict[str, float]:
    """Exact match and corpus BLEU of the model's translations of a split.

    Each distinct source is translated once and scored against *every* target it has in the split
    (``data.references[split]``): exact match counts a prediction equal to any of them, and
    :func:`course_lib.metrics.corpus_bleu` uses them all as references.

    Args:
        model, data, split, decoding, max_len, beam_size, batch_size, limit: as in :func:`predict_split`.

    Returns:
        ``{"exact_match": in [0, 1], "bleu": in [0, 100], "n": number of sources, "n_unk": predictions
        containing <unk>}``. For subword data (``data.tokenizer == "subword"``) the BLEU is
        :func:`course_lib.metrics.detokenized_bleu` of the detokenised text (sacrebleu's defaults).

    Examples:
        >>> data = load_dates(n_examples=20, locales=("en_US",), years=(2000, 2009), seed=0)
        >>> model = Transformer(TransformerConfig(len(data.src_vocab), len(data.tgt_vocab), num_hiddens=8,
        ...                                       ffn_num_hiddens=16, num_heads=2))
        >>> scores = evaluate(model, data, "test")
        >>> sorted(scores), scores["n"]  # the test split's two sources
        (['bleu', 'exact_match', 'n', 'n_unk'], 2)
    """
    triples = predict_split(model, data, split, decoding, max_len, beam_size, batch_size, limit)
    hyps: Sequence[list[str]] = [pred for _, pred, _ in triples]
    refs = [r for _, _, r in triples]
    n_unk = sum("<unk>" in pred for pred in hyps)
    if getattr(data, "tokenizer", None) == "subword":
        # Subword tokens are no unit to count n-grams in: score the detokenised text as sacrebleu does.
        hyp_text = [data.to_text(h) for h in hyps]
        ref_text = [[data.to_text(r) for r in rs] for rs in refs]
        hits = sum(h in rs for h, rs in zip(hyp_text, ref_text, strict=True))
        return {"exact_match": hits / len(hyps) if hyps else 0.0, "bleu": detokenized_bleu(hyp_text, ref_text),
                "n": len(triples), "n_unk": n_unk}
    return {"exact_match": exact_match(hyps, refs), "bleu": corpus_bleu(hyps, refs), "n": len(triples),
            "n_unk": n_unk}
