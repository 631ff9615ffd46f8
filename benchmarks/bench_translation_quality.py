"""Benchmark: English -> French translation quality of three models trained under the same time budget.

1. ``course_lib.Transformer`` (post-norm, sinusoidal positions, the book's model);
2. ``torch.nn.Transformer`` wrapped in the same embeddings (scaled by sqrt(d), drawn from N(0, 1/d)),
   the same sinusoidal positional encoding, the same output layer and the same masking conventions:
   padded source positions are masked in the encoder and in the cross-attention, the decoder's
   self-attention is causal, target padding is left to the masked loss. Same d, heads, layers, FFN
   size and dropout; ``nn.Transformer``'s extra final layer norms (which ``course_lib``'s post-norm
   stacks do not have) are removed, so the two are the same network with each library's own
   initialisation. It decodes without a cache (the decoder reruns on the whole prefix each step);
3. ``course_lib.BahdanauSeq2Seq``, a 2-layer GRU encoder--decoder with additive attention.

All three go through the same :func:`course_lib.train_seq2seq` (Adam, same batch size, the same
warm-up schedule for both Transformers, same seed) on the same split of the Tatoeba pairs, for the
same wall-clock budget each, and are scored with the same :func:`course_lib.evaluate` (greedy
decoding, every reference of a test sentence). By default the vocabulary is the command line's:
byte-level BPE subwords (:func:`course_lib.load_fra_eng_subwords`, 2 000 tokens per language), and
BLEU is sacrebleu's on the detokenised text (cased, 13a tokenisation); ``--vocab word`` uses the
chapters' word-level vocabulary (:func:`course_lib.load_fra_eng`) and token-level BLEU. The course_lib
Transformer has the command line's size and learning rate, so its row is what
``python -m course_lib train --task fra-eng --minutes M`` gives with the same number of threads.
The runs are sequential, so on a shared machine a change of load between them changes
the number of steps each gets: the table reports the steps, the load average (``uptime``) before
and after, and the median time of a training step of each model measured *interleaved* on the
same batches before training. ``epochs=`` replaces the time budget by a fixed number of epochs,
which compares the models at equal steps, independently of speed. Before anything else, the
wrapper is loaded with a ``course_lib.Transformer``'s weights and must give the same logits.

**The results file.** Each run writes its table, with the date and the machine, to
``benchmarks/results/translation_quality.json`` (``--results``), which the repository keeps: section 8.1
(book/08b_translation.ipynb) reads the command line's three-minute scores from it, so the numbers the book
quotes are the last measured ones, never typed by hand. Every model is scored with greedy decoding and with
beam search (4 beams, GNMT's length penalty 0.6), the command line's default decoding, and translates eight
held-out sentences (:func:`example_sentences`) with beam search: the translations section 8.1 shows.

Measured on 2026-11-23 (issue 11) on the course's 2-core machine, 3 minutes per model, 2 torch threads,
with nothing else running (load average about 2.0, i.e. the two threads themselves). The nn.Transformer
row of the first run was disturbed by another job (537 steps against 95 ms/step measured interleaved)
and was run again alone (``--only torch.nn.Transformer``); that second run is reported:

==============================================  =====  ===  ==================  ==========
run (subword vocabulary, greedy unless said)    steps   ms  BLEU (sacrebleu)    with <unk>
==============================================  =====  ===  ==================  ==========
``course_lib.Transformer`` (this file)           1607  100  33.8                0 of 1097
``torch.nn.Transformer`` (this file, rerun)      1680  102  33.8                0 of 1097
Bahdanau GRU (this file)                         1251   98  12.3                0 of 1097
``python -m course_lib train --task fra-eng``    1678       beam 4: 40.0        0 of 1097
same (before beam 4 was the default)            1592       36.0; beam 4: 39.3  0 of 1097
same, ``--seed 1`` (another split)               1700       35.4                0 of 1097
same, ``--lr 1e-3`` (the previous default)       1715       31.9                0 of 1097
same, ``--lr 3e-3``                              1373       34.7                0 of 1097
same, ``--vocab-size 8000``, ``--lr 1e-3``       1250       27.3                0 of 1097
same, ``--label-smoothing 0.1``, ``--lr 1e-3``   1590       30.4                0 of 1097
==============================================  =====  ===  ==================  ==========

(ms: median milliseconds per training step, measured interleaved before training. The first
command-line row has today's defaults; the others were made before beam 4 became the default, so their
BLEU is greedy, today's ``--beam-size 1``.) The two Transformers are the same network
and reach the same BLEU at about the same number of steps. What limits BLEU in three minutes: the
number of steps and what each step gives (a peak learning rate of 2e-3 instead of 1e-3 gave 36.0
against 31.9 at a similar number of steps), then decoding (beam 4 adds 3.3 BLEU), then the vocabulary
(8 000 subwords per language make each step slower: 27% fewer steps and 4.6 BLEU less). Label
smoothing did not help within this budget. Runs of the same recipe differ by about 2 BLEU with the
number of steps the clock allows (33.8 in this file, 36.0 through the command line). The GRU takes
fewer steps and gains less from each.

Run with ``python -m benchmarks`` (every benchmark, 3 minutes per model here) or
``OMP_NUM_THREADS=2 python -m benchmarks.bench_translation_quality --minutes 3`` (the issue's setting:
three minutes on a 2-core laptop).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import math
import os
import random
import statistics
import time
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from torch import nn

import course_lib as cl

# The command line's Transformer (course_lib.cli), also the notebook's size (chapter 8.1).
NUM_HIDDENS, FFN_NUM_HIDDENS, NUM_HEADS, NUM_LAYERS, DROPOUT = 128, 256, 4, 2, 0.1
# Peak learning rate and warm-up steps of both Transformers, the command line's; the GRU trains best here with
# a constant rate.
TRANSFORMER_LR, TRANSFORMER_WARMUP = 2e-3, 200
GRU_LR = 5e-3
BATCH_SIZE = 64
# The file the repository keeps and section 8.1 reads (written by every run with a time budget).
RESULTS = Path(__file__).resolve().parent / "results" / "translation_quality.json"


@dataclass
class TorchDecoderState:
    """The uncached decoder state of :class:`TorchTransformerSeq2Seq`.

    Attributes:
        memory: (B, S, d) encoder output.
        pad_mask: (B, S) bool, ``True`` at *padded* source positions (``torch.nn``'s convention).
        tokens: (B, t) the decoder inputs fed so far (``<bos>`` first).
    """

    memory: torch.Tensor
    pad_mask: torch.Tensor
    tokens: torch.Tensor


class TorchTransformerSeq2Seq(nn.Module):
    """``torch.nn.Transformer`` behind the seq2seq protocol of :mod:`course_lib.decoding.protocol`.

    Args:
        src_vocab_size, tgt_vocab_size: V_src, V.
        num_hiddens, ffn_num_hiddens, num_heads, num_layers, dropout: as in :class:`course_lib.TransformerConfig`
            (``num_layers`` blocks in the encoder and in the decoder).
        max_len: positions of the positional encoding.
        pad_id: id of ``<pad>`` (zero embedding, no gradient).
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, num_hiddens: int, ffn_num_hiddens: int,
                 num_heads: int, num_layers: int, dropout: float, max_len: int = 256, pad_id: int = 0) -> None:
        super().__init__()
        self.scale = math.sqrt(num_hiddens)
        self.src_embedding = self._embedding(src_vocab_size, num_hiddens, pad_id)
        self.tgt_embedding = self._embedding(tgt_vocab_size, num_hiddens, pad_id)
        self.src_pos = cl.PositionalEncoding(num_hiddens, dropout, max_len)
        self.tgt_pos = cl.PositionalEncoding(num_hiddens, dropout, max_len)
        self.transformer = nn.Transformer(num_hiddens, num_heads, num_layers, num_layers, ffn_num_hiddens, dropout,
                                          batch_first=True, norm_first=False)
        # nn.Transformer ends both stacks with a LayerNorm even in post-norm; course_lib's post-norm
        # stacks (like the paper's) do not: remove them so that the two networks are the same.
        self.transformer.encoder.norm = None
        self.transformer.decoder.norm = None
        self.dense = nn.Linear(num_hiddens, tgt_vocab_size)

    @staticmethod
    def _embedding(vocab_size: int, num_hiddens: int, pad_id: int) -> nn.Embedding:
        # As course_lib's embedder: N(0, 1/d), so that sqrt(d) * E has the scale of the sinusoids.
        embedding = nn.Embedding(vocab_size, num_hiddens, padding_idx=pad_id)
        nn.init.normal_(embedding.weight, std=num_hiddens**-0.5)
        with torch.no_grad():
            embedding.weight[pad_id].zero_()
        return embedding

    def forward(self, src: torch.Tensor, src_valid_lens: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: src (B, S), src_valid_lens (B,), tgt_in (B, T) -> logits (B, T, V)."""
        memory, pad_mask = self.encode(src, src_valid_lens)
        return self._decode(tgt_in, memory, pad_mask)

    def encode(self, src: torch.Tensor, src_valid_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The memory (B, S, d) and the source padding mask (B, S), ``True`` = padding."""
        pad_mask = torch.arange(src.shape[1], device=src.device) >= src_valid_lens.to(src.device)[:, None]
        X = self.src_pos(self.src_embedding(src) * self.scale)
        return self.transformer.encoder(X, src_key_padding_mask=pad_mask), pad_mask

    def _decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, pad_mask: torch.Tensor) -> torch.Tensor:
        T = tgt_in.shape[1]
        # torch.nn's attn_mask: True = may NOT attend (course_lib's masks use the opposite convention).
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool, device=tgt_in.device), diagonal=1)
        Y = self.tgt_pos(self.tgt_embedding(tgt_in) * self.scale)
        Y = self.transformer.decoder(Y, memory, tgt_mask=causal, memory_key_padding_mask=pad_mask, tgt_is_causal=True)
        return self.dense(Y)  # (B, T, V)

    def init_decoder_state(self, memory: tuple[torch.Tensor, torch.Tensor],
                           src_valid_lens: torch.Tensor) -> TorchDecoderState:
        enc, pad_mask = memory
        return TorchDecoderState(enc, pad_mask, enc.new_zeros(enc.shape[0], 0, dtype=torch.long))

    def decode_step(self, tokens: torch.Tensor, state: TorchDecoderState) -> tuple[torch.Tensor, TorchDecoderState]:
        """No cache: rerun the decoder on the whole prefix and keep the last position's logits (B, V)."""
        prefix = torch.cat([state.tokens, tokens], dim=1)  # (B, t + 1)
        logits = self._decode(prefix, state.memory, state.pad_mask)[:, -1]
        return logits, replace(state, tokens=prefix)

    def reorder_state(self, state: TorchDecoderState, index: torch.Tensor) -> TorchDecoderState:
        index = index.to(state.memory.device, torch.long)
        return TorchDecoderState(state.memory.index_select(0, index), state.pad_mask.index_select(0, index),
                                 state.tokens.index_select(0, index))


def copy_weights(ours: cl.Transformer, theirs: TorchTransformerSeq2Seq) -> None:
    """Load ``ours``'s weights into ``theirs`` (same sizes): the two must then compute the same function."""

    def attention(t: nn.MultiheadAttention, o: cl.MultiHeadAttention) -> None:
        t.in_proj_weight.copy_(torch.cat([o.W_q.weight, o.W_k.weight, o.W_v.weight]))
        t.in_proj_bias.copy_(torch.cat([o.W_q.bias, o.W_k.bias, o.W_v.bias]))
        linear(t.out_proj, o.W_o)

    def linear(t: nn.Module, o: nn.Module) -> None:  # nn.Linear or nn.LayerNorm
        t.weight.copy_(o.weight)
        t.bias.copy_(o.bias)

    with torch.no_grad():
        theirs.src_embedding.weight.copy_(ours.encoder.embed.embedding.weight)
        theirs.tgt_embedding.weight.copy_(ours.decoder.embed.embedding.weight)
        linear(theirs.dense, ours.decoder.dense)
        for t, o in zip(theirs.transformer.encoder.layers, ours.encoder.blocks, strict=True):
            attention(t.self_attn, o.attention)
            linear(t.linear1, o.ffn.dense1)
            linear(t.linear2, o.ffn.dense2)
            linear(t.norm1, o.addnorm1.ln)
            linear(t.norm2, o.addnorm2.ln)
        for t, o in zip(theirs.transformer.decoder.layers, ours.decoder.blocks, strict=True):
            attention(t.self_attn, o.self_attention)
            attention(t.multihead_attn, o.cross_attention)
            linear(t.linear1, o.ffn.dense1)
            linear(t.linear2, o.ffn.dense2)
            linear(t.norm1, o.addnorm1.ln)
            linear(t.norm2, o.addnorm2.ln)
            linear(t.norm3, o.addnorm3.ln)


def same_network_check(seed: int = 0) -> float:
    """Largest |logit difference| between a small ``cl.Transformer`` and the wrapper given its weights.

    Dropout off, padded sources, in eval mode; 0 (up to float rounding) means the wrapper is the same
    network as ``course_lib``'s, so the benchmark compares implementations and initialisations only.
    """
    gen = torch.Generator().manual_seed(seed)
    ours = cl.Transformer(cl.TransformerConfig(50, 60, num_hiddens=32, ffn_num_hiddens=64, num_heads=4,
                                               num_enc_layers=2, num_dec_layers=2, dropout=0.0)).eval()
    theirs = TorchTransformerSeq2Seq(50, 60, 32, 64, 4, 2, 0.0).eval()
    copy_weights(ours, theirs)
    src_valid_lens = torch.tensor([7, 3, 5, 1])
    src = torch.randint(4, 50, (4, 7), generator=gen).masked_fill(torch.arange(7) >= src_valid_lens[:, None], 0)
    tgt_in = torch.randint(4, 60, (4, 6), generator=gen)
    with torch.no_grad():
        return (ours(src, src_valid_lens, tgt_in) - theirs(src, src_valid_lens, tgt_in)).abs().max().item()


@dataclass(frozen=True)
class Result:
    """One trained model's row of the table."""

    name: str
    parameters: int
    steps: int
    epochs: int
    seconds: float
    train_loss: float
    valid_loss: float
    bleu: float
    exact_match: float
    n_unk: int = 0
    ms_per_step: float = float("nan")
    bleu_beam: float = float("nan")
    exact_match_beam: float = float("nan")
    translations: tuple[str, ...] = ()  # beam 4, of the example sources (:func:`example_sentences`)


def build_models(data) -> dict[str, tuple[nn.Module, dict]]:
    """The three models (each initialised after ``cl.set_seed(0)``) and their ``train_seq2seq`` settings."""
    V_src, V_tgt = len(data.src_vocab), len(data.tgt_vocab)
    transformer_kw = {"lr": TRANSFORMER_LR, "warmup_steps": TRANSFORMER_WARMUP}
    cl.set_seed(0)
    ours = cl.Transformer(cl.TransformerConfig(V_src, V_tgt, num_hiddens=NUM_HIDDENS, ffn_num_hiddens=FFN_NUM_HIDDENS,
                                               num_heads=NUM_HEADS, num_enc_layers=NUM_LAYERS,
                                               num_dec_layers=NUM_LAYERS, dropout=DROPOUT))
    cl.set_seed(0)
    theirs = TorchTransformerSeq2Seq(V_src, V_tgt, NUM_HIDDENS, FFN_NUM_HIDDENS, NUM_HEADS, NUM_LAYERS, DROPOUT)
    cl.set_seed(0)
    gru = cl.BahdanauSeq2Seq(cl.Seq2SeqRNNConfig(V_src, V_tgt, embed_size=NUM_HIDDENS, hidden_size=NUM_HIDDENS,
                                                 num_layers=NUM_LAYERS, dropout=DROPOUT))
    return {
        "course_lib.Transformer": (ours, transformer_kw),
        "torch.nn.Transformer": (theirs, transformer_kw),
        "Bahdanau GRU": (gru, {"lr": GRU_LR, "warmup_steps": 0}),
    }


def example_sentences(data, n: int = 8, seed: int = 1) -> tuple[list[str], list[list[str]]]:
    """``n`` test sources drawn with ``random.Random(seed)`` and all their references, as text.

    Section 8.1 shows the three-minute models' translations of these (the same sentences as its own
    examples: the word and subword splits list the test sources in the same order).
    """
    items = list(data.references["test"].items())
    picked = random.Random(seed).sample(range(len(items)), n)
    if data.tokenizer == "subword":
        sources = [data.src_tokenizer.detokenize(list(items[i][0])) for i in picked]
    else:
        sources = [" ".join(items[i][0]) for i in picked]
    return sources, [[data.to_text(ref) for ref in items[i][1]] for i in picked]


def run_one(name: str, model: nn.Module, settings: dict, data, minutes: float | None, epochs: int | None,
            device: torch.device, seed: int = 0, examples: list[str] = ()) -> Result:
    """Train one model with :func:`course_lib.train_seq2seq`, score it on the test split (greedy and beam 4), and
    translate the ``examples`` (source texts) with beam 4."""
    history = cl.train_seq2seq(model, data, minutes=minutes, epochs=epochs, batch_size=BATCH_SIZE, device=device,
                               seed=seed, progress=False, **settings)
    metrics = cl.evaluate(model, data, "test", decoding="greedy")
    beam = cl.evaluate(model, data, "test", decoding="beam", beam_size=4)
    tail = history.train_loss[-50:]
    tokenizer = data.src_tokenizer if data.tokenizer == "subword" else data.tokenizer
    detokenizer = data.tgt_tokenizer.detokenize if data.tokenizer == "subword" else None
    translations = cl.translate(model, list(examples), data.src_vocab, data.tgt_vocab, tokenizer,
                                decoding="beam", beam_size=4, detokenizer=detokenizer) if examples else []
    return Result(name, cl.num_parameters(model), history.steps, history.epochs, history.seconds,
                  sum(tail) / len(tail), history.valid_loss[-1], metrics["bleu"], metrics["exact_match"],
                  metrics["n_unk"], bleu_beam=beam["bleu"], exact_match_beam=beam["exact_match"],
                  translations=tuple(translations))


def interleaved_step_ms(models: dict[str, tuple[nn.Module, dict]], data, device: torch.device, n_steps: int = 5,
                        repeats: int = 5) -> dict[str, float]:
    """Median milliseconds per training step (forward, backward, clipping, Adam) of each model, interleaved.

    The wall-clock budget hides speed inside the step counts, and the models train one after the other,
    so a change of machine load between them shifts the counts. Here copies of the models take the same
    ``n_steps`` batches in turn, ``repeats`` times, alternating the order, as ``bench_attention`` does.
    """
    batches = [b.to(device) for b in data.batches("train", BATCH_SIZE, shuffle=True,
                                                  generator=torch.Generator().manual_seed(0))][:n_steps]
    copies = {name: copy.deepcopy(model).to(device).train() for name, (model, _) in models.items()}
    optimizers = {name: torch.optim.Adam(m.parameters(), lr=1e-4) for name, m in copies.items()}

    def run(name: str) -> float:
        model, optimizer = copies[name], optimizers[name]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for b in batches:
            loss = cl.masked_cross_entropy(model(b.src, b.src_valid_lens, b.tgt_in), b.tgt_out, b.tgt_valid_lens)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return 1e3 * (time.perf_counter() - start) / len(batches)

    for name in copies:
        run(name)  # warm-up
    times: dict[str, list[float]] = {name: [] for name in copies}
    names = list(copies)
    for rep in range(repeats):
        for name in names if rep % 2 == 0 else reversed(names):
            times[name].append(run(name))
    return {name: statistics.median(ts) for name, ts in times.items()}


def _load() -> str:
    try:
        return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    except OSError:  # not available on every platform
        return "n/a"


def format_table(results: list[Result], title: str) -> str:
    """Plain-text table, columns aligned."""
    header = ["model", "parameters", "ms/step (interleaved)", "steps", "epochs", "s/100 steps", "train loss",
              "valid loss", "BLEU (greedy)", "BLEU (beam 4)", "exact match", "with <unk>"]
    rows = [[r.name, f"{r.parameters:,}", f"{r.ms_per_step:.0f}", str(r.steps), str(r.epochs),
             f"{100 * r.seconds / max(r.steps, 1):.1f}", f"{r.train_loss:.3f}", f"{r.valid_loss:.3f}", f"{r.bleu:.2f}",
             f"{r.bleu_beam:.2f}", f"{r.exact_match:.3f}", str(r.n_unk)]
            for r in results]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        # The model name left-aligned, numbers right-aligned.
        padded = (c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return "  ".join(padded)

    return "\n".join([title, line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def write_results(results: list[Result], path: Path, *, minutes: float | None, epochs: int | None, vocab: str,
                  vocab_size: int, device: torch.device, n_train: int, n_test: int, load: tuple[str, str],
                  examples: tuple[list[str], list[list[str]]] = ([], [])) -> None:
    """Write the run's rows and how they were measured to ``path`` (JSON), for section 8.1 to read.

    ``examples`` (sources, references per source) are the test sentences whose translations each row
    keeps (``Result.translations``, in the same order).
    """
    record = {
        "benchmark": "benchmarks/bench_translation_quality.py",
        "date": datetime.date.today().isoformat(),
        "minutes_per_model": minutes,
        "epochs": epochs,
        "vocab": vocab,
        "vocab_size": vocab_size if vocab == "subword" else None,
        "bleu": "sacrebleu on detokenised text (13a, cased)" if vocab == "subword" else "token-level corpus BLEU",
        "beam": {"beam_size": 4, "length_penalty": 0.6},
        "model": {"num_hiddens": NUM_HIDDENS, "ffn_num_hiddens": FFN_NUM_HIDDENS, "num_heads": NUM_HEADS,
                  "num_layers": NUM_LAYERS, "dropout": DROPOUT, "batch_size": BATCH_SIZE,
                  "transformer_lr": TRANSFORMER_LR, "transformer_warmup": TRANSFORMER_WARMUP, "gru_lr": GRU_LR},
        "machine": {"device": str(device), "torch": torch.__version__, "threads": torch.get_num_threads(),
                    "cpus": os.cpu_count(), "load_average_before": load[0], "load_average_after": load[1]},
        "train_pairs": n_train,
        "test_sources": n_test,
        "examples": [{"source": s, "references": refs} for s, refs in zip(*examples, strict=True)],
        "results": [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(r).items()}
                    for r in results],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")


def main(minutes: float | None = 3.0, epochs: int | None = None, seed: int = 0, vocab: str = "subword",
         vocab_size: int = 2000, only: list[str] | None = None, results_path: Path | None = RESULTS) -> list[Result]:
    """Time a few training steps of each model (interleaved), train them in turn, print the table, return its rows.

    Args:
        minutes: wall-clock training budget per model (None: train for ``epochs`` only).
        epochs: stop each model after this many epochs (with ``minutes=None``: equal-step comparison).
        seed: the training seed (shuffling, dropout); the models are initialised with seed 0.
        vocab: ``"subword"`` (byte-level BPE, sacrebleu on detokenised text) or ``"word"``.
        vocab_size: subword vocabulary size per language.
        only: train only the models whose names contain one of these strings (default all three).
        results_path: where to write the results as JSON (None: do not write). Written only for the full run the
            book quotes: all three models, subwords, seed 0 and a time budget.

    Returns:
        One :class:`Result` per model (none when the data file is absent).
    """
    try:
        data = cl.load_fra_eng_subwords(vocab_size=vocab_size) if vocab == "subword" else cl.load_fra_eng()
    except cl.DataNotFoundError as e:
        print(f"skipped: the English-French file is not on this machine ({e})")
        return []
    device = cl.try_gpu()
    # nn.TransformerEncoder's evaluation fast path (nested tensors for padded batches) warns that it is a prototype.
    warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors is in prototype stage")
    print(f"torch.nn.Transformer wrapper loaded with course_lib.Transformer's weights: largest logit difference "
          f"{same_network_check():.2e}")
    budget = f"{minutes:g} min" if minutes is not None else ""
    if epochs is not None:
        budget = f"{budget}{' or ' if budget else ''}{epochs} epochs"
    load_before = _load()
    models = build_models(data)
    if only:
        models = {name: m for name, m in models.items() if any(key in name for key in only)}
    ms_per_step = interleaved_step_ms(models, data, device)
    examples = example_sentences(data)
    results = [replace(run_one(name, model, settings, data, minutes, epochs, device, seed, examples[0]),
                       ms_per_step=ms_per_step[name])
               for name, (model, settings) in models.items()]
    scored = (f"{vocab_size} BPE subwords per language, sacrebleu on detokenised text" if vocab == "subword"
              else "word-level vocabulary, token BLEU")
    title = (f"English->French (Tatoeba, {len(data.train)} train pairs, {len(data.references['test'])} test sources, "
             f"{scored}), "
             f"{budget} per model, d={NUM_HIDDENS}, h={NUM_HEADS}, {NUM_LAYERS}+{NUM_LAYERS} layers, "
             f"FFN {FFN_NUM_HIDDENS}, dropout {DROPOUT}, batch {BATCH_SIZE}\n"
             f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
             f"load average before {load_before}, after {_load()}")
    print(format_table(results, title))
    if results_path is not None and not only and vocab == "subword" and seed == 0 and minutes is not None:
        write_results(results, results_path, minutes=minutes, epochs=epochs, vocab=vocab, vocab_size=vocab_size,
                      device=device, n_train=len(data.train), n_test=len(data.references["test"]),
                      load=(load_before, _load()), examples=examples)
        print(f"results written to {results_path}")
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0,
                        help="training budget per model (default 3; 0: no time limit, give --epochs)")
    parser.add_argument("--vocab", choices=["subword", "word"], default="subword")
    parser.add_argument("--vocab-size", type=int, default=2000)
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="train only the models whose names contain one of these (e.g. torch.nn GRU)")
    parser.add_argument("--epochs", type=int, help="train this many epochs per model instead of (or within) minutes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="JSON file for the results (default: %(default)s, read by section 8.1)")
    args = parser.parse_args()
    main(minutes=args.minutes if args.minutes > 0 else None, epochs=args.epochs, seed=args.seed, vocab=args.vocab,
         vocab_size=args.vocab_size, only=args.only, results_path=args.results)
