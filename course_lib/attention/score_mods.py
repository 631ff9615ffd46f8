r"""Score modifiers: what is added to a score before the softmax, as one kind of object (chapter 11).

A mask says whether a query may see a key (:class:`~course_lib.attention.masks.MaskMod`); a score
modifier says how much to add to the score it gets. FlexAttention keeps the two hooks apart
(``mask_mod`` and ``score_mod``); here the modifier is a rule ``bias(b, h, q_pos, kv_pos)`` giving the
amount added to the scaled score :math:`\mathbf q\cdot\mathbf k/\sqrt d` of batch row ``b``, head ``h``,
query position ``q_pos`` and key position ``kv_pos`` (positions aligned bottom-right, as every mask of
the library):

.. math:: \operatorname{softmax}_j\big(\mathbf q_i\cdot\mathbf k_j/\sqrt d + \operatorname{bias}(b, h, i, j)\big).

ALiBi's distance penalty (:func:`course_lib.attention.kernels.alibi.alibi_mod`), T5's relative biases
and document masks with soft penalties are such rules. Because the modifier is an addition, every
softmax kernel can apply it (:mod:`course_lib.attention.contract`): the explicit kernel adds it to the
score matrix, the fused one hands it to ``scaled_dot_product_attention`` as a float mask, the tiled one
adds it tile by tile; and ``flex_attention`` takes it as ``score + bias`` (:meth:`ScoreMod.flex`).
Modifiers that are not additions (soft-capping, :math:`c\tanh(s/c)`) need a kernel that sees each
score; none of the library's does.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .masks import query_offset, query_positions, rule_inputs

__all__ = ["ScoreMod"]

BiasRule = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class ScoreMod:
    """An additive score modifier: ``bias(b, h, q_pos, kv_pos)``, added to the scaled scores before the softmax.

    Args:
        bias: a function of four integer tensors that broadcast against each other (batch row, head, query
            position, key position), returning a float tensor of their broadcast shape; written with
            tensor operations only, so that it also runs under FlexAttention.
        name: what ``repr`` shows.

    Examples:
        >>> distance = ScoreMod(lambda b, h, q, kv: 0.0 - (q - kv).abs().double(), "distance")
        >>> distance.materialize(2, 3)  # the queries sit at key positions 1 and 2
        tensor([[-1.,  0., -1.],
                [-2., -1.,  0.]], dtype=torch.float64)
        >>> (distance + distance).materialize(1, 3)
        tensor([[-4., -2.,  0.]], dtype=torch.float64)
    """

    def __init__(self, bias: BiasRule, name: str = "score_mod") -> None:
        if not callable(bias):
            raise TypeError(f"bias must be callable, got {type(bias).__name__}")
        self.bias = bias
        self.name = name

    def __repr__(self) -> str:
        return f"ScoreMod({self.name})"

    def __add__(self, other: ScoreMod) -> ScoreMod:
        if not isinstance(other, ScoreMod):
            raise TypeError(f"the right operand of + must be a ScoreMod, got {type(other).__name__}")
        return ScoreMod(lambda b, h, q, kv: self.bias(b, h, q, kv) + other.bias(b, h, q, kv),
                        f"{self.name} + {other.name}")

    def evaluate(self, lead: tuple[int, ...], q_pos: torch.Tensor, kv_pos: torch.Tensor,
                 dtype: torch.dtype | None = None) -> torch.Tensor:
        """The bias at the given positions, for scores (*lead, len(q_pos), len(kv_pos)); cast to ``dtype`` if given.

        Examples:
            >>> ScoreMod(lambda b, h, q, kv: (h + 0.5) * (kv - q)).evaluate((1, 2), torch.tensor([1]),
            ...                                                            torch.arange(2))[0, :, 0]
            tensor([[-0.5000,  0.0000],
                    [-1.5000,  0.0000]])
        """
        bias = self.bias(*rule_inputs(lead, q_pos, kv_pos))
        return bias if dtype is None else bias.to(dtype)

    def materialize(self, n_queries: int, n_keys: int, *, batch: int | None = None, heads: int | None = None,
                    dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> torch.Tensor:
        """The whole bias: (n_queries, n_keys), or (batch or 1, heads or 1, n_queries, n_keys) with ``batch``/``heads``.

        Examples:
            >>> ScoreMod(lambda b, h, q, kv: 1.0 * h).materialize(1, 2, heads=2).flatten().tolist()
            [0.0, 0.0, 1.0, 1.0]
        """
        lead = (batch or 1, heads or 1)
        bias = self.evaluate(lead, query_positions(n_queries, n_keys, device), torch.arange(n_keys, device=device),
                             dtype)
        bias = bias.broadcast_to(torch.broadcast_shapes(bias.shape, (1, 1, n_queries, n_keys)))
        return bias[0, 0] if batch is None and heads is None else bias

    def flex(self, n_queries: int, n_keys: int) -> Callable[..., torch.Tensor]:
        """The modifier as a ``score_mod`` for ``torch.nn.attention.flex_attention`` (queries indexed from 0).

        Examples:
            >>> score_mod = ScoreMod(lambda b, h, q, kv: 0.0 - (q - kv)).flex(1, 3)
            >>> score_mod(torch.zeros(()), 0, 0, torch.tensor(0), torch.arange(3))  # query 0 sits at key 2
            tensor([-2., -1.,  0.])
        """
        offset = query_offset(n_queries, n_keys)
        return lambda score, b, h, q_idx, kv_idx: score + self.bias(b, h, q_idx + offset, kv_idx)
