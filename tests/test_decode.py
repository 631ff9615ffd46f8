"""Greedy and beam search: cached == uncached, beam 1 == greedy, wide beam == exhaustive search."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.data import Vocab
from course_lib.decoding.search import beam_search, greedy_decode, sequence_log_prob, translate
from course_lib.models import transformer
from course_lib.models.rnn import BahdanauSeq2Seq, Seq2SeqRNN, Seq2SeqRNNConfig

BOS, EOS = 1, 2


class TableModel(nn.Module):
    """A transparent seq2seq fake: the logits of the next token are ``table[src[0], previous token, t]``."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = nn.Parameter(table)  # (n_src, V, T_max, V)
        self.calls = 0

    def forward(self, src, src_valid_lens, tgt_in):
        t = torch.arange(tgt_in.shape[1])
        return self.table[src[:, :1], tgt_in, t]  # (B, T, V)

    def encode(self, src, src_valid_lens):
        return src[:, 0]

    def init_decoder_state(self, memory, src_valid_lens):
        return memory, 0

    def decode_step(self, tokens, state):
        first, t = state
        self.calls += 1
        return self.table[first, tokens[:, 0], t], (first, t + 1)

    def reorder_state(self, state, index):
        return state[0][index], state[1]


def _table_model(seed=0, n_src=3, V=5, T=6, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    return TableModel(torch.randn(n_src, V, T, V, generator=g) * scale)


def _rnn(cls=BahdanauSeq2Seq, seed=0, V=7):
    torch.manual_seed(seed)
    model = cls(Seq2SeqRNNConfig(9, V, embed_size=6, hidden_size=8, num_layers=1, dropout=0.0))
    # Larger weights than the initialisation give peaked, varied next-token distributions.
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)
    return model.eval()


def _src(seed=0, B=4, S=5, low=3, high=9):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, S + 1, (B,), generator=g)
    return torch.randint(low, high, (B, S), generator=g), lens


# --- greedy --------------------------------------------------------------------------------------


def _transformer(seed=0, V=7):
    torch.manual_seed(seed)
    config = transformer.TransformerConfig(9, V, num_hiddens=16, ffn_num_hiddens=32, num_heads=2, num_enc_layers=2,
                                           num_dec_layers=2, dropout=0.1, max_len=64)
    model = transformer.Transformer(config)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2.0)
    return model.eval()


FACTORIES = {
    "bahdanau": lambda seed, V=7: _rnn(BahdanauSeq2Seq, seed, V),
    "plain-rnn": lambda seed, V=7: _rnn(Seq2SeqRNN, seed, V),
    "transformer": _transformer,
}


@pytest.mark.parametrize("name", FACTORIES)
@pytest.mark.parametrize("seed", range(3))
def test_cached_greedy_equals_uncached_greedy(name, seed):
    model = FACTORIES[name](seed)
    src, lens = _src(seed, B=6)
    cached = greedy_decode(model, src, lens, max_len=12)
    assert cached == greedy_decode(model, src, lens, max_len=12, use_cache=False)
    assert len({tuple(c) for c in cached}) > 1  # not a degenerate constant output


def test_greedy_matches_a_per_sentence_argmax_loop():
    model = _table_model(seed=3)
    src = torch.tensor([[0], [1], [2]])
    lens = torch.ones(3, dtype=torch.long)
    out = greedy_decode(model, src, lens, max_len=6)
    for b in range(3):
        prev, expected = BOS, []
        for t in range(6):
            nxt = int(model.table[b, prev, t].argmax())
            if nxt == EOS:
                break
            expected.append(nxt)
            prev = nxt
        assert out[b] == expected


def test_greedy_stops_each_sequence_at_its_eos_and_stops_early():
    table = torch.zeros(2, 5, 6, 5)
    table[..., 3] = 1.0  # token 3 unless told otherwise
    table[0, :, 1, EOS] = 5.0  # sentence 0 ends at step 2
    table[1, :, 3, EOS] = 5.0  # sentence 1 ends at step 4
    model = TableModel(table)
    out = greedy_decode(model, torch.tensor([[0], [1]]), torch.ones(2, dtype=torch.long), max_len=6)
    assert out == [[3], [3, 3, 3]]
    assert model.calls == 4  # no step after the last sequence finished


def test_greedy_without_eos_stops_at_max_len():
    model = _table_model()
    model.table.data[..., EOS] = -100.0
    out = greedy_decode(model, torch.tensor([[0]]), torch.tensor([1]), max_len=4)
    assert len(out[0]) == 4


def test_decoding_restores_training_mode_and_does_not_track_gradients():
    model = _rnn().train()
    src, lens = _src()
    greedy_decode(model, src, lens, max_len=3)
    beam_search(model, src, lens, max_len=3)
    assert model.training
    assert all(p.grad is None for p in model.parameters())


# --- beam search ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FACTORIES)
@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_beam_size_one_is_greedy(name, alpha):
    model = FACTORIES[name](1)
    src, lens = _src(seed=1, B=6)
    assert beam_search(model, src, lens, max_len=10, beam_size=1, length_penalty=alpha) == greedy_decode(
        model, src, lens, max_len=10)


def _all_hypotheses(V, max_len):
    """Every finished output: up to max_len - 1 tokens then eos, or max_len tokens without eos."""
    non_eos = [v for v in range(V) if v != EOS]
    for n in range(max_len):
        for body in itertools.product(non_eos, repeat=n):
            yield list(body) + [EOS]
    yield from (list(body) for body in itertools.product(non_eos, repeat=max_len))


def _score(model, src, lens, hyp):
    """log P(hyp | src) by teacher forcing, written out independently of course_lib.decoding.search."""
    tgt_in = torch.tensor([[BOS] + hyp[:-1]])
    with torch.no_grad():
        logp = F.log_softmax(model(src, lens, tgt_in), dim=-1)[0]
    return sum(float(logp[t, tok]) for t, tok in enumerate(hyp))


def _exhaustive_best(model, src, lens, V, max_len, alpha, norm):
    def penalty(n):
        return ((5 + n) / 6) ** alpha if norm == "gnmt" else n ** alpha

    best = max(_all_hypotheses(V, max_len), key=lambda h: _score(model, src, lens, h) / penalty(len(h)))
    return best[:-1] if best[-1] == EOS else best


MODELS = {
    "rnn": lambda: _rnn(V=5, seed=4),
    "table": lambda: _table_model(seed=5),
    # Flat distributions: there the length penalty changes which hypothesis wins.
    "flat-table": lambda: _table_model(seed=6, n_src=6, scale=0.5),
    "transformer": lambda: _transformer(seed=4, V=5),
}
EXHAUSTIVE_SRC = torch.tensor([[0, 4], [1, 3], [2, 5], [0, 1], [1, 1], [2, 2]])  # table models read src[:, 0]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("alpha, norm", [(0.0, "gnmt"), (0.6, "gnmt"), (4.0, "gnmt"), (1.0, "power")])
def test_wide_beam_finds_the_exhaustive_search_optimum(name, alpha, norm):
    model, V, max_len = MODELS[name](), 5, 3
    src, lens = EXHAUSTIVE_SRC, torch.tensor([2, 1, 2, 2, 1, 2])
    found = beam_search(model, src, lens, max_len=max_len, beam_size=V ** (max_len - 1), length_penalty=alpha,
                        length_norm=norm)
    for b in range(len(src)):
        assert found[b] == _exhaustive_best(model, src[b : b + 1], lens[b : b + 1], V, max_len, alpha, norm)


def test_length_penalty_changes_the_exhaustive_optimum_on_the_flat_model():
    # Guards the test above: with flat distributions normalisation must matter somewhere.
    model, src, lens = MODELS["flat-table"](), EXHAUSTIVE_SRC, torch.ones(6, dtype=torch.long)
    for alpha, norm in [(4.0, "gnmt"), (1.0, "power")]:
        assert any(
            _exhaustive_best(model, src[b : b + 1], lens[b : b + 1], 5, 3, 0.0, "gnmt")
            != _exhaustive_best(model, src[b : b + 1], lens[b : b + 1], 5, 3, alpha, norm)
            for b in range(len(src))
        ), (alpha, norm)


def test_beam_search_never_scores_worse_than_greedy_with_a_full_beam():
    # With beam_size >= V**(max_len-1) nothing is pruned, so the result is at least as likely.
    model = _rnn(V=5, seed=7)
    src, lens = _src(seed=7, B=4)
    beam = beam_search(model, src, lens, max_len=3, beam_size=25, length_penalty=0.0)
    greedy = greedy_decode(model, src, lens, max_len=3)

    def full(h):
        return h + [EOS] if len(h) < 3 else h

    beam_lp = sequence_log_prob(model, src, lens, [full(h) for h in beam])
    greedy_lp = sequence_log_prob(model, src, lens, [full(h) for h in greedy])
    assert torch.all(beam_lp >= greedy_lp - 1e-5)


@pytest.mark.parametrize("name", FACTORIES)
def test_batched_beam_search_equals_one_sentence_at_a_time(name):
    model = FACTORIES[name](8)
    src, lens = _src(seed=8, B=5)
    batched = beam_search(model, src, lens, max_len=8, beam_size=3)
    assert batched == [beam_search(model, src[b : b + 1], lens[b : b + 1], max_len=8, beam_size=3)[0]
                       for b in range(5)]


def test_sequence_log_prob_matches_the_chain_rule():
    model = _table_model(seed=9)
    src, lens = torch.tensor([[1]]), torch.tensor([1])
    hyp = [3, 4, EOS]
    expected = sum(float(F.log_softmax(model.table.detach()[1, prev, t], -1)[tok])
                   for t, (prev, tok) in enumerate(zip([BOS, 3, 4], hyp, strict=True)))
    assert float(sequence_log_prob(model, src, lens, [hyp])[0]) == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(max_len=0), ValueError, "max_len"),
        (dict(beam_size=0), ValueError, "beam_size"),
        (dict(length_penalty=-1.0), ValueError, "length_penalty"),
        (dict(length_norm="avg"), ValueError, "length_norm"),
        (dict(eos=-1), ValueError, "eos"),
    ],
)
def test_beam_search_rejects_bad_arguments(kwargs, error, match):
    model = _rnn()
    src, lens = _src()
    args = dict(max_len=3) | kwargs
    with pytest.raises(error, match=match):
        beam_search(model, src, lens, **args)


def test_greedy_rejects_bad_sources():
    model = _rnn()
    src, lens = _src()
    with pytest.raises(TypeError, match="src must hold token ids"):
        greedy_decode(model, src.float(), lens, max_len=3)
    with pytest.raises(ValueError, match="src_valid_lens must have shape"):
        greedy_decode(model, src, lens[:1], max_len=3)
    with pytest.raises(ValueError, match="src must be 2-D"):
        greedy_decode(model, src[0], lens, max_len=3)


# --- translate -----------------------------------------------------------------------------------


def test_translate_batches_like_one_at_a_time_and_keeps_blank_lines():
    vocab = Vocab.build(["abcde"])
    model = _rnn(V=len(vocab), seed=10)
    assert model.config.src_vocab_size == len(vocab)
    sentences = ["abc", "", "dea", "   ", "bbbbbb", "e"]
    together = translate(model, sentences, vocab, vocab, "char", max_len=6, batch_size=4)
    alone = [translate(model, [s], vocab, vocab, "char", max_len=6)[0] for s in sentences]
    assert together == alone
    assert together[1] == "" and together[3] == ""
    assert all(set(t) <= set("abcde") for t in together)
    assert any(together[i] for i in (0, 2, 4, 5))
    beam = translate(model, sentences, vocab, vocab, "char", decoding="beam", beam_size=1, max_len=6)
    assert beam == together


def test_translate_word_level_normalises_like_the_data_set():
    # "Hi!" -> "hi !" -> ["hi", "!"]: known words, so the source holds no <unk>.
    src_vocab = Vocab.build([["hi", "!", "go", "."]])
    tgt_vocab = Vocab.build([["salut", "!", "va"]])
    torch.manual_seed(0)
    model = BahdanauSeq2Seq(Seq2SeqRNNConfig(len(src_vocab), len(tgt_vocab), 4, 8, 1, 0.0)).eval()
    seen = []
    encode = model.encode
    model.encode = lambda src, lens: seen.append(src.clone()) or encode(src, lens)
    out = translate(model, ["Hi!", "Go."], src_vocab, tgt_vocab, "word", max_len=4)
    assert seen[0].tolist() == [[src_vocab["hi"], src_vocab["!"], src_vocab.eos],
                                [src_vocab["go"], src_vocab["."], src_vocab.eos]]
    assert all(set(o.split()) <= {"salut", "!", "va", "<unk>"} for o in out)


def test_translate_rejects_bad_arguments():
    vocab = Vocab.build(["ab"])
    model = _rnn(V=len(vocab))
    with pytest.raises(TypeError, match="single str"):
        translate(model, "ab", vocab, vocab, "char")
    with pytest.raises(ValueError, match="decoding"):
        translate(model, ["ab"], vocab, vocab, "char", decoding="sample")
    with pytest.raises(ValueError, match="tokenizer"):
        translate(model, ["ab"], vocab, vocab, "bpe")
    with pytest.raises(TypeError, match=r"sentences\[1\]"):
        translate(model, ["ab", 3], vocab, vocab, "char")


# --- a narrow beam against an independent beam search --------------------------------------------


def _reference_beam(model, src, lens, V, max_len, beam_size, alpha, norm, prune_normalised=True):
    """Beam search on one sentence, written with Python lists, independently of course_lib.decoding.search.

    A hypothesis is (tokens, log-probability, finished). At every step each live hypothesis is
    extended by every token; a finished one is carried over unchanged. The ``beam_size`` best
    candidates by the length-normalised score survive (``prune_normalised=False``: by the raw score,
    the normalisation applied only at the final pick, the bug this guards against).
    """

    def penalty(n):
        return ((5 + n) / 6) ** alpha if norm == "gnmt" else max(n, 1) ** alpha

    def normalised(h):
        return h[1] / penalty(len(h[0]))

    beams = [([], 0.0, False)]
    for _ in range(max_len):
        candidates = []
        for tokens, score, done in beams:
            if done:
                candidates.append((tokens, score, True))
                continue
            tgt_in = torch.tensor([[BOS] + tokens])
            with torch.no_grad():
                logp = F.log_softmax(model(src, lens, tgt_in)[0, -1], dim=-1)
            candidates += [(tokens + [v], score + float(logp[v]), v == EOS) for v in range(V)]
        key = normalised if prune_normalised else (lambda h: h[1])
        beams = sorted(candidates, key=key, reverse=True)[:beam_size]
        if all(done for _, _, done in beams):
            break
    best = max(beams, key=normalised)[0]
    return best[:-1] if best and best[-1] == EOS else best


NARROW = [(2, 1.0, "power"), (2, 2.0, "gnmt"), (3, 1.0, "power"), (3, 3.0, "gnmt")]


def _narrow_beam_cases():
    # 5 tokens and 5 steps: a beam of 2 or 3 prunes a lot, and where it prunes decides which
    # hypothesis wins (seed and scale chosen so that it does in every case; see the next test).
    model = _table_model(seed=7, n_src=8, V=5, T=7, scale=1.0)
    src = torch.arange(8)[:, None].expand(8, 2).contiguous()
    return model, src, torch.full((8,), 2)


@pytest.mark.parametrize("beam_size, alpha, norm", NARROW)
def test_narrow_beam_equals_a_reference_beam_that_prunes_by_the_normalised_score(beam_size, alpha, norm):
    model, src, lens = _narrow_beam_cases()
    found = beam_search(model, src, lens, max_len=5, beam_size=beam_size, length_penalty=alpha, length_norm=norm)
    expected = [_reference_beam(model, src[b : b + 1], lens[b : b + 1], 5, 5, beam_size, alpha, norm)
                for b in range(len(src))]
    assert found == expected


def test_pruning_by_the_normalised_score_matters_on_the_narrow_beam_cases():
    # Guards the test above: on these cases, pruning by the raw score gives other answers.
    model, src, lens = _narrow_beam_cases()
    for beam_size, alpha, norm in NARROW:
        differ = 0
        for b in range(len(src)):
            args = (model, src[b : b + 1], lens[b : b + 1], 5, 5, beam_size, alpha, norm)
            differ += _reference_beam(*args) != _reference_beam(*args, prune_normalised=False)
        assert differ >= 1, (beam_size, alpha, norm)


# --- the decoding budget and over-long sources ---------------------------------------------------


def test_default_max_len_is_twice_the_longest_source_plus_ten_capped_by_the_model():
    from course_lib.decoding.search import default_max_len

    lens = torch.tensor([3, 7, 5])
    assert default_max_len(nn.Linear(1, 1), lens) == 2 * 7 + 10
    assert default_max_len(_transformer(), lens) == 24  # config.max_len = 64 does not bind
    small = transformer.Transformer(transformer.TransformerConfig(9, 7, num_hiddens=8, ffn_num_hiddens=8,
                                                                  num_heads=2, max_len=20))
    assert default_max_len(small, lens) == 20
    assert default_max_len(nn.Linear(1, 1), torch.zeros(0, dtype=torch.long)) == 10


def test_translate_cuts_a_source_longer_than_the_model_covers():
    vocab = Vocab.build([list("abcdefgh")])
    torch.manual_seed(0)
    config = transformer.TransformerConfig(len(vocab), len(vocab), num_hiddens=8, ffn_num_hiddens=16, num_heads=2,
                                           num_enc_layers=1, num_dec_layers=1, dropout=0.0, max_len=6)
    model = transformer.Transformer(config).eval()
    long_sentence = "abcdefghabcdefgh"  # 16 characters + <eos> > max_len = 6
    # Cut to max_len - 1 = 5 characters and its <eos>: the same as translating the first 5 characters.
    assert translate(model, [long_sentence], vocab, vocab, "char", max_len=4) == translate(
        model, [long_sentence[:5]], vocab, vocab, "char", max_len=4)
