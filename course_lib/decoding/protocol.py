"""The seq2seq model protocol that :mod:`course_lib.training.train` and :mod:`course_lib.decoding.search` rely on.

Any model with these five methods can be trained by :func:`course_lib.train_seq2seq` and decoded by
:func:`course_lib.greedy_decode`, :func:`course_lib.beam_search` and :func:`course_lib.translate`:
:class:`course_lib.Transformer`, :class:`course_lib.BahdanauSeq2Seq`, :class:`course_lib.Seq2SeqRNN`, and
the small fakes of the tests. ``memory`` and ``state`` are opaque to the callers: only the model
reads them.

Shapes: ``B`` batch, ``S`` source length, ``T`` target length, ``V`` target vocabulary size.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = ["Seq2SeqModel", "check_seq2seq_model"]


@runtime_checkable
class Seq2SeqModel(Protocol):
    """What training and decoding need from a sequence-to-sequence model.

    Examples:
        >>> import course_lib as cl
        >>> model = cl.Transformer(cl.TransformerConfig(10, 12, num_hiddens=8, ffn_num_hiddens=16, num_heads=2))
        >>> isinstance(model, cl.Seq2SeqModel)
        True
    """

    def __call__(self, src: torch.Tensor, src_valid_lens: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: (B, S) ids, (B,) lengths, (B, T) decoder inputs -> (B, T, V) logits."""
        ...

    def encode(self, src: torch.Tensor, src_valid_lens: torch.Tensor) -> Any:
        """(B, S) ids and (B,) lengths -> the memory, whatever the decoder needs of the source."""
        ...

    def init_decoder_state(self, memory: Any, src_valid_lens: torch.Tensor) -> Any:
        """The decoder state before the first token."""
        ...

    def decode_step(self, tokens: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """(B, 1) previous tokens -> (B, V) logits of the next ones and the new state (the old one unchanged)."""
        ...

    def reorder_state(self, state: Any, index: torch.Tensor) -> Any:
        """Row ``i`` of the new state is row ``index[i]`` of ``state``; ``index`` is (B',) (beam search)."""
        ...

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]:
        """As ``nn.Module.parameters`` (where the model lives, what the optimiser trains)."""
        ...


_METHODS = ("__call__", "encode", "init_decoder_state", "decode_step", "reorder_state", "parameters")


def check_seq2seq_model(model: object, name: str = "model", methods: tuple[str, ...] = _METHODS) -> Seq2SeqModel:
    """Raise ``TypeError`` naming the missing ones unless ``model`` has the protocol's ``methods`` (default: all).

    A caller asks only for what it uses: greedy decoding never reorders a state.
    """
    missing = [m for m in methods if not callable(getattr(model, m, None))]
    if missing:
        raise TypeError(f"{name} must be a seq2seq model (see course_lib.decoding.protocol.Seq2SeqModel); a "
                        f"{type(model).__name__} lacks {', '.join(missing)}")
    return model  # type: ignore[return-value]
