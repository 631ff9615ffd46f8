r"""GRU encoder--decoders for sequence to sequence learning, with and without Bahdanau attention.

The baseline the Transformer is compared with (chapter on Bahdanau attention, :cite:`bahdanau2015`).
A GRU encoder reads the source; the decoder predicts one target token per step.

- :class:`Seq2SeqRNN` squeezes the whole source into one fixed vector: the encoder's last hidden
  state is the decoder's initial state and is concatenated to every decoder input (the bottleneck).
- :class:`BahdanauSeq2Seq` lets the decoder look back at every encoder output. At step
  :math:`t'` the previous decoder hidden state :math:`\mathbf s_{t'-1}` is the query of additive
  attention over the encoder outputs :math:`\mathbf h_t` (keys and values):

  .. math:: \mathbf c_{t'} = \sum_{t=1}^{T} \alpha(\mathbf s_{t'-1}, \mathbf h_t)\, \mathbf h_t ,

  and :math:`[\mathbf c_{t'}; \mathbf e(y_{t'-1})]` is the GRU's input.

Both implement the seq2seq protocol that :mod:`course_lib.decoding.search` and :mod:`course_lib.training.train` rely
on: ``forward`` (teacher forcing), ``encode``, ``init_decoder_state``, ``decode_step`` and
``reorder_state``. Shapes: ``B`` batch, ``S`` source length, ``T`` target length, ``E`` embedding
size, ``H`` hidden size, ``L`` layers, ``V`` target vocabulary size.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .._validation import (
    as_lengths,
    check_batch_index,
    check_pad_id,
    check_positive_int,
    check_probability,
    check_tokens,
)
from ..attention.masks import padding_mask
from ..attention.scoring import AdditiveAttention

__all__ = [
    "Seq2SeqRNNConfig",
    "RNNDecoderState",
    "RNNEncoder",
    "Seq2SeqDecoder",
    "BahdanauDecoder",
    "Seq2SeqRNN",
    "BahdanauSeq2Seq",
]


@dataclass(frozen=True)
class Seq2SeqRNNConfig:
    """Hyperparameters of a GRU encoder--decoder (what a checkpoint stores to rebuild the model).

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes (special tokens included).
        embed_size: E, size of the token embeddings.
        hidden_size: H, size of the GRU hidden states (and of the attention's hidden layer).
        num_layers: L, stacked GRU layers in the encoder and in the decoder.
        dropout: dropout between GRU layers and on the attention weights.
        pad_id: id of ``<pad>`` (its embedding gets no gradient).

    Examples:
        >>> Seq2SeqRNNConfig(10, 12, embed_size=4, hidden_size=6)
        Seq2SeqRNNConfig(src_vocab_size=10, tgt_vocab_size=12, embed_size=4, hidden_size=6, num_layers=2, dropout=0.1,
                         pad_id=0)
        >>> Seq2SeqRNNConfig(10, 12, dropout=1.5)
        Traceback (most recent call last):
        ...
        ValueError: dropout must be in [0, 1), got 1.5
    """

    src_vocab_size: int
    tgt_vocab_size: int
    embed_size: int = 32
    hidden_size: int = 64
    num_layers: int = 2
    dropout: float = 0.1
    pad_id: int = 0

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "embed_size", "hidden_size", "num_layers"):
            check_positive_int(getattr(self, name), name)
        check_probability(self.dropout, "dropout")
        check_pad_id(self.pad_id, self.src_vocab_size, self.tgt_vocab_size)


@dataclass
class RNNDecoderState:
    """What the decoder carries from one step to the next (opaque to callers).

    Attributes:
        hidden: (L, B, H) decoder hidden state, initialised with the encoder's last one.
        enc_outputs: (B, S, H) encoder outputs, the attention's keys and values.
        src_mask: (B, 1, S) bool keep-mask of the real source positions (the attention's keys).
        context: (B, H) the encoder's last top-layer state, the fixed context of :class:`Seq2SeqRNN`.

    Examples:
        >>> model = BahdanauSeq2Seq(Seq2SeqRNNConfig(10, 12, embed_size=4, hidden_size=6, num_layers=2))
        >>> src, src_valid_lens = torch.tensor([[4, 5, 2], [6, 2, 0]]), torch.tensor([3, 2])
        >>> state = model.init_decoder_state(model.encode(src, src_valid_lens), src_valid_lens)
        >>> state.hidden.shape, state.enc_outputs.shape, state.context.shape  # (L, B, H), (B, S, H), (B, H)
        (torch.Size([2, 2, 6]), torch.Size([2, 3, 6]), torch.Size([2, 6]))
        >>> state.src_mask  # (B, 1, S), True = a real source position
        tensor([[[ True,  True,  True]],
        <BLANKLINE>
                [[ True,  True, False]]])
    """

    hidden: torch.Tensor
    enc_outputs: torch.Tensor
    src_mask: torch.Tensor
    context: torch.Tensor

    def index_select(self, index: torch.Tensor) -> RNNDecoderState:
        """Keep (and reorder) the batch rows in ``index`` (B',).

        Examples:
            >>> model = Seq2SeqRNN(Seq2SeqRNNConfig(10, 12, embed_size=4, hidden_size=6, num_layers=2))
            >>> src, src_valid_lens = torch.tensor([[4, 5, 2], [6, 2, 0]]), torch.tensor([3, 2])
            >>> state = model.init_decoder_state(model.encode(src, src_valid_lens), src_valid_lens)
            >>> state.index_select(torch.tensor([1, 1, 0])).hidden.shape  # (L, B', H)
            torch.Size([2, 3, 6])
        """
        return RNNDecoderState(
            hidden=self.hidden.index_select(1, index),
            enc_outputs=self.enc_outputs.index_select(0, index),
            src_mask=self.src_mask.index_select(0, index),
            context=self.context.index_select(0, index),
        )


def _gru(input_size: int, config: Seq2SeqRNNConfig) -> nn.GRU:
    # nn.GRU warns when asked for dropout with one layer: dropout only acts between layers.
    dropout = config.dropout if config.num_layers > 1 else 0.0
    return nn.GRU(input_size, config.hidden_size, config.num_layers, dropout=dropout, batch_first=True)


class RNNEncoder(nn.Module):
    """Embedding + multilayer GRU over the source; padding never enters the recurrence.

    Args:
        config: the model's :class:`Seq2SeqRNNConfig`.

    Examples:
        >>> encoder = RNNEncoder(Seq2SeqRNNConfig(10, 12, embed_size=4, hidden_size=6, num_layers=2))
        >>> outputs, hidden = encoder(torch.tensor([[4, 5, 2], [6, 2, 0]]), torch.tensor([3, 2]))
        >>> outputs.shape, hidden.shape  # (B, S, H) and (L, B, H)
        (torch.Size([2, 3, 6]), torch.Size([2, 2, 6]))
        >>> bool(outputs[1, 2].eq(0).all())  # the padded position of the second source
        True
    """

    def __init__(self, config: Seq2SeqRNNConfig) -> None:
        super().__init__()
        self.embedding = nn.Embedding(config.src_vocab_size, config.embed_size, padding_idx=config.pad_id)
        self.rnn = _gru(config.embed_size, config)

    def forward(self, src: torch.Tensor, src_valid_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode a padded batch.

        Args:
            src: (B, S) token ids.
            src_valid_lens: (B,) lengths; positions ``>= src_valid_lens`` are padding.

        Returns:
            ``outputs`` (B, S, H), zero at padded positions, and ``hidden`` (L, B, H), the state after
            each sequence's last real token.
        """
        S = src.shape[1]
        emb = self.embedding(src)  # (B, S, E)
        # Packing makes the final state the one after the last *real* token, so the encoding of a
        # sentence does not depend on how much padding its batch needed. An empty source is read
        # as its first (padding) token: packing needs length >= 1, and attention masks it anyway.
        lengths = src_valid_lens.clamp(min=1).cpu()
        packed = pack_padded_sequence(emb, lengths, batch_first=True, enforce_sorted=False)
        outputs, hidden = self.rnn(packed)
        outputs, _ = pad_packed_sequence(outputs, batch_first=True, total_length=S)  # (B, S, H)
        return outputs, hidden


class Seq2SeqDecoder(nn.Module):
    """GRU decoder without attention: the fixed context is concatenated to every input embedding.

    Args:
        config: the model's :class:`Seq2SeqRNNConfig`.

    Examples:
        >>> model = Seq2SeqRNN(Seq2SeqRNNConfig(10, 12, embed_size=4, hidden_size=6, num_layers=2))
        >>> src, src_valid_lens = torch.tensor([[4, 5, 2], [6, 2, 0]]), torch.tensor([3, 2])
        >>> state = model.init_decoder_state(model.encode(src, src_valid_lens), src_valid_lens)
        >>> logits, state = model.decoder(torch.tensor([[1, 7, 8, 9], [1, 7, 0, 0]]), state)
        >>> logits.shape  # (B, T, V)
        torch.Size([2, 4, 12])
    """

    def __init__(self, config: Seq2SeqRNNConfig) -> None:
        super().__init__()
        self.embedding = nn.Embedding(config.tgt_vocab_size, config.embed_size, padding_idx=config.pad_id)
        self.rnn = _gru(config.embed_size + config.hidden_size, config)
        self.dense = nn.Linear(config.hidden_size, config.tgt_vocab_size)

    def forward(self, tgt_in: torch.Tensor, state: RNNDecoderState) -> tuple[torch.Tensor, RNNDecoderState]:
        """Run the decoder over ``tgt_in`` (B, T) in one call; returns logits (B, T, V) and the new state.

        Examples:
            See :class:`Seq2SeqDecoder`.
        """
        emb = self.embedding(tgt_in)  # (B, T, E)
        context = state.context.unsqueeze(1).expand(-1, emb.shape[1], -1)  # (B, T, H)
        x = torch.cat([emb, context.to(emb.dtype)], dim=-1)  # (B, T, E + H)
        outputs, hidden = self.rnn(x, state.hidden)
        return self.dense(outputs), dataclasses.replace(state, hidden=hidden)


class BahdanauDecoder(nn.Module):
    """GRU decoder whose input at each step is ``[attention context; embedding of the previous token]``.

    The query is the previous decoder hidden state (top layer), the keys and values are the encoder
    outputs. While :func:`course_lib.recording_attention` is on, the weights of every step are
    appended to ``self.step_weights``, a list of (B, 1, S) tensors that
    :meth:`BahdanauSeq2Seq.init_decoder_state` (and so every forward) resets;
    :meth:`stacked_attention_weights` returns them as one (B, T, S) tensor for a heatmap.

    Args:
        config: the model's :class:`Seq2SeqRNNConfig`.

    Examples:
        >>> model = BahdanauSeq2Seq(Seq2SeqRNNConfig(10, 12, embed_size=4, hidden_size=6, num_layers=2))
        >>> src, src_valid_lens = torch.tensor([[4, 5, 2], [6, 2, 0]]), torch.tensor([3, 2])
        >>> state = model.init_decoder_state(model.encode(src, src_valid_lens), src_valid_lens)
        >>> with recording_attention(model):
        ...     logits, state = model.decoder(torch.tensor([[1, 7, 8, 9], [1, 7, 0, 0]]), state)
        >>> logits.shape, len(model.decoder.step_weights), model.decoder.step_weights[0].shape
        (torch.Size([2, 4, 12]), 4, torch.Size([2, 1, 3]))
    """

    def __init__(self, config: Seq2SeqRNNConfig) -> None:
        super().__init__()
        H = config.hidden_size
        self.attention = AdditiveAttention(H, config.dropout, query_size=H, key_size=H)
        self.embedding = nn.Embedding(config.tgt_vocab_size, config.embed_size, padding_idx=config.pad_id)
        self.rnn = _gru(config.embed_size + H, config)
        self.dense = nn.Linear(H, config.tgt_vocab_size)
        self.step_weights: list[torch.Tensor] = []

    def step(self, emb: torch.Tensor, state: RNNDecoderState) -> tuple[torch.Tensor, RNNDecoderState]:
        """One decoder step from the embedding ``emb`` (B, E) of the previous token.

        Returns:
            logits (B, V) and the new state.

        Examples:
            >>> model = BahdanauSeq2Seq(Seq2SeqRNNConfig(10, 12, embed_size=4, hidden_size=6, num_layers=2))
            >>> src, src_valid_lens = torch.tensor([[4, 5, 2], [6, 2, 0]]), torch.tensor([3, 2])
            >>> state = model.init_decoder_state(model.encode(src, src_valid_lens), src_valid_lens)
            >>> logits, state = model.decoder.step(torch.zeros(2, 4), state)  # emb: (B, E)
            >>> logits.shape  # (B, V)
            torch.Size([2, 12])
        """
        query = state.hidden[-1].unsqueeze(1)  # (B, 1, H)
        keys = state.enc_outputs.to(query.dtype)
        context = self.attention(query, keys, keys, state.src_mask)  # (B, 1, H)
        if self.attention.record_weights:
            self.step_weights.append(self.attention.attention_weights)
        x = torch.cat([context.to(emb.dtype), emb.unsqueeze(1)], dim=-1)  # (B, 1, H + E)
        output, hidden = self.rnn(x, state.hidden)
        return self.dense(output.squeeze(1)), dataclasses.replace(state, hidden=hidden)

    def forward(self, tgt_in: torch.Tensor, state: RNNDecoderState) -> tuple[torch.Tensor, RNNDecoderState]:
        """Teacher forcing over ``tgt_in`` (B, T); returns logits (B, T, V) and the final state.

        Examples:
            See :class:`BahdanauDecoder`.
        """
        emb = self.embedding(tgt_in)  # (B, T, E)
        logits = []
        # The attention query depends on the previous hidden state, so the steps are sequential.
        for t in range(emb.shape[1]):
            step_logits, state = self.step(emb[:, t], state)
            logits.append(step_logits)
        return torch.stack(logits, dim=1), state  # (B, T, V)

    def stacked_attention_weights(self) -> torch.Tensor | None:
        """The weights of the steps since the last reset, (B, T, S); ``None`` before any step.

        Examples:
            See :class:`BahdanauSeq2Seq`.
        """
        return torch.cat(self.step_weights, dim=1) if self.step_weights else None


class _RNNSeq2SeqBase(nn.Module):
    """The seq2seq protocol shared by both GRU models; subclasses choose the decoder."""

    decoder: Seq2SeqDecoder | BahdanauDecoder

    def __init__(self, config: Seq2SeqRNNConfig) -> None:
        super().__init__()
        if not isinstance(config, Seq2SeqRNNConfig):
            raise TypeError(f"config must be a Seq2SeqRNNConfig, got {type(config).__name__}")
        self.config = config
        self.encoder = RNNEncoder(config)

    def forward(self, src: torch.Tensor, src_valid_lens: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: the logits of every next target token.

        Args:
            src: (B, S) source ids.
            src_valid_lens: (B,) source lengths.
            tgt_in: (B, T) decoder inputs, ``<bos> y_1 ... y_{T-1}``.

        Returns:
            (B, T, V) logits; row ``t`` predicts ``y_{t+1}`` (``<eos>`` after the last token).

        Examples:
            >>> model = Seq2SeqRNN(Seq2SeqRNNConfig(10, 12, embed_size=4, hidden_size=6, num_layers=2))
            >>> src, src_valid_lens = torch.tensor([[4, 5, 2], [6, 2, 0]]), torch.tensor([3, 2])
            >>> model(src, src_valid_lens, torch.tensor([[1, 7, 8, 9], [1, 7, 0, 0]])).shape  # (B, T, V)
            torch.Size([2, 4, 12])
        """
        check_tokens(tgt_in, "tgt_in", "(batch, T)", self.config.tgt_vocab_size)
        if isinstance(src, torch.Tensor) and src.dim() == 2 and tgt_in.shape[0] != src.shape[0]:
            raise ValueError(
                f"src and tgt_in must have the same batch size, got shapes {tuple(src.shape)} and "
                f"{tuple(tgt_in.shape)}"
            )
        lens = self._src_lens(src, src_valid_lens)  # the lengths are checked once per call
        memory = self.encoder(src, lens)
        logits, _ = self.decoder(tgt_in, self._initial_state(memory, lens))
        return logits

    def encode(self, src: torch.Tensor, src_valid_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode the source; returns the opaque memory ``(outputs (B, S, H), hidden (L, B, H))``.

        Examples:
            >>> model = Seq2SeqRNN(Seq2SeqRNNConfig(10, 12, embed_size=4, hidden_size=6, num_layers=2))
            >>> outputs, hidden = model.encode(torch.tensor([[4, 5, 2], [6, 2, 0]]), torch.tensor([3, 2]))
            >>> outputs.shape, hidden.shape
            (torch.Size([2, 3, 6]), torch.Size([2, 2, 6]))
        """
        return self.encoder(src, self._src_lens(src, src_valid_lens))

    def init_decoder_state(self, memory: tuple[torch.Tensor, torch.Tensor],
                           src_valid_lens: torch.Tensor) -> RNNDecoderState:
        """The decoder state before the first step (also resets the kept attention weights).

        Examples:
            See :class:`RNNDecoderState`.
        """
        outputs = memory[0]
        lens = as_lengths(src_valid_lens, "src_valid_lens", max_len=outputs.shape[1], shape=(outputs.shape[0],),
                          what=f"encoder outputs of shape {tuple(outputs.shape)}")
        return self._initial_state(memory, lens)

    def _src_lens(self, src: torch.Tensor, src_valid_lens: object) -> torch.Tensor:
        check_tokens(src, "src", "(batch, S)", self.config.src_vocab_size)
        return as_lengths(src_valid_lens, "src_valid_lens", max_len=src.shape[1], shape=(src.shape[0],),
                          what=f"src of shape {tuple(src.shape)}")

    def _initial_state(self, memory: tuple[torch.Tensor, torch.Tensor], lens: torch.Tensor) -> RNNDecoderState:
        """Padding enters here, once: the lengths become the keep-mask of the source positions."""
        outputs, hidden = memory
        if isinstance(self.decoder, BahdanauDecoder):
            self.decoder.step_weights = []
        src_mask = padding_mask(lens.to(outputs.device), outputs.shape[1])  # (B, 1, S)
        return RNNDecoderState(hidden=hidden, enc_outputs=outputs, src_mask=src_mask, context=hidden[-1])

    def decode_step(self, tokens: torch.Tensor, state: RNNDecoderState) -> tuple[torch.Tensor, RNNDecoderState]:
        """Feed one token per sequence and get the logits of the next one.

        Args:
            tokens: (B, 1) the previous token of each sequence (``<bos>`` first).
            state: from :meth:`init_decoder_state` or the previous call.

        Returns:
            logits (B, V) and the new state (the old one is left unchanged).

        Examples:
            >>> model = Seq2SeqRNN(Seq2SeqRNNConfig(10, 12, embed_size=4, hidden_size=6, num_layers=2)).eval()
            >>> src, src_valid_lens = torch.tensor([[4, 5, 2], [6, 2, 0]]), torch.tensor([3, 2])
            >>> state = model.init_decoder_state(model.encode(src, src_valid_lens), src_valid_lens)
            >>> logits, state = model.decode_step(torch.tensor([[1], [1]]), state)
            >>> logits.shape  # (B, V)
            torch.Size([2, 12])
            >>> tgt_in = torch.tensor([[1, 7], [1, 7]])  # the same first step as teacher forcing
            >>> torch.allclose(logits, model(src, src_valid_lens, tgt_in)[:, 0], atol=1e-6)
            True
        """
        check_tokens(tokens, "tokens", "(batch, 1)", self.config.tgt_vocab_size)
        if tokens.shape != (state.hidden.shape[1], 1):
            raise ValueError(
                f"tokens must have shape ({state.hidden.shape[1]}, 1) (one token per sequence in the "
                f"state), got {tuple(tokens.shape)}"
            )
        logits, state = self.decoder(tokens, state)
        return logits[:, -1], state

    def reorder_state(self, state: RNNDecoderState, index: torch.Tensor) -> RNNDecoderState:
        """Select / reorder / repeat the batch rows of ``state``: row ``i`` becomes old row ``index[i]``.

        Examples:
            >>> model = Seq2SeqRNN(Seq2SeqRNNConfig(10, 12, embed_size=4, hidden_size=6, num_layers=2))
            >>> src, src_valid_lens = torch.tensor([[4, 5, 2], [6, 2, 0]]), torch.tensor([3, 2])
            >>> state = model.init_decoder_state(model.encode(src, src_valid_lens), src_valid_lens)
            >>> beams = model.reorder_state(state, torch.tensor([0, 0, 1, 1]))  # two beams per sentence
            >>> beams.enc_outputs.shape, torch.equal(beams.hidden[:, 1], state.hidden[:, 0])
            (torch.Size([4, 3, 6]), True)
        """
        return state.index_select(check_batch_index(index, state.hidden.shape[1], state.hidden.device))


class Seq2SeqRNN(_RNNSeq2SeqBase):
    """GRU encoder--decoder without attention (the fixed-context bottleneck).

    Args:
        config: a :class:`Seq2SeqRNNConfig`.

    Examples:
        >>> model = Seq2SeqRNN(Seq2SeqRNNConfig(10, 12, embed_size=4, hidden_size=6, num_layers=2))
        >>> src, src_valid_lens = torch.tensor([[4, 5, 2], [6, 2, 0]]), torch.tensor([3, 2])
        >>> model(src, src_valid_lens, torch.tensor([[1, 7, 8, 9], [1, 7, 0, 0]])).shape  # (B, T, V)
        torch.Size([2, 4, 12])
        >>> isinstance(model, Seq2SeqModel)  # so train_seq2seq and the decoders accept it
        True
    """

    def __init__(self, config: Seq2SeqRNNConfig) -> None:
        super().__init__(config)
        self.decoder = Seq2SeqDecoder(config)


class BahdanauSeq2Seq(_RNNSeq2SeqBase):
    """GRU encoder--decoder with Bahdanau (additive) attention over the encoder outputs.

    After a forward or a decoding run inside ``with course_lib.recording_attention(model):``,
    ``model.decoder.step_weights`` holds one (B, 1, S) tensor per step
    (``model.decoder.stacked_attention_weights()`` gives (B, T, S)); in beam search the rows follow
    the beams of each step.

    Args:
        config: a :class:`Seq2SeqRNNConfig`.

    Examples:
        >>> model = BahdanauSeq2Seq(Seq2SeqRNNConfig(10, 12, embed_size=4, hidden_size=6, num_layers=2))
        >>> src, src_valid_lens = torch.tensor([[4, 5, 2], [6, 2, 0]]), torch.tensor([3, 2])
        >>> with recording_attention(model):
        ...     logits = model(src, src_valid_lens, torch.tensor([[1, 7, 8, 9], [1, 7, 0, 0]]))
        >>> weights = model.decoder.stacked_attention_weights()
        >>> logits.shape, weights.shape  # (B, T, V) and (B, T, S)
        (torch.Size([2, 4, 12]), torch.Size([2, 4, 3]))
        >>> weights[1, :, 2]  # the second source's padding gets no weight
        tensor([0., 0., 0., 0.])
    """

    def __init__(self, config: Seq2SeqRNNConfig) -> None:
        super().__init__(config)
        self.decoder = BahdanauDecoder(config)
