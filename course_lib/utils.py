"""Small helpers every notebook uses: the device and reproducible seeding."""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator
from typing import TypeVar

import numpy as np
import torch

from ._validation import check_int, check_non_negative_int

T = TypeVar("T")


def try_gpu(i: int = 0) -> torch.device:
    """The fastest device there is: ``cuda:i`` when that GPU exists, else Apple's ``mps``, else the CPU.

    Notebooks call this once, so the same code runs on a laptop (Apple silicon too), in Colab and on
    a GPU machine. ``mps`` has a single device: it is picked only for ``i == 0``.

    Examples:
        >>> try_gpu().type in ("cuda", "mps", "cpu")
        True
    """
    i = check_non_negative_int(i, "i")
    if torch.cuda.is_available() and torch.cuda.device_count() > i:
        return torch.device(f"cuda:{i}")
    mps = getattr(torch.backends, "mps", None)
    if i == 0 and mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def by_device(cpu: T, gpu: T, device: torch.device | str | None = None) -> T:
    """The setting for the device: ``gpu`` on an accelerator (CUDA, Apple's ``mps``), ``cpu`` on the CPU.

    Training cells use it to train a larger model or for longer when a GPU is there, with one line:
    ``epochs = cl.by_device(cpu=8, gpu=30, device=device)``. Outputs that depend on the choice must
    not be checked by nbval (they differ between the two).

    Args:
        cpu: the value for the CPU (and any device that is not an accelerator).
        gpu: the value for CUDA and ``mps`` devices.
        device: the device (default :func:`try_gpu`).

    Examples:
        >>> by_device(cpu=8, gpu=30, device="cpu"), by_device(cpu=8, gpu=30, device="cuda:0")
        (8, 30)
    """
    device = torch.device(device) if device is not None else try_gpu()
    return gpu if device.type in ("cuda", "mps") else cpu


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

    Examples:
        >>> with global_state_preserved():  # only so that the example leaves the session's seeds alone
        ...     generator = set_seed(0)
        ...     a, b = torch.rand(2), torch.rand(2, generator=generator)
        >>> torch.equal(a, b)  # the global generator and the returned one start alike
        True
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


@contextlib.contextmanager
def global_state_preserved() -> Iterator[None]:
    """Put back, on exit, every global setting :func:`set_seed` changes.

    The random states (Python, NumPy, PyTorch on the CPU and initialised CUDA devices), the
    deterministic-algorithms flag and ``CUBLAS_WORKSPACE_CONFIG``. Also a decorator: library functions
    that seed (:func:`course_lib.train_seq2seq`) wear it, so they leave the caller's state as it was.

    Examples:
        >>> before = torch.random.get_rng_state()
        >>> with global_state_preserved():
        ...     _ = set_seed(123)
        ...     _ = torch.rand(5)
        >>> torch.equal(torch.random.get_rng_state(), before)
        True
    """
    py_state, np_state = random.getstate(), np.random.get_state()
    flags = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    cublas = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
        torch.use_deterministic_algorithms(flags[0], warn_only=flags[1])
        if cublas is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = cublas


@contextlib.contextmanager
def seeded(seed: int = 0, deterministic: bool = True) -> Iterator[torch.Generator]:
    """Run a block as after :func:`set_seed`, then put every global setting it touched back.

    Args:
        seed, deterministic: as in :func:`set_seed`.

    Yields:
        The generator :func:`set_seed` returns.

    Examples:
        >>> before = torch.are_deterministic_algorithms_enabled()
        >>> with seeded(3):
        ...     a = torch.rand(2)
        >>> with seeded(3):
        ...     b = torch.rand(2)
        >>> torch.equal(a, b), torch.are_deterministic_algorithms_enabled() == before
        (True, True)
    """
    with global_state_preserved():
        yield set_seed(seed, deterministic)


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of ``model``'s first parameter (the CPU for a model without parameters).

    Examples:
        >>> model_device(torch.nn.Linear(2, 2)), model_device(torch.nn.ReLU())
        (device(type='cpu'), device(type='cpu'))
    """
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


def num_parameters(module: torch.nn.Module, trainable_only: bool = True) -> int:
    """Count the (trainable) parameters of ``module``.

    Examples:
        >>> layer = torch.nn.Linear(3, 2)  # a 2 x 3 weight and 2 biases
        >>> _ = layer.bias.requires_grad_(False)
        >>> num_parameters(layer), num_parameters(layer, trainable_only=False)
        (6, 8)
    """
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def glue(name: str, value: float | int | str) -> None:
    """Record ``value`` under ``name`` for the book's ``{glue:text}`` roles, without displaying it.

    The prose of a chapter quotes the numbers its cells compute through myst-nb's glue, so a
    number in the text cannot drift from the cell that computes it. Where myst-nb is not
    installed (a plain Jupyter or Colab session) this does nothing.

    Examples:
        >>> glue("final_bleu", 31.4)  # shows nothing; the chapter's prose quotes {glue:text}`final_bleu`
    """
    try:
        from myst_nb import glue as _myst_glue
    except ImportError:  # not building the book: nothing reads the value
        return
    _myst_glue(name, value, display=False)


def stacked_linear(x: torch.Tensor, layers: tuple[torch.nn.Linear, ...], memo: dict) -> torch.Tensor:
    """Several linear layers of one input as one matrix product: ``x`` times their weights stacked.

    Reading the input once instead of once per layer: cross-attention's keys and values of one memory
    (:meth:`MultiHeadAttention.project_kv`). Self-attention's q, k, v and SwiGLU's gate and up use separate
    products instead (measured faster at this course's sizes, in training and in a decoding step). Under autograd
    the stack is formed at each call (its gradient flows to each layer's weight); without it (decoding,
    evaluation) the stacked weights are kept in ``memo`` and formed again only when a weight changed (its
    version counter or its storage).

    Args:
        x: (..., in_features).
        layers: ``nn.Linear`` layers of one ``in_features``, all with or all without a bias.
        memo: a dict the caller keeps (one per group of layers).

    Returns:
        (..., sum of the layers' out_features): the layers' outputs side by side.

    Examples:
        >>> layers = (torch.nn.Linear(4, 2), torch.nn.Linear(4, 3))
        >>> x, memo = torch.randn(5, 4), {}
        >>> with torch.no_grad():
        ...     out = stacked_linear(x, layers, memo)
        >>> out.shape, torch.allclose(out, torch.cat([layer(x) for layer in layers], -1)), memo["weight"].shape
        (torch.Size([5, 5]), True, torch.Size([5, 4]))
    """
    has_bias = layers[0].bias is not None
    if torch.is_grad_enabled() and any(layer.weight.requires_grad for layer in layers):
        weight = torch.cat([layer.weight for layer in layers])
        return torch.nn.functional.linear(x, weight, torch.cat([layer.bias for layer in layers]) if has_bias else None)
    tensors = [t for layer in layers for t in ((layer.weight, layer.bias) if has_bias else (layer.weight,))]
    key = tuple((t._version, t.data_ptr(), t.dtype, t.device) for t in tensors)
    if memo.get("key") != key:
        memo["key"] = key
        memo["weight"] = torch.cat([layer.weight for layer in layers]).detach()
        memo["bias"] = torch.cat([layer.bias for layer in layers]).detach() if has_bias else None
    return torch.nn.functional.linear(x, memo["weight"], memo["bias"])
