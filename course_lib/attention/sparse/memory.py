"""Peak memory of a computation, counted from the tensors it creates (CPU or GPU)."""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class _LiveTensorBytes(TorchDispatchMode):
    """Count the bytes of the tensor storages created by every operation while they are alive.

    A storage is counted when an operation returns it and none of the operation's inputs holds it
    (views and in-place results share an input's storage), and uncounted when it is freed.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.current = 0
        self.peak = 0

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage()._cdata for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key = storage._cdata
            if key in self.live or key in inputs:
                continue
            self.live[key] = storage.nbytes()
            self.current += self.live[key]
            self.peak = max(self.peak, self.current)
            weakref.finalize(storage, self._free, key)
        return out


def peak_memory(fn: Callable[[], object], device: torch.device | str | None = None) -> int:
    """Peak bytes of memory that ``fn()`` allocates for tensors, its inputs excluded.

    On a CUDA device this is ``torch.cuda.max_memory_allocated`` during the call minus the memory
    allocated before it. On a CPU, every tensor an operation returns is counted while it is alive
    (a ``TorchDispatchMode`` sees each operation; views and in-place results are not new memory),
    and the peak of the running total is returned. That count sees every intermediate tensor of
    operations written in PyTorch, but not the scratch space a fused kernel allocates inside itself
    (for the CPU kernel of ``scaled_dot_product_attention``: a few tiles per thread, independent of n).

    Args:
        fn: a function of no argument (use a ``lambda``); run once, its result is dropped.
        device: the device ``fn`` computes on (``None``: the CPU).

    Returns:
        The peak in bytes.

    Examples:
        >>> peak_memory(lambda: torch.zeros(1000))  # 1000 float32 numbers
        4000
        >>> q = torch.zeros(1, 1, 256, 16)  # (B, H, n, d)
        >>> explicit = peak_memory(lambda: torch.softmax(q @ q.transpose(-2, -1), dim=-1) @ q)
        >>> explicit >= 2 * 256 * 256 * 4, peak_memory(lambda: fused_attention(q, q, q)) < 256 * 256 * 4
        (True, True)
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    device = torch.device("cpu" if device is None else device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        result = fn()
        torch.cuda.synchronize(device)
        del result
        return torch.cuda.max_memory_allocated(device) - before
    counter = _LiveTensorBytes()
    with counter:
        result = fn()
        del result
    return counter.peak
