r"""Sliding-window attention: each query sees the last ``window`` keys, and a cache that keeps only those (chapter 10).

With the causal rule, query :math:`i` sees the keys :math:`i - W < j \le i` (Beltagy et al. 2020; Mistral
7B, Jiang et al. 2023): :func:`~course_lib.causal_mod` ``&`` :func:`~course_lib.sliding_window_mod` as a
keep-mask, the band of chapter 9's patterns. Two consequences:

- attention costs O(n W) instead of O(n^2) for a kernel that skips the empty tiles
  (:class:`~course_lib.FlashKernel`: outside the band, whole tiles are skipped);
- during decoding no query ever looks further back than :math:`W - 1` steps, so the key/value cache may
  forget the older steps: :class:`SlidingWindowCache` holds at most :math:`W - 1` steps, a memory bound that
  does not grow with the length of the text. Stacked layers still see further: layer :math:`\ell` reaches
  :math:`\ell (W - 1)` positions back through the layers below.

:class:`SlidingWindowKernel` adds the band to every call of another kernel, so that
``MultiHeadAttention(d, h, kernel=SlidingWindowKernel(W))`` is a sliding-window layer; with a
:class:`SlidingWindowCache` its cached decoding equals attention over the whole sequence with the band
(tested).
"""

from __future__ import annotations

import torch

from ..._validation import check_positive_int
from ..contract import AttentionKernel, Capabilities, check_kernel
from ..masks import MaskMod, sliding_window_mod
from ..score_mods import ScoreMod
from .fused import fused_kernel

__all__ = ["SlidingWindowKernel"]


class SlidingWindowKernel:
    """Another kernel restricted to the band ``|q_pos - kv_pos| < window``; with ``causal``, the last ``window`` keys.

    Registered as ``"sliding_window"``. The band is a rule (:func:`~course_lib.sliding_window_mod`), and-ed
    with the call's mask and handed to the inner kernel unmaterialised: the flash kernel skips the tiles
    outside it without forming the (n_q, n_k) mask, the fused and explicit kernels materialise it. It is
    aligned bottom-right like every mask of the library (the queries are the last positions), so it stays
    right when a cache holds the earlier keys.

    Args:
        window: W >= 1: a causal query sees itself and the W - 1 keys before it.
        inner: the kernel that computes the attention (default the fused kernel; the flash kernel skips
            the tiles outside the band; by name, ``attention_kernel("sliding_window", window=W, inner="flash")``).

    Examples:
        >>> kernel = SlidingWindowKernel(2, explicit_kernel)
        >>> q = k = v = torch.randn(1, 1, 4, 8)
        >>> _, weights = kernel(q, k, v, causal=True, need_weights=True)
        >>> (weights[0, 0] > 0).int()
        tensor([[1, 0, 0, 0],
                [1, 1, 0, 0],
                [0, 1, 1, 0],
                [0, 0, 1, 1]], dtype=torch.int32)
    """

    name = "sliding_window"

    def __init__(self, window: int, inner: AttentionKernel = fused_kernel) -> None:
        self.window = check_positive_int(window, "window")
        self.inner = check_kernel(inner, "inner")
        self.rule = sliding_window_mod(self.window)

    @property
    def supports(self) -> Capabilities:
        """What the inner kernel supports (the band is a query mask: the inner kernel must take those)."""
        return self.inner.supports

    def __repr__(self) -> str:
        return f"SlidingWindowKernel(window={self.window}, inner={self.inner!r})"

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 mask: torch.Tensor | MaskMod | None = None, *, causal: bool = False, dropout_p: float = 0.0,
                 scale: float | None = None, score_mod: ScoreMod | None = None,
                 need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Args and returns: see :mod:`course_lib.attention.contract`."""
        if mask is None:
            rule = self.rule
        else:
            rule = mask if isinstance(mask, MaskMod) else MaskMod.from_keep(mask, q.shape[-2], k.shape[-2])
            rule = rule & self.rule
        return self.inner(q, k, v, rule, causal=causal, dropout_p=dropout_p, scale=scale, score_mod=score_mod,
                          need_weights=need_weights)
