"""Small helpers every notebook uses: the device and reproducible seeding."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from ._validation import check_int, check_non_negative_int


def try_gpu(i: int = 0) -> torch.device:
    """Return ``cuda:i`` when that GPU exists, else the CPU.

    Notebooks call this once, so the same code runs on a laptop, in Colab and on a GPU machine.
    """
    i = check_non_negative_int(i, "i")
    if torch.cuda.is_available() and torch.cuda.device_count() > i:
        return torch.device(f"cuda:{i}")
    return torch.device("cpu")


def set_seed(seed: int = 0, deterministic: bool = True) -> torch.Generator:
    """Seed Python, NumPy and PyTorch (CPU and CUDA) and return a generator seeded the same way.

    The one place where the course seeds anything. With ``deterministic=True`` PyTorch is asked
    for deterministic kernels (``warn_only``, so an op without one still runs), which makes CPU runs
    reproduce exactly.

    Args:
        seed: the seed.
        deterministic: also request deterministic algorithms.

    Returns:
        A ``torch.Generator`` on the CPU seeded with ``seed``, for functions that take ``generator=``.

    Raises:
        TypeError: ``seed`` is not an int.
        ValueError: ``seed`` is outside ``[0, 2**32)``, the range NumPy accepts.
    """
    seed = check_int(seed, "seed")
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    return torch.Generator().manual_seed(seed)


def num_parameters(module: torch.nn.Module, trainable_only: bool = True) -> int:
    """Count the (trainable) parameters of ``module``."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def glue(name: str, value: float | int | str) -> None:
    """Record ``value`` under ``name`` for the book's ``{glue:text}`` roles, without displaying it.

    The prose of a chapter quotes the numbers its cells compute through myst-nb's glue, so a
    number in the text cannot drift from the cell that computes it. Where myst-nb is not
    installed (a plain Jupyter or Colab session) this does nothing.
    """
    try:
        from myst_nb import glue as _myst_glue
    except ImportError:  # not building the book: nothing reads the value
        return
    _myst_glue(name, value, display=False)
