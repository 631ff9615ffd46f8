r"""The attention computation itself, behind one contract: what a kernel is, and what it declares (chapters 3, 5, 9–11).

Every attention module of the library projects its inputs, hands queries, keys and values to a
*kernel*, and merges what comes back. A kernel computes

.. math:: \operatorname{softmax}\!\Big(\frac{\mathbf Q\mathbf K^\top}{\sqrt d} + \text{bias}
   \;\text{restricted to the kept pairs}\Big)\,\mathbf V

(or, for linear attention, another normalised kernel of q and k) and nothing else. It is a callable
object with a ``name``, a declaration of what it ``supports`` (:class:`Capabilities`), and this call::

    kernel(q, k, v, mask=None, *, causal=False, dropout_p=0.0, scale=None, score_mod=None,
           need_weights=False) -> (output, weights or None)

- ``q`` (B, H, n_q, d), ``k`` (B, H_kv, n_k, d), ``v`` (B, H_kv, n_k, d_v); ``H_kv`` divides ``H``
  (grouped-query attention: query head ``i`` reads key/value head ``i // (H / H_kv)``, :func:`repeat_kv`).
- ``mask``, *may query i see key j*: ``None``, a bool tensor broadcastable to (B, H, n_q, n_k), or a
  rule, :class:`~course_lib.attention.masks.MaskMod`; ``True`` = attend. A kernel that needs a dense
  mask materialises a rule (:func:`~course_lib.attention.masks.keep_mask`); a tiled one evaluates it tile
  by tile.
- ``causal``: the look-ahead rule, aligned bottom-right (query ``i`` sits at key position
  ``i + n_k - n_q``: :func:`~course_lib.attention.masks.query_positions`), and-ed with ``mask``.
- ``score_mod``, *how much to add to the score of i and j*: ``None`` or a
  :class:`~course_lib.attention.score_mods.ScoreMod` (ALiBi's distances, relative biases), added to the
  scaled scores before the softmax.
- ``dropout_p``: dropout on the weights (the caller passes 0 in evaluation mode); ``scale``: the
  factor of the scores, :math:`1/\sqrt d` when ``None``.
- Returns the output (B, H, n_q, d_v) and, with ``need_weights``, the weights (B, H, n_q, n_k)
  before dropout (``None`` otherwise). A query that may see no key outputs the zero vector, with
  zero weights and zero gradient, never NaN.

Kernels do not validate their tensors: the public entry that calls one (:func:`~course_lib.attend`, a
module's ``forward``) checks the arguments once, and refuses, in one message format, what the kernel
does not declare it supports (:func:`check_supported`). Kernels are
chosen by name (:mod:`course_lib.attention.registry`): ``"fused"`` (``scaled_dot_product_attention``,
the default), ``"explicit"`` (chapter 3's computation written out), ``"flash"``, ``"linear"``,
``"sliding_window"``, ``"sparse"``, and the position wrappers ``"rotary"`` and ``"alibi"``.

**A new kernel** is a class with ``name``, ``supports`` and ``__call__`` as above, registered once with
:func:`~course_lib.attention.registry.register_kernel`; a model then uses it by writing its name in its
config, and the conformance test (``tests/test_kernel_conformance.py``) holds it to this contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from .masks import MaskMod
from .score_mods import ScoreMod

__all__ = ["AttentionKernel", "Capabilities", "as_heads", "check_kernel", "check_supported", "from_heads", "kv_groups",
           "repeat_kv", "scores_lead"]


@dataclass(frozen=True)
class Capabilities:
    """What a kernel supports beyond plain softmax attention; what it does not is refused before it runs.

    Attributes:
        dropout: dropout on the attention weights (``dropout_p > 0``).
        weights: returning the (n_q, n_k) weights (``need_weights``), for plots.
        query_masks: masks that differ from query to query (a tensor with a query axis, or any rule);
            without it, only key (padding) masks broadcastable to (B, H, 1, n_k).
        grouped_heads: fewer key/value heads than query heads.
        score_mods: an additive score modifier (:class:`~course_lib.attention.score_mods.ScoreMod`).
        scale: a score scale other than the default.

    Examples:
        >>> Capabilities(dropout=False)
        Capabilities(dropout=False, weights=True, query_masks=True, grouped_heads=True, score_mods=True, scale=True)
    """

    dropout: bool = True
    weights: bool = True
    query_masks: bool = True
    grouped_heads: bool = True
    score_mods: bool = True
    scale: bool = True


@runtime_checkable
class AttentionKernel(Protocol):
    """A kernel: a ``name``, what it ``supports``, and the call described in :mod:`course_lib.attention.contract`.

    Examples:
        A kernel of one's own plugs into a module unchanged; here the explicit kernel, logged:

        >>> class Logged:
        ...     name, supports = "logged", Capabilities()
        ...     def __init__(self):
        ...         self.calls = []
        ...     def __call__(self, q, k, v, mask=None, **options):
        ...         self.calls.append(tuple(q.shape))  # (B, H, n_q, d_h)
        ...         return explicit_kernel(q, k, v, mask, **options)
        >>> logged = Logged()
        >>> mha = MultiHeadAttention(8, 2, kernel=logged)
        >>> mha(torch.randn(1, 3, 8), torch.randn(1, 5, 8), torch.randn(1, 5, 8)).shape, logged.calls
        (torch.Size([1, 3, 8]), [(1, 2, 3, 4)])
        >>> isinstance(logged, AttentionKernel), isinstance(print, AttentionKernel)
        (True, False)
    """

    name: str
    supports: Capabilities

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 mask: torch.Tensor | MaskMod | None = None, *, causal: bool = False, dropout_p: float = 0.0,
                 scale: float | None = None, score_mod: ScoreMod | None = None,
                 need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]: ...


def check_kernel(kernel: object, name: str = "kernel") -> AttentionKernel:
    """``kernel`` itself when it is an :class:`AttentionKernel` (a ``name``, ``supports`` and a call); else TypeError.

    Examples:
        >>> check_kernel(print)
        Traceback (most recent call last):
        ...
        TypeError: kernel must be an AttentionKernel (an object with name, supports and a call), got \
builtin_function_or_method
    """
    if not isinstance(kernel, AttentionKernel):
        raise TypeError(f"{name} must be an AttentionKernel (an object with name, supports and a call), got "
                        f"{type(kernel).__name__}")
    return kernel


def kv_groups(q: torch.Tensor, k: torch.Tensor) -> int:
    """G = H / H_kv, the query heads each key/value head serves (1 without grouped heads or a head axis).

    Examples:
        >>> kv_groups(torch.zeros(1, 8, 3, 4), torch.zeros(1, 2, 3, 4))
        4
    """
    return 1 if q.dim() != 4 or k.dim() != 4 or q.shape[1] == k.shape[1] else q.shape[1] // k.shape[1]


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Grouped-query attention's keys or values expanded to one head per query head: the library's one expansion.

    Head ``i`` of the result is head ``i // groups`` of ``x`` (as ``repeat_interleave`` and Hugging Face's
    ``repeat_kv``), so that query head ``i`` reads key/value head ``i // (H / H_kv)``. Kernels with their
    own grouped path (``scaled_dot_product_attention(enable_gqa=True)``) do not need it.

    Args:
        x: (B, H_kv, n, d) keys or values.
        groups: G = H / H_kv >= 1.

    Returns:
        (B, H_kv * G, n, d); ``x`` itself when ``groups == 1``.

    Examples:
        >>> repeat_kv(torch.arange(2.0).view(1, 2, 1, 1), 3).flatten().tolist()
        [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    """
    if groups == 1:
        return x
    batch, heads, n, d = x.shape
    return x[:, :, None].expand(batch, heads, groups, n, d).reshape(batch, heads * groups, n, d)


def scores_lead(q: torch.Tensor, k: torch.Tensor) -> tuple[int, ...]:
    """The leading axes of the scores of ``q`` (..., n_q, d) and ``k`` (..., n_k, d): broadcast, with the
    queries' heads for 4-D inputs (grouped-query attention).

    Examples:
        >>> scores_lead(torch.zeros(2, 8, 3, 4), torch.zeros(1, 2, 5, 4))
        torch.Size([2, 8])
    """
    k_lead = list(k.shape[:-2])
    if q.dim() == k.dim() == 4:
        k_lead[1] = q.shape[1]
    return torch.broadcast_shapes(q.shape[:-2], tuple(k_lead))


def as_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | MaskMod | None
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | MaskMod | None, int]:
    """Inputs of 2 or 3 axes given the contract's (B, H, n, d) layout (one head; a batch of one for 2-D).

    What the public functions that take any layout (:func:`~course_lib.attend`, :func:`~course_lib.flash_attention`)
    call before a kernel; :func:`from_heads` undoes it on the results. A 3-D mask (B, n_q, n_k) gets its
    head axis; inputs of 4 or more axes are left as they are.

    Returns:
        ``(q, k, v, mask, layout)``, ``layout`` the number of axes the inputs had.

    Examples:
        >>> q, k, v, mask, layout = as_heads(torch.zeros(2, 3, 4), torch.zeros(2, 5, 4), torch.zeros(2, 5, 4),
        ...                                  torch.ones(2, 3, 5, dtype=torch.bool))
        >>> q.shape, mask.shape, layout
        (torch.Size([2, 1, 3, 4]), torch.Size([2, 1, 3, 5]), 3)
    """
    layout = q.dim()
    if layout >= 4:
        return q, k, v, mask, layout
    q, k, v = (t.reshape((1,) * (4 - t.dim()) + tuple(t.shape)) if t.dim() == 2 else t.unsqueeze(-3)
               for t in (q, k, v))
    if isinstance(mask, torch.Tensor) and mask.dim() >= 3:
        mask = mask.unsqueeze(-3)
    return q, k, v, mask, layout


def from_heads(x: torch.Tensor, layout: int) -> torch.Tensor:
    """A result (B, H, n, ...) back in the layout of :func:`as_heads`'s inputs (``layout`` axes).

    Examples:
        >>> from_heads(torch.zeros(1, 1, 3, 4), 2).shape
        torch.Size([3, 4])
    """
    if layout >= 4:
        return x
    return x[0, 0] if layout == 2 else x.squeeze(1)


def _has_query_axis(mask: torch.Tensor | MaskMod | None) -> bool:
    return isinstance(mask, MaskMod) or (mask is not None and mask.dim() >= 2 and mask.shape[-2] != 1)


def check_supported(kernel: AttentionKernel, *, mask: torch.Tensor | MaskMod | None = None, dropout_p: float = 0.0,
                    scale: float | None = None, score_mod: ScoreMod | None = None, need_weights: bool = False,
                    grouped: bool = False) -> None:
    """Refuse, in one message format, what ``kernel`` does not declare it supports (its ``supports``).

    Called by the public entries (:func:`~course_lib.attend`, a module's ``forward``) before the kernel runs,
    and by a kernel that lacks a capability, so that a direct call refuses too.

    Raises:
        ValueError: ``the 'linear' kernel does not support attention dropout (got dropout_p=0.1): ...``.

    Examples:
        >>> check_supported(LinearKernel(), dropout_p=0.1)
        Traceback (most recent call last):
        ...
        ValueError: the 'linear' kernel does not support attention dropout (got dropout_p=0.1): build the ...
    """
    supports = kernel.supports  # the messages are formatted only for a refusal (a decoding step calls this)
    if dropout_p > 0 and not supports.dropout:
        _refuse(kernel, "attention dropout", f"dropout_p={dropout_p}",
                "build the module with dropout=0, or call .eval()")
    if need_weights and not supports.weights:
        _refuse(kernel, "returning the attention weights", "need_weights=True",
                "record the weights with the explicit kernel")
    if mask is not None and not supports.query_masks and _has_query_axis(mask):
        _refuse(kernel, "masks that differ from query to query",
                "a MaskMod rule" if isinstance(mask, MaskMod)
                else f"a mask of shape {tuple(getattr(mask, 'shape', ()))}",
                "it takes only key (padding) masks, broadcastable to (batch, heads, 1, n_keys)")
    if grouped and not supports.grouped_heads:
        _refuse(kernel, "grouped key/value heads", "fewer key/value heads than heads", "repeat the key/value heads")
    if score_mod is not None and not supports.score_mods:
        _refuse(kernel, "score modifiers", repr(score_mod), "use a softmax kernel (fused, explicit, flash)")
    if scale is not None and not supports.scale:
        _refuse(kernel, "a score scale", f"scale={scale}", "leave scale at its default")


def _refuse(kernel: AttentionKernel, feature: str, got: str, advice: str) -> None:
    raise ValueError(f"the {kernel.name!r} kernel does not support {feature} (got {got}): {advice}")
