r"""The explicit kernel: attention written out, chapter 3's computation (the reference for every other kernel).

.. math:: \mathbf A = \operatorname{softmax}(\mathbf Q\mathbf K^\top/\sqrt d + \text{bias}),\qquad
   \mathbf O = \mathbf A\mathbf V

It forms the (n_q, n_k) score matrix, so it is the kernel that returns the weights; the others hand a
call with ``need_weights`` to it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..contract import Capabilities, kv_groups, repeat_kv
from ..masks import MaskMod, keep_mask, query_positions, softmax_with_keep
from ..score_mods import ScoreMod

__all__ = ["ExplicitKernel", "explicit_kernel"]


class ExplicitKernel:
    """The score matrix, the masked softmax, dropout and the weighted sum: the contract of
    :mod:`course_lib.attention.contract`, written out. It supports everything and always returns the weights
    (they are formed anyway). Use the instance :data:`explicit_kernel` (registered as ``"explicit"``).

    Examples:
        >>> q, k = torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 3, 2)
        >>> v = torch.tensor([[[[3.0], [6.0], [9.0]]]])
        >>> out, weights = explicit_kernel(q, k, v)
        >>> out.flatten().tolist(), weights.flatten().tolist()
        ([6.0], [0.3333333432674408, 0.3333333432674408, 0.3333333432674408])
    """

    name = "explicit"
    supports = Capabilities()

    def __repr__(self) -> str:
        return "explicit_kernel"

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 mask: torch.Tensor | MaskMod | None = None, *, causal: bool = False, dropout_p: float = 0.0,
                 scale: float | None = None, score_mod: ScoreMod | None = None,
                 need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Args and returns: see :mod:`course_lib.attention.contract`."""
        groups = kv_groups(q, k)
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)  # (B, H, n_k, d): head i reads k/v head i // G
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        scores = (q @ k.transpose(-2, -1)) * scale  # (..., n_q, n_k)
        lead, n_q, n_k = scores.shape[:-2], q.shape[-2], k.shape[-2]
        if score_mod is not None:
            scores = scores + score_mod.evaluate(lead, query_positions(n_q, n_k, q.device),
                                                 torch.arange(n_k, device=q.device), scores.dtype)
        keep = keep_mask(mask, causal, n_q, n_k, q.device, lead=lead)
        weights = torch.softmax(scores, dim=-1) if keep is None else softmax_with_keep(scores, keep)
        dropped = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
        return dropped @ v, weights


explicit_kernel = ExplicitKernel()
