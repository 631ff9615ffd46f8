r"""Decoding a trained seq2seq model: greedy search, beam search and a ``translate`` helper.

Everything here talks to the model through the seq2seq protocol only (``encode``,
``init_decoder_state``, ``decode_step``, ``reorder_state``, and the teacher-forcing ``forward`` for
the uncached reference), so it works for :class:`~course_lib.models.rnn.BahdanauSeq2Seq` and for the
Transformer alike.

A sequence's score is the sum of the log-probabilities of its tokens, ``<eos>`` included:

.. math:: \log P(y \mid x) = \sum_{t=1}^{|y|} \log P(y_t \mid y_{<t}, x).

Beam search divides it by a length penalty before comparing hypotheses of different lengths,
GNMT's :math:`\mathrm{lp}(y) = ((5 + |y|)/6)^\alpha` or D2L's :math:`|y|^\alpha`; :math:`\alpha = 0`
turns normalisation off. Returned sequences never contain ``<bos>`` nor the final ``<eos>``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from .._validation import as_lengths, check_choice, check_positive_int, check_tokens
from ..utils import model_device
from .protocol import Seq2SeqModel, check_seq2seq_model

__all__ = ["greedy_decode", "beam_search", "decode_batch", "translate", "sequence_log_prob", "default_max_len"]


@contextlib.contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """Switch dropout off while decoding and restore the caller's mode afterwards."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


_GREEDY = ("__call__", "encode", "init_decoder_state", "decode_step", "parameters")


def _check_src(model: Seq2SeqModel, src: object, src_valid_lens: object,
               methods: tuple[str, ...] = _GREEDY) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate the model (it has ``methods``) and a source batch; return the batch on the model's device."""
    check_seq2seq_model(model, methods=methods)
    src = check_tokens(src, "src", "(batch, S)")  # the model knows its vocabulary size
    lens = as_lengths(src_valid_lens, "src_valid_lens", max_len=src.shape[1], shape=(src.shape[0],),
                      what=f"src of shape {tuple(src.shape)}")
    device = model_device(model)
    return src.to(device), lens.to(device)


def _check_ids(max_len: object, bos: object, eos: object) -> None:
    check_positive_int(max_len, "max_len")
    for name, value in (("bos", bos), ("eos", eos)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative token id, got {value!r}")


def _trim(rows: list[list[int]], eos: int) -> list[list[int]]:
    """Cut each row at its first ``eos`` (excluded)."""
    return [row[:row.index(eos)] if eos in row else row for row in rows]


def default_max_len(model: nn.Module, src_valid_lens: torch.Tensor) -> int:
    """A generous decoding budget: twice the longest source plus 10, within the model's ``max_len``.

    Args:
        model: the seq2seq model (its ``config.max_len``, when it has one, caps the result).
        src_valid_lens: (B,) source lengths.

    Returns:
        The number of tokens to generate at most.

    Examples:
        >>> default_max_len(nn.Identity(), torch.tensor([3, 7, 5]))
        24
    """
    longest = int(src_valid_lens.max().item()) if src_valid_lens.numel() else 0
    limit = getattr(getattr(model, "config", None), "max_len", None)
    budget = 2 * longest + 10
    return min(budget, limit) if isinstance(limit, int) else budget


def greedy_decode(
    model: Seq2SeqModel,
    src: torch.Tensor,
    src_valid_lens: torch.Tensor,
    max_len: int,
    bos: int = 1,
    eos: int = 2,
    use_cache: bool = True,
) -> list[list[int]]:
    r"""Pick the most probable next token at every step, for a whole batch.

    Each sequence stops at its own ``<eos>``; decoding stops when all have
    (or after ``max_len`` tokens).
    :math:`\hat y_t = \arg\max_y P(y \mid \hat y_{<t}, x)`.

    Args:
        model: a seq2seq model (see :mod:`course_lib.models.rnn`); put in eval mode
            while decoding.
        src: (B, S) source ids.
        src_valid_lens: (B,) source lengths.
        max_len: the most tokens to generate per sequence, ``<eos>`` included.
        bos, eos: the ids of ``<bos>`` and ``<eos>``.
        use_cache: ``True`` feeds one token per step through ``decode_step``
            (incremental); ``False`` reruns the full teacher-forcing forward
            on the whole prefix every step (the slow reference the cached
            path must agree with).

    Returns:
        B lists of token ids, without ``<bos>`` and ``<eos>``.

    Examples:
        >>> config = TransformerConfig(10, 12, num_hiddens=8,
        ...                            ffn_num_hiddens=16, num_heads=2)
        >>> model = Transformer(config)
        >>> src = torch.tensor([[4, 5, 2], [6, 2, 0]])
        >>> lens = torch.tensor([3, 2])
        >>> out = greedy_decode(model, src, lens, max_len=5)
        >>> len(out), all(len(y) <= 5 and 2 not in y for y in out)
        (2, True)
        >>> out == greedy_decode(model, src, lens, 5, use_cache=False)
        True
    """
    src, src_valid_lens = _check_src(model, src, src_valid_lens)
    _check_ids(max_len, bos, eos)
    B = src.shape[0]
    device = src.device
    with _eval_mode(model):
        tokens = torch.full((B, 1), bos, dtype=torch.long, device=device)
        finished = torch.zeros(B, dtype=torch.bool, device=device)
        if use_cache:
            memory = model.encode(src, src_valid_lens)
            state = model.init_decoder_state(memory, src_valid_lens)
        for _ in range(max_len):
            if use_cache:
                logits, state = model.decode_step(tokens[:, -1:], state)
            else:
                logits = model(src, src_valid_lens, tokens)[:, -1]  # (B, V)
            next_token = logits.argmax(dim=-1)
            # A finished sequence keeps emitting eos; it is cut off below.
            next_token = next_token.masked_fill(finished, eos)
            # (B, t + 1)
            tokens = torch.cat([tokens, next_token[:, None]], dim=1)
            finished |= next_token == eos
            if bool(finished.all()):
                break
    return _trim(tokens[:, 1:].tolist(), eos)


def _length_penalty(lengths: torch.Tensor, alpha: float, length_norm: str) -> torch.Tensor:
    lengths = lengths.to(torch.float32)
    if length_norm == "gnmt":
        return ((5.0 + lengths) / 6.0) ** alpha
    return lengths.clamp(min=1.0) ** alpha


def beam_search(model: Seq2SeqModel, src: torch.Tensor, src_valid_lens: torch.Tensor, max_len: int,
                bos: int = 1, eos: int = 2, beam_size: int = 4, length_penalty: float = 0.6,
                length_norm: Literal["gnmt", "power"] = "gnmt") -> list[list[int]]:
    r"""Keep the ``beam_size`` best partial hypotheses of each sentence at every step.

    All sentences of the batch are searched together (B * beam_size rows through the decoder).
    Hypotheses are ranked by :math:`\log P(y \mid x) / \mathrm{lp}(y)`, with
    :math:`\mathrm{lp}(y) = ((5 + |y|)/6)^\alpha` for ``length_norm="gnmt"`` (Wu et al., 2016) or
    :math:`|y|^\alpha` for ``"power"`` (D2L); :math:`|y|` counts ``<eos>``. A hypothesis that has
    produced ``<eos>`` stays in the beam unchanged and keeps competing with the live ones. The
    search stops when every beam has finished or after ``max_len`` tokens. With ``beam_size=1`` it
    is greedy search; with a beam as wide as all hypotheses it is exhaustive search.

    Args:
        model: a seq2seq model; put in eval mode while decoding.
        src: (B, S) source ids.
        src_valid_lens: (B,) source lengths.
        max_len: the most tokens to generate per sequence, ``<eos>`` included.
        bos, eos: the ids of ``<bos>`` and ``<eos>``.
        beam_size: k, hypotheses kept per sentence.
        length_penalty: :math:`\alpha \ge 0`; 0 compares raw log-probabilities.
        length_norm: ``"gnmt"`` or ``"power"``.

    Returns:
        B lists of token ids (the best hypothesis of each sentence), without ``<bos>``/``<eos>``.

    Examples:
        >>> import course_lib as cl
        >>> _ = torch.manual_seed(0)
        >>> model = cl.Transformer(cl.TransformerConfig(10, 12, num_hiddens=16, ffn_num_hiddens=32, num_heads=2))
        >>> src, src_valid_lens = torch.tensor([[4, 5, 2], [6, 2, 0]]), torch.tensor([3, 2])
        >>> hyps = beam_search(model, src, src_valid_lens, max_len=5, beam_size=3)
        >>> len(hyps), all(len(h) <= 5 and 2 not in h for h in hyps)  # one hypothesis per source, eos cut off
        (2, True)
        >>> greedy = greedy_decode(model, src, src_valid_lens, max_len=5)
        >>> beam_search(model, src, src_valid_lens, max_len=5, beam_size=1) == greedy
        True
    """
    src, src_valid_lens = _check_src(model, src, src_valid_lens, (*_GREEDY, "reorder_state"))
    _check_ids(max_len, bos, eos)
    check_positive_int(beam_size, "beam_size")
    if isinstance(length_penalty, bool) or not isinstance(length_penalty, (int, float)) or length_penalty < 0:
        raise ValueError(f"length_penalty must be a number >= 0, got {length_penalty!r}")
    if length_norm not in ("gnmt", "power"):
        raise ValueError(f'length_norm must be "gnmt" or "power", got {length_norm!r}')
    B, K, device = src.shape[0], beam_size, src.device
    with _eval_mode(model):
        state = model.init_decoder_state(model.encode(src, src_valid_lens), src_valid_lens)
        state = model.reorder_state(state, torch.arange(B, device=device).repeat_interleave(K))
        # Only beam 0 is real at the start: the others would duplicate it.
        scores = torch.full((B, K), float("-inf"), device=device)
        scores[:, 0] = 0.0
        lengths = torch.zeros(B, K, dtype=torch.long, device=device)
        finished = torch.zeros(B, K, dtype=torch.bool, device=device)
        seqs = torch.zeros(B, K, 0, dtype=torch.long, device=device)
        last = torch.full((B * K, 1), bos, dtype=torch.long, device=device)
        offsets = torch.arange(B, device=device)[:, None] * K  # (B, 1)
        for t in range(max_len):
            logits, state = model.decode_step(last, state)
            V = logits.shape[-1]
            logp = F.log_softmax(logits.float(), dim=-1).view(B, K, V)
            # A finished hypothesis has one continuation, eos at no cost, so it appears exactly
            # once among the candidates with its score and length unchanged.
            frozen = torch.full_like(logp, float("-inf"))
            frozen[..., eos] = 0.0
            logp = torch.where(finished[..., None], frozen, logp)
            cand_scores = (scores[..., None] + logp).view(B, K * V)
            cand_lengths = torch.where(finished, lengths, lengths + 1)[..., None].expand(B, K, V).reshape(B, K * V)
            ranked = cand_scores / _length_penalty(cand_lengths, length_penalty, length_norm)
            top = ranked.topk(K, dim=-1).indices  # (B, K) over the K * V candidates
            beam, token = top // V, top % V
            scores, lengths = cand_scores.gather(1, top), cand_lengths.gather(1, top)
            finished = finished.gather(1, beam) | (token == eos)
            seqs = torch.cat([seqs.gather(1, beam[..., None].expand(-1, -1, t)), token[..., None]], dim=2)
            state = model.reorder_state(state, (beam + offsets).view(-1))
            last = token.view(B * K, 1)
            if bool(finished.all()):
                break
        best = (scores / _length_penalty(lengths, length_penalty, length_norm)).argmax(dim=1)  # (B,)
        best_seqs = seqs[torch.arange(B, device=device), best]  # (B, t)
    return _trim(best_seqs.tolist(), eos)


def sequence_log_prob(model: Seq2SeqModel, src: torch.Tensor, src_valid_lens: torch.Tensor,
                      targets: Sequence[Sequence[int]], bos: int = 1) -> torch.Tensor:
    r"""Score given target sequences by teacher forcing: :math:`\sum_t \log P(y_t \mid y_{<t}, x)`.

    Args:
        model: a seq2seq model.
        src: (B, S) source ids.
        src_valid_lens: (B,) source lengths.
        targets: B token-id lists, each scored in full (append ``eos`` yourself to score it).
        bos: the id of ``<bos>``.

    Returns:
        (B,) float tensor of log-probabilities (0 for an empty target).

    Examples:
        >>> model = Transformer(TransformerConfig(10, 12, num_hiddens=8, ffn_num_hiddens=16, num_heads=2))
        >>> src, src_valid_lens = torch.tensor([[4, 5, 2], [6, 2, 0]]), torch.tensor([3, 2])
        >>> log_p = sequence_log_prob(model, src, src_valid_lens, [[7, 8, 2], []])
        >>> log_p.shape, bool(log_p[0] < 0), log_p[1].item()
        (torch.Size([2]), True, 0.0)
    """
    src, src_valid_lens = _check_src(model, src, src_valid_lens, ("__call__", "parameters"))
    if len(targets) != src.shape[0]:
        raise ValueError(f"targets must hold one sequence per source ({src.shape[0]}), got {len(targets)}")
    T = max((len(t) for t in targets), default=0)
    out = torch.zeros(src.shape[0], device=src.device)
    if T == 0:
        return out
    y = torch.zeros(src.shape[0], T, dtype=torch.long, device=src.device)
    valid = torch.zeros(src.shape[0], T, dtype=torch.bool, device=src.device)
    for i, t in enumerate(targets):
        y[i, :len(t)] = torch.as_tensor(list(t), dtype=torch.long)
        valid[i, :len(t)] = True
    tgt_in = torch.cat([torch.full_like(y[:, :1], bos), y[:, :-1]], dim=1)
    with _eval_mode(model):
        logp = F.log_softmax(model(src, src_valid_lens, tgt_in).float(), dim=-1)  # (B, T, V)
    token_logp = logp.gather(2, y[..., None]).squeeze(-1)  # (B, T)
    return (token_logp * valid).sum(dim=1)


def decode_batch(model: Seq2SeqModel, src: torch.Tensor, src_valid_lens: torch.Tensor,
                 decoding: Literal["greedy", "beam"] = "greedy", *, max_len: int | None = None, bos: int = 1,
                 eos: int = 2, beam_size: int = 4, length_penalty: float = 0.6) -> list[list[int]]:
    """Decode a batch of sources with :func:`greedy_decode` or :func:`beam_search`.

    Args:
        model, src, src_valid_lens, bos, eos: as in :func:`greedy_decode`.
        decoding: ``"greedy"`` or ``"beam"``.
        max_len: tokens to generate at most; default :func:`default_max_len`.
        beam_size, length_penalty: for beam search (GNMT normalisation).

    Returns:
        B lists of token ids, without ``<bos>`` and ``<eos>``.

    Examples:
        >>> model = Transformer(TransformerConfig(10, 12, num_hiddens=8, ffn_num_hiddens=16, num_heads=2))
        >>> src, src_valid_lens = torch.tensor([[4, 5, 2], [6, 2, 0]]), torch.tensor([3, 2])
        >>> greedy = decode_batch(model, src, src_valid_lens)  # at most default_max_len(model, src_valid_lens) = 16
        >>> decode_batch(model, src, src_valid_lens, "beam", beam_size=1) == greedy  # a beam of one is greedy
        True
    """
    check_choice(decoding, "decoding", ("greedy", "beam"))
    src, src_valid_lens = _check_src(model, src, src_valid_lens)
    budget = max_len if max_len is not None else default_max_len(model, src_valid_lens)
    if decoding == "greedy":
        return greedy_decode(model, src, src_valid_lens, budget, bos=bos, eos=eos)
    return beam_search(model, src, src_valid_lens, budget, bos=bos, eos=eos, beam_size=beam_size,
                       length_penalty=length_penalty)


def _tokenize(sentence: str, tokenizer: str | Callable[[str], list[str]]) -> list[str]:
    if callable(tokenizer):
        return list(tokenizer(sentence))
    if tokenizer == "char":
        return list(sentence)
    from ..data import normalize_text, tokenize_words

    return tokenize_words(normalize_text(sentence))


def _detokenize(tokens: list[str], tokenizer: str | Callable[[str], list[str]],
                detokenizer: Callable[[list[str]], str] | None = None) -> str:
    if detokenizer is not None:
        return detokenizer(tokens)
    return "".join(tokens) if tokenizer == "char" else " ".join(tokens)


def translate(model: Seq2SeqModel, sentences: Sequence[str], src_vocab, tgt_vocab,
              tokenizer: str | Callable[[str], list[str]], *, decoding: Literal["greedy", "beam"] = "greedy",
              beam_size: int = 4, length_penalty: float = 0.6, max_len: int | None = None,
              batch_size: int = 64, detokenizer: Callable[[list[str]], str] | None = None) -> list[str]:
    """Translate raw sentences, a batch at a time.

    Args:
        model: a trained seq2seq model (on any device).
        sentences: the source sentences as plain strings.
        src_vocab, tgt_vocab: the :class:`course_lib.data.Vocab` objects the model was trained with
            (sources are encoded as ``x <eos>`` by :func:`course_lib.data.encode_sources`).
        tokenizer: ``"char"`` (``list(sentence)``), ``"word"`` (:func:`course_lib.data.normalize_text`
            then :func:`course_lib.data.tokenize_words`), as the data set's ``tokenizer``, or a function
            str -> tokens. Output characters are joined without spaces, words with one space.
        decoding: ``"greedy"`` or ``"beam"``.
        beam_size, length_penalty: for beam search.
        max_len: tokens to generate at most; default :func:`default_max_len`.
        batch_size: sentences decoded together.
        detokenizer: a function output tokens -> text (for subwords, the target
            :class:`course_lib.data.SubwordTokenizer`'s ``detokenize``); default as described for
            ``tokenizer``.

    Returns:
        One translation per sentence (an empty or blank sentence gives ``""``).

    Examples:
        An untrained character-level model writes nonsense, but it is what greedy decoding gives:

        >>> vocab = Vocab.build(["0123456789-"])
        >>> model = Transformer(TransformerConfig(len(vocab), len(vocab), num_hiddens=8, ffn_num_hiddens=16,
        ...                                       num_heads=2))
        >>> out = translate(model, ["2026", " "], vocab, vocab, "char", max_len=10)
        >>> src = torch.tensor([vocab.encode(list("2026")) + [vocab.eos]])  # x <eos>, (1, 5)
        >>> ids = greedy_decode(model, src, torch.tensor([5]), max_len=10)[0]
        >>> out == ["".join(vocab.decode(ids)), ""]  # a blank sentence gives ""
        True
    """
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of str, got a single str (wrap it in a list)")
    check_choice(decoding, "decoding", ("greedy", "beam"))
    if not (callable(tokenizer) or tokenizer in ("char", "word")):
        raise ValueError(f'tokenizer must be "char", "word" or a callable, got {tokenizer!r}')
    check_positive_int(batch_size, "batch_size")
    for i, s in enumerate(sentences):
        if not isinstance(s, str):
            raise TypeError(f"sentences[{i}] must be a str, got {type(s).__name__}")
    from ..data import encode_sources

    results = [""] * len(sentences)
    todo = [i for i, s in enumerate(sentences) if s.strip()]
    # A source longer than the model's positions is cut (keeping its <eos>) rather than failing.
    src_limit = getattr(getattr(model, "config", None), "max_len", None)
    for start in range(0, len(todo), batch_size):
        chunk = todo[start:start + batch_size]
        src, src_valid_lens = encode_sources([_tokenize(sentences[i], tokenizer) for i in chunk], src_vocab,
                                             max_len=src_limit if isinstance(src_limit, int) else None)
        out = decode_batch(model, src, src_valid_lens, decoding, max_len=max_len, bos=tgt_vocab.bos,
                           eos=tgt_vocab.eos, beam_size=beam_size, length_penalty=length_penalty)
        for i, ids in zip(chunk, out, strict=True):
            results[i] = _detokenize(tgt_vocab.decode(ids), tokenizer, detokenizer)
    return results

