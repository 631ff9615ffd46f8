"""Benchmark: ``course_lib.MultiHeadAttention`` against ``torch.nn.MultiheadAttention`` and D2L's.

Forward + backward of self-attention with key padding (random valid lengths), same weights, all
in training mode with dropout 0; ``torch.nn.MultiheadAttention`` gets ``batch_first=True`` and
``need_weights=False`` (its fastest path). The third peer, :class:`D2LMultiHeadAttention`, is the
multi-head attention of *Dive into Deep Learning* (the book this course's names follow), written
here from its description: bias-free linear projections, ``transpose_qkv`` to fold the heads into
the batch, scaled dot-product attention whose masked softmax fills the padded scores with -1e6
(``sequence_mask``), ``transpose_output`` and ``W_o``. All are timed in one run, interleaved (the order
alternates each repetition) so that a change of machine load hits all; the table reports the
median time over the repetitions and, as the ratio, the median of the per-repetition ratios (in
wall-clock time, and in process CPU time, which a busy machine disturbs less).

A fourth contender, ``bare``, is not a peer but the floor: the same computation as ours written as
bare calls (one stacked ``F.linear``, ``scaled_dot_product_attention`` with the padding as an additive
mask, ``W_o``), with no checks, no module and no kernel interface. ``ours/bare`` is what the library's
structure costs; the rest of the gap to a peer is the computation itself.

The targets (issue 20) are printed under the table, each marked met or MISSED: at every size ours
takes at most :data:`TARGET_FASTER_PEER` times the faster peer's time, and at the long size at most
:data:`TARGET_D2L_LONG` times D2L's.

Run with ``python -m benchmarks`` (every benchmark) or ``python -m benchmarks.bench_attention``.
On a shared CPU check ``uptime`` first: the ratios are only meaningful on a quiet machine (on a busy
one, ``OMP_NUM_THREADS=1`` keeps the timings far steadier; a warning is printed when the load exceeds
the core count).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from course_lib.attention.masks import padding_mask
from course_lib.attention.multihead import MultiHeadAttention
from course_lib.utils import try_gpu

# (label, batch, length, num_hiddens, num_heads)
CONFIGS = [
    ("short", 128, 35, 256, 4),
    ("long", 16, 256, 256, 4),
]
# Ours / the faster of the two peers, at every size; ours / D2L at the long size.
TARGET_FASTER_PEER, TARGET_D2L_LONG = 1.0, 0.70


@dataclass(frozen=True)
class Result:
    """One configuration: median seconds per forward+backward step of both, and their ratios.

    ``ratio`` and ``cpu_ratio`` are medians of the per-repetition ratios (see :meth:`Timings.ratio`),
    in wall-clock and in process CPU time.
    """

    label: str
    shape: str
    ours_s: float
    torch_s: float
    ratio: float
    cpu_ratio: float
    d2l_s: float
    d2l_ratio: float
    d2l_cpu_ratio: float
    bare_s: float
    bare_ratio: float

    def targets(self) -> list[tuple[str, float, float]]:
        """(what, measured ratio, target) for each target that applies to this configuration."""
        faster = "torch" if self.torch_s < self.d2l_s else "d2l"
        rows = [(f"ours/{faster} (the faster peer)", self.ratio if faster == "torch" else self.d2l_ratio,
                 TARGET_FASTER_PEER)]
        if self.label == "long":
            rows.append(("ours/d2l", self.d2l_ratio, TARGET_D2L_LONG))
        return rows


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(step: Callable[[], None], n_inner: int, device: torch.device) -> tuple[float, float]:
    """Wall-clock and process CPU seconds per call of ``step``, over ``n_inner`` calls."""
    _sync(device)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n_inner):
        step()
    _sync(device)
    return (time.perf_counter() - wall) / n_inner, (time.process_time() - cpu) / n_inner


@dataclass(frozen=True)
class Timings:
    """Seconds per call of each contender, one entry per interleaved repetition.

    Attributes:
        wall: name -> wall-clock seconds per call, one per repetition.
        cpu: name -> process CPU seconds per call (all threads), one per repetition. On a shared
            machine it is less sensitive than wall time to this process being descheduled.
    """

    wall: dict[str, list[float]]
    cpu: dict[str, list[float]]

    def median(self, name: str) -> float:
        """Median wall-clock seconds per call of ``name``."""
        return statistics.median(self.wall[name])

    def ratio(self, a: str, b: str, clock: str = "wall") -> float:
        """Median over the repetitions of ``a``'s time / ``b``'s time in that repetition.

        The two timings of one repetition are taken back to back, so a change of machine load
        between repetitions cancels in their ratio; the median then discards the repetitions a
        burst of load hit on one side only.
        """
        times = self.wall if clock == "wall" else self.cpu
        return statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))


def compare(steps: dict[str, Callable[[], None]], device: torch.device, repeats: int = 9,
            n_inner: int = 5, warmup: int = 3) -> dict[str, float]:
    """Median seconds per call of each step, measured interleaved (see :func:`compare_timings`).

    Returns:
        name -> median wall-clock seconds per call.
    """
    timings = compare_timings(steps, device, repeats, n_inner, warmup)
    return {name: timings.median(name) for name in steps}


def compare_timings(steps: dict[str, Callable[[], None]], device: torch.device, repeats: int = 9,
                    n_inner: int = 5, warmup: int = 3) -> Timings:
    """Time each step, interleaved: one timing of every step per repetition.

    Args:
        steps: name -> zero-argument callable doing one step.
        device: where the steps run (synchronised around each timing on CUDA).
        repeats: number of interleaved repetitions.
        n_inner: calls per timing.
        warmup: untimed calls of each step first.

    Returns:
        The per-repetition timings; see :meth:`Timings.median` and :meth:`Timings.ratio`.
    """
    for step in steps.values():
        for _ in range(warmup):
            step()
    wall: dict[str, list[float]] = {name: [] for name in steps}
    cpu: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    for rep in range(repeats):
        # Alternate the order so that neither implementation always runs right after the other.
        for name in names if rep % 2 == 0 else reversed(names):
            w, c = _timed(steps[name], n_inner, device)
            wall[name].append(w)
            cpu[name].append(c)
    return Timings(wall, cpu)


def environment(device: torch.device) -> str:
    """Device, torch version, threads and the machine's load (1-minute average; the CPU's core count)."""
    env = f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads"
    if hasattr(os, "getloadavg"):
        env += f", load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    return env


def busy_warning() -> str | None:
    """A warning when the CPU is oversubscribed (1-minute load above the core count), else ``None``.

    Several threads per process on a busy machine make every timing erratic (threads wait for each
    other's descheduled partners), so the line suggests one thread per process instead.
    """
    if not hasattr(os, "getloadavg"):
        return None
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load <= cores:
        return None
    advice = " or with OMP_NUM_THREADS=1" if torch.get_num_threads() > 1 else ""
    return (f"warning: the machine is busy (load {load:.1f} on {cores} cores); timings are noisy, re-run on a "
            f"quiet machine{advice}")


def _copy_weights(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight]))
        theirs.out_proj.weight.copy_(ours.W_o.weight)


def _d2l_sequence_mask(X: torch.Tensor, valid_len: torch.Tensor, value: float = 0.0) -> torch.Tensor:
    """D2L's sequence_mask: set ``X[i, j] = value`` for ``j >= valid_len[i]`` (in place); X is (n, T)."""
    keep = torch.arange(X.shape[1], dtype=torch.float32, device=X.device)[None, :] < valid_len[:, None]
    X[~keep] = value
    return X


def _d2l_masked_softmax(X: torch.Tensor, valid_lens: torch.Tensor | None) -> torch.Tensor:
    """D2L's masked_softmax: masked scores become -1e6 before the softmax over the last axis."""
    if valid_lens is None:
        return nn.functional.softmax(X, dim=-1)
    shape = X.shape
    if valid_lens.dim() == 1:
        valid_lens = torch.repeat_interleave(valid_lens, shape[1])
    else:
        valid_lens = valid_lens.reshape(-1)
    X = _d2l_sequence_mask(X.reshape(-1, shape[-1]), valid_lens, value=-1e6)
    return nn.functional.softmax(X.reshape(shape), dim=-1)


class _D2LDotProductAttention(nn.Module):
    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                valid_lens: torch.Tensor | None = None) -> torch.Tensor:
        d = queries.shape[-1]
        scores = torch.bmm(queries, keys.transpose(1, 2)) / d**0.5  # (B * h, Tq, Tk)
        self.attention_weights = _d2l_masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)


class D2LMultiHeadAttention(nn.Module):
    """The peer: D2L's multi-head attention (heads folded into the batch axis), as the book describes it."""

    def __init__(self, num_hiddens: int, num_heads: int, dropout: float = 0.0, bias: bool = False) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.attention = _D2LDotProductAttention(dropout)
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_v = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)

    def transpose_qkv(self, X: torch.Tensor) -> torch.Tensor:
        # (B, T, d) -> (B, T, h, d/h) -> (B, h, T, d/h) -> (B * h, T, d/h)
        X = X.reshape(X.shape[0], X.shape[1], self.num_heads, -1).permute(0, 2, 1, 3)
        return X.reshape(-1, X.shape[2], X.shape[3])

    def transpose_output(self, X: torch.Tensor) -> torch.Tensor:
        # (B * h, T, d/h) -> (B, h, T, d/h) -> (B, T, h, d/h) -> (B, T, d)
        X = X.reshape(-1, self.num_heads, X.shape[1], X.shape[2]).permute(0, 2, 1, 3)
        return X.reshape(X.shape[0], X.shape[1], -1)

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                valid_lens: torch.Tensor | None) -> torch.Tensor:
        queries = self.transpose_qkv(self.W_q(queries))
        keys = self.transpose_qkv(self.W_k(keys))
        values = self.transpose_qkv(self.W_v(values))
        if valid_lens is not None:
            # One copy of each length per head.
            valid_lens = torch.repeat_interleave(valid_lens, repeats=self.num_heads, dim=0)
        output = self.attention(queries, keys, values, valid_lens)
        return self.W_o(self.transpose_output(output))


def bench_config(batch: int, length: int, num_hiddens: int, num_heads: int, device: torch.device,
                 repeats: int = 9, n_inner: int = 5, seed: int = 0) -> Timings:
    """Forward+backward timings of ours (``"ours"``), ``torch.nn.MultiheadAttention`` (``"torch"``), D2L (``"d2l"``)
    and ours written bare (``"bare"``, see the module docstring).

    Args:
        batch, length, num_hiddens, num_heads: the problem size; inputs are (batch, length, num_hiddens).
        device: where to run.
        repeats, n_inner: see :func:`compare_timings`.
        seed: seeds the weights, inputs and valid lengths (a local generator).

    Returns:
        The interleaved timings (see :class:`Timings`).
    """
    gen = torch.Generator().manual_seed(seed)
    ours = MultiHeadAttention(num_hiddens, num_heads).to(device).train()
    with torch.no_grad():
        for p in ours.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) / num_hiddens**0.5)
    theirs = nn.MultiheadAttention(num_hiddens, num_heads, bias=False, batch_first=True).to(device).train()
    _copy_weights(ours, theirs)
    d2l = D2LMultiHeadAttention(num_hiddens, num_heads).to(device).train()
    d2l.load_state_dict(ours.state_dict())
    x = torch.randn(batch, length, num_hiddens, generator=gen).to(device).requires_grad_(True)
    grad_out = torch.randn(batch, length, num_hiddens, generator=gen).to(device)
    valid_lens = torch.randint(1, length + 1, (batch,), generator=gen).to(device)
    # torch.nn.MultiheadAttention's key_padding_mask is True = masked out (ours: True = attend).
    key_padding_mask = torch.arange(length, device=device) >= valid_lens[:, None]

    def step_ours() -> None:
        ours.zero_grad(set_to_none=True)
        x.grad = None
        # The lengths become the keep-mask inside the timed step, as D2L's masked softmax does.
        ours(x, x, x, padding_mask(valid_lens, length)).backward(grad_out)

    def step_torch() -> None:
        theirs.zero_grad(set_to_none=True)
        x.grad = None
        theirs(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)[0].backward(grad_out)

    def step_d2l() -> None:
        d2l.zero_grad(set_to_none=True)
        x.grad = None
        d2l(x, x, x, valid_lens).backward(grad_out)

    heads, head_size = num_heads, num_hiddens // num_heads

    def bare() -> torch.Tensor:
        # Ours without the module: the stacked projection, SDPA with the padding as a 0/-inf mask, W_o.
        weight = torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight])
        q, k, v = (t.view(batch, length, heads, head_size).transpose(1, 2)
                   for t in nn.functional.linear(x, weight).split(num_hiddens, dim=-1))
        bias = torch.zeros(batch, 1, 1, length, device=device).masked_fill_(key_padding_mask[:, None, None],
                                                                             float("-inf"))
        out = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return nn.functional.linear(out.transpose(1, 2).reshape(batch, length, num_hiddens), ours.W_o.weight)

    def step_bare() -> None:
        ours.zero_grad(set_to_none=True)
        x.grad = None
        bare().backward(grad_out)

    with torch.no_grad():  # the three compute the same function (the padded queries aside: D2L masks keys only)
        for peer in (lambda: theirs(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)[0],
                     lambda: d2l(x, x, x, valid_lens), bare):
            torch.testing.assert_close(peer(), ours(x, x, x, padding_mask(valid_lens, length)), rtol=1e-4, atol=1e-4)
    return compare_timings({"ours": step_ours, "torch": step_torch, "d2l": step_d2l, "bare": step_bare}, device,
                           repeats=repeats, n_inner=n_inner)


def format_table(results: list[Result], device: torch.device) -> str:
    """Plain-text table, columns aligned."""
    header = ["config", "shape (B, T, d, h)", "ours (ms)", "torch (ms)", "d2l (ms)", "ours/torch", "(cpu time)",
              "ours/d2l", "(cpu time)", "bare (ms)", "ours/bare"]
    rows = [[r.label, r.shape, f"{1e3 * r.ours_s:.2f}", f"{1e3 * r.torch_s:.2f}", f"{1e3 * r.d2l_s:.2f}",
             f"{r.ratio:.2f}", f"{r.cpu_ratio:.2f}", f"{r.d2l_ratio:.2f}", f"{r.d2l_cpu_ratio:.2f}",
             f"{1e3 * r.bare_s:.2f}", f"{r.bare_ratio:.2f}"] for r in results]
    title = (f"MultiHeadAttention forward+backward with key padding vs torch.nn.MultiheadAttention and D2L's "
             f"({environment(device)}); ratios: median over repetitions of ours/peer")
    targets = [target_line(f"{r.label}: {what}", value, target) for r in results for what, value, target in r.targets()]
    return "\n".join([table(title, header, rows), *targets])


def target_line(what: str, ratio: float, target: float) -> str:
    """One target's verdict: ``"<what> = 0.68, target <= 0.70: met"`` (``MISSED`` above the target)."""
    return f"{what} = {ratio:.2f}, target <= {target:.2f}: {'met' if ratio <= target else 'MISSED'}"


def table(title: str, header: list[str], rows: list[list[str]], n_text: int = 2) -> str:
    """Plain-text table: the first ``n_text`` columns left-aligned, the others (numbers) right-aligned."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < n_text else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    return "\n".join([title, line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def main(repeats: int = 9, n_inner: int = 5) -> list[Result]:
    """Time every configuration, print the table and return the results."""
    device = try_gpu()
    if (warning := busy_warning()) is not None:
        print(warning)
    results = []
    for label, batch, length, num_hiddens, num_heads in CONFIGS:
        t = bench_config(batch, length, num_hiddens, num_heads, device, repeats, n_inner)
        results.append(Result(label, f"({batch}, {length}, {num_hiddens}, {num_heads})", t.median("ours"),
                              t.median("torch"), t.ratio("ours", "torch"), t.ratio("ours", "torch", "cpu"),
                              t.median("d2l"), t.ratio("ours", "d2l"), t.ratio("ours", "d2l", "cpu"),
                              t.median("bare"), t.ratio("ours", "bare")))
    print(format_table(results, device))
    return results


if __name__ == "__main__":
    main()
