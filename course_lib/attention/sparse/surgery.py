"""Model surgery: swap the self-attention of a Transformer for sparse attention, keeping the weights."""

from __future__ import annotations

from typing import Literal

from torch import nn

from ...models.transformer import TransformerDecoderBlock, TransformerEncoderBlock
from .module import SparseMultiHeadAttention


def use_sparse_attention(model: nn.Module, pattern: Literal["strided", "fixed"] = "strided",
                         stride: int | None = None, c: int = 1) -> int:
    """Replace the self-attention of every Transformer block in ``model`` by a sparse one, in place.

    Encoder blocks (:class:`~course_lib.models.transformer.TransformerEncoderBlock`, attribute
    ``attention``) get the non-causal pattern, decoder blocks
    (:class:`~course_lib.models.transformer.TransformerDecoderBlock`, attribute ``self_attention``) the
    causal one, since they call it with ``causal=True``. Cross-attention stays dense (its queries
    and keys are different sequences). The new modules keep the old weights and recording flag
    (:meth:`SparseMultiHeadAttention.from_dense`), so a trained model can be switched.

    Args:
        model: a module containing Transformer blocks (a block, an encoder, a decoder, a Transformer).
        pattern, stride, c: as in :class:`SparseMultiHeadAttention`.

    Returns:
        The number of attention modules replaced (already sparse ones are replaced too, with the new pattern).

    Examples:
        >>> from course_lib import Transformer, TransformerConfig
        >>> model = Transformer(TransformerConfig(10, 12, num_hiddens=8, ffn_num_hiddens=16, num_heads=2))
        >>> use_sparse_attention(model, "fixed", stride=4)  # two encoder and two decoder blocks
        4
        >>> model.decoder.blocks[0].self_attention.kernel, type(model.decoder.blocks[0].cross_attention).__name__
        (SparseKernel('fixed', stride=4, c=1), 'MultiHeadAttention')
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    count = 0
    for module in list(model.modules()):
        name = ("attention" if isinstance(module, TransformerEncoderBlock) else
                "self_attention" if isinstance(module, TransformerDecoderBlock) else None)
        if name is not None:
            setattr(module, name, SparseMultiHeadAttention.from_dense(getattr(module, name), pattern, stride, c))
            count += 1
    if count == 0:
        raise ValueError(f"model ({type(model).__name__}) contains no TransformerEncoderBlock or "
                         f"TransformerDecoderBlock whose self-attention could be replaced")
    return count
