"""The fused kernel: ``torch.nn.functional.scaled_dot_product_attention`` (SDPA), the library's default.

On a CPU (and with the flash or memory-efficient kernels of a GPU) SDPA computes the scores tile by tile:
O(n) memory instead of O(n^2), for 4-D (B, H, n, d) inputs without a mask (the causal rule of as many
queries as keys needs none); a mask or a score modifier is itself an n x n tensor (SDPA's float mask),
and 3-D inputs take PyTorch's math path, which stores the scores. The weights exist only in the explicit
kernel, to which a call with ``need_weights`` goes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..contract import Capabilities, kv_groups, scores_lead
from ..masks import MaskMod, keep_mask, query_positions
from ..score_mods import ScoreMod
from .explicit import explicit_kernel

__all__ = ["FusedKernel", "fused_kernel"]


class FusedKernel:
    """The contract of :mod:`course_lib.attention.contract` through ``scaled_dot_product_attention``.

    Masks and score modifiers become SDPA's additive float mask (0 or the bias where a pair is kept,
    ``-inf`` where it is not); SDPA's own grouped-query path serves grouped heads. Use the instance
    :data:`fused_kernel` (registered as ``"fused"``).

    Examples:
        >>> q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 8)
        >>> fused, _ = fused_kernel(q, k, v, causal=True)
        >>> explicit, _ = explicit_kernel(q, k, v, causal=True)
        >>> fused.shape, torch.allclose(fused, explicit, atol=1e-6)
        (torch.Size([2, 4, 5, 8]), True)
    """

    name = "fused"
    supports = Capabilities()

    def __repr__(self) -> str:
        return "fused_kernel"

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 mask: torch.Tensor | MaskMod | None = None, *, causal: bool = False, dropout_p: float = 0.0,
                 scale: float | None = None, score_mod: ScoreMod | None = None,
                 need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Args and returns: see :mod:`course_lib.attention.contract`."""
        if need_weights:
            return explicit_kernel(q, k, v, mask, causal=causal, dropout_p=dropout_p, scale=scale,
                                   score_mod=score_mod)
        n_q, n_k = q.shape[-2], k.shape[-2]
        options = {"dropout_p": dropout_p, "scale": scale}
        if kv_groups(q, k) > 1:
            options["enable_gqa"] = True
        if mask is None and score_mod is None and causal and n_q == n_k:
            # SDPA's is_causal is aligned top-left: the same as ours for a square mask only.
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, **options), None
        if mask is None and score_mod is None and (not causal or n_q == 1):
            return F.scaled_dot_product_attention(q, k, v, **options), None  # a decoding step: every key
        lead = scores_lead(q, k)
        keep = keep_mask(mask, causal, n_q, n_k, q.device, lead=lead)
        bias = None if score_mod is None else score_mod.evaluate(
            lead, query_positions(n_q, n_k, q.device), torch.arange(n_k, device=q.device), q.dtype)
        if keep is None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, **options), None
        row_ok = keep.any(dim=-1, keepdim=True)
        # Depending on the version and the kernel, SDPA returns NaN or 0 for a query with no key: let it
        # attend everywhere (finite) and zero its output. On the CPU the test is cheap and spares the
        # fix-up; on an accelerator bool() would wait for the device, so the fix-up (exact when every
        # query has a key) always runs there.
        every_row = keep.device.type == "cpu" and bool(row_ok.all())
        allowed = keep if every_row else keep | ~row_ok
        if bias is None:
            # The keep-mask as SDPA's additive mask (0 or -inf): the same numbers as a boolean mask, which
            # SDPA converts on every call (about 10 % of its time on a CPU).
            attn_mask = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device).masked_fill_(~allowed,
                                                                                                float("-inf"))
        else:
            attn_mask = torch.where(allowed, bias, float("-inf"))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, **options)
        return (out, None) if every_row else (out * row_ok, None)


fused_kernel = FusedKernel()
