"""Benchmark: the cost of causal self-attention over n positions, dense against sparse (chapter 9).

Three ways to compute one forward pass of causal attention (batch 1, 2 heads of size 16, float32,
``torch.no_grad()``):

- **explicit dense**: the (n, n) score matrix, a masked softmax with the look-ahead mask, a product
  (:func:`course_lib.attention.sparse.dense_attention`; the mask is built inside the call, as a model does);
- **fused dense**: ``F.scaled_dot_product_attention(..., is_causal=True)``
  (:func:`course_lib.attention.sparse.fused_attention`), which never stores the whole matrix;
- **sparse**: the causal strided pattern of Child et al. (2019) with stride ``ceil(sqrt(n))``
  (:func:`course_lib.attention.sparse.strided_attention`), which scores about ``2 sqrt(n)`` keys per query.

Time: the median over interleaved repetitions (see :func:`benchmarks.bench_attention.compare`).
Peak memory: :func:`course_lib.attention.sparse.peak_memory`, the bytes of the tensors a call creates that are
alive at the same time (``torch.cuda.max_memory_allocated`` on a GPU). The table gives both, their
ratios to sparse (explicit dense stops at n = 4096, where it holds half a gigabyte), and the slopes of
log(cost) against log(n) fitted by least squares over n >= 1024, where the fixed per-call overheads no
longer dominate (explicit dense: 2, fused dense: 2 in time and 1 in memory, sparse: about 1.5).

Run with ``python -m benchmarks.bench_sparse`` (or ``python -m benchmarks`` for every benchmark).
The CPU runs on one thread by default (see :func:`main`). On a shared CPU check ``uptime`` first: the
time ratios are only meaningful on a quiet machine (the memory columns do not depend on the load).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from course_lib.attention.sparse import default_stride, dense_attention, fused_attention, peak_memory, strided_attention
from course_lib.utils import try_gpu

from .bench_attention import compare

BATCH, HEADS, HEAD_SIZE = 1, 2, 16
LENGTHS = (256, 512, 1024, 2048, 4096, 8192, 16384)
EXPLICIT_MAX = 4096  # explicit dense holds 2 n^2 floats per head: 0.5 GiB at 4096, 8 GiB at 16384
SLOPE_FROM = 1024  # fixed per-call overheads dominate the shorter lengths
METHODS = ("explicit", "fused", "sparse")
# The targets at n = 4096: sparse at least this many times faster / smaller than explicit dense.
TARGET_N, TARGET_TIME, TARGET_MEMORY = 4096, 4.0, 8.0


@dataclass(frozen=True)
class Row:
    """Median seconds and peak bytes of each method at one length (explicit dense only up to EXPLICIT_MAX)."""

    n: int
    seconds: dict[str, float]
    peak_bytes: dict[str, int]


def attention_calls(n: int, device: torch.device, seed: int = 0) -> dict[str, Callable[[], torch.Tensor]]:
    """The three ways to compute causal self-attention over ``n`` positions, as zero-argument callables."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(BATCH, HEADS, n, HEAD_SIZE, generator=gen).to(device) for _ in range(3))
    stride = default_stride(n)

    def explicit() -> torch.Tensor:
        look_ahead = torch.ones(n, n, dtype=torch.bool, device=device).tril()
        return dense_attention(q, k, v, look_ahead)

    return {
        "explicit": explicit,
        "fused": lambda: fused_attention(q, k, v, causal=True),
        "sparse": lambda: strided_attention(q, k, v, stride, causal=True),
    }


def measure(n: int, device: torch.device, repeats: int = 5, n_inner: int = 2) -> Row:
    """Time and peak memory of the three methods at length ``n`` (forward pass, no autograd)."""
    calls = attention_calls(n, device)
    if n > EXPLICIT_MAX:
        del calls["explicit"]
    with torch.no_grad():
        peaks = {name: peak_memory(call, device) for name, call in calls.items()}
        seconds = compare(calls, device, repeats=repeats, n_inner=n_inner, warmup=1)
    return Row(n, seconds, peaks)


def loglog_slope(ns: list[int], values: list[float]) -> float:
    """Least-squares slope of log(values) against log(ns): the exponent p of values ~ n^p."""
    xs, ys = [math.log(n) for n in ns], [math.log(v) for v in values]
    x_mean, y_mean = sum(xs) / len(xs), sum(ys) / len(ys)
    return (sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys, strict=True))
            / sum((x - x_mean) ** 2 for x in xs))


def _slope(rows: list[Row], method: str, field: str) -> float:
    points = [(r.n, getattr(r, field)[method]) for r in rows if r.n >= SLOPE_FROM and method in r.seconds]
    return loglog_slope([n for n, _ in points], [v for _, v in points])


def format_table(rows: list[Row], device: torch.device) -> str:
    """Plain-text table: times, memory and their ratios to sparse, then the fitted slopes."""
    header = ["n", "explicit ms", "fused ms", "sparse ms", "expl/sparse", "fused/sparse",
              "explicit MiB", "fused MiB", "sparse MiB", "expl/sparse"]

    def cell(values: dict, key: str, fmt: str) -> str:
        return format(values[key], fmt) if key in values else "-"

    body = []
    for r in rows:
        t = {k: 1e3 * v for k, v in r.seconds.items()}
        m = {k: v / 2**20 for k, v in r.peak_bytes.items()}
        ratio_t = {k: t[k] / t["sparse"] for k in t}
        ratio_m = {k: m[k] / m["sparse"] for k in m}
        body.append([str(r.n), *(cell(t, k, ".2f") for k in METHODS), cell(ratio_t, "explicit", ".1f"),
                     cell(ratio_t, "fused", ".1f"), *(cell(m, k, ".2f") for k in METHODS),
                     cell(ratio_m, "explicit", ".1f")])
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True))

    slopes = f"fitted slopes of log(cost) vs log(n) over n >= {SLOPE_FROM}: " + ", ".join(
        f"{k} time {_slope(rows, k, 'seconds'):.2f} / memory {_slope(rows, k, 'peak_bytes'):.2f}" for k in METHODS)
    title = (f"Causal self-attention, forward pass, batch {BATCH}, {HEADS} heads of {HEAD_SIZE}; sparse = strided, "
             f"stride ceil(sqrt n); ratios = method / sparse (device {device}, torch {torch.__version__}, "
             f"{torch.get_num_threads()} threads)")
    return "\n".join([title, line(header), line(["-" * w for w in widths]), *(line(r) for r in body), slopes])


def main(repeats: int = 5, n_inner: int = 2, threads: int | None = 1) -> list[Row]:
    """Measure every length, print the table and whether the targets at n = 4096 are met.

    Args:
        repeats, n_inner: see :func:`benchmarks.bench_attention.compare`.
        threads: CPU threads during the run (restored afterwards); ``None`` keeps PyTorch's default.
            One thread by default: on a shared CPU, several threads per process make every small
            operation wait at a barrier for a descheduled thread, which measures the scheduler (and
            hurts the sparse path, made of many small operations, most) rather than the algorithms.
    """
    device = try_gpu()
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        rows = [measure(n, device, repeats, n_inner) for n in LENGTHS]
        print(format_table(rows, device))
    finally:
        torch.set_num_threads(previous)
    last = next(r for r in rows if r.n == TARGET_N)
    time_ratio = last.seconds["explicit"] / last.seconds["sparse"]
    memory_ratio = last.peak_bytes["explicit"] / last.peak_bytes["sparse"]
    print(f"at n = {TARGET_N}: sparse is {time_ratio:.1f}x faster (target {TARGET_TIME:.0f}x: "
          f"{'met' if time_ratio >= TARGET_TIME else 'MISSED'}) and needs {memory_ratio:.1f}x less memory "
          f"(target {TARGET_MEMORY:.0f}x: {'met' if memory_ratio >= TARGET_MEMORY else 'MISSED'}) than explicit dense")
    return rows


if __name__ == "__main__":
    main()
