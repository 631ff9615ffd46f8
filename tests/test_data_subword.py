"""Subword vocabularies (course_lib.data.subword): byte-level BPE, lossless detokenisation, no <unk>."""

import pytest
import sacrebleu
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.data import (
    SPECIAL_TOKENS,
    Seq2SeqData,
    SubwordTokenizer,
    bpe_merge_step,
    clean_text,
    load_fra_eng,
    load_fra_eng_subwords,
)
from course_lib.metrics import detokenized_bleu

FRENCH = ["Je suis fatigué.", "Tu es fatigué\u202f?", "Il fait très froid ce matin.", "Où est la gare\u202f?",
          "Nous avons gagné\u00a0!", "C'est l'été.", "Ça alors\u202f!", "Elle est très grande."] * 5


@pytest.fixture(scope="module")
def french_tokenizer():
    return SubwordTokenizer.train(FRENCH, vocab_size=350)


def test_clean_text_makes_every_space_one_plain_space():
    assert clean_text("  Va\u202f!  Cours\u2009!\tVite\u00a0? ") == "Va ! Cours ! Vite ?"
    assert clean_text("e\u0301te\u0301") == "été"  # NFC: e + combining accent -> é


def test_special_tokens_come_first_and_vocab_has_the_asked_size(french_tokenizer):
    assert french_tokenizer.vocab.idx_to_token[:4] == SPECIAL_TOKENS
    assert len(SubwordTokenizer.train(FRENCH, vocab_size=300)) == 300
    # this tiny corpus runs out of pairs to merge before 350: the vocabulary stops short of it
    assert 300 < len(french_tokenizer) == len(french_tokenizer.vocab) <= 350


def test_frequent_words_become_one_token(french_tokenizer):
    # Byte-level pieces: "Ġ" is a preceding space, "Ã©" the two UTF-8 bytes of "é".
    tokens = french_tokenizer.tokenize("Je suis fatigué.")
    assert tokens == ["Je", "Ġsuis", "ĠfatiguÃ©", "."]
    assert [french_tokenizer.detokenize([t]) for t in tokens] == ["Je", "suis", "fatigué", "."]


@pytest.mark.parametrize("text", ["<bos>", "a <eos> b", "<pad><unk>", "x<bos"])
def test_a_text_that_spells_a_special_token_round_trips_as_text(text):
    # found by the test below: "<bos>" in a text was taken for the marker, and detokenize dropped it
    tokenizer = SubwordTokenizer.train(FRENCH, vocab_size=300)
    tokens = tokenizer.tokenize(text)
    assert not set(tokens) & {"<pad>", "<bos>", "<eos>", "<unk>"}
    assert tokenizer.detokenize(tokens) == text


def test_a_tokenizer_passed_in_is_left_as_it_was():
    raw = SubwordTokenizer.train(FRENCH, vocab_size=300)._tokenizer
    raw.encode_special_tokens = False
    SubwordTokenizer(raw).tokenize("<bos>")
    assert raw.encode_special_tokens is False and raw.encode("<bos>").tokens == ["<bos>"]


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_any_text_round_trips_without_unk(text):
    tokenizer = SubwordTokenizer.train(FRENCH, vocab_size=300)
    tokens = tokenizer.tokenize(text)
    assert "<unk>" not in tokens
    assert tokenizer.vocab.unk not in tokenizer.vocab.encode(tokens)  # every piece is in the vocabulary
    assert tokenizer.detokenize(tokens) == clean_text(text)


def test_unseen_words_are_spelled_from_pieces(french_tokenizer):
    tokens = french_tokenizer.tokenize("Zoé mange des kiwis.")
    assert len(tokens) > 4 and "<unk>" not in tokens
    assert french_tokenizer.detokenize(tokens) == "Zoé mange des kiwis."


def test_detokenize_drops_special_tokens(french_tokenizer):
    tokens = ["<bos>", *french_tokenizer.tokenize("Je suis là."), "<eos>", "<pad>"]
    assert french_tokenizer.detokenize(tokens) == "Je suis là."


def test_json_round_trip_gives_the_same_tokenizer(french_tokenizer):
    again = SubwordTokenizer.from_json(french_tokenizer.to_json())
    assert again.vocab == french_tokenizer.vocab
    assert again.tokenize("Où est Tom ?") == french_tokenizer.tokenize("Où est Tom ?")
    with pytest.raises(ValueError, match="not a tokenizer's JSON"):
        SubwordTokenizer.from_json("{}")
    with pytest.raises(TypeError, match="must be a str"):
        SubwordTokenizer.from_json(b"{}")


def test_training_is_deterministic():
    assert SubwordTokenizer.train(FRENCH, 280).vocab == SubwordTokenizer.train(FRENCH, 280).vocab


def test_too_small_vocab_size_is_refused():
    with pytest.raises(ValueError, match="at least 260"):
        SubwordTokenizer.train(FRENCH, vocab_size=100)


def test_detokenized_bleu_equals_sacrebleu_with_several_references():
    hyps = ["Je suis fatigué.", "Il fait froid ce matin."]
    refs = [["Je suis fatiguée.", "Je suis fatigué."], ["Il fait très froid ce matin."]]
    expected = sacrebleu.corpus_bleu(hyps, [["Je suis fatiguée.", "Il fait très froid ce matin."],
                                            ["Je suis fatigué.", None]]).score
    assert detokenized_bleu(hyps, refs) == pytest.approx(expected)
    assert detokenized_bleu(["Je suis fatigué."], [["Je suis fatigué."]]) == pytest.approx(100.0)
    with pytest.raises(ValueError, match="references\\[0\\]"):
        detokenized_bleu(["a"], [[]])


def _write_pairs(path, n=60):
    english = ["Go.", "Run!", "I won.", "Help!", "Stop!", "Wait.", "I see.", "Hi.", "Hello!", "Thanks."]
    french = ["Va\u202f!", "Cours\u202f!", "J'ai gagné.", "À l'aide\u202f!", "Arrête\u202f!", "Attends.",
              "Je vois.", "Salut.", "Bonjour\u202f!", "Merci."]
    lines = [f"{english[i % 10]} {i // 10}\t{french[i % 10]} {i // 10}" for i in range(n)]
    lines.append("Run! 0\tCourez 0\u202f!")  # a second translation of a source
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_loader_keeps_the_word_level_split_and_all_references(tmp_path):
    file = _write_pairs(tmp_path / "fra.txt")
    words = load_fra_eng(file, min_freq=1, seed=3)
    subwords = load_fra_eng_subwords(file, vocab_size=300, seed=3)
    assert isinstance(subwords, Seq2SeqData) and subwords.tokenizer == "subword"
    for split in ("train", "valid", "test"):
        as_words = sorted(" ".join(s) for s, _ in words.split(split))
        as_text = sorted(clean_text(subwords.to_text(s, "src")).lower().replace(".", " .").replace("!", " !")
                         for s, _ in subwords.split(split))
        assert as_text == as_words
    # "Run! 0" has two translations: both are references of the same source, in one split.
    refs = {subwords.to_text(list(s), "src"): [subwords.to_text(r) for r in rs]
            for split in ("train", "valid", "test") for s, rs in subwords.references[split].items()}
    assert refs["Run! 0"] == ["Cours ! 0", "Courez 0 !"]
    assert subwords.src_vocab == subwords.src_tokenizer.vocab
    batch = next(subwords.batches("train", 8))
    assert int((batch.tgt_out == subwords.tgt_vocab.unk).sum()) == 0


def test_seq2seqdata_requires_tokenizers_for_subwords(tmp_path):
    data = load_fra_eng_subwords(_write_pairs(tmp_path / "fra.txt"), vocab_size=300)
    with pytest.raises(ValueError, match="src_tokenizer and tgt_tokenizer"):
        Seq2SeqData(data.train, data.valid, data.test, data.src_vocab, data.tgt_vocab, data.references, "subword",
                    "x")


# --- bpe_merge_step: the merge loop written out, for the book's figure and exercise --------------------------

LES = {"les": 9, "des": 1, "ses": 2, "est": 4, "elle": 5, "elles": 1, "belle": 3, "belles": 1}  # 8.1's word list


def _merges(counts: dict[str, int], n: int) -> list[tuple[str, str]]:
    words, merges = {tuple(w): c for w, c in counts.items()}, []
    for _ in range(n):
        pair, words = bpe_merge_step(words)
        merges.append(pair)
    return merges


def test_merge_steps_are_hugging_face_bpe_trainers_merges_on_a_word_list_without_ties():
    # The trainer SubwordTokenizer uses, on the words themselves (whitespace pre-tokenizer, no byte level):
    # the same pairs in the same order while no two pairs tie (the two break ties differently).
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    alphabet = sorted({ch for word in LES for ch in word})
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=len(alphabet) + 7, min_frequency=0, show_progress=False)
    tokenizer.train_from_iterator([" ".join([word] * count) for word, count in LES.items()], trainer=trainer)
    theirs = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
              for m in json.loads(tokenizer.to_str())["model"]["merges"]]
    assert _merges(LES, 7) == theirs == [("l", "e"), ("le", "s"), ("e", "l"), ("el", "le"), ("e", "s"), ("es", "t"),
                                         ("b", "elle")]


@settings(max_examples=60)
@given(st.dictionaries(st.text("abc", min_size=1, max_size=6).map(tuple), st.integers(1, 5), min_size=1, max_size=5))
def test_a_step_merges_a_most_frequent_pair_everywhere_and_keeps_the_words(words):
    # Brute force: count every adjacent position, weighted by the word's count.
    counts = {}
    for word, n in words.items():
        for i in range(len(word) - 1):
            counts[word[i:i + 2]] = counts.get(word[i:i + 2], 0) + n
    before = dict(words)
    result = bpe_merge_step(words)
    assert words == before  # the argument is not changed
    if not counts:
        assert result is None
        return
    (a, b), merged = result
    assert counts[(a, b)] == max(counts.values())
    first = next(p for word in words for p in zip(word, word[1:], strict=False) if counts[p] == max(counts.values()))
    assert (a, b) == first  # on a tie, the pair met first
    assert sum(merged.values()) == sum(words.values())
    assert sorted("".join(w) * n for w, n in merged.items()) == sorted("".join(w) * n for w, n in words.items())
    for word in merged:  # no occurrence of the pair is left unmerged
        assert (a, b) not in zip(word, word[1:], strict=False)


def test_overlapping_occurrences_merge_from_the_left():
    assert bpe_merge_step({("a", "a", "a"): 1}) == (("a", "a"), {("aa", "a"): 1})
    assert bpe_merge_step({("a", "a", "a", "a"): 2}) == (("a", "a"), {("aa", "aa"): 2})
    assert bpe_merge_step({("x",): 3}) is None


@pytest.mark.parametrize(("words", "error", "match"), [
    (["low"], TypeError, "mapping"),
    ({"low": 1}, TypeError, "tuple of str"),
    ({("l", "o"): 0}, ValueError, "positive"),
    ({("l", "o"): 1.5}, ValueError, "positive"),
])
def test_bad_word_lists_are_refused(words, error, match):
    with pytest.raises(error, match=match):
        bpe_merge_step(words)
