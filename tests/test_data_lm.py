"""The language-modelling corpus (course_lib.data.lm): splits by sentence, streams, windows and epochs."""

import pytest
import torch

from course_lib.data import (
    DataNotFoundError,
    LMBatch,
    LMData,
    english_sentences,
    generated_sentences,
    load_english_lm,
    read_text_lines,
)

SENTENCES = [f"Sentence number {i} is here." for i in range(40)] + ["Go.", "Hi.", "Go.", "  Go. ", ""]


@pytest.fixture(scope="module")
def data():
    return LMData.from_sentences(SENTENCES, vocab_size=300, seed=3)


def _sentences_of(data, split):
    """The sentences of a split's stream, cut at its <eos> tokens by hand."""
    stream, out, current = data.split(split).tolist(), [], []
    for i in stream:
        if i == data.eos_id:
            out.append(data.tokenizer.detokenize(data.tokenizer.vocab.decode(current)))
            current = []
        else:
            current.append(i)
    assert current == [], "every stream ends with <eos>"
    return out


def test_each_distinct_sentence_is_in_exactly_one_split_and_ends_with_eos(data):
    splits = {s: _sentences_of(data, s) for s in ("train", "valid", "test")}
    everything = [t for texts in splits.values() for t in texts]
    distinct = list(dict.fromkeys(" ".join(s.split()) for s in SENTENCES if s.strip()))
    assert sorted(everything) == sorted(distinct)  # repetitions and blanks dropped, nothing lost
    assert len(everything) == len(set(everything))
    assert data.info["n_sentences"] == len(distinct) == 42
    assert data.info["n_repeated"] == len(SENTENCES) - 42
    assert {s: len(t) for s, t in splits.items()} == data.info["sentences"] == {"train": 34, "valid": 4, "test": 4}


def test_the_stream_is_each_sentence_tokenised_then_eos(data):
    texts = _sentences_of(data, "valid")
    expected = []
    for text in texts:
        expected += data.tokenizer.vocab.encode(data.tokenizer.tokenize(text)) + [data.eos_id]
    assert data.valid.tolist() == expected
    assert data.decode(data.valid) == " ".join(texts)
    assert data.encode(texts[0]) == expected[:expected.index(data.eos_id)]


def test_the_split_follows_the_seed():
    a = LMData.from_sentences(SENTENCES, vocab_size=300, seed=3)
    b = LMData.from_sentences(SENTENCES, vocab_size=300, seed=4)
    assert torch.equal(a.valid, LMData.from_sentences(SENTENCES, vocab_size=300, seed=3).valid)
    assert _sentences_of(a, "valid") != _sentences_of(b, "valid")


def test_windows_are_contiguous_slices_that_share_one_token(data):
    stream = data.train.tolist()
    length = 5
    for offset in (0, 3):
        windows = data.windows("train", length, offset)
        count = (len(stream) - 1 - offset) // length
        assert windows.shape == (count, length + 1)
        for k in range(count):
            start = offset + k * length
            assert windows[k].tolist() == stream[start:start + length + 1]
        assert torch.equal(windows[1:, 0], windows[:-1, -1])  # the last target is the next first input


def test_a_stride_below_the_length_gives_overlapping_windows(data):
    stream, length = data.valid.tolist(), 6
    starts = data.window_starts("valid", length, stride=2)
    assert starts == list(range(0, len(stream) - length, 2))  # every window that fits, 2 apart
    windows = data.windows("valid", length, stride=2)
    assert [w.tolist() for w in windows] == [stream[s:s + length + 1] for s in starts]


def test_a_batch_is_inputs_and_targets_shifted_by_one(data):
    batch = data.batch("train", [0, 7], 4)
    assert isinstance(batch, LMBatch) and batch.n_tokens == 8
    stream = data.train
    assert batch.inputs.tolist() == [stream[0:4].tolist(), stream[7:11].tolist()]
    assert batch.targets.tolist() == [stream[1:5].tolist(), stream[8:12].tolist()]


def test_an_epoch_starts_at_a_random_offset_and_visits_every_window_once(data):
    length, seen_offsets = 6, set()
    for seed in range(12):
        starts = data.epoch_starts("train", length, torch.Generator().manual_seed(seed))
        offset = min(starts)
        seen_offsets.add(offset)
        assert 0 <= offset < length
        assert sorted(starts) == data.window_starts("train", length, offset)
    assert len(seen_offsets) > 3
    again = data.epoch_starts("train", length, torch.Generator().manual_seed(5))
    assert again == data.epoch_starts("train", length, torch.Generator().manual_seed(5))


def test_batches_cover_the_split_in_order_or_shuffled(data):
    ordered = list(data.batches("valid", 3, 4))
    assert torch.equal(torch.cat([b.inputs for b in ordered]), data.windows("valid", 4)[:, :-1])
    assert [len(b.inputs) for b in ordered][:-1] == [3] * (len(ordered) - 1)
    shuffled = list(data.batches("train", 3, 4, shuffle=True, generator=torch.Generator().manual_seed(0)))
    assert sum(len(b.inputs) for b in shuffled) in (len(data.windows("train", 4, o)) for o in range(4))


def test_a_stream_shorter_than_a_window_is_refused_clearly(data):
    with pytest.raises(ValueError, match="no window of length"):
        data.window_starts("valid", len(data.valid))
    assert len(data.window_starts("valid", len(data.valid) - 1)) == 1


@pytest.mark.parametrize("call, error, words", [
    (lambda: LMData.from_sentences(["a", "a", "b"]), ValueError, "at least 3 distinct"),
    (lambda: LMData.from_sentences("one long text"), TypeError, "iterable of str"),
    (lambda: LMData.from_sentences(SENTENCES, valid_frac=0.5, test_frac=0.5), ValueError, "no training"),
    (lambda: LMData.from_sentences(SENTENCES, vocab_size=100), ValueError, "vocab_size"),
    (lambda: generated_sentences(0), ValueError, "n"),
])
def test_bad_arguments_are_refused(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_split_names_and_lengths_are_checked(data):
    with pytest.raises(ValueError, match='"train", "valid" or "test"'):
        data.split("dev")
    with pytest.raises(ValueError, match="length"):
        data.windows("train", 0)


def test_generated_sentences_are_reproducible_and_grammatical_enough():
    a, b = generated_sentences(500, seed=2), generated_sentences(500, seed=2)
    assert a == b and a != generated_sentences(500, seed=3)
    assert all(s[0].isupper() and s[-1] in ".?" for s in a)
    wrong = (" doesn't likes", "He like ", "Does you ", "Do he ", "I likes", "They is ")
    assert not [s for s in generated_sentences(5000) if any(w in s for w in wrong)]


def test_read_text_lines_takes_the_first_column_of_non_blank_lines(tmp_path):
    path = tmp_path / "pairs.txt"
    path.write_text("Go.\tVa !\n\n  Hi.\u00a0 there \tSalut.\tCC-BY\nplain line\n", encoding="utf-8")
    assert read_text_lines(path) == ["Go.", "Hi. there", "plain line"]
    assert english_sentences(path, max_examples=2) == ["Go.", "Hi. there"]
    with pytest.raises(DataNotFoundError):
        read_text_lines(tmp_path / "missing.txt")


def test_load_english_lm_reads_any_text_file(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("".join(f"Line {i} of the file.\tLigne {i}.\n" for i in range(30)), encoding="utf-8")
    data = load_english_lm(path, vocab_size=280, max_examples=20)
    assert data.name == "english" and data.info["path"] == str(path) and data.info["n_sentences"] == 20
    assert "Ligne" not in data.decode(torch.cat([data.train, data.valid, data.test]))


def test_the_course_file_gives_the_documented_corpus(monkeypatch):
    try:
        data = load_english_lm()
    except DataNotFoundError:
        pytest.skip("the English-French file is not here (COURSE_DATA_DIR)")
    assert data.info["n_sentences"] < len(english_sentences())  # many English sentences have several translations
    assert data.info["sentences"]["valid"] == round(0.1 * data.info["n_sentences"])
