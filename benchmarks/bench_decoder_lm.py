"""Benchmark: ``course_lib.DecoderLM`` against Hugging Face's ``LlamaForCausalLM`` (SDPA), same weights, same tokens.

The peer is ``transformers.LlamaForCausalLM`` with ``attn_implementation="sdpa"``; ours is
``DecoderLM.from_hf_llama`` of it: the same configuration and a copy of the same weights. Before timing,
the benchmark checks that the two compute one function (the logits agree to 1e-4 in float32) and that
greedy generation gives the same tokens. Three tables, each at one and at two threads:

1. **Greedy generation** of 128 new tokens (batch 1) after a 32-token and after a 512-token prompt:
   ``model.generate(prompt, 128, temperature=0.0)`` against ``hf.generate(prompt, max_new_tokens=128,
   do_sample=False)`` (no end-of-sequence token, so both generate all 128).
2. **A training step** (forward, next-token cross-entropy, backward, AdamW step) at 16 x 128 and 4 x 512
   tokens. Both compute the loss as Hugging Face's ``ForCausalLMLoss`` does: over all T positions' logits,
   with the target after the last one ignored; each with its own library's loss (ours
   :func:`course_lib.cross_entropy`, what ``train_lm`` minimises).

3. **The loss alone**, forward and backward, on the logits of those training steps: ``cl.cross_entropy`` (its
   gradient p - q written over the saved log-probabilities) against ``F.cross_entropy`` (autograd's).

Targets (issue 27), printed under each table as met or MISSED: generation takes at most
:data:`TARGET_GENERATION` times the peer's time after either prompt, a training step at most
:data:`TARGET_TRAIN_STEP` times. Contenders are timed in one run, interleaved (the order alternates each
repetition); the tables give the median time and the median of the per-repetition ratios, over 7 repetitions
of a generation and 15 of a training step (whose ratio lies nearer its target: one training step's ratio varies
by about +-3 % on a shared CPU, and the median of 15 by about 1 %). Run with
``python -m benchmarks.bench_decoder_lm``; on a shared CPU check ``uptime`` first.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every model below is built from a local config

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from course_lib.models.decoder_lm import DecoderLM, swiglu_hidden_size  # noqa: E402
from course_lib.training.loss import cross_entropy  # noqa: E402

from .bench_attention import busy_warning, compare_timings, environment, table, target_line  # noqa: E402

TARGET_GENERATION = 0.80  # ours / Hugging Face, after each prompt length
TARGET_TRAIN_STEP = 0.95  # ours / Hugging Face
TARGET_LOSS = 0.75  # cl.cross_entropy / F.cross_entropy, forward and backward (the module's docstring: ~2/3)


@dataclass(frozen=True)
class Setup:
    """The model both sides run (issue 27's sizes)."""

    vocab: int = 2000
    num_hiddens: int = 256
    num_heads: int = 8
    num_kv_heads: int = 4
    num_layers: int = 4
    new_tokens: int = 128

    def hf_config(self):
        from transformers import LlamaConfig

        return LlamaConfig(vocab_size=self.vocab, hidden_size=self.num_hiddens,
                           intermediate_size=swiglu_hidden_size(self.num_hiddens),
                           num_hidden_layers=self.num_layers, num_attention_heads=self.num_heads,
                           num_key_value_heads=self.num_kv_heads, max_position_embeddings=2048,
                           attn_implementation="sdpa", eos_token_id=None, bos_token_id=None, pad_token_id=0)

    def describe(self) -> str:
        return (f"V={self.vocab}, d={self.num_hiddens}, {self.num_heads} heads, {self.num_kv_heads} key/value heads, "
                f"{self.num_layers} layers, SwiGLU {swiglu_hidden_size(self.num_hiddens)}")


def build(setup: Setup, seed: int = 0):
    """The peer and ours, with the same weights, checked to compute one function."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    hf = LlamaForCausalLM(setup.hf_config()).eval()
    hf.generation_config.eos_token_id = None
    hf.generation_config.pad_token_id = 0
    ours = DecoderLM.from_hf_llama(hf)
    tokens = torch.randint(0, setup.vocab, (2, 64), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        err = (ours(tokens) - hf(tokens).logits).abs().max().item()
    if err > 1e-4:
        raise AssertionError(f"the two models differ: logits {err:.2e} apart")
    return hf, ours


def generation_steps(hf, ours, setup: Setup, prompt_len: int, seed: int = 1) -> dict[str, Callable[[], None]]:
    """One greedy generation each, after a prompt of ``prompt_len`` tokens; checked to give the same tokens."""
    prompt = torch.randint(0, setup.vocab, (1, prompt_len), generator=torch.Generator().manual_seed(seed))

    def theirs() -> torch.Tensor:
        return hf.generate(prompt, max_new_tokens=setup.new_tokens, min_new_tokens=setup.new_tokens,
                           do_sample=False)

    def mine() -> torch.Tensor:
        return ours.generate(prompt, setup.new_tokens, temperature=0.0)

    with torch.no_grad():
        a, b = theirs(), mine()
    if not torch.equal(a, b):
        differ = int((a != b).nonzero()[0, 1]) if a.shape == b.shape else -1
        raise AssertionError(f"greedy tokens differ (first at position {differ}) after a {prompt_len}-token prompt")
    return {"ours": mine, "HF": theirs}


def training_steps(hf, ours, setup: Setup, batch: int, length: int, seed: int = 2) -> dict[str, Callable[[], None]]:
    """One training step each (forward, cross-entropy, backward, AdamW) on copies of the models."""
    tokens = torch.randint(0, setup.vocab, (batch, length), generator=torch.Generator().manual_seed(seed))
    hf_train, ours_train = copy.deepcopy(hf).train(), copy.deepcopy(ours).train()
    hf_opt = torch.optim.AdamW(hf_train.parameters(), lr=1e-4)
    ours_opt = torch.optim.AdamW(ours_train.parameters(), lr=1e-4)

    def theirs() -> None:
        loss = hf_train(tokens, labels=tokens).loss
        loss.backward()
        hf_opt.step()
        hf_opt.zero_grad(set_to_none=True)

    # The next token of every position, -100 (ignored) after the last: Hugging Face's loss, on all T logits
    # (no copy of the logits without their last position).
    targets = F.pad(tokens[:, 1:], (0, 1), value=-100)

    def mine() -> None:
        logits = ours_train(tokens)
        loss = cross_entropy(logits, targets, ignore_index=-100)
        loss.backward()
        ours_opt.step()
        ours_opt.zero_grad(set_to_none=True)

    return {"ours": mine, "HF": theirs}


def loss_steps(setup: Setup, batch: int, length: int, seed: int = 3) -> dict[str, Callable[[], None]]:
    """The loss alone, forward and backward, on (batch * length, V) logits with the last target of each row
    ignored: ours and torch's, checked to give the same loss and gradient."""
    g = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(batch * length, setup.vocab, generator=g)).requires_grad_(True)
    targets = torch.randint(0, setup.vocab, (batch * length,), generator=g)
    targets[length - 1 :: length] = -100

    def run(loss_fn) -> torch.Tensor:
        loss_fn(logits, targets, ignore_index=-100).backward()
        grad, logits.grad = logits.grad, None
        return grad

    a, b = run(cross_entropy), run(F.cross_entropy)
    if not torch.allclose(a, b, rtol=0, atol=1e-6):
        raise AssertionError(f"the two losses' gradients differ by {(a - b).abs().max().item():.2e}")
    return {"ours": lambda: run(cross_entropy), "torch": lambda: run(F.cross_entropy)}


def _rows(results: list[tuple[str, int, object]]) -> list[list[str]]:
    return [[label, str(threads), f"{t.median('ours') * 1e3:.1f} ms", f"{t.median('HF') * 1e3:.1f} ms",
             f"{t.ratio('ours', 'HF'):.2f}", f"{t.ratio('ours', 'HF', 'cpu'):.2f}"] for label, threads, t in results]


def main(repeats: int = 7, train_repeats: int = 15, threads: tuple[int, ...] = (1, 2)) -> dict[str, list]:
    """Time generations (``repeats`` each) and training steps (``train_repeats``) at each thread count; print
    the tables and the targets."""
    setup = Setup()
    if (warning := busy_warning()) is not None:
        print(warning)
    hf, ours = build(setup)
    before = torch.get_num_threads()
    generation, training, losses = [], [], []
    try:
        for n in threads:
            torch.set_num_threads(n)
            for prompt_len in (32, 512):
                with torch.no_grad():
                    t = compare_timings(generation_steps(hf, ours, setup, prompt_len), torch.device("cpu"),
                                        repeats=repeats, n_inner=1, warmup=1)
                generation.append((f"{setup.new_tokens} tokens after {prompt_len}", n, t))
            for batch, length in ((16, 128), (4, 512)):
                t = compare_timings(training_steps(hf, ours, setup, batch, length), torch.device("cpu"),
                                    repeats=train_repeats, n_inner=1, warmup=2)
                training.append((f"{batch} x {length}", n, t))
            t = compare_timings(loss_steps(setup, 4, 512), torch.device("cpu"), repeats=train_repeats, n_inner=3,
                                warmup=2)  # both training shapes give 2,048 rows of logits
            losses.append((f"{4 * 512} x {setup.vocab} logits", n, t))
    finally:
        torch.set_num_threads(before)
    header = ["case", "threads", "ours", "HF", "ours/HF", "CPU ours/HF"]
    print(table(f"Greedy generation, batch 1 ({setup.describe()}; {environment(torch.device('cpu'))})",
                header, _rows(generation)))
    for label, n, t in generation:
        print(target_line(f"generation, {label}, {n} thread{'s' if n > 1 else ''}: ours/HF", t.ratio("ours", "HF"),
                          TARGET_GENERATION))
    print()
    print(table("Training step: forward, cross-entropy, backward, AdamW", header, _rows(training)))
    for label, n, t in training:
        print(target_line(f"training step, {label}, {n} thread{'s' if n > 1 else ''}: ours/HF",
                          t.ratio("ours", "HF"), TARGET_TRAIN_STEP))
    print()
    print(table("The loss alone, forward and backward: cl.cross_entropy against F.cross_entropy",
                ["case", "threads", "ours", "torch", "ours/torch"],
                [[label, str(n), f"{t.median('ours') * 1e3:.1f} ms", f"{t.median('torch') * 1e3:.1f} ms",
                  f"{t.ratio('ours', 'torch'):.2f}"] for label, n, t in losses]))
    for label, n, t in losses:
        print(target_line(f"loss, {label}, {n} thread{'s' if n > 1 else ''}: ours/torch", t.ratio("ours", "torch"),
                          TARGET_LOSS))
    return {"generation": generation, "training": training, "loss": losses}


if __name__ == "__main__":
    main()
