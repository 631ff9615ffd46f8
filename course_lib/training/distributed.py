"""Data-parallel training with ``torch.distributed``: process groups from ``torchrun``, batch sharding.

``torchrun --standalone --nproc_per_node N -m course_lib train ...`` starts N processes and gives
each the environment variables ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE``. Every process holds a
full copy of the model and trains on its own shard of each batch; after ``backward`` the
:class:`~torch.nn.parallel.DistributedDataParallel` wrapper averages the gradients over the
processes (an all-reduce), so that every copy takes the same optimiser step. With per-process
batches of b pairs, one step on N processes is one step on a single process with batches of N * b
pairs, done N times faster in the ideal case.

Without ``torchrun`` (no ``WORLD_SIZE`` in the environment) nothing here does anything.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = ["DistContext", "init_distributed", "shard_batches"]


@dataclass(frozen=True)
class DistContext:
    """Where this process sits in a data-parallel job.

    Attributes:
        rank: this process's index, 0 .. world_size - 1 (rank 0 logs and writes files).
        world_size: the number of processes.
        local_rank: the index on this machine (picks the GPU ``cuda:local_rank``).
        backend: ``"gloo"`` (CPU) or ``"nccl"`` (GPUs).
    """

    rank: int
    world_size: int
    local_rank: int
    backend: str

    @property
    def is_main(self) -> bool:
        """True on rank 0."""
        return self.rank == 0


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"the environment variable {name} must be an integer, got {value!r}") from None


def init_distributed(device: torch.device | str | None = None, timeout_s: float = 600.0
                     ) -> tuple[DistContext | None, torch.device | None]:
    """Join the process group that ``torchrun`` describes in the environment, if any.

    Args:
        device: the device asked for (``None``: let the job decide: ``cuda:LOCAL_RANK`` when CUDA is
            available, else the CPU). A ``cuda`` device without an index becomes ``cuda:LOCAL_RANK``.
        timeout_s: how long a collective may wait for the other processes.

    Returns:
        ``(context, device)``: ``(None, device)`` when the process was not started by ``torchrun``
        (``WORLD_SIZE`` unset); otherwise the :class:`DistContext` and the device this rank uses.
        The backend is NCCL on CUDA devices and gloo on the CPU.
    """
    world_size = _env_int("WORLD_SIZE")
    if world_size is None:
        return None, None if device is None else torch.device(device)
    rank, local_rank = _env_int("RANK") or 0, _env_int("LOCAL_RANK") or 0
    if device is None:
        device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s))
    return DistContext(rank, dist.get_world_size(), local_rank, backend), device


def shard_batches(order: Sequence[int], batch_size: int, rank: int, world_size: int) -> Iterator[list[int]]:
    """Cut a (shuffled) order into global batches of ``world_size * batch_size`` and yield this rank's part.

    Rank r gets positions ``r, r + N, r + 2N, ...`` of each global batch (as
    :class:`torch.utils.data.DistributedSampler` deals them). Every rank yields the same number of
    batches: a last global batch too small to give each rank at least one item is dropped.

    Args:
        order: the indices of one epoch, identical on every rank (shuffle with the same seed).
        batch_size: b, items per rank and step.
        rank, world_size: as in :class:`DistContext`.

    Yields:
        Lists of at most ``batch_size`` indices.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size), got rank={rank}, world_size={world_size}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    step = batch_size * world_size
    for start in range(0, len(order), step):
        chunk = list(order[start:start + step])
        if len(chunk) < world_size:
            return
        yield chunk[rank::world_size]
