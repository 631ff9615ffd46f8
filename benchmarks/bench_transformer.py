"""Benchmark: a ``course_lib.Transformer`` training step against ``torch.nn.Transformer``, and cached decoding.

Two tables:

1. **Training step** (forward, masked cross-entropy, backward, Adam step) of ``cl.Transformer``
   against a peer of the same size built around ``torch.nn.Transformer`` (post-norm layers,
   ``batch_first=True``, no final layer norm, as ours): the *same* embedding, positional encoding and
   output layer (copies of ours) and the same weights in the blocks (copied), so both compute the same
   function; this is checked in evaluation mode before timing. The peer gets every mask PyTorch
   offers: source, target and memory key padding masks and the causal mask (``tgt_is_causal=True``).
   Dropout 0.1 everywhere, a batch of sentences of 10 to 20 tokens padded to the longest.
2. **Greedy decoding** of 64 tokens per sentence with :func:`course_lib.greedy_decode`: with the
   key/value cache (``use_cache=True``, one token through the decoder per step) against without it
   (``use_cache=False``, the full teacher-forcing forward on the whole prefix at every step). ``<eos>``
   is made impossible (its output bias is set to -1e4) so that every run decodes all 64 tokens.

The training step's target (issue 20), printed under its table as met or MISSED: ours takes at most
:data:`TARGET_TRAIN_STEP` times the peer's time.

Contenders are timed in one run, interleaved (the order alternates each repetition); the tables
report the median time over the repetitions and the median of the per-repetition ratios, in
wall-clock and in process CPU time (which a busy machine disturbs less; on CUDA it is the host's
time). Run with ``python -m benchmarks`` (every benchmark) or ``python -m benchmarks.bench_transformer``;
on a shared CPU check ``uptime`` first (on a busy one, ``OMP_NUM_THREADS=1`` keeps the timings far
steadier).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from course_lib.attention.masks import padding_mask
from course_lib.attention.multihead import MultiHeadAttention
from course_lib.decoding.search import greedy_decode
from course_lib.models.transformer import Transformer, TransformerConfig
from course_lib.training.train import masked_cross_entropy
from course_lib.utils import try_gpu

from .bench_attention import Timings, busy_warning, compare_timings, environment, table, target_line

PAD, BOS, EOS = 0, 1, 2
TARGET_TRAIN_STEP = 1.0  # ours / torch.nn.Transformer


@dataclass(frozen=True)
class StepSetup:
    """Sizes of the training-step comparison."""

    batch: int = 64
    min_len: int = 10
    max_len: int = 20
    vocab: int = 5000
    num_hiddens: int = 128
    ffn_num_hiddens: int = 512
    num_heads: int = 4
    num_layers: int = 2
    dropout: float = 0.1

    def config(self, max_positions: int = 256) -> TransformerConfig:
        return TransformerConfig(self.vocab, self.vocab, self.num_hiddens, self.ffn_num_hiddens, self.num_heads,
                                 self.num_layers, self.num_layers, self.dropout, max_positions, pad_id=PAD)

    def describe(self) -> str:
        return (f"B={self.batch}, len {self.min_len}-{self.max_len}, V={self.vocab}, d={self.num_hiddens}, "
                f"ffn={self.ffn_num_hiddens}, h={self.num_heads}, {self.num_layers}+{self.num_layers} layers")


class PeerSeq2Seq(nn.Module):
    """``torch.nn.Transformer`` between copies of ``ours``'s embedders and output layer.

    Post-norm layers with ReLU, ``batch_first=True``, and no final layer norm after either stack
    (``nn.Transformer`` adds one by default; ``cl.Transformer`` has none in post-norm).
    """

    def __init__(self, ours: Transformer) -> None:
        super().__init__()
        c = ours.config
        enc_layer = nn.TransformerEncoderLayer(c.num_hiddens, c.num_heads, c.ffn_num_hiddens, c.dropout,
                                               batch_first=True)
        dec_layer = nn.TransformerDecoderLayer(c.num_hiddens, c.num_heads, c.ffn_num_hiddens, c.dropout,
                                               batch_first=True)
        self.core = nn.Transformer(
            c.num_hiddens, c.num_heads, batch_first=True,
            custom_encoder=nn.TransformerEncoder(enc_layer, c.num_enc_layers, norm=None, enable_nested_tensor=False),
            custom_decoder=nn.TransformerDecoder(dec_layer, c.num_dec_layers, norm=None),
        )
        self.src_embed = copy.deepcopy(ours.encoder.embed)
        self.tgt_embed = copy.deepcopy(ours.decoder.embed)
        self.dense = copy.deepcopy(ours.decoder.dense)
        _copy_block_weights(ours, self.core)

    def forward(self, src: torch.Tensor, src_valid_lens: torch.Tensor, tgt_in: torch.Tensor,
                tgt_valid_lens: torch.Tensor) -> torch.Tensor:
        """(B, S), (B,), (B, T), (B,) -> (B, T, V) logits. PyTorch's masks are ``True`` = masked out."""
        S, T = src.shape[1], tgt_in.shape[1]
        src_pad = torch.arange(S, device=src.device) >= src_valid_lens[:, None]  # (B, S)
        tgt_pad = torch.arange(T, device=src.device) >= tgt_valid_lens[:, None]  # (B, T)
        causal = torch.ones(T, T, dtype=torch.bool, device=src.device).triu(1)  # (T, T), True above the diagonal
        out = self.core(self.src_embed(src), self.tgt_embed(tgt_in), tgt_mask=causal, src_key_padding_mask=src_pad,
                        tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad, tgt_is_causal=True)
        return self.dense(out)


def _copy_attention(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    theirs.in_proj_weight.copy_(torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight]))
    theirs.in_proj_bias.copy_(torch.cat([ours.W_q.bias, ours.W_k.bias, ours.W_v.bias]))
    theirs.out_proj.weight.copy_(ours.W_o.weight)
    theirs.out_proj.bias.copy_(ours.W_o.bias)


def _copy_linear_or_norm(ours: nn.Module, theirs: nn.Module) -> None:
    theirs.weight.copy_(ours.weight)
    theirs.bias.copy_(ours.bias)


@torch.no_grad()
def _copy_block_weights(ours: Transformer, core: nn.Transformer) -> None:
    for mine, theirs in zip(ours.encoder.blocks, core.encoder.layers, strict=True):
        _copy_attention(mine.attention, theirs.self_attn)
        pairs = [(mine.addnorm1.ln, theirs.norm1), (mine.ffn.dense1, theirs.linear1),
                 (mine.ffn.dense2, theirs.linear2), (mine.addnorm2.ln, theirs.norm2)]
        for a, b in pairs:
            _copy_linear_or_norm(a, b)
    for mine, theirs in zip(ours.decoder.blocks, core.decoder.layers, strict=True):
        _copy_attention(mine.self_attention, theirs.self_attn)
        _copy_attention(mine.cross_attention, theirs.multihead_attn)
        pairs = [(mine.addnorm1.ln, theirs.norm1), (mine.addnorm2.ln, theirs.norm2),
                 (mine.ffn.dense1, theirs.linear1), (mine.ffn.dense2, theirs.linear2), (mine.addnorm3.ln, theirs.norm3)]
        for a, b in pairs:
            _copy_linear_or_norm(a, b)


def make_batch(setup: StepSetup, device: torch.device, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random sentences of ``min_len``..``max_len`` tokens, right-padded, as the training loop sees them.

    Returns:
        ``src`` (B, S), ``src_valid_lens`` (B,), ``tgt_in`` (B, T) = ``<bos> y_1 .. y_{n-1}``, ``tgt_out``
        (B, T) = ``y_1 .. y_n`` with ``y_n = <eos>``, ``tgt_valid_lens`` (B,) = n.
    """
    gen = torch.Generator().manual_seed(seed)
    B = setup.batch

    def lengths() -> torch.Tensor:
        return torch.randint(setup.min_len, setup.max_len + 1, (B,), generator=gen)

    def sentences(lens: torch.Tensor) -> torch.Tensor:
        ids = torch.randint(EOS + 1, setup.vocab, (B, int(lens.max())), generator=gen)
        return ids.masked_fill(torch.arange(ids.shape[1]) >= lens[:, None], PAD)

    src_lens, tgt_lens = lengths(), lengths()
    src, y = sentences(src_lens), sentences(tgt_lens - 1)
    # y_1 .. y_{n-1} then <eos> at position n - 1, padding after.
    tgt_out = torch.cat([y, torch.full((B, 1), PAD)], dim=1)
    tgt_out[torch.arange(B), tgt_lens - 1] = EOS
    tgt_in = torch.cat([torch.full((B, 1), BOS), tgt_out[:, :-1]], dim=1).masked_fill(
        torch.arange(tgt_out.shape[1]) >= tgt_lens[:, None], PAD)
    batch = {"src": src, "src_valid_lens": src_lens, "tgt_in": tgt_in, "tgt_out": tgt_out, "tgt_valid_lens": tgt_lens}
    return {k: v.to(device) for k, v in batch.items()}


def check_same_function(ours: Transformer, peer: PeerSeq2Seq, batch: dict[str, torch.Tensor]) -> float:
    """Largest |logit difference| at the real target positions, in evaluation mode (dropout off)."""
    ours.eval()
    peer.eval()
    with torch.no_grad():
        a = ours(batch["src"], batch["src_valid_lens"], batch["tgt_in"])
        b = peer(batch["src"], batch["src_valid_lens"], batch["tgt_in"], batch["tgt_valid_lens"])
    ours.train()
    peer.train()
    real = torch.arange(a.shape[1], device=a.device) < batch["tgt_valid_lens"][:, None]
    return (a - b)[real].abs().max().item()


def bench_train_step(setup: StepSetup, device: torch.device, repeats: int = 15, n_inner: int = 1,
                     seed: int = 0) -> tuple[Timings, float]:
    """Training-step timings of ours (``"ours"``) and the peer (``"torch"``), and their eval-mode logit difference."""
    torch.manual_seed(seed)
    ours = Transformer(setup.config()).to(device)
    peer = PeerSeq2Seq(ours).to(device)
    n_ours = sum(p.numel() for p in ours.parameters() if p.requires_grad)
    n_peer = sum(p.numel() for p in peer.parameters() if p.requires_grad)
    if n_ours != n_peer:
        raise RuntimeError(f"the models differ in size: {n_ours} vs {n_peer} trainable parameters")
    batch = make_batch(setup, device, seed)
    max_diff = check_same_function(ours, peer, batch)
    if max_diff > 1e-3:
        raise RuntimeError(f"the two models do not compute the same logits (max difference {max_diff:.2e})")
    # A small learning rate keeps the weights (and so the work per step) about where they started.
    opt_ours = torch.optim.Adam(ours.parameters(), lr=1e-5)
    opt_peer = torch.optim.Adam(peer.parameters(), lr=1e-5)

    def step_ours() -> None:
        opt_ours.zero_grad(set_to_none=True)
        logits = ours(batch["src"], batch["src_valid_lens"], batch["tgt_in"])
        masked_cross_entropy(logits, batch["tgt_out"], batch["tgt_valid_lens"]).backward()
        opt_ours.step()

    def step_peer() -> None:
        opt_peer.zero_grad(set_to_none=True)
        logits = peer(batch["src"], batch["src_valid_lens"], batch["tgt_in"], batch["tgt_valid_lens"])
        masked_cross_entropy(logits, batch["tgt_out"], batch["tgt_valid_lens"]).backward()
        opt_peer.step()

    steps = {"ours": step_ours, "torch": step_peer}
    return compare_timings(steps, device, repeats=repeats, n_inner=n_inner, warmup=2), max_diff


@torch.no_grad()
def decode_rerunning_prefix(model: Transformer, src: torch.Tensor, src_valid_lens: torch.Tensor,
                            n_tokens: int) -> list[list[int]]:
    """Greedy decoding without a cache, done leanly: the decoder blocks re-run on the whole prefix at each step.

    The memory is encoded once and only the last position is projected to the vocabulary, so this is
    the cost of the missing key/value cache alone (``greedy_decode(use_cache=False)`` also re-encodes
    the source and computes the logits of every prefix position at each step). No ``<eos>`` handling:
    it always decodes ``n_tokens`` tokens.
    """
    memory = model.encode(src, src_valid_lens)  # (B, S, d)
    src_mask = padding_mask(src_valid_lens, memory.shape[1])  # (B, 1, S)
    tokens = torch.full((src.shape[0], 1), BOS, dtype=torch.long, device=src.device)
    for _ in range(n_tokens):
        X = model.decoder.embed(tokens)  # (B, t, d)
        for block in model.decoder.blocks:
            X = block(X, memory, src_mask)
        logits = model.decoder.dense(model.decoder.norm(X[:, -1]))  # (B, V)
        tokens = torch.cat([tokens, logits.argmax(dim=-1, keepdim=True)], dim=1)
    return tokens[:, 1:].tolist()


def bench_decoding(setup: StepSetup, device: torch.device, n_tokens: int = 64, batch: int = 16,
                   repeats: int = 3, seed: int = 0) -> Timings:
    """Timings of greedy decoding of ``n_tokens`` per sentence by three routes, interleaved.

    ``"cached"``: :func:`greedy_decode` (the key/value cache); ``"uncached"``: ``greedy_decode(...,
    use_cache=False)``; ``"prefix"``: :func:`decode_rerunning_prefix`. All three must produce the same
    tokens (a difference is reported).
    """
    torch.manual_seed(seed)
    model = Transformer(setup.config(max_positions=n_tokens + 1)).to(device).eval()
    with torch.no_grad():
        # Never predict <eos>, so that every route decodes exactly n_tokens tokens.
        model.decoder.dense.bias[EOS] = -1e4
    data = make_batch(StepSetup(batch=batch, min_len=setup.min_len, max_len=setup.max_len, vocab=setup.vocab),
                      device, seed)
    src, lens = data["src"], data["src_valid_lens"]
    outputs: dict[str, list[list[int]]] = {}
    routes = {
        "cached": lambda: greedy_decode(model, src, lens, n_tokens, bos=BOS, eos=EOS, use_cache=True),
        "uncached": lambda: greedy_decode(model, src, lens, n_tokens, bos=BOS, eos=EOS, use_cache=False),
        "prefix": lambda: decode_rerunning_prefix(model, src, lens, n_tokens),
    }

    def recorded(name: str) -> Callable[[], None]:
        def run() -> None:
            outputs[name] = routes[name]()
        return run

    timings = compare_timings({name: recorded(name) for name in routes}, device, repeats=repeats, n_inner=1,
                              warmup=1)
    if any(len(row) != n_tokens for row in outputs["cached"]):
        raise RuntimeError("cached decoding stopped before n_tokens")
    for name in ("uncached", "prefix"):
        if outputs[name] != outputs["cached"]:
            # Argmax ties broken differently by rounding are possible in principle; report, do not hide.
            n_same = sum(a == b for a, b in zip(outputs["cached"], outputs[name], strict=True))
            print(f"note: {name} and cached decoding agree on {n_same}/{len(outputs['cached'])} sentences")
    return timings


def main(repeats: int = 15) -> tuple[Timings, Timings]:
    """Time the training step and the decoding, print both tables and return the timings."""
    device = try_gpu()
    if (warning := busy_warning()) is not None:
        print(warning)
    setup = StepSetup()
    train, max_diff = bench_train_step(setup, device, repeats=repeats)
    print(table(f"Transformer training step (forward, masked cross-entropy, backward, Adam) vs torch.nn.Transformer "
                f"({environment(device)}; eval-mode logits agree to {max_diff:.1e}); ratios: median over "
                f"repetitions of ours/torch",
                ["what", "setting", "ours (ms)", "torch (ms)", "ours/torch", "(cpu time)"],
                [["train step", setup.describe(), f"{1e3 * train.median('ours'):.1f}",
                  f"{1e3 * train.median('torch'):.1f}", f"{train.ratio('ours', 'torch'):.2f}",
                  f"{train.ratio('ours', 'torch', 'cpu'):.2f}"]]))
    print(target_line("train step: ours/torch", train.ratio("ours", "torch"), TARGET_TRAIN_STEP))
    print()
    n_tokens, batch = 64, 16
    decode = bench_decoding(setup, device, n_tokens, batch, repeats=max(3, repeats // 5))
    baselines = {"uncached": "greedy_decode(use_cache=False)", "prefix": "decoder re-run on the prefix"}
    rows = [[label, f"{1e3 * decode.median('cached'):.1f}", f"{1e3 * decode.median(name):.1f}",
             f"{decode.ratio(name, 'cached'):.1f}x", f"{decode.ratio(name, 'cached', 'cpu'):.1f}x"]
            for name, label in baselines.items()]
    print(table(f"Greedy decoding of {n_tokens} tokens, batch {batch}, source length {setup.min_len}-{setup.max_len}: "
                f"with the key/value cache vs without ({environment(device)}); speed-up: median over repetitions "
                f"of baseline/cached",
                ["baseline (no cache)", "cached (ms)", "baseline (ms)", "speed-up", "(cpu time)"], rows, n_text=1))
    return train, decode


if __name__ == "__main__":
    main()
