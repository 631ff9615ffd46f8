"""Benchmark: chapter 10's efficient attention, measured (FlashAttention in plain PyTorch, linear attention).

Four measurements, each printed as a table:

1. **Tolerances.** :func:`course_lib.flash_attention` against ``torch.nn.functional.scaled_dot_product_attention``
   (SDPA): the largest absolute difference of the output and of the gradients of q, k and v, in float64 and
   float32, and in float32 both against the exact result (SDPA in float64 on the same inputs), which tells
   flash's own rounding from SDPA's (batch 2, 4 query heads on 2 key/value heads, 256 positions, size 32,
   bottom-right causal and key padding, blocks 48 x 40 that do not divide the length).
2. **Memory.** The peak extra memory (:func:`course_lib.peak_memory`: the bytes of the tensors a call
   creates that are alive at once) of the tiled kernel (blocks 64) and of the explicit kernel
   (:func:`course_lib.explicit_kernel`, which forms the n x n weights), causal self-attention over n up to
   4096 (batch 1, 2 heads of 16, float32), forward pass and forward + backward; the slopes of
   log(bytes) against log(n) fitted over n >= 1024, and the ratio at n = 4096. The tiled kernel's peak is
   a fixed part (the tiles) plus a part linear in n (output, log-sum-exp, accumulators), so its log-log
   slope stays below 1 over these lengths; the least-squares fit ``a + b n`` shows the linear part.
3. **Linear against softmax attention, time.** Causal attention over n up to 8192 (batch 1, 2 heads of
   32, float32, forward): the explicit softmax kernel (up to 4096), SDPA, and :func:`course_lib.linear_attention`
   in its chunked (chunks of 64) and parallel modes; fitted slopes of log(time) against log(n) over
   n >= 1024 (expected: about 2 for softmax attention, about 1 for linear attention).
4. **FlashAttention's time.** The tiled kernel (blocks 64 and 128) against SDPA and the explicit kernel,
   causal forward pass. Each tile is a handful of PyTorch calls, so on a CPU the plain-PyTorch kernel is
   *slower* than SDPA (one fused C++ kernel that tiles the same way): this is expected. FlashAttention's
   speed-up (Dao et al. 2022) is a GPU effect, fewer trips between HBM and on-chip SRAM; the memory
   result (2.) is what a CPU reproduces.

Times are medians over interleaved repetitions (:func:`benchmarks.bench_attention.compare`). Run with
``python -m benchmarks.bench_efficient_attention`` (or ``python -m benchmarks`` for every benchmark), on a
quiet machine (check ``uptime``); one CPU thread by default. The memory and tolerance columns do not
depend on the load.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

import course_lib as cl
from course_lib.utils import try_gpu

from .bench_attention import compare, environment
from .bench_sparse import loglog_slope

MEMORY_LENGTHS = (256, 512, 1024, 2048, 4096)
TIME_LENGTHS = (256, 512, 1024, 2048, 4096, 8192)
FLASH_LENGTHS = (512, 1024, 2048, 4096)
EXPLICIT_MAX = 4096  # the explicit kernel holds n^2 weights per head: 128 MiB per head at 4096
SLOPE_FROM = 1024  # fixed per-call overheads dominate the shorter lengths


def _randn(*shape: int, gen: torch.Generator, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype).to(device)


def _sdpa_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """SDPA with the key/value heads repeated and the keep-mask as a boolean attn_mask (every row keeps a key)."""
    groups = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1),
                                          attn_mask=keep)


def _outputs_and_grads(attention: Callable[..., torch.Tensor], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       d_out: torch.Tensor) -> list[torch.Tensor]:
    """The output of ``attention(q, k, v)`` and the gradients of q, k, v for the output gradient ``d_out``."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = attention(q, k, v)
    return [out.detach(), *torch.autograd.grad(out, (q, k, v), d_out.to(out.dtype))]


def tolerances(device: torch.device, n: int = 256, d: int = 32, seed: int = 0) -> dict[str, dict[str, float]]:
    """Max abs differences of the output and the q, k, v gradients: flash against SDPA, and both against exact.

    The inputs are drawn in float32; "exact" is SDPA in float64 on the same (upcast) inputs, so the float32
    rows separate flash's own rounding from SDPA's.
    """
    gen = torch.Generator().manual_seed(seed)
    q = _randn(2, 4, n, d, gen=gen, dtype=torch.float32, device=device)
    k, v = (_randn(2, 2, n, d, gen=gen, dtype=torch.float32, device=device) for _ in range(2))
    d_out = _randn(2, 4, n, d, gen=gen, dtype=torch.float32, device=device)
    mask = cl.padding_mask(torch.tensor([n, n - 37]), n).unsqueeze(1).to(device)  # (2, 1, 1, n)
    keep = mask & cl.causal_mask(n, device=device)

    def flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return cl.flash_attention(q, k, v, mask, causal=True, block_q=48, block_k=40)

    def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return _sdpa_reference(q, k, v, keep)

    double = [t.double() for t in (q, k, v, d_out)]
    exact = _outputs_and_grads(sdpa, *double)
    runs = {
        "float64 flash - SDPA": (_outputs_and_grads(flash, *double), exact),
        "float32 flash - SDPA": (_outputs_and_grads(flash, q, k, v, d_out), _outputs_and_grads(sdpa, q, k, v, d_out)),
        "float32 flash - exact": (_outputs_and_grads(flash, q, k, v, d_out), exact),
        "float32 SDPA - exact": (_outputs_and_grads(sdpa, q, k, v, d_out), exact),
    }
    names = ("output", "grad q", "grad k", "grad v")
    return {label: {name: (a.double() - b.double()).abs().max().item() for name, a, b in zip(names, got, want,
                                                                                             strict=True)}
            for label, (got, want) in runs.items()}


def _attention_calls(n: int, heads: int, d: int, device: torch.device, backward: bool,
                     seed: int = 0) -> dict[str, Callable[[], object]]:
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (_randn(1, heads, n, d, gen=gen, dtype=torch.float32, device=device).requires_grad_(backward)
               for _ in range(3))

    def run(attention: Callable[[], torch.Tensor]) -> Callable[[], object]:
        if not backward:
            return attention
        return lambda: torch.autograd.grad(attention().sum(), (q, k, v))

    return {
        "flash": run(lambda: cl.flash_attention(q, k, v, causal=True, block_q=64, block_k=64)),
        "explicit": run(lambda: cl.explicit_kernel(q, k, v, causal=True)[0]),
    }


def memory(device: torch.device, lengths: tuple[int, ...] = MEMORY_LENGTHS) -> dict[str, dict[int, int]]:
    """Peak extra bytes of flash and explicit attention, forward and forward + backward, per length."""
    peaks: dict[str, dict[int, int]] = {}
    for backward in (False, True):
        for n in lengths:
            for name, call in _attention_calls(n, 2, 16, device, backward).items():
                key = f"{name} {'fwd+bwd' if backward else 'fwd'}"
                with torch.set_grad_enabled(backward):
                    peaks.setdefault(key, {})[n] = cl.peak_memory(call, device)
    return peaks


def _linear_and_softmax_calls(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> dict[str, Callable[[], object]]:
    calls = {
        "softmax explicit": lambda: cl.explicit_kernel(q, k, v, causal=True),
        "softmax SDPA": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "linear chunked": lambda: cl.linear_attention(q, k, v, causal=True, mode="chunked"),
        "linear parallel": lambda: cl.linear_attention(q, k, v, causal=True),
    }
    if q.shape[-2] > EXPLICIT_MAX:
        del calls["softmax explicit"]
    return calls


def _flash_calls(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> dict[str, Callable[[], object]]:
    return {
        "flash 64": lambda: cl.flash_attention(q, k, v, causal=True, block_q=64, block_k=64),
        "flash 128": lambda: cl.flash_attention(q, k, v, causal=True, block_q=128, block_k=128),
        "SDPA": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "explicit": lambda: cl.explicit_kernel(q, k, v, causal=True),
    }


def _forward_times(make_calls: Callable[..., dict[str, Callable[[], object]]], device: torch.device,
                   lengths: tuple[int, ...], repeats: int, n_inner: int) -> dict[str, dict[int, float]]:
    """Median seconds of each call per length: causal attention, batch 1, 2 heads of 32, float32, no autograd."""
    seconds: dict[str, dict[int, float]] = {}
    for n in lengths:
        gen = torch.Generator().manual_seed(n)
        q, k, v = (_randn(1, 2, n, 32, gen=gen, dtype=torch.float32, device=device) for _ in range(3))
        with torch.no_grad():
            for name, s in compare(make_calls(q, k, v), device, repeats=repeats, n_inner=n_inner, warmup=1).items():
                seconds.setdefault(name, {})[n] = s
    return seconds


def linear_vs_softmax(device: torch.device, lengths: tuple[int, ...] = TIME_LENGTHS, repeats: int = 5,
                      n_inner: int = 2) -> dict[str, dict[int, float]]:
    """Median seconds of causal softmax (explicit, SDPA) and linear (chunked, parallel) attention per length."""
    return _forward_times(_linear_and_softmax_calls, device, lengths, repeats, n_inner)


def flash_times(device: torch.device, lengths: tuple[int, ...] = FLASH_LENGTHS, repeats: int = 3,
                n_inner: int = 1) -> dict[str, dict[int, float]]:
    """Median seconds of the causal forward pass: flash (blocks 64, 128), SDPA and the explicit kernel."""
    return _forward_times(_flash_calls, device, lengths, repeats, n_inner)


def slope(values: dict[int, float], start: int = SLOPE_FROM) -> float:
    """The fitted exponent p of values ~ n^p over the lengths n >= ``start``."""
    points = sorted((n, v) for n, v in values.items() if n >= start)
    return loglog_slope([n for n, _ in points], [v for _, v in points])


def linear_fit(values: dict[int, float]) -> tuple[float, float, float]:
    """Least-squares ``values ~ a + b n``: returns a, b and the largest relative residual."""
    ns, ys = sorted(values), [values[n] for n in sorted(values)]
    n_mean, y_mean = sum(ns) / len(ns), sum(ys) / len(ys)
    b = sum((n - n_mean) * (y - y_mean) for n, y in zip(ns, ys, strict=True)) / sum((n - n_mean) ** 2 for n in ns)
    a = y_mean - b * n_mean
    return a, b, max(abs(a + b * n - y) / y for n, y in zip(ns, ys, strict=True))


def _table(title: str, columns: dict[str, dict[int, float]], fmt: Callable[[float], str]) -> str:
    lengths = sorted({n for col in columns.values() for n in col})
    header = ["n", *columns]
    body = [[str(n), *(fmt(col[n]) if n in col else "-" for col in columns.values())] for n in lengths]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True))

    return "\n".join([title, line(header), line(["-" * w for w in widths]), *(line(r) for r in body)])


def main(threads: int | None = 1) -> dict[str, object]:
    """Run the four measurements, print their tables, and return the numbers (for a notebook's glue).

    Args:
        threads: CPU threads during the run (restored afterwards); ``None`` keeps PyTorch's default.
    """
    device = try_gpu()
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        print(f"Efficient attention ({environment(device)})\n")
        tol = tolerances(device)
        print("1. flash_attention vs SDPA, max abs difference (batch 2, 4 heads on 2 kv heads, n 256, d 32, "
              "causal + padding, blocks 48 x 40)")
        for label, row in tol.items():
            print(f"   {label:22s} " + ", ".join(f"{k} {v:.1e}" for k, v in row.items()))
        peaks = memory(device)
        print()
        print(_table("2. peak extra memory, MiB (causal self-attention, batch 1, 2 heads of 16, float32; "
                     "flash blocks 64)", peaks, lambda b: f"{b / 2**20:.3f}"))
        for phase in ("fwd", "fwd+bwd"):
            flash, explicit = peaks[f"flash {phase}"], peaks[f"explicit {phase}"]
            n = max(flash)
            a, b, residual = linear_fit(flash)
            print(f"   {phase}: fitted slopes over n >= {SLOPE_FROM}: flash {slope(flash):.2f}, explicit "
                  f"{slope(explicit):.2f}; at n = {n} explicit / flash = {explicit[n] / flash[n]:.0f}x; flash = "
                  f"{a / 2**10:.0f} KiB (fixed tiles) + {b:.0f} B x n (max residual {100 * residual:.1f}%)")
        times = linear_vs_softmax(device)
        print()
        print(_table("3. causal attention, forward, ms (batch 1, 2 heads of 32, float32)", times,
                     lambda s: f"{1e3 * s:.2f}"))
        print("   fitted slopes of log(time) over n >= "
              f"{SLOPE_FROM}: " + ", ".join(f"{name} {slope(col):.2f}" for name, col in times.items()))
        flash = flash_times(device)
        print()
        print(_table("4. causal forward pass, ms (batch 1, 2 heads of 32, float32)", flash,
                     lambda s: f"{1e3 * s:.1f}"))
        n = max(flash["SDPA"])
        print(f"   at n = {n}: flash 64 / SDPA = {flash['flash 64'][n] / flash['SDPA'][n]:.1f}x, flash 128 / SDPA = "
              f"{flash['flash 128'][n] / flash['SDPA'][n]:.1f}x, explicit / SDPA = "
              f"{flash['explicit'][n] / flash['SDPA'][n]:.1f}x: plain-PyTorch tiles are slower than the fused kernel "
              f"on a CPU, as expected; the paper's speed-up is a GPU (HBM vs SRAM) effect")
    finally:
        torch.set_num_threads(previous)
    return {"tolerances": tol, "memory": peaks, "linear_vs_softmax": times, "flash_times": flash}


if __name__ == "__main__":
    main()
