r"""Today's decoder-only language model: RMSNorm, SwiGLU, rotary grouped-query attention (chapter 11).

The block of Llama (Touvron et al. 2023) and most models since is chapter 7's pre-norm decoder block
without cross-attention, with three parts replaced:

.. math:: \mathbf H = \mathbf X + \operatorname{MHA}_{\text{RoPE}}(\operatorname{RMSNorm}(\mathbf X)),\qquad
   \mathbf Y = \mathbf H + \operatorname{SwiGLU}(\operatorname{RMSNorm}(\mathbf H)),

- **RMSNorm** (Zhang & Sennrich 2019) instead of LayerNorm: no centring and no bias,
  :math:`\mathbf x / \sqrt{\operatorname{mean}(\mathbf x^2) + \varepsilon} \odot \mathbf g`;
- **SwiGLU** (Shazeer 2020) instead of the ReLU MLP: a gated unit with three matrices whose hidden size
  :math:`\approx 8d/3` keeps the parameter count of a :math:`4d` two-matrix MLP;
- **rotary positions** inside attention (:class:`~course_lib.attention.kernels.rotary.RotaryEmbedding`) instead
  of a vector added to the embeddings, and **grouped-query attention** (``num_kv_heads``, chapter 10).

For the comparison of position encodings (chapter 11.1) the configuration also offers ALiBi's biases
(``positional="alibi"``), no positions at all (``"none"``: a causal model can still infer them), and
chapter 6's absolute positions added to the token embeddings (``"sinusoidal"``, ``"learned"``).

:class:`DecoderLM` stacks the blocks between a token embedding and a final RMSNorm and linear layer to
the vocabulary (tied to the embedding or not); :meth:`DecoderLM.from_hf_llama` copies the weights of a
Hugging Face ``LlamaForCausalLM`` (tested equal). Shapes: ``B`` batch, ``T`` tokens, ``d`` =
``num_hiddens``, ``V`` vocabulary size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn

from .._validation import (
    check_batch_index,
    check_bool,
    check_even,
    check_heads,
    check_last_axis,
    check_non_negative_int,
    check_positive_int,
    check_probability,
    check_real,
    check_tokens,
)
from ..attention.cache import Cache, KVCache
from ..attention.contract import AttentionKernel
from ..attention.kernels.alibi import ALiBiKernel
from ..attention.kernels.rotary import RotaryEmbedding, _check_rope_scaling
from ..attention.multihead import MultiHeadAttention
from ..attention.registry import attention_kernel, check_kernel_fields
from ..decoding.generation import generate
from .hf_llama import read_hf_llama
from .positional import LearnedPositionalEmbedding, PositionalEncoding

__all__ = ["DecoderLM", "DecoderLMBlock", "DecoderLMConfig", "DecoderLMState", "RMSNorm", "SwiGLU",
           "swiglu_hidden_size"]

_POSITIONAL = ("rotary", "alibi", "none", "sinusoidal", "learned")
# The standard deviation of the initial embeddings and matrices (GPT-2's); the absolute positions start at it.
_INIT_STD = 0.02


class RMSNorm(nn.Module):
    r"""Root-mean-square normalisation of the last axis, with a learned gain (Zhang & Sennrich 2019).

    .. math:: \operatorname{RMSNorm}(\mathbf x) = \frac{\mathbf x}{\sqrt{\frac1d\sum_i x_i^2 + \varepsilon}}
       \odot \mathbf g

    LayerNorm without the mean subtraction and the bias: cheaper, and as good in practice. Equal to
    ``torch.nn.RMSNorm(num_hiddens, eps=eps)`` (tested). Half-precision inputs are normalised in
    float32 (as Hugging Face's Llama does): in float16, :math:`x^2` overflows once :math:`|x| > 256`.

    Args:
        num_hiddens: d, the size of the normalised (last) axis.
        eps: :math:`\varepsilon` (Llama's default, 1e-6).

    Examples:
        >>> norm = RMSNorm(2)
        >>> norm(torch.tensor([[3.0, 4.0]])).detach()  # divided by sqrt((9 + 16) / 2)
        tensor([[0.8485, 1.1314]])
    """

    def __init__(self, num_hiddens: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.num_hiddens = check_positive_int(num_hiddens, "num_hiddens")
        self.eps = check_real(eps, "eps", greater_than=0.0)
        self.weight = nn.Parameter(torch.ones(num_hiddens))

    def extra_repr(self) -> str:
        return f"{self.num_hiddens}, eps={self.eps:g}"

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """Args: X: (..., num_hiddens). Returns: (..., num_hiddens), typed like ``X``."""
        check_last_axis(X, "X", self.num_hiddens)
        return self.compute(X)

    def compute(self, X: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` without the argument check (a model's blocks call it on checked inputs)."""
        if X.dtype in (torch.float16, torch.bfloat16):
            x = X.float()
            return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)).to(X.dtype) * self.weight
        if torch.is_grad_enabled() and (X.requires_grad or self.weight.requires_grad):
            return _RMSNormFunction.apply(X, self.weight, self.eps)  # training: the gradient in five passes
        return nn.functional.rms_norm(X, (self.num_hiddens,), self.weight, self.eps)


class _RMSNormFunction(torch.autograd.Function):
    r"""RMSNorm with its gradient written out: five passes over the activations where autograd, going back
    through ``rms_norm``'s power, mean, root and two products, takes about ten.

    With :math:`\hat{\mathbf x} = r\mathbf x`, :math:`r = (\frac1d\sum_i x_i^2 + \varepsilon)^{-1/2}` and
    :math:`\mathbf y = \hat{\mathbf x}\odot\mathbf g`, the gradients of a loss with :math:`\bar{\mathbf y} =
    \partial L/\partial\mathbf y` are :math:`\bar{\mathbf g} = \sum_{\text{rows}} \bar{\mathbf y}\odot\hat{\mathbf x}`
    and :math:`\bar{\mathbf x} = r\,(\mathbf u - \hat{\mathbf x}\,\tfrac1d\langle\mathbf u, \hat{\mathbf x}\rangle)`,
    :math:`\mathbf u = \bar{\mathbf y}\odot\mathbf g` (tested with gradcheck and against autograd's).
    """

    @staticmethod
    def forward(ctx, X: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        # (..., 1): the mean square from one reduction (vector_norm), without a tensor of squares
        r = torch.linalg.vector_norm(X, dim=-1, keepdim=True).square_().div_(X.shape[-1]).add_(eps).rsqrt_()
        normed = X * r
        ctx.save_for_backward(normed, r, weight)
        return normed * weight

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        normed, r, weight = ctx.saved_tensors
        p = grad * normed  # (..., d)
        grad_weight = p.flatten(0, -2).sum(0) if ctx.needs_input_grad[1] else None
        grad_x = None
        if ctx.needs_input_grad[0]:  # <u, normed> / d = (p @ g) / d: a matrix-vector product, no new tensor
            mean = (p @ weight).unsqueeze(-1).div_(normed.shape[-1])
            grad_x = torch.addcmul(grad * weight, normed, mean, value=-1.0).mul_(r)
        return grad_x, grad_weight, None


def swiglu_hidden_size(num_hiddens: int, multiple_of: int = 32) -> int:
    r"""SwiGLU's hidden size as Llama chooses it: :math:`\lfloor 8d/3\rfloor` rounded up to a multiple.

    A SwiGLU layer has three d x h matrices where the ReLU MLP has two d x 4d ones; h = 8d/3 keeps the
    parameter count (:math:`3 \cdot 8d^2/3 = 2 \cdot 4d^2`). Rounding up to ``multiple_of`` gives sizes
    that tile well on accelerators (Llama uses 256).

    Args:
        num_hiddens: d.
        multiple_of: the hidden size is a multiple of it.

    Returns:
        ``multiple_of * ceil(floor(8 d / 3) / multiple_of)``

    Examples:
        >>> swiglu_hidden_size(4096, multiple_of=256)  # Llama 7B's 11008
        11008
        >>> swiglu_hidden_size(48, multiple_of=32)  # floor(128) = 128
        128
    """
    num_hiddens = check_positive_int(num_hiddens, "num_hiddens")
    multiple_of = check_positive_int(multiple_of, "multiple_of")
    hidden = 8 * num_hiddens // 3
    return multiple_of * -(-hidden // multiple_of)


class SwiGLU(nn.Module):
    r"""The gated feed-forward layer of Llama: :math:`\mathbf W_{down}(\operatorname{SiLU}(\mathbf W_{gate}\mathbf x)
    \odot \mathbf W_{up}\mathbf x)` (Shazeer 2020).

    :math:`\operatorname{SiLU}(z) = z\,\sigma(z)` (also called Swish). One projection, through the
    SiLU, gates the other elementwise; no biases, as in Llama.

    Args:
        num_hiddens: d, the size of inputs and outputs.
        ffn_num_hiddens: the hidden size h; ``None`` takes :func:`swiglu_hidden_size`.
        multiple_of: the rounding of :func:`swiglu_hidden_size` when ``ffn_num_hiddens`` is ``None``.

    Examples:
        >>> ffn = SwiGLU(48)
        >>> ffn.W_gate, ffn.W_down
        (Linear(in_features=48, out_features=128, bias=False), Linear(in_features=128, out_features=48, bias=False))
        >>> ffn(torch.randn(2, 5, 48)).shape
        torch.Size([2, 5, 48])
    """

    def __init__(self, num_hiddens: int, ffn_num_hiddens: int | None = None, *, multiple_of: int = 32) -> None:
        super().__init__()
        check_positive_int(num_hiddens, "num_hiddens")
        hidden = swiglu_hidden_size(num_hiddens, multiple_of) if ffn_num_hiddens is None else \
            check_positive_int(ffn_num_hiddens, "ffn_num_hiddens")
        self.W_gate = nn.Linear(num_hiddens, hidden, bias=False)
        self.W_up = nn.Linear(num_hiddens, hidden, bias=False)
        self.W_down = nn.Linear(hidden, num_hiddens, bias=False)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """Args: X: (..., num_hiddens). Returns: (..., num_hiddens)."""
        check_last_axis(X, "X", self.W_gate.in_features)
        return self.compute(X)

    def compute(self, X: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` without the argument check (a model's blocks call it on checked inputs)."""
        # Two products (measured faster than one with the stacked weights, in training and in a decoding step).
        gate, up = nn.functional.linear(X, self.W_gate.weight), nn.functional.linear(X, self.W_up.weight)
        return nn.functional.linear(nn.functional.silu(gate) * up, self.W_down.weight)


class DecoderLMBlock(nn.Module):
    """One pre-norm decoder-only block: causal self-attention, then SwiGLU, each after an RMSNorm, with residuals.

    Args:
        num_hiddens: d.
        num_heads: query heads; must divide d.
        ffn_num_hiddens: SwiGLU's hidden size (``None``: :func:`swiglu_hidden_size` of d).
        num_kv_heads: key/value heads (grouped-query attention); must divide ``num_heads``.
        kernel: the attention kernel or its name (ALiBi's positions enter there).
        rope_base: RoPE's base: the new queries and keys are rotated before the cache
            (:class:`~course_lib.RotaryEmbedding`, as Llama); ``None``: no rotation in the block.
        rope_scaling: ``None`` or a RoPE scaling for longer contexts (:func:`~course_lib.rope_scaling_parameters`),
            with ``rope_base`` only.
        norm_eps: the RMSNorms' epsilon.
        dropout: on the attention weights and on each sublayer's output (training mode only).

    Examples:
        >>> block = DecoderLMBlock(32, num_heads=4, num_kv_heads=2)
        >>> block(torch.randn(2, 7, 32)).shape
        torch.Size([2, 7, 32])
    """

    def __init__(self, num_hiddens: int, num_heads: int, ffn_num_hiddens: int | None = None, *,
                 num_kv_heads: int | None = None, kernel: str | AttentionKernel = "fused",
                 rope_base: float | None = 10000.0, rope_scaling: dict | None = None, norm_eps: float = 1e-6,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.norm1 = RMSNorm(num_hiddens, norm_eps)
        check_positive_int(num_heads, "num_heads")
        if rope_base is None and rope_scaling is not None:
            raise ValueError("rope_scaling scales rotary positions, but rope_base=None (no rotation in the block)")
        rotary = None if rope_base is None else RotaryEmbedding(num_hiddens // num_heads, rope_base,
                                                                scaling=rope_scaling)
        self.attention = MultiHeadAttention(num_hiddens, num_heads, dropout, bias=False, num_kv_heads=num_kv_heads,
                                            kernel=kernel, rotary=rotary)
        self.norm2 = RMSNorm(num_hiddens, norm_eps)
        self.ffn = SwiGLU(num_hiddens, ffn_num_hiddens)
        self.dropout = nn.Dropout(dropout)

    @classmethod
    def from_config(cls, config: DecoderLMConfig) -> DecoderLMBlock:
        """A block of a :class:`DecoderLM` of this config: its fields passed down by name, the kernel with its
        positions (:meth:`DecoderLMConfig.attention_kernel`).

        Examples:
            >>> config = DecoderLMConfig(vocab_size=50, num_hiddens=32, positional="alibi", kernel="flash")
            >>> DecoderLMBlock.from_config(config).attention.kernel
            ALiBiKernel(FlashKernel(block_q=128, block_k=128))
            >>> DecoderLMBlock.from_config(DecoderLMConfig(vocab_size=50)).attention.rotary
            RotaryEmbedding(32, base=10000)
        """
        return cls(config.num_hiddens, config.num_heads, config.ffn_num_hiddens or swiglu_hidden_size(
            config.num_hiddens, config.multiple_of), num_kv_heads=config.kv_heads, kernel=config.attention_kernel(),
            rope_base=config.rope_base if config.positional == "rotary" else None,
            rope_scaling=config.rope_scaling if config.positional == "rotary" else None, norm_eps=config.norm_eps,
            dropout=config.dropout)

    def forward(self, X: torch.Tensor, mask: torch.Tensor | None = None, *,
                kv_cache: Cache | None = None) -> torch.Tensor:
        """Run the block on new positions, attending to themselves and to the cached earlier ones.

        Args:
            X: (B, T, d) the previous block's output (or the embeddings).
            mask: optional bool keep-mask of the keys, ``True`` = attend, as
                :class:`~course_lib.attention.multihead.MultiHeadAttention` takes it; and-ed with the causal mask.
            kv_cache: optional :class:`~course_lib.attention.cache.Cache` of this block; the new keys (rotated,
                with RoPE) and values are appended to it.

        Returns:
            (B, T, d); position ``t`` depends on the positions up to ``t`` only.
        """
        check_last_axis(X, "X", self.norm1.num_hiddens)
        return self.compute(X, mask, kv_cache=kv_cache)

    def compute(self, X: torch.Tensor, mask: torch.Tensor | None = None, *,
                kv_cache: Cache | None = None) -> torch.Tensor:
        """:meth:`forward` for checked inputs: the sublayers' own checks skipped (the model checked its tokens)."""
        Z = self.norm1.compute(X)
        X = X + self._dropout(self.attention.compute(Z, Z, Z, mask, causal=True, kv_cache=kv_cache))
        return X + self._dropout(self.ffn.compute(self.norm2.compute(X)))

    def _dropout(self, X: torch.Tensor) -> torch.Tensor:
        return self.dropout(X) if self.training and self.dropout.p > 0 else X


@dataclass(frozen=True)
class DecoderLMConfig:
    """Hyperparameters of a :class:`DecoderLM` (what a checkpoint stores to rebuild it).

    Args:
        vocab_size: V.
        num_hiddens: d; divisible by ``num_heads``.
        num_heads: query heads.
        num_kv_heads: key/value heads (grouped-query attention; 1 is multi-query); ``None`` means
            ``num_heads``; must divide ``num_heads``.
        num_layers: blocks.
        ffn_num_hiddens: SwiGLU's hidden size; ``None`` takes :func:`swiglu_hidden_size` (d, ``multiple_of``).
        multiple_of: the rounding of that default (Llama uses 256).
        positional: how the model knows positions: inside attention, ``"rotary"`` (RoPE, as Llama) or
            ``"alibi"`` (linear biases); ``"none"`` (a causal model can still infer them); or a vector added
            to each token's embedding, chapter 6's ``"sinusoidal"`` table or ``"learned"`` vectors. The
            added vectors start at the scale of the embeddings: the sinusoids are multiplied by 0.02·√2
            (each feature's root mean square, 1/√2, becomes the 0.02 standard deviation of the initial
            embeddings) and the learned vectors are drawn from N(0, 0.02²), as GPT-2's.
        max_len: the positions an added encoding covers (``"sinusoidal"``, ``"learned"``); longer inputs are
            refused. Rotary, ALiBi and no positions have no such limit.
        rope_base: the base of the rotary frequencies (Llama 2: 10000; Llama 3: 500000).
        rope_scaling: ``None``, or a RoPE scaling for contexts longer than the training one, a dict of plain
            values named as Hugging Face's ``rope_parameters`` (``{"rope_type": "yarn", "factor": 4.0,
            "original_max_position_embeddings": 512}``; the types and their fields:
            :func:`~course_lib.rope_scaling_parameters`); rotary positions only.
        norm_eps: the RMSNorms' epsilon.
        dropout: one rate for the attention weights, the sublayer outputs and the embeddings.
        tie_embeddings: the output layer reuses the embedding matrix (GPT-2 and small models do; Llama
            7B does not).
        kernel: the attention kernel by name (:func:`course_lib.kernel_names`); ``"rotary"`` and ``"alibi"``
            positions wrap it.
        kernel_options: its options, plain values (``{"block_q": 64}`` for ``"flash"``).

    Raises:
        ValueError or TypeError naming the field: a size that is not a positive int, heads that do not
        divide, an odd head size with rotary positions, an unknown ``positional``, ...

    Examples:
        >>> config = DecoderLMConfig(vocab_size=1000, num_hiddens=96, num_heads=6, num_kv_heads=2)
        >>> config.head_size, config.kv_heads, swiglu_hidden_size(config.num_hiddens, config.multiple_of)
        (16, 2, 256)
        >>> DecoderLMConfig(vocab_size=1000, num_hiddens=96, num_heads=6, num_kv_heads=4)
        Traceback (most recent call last):
        ...
        ValueError: num_kv_heads (4) must divide num_heads (6): ...
    """

    vocab_size: int
    num_hiddens: int = 128
    num_heads: int = 4
    num_kv_heads: int | None = None
    num_layers: int = 2
    ffn_num_hiddens: int | None = None
    multiple_of: int = 32
    positional: Literal["rotary", "alibi", "none", "sinusoidal", "learned"] = "rotary"
    rope_base: float = 10000.0
    rope_scaling: dict | None = None
    norm_eps: float = 1e-6
    dropout: float = 0.0
    tie_embeddings: bool = False
    max_len: int = 2048
    kernel: str = "fused"
    kernel_options: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "num_hiddens", "num_heads", "num_layers", "multiple_of", "max_len"):
            check_positive_int(getattr(self, name), name)
        for name in ("num_kv_heads", "ffn_num_hiddens"):
            if getattr(self, name) is not None:
                check_positive_int(getattr(self, name), name)
        check_heads(self.num_hiddens, self.num_heads, self.kv_heads)
        if self.positional not in _POSITIONAL:
            raise ValueError(f"positional must be one of {_POSITIONAL}, got {self.positional!r}")
        if self.positional == "rotary":
            check_even(self.head_size, f"the head size num_hiddens / num_heads = {self.num_hiddens} / {self.num_heads}",
                       "rotary positions turn pairs of features")
        check_real(self.rope_base, "rope_base", greater_than=1.0)
        if self.rope_scaling is not None:
            _check_rope_scaling(self.rope_scaling, "rope_scaling")
            if self.positional != "rotary":
                raise ValueError(f"rope_scaling scales rotary positions, but positional={self.positional!r}")
            object.__setattr__(self, "rope_scaling", dict(self.rope_scaling))  # a copy: the config is frozen
        check_real(self.norm_eps, "norm_eps", greater_than=0.0)
        check_probability(self.dropout, "dropout")
        check_bool(self.tie_embeddings, "tie_embeddings")
        check_kernel_fields(self.kernel, self.kernel_options)

    def attention_kernel(self) -> AttentionKernel:
        """The blocks' kernel: ``kernel`` (with ``kernel_options``), wrapped by ALiBi for those positions (RoPE
        rotates the queries and keys before the kernel and the cache: :class:`~course_lib.RotaryEmbedding`).

        Examples:
            >>> DecoderLMConfig(10).attention_kernel(), DecoderLMConfig(10, positional="alibi").attention_kernel()
            (fused_kernel, ALiBiKernel(fused_kernel))
        """
        inner = attention_kernel(self.kernel, **self.kernel_options)
        if self.positional == "alibi":
            return ALiBiKernel(inner)
        return inner

    @property
    def kv_heads(self) -> int:
        """``num_kv_heads``, or ``num_heads`` when it is ``None``."""
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def head_size(self) -> int:
        """d_h = num_hiddens / num_heads."""
        return self.num_hiddens // self.num_heads


@dataclass
class DecoderLMState:
    """What incremental decoding carries from one step to the next: one key/value cache per block.

    Attributes:
        caches: one :class:`~course_lib.attention.multihead.KVCache` per block, holding (B, num_kv_heads, t, d_h)
            unrotated keys and values of the ``t`` tokens fed so far.

    Examples:
        >>> model = DecoderLM(DecoderLMConfig(vocab_size=20, num_hiddens=16, num_heads=4, num_kv_heads=1)).eval()
        >>> logits, state = model.step(torch.tensor([[1, 5, 7]]))  # the prompt, at once
        >>> logits, state = model.step(torch.tensor([[3]]), state)  # then one token at a time
        >>> len(state), state.batch_size, state.caches[0].keys.shape  # (B, num_kv_heads, t, d_h)
        (4, 1, torch.Size([1, 1, 4, 4]))
        >>> torch.allclose(logits[:, -1], model(torch.tensor([[1, 5, 7, 3]]))[:, -1], atol=1e-6)
        True
    """

    caches: list[KVCache]

    def __len__(self) -> int:
        """t, the number of tokens fed so far."""
        return len(self.caches[0]) if self.caches else 0

    @property
    def batch_size(self) -> int | None:
        """B, or ``None`` before the first step."""
        keys = self.caches[0].keys if self.caches else None
        return None if keys is None else keys.shape[0]

    def copy(self) -> DecoderLMState:
        """A state whose caches can grow without touching this one's (the tensors are shared, not copied)."""
        return DecoderLMState([cache.copy() for cache in self.caches])

    def crop(self, length: int) -> DecoderLMState:
        """Forget every token after the first ``length``, in place (speculative decoding's rejected drafts).

        Examples:
            >>> model = DecoderLM(DecoderLMConfig(vocab_size=20, num_hiddens=16, num_heads=4)).eval()
            >>> _, state = model.step(torch.tensor([[1, 5, 7, 3]]))
            >>> len(state.crop(2)), torch.allclose(model.step(torch.tensor([[9]]), state)[0][:, 0],
            ...                                    model(torch.tensor([[1, 5, 9]]))[:, 2], atol=1e-5)
            (2, True)
        """
        for cache in self.caches:
            cache.crop(length)
        return self

    def index_select(self, index: torch.Tensor) -> DecoderLMState:
        """A state with the batch rows ``index`` (B',): reordered, dropped or repeated (beam search)."""
        index = check_batch_index(index, self.batch_size)
        return DecoderLMState([cache.copy().reorder(index) for cache in self.caches])


class DecoderLM(nn.Module):
    """A decoder-only language model in the Llama architecture: embedding, pre-norm blocks, RMSNorm, output layer.

    :meth:`forward` gives the next-token logits at every position (training); :meth:`step` feeds new
    tokens against a key/value cache per block (:class:`DecoderLMState`); :meth:`generate` continues
    prompts greedily or by sampling; :meth:`from_hf_llama` copies a Hugging Face Llama.

    Weights are drawn as in GPT-2 and nanoGPT: every matrix from N(0, 0.02²), the two matrices that
    write into the residual stream of each block (``W_o`` and ``W_down``) scaled down by
    :math:`\\sqrt{2L}` so that the stream's variance does not grow with depth; RMSNorm gains are ones.
    With ``positional="sinusoidal"`` or ``"learned"`` a position vector (``positions``, chapter 6's module)
    is added to each token's embedding, at the embeddings' scale (:class:`DecoderLMConfig`).
    No dropout is applied in evaluation mode: call ``model.eval()`` before :meth:`generate`.

    Args:
        config: a :class:`DecoderLMConfig`.

    Examples:
        >>> model = DecoderLM(DecoderLMConfig(vocab_size=20, num_hiddens=16, num_heads=4, num_kv_heads=2)).eval()
        >>> tokens = torch.tensor([[1, 5, 7]])
        >>> model(tokens).shape  # (B, T, V): the logits of the next token at every position
        torch.Size([1, 3, 20])
        >>> out = model.generate(tokens, 4, temperature=0.0)  # greedy, with the key/value cache
        >>> out.shape, torch.equal(out[:, :3], tokens)
        (torch.Size([1, 7]), True)
    """

    def __init__(self, config: DecoderLMConfig) -> None:
        super().__init__()
        if not isinstance(config, DecoderLMConfig):
            raise TypeError(f"config must be a DecoderLMConfig, got {type(config).__name__}")
        self.config = c = config
        self.embedding = nn.Embedding(c.vocab_size, c.num_hiddens)
        self.positions = _added_positions(c)  # None: the positions act inside attention, or not at all
        self.dropout = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(DecoderLMBlock.from_config(c) for _ in range(c.num_layers))
        self.norm = RMSNorm(c.num_hiddens, c.norm_eps)
        self.lm_head = nn.Linear(c.num_hiddens, c.vocab_size, bias=False)
        self._init_weights()
        if c.tie_embeddings:
            self.lm_head.weight = self.embedding.weight

    def _init_weights(self) -> None:
        std = _INIT_STD
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=std)
        if isinstance(self.positions, LearnedPositionalEmbedding):
            nn.init.normal_(self.positions.P, std=std)
        for block in self.blocks:
            for residual_writer in (block.attention.W_o, block.ffn.W_down):
                nn.init.normal_(residual_writer.weight, std=std / math.sqrt(2 * self.config.num_layers))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """The logits of the next token at every position (teacher forcing).

        Args:
            tokens: (B, T) token ids in ``[0, vocab_size)``, ``torch.long``.

        Returns:
            (B, T, V); row ``t`` depends on ``tokens[:, :t + 1]`` only.
        """
        self._check_tokens(tokens, "tokens")
        return self._run(tokens, None)

    def step(self, tokens: torch.Tensor, state: DecoderLMState | None = None
             ) -> tuple[torch.Tensor, DecoderLMState]:
        """Feed the next token(s) and get their logits, attending to the cached earlier ones.

        Args:
            tokens: (B, T_new) ids of the positions ``len(state) .. len(state) + T_new - 1``.
            state: from the previous call; ``None`` to start. Left unchanged.

        Returns:
            logits (B, T_new, V), equal to those rows of :meth:`forward` on the whole sequence (except with
            ``"dynamic"`` RoPE scaling past the training context, where each key keeps the rotation of the
            step that cached it, as in Hugging Face), and the new state.

        Examples:
            >>> model = DecoderLM(DecoderLMConfig(vocab_size=20, num_hiddens=16, num_heads=4)).eval()
            >>> tokens = torch.tensor([[1, 5, 7, 2]])
            >>> _, state = model.step(tokens[:, :3])  # the prompt, in one call
            >>> logits, state = model.step(tokens[:, 3:], state)  # then one token
            >>> logits.shape, len(state), torch.allclose(logits[:, 0], model(tokens)[:, 3], atol=1e-5)
            (torch.Size([1, 1, 20]), 4, True)
        """
        self._check_tokens(tokens, "tokens")
        if state is None:
            state = self.init_state()
        if not isinstance(state, DecoderLMState) or len(state.caches) != len(self.blocks):
            raise TypeError(f"state must be the DecoderLMState of a previous step (or None), got "
                            f"{type(state).__name__}")
        if state.batch_size is not None and state.batch_size != tokens.shape[0]:
            raise ValueError(f"tokens of shape {tuple(tokens.shape)} continue a state of batch size "
                             f"{state.batch_size}; reorder the state with state.index_select")
        state = state.copy()
        return self._run(tokens, state.caches), state

    def init_state(self) -> DecoderLMState:
        """The state before the first token: an empty cache per block."""
        return DecoderLMState([KVCache() for _ in self.blocks])

    @property
    def vocab_size(self) -> int:
        """V, the vocabulary size (``config.vocab_size``)."""
        return self.config.vocab_size

    def step_(self, tokens: torch.Tensor, state: DecoderLMState) -> torch.Tensor:
        """:meth:`step` in place: feed the next token(s), appending their keys and values to ``state``.

        What a decoding loop calls (:func:`course_lib.decoding.generation.generate`): no copy of the state, and
        the tokens' values are not checked again (their shape is).

        Args:
            tokens: (B, T_new) ids of the positions ``len(state) .. len(state) + T_new - 1``.
            state: a :class:`DecoderLMState` of this model, changed in place.

        Returns:
            (B, T_new, V) logits.

        Examples:
            >>> model = DecoderLM(DecoderLMConfig(vocab_size=20, num_hiddens=16, num_heads=4)).eval()
            >>> state = model.init_state()
            >>> logits = model.step_(torch.tensor([[1, 5, 7]]), state)
            >>> logits.shape, len(state)
            (torch.Size([1, 3, 20]), 3)
        """
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
            raise ValueError(f"tokens must be a (batch, T_new) tensor, got {getattr(tokens, 'shape', tokens)}")
        return self._run(tokens, state.caches)

    def _run(self, tokens: torch.Tensor, caches: list[KVCache] | None) -> torch.Tensor:
        """The stack itself, for checked tokens; appends to ``caches`` when given."""
        X = nn.functional.embedding(tokens, self.embedding.weight)  # (B, T, d)
        if self.positions is not None:
            offset = len(caches[0]) if caches else 0  # the position of tokens[:, 0]
            self._check_max_len(offset + tokens.shape[1])
            X = self.positions(X, offset)
        if self.training and self.dropout.p > 0:
            X = self.dropout(X)
        for i, block in enumerate(self.blocks):
            X = block.compute(X, kv_cache=None if caches is None else caches[i])
        return nn.functional.linear(self.norm.compute(X), self.lm_head.weight)  # (B, T, V)

    def _check_max_len(self, length: int) -> None:
        if self.positions is not None and length > self.config.max_len:
            raise ValueError(f"the {self.config.positional} positions of this model cover {self.config.max_len} "
                             f"tokens (DecoderLMConfig.max_len), got a sequence of {length}")

    def _check_tokens(self, tokens: object, name: str) -> None:
        check_tokens(tokens, name, "(batch, T)", self.config.vocab_size)
        if tokens.shape[1] == 0:
            raise ValueError(f"{name} must hold at least one token, got shape {tuple(tokens.shape)}")

    @torch.no_grad()
    def generate(self, tokens: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None, generator: torch.Generator | None = None,
                 eos_id: int | None = None) -> torch.Tensor:
        r"""Continue each sequence token by token, with a key/value cache (:mod:`course_lib.decoding.generation`).

        Greedy (``temperature=0``) or sampled from :math:`\operatorname{softmax}(\mathbf z / \tau)` over the
        ``top_k`` largest logits and within the nucleus of mass ``top_p``. Args and returns: as
        :func:`course_lib.decoding.generation.generate` with this model; the prompt and its continuation must
        fit ``config.max_len`` when positions are added vectors.

        Examples:
            >>> model = DecoderLM(DecoderLMConfig(vocab_size=20, num_hiddens=16, num_heads=4)).eval()
            >>> prompts = torch.tensor([[1, 5], [1, 6]])
            >>> draw = lambda: model.generate(prompts, 5, top_k=5, generator=torch.Generator().manual_seed(0))
            >>> draw().shape, torch.equal(draw(), draw())  # (B, T + 5); the same generator seed, the same text
            (torch.Size([2, 7]), True)
        """
        self._check_tokens(tokens, "tokens")
        check_non_negative_int(max_new_tokens, "max_new_tokens")
        self._check_max_len(tokens.shape[1] + max_new_tokens - 1)  # the last new token is never fed back
        return generate(self, tokens, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                        generator=generator, eos_id=eos_id)

    @classmethod
    def from_hf_llama(cls, model: nn.Module) -> DecoderLM:
        """A :class:`DecoderLM` with the configuration and a copy of the weights of a Hugging Face Llama.

        The configuration and the weights are read by :func:`course_lib.models.hf_llama.read_hf_llama`;
        ``forward(tokens)`` then returns the logits of ``model(tokens).logits``, and the model is on the
        device and in the dtype of ``model``'s parameters. ``course_lib`` does not import ``transformers``.

        Args:
            model: a ``transformers.LlamaForCausalLM``.

        Returns:
            a :class:`DecoderLM` in evaluation mode.

        Examples:
            >>> from transformers import LlamaConfig, LlamaForCausalLM  # test/book dependency only
            >>> hf = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64,
            ...     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)).eval()
            >>> model = DecoderLM.from_hf_llama(hf)
            >>> model.config.kv_heads, model.config.rope_base, model.config.ffn_num_hiddens
            (2, 10000.0, 64)
            >>> tokens = torch.tensor([[3, 1, 4, 1, 5]])
            >>> torch.allclose(model(tokens), hf(tokens).logits, atol=1e-5)
            True
        """
        fields, weights = read_hf_llama(model)
        parameter = next(model.parameters())
        lm = cls(DecoderLMConfig(**fields)).to(device=parameter.device, dtype=parameter.dtype)
        lm.load_state_dict(weights)
        return lm.eval()


def _added_positions(config: DecoderLMConfig) -> PositionalEncoding | LearnedPositionalEmbedding | None:
    """Chapter 6's position vectors for ``"sinusoidal"`` and ``"learned"``, at the embeddings' scale; else None.

    Chapter 7 scaled the embeddings up by sqrt(d) to meet sinusoids of amplitude 1; here the embeddings keep
    GPT-2's N(0, 0.02²) (the same in every variant) and the positions come down to them.
    """
    if config.positional == "sinusoidal":
        table = PositionalEncoding(config.num_hiddens, 0.0, config.max_len)
        table.P.mul_(_INIT_STD * math.sqrt(2))  # each feature's RMS 1/sqrt(2) -> 0.02 (a fixed buffer)
        return table
    if config.positional == "learned":
        return LearnedPositionalEmbedding(config.num_hiddens, 0.0, config.max_len)  # drawn in _init_weights
    return None
