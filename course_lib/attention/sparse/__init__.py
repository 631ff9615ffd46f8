r"""Sparse attention: factorized patterns that cost O(n sqrt n) instead of O(n^2) (chapter 9).

Full self-attention scores every query against every key: an :math:`n \times n` matrix per head,
O(n^2) time and memory. The Sparse Transformer :cite:`child2019` lets position :math:`i` attend only
to a set :math:`A_i` of about :math:`\sqrt n` positions, chosen so that every position still reaches
every other one in two steps (two layers, or two heads). With a stride :math:`\ell` (about
:math:`\sqrt n`), and positions counted from 0:

- **strided**: :math:`A_i = \{j : |i - j| < \ell\} \cup \{j : (i - j) \bmod \ell = 0\}`, the previous
  :math:`\ell` positions (a local band) and every :math:`\ell`-th position (a "column");
- **fixed**: :math:`A_i = \{j : \lfloor j/\ell \rfloor = \lfloor i/\ell \rfloor\} \cup
  \{j : j \bmod \ell \ge \ell - c\}`, the block of length :math:`\ell` that holds :math:`i` and the
  last :math:`c` positions ("summary" cells) of every block;

and the causal (autoregressive) variants keep only :math:`j \le i`. ``strided_pattern`` and
``fixed_pattern`` return these sets as boolean (n, n) masks, ``True`` = attend (the convention of
``torch.nn.functional.scaled_dot_product_attention`` and of all of ``course_lib``).

``strided_attention`` and ``fixed_attention`` compute softmax attention restricted to a pattern
**without building the n x n matrix**: the sequence is cut into ``ceil(n / stride)`` blocks of
``stride`` positions, and each query's allowed keys are split into disjoint groups that are dense
inside a block layout:

- strided: the band, in the query's own block and the previous one (the next one too when not
  causal), and the column (the same offset inside every other block, a transpose of the block layout);
- fixed: the query's own block and the summary cells of the other blocks (a gather of ``c`` keys
  per block).

Each group is scored separately and the softmax over their union is assembled from per-group row
maxima, row sums and partial outputs (as FlashAttention :cite:`dao2022` merges its tiles), so the
result equals dense attention with the pattern mask (tested, values and gradients). With ``stride``
about :math:`\sqrt n` every query scores about :math:`3\sqrt n` keys: O(n sqrt n) time and memory.

Shapes: ``B`` batch, ``H`` heads, ``n`` sequence length, ``d`` key size, ``d_v`` value size.

The package is split by concern: ``patterns`` (the rules and their masks), ``dense`` (the dense
baselines), ``blockwise`` (the computation without the n x n matrix, and :class:`SparseKernel`, the
kernel a :class:`~course_lib.attention.multihead.MultiHeadAttention` takes), ``module``
(``SparseMultiHeadAttention``, that module with that kernel)
and ``memory`` (``peak_memory``).
"""

from .blockwise import SparseKernel, fixed_attention, strided_attention
from .dense import dense_attention, fused_attention
from .memory import peak_memory
from .module import SparseMultiHeadAttention
from .patterns import PATTERNS, default_stride, fixed_mod, fixed_pattern, pattern_mod, strided_mod, strided_pattern

__all__ = [
    "PATTERNS",
    "SparseKernel",
    "SparseMultiHeadAttention",
    "default_stride",
    "dense_attention",
    "fixed_attention",
    "fixed_mod",
    "fixed_pattern",
    "fused_attention",
    "pattern_mod",
    "peak_memory",
    "strided_attention",
    "strided_mod",
    "strided_pattern",
]
