"""GRU encoder--decoders: the batched models against per-sentence reference loops built from torch parts."""

import pytest
import torch
import torch.nn.functional as F

from course_lib import recording_attention
from course_lib.models.rnn import BahdanauSeq2Seq, Seq2SeqRNN, Seq2SeqRNNConfig

SRC_V, TGT_V = 11, 9


def _config(**kw):
    base = dict(src_vocab_size=SRC_V, tgt_vocab_size=TGT_V, embed_size=6, hidden_size=8, num_layers=2,
                dropout=0.0)
    base.update(kw)
    return Seq2SeqRNNConfig(**base)


def _model(cls, seed=0, **kw):
    torch.manual_seed(seed)
    return cls(_config(**kw)).eval()


def _batch(seed=0, lens=(5, 2, 4, 1), T=4):
    g = torch.Generator().manual_seed(seed)
    S = max(lens)
    # Padding positions hold random real ids (not pad): the model must ignore them anyway.
    src = torch.randint(3, SRC_V, (len(lens), S), generator=g)
    tgt_in = torch.randint(1, TGT_V, (len(lens), T), generator=g)
    return src, torch.tensor(lens), tgt_in


def _reference_bahdanau(model, src_tokens, tgt_tokens):
    """One sentence, no padding: nn.GRU calls and the additive attention written out by hand."""
    enc, dec = model.encoder, model.decoder
    outputs, hidden = enc.rnn(enc.embedding(torch.tensor([src_tokens])))  # (1, S, H), (L, 1, H)
    keys = outputs[0]  # (S, H)
    att = dec.attention
    logits = []
    for tok in tgt_tokens:
        q = hidden[-1, 0]  # (H,)
        scores = torch.tanh(q @ att.W_q.weight.T + keys @ att.W_k.weight.T) @ att.w_v.weight[0]  # (S,)
        context = torch.softmax(scores, dim=0) @ keys  # (H,)
        x = torch.cat([context, dec.embedding.weight[tok]]).view(1, 1, -1)
        out, hidden = dec.rnn(x, hidden)
        logits.append(dec.dense(out[0, 0]))
    return torch.stack(logits)


def _reference_plain(model, src_tokens, tgt_tokens):
    """One sentence, no padding: the encoder's last state is both the initial state and the context."""
    enc, dec = model.encoder, model.decoder
    _, hidden = enc.rnn(enc.embedding(torch.tensor([src_tokens])))
    emb = dec.embedding(torch.tensor([tgt_tokens]))  # (1, T, E)
    x = torch.cat([emb, hidden[-1][:, None].expand(-1, len(tgt_tokens), -1)], dim=-1)
    out, _ = dec.rnn(x, hidden)
    return dec.dense(out[0])


@pytest.mark.parametrize("cls, reference", [(BahdanauSeq2Seq, _reference_bahdanau), (Seq2SeqRNN, _reference_plain)])
@pytest.mark.parametrize("num_layers", [1, 2])
def test_batched_logits_match_per_sentence_reference(cls, reference, num_layers):
    model = _model(cls, num_layers=num_layers)
    src, lens, tgt_in = _batch()
    with torch.no_grad():
        logits = model(src, lens, tgt_in)
        assert logits.shape == (4, 4, TGT_V)
        for b in range(4):
            expected = reference(model, src[b, : lens[b]].tolist(), tgt_in[b].tolist())
            torch.testing.assert_close(logits[b], expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cls", [BahdanauSeq2Seq, Seq2SeqRNN])
def test_tokens_past_the_source_length_do_not_change_the_logits(cls):
    model = _model(cls)
    src, lens, tgt_in = _batch()
    other = src.clone()
    other[:, 1:] = torch.where(torch.arange(1, src.shape[1]) < lens[:, None], src[:, 1:], 0)
    with torch.no_grad():
        torch.testing.assert_close(model(src, lens, tgt_in), model(other, lens, tgt_in))
        # ... nor does extra padding added to the whole batch.
        padded = torch.cat([src, torch.zeros(4, 3, dtype=torch.long)], dim=1)
        torch.testing.assert_close(model(src, lens, tgt_in), model(padded, lens, tgt_in), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("cls", [BahdanauSeq2Seq, Seq2SeqRNN])
def test_incremental_decode_steps_match_teacher_forcing(cls):
    model = _model(cls, seed=1)
    src, lens, tgt_in = _batch(seed=1, T=6)
    with torch.no_grad():
        full = model(src, lens, tgt_in)
        state = model.init_decoder_state(model.encode(src, lens), lens)
        for t in range(tgt_in.shape[1]):
            logits, state = model.decode_step(tgt_in[:, t : t + 1], state)
            torch.testing.assert_close(logits, full[:, t], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("cls", [BahdanauSeq2Seq, Seq2SeqRNN])
def test_reorder_state_continues_the_selected_rows(cls):
    model = _model(cls, seed=2)
    src, lens, tgt_in = _batch(seed=2)
    index = torch.tensor([2, 0, 2, 3, 1])
    with torch.no_grad():
        state = model.init_decoder_state(model.encode(src, lens), lens)
        _, state = model.decode_step(tgt_in[:, :1], state)
        logits, _ = model.decode_step(tgt_in[index, 1:2], model.reorder_state(state, index))
        expected = model(src[index], lens[index], tgt_in[index, :2])[:, 1]
    torch.testing.assert_close(logits, expected, atol=1e-6, rtol=1e-6)


def test_attention_weights_are_kept_per_step_and_ignore_padding():
    model = _model(BahdanauSeq2Seq)
    src, lens, tgt_in = _batch(T=3)
    with torch.no_grad():
        model(src, lens, tgt_in)
    assert model.decoder.stacked_attention_weights() is None  # kept only while recording
    with torch.no_grad(), recording_attention(model):
        model(src, lens, tgt_in)
    weights = model.decoder.step_weights
    assert len(weights) == 3 and all(w.shape == (4, 1, src.shape[1]) for w in weights)
    stacked = model.decoder.stacked_attention_weights()
    assert stacked.shape == (4, 3, src.shape[1])
    torch.testing.assert_close(stacked.sum(-1), torch.ones(4, 3))
    beyond = torch.arange(src.shape[1]) >= lens[:, None]  # (B, S)
    assert torch.all(stacked[beyond[:, None, :].expand_as(stacked)] == 0)
    # A new forward starts a new list.
    with torch.no_grad(), recording_attention(model):
        model(src, lens, tgt_in[:, :1])
    assert len(model.decoder.step_weights) == 1


def test_empty_source_gives_finite_logits_and_zero_attention():
    model = _model(BahdanauSeq2Seq)
    src, _, tgt_in = _batch(lens=(3, 3))
    with torch.no_grad(), recording_attention(model):
        logits = model(src, torch.tensor([0, 3]), tgt_in)
    assert torch.isfinite(logits).all()
    assert torch.all(model.decoder.stacked_attention_weights()[0] == 0)


@pytest.mark.parametrize("cls", [BahdanauSeq2Seq, Seq2SeqRNN])
def test_gradients_reach_every_parameter(cls):
    model = _model(cls, dropout=0.1).train()
    src, lens, tgt_in = _batch()
    loss = F.cross_entropy(model(src, lens, tgt_in).flatten(0, 1), tgt_in.flatten())
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_pad_embedding_gets_no_gradient():
    model = _model(BahdanauSeq2Seq).train()
    src, lens, tgt_in = _batch()
    tgt_in[:, -1] = 0
    model(src, lens, tgt_in).sum().backward()
    assert torch.all(model.decoder.embedding.weight.grad[0] == 0)


@pytest.mark.parametrize(
    "kw, error, match",
    [
        (dict(src_vocab_size=0), ValueError, "src_vocab_size"),
        (dict(hidden_size=2.5), TypeError, "hidden_size"),
        (dict(num_layers=0), ValueError, "num_layers"),
        (dict(dropout=1.0), ValueError, "dropout"),
        (dict(pad_id=TGT_V), ValueError, "pad_id"),
        (dict(pad_id=True), TypeError, "pad_id"),
    ],
)
def test_config_rejects_bad_values(kw, error, match):
    with pytest.raises(error, match=match):
        _config(**kw)


def test_config_is_frozen_and_model_requires_it():
    config = _config()
    with pytest.raises(AttributeError):
        config.hidden_size = 3
    with pytest.raises(TypeError, match="Seq2SeqRNNConfig"):
        BahdanauSeq2Seq({"src_vocab_size": 3})


def test_bad_inputs_raise_clear_errors():
    model = _model(BahdanauSeq2Seq)
    src, lens, tgt_in = _batch()
    with pytest.raises(TypeError, match="src must hold token ids as torch.long"):
        model(src.float(), lens, tgt_in)
    with pytest.raises(ValueError, match="src must be 2-D"):
        model(src[0], lens, tgt_in)
    with pytest.raises(ValueError, match=r"src_valid_lens must have shape \(4,\)"):
        model(src, lens[:2], tgt_in)
    with pytest.raises(ValueError, match="src_valid_lens must lie in"):
        model(src, lens + 10, tgt_in)
    with pytest.raises(TypeError, match="src_valid_lens must be an integer tensor"):
        model(src, lens.float() + 0.5, tgt_in)
    with pytest.raises(ValueError, match="outside"):
        model(src + SRC_V, lens, tgt_in)
    with pytest.raises(ValueError, match="same batch size"):
        model(src, lens, tgt_in[:2])
    state = model.init_decoder_state(model.encode(src, lens), lens)
    with pytest.raises(ValueError, match=r"tokens must have shape \(4, 1\)"):
        model.decode_step(tgt_in[:, :2], state)
    with pytest.raises(ValueError, match="index must be 1-D"):
        model.reorder_state(state, torch.zeros(2, 2, dtype=torch.long))
