r"""The Transformer encoder--decoder of Vaswani et al. (2017), built from the chapter's parts (chapter 7).

Every sublayer (multi-head attention or the position-wise FFN) is wrapped in a residual connection
and a layer norm. The notes use post-norm, as the paper:

.. math:: \mathbf Y = \operatorname{LayerNorm}\big(\mathbf X
   + \operatorname{Dropout}(\operatorname{Sublayer}(\mathbf X))\big);

pre-norm (``norm_first=True``, :cite:`xiong2020`) normalises the sublayer's input instead,
:math:`\mathbf Y = \mathbf X + \operatorname{Dropout}(\operatorname{Sublayer}(\operatorname{LayerNorm}(\mathbf X)))`,
and adds one final layer norm after the last block of each stack. Post-norm blocks are the same
computation as ``torch.nn.TransformerEncoderLayer(batch_first=True, norm_first=False)`` (tested with
copied weights).

Masks (``True`` = attend, as everywhere in ``course_lib``):

- encoder self-attention and decoder cross-attention ignore the padded source positions
  (``src_valid_lens``);
- decoder self-attention uses the look-ahead (causal) mask, in training *and* in evaluation mode:
  position ``t`` sees target positions ``<= t`` only. There is no target padding mask: targets are
  padded on the right, so a real position never sees a padded one, and the outputs at padded positions
  (which do see real tokens and padding) are ignored by the masked loss
  (:func:`course_lib.training.train.masked_cross_entropy`).

Grouped-query attention (chapter 10): with ``num_kv_heads`` smaller than ``num_heads`` the keys and values
of an attention layer have fewer heads, each shared by ``num_heads / num_kv_heads`` query heads
(:class:`~course_lib.attention.multihead.MultiHeadAttention`). :class:`TransformerConfig` applies it to the decoder's
self- and cross-attention, whose keys and values a decoding step reads from memory, and not to the
encoder, which runs once per source in parallel (as Ainslie et al. 2023 do for T5).

The attention kernel is named in the config (``TransformerConfig(kernel="flash")``, any name of
:mod:`course_lib.attention.registry`) and passed down to every block, which builds its attention with it;
``cross_kernel`` may give the cross-attention another one (chapter 9 keeps it dense under a sparse
self-attention). A checkpoint stores the names, so a model comes back with the kernel it was trained with.

Shapes: ``B`` batch, ``S`` source length, ``T`` target length, ``d`` = ``num_hiddens``,
``h`` heads, ``h_kv`` key/value heads, ``V`` target vocabulary size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn

from .._validation import (
    as_lengths,
    check_batch_index,
    check_bool,
    check_floating,
    check_heads,
    check_ndim,
    check_pad_id,
    check_positive_int,
    check_probability,
    check_tensor,
    check_tokens,
)
from ..attention.cache import KVCache
from ..attention.contract import AttentionKernel
from ..attention.masks import keep_lengths
from ..attention.multihead import MultiHeadAttention
from ..attention.registry import attention_kernel, check_kernel_fields
from .positional import LearnedPositionalEmbedding, PositionalEncoding

__all__ = [
    "PositionWiseFFN",
    "AddNorm",
    "TransformerEncoderBlock",
    "TransformerEncoder",
    "TransformerDecoderBlock",
    "TransformerDecoder",
    "TransformerConfig",
    "TransformerDecoderState",
    "Transformer",
]


class PositionWiseFFN(nn.Module):
    r"""The same two-layer MLP applied to every position independently.

    .. math:: \operatorname{FFN}(\mathbf x) = \max(0, \mathbf x \mathbf W_1 + \mathbf b_1)\mathbf W_2 + \mathbf b_2

    Args:
        num_hiddens: d, the size of inputs and outputs.
        ffn_num_hiddens: size of the hidden layer (4d in the paper).
        dropout: dropout rate on the hidden activations (training mode only).

    Examples:
        >>> ffn = PositionWiseFFN(8, 32)
        >>> X = torch.randn(2, 3, 8)
        >>> ffn(X).shape, torch.allclose(ffn(X)[:, 1], ffn(X[:, 1]))  # every position on its own
        (torch.Size([2, 3, 8]), True)
    """

    def __init__(self, num_hiddens: int, ffn_num_hiddens: int, dropout: float = 0.0) -> None:
        super().__init__()
        check_positive_int(num_hiddens, "num_hiddens")
        check_positive_int(ffn_num_hiddens, "ffn_num_hiddens")
        check_probability(dropout, "dropout")
        self.dense1 = nn.Linear(num_hiddens, ffn_num_hiddens)
        self.relu = nn.ReLU()
        self.dropout = nn.Dropout(dropout)
        self.dense2 = nn.Linear(ffn_num_hiddens, num_hiddens)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """Args: X: (..., num_hiddens). Returns: (..., num_hiddens)."""
        check_floating(X, "X")
        if X.dim() == 0 or X.shape[-1] != self.dense1.in_features:
            raise ValueError(f"X must have size num_hiddens = {self.dense1.in_features} in its last axis, "
                             f"got shape {tuple(X.shape)}")
        return self.dense2(self.dropout(self.relu(self.dense1(X))))


class AddNorm(nn.Module):
    r"""Residual connection and layer norm around a sublayer.

    Post-norm (default, as in the notes and the paper), with :math:`\mathbf Y = \operatorname{Sublayer}(\mathbf X)`:

    .. math:: \operatorname{AddNorm}(\mathbf X, \mathbf Y)
       = \operatorname{LayerNorm}(\mathbf X + \operatorname{Dropout}(\mathbf Y)).

    Pre-norm (``norm_first=True``, :cite:`xiong2020`): the sublayer reads
    ``pre_norm(X) = LayerNorm(X)`` and the output is :math:`\mathbf X + \operatorname{Dropout}(\mathbf Y)`;
    the residual path then has no normalisation on it, which keeps gradients well scaled in deep stacks.

    Use it as ``Z = addnorm.pre_norm(X); out = addnorm(X, sublayer(Z))``: the same code for both variants.

    Args:
        num_hiddens: d, the normalised (last) axis.
        dropout: dropout rate on the sublayer output ``Y`` (training mode only).
        norm_first: pre-norm instead of post-norm.

    Examples:
        >>> X = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
        >>> AddNorm(4)(X, torch.zeros(1, 4)).detach()  # post-norm: LayerNorm(X + Y), zero mean, unit variance
        tensor([[-1.3416, -0.4472,  0.4472,  1.3416]])
        >>> AddNorm(4, norm_first=True)(X, torch.ones(1, 4))  # pre-norm: X + Y
        tensor([[1., 2., 3., 4.]])
    """

    def __init__(self, num_hiddens: int, dropout: float = 0.0, norm_first: bool = False) -> None:
        super().__init__()
        check_positive_int(num_hiddens, "num_hiddens")
        check_probability(dropout, "dropout")
        check_bool(norm_first, "norm_first")
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.ln = nn.LayerNorm(num_hiddens)

    def extra_repr(self) -> str:
        return f"norm_first={self.norm_first}"

    def pre_norm(self, X: torch.Tensor) -> torch.Tensor:
        """The sublayer's input: ``LayerNorm(X)`` for pre-norm, ``X`` itself for post-norm."""
        return self.ln(X) if self.norm_first else X

    def forward(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """Add the sublayer output to its input and normalise.

        Args:
            X: (..., num_hiddens) the sublayer's (un-normalised) input, the residual.
            Y: (..., num_hiddens) the sublayer's output, same shape as ``X``.

        Returns:
            (..., num_hiddens): ``LayerNorm(X + Dropout(Y))`` (post-norm) or ``X + Dropout(Y)`` (pre-norm).
        """
        check_floating(X, "X")
        check_floating(Y, "Y")
        if X.shape != Y.shape:
            raise ValueError(f"X and Y must have the same shape, got {tuple(X.shape)} and {tuple(Y.shape)}")
        if X.dim() == 0 or X.shape[-1] != self.ln.normalized_shape[0]:
            raise ValueError(f"X must have size num_hiddens = {self.ln.normalized_shape[0]} in its last axis, "
                             f"got shape {tuple(X.shape)}")
        out = X + self.dropout(Y)
        return out if self.norm_first else self.ln(out)


class TransformerEncoderBlock(nn.Module):
    """Self-attention then the position-wise FFN, each inside an :class:`AddNorm`.

    Args:
        num_hiddens: d.
        ffn_num_hiddens: the FFN's hidden size.
        num_heads: h; must divide ``num_hiddens``.
        dropout: dropout on the attention weights, the sublayer outputs and the FFN's hidden layer.
        norm_first: pre-norm instead of post-norm.
        bias: give the attention projections a bias (``torch.nn.MultiheadAttention`` has one).
        num_kv_heads: key/value heads of the attention (grouped-query attention); ``None`` means
            ``num_heads``; must divide ``num_heads``.
        kernel: the attention kernel or its name (:mod:`course_lib.attention.registry`).

    Examples:
        >>> block = TransformerEncoderBlock(num_hiddens=8, ffn_num_hiddens=16, num_heads=2)
        >>> block(torch.randn(2, 5, 8), padding_mask(torch.tensor([5, 3]), 5)).shape  # (B, S, d)
        torch.Size([2, 5, 8])
    """

    def __init__(self, num_hiddens: int, ffn_num_hiddens: int, num_heads: int, *, dropout: float = 0.0,
                 norm_first: bool = False, bias: bool = True, num_kv_heads: int | None = None,
                 kernel: str | AttentionKernel = "fused") -> None:
        super().__init__()
        self.attention = MultiHeadAttention(num_hiddens, num_heads, dropout, bias=bias, num_kv_heads=num_kv_heads,
                                            kernel=kernel)
        self.addnorm1 = AddNorm(num_hiddens, dropout, norm_first)
        self.ffn = PositionWiseFFN(num_hiddens, ffn_num_hiddens, dropout)
        self.addnorm2 = AddNorm(num_hiddens, dropout, norm_first)

    @classmethod
    def from_config(cls, config: TransformerConfig) -> TransformerEncoderBlock:
        """An encoder block of a :class:`Transformer` of this config: its fields passed down by name.

        Examples:
            >>> config = TransformerConfig(10, 12, num_hiddens=8, ffn_num_hiddens=16, num_heads=2, kernel="flash")
            >>> TransformerEncoderBlock.from_config(config).attention.kernel
            FlashKernel(block_q=128, block_k=128)
        """
        return cls(config.num_hiddens, config.ffn_num_hiddens, config.num_heads, dropout=config.dropout,
                   norm_first=config.norm_first, kernel=config.attention_kernel())

    def forward(self, X: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Encode one layer.

        Args:
            X: (B, S, d) the previous layer's output.
            mask: optional bool keep-mask of the keys, ``True`` = attend: (B, 1, S) from
                :func:`course_lib.padding_mask` (the encoder builds it once for all layers), or any
                mask :class:`~course_lib.attention.multihead.MultiHeadAttention` takes.

        Returns:
            (B, S, d)
        """
        Z = self.addnorm1.pre_norm(X)
        X = self.addnorm1(X, self.attention(Z, Z, Z, mask))
        return self.addnorm2(X, self.ffn(self.addnorm2.pre_norm(X)))


def _positional(kind: str, num_hiddens: int, dropout: float, max_len: int) -> nn.Module:
    if kind == "sinusoidal":
        return PositionalEncoding(num_hiddens, dropout, max_len)
    if kind == "learned":
        return LearnedPositionalEmbedding(num_hiddens, dropout, max_len)
    raise ValueError(f'positional must be "sinusoidal" or "learned", got {kind!r}')


class _Embedder(nn.Module):
    r"""Token embedding scaled by :math:`\sqrt d`, plus the positional encoding (with its dropout).

    The table is drawn from :math:`\mathcal N(0, 1/d)` so that the scaled embedding has unit scale,
    the scale of the sinusoids; with PyTorch's default :math:`\mathcal N(0, 1)` the tokens would
    drown the positions (:math:`\sqrt d` times larger). The ``<pad>`` row is zero and gets no gradient.
    """

    def __init__(self, vocab_size: int, num_hiddens: int, dropout: float, max_len: int, positional: str,
                 pad_id: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, num_hiddens, padding_idx=pad_id)
        nn.init.normal_(self.embedding.weight, std=num_hiddens**-0.5)
        with torch.no_grad():
            self.embedding.weight[pad_id].zero_()
        self.pos_encoding = _positional(positional, num_hiddens, dropout, max_len)
        self.scale = math.sqrt(num_hiddens)

    def forward(self, tokens: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """(B, T) ids -> (B, T, d) ``dropout(sqrt(d) E[tokens] + P[offset:offset + T])``."""
        return self.pos_encoding(self.embedding(tokens) * self.scale, offset)


def _src_mask(src_valid_lens: object, x: torch.Tensor, what: str) -> torch.Tensor:
    """The (B, 1, S) keep-mask of (B,) source lengths for ``x`` of shape (B, S, ...) named ``what``: the lengths
    are checked here, once per call, and become the mask every block reads."""
    lens = as_lengths(src_valid_lens, "src_valid_lens", max_len=x.shape[1], shape=(x.shape[0],),
                      what=f"{what} of shape {tuple(x.shape)}", device=x.device)
    return keep_lengths(lens, x.shape[1]).unsqueeze(1)


def _check_memory(memory: object, tokens: torch.Tensor, num_hiddens: int) -> None:
    check_floating(memory, "memory")
    check_ndim(memory, "memory", 3, "(batch, S, num_hiddens)")
    if memory.shape[0] != tokens.shape[0] or memory.shape[2] != num_hiddens:
        raise ValueError(f"memory must have shape ({tokens.shape[0]}, S, {num_hiddens}) for tokens of shape "
                         f"{tuple(tokens.shape)}, got {tuple(memory.shape)}")


def _check_stack_args(vocab_size: object, num_layers: object, pad_id: object) -> None:
    """The arguments a stack names otherwise than :class:`TransformerConfig` does, checked under the stack's names
    (the config built from them checks the rest)."""
    check_positive_int(vocab_size, "vocab_size")
    check_positive_int(num_layers, "num_layers")
    check_pad_id(pad_id, vocab_size)


class _Stack(nn.Module):
    """What the encoder and the decoder share: the embedder, ``num_layers`` blocks and the final norm.

    Built from a :class:`TransformerConfig` (:meth:`from_config`, as :class:`Transformer` builds its two
    stacks); the keyword constructor of a stack used on its own makes that config (validated there, once).
    """

    block_class: type[nn.Module]

    @classmethod
    def from_config(cls, config: TransformerConfig) -> _Stack:
        """The encoder (or decoder) of a :class:`Transformer` of this config."""
        stack = cls.__new__(cls)
        nn.Module.__init__(stack)
        stack._build(config)
        return stack

    def _build(self, config: TransformerConfig) -> None:
        self.num_hiddens, self.vocab_size = config.num_hiddens, self._vocab_size(config)
        self.embed = _Embedder(self.vocab_size, config.num_hiddens, config.dropout, config.max_len, config.positional,
                               config.pad_id)
        self.blocks = nn.ModuleList(self.block_class.from_config(config) for _ in range(self._num_layers(config)))
        self.norm = nn.LayerNorm(config.num_hiddens) if config.norm_first else nn.Identity()


class TransformerEncoder(_Stack):
    """Token embedding (scaled by sqrt(d)) + positional encoding, then ``num_layers`` encoder blocks.

    Args:
        vocab_size: source vocabulary size.
        num_hiddens, ffn_num_hiddens, num_heads, num_layers, dropout: the blocks' sizes.
        max_len: the longest source the positional encoding covers.
        norm_first: pre-norm blocks and a final layer norm (``self.norm``; identity for post-norm).
        positional: ``"sinusoidal"`` (fixed) or ``"learned"``.
        pad_id: id of ``<pad>``.
        kernel, kernel_options: the blocks' attention kernel, by name (:mod:`course_lib.attention.registry`).

    Examples:
        >>> encoder = TransformerEncoder(10, num_hiddens=8, ffn_num_hiddens=16, num_heads=2, num_layers=2)
        >>> encoder(torch.tensor([[4, 5, 2], [6, 2, 0]]), torch.tensor([3, 2])).shape  # (B, S, d)
        torch.Size([2, 3, 8])
    """

    block_class = TransformerEncoderBlock

    def __init__(self, vocab_size: int, num_hiddens: int, ffn_num_hiddens: int, num_heads: int, num_layers: int, *,
                 dropout: float = 0.0, max_len: int = 1000, norm_first: bool = False,
                 positional: Literal["sinusoidal", "learned"] = "sinusoidal", pad_id: int = 0, kernel: str = "fused",
                 kernel_options: dict | None = None) -> None:
        super().__init__()
        _check_stack_args(vocab_size, num_layers, pad_id)
        self._build(TransformerConfig(
            vocab_size, vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_enc_layers=num_layers, dropout=dropout,
            max_len=max_len, norm_first=norm_first, positional=positional, pad_id=pad_id, kernel=kernel,
            kernel_options=kernel_options or {}))

    @staticmethod
    def _vocab_size(config: TransformerConfig) -> int:
        return config.src_vocab_size

    @staticmethod
    def _num_layers(config: TransformerConfig) -> int:
        return config.num_enc_layers

    def forward(self, src: torch.Tensor, src_valid_lens: torch.Tensor | None = None) -> torch.Tensor:
        """Encode the source.

        Args:
            src: (B, S) token ids.
            src_valid_lens: optional (B,) source lengths, a tensor or a list (positions
                ``>= src_valid_lens`` are padding).

        Returns:
            (B, S, d) the memory the decoder attends to.
        """
        check_tokens(src, "src", "(batch, S)", self.vocab_size)
        mask = None if src_valid_lens is None else _src_mask(src_valid_lens, src, "src")
        return self._encode(src, mask)

    def _encode(self, src: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """The stack itself, for checked ``src`` and a source keep-mask (B, 1, S) or ``None``."""
        X = self.embed(src)
        for block in self.blocks:
            X = block(X, mask)
        return self.norm(X)


class TransformerDecoderBlock(nn.Module):
    """Masked self-attention, cross-attention to the encoder, then the FFN, each inside an :class:`AddNorm`.

    Args: as :class:`TransformerEncoderBlock` (the two attentions get the same sizes, ``num_kv_heads``
    included), and ``cross_kernel``: the cross-attention's kernel or its name (default: ``kernel``).

    Examples:
        >>> block = TransformerDecoderBlock(num_hiddens=8, ffn_num_hiddens=16, num_heads=2).eval()
        >>> X, memory = torch.randn(2, 4, 8), torch.randn(2, 5, 8)
        >>> Y = block(X, memory)
        >>> Y.shape, torch.allclose(block(X[:, :2], memory), Y[:, :2], atol=1e-6)  # no look-ahead
        (torch.Size([2, 4, 8]), True)
    """

    def __init__(self, num_hiddens: int, ffn_num_hiddens: int, num_heads: int, *, dropout: float = 0.0,
                 norm_first: bool = False, bias: bool = True, num_kv_heads: int | None = None,
                 kernel: str | AttentionKernel = "fused", cross_kernel: str | AttentionKernel | None = None) -> None:
        super().__init__()
        self.self_attention = MultiHeadAttention(num_hiddens, num_heads, dropout, bias=bias, num_kv_heads=num_kv_heads,
                                                 kernel=kernel)
        self.addnorm1 = AddNorm(num_hiddens, dropout, norm_first)
        self.cross_attention = MultiHeadAttention(num_hiddens, num_heads, dropout, bias=bias, num_kv_heads=num_kv_heads,
                                                  kernel=kernel if cross_kernel is None else cross_kernel)
        self.addnorm2 = AddNorm(num_hiddens, dropout, norm_first)
        self.ffn = PositionWiseFFN(num_hiddens, ffn_num_hiddens, dropout)
        self.addnorm3 = AddNorm(num_hiddens, dropout, norm_first)

    @classmethod
    def from_config(cls, config: TransformerConfig) -> TransformerDecoderBlock:
        """A decoder block of a :class:`Transformer` of this config: its fields passed down by name.

        Examples:
            >>> config = TransformerConfig(10, 12, num_hiddens=8, num_heads=2, num_kv_heads=1, kernel="explicit")
            >>> block = TransformerDecoderBlock.from_config(config)
            >>> block.self_attention.num_kv_heads, block.cross_attention.kernel
            (1, explicit_kernel)
        """
        return cls(config.num_hiddens, config.ffn_num_hiddens, config.num_heads, dropout=config.dropout,
                   norm_first=config.norm_first, num_kv_heads=config.num_kv_heads, kernel=config.attention_kernel(),
                   cross_kernel=config.cross_attention_kernel())

    def forward(self, X: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Decode one layer for all target positions at once (teacher forcing).

        Args:
            X: (B, T, d) the previous layer's output.
            memory: (B, S, d) the encoder output (keys and values of the cross-attention).
            memory_mask: optional bool keep-mask of the source positions, (B, 1, S) from
                :func:`course_lib.padding_mask`, ``True`` = attend.

        Returns:
            (B, T, d); position ``t`` depends on ``X[:, :t + 1]`` only (look-ahead mask).
        """
        Z = self.addnorm1.pre_norm(X)
        X = self.addnorm1(X, self.self_attention(Z, Z, Z, causal=True))
        return self._cross_and_ffn(X, self.project_memory(memory), memory_mask)

    def step(self, X: torch.Tensor, self_cache: KVCache, memory_kv: tuple[torch.Tensor, torch.Tensor],
             memory_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Decode the new position(s) only, attending to the cached earlier ones (incremental decoding).

        Args:
            X: (B, T_new, d) the previous layer's output at the new positions.
            self_cache: this block's self-attention cache; the new keys/values are appended to it.
            memory_kv: the memory's keys and values from :meth:`project_memory`, projected once.
            memory_mask: as in :meth:`forward`.

        Returns:
            (B, T_new, d), equal to the rows of :meth:`forward` at the new positions.
        """
        Z = self.addnorm1.pre_norm(X)
        X = self.addnorm1(X, self.self_attention(Z, Z, Z, causal=True, kv_cache=self_cache))
        return self._cross_and_ffn(X, memory_kv, memory_mask)

    def _cross_and_ffn(self, X: torch.Tensor, memory_kv: tuple[torch.Tensor, torch.Tensor],
                       memory_mask: torch.Tensor | None) -> torch.Tensor:
        Z = self.addnorm2.pre_norm(X)
        X = self.addnorm2(X, self.cross_attention(Z, mask=memory_mask, kv=memory_kv))
        return self.addnorm3(X, self.ffn(self.addnorm3.pre_norm(X)))

    def project_memory(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The cross-attention's keys and values, ``W_k`` and ``W_v`` applied to the encoder output once.

        Args:
            memory: (B, S, d)

        Returns:
            keys and values (B, h, S, d_h), for every decoding step.
        """
        return self.cross_attention.project_kv(memory)


@dataclass
class TransformerDecoderState:
    """What the decoder carries from one step to the next (opaque to callers).

    Attributes:
        self_caches: one :class:`~course_lib.attention.multihead.KVCache` per block: the self-attention keys and
            values (B, h_kv, t, d_h) of the ``t`` tokens fed so far.
        memory_kv: one (keys, values) pair per block: the cross-attention keys and values
            (B, h_kv, S, d_h), projected once from the encoder output.
        memory_mask: (B, 1, S) bool, ``True`` at real source positions.
        offset: t, the number of tokens fed so far (the position of the next one).

    Examples:
        >>> model = Transformer(TransformerConfig(10, 12, num_hiddens=8, ffn_num_hiddens=16, num_heads=2))
        >>> src, src_valid_lens = torch.tensor([[4, 5, 2], [6, 2, 0]]), torch.tensor([3, 2])
        >>> state = model.init_decoder_state(model.encode(src, src_valid_lens), src_valid_lens)
        >>> _, state = model.decode_step(torch.tensor([[1], [1]]), state)
        >>> state.offset, len(state.self_caches), state.self_caches[0].keys.shape  # (B, h, t, d_h)
        (1, 2, torch.Size([2, 2, 1, 4]))
        >>> state.memory_kv[0][0].shape, state.memory_mask.shape  # (B, h, S, d_h), (B, 1, S)
        (torch.Size([2, 2, 3, 4]), torch.Size([2, 1, 3]))
    """

    self_caches: list[KVCache]
    memory_kv: list[tuple[torch.Tensor, torch.Tensor]]
    memory_mask: torch.Tensor
    offset: int = 0

    @property
    def batch_size(self) -> int:
        return self.memory_mask.shape[0]

    def next_step(self) -> TransformerDecoderState:
        """A copy whose caches can grow without touching this state's caches."""
        return TransformerDecoderState([c.copy() for c in self.self_caches], self.memory_kv, self.memory_mask,
                                       self.offset)

    def index_select(self, index: torch.Tensor) -> TransformerDecoderState:
        """Keep (and reorder, or repeat) the batch rows in ``index`` (B',)."""
        memory_kv = [(k.index_select(0, index), v.index_select(0, index)) for k, v in self.memory_kv]
        return TransformerDecoderState([c.copy().reorder(index) for c in self.self_caches], memory_kv,
                                       self.memory_mask.index_select(0, index), self.offset)


class TransformerDecoder(_Stack):
    """Token embedding + positional encoding, ``num_layers`` decoder blocks, and a linear layer to the vocabulary.

    Args:
        vocab_size: V, target vocabulary size.
        num_hiddens, ffn_num_hiddens, num_heads, num_layers, dropout: the blocks' sizes.
        max_len: the longest target the positional encoding covers.
        norm_first: pre-norm blocks and a final layer norm (``self.norm``; identity for post-norm).
        positional: ``"sinusoidal"`` or ``"learned"``.
        pad_id: id of ``<pad>``.
        num_kv_heads: key/value heads of every block's self- and cross-attention (``None``: ``num_heads``);
            the caches then hold ``num_kv_heads`` heads.
        kernel, kernel_options, cross_kernel: the attention kernels, by name (as :class:`TransformerConfig`).

    Examples:
        >>> decoder = TransformerDecoder(12, num_hiddens=8, ffn_num_hiddens=16, num_heads=2, num_layers=2)
        >>> memory = torch.randn(2, 3, 8)  # (B, S, d), from an encoder
        >>> decoder(torch.tensor([[1, 7, 8, 9], [1, 7, 0, 0]]), memory, torch.tensor([3, 2])).shape  # (B, T, V)
        torch.Size([2, 4, 12])
    """

    block_class = TransformerDecoderBlock

    def __init__(self, vocab_size: int, num_hiddens: int, ffn_num_hiddens: int, num_heads: int, num_layers: int, *,
                 dropout: float = 0.0, max_len: int = 1000, norm_first: bool = False,
                 positional: Literal["sinusoidal", "learned"] = "sinusoidal", pad_id: int = 0,
                 num_kv_heads: int | None = None, kernel: str = "fused", kernel_options: dict | None = None,
                 cross_kernel: str | None = None) -> None:
        super().__init__()
        _check_stack_args(vocab_size, num_layers, pad_id)
        self._build(TransformerConfig(
            vocab_size, vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_dec_layers=num_layers, dropout=dropout,
            max_len=max_len, norm_first=norm_first, positional=positional, pad_id=pad_id, num_kv_heads=num_kv_heads,
            kernel=kernel, kernel_options=kernel_options or {}, cross_kernel=cross_kernel))

    def _build(self, config: TransformerConfig) -> None:
        super()._build(config)
        # No weight tying: source and target vocabularies differ in general.
        self.dense = nn.Linear(config.num_hiddens, config.tgt_vocab_size)

    @staticmethod
    def _vocab_size(config: TransformerConfig) -> int:
        return config.tgt_vocab_size

    @staticmethod
    def _num_layers(config: TransformerConfig) -> int:
        return config.num_dec_layers

    def forward(self, tgt_in: torch.Tensor, memory: torch.Tensor,
                src_valid_lens: torch.Tensor | None = None) -> torch.Tensor:
        """Teacher forcing: the logits at every target position.

        Args:
            tgt_in: (B, T) decoder inputs ``<bos> y_1 ... y_{T-1}``.
            memory: (B, S, d) encoder output.
            src_valid_lens: optional (B,) source lengths.

        Returns:
            (B, T, V) logits; row ``t`` depends on ``tgt_in[:, :t + 1]`` only.
        """
        check_tokens(tgt_in, "tgt_in", "(batch, T)", self.vocab_size)
        _check_memory(memory, tgt_in, self.num_hiddens)
        mask = None if src_valid_lens is None else _src_mask(src_valid_lens, memory, "memory")
        return self._decode(tgt_in, memory, mask)

    def _decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor | None) -> torch.Tensor:
        """The stack itself, for checked inputs and a source keep-mask (B, 1, S) or ``None``."""
        X = self.embed(tgt_in)
        for block in self.blocks:
            X = block(X, memory, memory_mask)
        return self.dense(self.norm(X))

    def init_state(self, memory: torch.Tensor, memory_mask: torch.Tensor) -> TransformerDecoderState:
        """Empty self-attention caches and the cross-attention keys/values projected once per block.

        Args:
            memory: (B, S, d) the encoder output.
            memory_mask: (B, 1, S) bool keep-mask of the real source positions.
        """
        return TransformerDecoderState(
            self_caches=[KVCache() for _ in self.blocks],
            memory_kv=[block.project_memory(memory) for block in self.blocks],
            memory_mask=memory_mask,
        )

    # Chapter 8 shows this method (literalinclude :pyobject:): its lines fit the book's 79 columns.
    def step(
        self, tokens: torch.Tensor, state: TransformerDecoderState
    ) -> tuple[torch.Tensor, TransformerDecoderState]:
        """Feed the next token(s) and get their logits, using the caches.

        Args:
            tokens: (B, T_new) ids at positions ``state.offset``, ...,
                ``state.offset + T_new - 1``.
            state: from :meth:`init_state` or the previous call; left unchanged.

        Returns:
            logits (B, T_new, V) and the new state.
        """
        state = state.next_step()  # copies of the caches, which grow below
        X = self.embed(tokens, state.offset)  # the new positions only
        layers = zip(self.blocks, state.self_caches, state.memory_kv, strict=True)
        for block, self_cache, memory_kv in layers:
            # appends the new keys and values to self_cache, attends to all
            X = block.step(X, self_cache, memory_kv, state.memory_mask)
        state.offset += tokens.shape[1]
        return self.dense(self.norm(X)), state


@dataclass(frozen=True)
class TransformerConfig:
    """Hyperparameters of a :class:`Transformer` (what a checkpoint stores to rebuild the model).

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes (special tokens included).
        num_hiddens: d, the model size; must be divisible by ``num_heads``.
        ffn_num_hiddens: hidden size of the position-wise FFN.
        num_heads: h, attention heads.
        num_enc_layers, num_dec_layers: blocks in the encoder and in the decoder.
        dropout: one rate for every dropout layer.
        max_len: the longest source or target sequence (positions of the positional encoding).
        norm_first: pre-norm (:cite:`xiong2020`) instead of the paper's post-norm.
        positional: ``"sinusoidal"`` (fixed, the paper) or ``"learned"``.
        pad_id: id of ``<pad>`` in both vocabularies (its embedding is zero and gets no gradient).
        num_kv_heads: key/value heads of the decoder's self- and cross-attention (grouped-query attention,
            :cite:`ainslie2023`; 1 is multi-query attention, :cite:`shazeer2019`); ``None`` means
            ``num_heads``; must divide ``num_heads``. The encoder keeps ``num_heads`` key/value heads: it
            runs once per source, while every decoding step reads the decoder's keys and values.
        kernel: the attention kernel of every attention layer, by name (:func:`course_lib.kernel_names`:
            ``"fused"``, ``"explicit"``, ``"flash"``, ``"linear"``, ``"sparse"``, ...).
        kernel_options: the kernel's options (``{"block_q": 64}`` for ``"flash"``; plain values, so that a
            checkpoint stores them).
        cross_kernel: the decoder's cross-attention kernel by name, with its default options; ``None``: the
            same as ``kernel`` (chapter 9 keeps cross-attention ``"fused"`` under a sparse self-attention).

    Raises:
        ValueError: a size is not positive, ``num_hiddens % num_heads != 0``, ``num_kv_heads`` does not
            divide ``num_heads``, ``dropout`` is not in [0, 1), ``positional`` is unknown, or ``pad_id``
            is not an id of both vocabularies.

    Examples:
        >>> config = TransformerConfig(10, 12, num_hiddens=8, ffn_num_hiddens=16, num_heads=2)
        >>> config.num_enc_layers, config.dropout, config.max_len
        (2, 0.1, 256)
        >>> TransformerConfig(10, 12, num_hiddens=10, num_heads=4)
        Traceback (most recent call last):
        ...
        ValueError: num_hiddens (10) must be divisible by num_heads (4): each head gets num_hiddens / num_heads features
        >>> config = TransformerConfig(src_vocab_size=10, tgt_vocab_size=12, num_hiddens=16, num_heads=4,
        ...                            num_kv_heads=1)
        >>> decoder_block = Transformer(config).decoder.blocks[0]
        >>> decoder_block.self_attention.W_k  # one key head of size 16 / 4 for the 4 query heads
        Linear(in_features=16, out_features=4, bias=True)
    """

    src_vocab_size: int
    tgt_vocab_size: int
    num_hiddens: int = 128
    ffn_num_hiddens: int = 256
    num_heads: int = 4
    num_enc_layers: int = 2
    num_dec_layers: int = 2
    dropout: float = 0.1
    max_len: int = 256
    norm_first: bool = False
    positional: Literal["sinusoidal", "learned"] = "sinusoidal"
    pad_id: int = 0
    num_kv_heads: int | None = None
    kernel: str = "fused"
    kernel_options: dict = field(default_factory=dict)
    cross_kernel: str | None = None

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "num_hiddens", "ffn_num_hiddens", "num_heads",
                     "num_enc_layers", "num_dec_layers", "max_len"):
            check_positive_int(getattr(self, name), name)
        kv_heads = self.num_heads if self.num_kv_heads is None else self.num_kv_heads
        check_heads(self.num_hiddens, self.num_heads, kv_heads)
        check_probability(self.dropout, "dropout")
        check_bool(self.norm_first, "norm_first")
        if self.positional not in ("sinusoidal", "learned"):
            raise ValueError(f'positional must be "sinusoidal" or "learned", got {self.positional!r}')
        check_pad_id(self.pad_id, self.src_vocab_size, self.tgt_vocab_size)
        check_kernel_fields(self.kernel, self.kernel_options, self.cross_kernel)

    def attention_kernel(self) -> AttentionKernel:
        """The kernel ``kernel`` and ``kernel_options`` name (:func:`course_lib.attention_kernel`)."""
        return attention_kernel(self.kernel, **self.kernel_options)

    def cross_attention_kernel(self) -> AttentionKernel:
        """The cross-attention's kernel: ``cross_kernel``, or :meth:`attention_kernel` when it is ``None``."""
        return self.attention_kernel() if self.cross_kernel is None else attention_kernel(self.cross_kernel)


class Transformer(nn.Module):
    """The Transformer encoder--decoder, implementing the seq2seq protocol of :mod:`course_lib.decoding.search`.

    ``forward`` (teacher forcing), ``encode``, ``init_decoder_state``, ``decode_step`` (one token per
    call, with a key/value cache per decoder block; the cross-attention keys and values are projected
    once in ``init_decoder_state``) and ``reorder_state`` (beam search). Inside
    ``with course_lib.recording_attention(model):``, the weights are kept in
    ``encoder.blocks[i].attention``, ``decoder.blocks[i].self_attention`` and
    ``decoder.blocks[i].cross_attention`` (``.attention_weights``, (B, h, n_queries, n_keys)).

    Args:
        config: a :class:`TransformerConfig`.

    Examples:
        >>> model = Transformer(TransformerConfig(src_vocab_size=10, tgt_vocab_size=12, num_hiddens=16,
        ...                                       ffn_num_hiddens=32, num_heads=2))
        >>> src, src_valid_lens = torch.tensor([[4, 5, 2, 0]]), torch.tensor([3])
        >>> tgt_in = torch.tensor([[1, 7, 8]])
        >>> model(src, src_valid_lens, tgt_in).shape  # (batch, T, tgt_vocab_size)
        torch.Size([1, 3, 12])
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
        self.config = config
        self.encoder = TransformerEncoder.from_config(config)
        self.decoder = TransformerDecoder.from_config(config)

    def forward(self, src: torch.Tensor, src_valid_lens: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: the logits of every next target token.

        Args:
            src: (B, S) source ids.
            src_valid_lens: (B,) source lengths.
            tgt_in: (B, T) decoder inputs ``<bos> y_1 ... y_{T-1}`` (right-padded; see the module docstring).

        Returns:
            (B, T, V) logits; row ``t`` predicts ``y_{t+1}`` and depends on ``tgt_in[:, :t + 1]`` only.
        """
        check_tokens(tgt_in, "tgt_in", "(batch, T)", self.config.tgt_vocab_size)
        check_tensor(src, "src")
        if src.dim() == 2 and tgt_in.shape[0] != src.shape[0]:
            raise ValueError(f"src and tgt_in must have the same batch size, got shapes {tuple(src.shape)} and "
                             f"{tuple(tgt_in.shape)}")
        self._check_length(tgt_in.shape[1], "tgt_in")
        check_tokens(src, "src", "(batch, S)", self.config.src_vocab_size)
        self._check_length(src.shape[1], "src")
        mask = _src_mask(src_valid_lens, src, "src")  # (B, 1, S): the lengths are checked and become a mask once
        return self.decoder._decode(tgt_in, self.encoder._encode(src, mask), mask)

    def encode(self, src: torch.Tensor, src_valid_lens: torch.Tensor) -> torch.Tensor:
        """Encode the source; returns the memory (B, S, d) (opaque to callers)."""
        check_tensor(src, "src")
        if src.dim() == 2:
            self._check_length(src.shape[1], "src")
        return self.encoder(src, src_valid_lens)

    def init_decoder_state(self, memory: torch.Tensor, src_valid_lens: torch.Tensor) -> TransformerDecoderState:
        """The decoder state before the first step: empty self-attention caches, cross-attention keys/values.

        Args:
            memory: (B, S, d) from :meth:`encode`.
            src_valid_lens: (B,) source lengths.
        """
        check_floating(memory, "memory")
        check_ndim(memory, "memory", 3, "(batch, S, num_hiddens)")
        if memory.shape[2] != self.config.num_hiddens:
            raise ValueError(f"memory must have shape (batch, S, {self.config.num_hiddens}), got {tuple(memory.shape)}")
        mask = _src_mask(src_valid_lens, memory, "memory")
        return self.decoder.init_state(memory, mask)

    def decode_step(self, tokens: torch.Tensor,
                    state: TransformerDecoderState) -> tuple[torch.Tensor, TransformerDecoderState]:
        """Feed one token per sequence and get the logits of the next one.

        Args:
            tokens: (B, 1) the previous token of each sequence (``<bos>`` first).
            state: from :meth:`init_decoder_state` or the previous call; left unchanged.

        Returns:
            logits (B, V), equal to the last row of ``forward`` on the whole prefix, and the new state.

        Examples:
            >>> model = Transformer(TransformerConfig(10, 12, num_hiddens=8, ffn_num_hiddens=16, num_heads=2)).eval()
            >>> src, src_valid_lens = torch.tensor([[4, 5, 2], [6, 2, 0]]), torch.tensor([3, 2])
            >>> state = model.init_decoder_state(model.encode(src, src_valid_lens), src_valid_lens)
            >>> for token in ([1], [7]):  # <bos>, then one target token
            ...     logits, state = model.decode_step(torch.tensor([token, token]), state)
            >>> full = model(src, src_valid_lens, torch.tensor([[1, 7], [1, 7]]))  # teacher forcing, (B, T, V)
            >>> logits.shape, torch.allclose(logits, full[:, -1], atol=1e-5)
            (torch.Size([2, 12]), True)
        """
        check_tokens(tokens, "tokens", "(batch, 1)", self.config.tgt_vocab_size)
        if not isinstance(state, TransformerDecoderState):
            raise TypeError(f"state must be a TransformerDecoderState, got {type(state).__name__}")
        if tokens.shape != (state.batch_size, 1):
            raise ValueError(f"tokens must have shape ({state.batch_size}, 1) (one token per sequence in the "
                             f"state), got {tuple(tokens.shape)}")
        self._check_length(state.offset + 1, "the decoded sequence")
        logits, state = self.decoder.step(tokens, state)
        return logits[:, -1], state

    def reorder_state(self, state: TransformerDecoderState, index: torch.Tensor) -> TransformerDecoderState:
        """Select / reorder / repeat batch rows: row ``i`` of the new state is old row ``index[i]``.

        Args:
            state: a decoder state (left unchanged).
            index: (B',) integer indices in ``[0, B)``.
        """
        return state.index_select(check_batch_index(index, state.batch_size, state.memory_mask.device))

    def _check_length(self, length: int, what: str) -> None:
        if length > self.config.max_len:
            raise ValueError(f"{what} has {length} positions but the model covers max_len = {self.config.max_len}; "
                             f"build it with a larger TransformerConfig.max_len")
