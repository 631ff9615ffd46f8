"""One way to ask any attention module for its weights: :func:`recording_attention`.

Every attention module of the library (Nadaraya--Watson regression, the scoring modules of
chapter 3, multi-head and sparse attention) satisfies :class:`AttentionModule`: a flag
``record_weights``, off by default, and ``attention_weights``, the detached weights of the last call
made while the flag was on. The fast kernels never form the weights, so recording switches a module to
the explicit computation for as long as it lasts; the output is the same (tested).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

import torch
from torch import nn

from .._validation import check_bool

__all__ = ["AttentionModule", "attention_modules", "recording_attention", "store_attention_weights"]


@runtime_checkable
class AttentionModule(Protocol):
    """What every attention module has: ``record_weights`` (bool) and ``attention_weights`` (tensor or None).

    ``attention_weights`` is (batch, n_queries, n_keys), or (batch, num_heads, n_queries, n_keys) for
    multi-head modules, detached.

    Examples:
        >>> isinstance(DotProductAttention(), AttentionModule), isinstance(nn.Linear(2, 2), AttentionModule)
        (True, False)
        >>> DotProductAttention().record_weights, DotProductAttention().attention_weights  # off until asked
        (False, None)
    """

    record_weights: bool
    attention_weights: torch.Tensor | None


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """The attention modules inside ``model`` (itself included), in ``model.modules()`` order.

    Examples:
        >>> model = nn.Sequential(nn.Linear(8, 8), MultiHeadAttention(8, 2), DotProductAttention())
        >>> [type(m).__name__ for m in attention_modules(model)]
        ['MultiHeadAttention', 'DotProductAttention']
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    return [m for m in model.modules() if isinstance(m, AttentionModule)]


@contextmanager
def recording_attention(model: nn.Module) -> Iterator[list[nn.Module]]:
    """Within the ``with`` block, every attention module of ``model`` keeps the weights of its last call.

    On exit the modules stop recording (each goes back to what it did before) and keep the last
    weights, so they can be plotted after the block.

    Args:
        model: any module; its submodules are searched.

    Yields:
        The attention modules found.

    Examples:
        >>> from course_lib import MultiHeadAttention
        >>> mha = MultiHeadAttention(8, 2)
        >>> with recording_attention(mha) as modules:
        ...     _ = mha(torch.randn(1, 3, 8), torch.randn(1, 5, 8), torch.randn(1, 5, 8))
        >>> len(modules), mha.attention_weights.shape, mha.record_weights
        (1, torch.Size([1, 2, 3, 5]), False)
    """
    modules = attention_modules(model)
    before = [m.record_weights for m in modules]
    for m in modules:
        m.record_weights = True
        m.attention_weights = None
    try:
        yield modules
    finally:
        for m, flag in zip(modules, before, strict=True):
            m.record_weights = flag


def store_attention_weights(model: nn.Module, on: bool = True) -> int:
    """Deprecated: use ``with recording_attention(model): ...``. Switch recording on (or off) for good.

    Args:
        model: any module; its submodules are searched.
        on: record (``True``), or stop and drop the kept weights (``False``).

    Returns:
        The number of attention modules.

    Examples:
        >>> mha = MultiHeadAttention(8, 2)
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     n = store_attention_weights(mha)
        >>> n, mha.record_weights, caught[0].category.__name__
        (1, True, 'DeprecationWarning')
    """
    warnings.warn("store_attention_weights is deprecated; use `with course_lib.recording_attention(model):`",
                  DeprecationWarning, stacklevel=2)
    check_bool(on, "on")
    modules = attention_modules(model)
    for m in modules:
        m.record_weights = on
        if not on:
            m.attention_weights = None
    return len(modules)
