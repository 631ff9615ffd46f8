"""The attention wing: one kernel contract, the masks and score modifiers, and everything built on them.

- :mod:`~course_lib.attention.contract`: what a kernel is (``kernel(q, k, v, mask, *, causal, dropout_p,
  scale, score_mod, need_weights)``), what each kernel declares it supports, ``attend`` (the checked
  entry point) and the two helpers every kernel shares (``repeat_kv``, ``query_positions``);
- :mod:`~course_lib.attention.registry`: kernels by name (``"fused"``, ``"explicit"``, ``"flash"``, ...),
  as a model's config names them;
- :mod:`~course_lib.attention.masks`: masks as tensors and as rules (``MaskMod``), the masked softmax;
- :mod:`~course_lib.attention.score_mods`: additive score modifiers (``ScoreMod``), ALiBi's among them;
- :mod:`~course_lib.attention.multihead`: multi-head attention (project, kernel, merge);
- :mod:`~course_lib.attention.cache`: the key/value caches of incremental decoding;
- :mod:`~course_lib.attention.recording`: keeping the weights of a forward pass for plots;
- :mod:`~course_lib.attention.scoring`: chapter 3's scoring modules (additive, dot product, ...);
- :mod:`~course_lib.attention.kernels`: every kernel (explicit, fused, flash, linear, sliding window) and
  the position wrappers (rotary, ALiBi);
- :mod:`~course_lib.attention.sparse`: chapter 9's sparse patterns and their kernel.

``course_lib.attention`` was chapter 1's module of attention pooling until version 0.2; its names
(``attention_pool``, ``softmax_attention``, ``parameter_free_self_attention``) still resolve here for one
release and now live in :mod:`course_lib.pooling`.
"""

_POOLING = ("attention_pool", "softmax_attention", "parameter_free_self_attention")


def __getattr__(name: str) -> object:
    """Chapter 1's old names (``course_lib.attention.attention_pool``): see :mod:`course_lib.pooling`."""
    if name in _POOLING:
        from .. import pooling

        return getattr(pooling, name)
    raise AttributeError(f"module 'course_lib.attention' has no attribute {name!r}")
