"""Kernels by name, as a model's config names them, and the checked entry point :func:`attend`.

As Hugging Face selects a model's attention implementation by name (``config._attn_implementation``),
a :class:`~course_lib.TransformerConfig` or :class:`~course_lib.DecoderLMConfig` names its kernel
(``kernel="flash"``, with ``kernel_options={"block_q": 64}``), and the blocks build it here; a checkpoint
stores the name, so a model comes back with the kernel it was trained with, and nothing swaps modules
by hand.

=================== ================================================================ ==========================
name                kernel                                                           options
=================== ================================================================ ==========================
``fused``           ``scaled_dot_product_attention`` (the default)                   --
``explicit``        chapter 3's computation written out (returns the weights)        --
``flash``           chapter 10's tiles and online softmax, in plain PyTorch          ``block_q``, ``block_k``
``linear``          chapter 10's linear attention (a feature-map kernel, O(n))       ``mode``, ``chunk_size``
``sliding_window``  another kernel restricted to the last ``window`` keys            ``window``, ``inner``
``sparse``          chapter 9's strided and fixed patterns, O(n sqrt n)              ``pattern``, ``stride``, ``c``
``rotary``          RoPE around another kernel (chapter 11)                          ``inner``, ``base``, ...
``alibi``           ALiBi's distance biases around another kernel (chapter 11)       ``inner``
=================== ================================================================ ==========================
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .._validation import check_bool, check_keep_mask, check_positive, check_probability, check_qkv
from .contract import AttentionKernel, as_heads, check_supported, from_heads, kv_groups, scores_lead
from .kernels.alibi import ALiBiKernel
from .kernels.explicit import explicit_kernel
from .kernels.flash import FlashKernel
from .kernels.fused import fused_kernel
from .kernels.linear import LinearKernel
from .kernels.rotary import RotaryKernel
from .kernels.sliding_window import SlidingWindowKernel
from .masks import MaskMod
from .score_mods import ScoreMod

__all__ = ["attend", "attention_kernel", "check_kernel_fields", "kernel_names", "register_kernel"]

def _sparse_kernel(pattern: str = "strided", stride: int | None = None, c: int = 1) -> AttentionKernel:
    """Chapter 9's :class:`~course_lib.attention.sparse.SparseKernel` (its package imports the modules that
    import this registry: imported on first use)."""
    from .sparse.blockwise import SparseKernel

    return SparseKernel(pattern, stride, c)


def _rotary_kernel(inner: str = "fused", base: float = 10000.0, interleaved: bool = False,
                   scaling: dict | None = None) -> AttentionKernel:
    """RoPE around the kernel ``inner`` names (``scaling``: :func:`~course_lib.rope_scaling_parameters`)."""
    return RotaryKernel(attention_kernel(inner), base=base, interleaved=interleaved, scaling=scaling)


def _alibi_kernel(inner: str = "fused") -> AttentionKernel:
    """ALiBi's biases around the kernel ``inner`` names."""
    return ALiBiKernel(attention_kernel(inner))


def _sliding_window_kernel(window: int, inner: str = "fused") -> AttentionKernel:
    """The kernel ``inner`` names, restricted to the last ``window`` keys."""
    return SlidingWindowKernel(window, attention_kernel(inner))


_KERNELS: dict[str, Callable[..., AttentionKernel]] = {
    "fused": lambda: fused_kernel,
    "explicit": lambda: explicit_kernel,
    "flash": FlashKernel,
    "linear": LinearKernel,
    "sliding_window": _sliding_window_kernel,
    "sparse": _sparse_kernel,
    "rotary": _rotary_kernel,
    "alibi": _alibi_kernel,
}


def kernel_names() -> tuple[str, ...]:
    """The registered kernels' names.

    Examples:
        >>> kernel_names()[:3]
        ('fused', 'explicit', 'flash')
    """
    return tuple(_KERNELS)


def register_kernel(name: str, factory: Callable[..., AttentionKernel]) -> None:
    """Make a kernel available by name: to configs, to :func:`attention_kernel` and to the conformance test.

    Args:
        name: a new name.
        factory: called with a config's ``kernel_options`` as keywords; returns an :class:`AttentionKernel`.

    Examples:
        >>> register_kernel("explicit", lambda: explicit_kernel)
        Traceback (most recent call last):
        ...
        ValueError: a kernel named 'explicit' is registered already
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    if name in _KERNELS:
        raise ValueError(f"a kernel named {name!r} is registered already")
    if not callable(factory):
        raise TypeError(f"factory must be callable, got {type(factory).__name__}")
    _KERNELS[name] = factory


def attention_kernel(kernel: str | AttentionKernel, **options: object) -> AttentionKernel:
    """The kernel of a name (built with ``options``), or ``kernel`` itself when it is one already.

    Args:
        kernel: a registered name (:func:`kernel_names`) or an :class:`AttentionKernel`.
        options: the factory's keyword arguments (a config's ``kernel_options``); none for a kernel object.

    Returns:
        An :class:`AttentionKernel`.

    Raises:
        ValueError: an unknown name. TypeError: options the kernel does not take, or an object that is not
        a kernel (it needs ``name``, ``supports`` and a call).

    Examples:
        >>> attention_kernel("flash", block_q=64)
        FlashKernel(block_q=64, block_k=128)
        >>> attention_kernel("flash", block=64)
        Traceback (most recent call last):
        ...
        TypeError: the 'flash' kernel takes the options ['block_q', 'block_k'], got 'block'
    """
    if isinstance(kernel, str):
        if kernel not in _KERNELS:
            raise ValueError(f"kernel must be one of {kernel_names()} (or a kernel object), got {kernel!r}")
        factory = _KERNELS[kernel]
        try:
            return factory(**options)
        except TypeError as error:
            import inspect

            accepted = [p for p in inspect.signature(factory).parameters if p != "self"]
            unknown = [o for o in options if o not in accepted]
            if not unknown:
                raise
            raise TypeError(f"the {kernel!r} kernel takes the options {accepted}, got "
                            f"{', '.join(map(repr, unknown))}") from error
    if not isinstance(kernel, AttentionKernel):
        raise TypeError(f"kernel must be a kernel name {kernel_names()} or an AttentionKernel (an object with "
                        f"name, supports and a call), got {type(kernel).__name__}")
    if options:
        raise TypeError(f"options ({', '.join(options)}) are for a kernel given by name, got the kernel {kernel!r}")
    return kernel


def check_kernel_fields(kernel: object, kernel_options: object, cross_kernel: object = None) -> None:
    """The kernel fields of a model's config: registered names and the options they take, as plain values.

    A config names its kernels (it does not hold kernel objects), so that a checkpoint stores them; the
    kernels are built here once, so that a wrong name or option fails when the config is made.

    Raises:
        TypeError or ValueError naming the field.

    Examples:
        >>> check_kernel_fields("flash", {"block_q": 64})
        >>> check_kernel_fields("flashy", {})
        Traceback (most recent call last):
        ...
        ValueError: kernel must be one of ('fused', 'explicit', 'flash', 'linear', 'sliding_window', 'sparse', \
'rotary', 'alibi') (or a kernel object), got 'flashy'
    """
    for name, value in (("kernel", kernel), ("cross_kernel", cross_kernel)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a kernel's name (a str, one of {kernel_names()}) in a config, got "
                            f"{type(value).__name__}: give the kernel to a module directly, or register it by name")
    if kernel is None:
        raise TypeError(f"kernel must be a kernel's name, one of {kernel_names()}, got None")
    plain = (bool, int, float, str, type(None))
    if not isinstance(kernel_options, dict) or not all(
            isinstance(key, str) and isinstance(value, plain) for key, value in kernel_options.items()):
        raise TypeError(f"kernel_options must be a dict of names to plain values (int, float, str, bool, None), "
                        f"got {kernel_options!r}")
    attention_kernel(kernel, **kernel_options)
    if cross_kernel is not None:
        attention_kernel(cross_kernel)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | MaskMod | None = None, *,
           causal: bool = False, dropout_p: float = 0.0, scale: float | None = None,
           score_mod: ScoreMod | None = None, need_weights: bool = False,
           kernel: str | AttentionKernel = "fused") -> tuple[torch.Tensor, torch.Tensor | None]:
    """Scaled dot-product attention through a kernel, with its arguments checked: the library's one entry.

    Args:
        q: (n_q, d), (B, n_q, d) or, with heads, (B, H, n_q, d) queries.
        k: keys laid out as ``q`` with n_k rows; with heads (B, H_kv, n_k, d), H_kv dividing H. Leading
            axes broadcast.
        v: (..., n_k, d_v) values, laid out as ``k``.
        mask: optional bool tensor broadcastable to (..., n_q, n_k), or a :class:`MaskMod`; ``True`` = attend.
        causal: the bottom-right aligned look-ahead rule, and-ed with ``mask``.
        dropout_p: dropout on the weights, in [0, 1) (pass 0 outside training).
        scale: the factor of the scores (default :math:`1/\\sqrt d`).
        score_mod: an additive :class:`ScoreMod` (e.g. ALiBi's).
        need_weights: also return the weights (..., n_q, n_k).
        kernel: a kernel or its name (default ``"fused"``); see :mod:`course_lib.attention.registry`.

    Returns:
        ``(output, weights)``: (..., n_q, d_v), and (..., n_q, n_k) or ``None``.

    Examples:
        >>> q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 6)
        >>> out, weights = attend(q, k, v, causal=True, need_weights=True)
        >>> out.shape, weights.shape
        (torch.Size([1, 2, 3, 6]), torch.Size([1, 2, 3, 5]))
        >>> (weights[0, 0] > 0).int()  # query i sits at key position i + 2: it sees keys 0 .. i + 2
        tensor([[1, 1, 1, 0, 0],
                [1, 1, 1, 1, 0],
                [1, 1, 1, 1, 1]], dtype=torch.int32)
    """
    check_qkv(q, k, v)
    lead = scores_lead(q, k)
    if isinstance(mask, torch.Tensor) or mask is not None and not isinstance(mask, MaskMod):
        check_keep_mask(mask, (*lead, q.shape[-2], k.shape[-2]))
    check_bool(causal, "causal")
    check_bool(need_weights, "need_weights")
    check_probability(dropout_p, "dropout_p")
    if scale is not None:
        check_positive(scale, "scale")
    if score_mod is not None and not isinstance(score_mod, ScoreMod):
        raise TypeError(f"score_mod must be a ScoreMod or None, got {type(score_mod).__name__}")
    kernel = attention_kernel(kernel)
    check_supported(kernel, mask=mask, dropout_p=dropout_p, scale=scale, score_mod=score_mod,
                    need_weights=need_weights, grouped=kv_groups(q, k) > 1)
    q, k, v, mask, layout = as_heads(q, k, v, mask)
    out, weights = kernel(q, k, v, mask, causal=causal, dropout_p=dropout_p, scale=scale, score_mod=score_mod,
                          need_weights=need_weights)
    return from_heads(out, layout), None if weights is None else from_heads(weights, layout)
