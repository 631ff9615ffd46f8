"""Benchmark: ``course_lib.MultiHeadAttention`` against ``torch.nn.MultiheadAttention``.

Forward + backward of self-attention with key padding (random valid lengths), same weights, both
in training mode with dropout 0; ``torch.nn.MultiheadAttention`` gets ``batch_first=True`` and
``need_weights=False`` (its fastest path). The two are timed in one run, interleaved (the order
alternates each repetition) so that a change of machine load hits both; the table reports the
median over the repetitions.

Run with ``python -m benchmarks`` (every benchmark) or ``python -m benchmarks.bench_attention``.
On a shared CPU check ``uptime`` first: the ratios are only meaningful on a quiet machine.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from course_lib.multihead import MultiHeadAttention
from course_lib.utils import try_gpu

# (label, batch, length, num_hiddens, num_heads)
CONFIGS = [
    ("short", 128, 35, 256, 4),
    ("long", 16, 256, 256, 4),
]


@dataclass(frozen=True)
class Result:
    """Median seconds per forward+backward step of both implementations for one configuration."""

    label: str
    shape: str
    ours_s: float
    torch_s: float

    @property
    def ratio(self) -> float:
        return self.ours_s / self.torch_s


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _mean_step_time(step: Callable[[], None], n_inner: int, device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    for _ in range(n_inner):
        step()
    _sync(device)
    return (time.perf_counter() - start) / n_inner


def compare(steps: dict[str, Callable[[], None]], device: torch.device, repeats: int = 9,
            n_inner: int = 5, warmup: int = 3) -> dict[str, float]:
    """Median seconds per call of each step, measured interleaved.

    Args:
        steps: name -> zero-argument callable doing one step.
        device: where the steps run (synchronised around each timing on CUDA).
        repeats: number of interleaved repetitions; the median over them is reported.
        n_inner: calls per timing.
        warmup: untimed calls of each step first.

    Returns:
        name -> median seconds per call.
    """
    for step in steps.values():
        for _ in range(warmup):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    for rep in range(repeats):
        # Alternate the order so that neither implementation always runs right after the other.
        for name in names if rep % 2 == 0 else reversed(names):
            times[name].append(_mean_step_time(steps[name], n_inner, device))
    return {name: statistics.median(ts) for name, ts in times.items()}


def _copy_weights(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight]))
        theirs.out_proj.weight.copy_(ours.W_o.weight)


def bench_config(batch: int, length: int, num_hiddens: int, num_heads: int, device: torch.device,
                 repeats: int = 9, n_inner: int = 5, seed: int = 0) -> tuple[float, float]:
    """Median seconds per forward+backward step: (ours, torch.nn.MultiheadAttention).

    Args:
        batch, length, num_hiddens, num_heads: the problem size; inputs are (batch, length, num_hiddens).
        device: where to run.
        repeats, n_inner: see :func:`compare`.
        seed: seeds the weights, inputs and valid lengths (a local generator).

    Returns:
        (ours_seconds, torch_seconds)
    """
    gen = torch.Generator().manual_seed(seed)
    ours = MultiHeadAttention(num_hiddens, num_heads).to(device).train()
    with torch.no_grad():
        for p in ours.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) / num_hiddens**0.5)
    theirs = nn.MultiheadAttention(num_hiddens, num_heads, bias=False, batch_first=True).to(device).train()
    _copy_weights(ours, theirs)
    x = torch.randn(batch, length, num_hiddens, generator=gen).to(device).requires_grad_(True)
    grad_out = torch.randn(batch, length, num_hiddens, generator=gen).to(device)
    valid_lens = torch.randint(1, length + 1, (batch,), generator=gen).to(device)
    # torch.nn.MultiheadAttention's key_padding_mask is True = masked out (ours: True = attend).
    key_padding_mask = torch.arange(length, device=device) >= valid_lens[:, None]

    def step_ours() -> None:
        ours.zero_grad(set_to_none=True)
        x.grad = None
        ours(x, x, x, valid_lens=valid_lens).backward(grad_out)

    def step_torch() -> None:
        theirs.zero_grad(set_to_none=True)
        x.grad = None
        theirs(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)[0].backward(grad_out)

    medians = compare({"ours": step_ours, "torch": step_torch}, device, repeats=repeats, n_inner=n_inner)
    return medians["ours"], medians["torch"]


def format_table(results: list[Result], device: torch.device) -> str:
    """Plain-text table, columns aligned."""
    header = ["config", "shape (B, T, d, h)", "ours (ms)", "torch (ms)", "ours/torch"]
    rows = [[r.label, r.shape, f"{1e3 * r.ours_s:.2f}", f"{1e3 * r.torch_s:.2f}", f"{r.ratio:.2f}"]
            for r in results]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        # Text columns left-aligned, numbers right-aligned.
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(cells)

    title = (f"MultiHeadAttention forward+backward with key padding vs torch.nn.MultiheadAttention "
             f"(device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads)")
    return "\n".join([title, line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def main(repeats: int = 9, n_inner: int = 5) -> list[Result]:
    """Time every configuration, print the table and return the results."""
    device = try_gpu()
    results = []
    for label, batch, length, num_hiddens, num_heads in CONFIGS:
        ours_s, torch_s = bench_config(batch, length, num_hiddens, num_heads, device, repeats, n_inner)
        results.append(Result(label, f"({batch}, {length}, {num_hiddens}, {num_heads})", ours_s, torch_s))
    print(format_table(results, device))
    return results


if __name__ == "__main__":
    main()
