"""Vocab, padded batches, source-grouped splits and Seq2SeqData (course_lib.data)."""

import json
import random
from collections import Counter

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from course_lib.data import (
    SPECIAL_TOKENS,
    Batch,
    Seq2SeqData,
    Vocab,
    build_references,
    encode_sources,
    make_batch,
    pad_sequences,
    split_by_source,
)

sentences_strategy = st.lists(st.lists(st.sampled_from(list("abcdefgh") + ["xy", "<x>"]), max_size=6), max_size=12)


def reference_order(sentences, min_freq=1, reserved=()):
    """Brute force: count with a loop, keep count >= min_freq, order by (-count, token)."""
    counts = {}
    for s in sentences:
        for t in s:
            counts[t] = counts.get(t, 0) + 1
    kept = [t for t in counts if counts[t] >= min_freq and t not in SPECIAL_TOKENS and t not in reserved]
    kept.sort(key=lambda t: (-counts[t], t))
    return ["<pad>", "<bos>", "<eos>", "<unk>", *reserved, *kept]


# --- Vocab -------------------------------------------------------------------------------------


def test_special_tokens_have_the_fixed_ids():
    v = Vocab.build([["a", "b"]])
    assert (v.pad, v.bos, v.eos, v.unk) == (0, 1, 2, 3)
    assert [v["<pad>"], v["<bos>"], v["<eos>"], v["<unk>"]] == [0, 1, 2, 3]
    assert list(v.idx_to_token[:4]) == ["<pad>", "<bos>", "<eos>", "<unk>"]


def test_tokens_are_ordered_by_count_then_alphabetically():
    v = Vocab.build([["b", "a", "c"], ["c", "b"], ["c"], ["d", "a"]])
    # c:3, a:2, b:2 (a before b), d:1
    assert list(v.idx_to_token) == ["<pad>", "<bos>", "<eos>", "<unk>", "c", "a", "b", "d"]


@given(sentences_strategy, st.integers(1, 3))
def test_vocab_matches_a_brute_force_count(sentences, min_freq):
    v = Vocab.build(sentences, min_freq=min_freq)
    assert list(v.idx_to_token) == reference_order(sentences, min_freq)
    for s in sentences:
        for t, i in zip(s, v.encode(s), strict=True):
            assert i == (v.token_to_idx[t] if t in v else v.unk)


@given(sentences_strategy)
def test_vocab_does_not_depend_on_sentence_order(sentences):
    shuffled = list(sentences)
    random.Random(1).shuffle(shuffled)
    assert Vocab.build(sentences) == Vocab.build(shuffled)


def test_min_freq_sends_rare_tokens_to_unk():
    v = Vocab.build([["a", "a", "b"]], min_freq=2)
    assert "b" not in v and v["b"] == v.unk and v.encode(["a", "b", "zzz"]) == [4, 3, 3]


def test_reserved_tokens_come_right_after_the_specials():
    v = Vocab.build([["z", "z", "a"]], reserved_tokens=["<sep>", "a"])
    assert list(v.idx_to_token) == ["<pad>", "<bos>", "<eos>", "<unk>", "<sep>", "a", "z"]


def test_a_string_counts_as_its_characters():
    assert Vocab.build(["abca"]) == Vocab.build([["a", "b", "c", "a"]])


def test_decode_stops_at_the_first_eos_and_drops_pad_and_bos():
    v = Vocab.build([["a", "b"]])
    a, b = v["a"], v["b"]
    assert v.decode([v.bos, a, v.pad, b, v.eos, a, a]) == ["a", "b"]
    assert v.decode([v.bos, a, v.unk, v.eos]) == ["a", "<unk>"]  # <unk> is a real (unknown) token
    assert v.decode([v.bos, a, v.pad, v.eos], strip_special=False) == ["<bos>", "a", "<pad>"]
    assert v.decode(torch.tensor([a, b, v.eos, b])) == ["a", "b"]
    assert v.decode([]) == []


def test_encode_then_decode_gives_the_tokens_back():
    v = Vocab.build([list("hello world")])
    assert v.decode(v.encode(list("low")) + [v.eos]) == list("low")


def test_to_dict_round_trips_through_json():
    v = Vocab.build([list("abracadabra"), list("é€ ")], min_freq=1, reserved_tokens=["<sep>"])
    w = Vocab.from_dict(json.loads(json.dumps(v.to_dict())))
    assert w == v and list(w.idx_to_token) == list(v.idx_to_token) and len(w) == len(v)
    assert w.encode(list("cab")) == v.encode(list("cab"))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: Vocab.build([["a"]], min_freq=0), ValueError, "min_freq"),
        (lambda: Vocab.build([["a"]], min_freq=1.5), TypeError, "min_freq"),
        (lambda: Vocab.build([["a"]], reserved_tokens=["<eos>"]), ValueError, "special"),
        (lambda: Vocab.build([["a"]], reserved_tokens=["x", "x"]), ValueError, "twice"),
        (lambda: Vocab.build([["a"]], reserved_tokens="<sep>"), TypeError, "reserved_tokens"),
        (lambda: Vocab.build([["a", 3]]), TypeError, "str"),
        (lambda: Vocab(["a", "<pad>", "<bos>", "<eos>", "<unk>"]), ValueError, "start with"),
        (lambda: Vocab([*SPECIAL_TOKENS, "a", "a"]), ValueError, "twice"),
        (lambda: Vocab("<pad>"), TypeError, "single str"),
        (lambda: Vocab.from_dict({"tokens": []}), KeyError, "idx_to_token"),
        (lambda: Vocab.from_dict([1]), TypeError, "dict"),
        (lambda: Vocab.build([["a"]]).decode([4, 5]), ValueError, "out of range"),
        (lambda: Vocab.build([["a"]]).decode([-1]), ValueError, "out of range"),
        (lambda: Vocab.build([["a"]]).decode(torch.zeros(2, 2, dtype=torch.long)), ValueError, "1-D"),
        (lambda: Vocab.build([["a"]]).decode(torch.zeros(2)), TypeError, "integer"),
        (lambda: Vocab.build([["a"]]).decode([1.0]), TypeError, "ints"),
        (lambda: Vocab.build([["a"]]).encode("abc"), TypeError, "single str"),
        (lambda: Vocab.build([["a"]])[3], TypeError, "token"),
    ],
)
def test_bad_vocab_arguments_raise(call, error, match):
    with pytest.raises(error, match=match):
        call()


# --- batches -----------------------------------------------------------------------------------


PAIRS = [(list("ab"), list("xyz")), (list("cabd"), list("y")), ([], list("zz")), (list("d"), [])]


def vocabs():
    return Vocab.build([s for s, _ in PAIRS]), Vocab.build([t for _, t in PAIRS])


def test_make_batch_matches_row_by_row_construction():
    sv, tv = vocabs()
    b = make_batch(PAIRS, sv, tv)
    S, T = max(len(s) for s, _ in PAIRS) + 1, max(len(t) for _, t in PAIRS) + 1
    assert b.src.shape == (4, S) and b.tgt_in.shape == b.tgt_out.shape == (4, T)
    assert b.src.dtype == b.tgt_in.dtype == b.src_valid_lens.dtype == b.tgt_valid_lens.dtype == torch.long
    for i, (x, y) in enumerate(PAIRS):
        src = [sv.token_to_idx[t] for t in x] + [2]
        tgt = [tv.token_to_idx[t] for t in y]
        assert b.src[i].tolist() == src + [0] * (S - len(src))
        assert b.tgt_in[i].tolist() == [1, *tgt] + [0] * (T - len(tgt) - 1)
        assert b.tgt_out[i].tolist() == [*tgt, 2] + [0] * (T - len(tgt) - 1)
        assert b.src_valid_lens[i] == len(x) + 1 and b.tgt_valid_lens[i] == len(y) + 1
    assert b.n_truncated == 0 and len(b) == 4


def test_tgt_in_is_tgt_out_shifted_right_by_one():
    sv, tv = vocabs()
    b = make_batch(PAIRS, sv, tv)
    for i in range(len(PAIRS)):
        n = int(b.tgt_valid_lens[i])
        assert b.tgt_in[i, 0] == tv.bos and torch.equal(b.tgt_in[i, 1:n], b.tgt_out[i, : n - 1])
        assert b.tgt_out[i, n - 1] == tv.eos


def test_max_len_cuts_rows_keeps_eos_and_reports_how_many():
    sv, tv = vocabs()
    b = make_batch(PAIRS, sv, tv, max_len=3)
    assert b.src.shape[1] <= 3 and b.tgt_in.shape[1] <= 3
    assert b.n_truncated == 2  # "cabd" (source) and "xyz" (target)
    assert b.src[1].tolist() == [sv["c"], sv["a"], sv.eos] and b.src_valid_lens[1] == 3
    assert b.tgt_out[0].tolist() == [tv["x"], tv["y"], tv.eos] and b.tgt_in[0].tolist() == [tv.bos, tv["x"], tv["y"]]
    assert make_batch(PAIRS, sv, tv, max_len=5).n_truncated == 0


def test_batch_to_moves_every_tensor():
    sv, tv = vocabs()
    b = make_batch(PAIRS, sv, tv, max_len=3).to("meta")
    assert all(t.device.type == "meta" for t in (b.src, b.src_valid_lens, b.tgt_in, b.tgt_out, b.tgt_valid_lens))
    assert b.n_truncated == 2


def test_pad_sequences_and_encode_sources():
    assert pad_sequences([[5], [], [6, 7]], pad_id=0).tolist() == [[5, 0], [0, 0], [6, 7]]
    assert pad_sequences([[], []]).shape == (2, 0)
    sv, _ = vocabs()
    src, lens = encode_sources([list("ab"), list("d")], sv)
    assert src.tolist() == [[sv["a"], sv["b"], 2], [sv["d"], 2, 0]] and lens.tolist() == [3, 2]


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda sv, tv: make_batch([], sv, tv), ValueError, "empty"),
        (lambda sv, tv: make_batch(PAIRS, sv, tv, max_len=1), ValueError, "max_len"),
        (lambda sv, tv: encode_sources("abc", sv), TypeError, "single str"),
        (lambda sv, tv: Batch(torch.zeros(2, 3), torch.zeros(3), torch.zeros(2, 4), torch.zeros(2, 4),
                              torch.zeros(2)), ValueError, "src_valid_lens"),
        (lambda sv, tv: Batch(torch.zeros(2, 3), torch.zeros(2), torch.zeros(2, 4), torch.zeros(2, 5),
                              torch.zeros(2)), ValueError, "tgt_out"),
        (lambda sv, tv: Batch([1], torch.zeros(2), torch.zeros(2, 4), torch.zeros(2, 4), torch.zeros(2)),
         TypeError, "Batch.src"),
    ],
)
def test_bad_batch_arguments_raise(call, error, match):
    sv, tv = vocabs()
    with pytest.raises(error, match=match):
        call(sv, tv)


# --- splits and Seq2SeqData --------------------------------------------------------------------


def toy_pairs(n_sources=50, seed=0):
    """Each source "s<i>" has 1-3 targets; a few exact duplicate pairs."""
    rng = random.Random(seed)
    pairs = []
    for i in range(n_sources):
        for j in range(rng.randint(1, 3)):
            pairs.append(([f"s{i}", "w"], [f"t{i}", f"v{j}"]))
    pairs.append(pairs[0])
    rng.shuffle(pairs)
    return pairs


@given(st.integers(0, 1000), st.sampled_from([0.0, 0.1, 0.2]), st.sampled_from([0.0, 0.1, 0.3]))
def test_split_by_source_keeps_every_source_on_one_side(seed, valid_frac, test_frac):
    pairs = toy_pairs()
    train, valid, test = split_by_source(pairs, valid_frac, test_frac, seed)
    sides = [{tuple(s) for s, _ in part} for part in (train, valid, test)]
    assert not (sides[0] & sides[1]) and not (sides[0] & sides[2]) and not (sides[1] & sides[2])
    assert len(sides[1]) == round(valid_frac * 50) and len(sides[2]) == round(test_frac * 50)
    as_key = lambda part: Counter((tuple(s), tuple(t)) for s, t in part)  # noqa: E731
    assert as_key(train) + as_key(valid) + as_key(test) == as_key(pairs)
    for part, side in zip((train, valid, test), sides, strict=True):  # input order kept within a split
        assert part == [p for p in pairs if tuple(p[0]) in side]


def test_split_by_source_is_reproducible_and_depends_on_the_seed():
    pairs = toy_pairs()
    assert split_by_source(pairs, seed=3) == split_by_source(pairs, seed=3)
    assert split_by_source(pairs, seed=3)[2] != split_by_source(pairs, seed=4)[2]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [({"valid_frac": 1.0}, ValueError, "valid_frac"), ({"test_frac": -0.1}, ValueError, "test_frac"),
     ({"valid_frac": "0.1"}, TypeError, "valid_frac"), ({"valid_frac": 0.5, "test_frac": 0.5}, ValueError,
                                                        "no training data")],
)
def test_bad_split_arguments_raise(kwargs, error, match):
    with pytest.raises(error, match=match):
        split_by_source(toy_pairs(), **kwargs)


def test_build_references_lists_each_distinct_target_once():
    pairs = [(["a"], ["x"]), (["b"], ["y"]), (["a"], ["z"]), (["a"], ["x"])]
    assert build_references(pairs) == {("a",): [["x"], ["z"]], ("b",): [["y"]]}


def make_data():
    train, valid, test = split_by_source(toy_pairs(), 0.2, 0.2, seed=0)
    return Seq2SeqData.from_splits(train, valid, test, tokenizer="word", name="toy")


def test_from_splits_builds_vocabularies_on_train_only():
    data = make_data()
    train_src = {t for s, _ in data.train for t in s}
    test_only = {t for s, _ in data.test for t in s} - train_src
    assert test_only and all(t not in data.src_vocab for t in test_only)
    assert set(data.src_vocab.idx_to_token[4:]) == train_src
    for split in ("train", "valid", "test"):
        assert data.references[split] == build_references(getattr(data, split))
    assert "toy" in repr(data) and len(repr(data)) < 200


def test_batches_visit_every_pair_once_in_order_without_shuffle():
    data = make_data()
    batches = list(data.batches("train", 7))
    assert [len(b) for b in batches] == [7] * (len(data.train) // 7) + ([len(data.train) % 7] if len(data.train) % 7
                                                                         else [])
    expected = make_batch(data.train[:7], data.src_vocab, data.tgt_vocab)
    assert torch.equal(batches[0].src, expected.src) and torch.equal(batches[0].tgt_out, expected.tgt_out)


def rows(batches, vocab):
    return sorted(tuple(vocab.decode(r)) for b in batches for r in b.src)


def test_shuffled_batches_are_a_permutation_reproducible_with_a_generator():
    data = make_data()
    a = list(data.batches("train", 5, shuffle=True, generator=torch.Generator().manual_seed(1)))
    b = list(data.batches("train", 5, shuffle=True, generator=torch.Generator().manual_seed(1)))
    c = list(data.batches("train", 5, shuffle=True, generator=torch.Generator().manual_seed(2)))
    assert all(torch.equal(x.src, y.src) and torch.equal(x.tgt_in, y.tgt_in) for x, y in zip(a, b, strict=True))
    assert any(not torch.equal(x.src, y.src) for x, y in zip(a, c, strict=True))
    assert rows(a, data.src_vocab) == rows(data.batches("train", 5), data.src_vocab)
    order = torch.randperm(len(data.train), generator=torch.Generator().manual_seed(1)).tolist()
    first = make_batch([data.train[i] for i in order[:5]], data.src_vocab, data.tgt_vocab)
    assert torch.equal(a[0].src, first.src)


def test_encode_sources_agrees_with_the_batches():
    data = make_data()
    (batch,) = data.batches("valid", 10**6)
    src, lens = data.encode_sources([s for s, _ in data.valid])
    assert torch.equal(src, batch.src) and torch.equal(lens, batch.src_valid_lens)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [({"split": "dev", "batch_size": 4}, ValueError, "split"), ({"split": "train", "batch_size": 0}, ValueError,
                                                                 "batch_size"),
     ({"split": "train", "batch_size": 4, "max_len": 1}, ValueError, "max_len"),
     ({"split": "train", "batch_size": 4, "generator": 3}, TypeError, "generator")],
)
def test_bad_batches_arguments_raise_at_the_call(kwargs, error, match):
    with pytest.raises(error, match=match):
        make_data().batches(**kwargs)


def test_seq2seq_data_rejects_an_unknown_tokenizer():
    v = Vocab.build([])
    with pytest.raises(ValueError, match="tokenizer"):
        Seq2SeqData([], [], [], v, v, {}, "bpe", "x")
    with pytest.raises(TypeError, match="src_vocab"):
        Seq2SeqData([], [], [], {}, v, {}, "char", "x")
