"""Checkpoints: exact round trips, safe loading, and clear errors for damaged or mismatched files."""

import os

import pytest
import torch

from course_lib.data import Vocab
from course_lib.models import transformer
from course_lib.models.rnn import BahdanauSeq2Seq, Seq2SeqRNN, Seq2SeqRNNConfig
from course_lib.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint


def _vocabs():
    src = Vocab.build([list("march 3, 2001"), list("3/4/99")])
    tgt = Vocab.build([list("2001-03-03"), list("1999-04-03")])
    return src, tgt


def _rnn(cls=BahdanauSeq2Seq, seed=0):
    src, tgt = _vocabs()
    torch.manual_seed(seed)
    config = Seq2SeqRNNConfig(len(src), len(tgt), embed_size=8, hidden_size=12, num_layers=2, dropout=0.1)
    return cls(config), src, tgt


def _transformer():
    src, tgt = _vocabs()
    torch.manual_seed(0)
    config = transformer.TransformerConfig(len(src), len(tgt), num_hiddens=16, ffn_num_hiddens=32, num_heads=2,
                                           num_enc_layers=1, num_dec_layers=1, dropout=0.1, max_len=32)
    return transformer.Transformer(config), src, tgt


MAKERS = {"bahdanau": lambda: _rnn(BahdanauSeq2Seq), "plain-rnn": lambda: _rnn(Seq2SeqRNN),
          "transformer": _transformer}


def test_the_attention_kernels_named_in_the_config_survive_a_round_trip(tmp_path):
    src, tgt = _vocabs()
    config = transformer.TransformerConfig(len(src), len(tgt), num_hiddens=16, ffn_num_hiddens=32, num_heads=2,
                                           num_enc_layers=1, num_dec_layers=1, dropout=0.0, kernel="sparse",
                                           kernel_options={"pattern": "fixed", "stride": 3, "c": 1},
                                           cross_kernel="explicit")
    path = save_checkpoint(tmp_path / "m.pt", transformer.Transformer(config), src, tgt)
    loaded, *_ = load_checkpoint(path, device="cpu")
    assert loaded.config == config
    assert repr(loaded.encoder.blocks[0].attention.kernel) == "SparseKernel('fixed', stride=3, c=1)"
    assert repr(loaded.decoder.blocks[0].self_attention.kernel) == "SparseKernel('fixed', stride=3, c=1)"
    assert repr(loaded.decoder.blocks[0].cross_attention.kernel) == "explicit_kernel"


@pytest.mark.parametrize("name", MAKERS)
def test_round_trip_rebuilds_the_same_model_and_vocabularies(tmp_path, name):
    model, src_vocab, tgt_vocab = MAKERS[name]()
    meta = {"task": "dates", "tokenizer": "char", "metrics": {"bleu": 12.5, "n": 3}, "history": [1.0, 0.5]}
    path = save_checkpoint(tmp_path / "sub" / "m.pt", model, src_vocab, tgt_vocab, meta=meta)
    loaded, src2, tgt2, meta2 = load_checkpoint(path, device="cpu")
    assert type(loaded) is type(model) and loaded.config == model.config
    assert not loaded.training
    assert meta2 == meta
    assert src2.to_dict() == src_vocab.to_dict() and tgt2.to_dict() == tgt_vocab.to_dict()
    for (k, v), (k2, v2) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert k == k2 and torch.equal(v, v2)
    src = torch.tensor([[4, 5, 6, 2], [7, 2, 0, 0]])
    lens = torch.tensor([4, 2])
    tgt_in = torch.tensor([[1, 4, 5], [1, 6, 0]])
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(src, lens, tgt_in), model(src, lens, tgt_in))


def test_checkpoint_content_is_plain_data_for_a_weights_only_load(tmp_path):
    model, src, tgt = _rnn()
    save_checkpoint(tmp_path / "m.pt", model, src, tgt)
    content = torch.load(tmp_path / "m.pt", weights_only=True)
    assert content["model_class"] == "BahdanauSeq2Seq"
    assert content["config"]["hidden_size"] == 12
    assert isinstance(content["format_version"], int)
    assert os.listdir(tmp_path) == ["m.pt"]  # no temporary file left behind


def test_truncated_file_is_a_checkpoint_error(tmp_path):
    model, src, tgt = _rnn()
    path = save_checkpoint(tmp_path / "m.pt", model, src, tgt)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupted or truncated"):
        load_checkpoint(path, device="cpu")


def test_random_bytes_are_a_checkpoint_error(tmp_path):
    path = tmp_path / "noise.pt"
    path.write_bytes(torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(0),
                                   dtype=torch.uint8).numpy().tobytes())
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_checkpoint(path, device="cpu")


def test_other_torch_files_are_rejected_by_format(tmp_path):
    torch.save({"weights": torch.zeros(3)}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a course_lib seq2seq checkpoint"):
        load_checkpoint(tmp_path / "other.pt", device="cpu")


def _resave(tmp_path, edit):
    model, src, tgt = _rnn()
    path = save_checkpoint(tmp_path / "m.pt", model, src, tgt)
    content = torch.load(path, weights_only=True)
    edit(content)
    torch.save(content, path)
    return path


def test_unknown_format_version_is_named(tmp_path):
    path = _resave(tmp_path, lambda c: c.update(format_version=99))
    with pytest.raises(CheckpointError, match="format version 99"):
        load_checkpoint(path, device="cpu")


def test_unknown_model_class_is_named(tmp_path):
    path = _resave(tmp_path, lambda c: c.update(model_class="GPT5"))
    with pytest.raises(CheckpointError, match="unknown class 'GPT5'"):
        load_checkpoint(path, device="cpu")


def test_state_dict_with_a_missing_key_is_named(tmp_path):
    path = _resave(tmp_path, lambda c: c["state_dict"].pop("decoder.dense.weight"))
    with pytest.raises(CheckpointError, match=r"missing: decoder\.dense\.weight"):
        load_checkpoint(path, device="cpu")


def test_state_dict_that_does_not_fit_the_config_is_named(tmp_path):
    # Weights of a wider model under the config of a narrower one.
    path = _resave(tmp_path, lambda c: c["config"].update(hidden_size=10))
    with pytest.raises(CheckpointError, match=r"wrong shape: .*\(checkpoint \(.*12.*\), model \(.*10.*\)\)"):
        load_checkpoint(path, device="cpu")


def test_config_that_cannot_build_a_model_is_a_checkpoint_error(tmp_path):
    path = _resave(tmp_path, lambda c: c["config"].update(dropout=3.0))
    with pytest.raises(CheckpointError, match="config cannot build a model"):
        load_checkpoint(path, device="cpu")
    path = _resave(tmp_path, lambda c: c["config"].update(colour="blue"))
    with pytest.raises(CheckpointError, match="config cannot build a model"):
        load_checkpoint(path, device="cpu")


def test_vocabulary_that_does_not_fit_the_model_is_a_checkpoint_error(tmp_path):
    src, _ = _vocabs()
    path = _resave(tmp_path, lambda c: c.update(tgt_vocab=src.to_dict()))
    with pytest.raises(CheckpointError, match="tgt vocabulary has"):
        load_checkpoint(path, device="cpu")


def test_missing_file_is_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_checkpoint(tmp_path / "nope.pt")


def test_checkpoint_error_is_a_value_error():
    assert issubclass(CheckpointError, ValueError)


def test_save_rejects_what_it_cannot_store(tmp_path):
    model, src, tgt = _rnn()
    with pytest.raises(TypeError, match=r"meta\['when'\] holds a object"):
        save_checkpoint(tmp_path / "m.pt", model, src, tgt, meta={"when": object()})
    with pytest.raises(TypeError, match="meta must be a dict"):
        save_checkpoint(tmp_path / "m.pt", model, src, tgt, meta=[1])
    with pytest.raises(TypeError, match="cannot checkpoint a Linear"):
        save_checkpoint(tmp_path / "m.pt", torch.nn.Linear(2, 2), src, tgt)
    assert not (tmp_path / "m.pt").exists()


def _off_default(config_class, **sizes):
    """A config whose every field differs from its default (checked), so a field a checkpoint drops shows."""
    import dataclasses

    config = config_class(**sizes)
    for f in dataclasses.fields(config_class):
        if f.default is not dataclasses.MISSING:
            assert getattr(config, f.name) != f.default, f.name
    return config


OFF_DEFAULT = {
    "transformer": lambda n_src, n_tgt: transformer.Transformer(_off_default(
        transformer.TransformerConfig, src_vocab_size=n_src, tgt_vocab_size=n_tgt, num_hiddens=12,
        ffn_num_hiddens=20, num_heads=3, num_enc_layers=1, num_dec_layers=3, dropout=0.3, max_len=40,
        norm_first=True, positional="learned", pad_id=3, num_kv_heads=1, kernel="sliding_window",
        kernel_options={"window": 5, "inner": "explicit"}, cross_kernel="fused")),
    "bahdanau": lambda n_src, n_tgt: BahdanauSeq2Seq(_off_default(
        Seq2SeqRNNConfig, src_vocab_size=n_src, tgt_vocab_size=n_tgt, embed_size=5, hidden_size=7, num_layers=3,
        dropout=0.3, pad_id=3)),
}


@pytest.mark.parametrize("name", OFF_DEFAULT)
def test_round_trip_keeps_every_config_field_off_its_default(tmp_path, name):
    src_vocab, tgt_vocab = _vocabs()
    torch.manual_seed(0)
    model = OFF_DEFAULT[name](len(src_vocab), len(tgt_vocab))
    path = save_checkpoint(tmp_path / "m.pt", model, src_vocab, tgt_vocab)
    loaded, _, _, _ = load_checkpoint(path, device="cpu")
    assert loaded.config == model.config
    for (k, v), (k2, v2) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert k == k2 and torch.equal(v, v2)
    dropouts = {m.p for m in loaded.modules() if isinstance(m, torch.nn.Dropout)}
    assert dropouts <= {0.3}


def test_a_gru_checkpoint_saved_before_the_hidden_size_rename_still_loads(tmp_path):
    model, src_vocab, tgt_vocab = _rnn()
    path = save_checkpoint(tmp_path / "m.pt", model, src_vocab, tgt_vocab)
    content = torch.load(path, weights_only=True)
    content["config"]["num_hiddens"] = content["config"].pop("hidden_size")
    torch.save(content, path)
    loaded, _, _, _ = load_checkpoint(path, device="cpu")
    assert loaded.config == model.config


# --- language-model checkpoints ----------------------------------------------------------------------


def _lm(positional="rotary", tie=True, **config):
    from course_lib import DecoderLM, DecoderLMConfig
    from course_lib.data import LMData, generated_sentences

    data = LMData.from_sentences(generated_sentences(200, seed=4), vocab_size=280)
    torch.manual_seed(0)
    config = DecoderLMConfig(data.vocab_size, num_hiddens=16, num_heads=4, num_kv_heads=2, num_layers=2,
                             positional=positional, tie_embeddings=tie, max_len=32, dropout=0.1, **config)
    return DecoderLM(config), data.tokenizer


@pytest.mark.parametrize("positional, tie", [("rotary", True), ("alibi", False), ("none", True),
                                             ("sinusoidal", False), ("learned", True)])
def test_lm_round_trip_rebuilds_the_same_model_and_tokenizer(tmp_path, positional, tie):
    from course_lib.training.checkpoint import load_lm_checkpoint, save_lm_checkpoint

    model, tokenizer = _lm(positional, tie)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))  # not the initialisation: the weights must come from the file
    path = save_lm_checkpoint(tmp_path / "lm.pt", model, tokenizer, meta={"context": 16, "perplexity": 12.5})
    loaded, tokenizer2, meta = load_lm_checkpoint(path, device="cpu")
    assert loaded.config == model.config and meta == {"context": 16, "perplexity": 12.5} and not loaded.training
    assert tokenizer2.vocab == tokenizer.vocab and tokenizer2.to_json() == tokenizer.to_json()
    assert (loaded.lm_head.weight is loaded.embedding.weight) == tie
    tokens = torch.randint(0, 280, (2, 9), generator=torch.Generator().manual_seed(0))
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(tokens), model(tokens), rtol=0, atol=0)
    content = torch.load(path, weights_only=True)  # plain data for a safe load
    assert content["format"] == "course_lib.lm" and content["format_version"] == 1


@pytest.mark.parametrize("rope_scaling", [
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8, "beta_fast": 16, "truncate": False},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 8},
])
def test_lm_round_trip_keeps_the_rope_scaling(tmp_path, rope_scaling):
    from course_lib.training.checkpoint import load_lm_checkpoint, save_lm_checkpoint

    model, tokenizer = _lm(rope_scaling=rope_scaling, rope_base=500000.0)
    path = save_lm_checkpoint(tmp_path / "lm.pt", model, tokenizer)
    loaded, _, _ = load_lm_checkpoint(path, device="cpu")
    assert loaded.config.rope_scaling == rope_scaling and loaded.config == model.config
    assert loaded.blocks[0].attention.rotary.scaling == rope_scaling
    tokens = torch.randint(0, 280, (2, 30), generator=torch.Generator().manual_seed(0))
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(tokens), model(tokens), rtol=0, atol=0)
        unscaled, _ = _lm(rope_base=500000.0)
        unscaled.load_state_dict(model.state_dict())
        assert not torch.allclose(unscaled.eval()(tokens), model(tokens))  # the stored scaling is the one used


def test_a_checkpoint_with_a_malformed_rope_scaling_is_refused_naming_the_field(tmp_path):
    from course_lib.training.checkpoint import load_lm_checkpoint

    def edit(content):
        content["config"]["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}

    with pytest.raises(CheckpointError, match=r"rope_scaling with rope_type 'yarn' needs "
                                              r"\['original_max_position_embeddings'\]"):
        load_lm_checkpoint(_lm_resave(tmp_path, edit), device="cpu")


def test_each_loader_names_the_other_for_the_other_kind_of_file(tmp_path):
    from course_lib.training.checkpoint import load_lm_checkpoint, save_lm_checkpoint

    model, tokenizer = _lm()
    lm_path = save_lm_checkpoint(tmp_path / "lm.pt", model, tokenizer)
    rnn, src, tgt = _rnn()
    s2s_path = save_checkpoint(tmp_path / "s2s.pt", rnn, src, tgt)
    with pytest.raises(CheckpointError, match="language-model checkpoint: load it with load_lm_checkpoint"):
        load_checkpoint(lm_path, device="cpu")
    with pytest.raises(CheckpointError, match="seq2seq checkpoint: load it with load_checkpoint"):
        load_lm_checkpoint(s2s_path, device="cpu")
    torch.save({"weights": torch.zeros(3)}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a course_lib language-model checkpoint"):
        load_lm_checkpoint(tmp_path / "other.pt", device="cpu")


def test_a_seq2seq_file_in_the_first_format_still_loads(tmp_path):
    """The file layout of course_lib 0.1 before the language models, written here by hand."""
    model, src, tgt = _rnn()
    import dataclasses

    torch.save({"format": "course_lib.decoding.protocol", "format_version": 1, "model_class": "BahdanauSeq2Seq",
                "config": dataclasses.asdict(model.config), "state_dict": model.state_dict(),
                "src_vocab": src.to_dict(), "tgt_vocab": tgt.to_dict(), "meta": {"task": "dates"}},
               tmp_path / "old.pt")
    loaded, _, _, meta = load_checkpoint(tmp_path / "old.pt", device="cpu")
    assert loaded.config == model.config and meta == {"task": "dates"}


def _lm_resave(tmp_path, edit):
    from course_lib.training.checkpoint import save_lm_checkpoint

    model, tokenizer = _lm()
    path = save_lm_checkpoint(tmp_path / "lm.pt", model, tokenizer)
    content = torch.load(path, weights_only=True)
    edit(content)
    torch.save(content, path)
    return path


@pytest.mark.parametrize("edit, words", [
    (lambda c: c.update(format_version=7), "format version 7"),
    (lambda c: c.update(model_class="GPT5"), "unknown class 'GPT5'"),
    (lambda c: c.pop("tokenizer"), "lacks the entries"),
    (lambda c: c.update(tokenizer="{not json"), "tokenizer is malformed"),
    (lambda c: c["config"].update(vocab_size=300), "wrong shape"),
    (lambda c: c["config"].update(positional="xpos"), "config cannot build a model"),
    (lambda c: c["state_dict"].pop("blocks.0.ffn.W_up.weight"), r"missing: blocks\.0\.ffn\.W_up\.weight"),
])
def test_damaged_lm_checkpoints_are_named_checkpoint_errors(tmp_path, edit, words):
    from course_lib.training.checkpoint import load_lm_checkpoint

    with pytest.raises(CheckpointError, match=words):
        load_lm_checkpoint(_lm_resave(tmp_path, edit), device="cpu")


def test_save_lm_checkpoint_refuses_what_does_not_fit(tmp_path):
    from course_lib.data import SubwordTokenizer
    from course_lib.training.checkpoint import save_lm_checkpoint

    model, tokenizer = _lm()
    with pytest.raises(TypeError, match="DecoderLM"):
        save_lm_checkpoint(tmp_path / "x.pt", torch.nn.Linear(2, 2), tokenizer)
    with pytest.raises(TypeError, match="SubwordTokenizer"):
        save_lm_checkpoint(tmp_path / "x.pt", model, "tokenizer")
    other = SubwordTokenizer.train(["a b c"], vocab_size=300)
    with pytest.raises(ValueError, match="vocab_size=280"):
        save_lm_checkpoint(tmp_path / "x.pt", model, other)
    assert not (tmp_path / "x.pt").exists()
