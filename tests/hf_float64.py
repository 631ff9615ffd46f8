"""Hugging Face's Llama and RoPE code run in float64: the reference of the RoPE-scaling tests.

``transformers`` (5.24) computes RoPE's frequencies in float32 whatever the model's dtype
(``torch.arange(...).to(dtype=torch.float)`` in ``modeling_rope_utils`` and ``LlamaRotaryEmbedding``, and
``torch.float32`` in YaRN's ramp), forms the angles from them in float32, casts RMSNorm's input to
``torch.float32``, and computes dynamic NTK's base as a tensor of the default dtype (``factor * seq_len``
with ``seq_len`` an integer tensor). Its results therefore differ from a float64 computation by float32 rounding (about
1e-7 relatively, times the position for the angles), which hides any error smaller than that.

:func:`hf_in_float64` runs Hugging Face's own code with ``torch.float`` and ``torch.float32`` read as
``torch.float64`` inside those two modules, and float64 as torch's default dtype: the same formulas,
evaluated in float64.
A model built inside the context computes its ``inv_freq`` in float64 and keeps it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import transformers.modeling_rope_utils as rope_utils
import transformers.models.llama.modeling_llama as modeling_llama


class _Float64Torch:
    """``torch`` with its two float32 names pointing at float64."""

    float = torch.float64
    float32 = torch.float64

    def __getattr__(self, name: str) -> object:
        return getattr(torch, name)


@contextlib.contextmanager
def hf_in_float64() -> Iterator[None]:
    """Inside: Hugging Face's RoPE initialisation, rotary embedding and RMSNorm compute in float64."""
    modules = (rope_utils, modeling_llama)
    saved, default_dtype = [module.torch for module in modules], torch.get_default_dtype()
    try:
        for module in modules:
            module.torch = _Float64Torch()
        torch.set_default_dtype(torch.float64)
        yield
    finally:
        torch.set_default_dtype(default_dtype)
        for module, original in zip(modules, saved, strict=True):
            module.torch = original
