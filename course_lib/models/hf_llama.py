"""Hugging Face's Llama read as a :class:`~course_lib.DecoderLM`'s configuration and weights (chapter 11).

``course_lib`` does not import ``transformers``: the model is read through its attributes (``config``,
``model.layers[i].self_attn.q_proj``, ...), so that this module works with any installed version that
keeps Llama's names, and the library installs without it.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["read_hf_llama"]


def read_hf_llama(model: nn.Module) -> tuple[dict[str, object], dict[str, torch.Tensor]]:
    """A Hugging Face Llama's :class:`~course_lib.DecoderLMConfig` fields and weights, under DecoderLM's names.

    What :meth:`course_lib.DecoderLM.from_hf_llama` builds its model from. The configuration is read from
    ``model.config``: sizes, heads and key/value heads, the RoPE base (``rope_parameters["rope_theta"]``) and
    scaling (``rope_type`` ``"linear"``, ``"dynamic"``, ``"yarn"`` or ``"llama3"`` with their fields, as
    ``rope_scaling``; ``"dynamic"``'s training context is ``config.max_position_embeddings``, and YaRN's
    ``factor``, when ``None``, is ``max_position_embeddings / original_max_position_embeddings``, as
    Hugging Face computes them), the RMSNorm epsilon and whether the embeddings are tied; the weights are
    the same matrices (both models use rotate-half RoPE). Transformers 4's ``rope_scaling`` with ``"type"``
    and ``config.rope_theta`` are read too.

    Args:
        model: a ``transformers.LlamaForCausalLM`` (built from a config, or loaded from weights you have).

    Returns:
        ``(fields, state_dict)``: keyword arguments of ``DecoderLMConfig`` and tensors (detached, on the
        model's device, in its dtype).

    Raises:
        TypeError: ``model`` is not a Llama causal language model.
        ValueError, naming the field: a feature this architecture does not have: another RoPE
            (``rope_type`` ``"longrope"``, ``"proportional"``, multimodal ``mrope_section``, ...), a
            ``partial_rotary_factor`` below 1, RoPE fields the type does not take, biases, an activation
            other than SiLU, or a head size other than ``hidden_size / num_attention_heads``.

    Examples:
        >>> from transformers import LlamaConfig, LlamaForCausalLM  # test/book dependency only
        >>> hf = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64,
        ...     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2))
        >>> fields, weights = read_hf_llama(hf)
        >>> fields["num_kv_heads"], fields["rope_base"], fields["rope_scaling"]
        (2, 10000.0, None)
        >>> weights["blocks.1.ffn.W_up.weight"].shape
        torch.Size([64, 32])
        >>> hf.config.rope_parameters = {"rope_type": "linear", "factor": 4.0, "rope_theta": 500000.0}
        >>> read_hf_llama(hf)[0]["rope_scaling"]
        {'rope_type': 'linear', 'factor': 4.0}
    """
    hf = getattr(model, "config", None)
    if getattr(hf, "model_type", None) != "llama" or not hasattr(model, "lm_head") or not hasattr(model, "model"):
        raise TypeError(f"model must be a transformers LlamaForCausalLM, got {type(model).__name__}")
    fields = dict(vocab_size=hf.vocab_size, num_hiddens=hf.hidden_size, num_heads=hf.num_attention_heads,
                  num_kv_heads=hf.num_key_value_heads or hf.num_attention_heads, num_layers=hf.num_hidden_layers,
                  ffn_num_hiddens=hf.intermediate_size, **_hf_rope(hf), norm_eps=float(hf.rms_norm_eps),
                  tie_embeddings=bool(getattr(hf, "tie_word_embeddings", False)))
    head_size = hf.hidden_size // hf.num_attention_heads
    head_dim = getattr(hf, "head_dim", None) or head_size
    if head_dim != head_size:
        raise ValueError(f"the model's head_dim ({head_dim}) differs from hidden_size / num_attention_heads "
                         f"({head_size}); DecoderLM has d_h = d / h")
    if getattr(hf, "hidden_act", "silu") != "silu":
        raise ValueError(f"DecoderLM's SwiGLU uses SiLU, the model uses hidden_act={hf.hidden_act!r}")
    if getattr(hf, "attention_bias", False) or getattr(hf, "mlp_bias", False):
        raise ValueError("DecoderLM has no biases, the model has attention_bias or mlp_bias set")
    return fields, _hf_state_dict(model, fields["tie_embeddings"])


# The rope_parameters fields each rope_type takes, besides rope_type (or transformers 4's "type") and
# rope_theta; Hugging Face's RotaryEmbeddingConfigMixin._validate_<type>_rope_parameters lists the same.
_HF_ROPE_FIELDS = {
    "default": set(),
    "linear": {"factor"},
    "dynamic": {"factor", "original_max_position_embeddings"},  # the second is ignored: HF reads max_position_...
    "yarn": {"factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow", "mscale",
             "mscale_all_dim", "truncate"},
    "llama3": {"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"},
}


def _hf_rope(hf: object) -> dict[str, object]:
    """``rope_base`` and ``rope_scaling`` of a Hugging Face Llama config (transformers 5's ``rope_parameters``, or
    4's ``rope_scaling`` and ``rope_theta``), with Hugging Face's defaults; refuses, naming the field, what a
    :class:`~course_lib.DecoderLM` cannot represent."""
    params = getattr(hf, "rope_parameters", None) or getattr(hf, "rope_scaling", None) or {}
    where = "rope_parameters" if getattr(hf, "rope_parameters", None) else "rope_scaling"
    params = dict(params)
    rope_type = params.pop("rope_type", params.get("type", "default"))
    params.pop("type", None)
    if rope_type not in _HF_ROPE_FIELDS:
        raise ValueError(f"the model's {where}['rope_type'] is {rope_type!r}; DecoderLM represents the rope types "
                         f"{sorted(_HF_ROPE_FIELDS)}")
    base = params.pop("rope_theta", getattr(hf, "rope_theta", None))
    base = 10000.0 if base is None else float(base)  # Hugging Face's default_theta
    partial = params.pop("partial_rotary_factor", getattr(hf, "partial_rotary_factor", None))
    if partial is not None and partial != 1.0:
        raise ValueError(f"the model's partial_rotary_factor is {partial}: it rotates part of each head; "
                         f"DecoderLM rotates every feature (partial_rotary_factor 1)")
    params = {key: value for key, value in params.items() if value is not None}  # None: Hugging Face's default
    unknown = sorted(set(params) - _HF_ROPE_FIELDS[rope_type])
    if unknown:
        raise ValueError(f"the model's {where} has fields that DecoderLM does not represent for rope_type "
                         f"{rope_type!r}: {unknown}")
    if rope_type == "default":
        return {"rope_base": base, "rope_scaling": None}
    if rope_type == "dynamic":  # Hugging Face scales beyond config.max_position_embeddings
        params["original_max_position_embeddings"] = hf.max_position_embeddings
    if rope_type in ("yarn", "llama3"):  # HF's standardize_rope_params: the training context defaults to this
        params.setdefault("original_max_position_embeddings", hf.max_position_embeddings)
    if rope_type == "yarn" and "factor" not in params:  # as _compute_yarn_parameters
        params["factor"] = hf.max_position_embeddings / params["original_max_position_embeddings"]
    return {"rope_base": base, "rope_scaling": {"rope_type": rope_type, **params}}


def _hf_state_dict(model: nn.Module, tie_embeddings: bool) -> dict[str, torch.Tensor]:
    """The Hugging Face Llama's weights under DecoderLM's names (the same matrices: both use rotate-half RoPE)."""
    hf = model.model
    state = {"embedding.weight": hf.embed_tokens.weight, "norm.weight": hf.norm.weight,
             "lm_head.weight": hf.embed_tokens.weight if tie_embeddings else model.lm_head.weight}
    for i, layer in enumerate(hf.layers):
        names = {"norm1": layer.input_layernorm, "norm2": layer.post_attention_layernorm,
                 "attention.W_q": layer.self_attn.q_proj, "attention.W_k": layer.self_attn.k_proj,
                 "attention.W_v": layer.self_attn.v_proj, "attention.W_o": layer.self_attn.o_proj,
                 "ffn.W_gate": layer.mlp.gate_proj, "ffn.W_up": layer.mlp.up_proj, "ffn.W_down": layer.mlp.down_proj}
        state.update({f"blocks.{i}.{name}.weight": module.weight for name, module in names.items()})
    return {name: tensor.detach() for name, tensor in state.items()}
