"""English -> French pairs (course_lib.data.translation) and the data folder lookup (course_lib.data.paths)."""

import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from course_lib.data import (
    FRA_ENG_FILE,
    DataNotFoundError,
    data_dir,
    find_data_file,
    load_fra_eng,
    normalize_text,
    read_sentence_pairs,
    tokenize_words,
)
from course_lib.data import paths as paths_module


def d2l_preprocess(text):
    """D2L's ``_preprocess`` (d2l.ai, chapter 10.5), written out as the reference."""

    def no_space(char, prev_char):
        return char in ",.!?" and prev_char != " "

    text = text.replace("\u202f", " ").replace("\xa0", " ").lower()
    out = [" " + char if i > 0 and no_space(char, text[i - 1]) else char for i, char in enumerate(text)]
    return "".join(out)


# --- normalisation and tokenisation ------------------------------------------------------------


def test_normalize_text_examples():
    assert normalize_text("Go.") == "go ."
    assert normalize_text("Va\u202f!") == "va !"
    assert normalize_text("Cours\u2009!") == "cours !"  # a thin space, as some French lines of the file use
    assert normalize_text("Hello, Tom. Really?") == "hello , tom . really ?"
    assert normalize_text("J'ai GAGNÉ !") == "j'ai gagné !"
    assert normalize_text(".Hi") == ".hi"


@given(st.text(alphabet="aBé' ,.!?\u202f\xa0", max_size=30))
def test_normalize_text_agrees_with_d2l(text):
    assert normalize_text(text) == d2l_preprocess(text)


@given(st.text(alphabet="ab ,.!\u202f\t", max_size=30))
def test_tokens_are_never_empty_and_join_back(text):
    tokens = tokenize_words(normalize_text(text))
    assert tokens == [t for t in d2l_preprocess(text).replace("\t", " ").split(" ") if t]


def test_tokenize_words_splits_on_spaces():
    assert tokenize_words("  va   !  ") == ["va", "!"] and tokenize_words("") == []


@pytest.mark.parametrize("call", [lambda: normalize_text(3), lambda: tokenize_words(["a"])])
def test_non_strings_are_refused(call):
    with pytest.raises(TypeError, match="text must be a str"):
        call()


# --- reading the pair file ---------------------------------------------------------------------


def write(tmp_path, text, name="pairs.txt"):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return path


GOOD = "Go.\tVa !\nRun!\tCours !\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272\n"


@pytest.mark.parametrize(
    ("text", "pairs", "n_malformed"),
    [
        (GOOD, [("Go.", "Va !"), ("Run!", "Cours !")], 0),
        (GOOD + "no tab here\n\nHi.\t\n\tSalut.\n   \t  \nWow!\tÇa alors !\n",
         [("Go.", "Va !"), ("Run!", "Cours !"), ("Wow!", "Ça alors !")], 5),
        # a line without final punctuation is kept unless it is the last one
        ("Yes.\tLa réponse est : oui\nGo.\tVa !\n", [("Yes.", "La réponse est : oui"), ("Go.", "Va !")], 0),
        # the last line cut mid-sentence, with or without the final newline (the shared file has one)
        (GOOD + "They did it again.\tIls l'ont ", [("Go.", "Va !"), ("Run!", "Cours !")], 1),
        (GOOD + "They did it again.\tIls l'ont \n", [("Go.", "Va !"), ("Run!", "Cours !")], 1),
        (GOOD + "They did it again.\tIls l'ont \n\n", [("Go.", "Va !"), ("Run!", "Cours !")], 2),
        (GOOD + "Hi.\t« Salut »", [("Go.", "Va !"), ("Run!", "Cours !"), ("Hi.", "« Salut »")], 0),
        ("\ufeffGo.\tVa !\r\nHi.\tSalut !\r\n", [("Go.", "Va !"), ("Hi.", "Salut !")], 0),
        ("", [], 0),
    ],
)
def test_read_sentence_pairs_drops_and_counts_malformed_lines(tmp_path, text, pairs, n_malformed):
    got, n_bad = read_sentence_pairs(write(tmp_path, text))
    assert got == pairs and n_bad == n_malformed


def test_read_sentence_pairs_names_a_missing_file(tmp_path):
    with pytest.raises(DataNotFoundError, match="nope.txt") as info:
        read_sentence_pairs(tmp_path / "nope.txt")
    assert isinstance(info.value, FileNotFoundError)


# --- load_fra_eng on small files ---------------------------------------------------------------


def toy_file(tmp_path, n_sources=40, seed=0):
    """n_sources English sentences with 1-3 translations each, lines shuffled, a cut last line."""
    rng = random.Random(seed)
    lines = []
    for i in range(n_sources):
        for j in range(rng.randint(1, 3)):
            lines.append(f"I see {i}.\tJe vois {i}, {'ah' * (j + 1)} !")
    rng.shuffle(lines)
    lines.insert(5, "garbage line without a tab")
    return write(tmp_path, "\n".join(lines) + "\nI see 99.\tJe vois", name="toy.txt"), lines


def test_splits_are_grouped_by_source_and_references_hold_every_translation(tmp_path):
    path, lines = toy_file(tmp_path)
    data = load_fra_eng(path, min_freq=1, seed=0, valid_frac=0.2, test_frac=0.2)
    assert data.info["n_lines"] == len(lines) + 1 and data.info["n_malformed"] == 2
    sources = [{tuple(s) for s, _ in getattr(data, k)} for k in ("train", "valid", "test")]
    assert not (sources[0] & sources[1] or sources[0] & sources[2] or sources[1] & sources[2])
    assert [len(s) for s in sources] == [24, 8, 8]
    # brute force: every translation of a source, from the raw lines
    expected = {}
    for line in lines:
        if "\t" in line:
            en, fr = line.split("\t")
            expected.setdefault(tuple(d2l_preprocess(en).split()), []).append(d2l_preprocess(fr).split())
    for split in ("train", "valid", "test"):
        for src, refs in data.references[split].items():
            assert sorted(refs) == sorted(expected[src])
    assert sum(len(getattr(data, k)) for k in ("train", "valid", "test")) == len(lines) - 1
    assert data.tokenizer == "word" and data.name == "fra-eng"


def test_loading_is_reproducible_and_the_seed_matters(tmp_path):
    path, _ = toy_file(tmp_path)
    a, b, c = load_fra_eng(path, seed=1), load_fra_eng(path, seed=1), load_fra_eng(path, seed=2)
    assert (a.train, a.valid, a.test) == (b.train, b.valid, b.test) and a.tgt_vocab == b.tgt_vocab
    assert a.references["test"].keys() != c.references["test"].keys()


def test_min_freq_counts_on_the_training_split(tmp_path):
    path, _ = toy_file(tmp_path)
    data = load_fra_eng(path, min_freq=2)
    counts = {}
    for s, _ in data.train:
        for t in s:
            counts[t] = counts.get(t, 0) + 1
    assert set(data.src_vocab.idx_to_token[4:]) == {t for t, c in counts.items() if c >= 2}


def test_max_tokens_and_max_examples(tmp_path):
    path = write(tmp_path, "Go.\tVa !\nGo now.\tVas-y maintenant !\nI am very tired.\tJe suis très fatigué.\n" * 4)
    data = load_fra_eng(path, max_tokens=3, min_freq=1, valid_frac=0.0, test_frac=0.0)
    assert data.info["n_too_long"] == 4 and data.info["n_pairs"] == 8
    assert all(len(s) <= 3 and len(t) <= 3 for s, t in data.train)
    first = load_fra_eng(path, max_examples=2, min_freq=1, valid_frac=0.0, test_frac=0.0)
    assert first.train == [(["go", "."], ["va", "!"]), (["go", "now", "."], ["vas-y", "maintenant", "!"])]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [({"max_tokens": 0}, ValueError, "max_tokens"), ({"max_examples": -1}, ValueError, "max_examples"),
     ({"min_freq": 0}, ValueError, "min_freq"), ({"seed": 1.5}, TypeError, "seed"),
     ({"test_frac": 1.0}, ValueError, "test_frac"), ({"max_tokens": 1}, ValueError, "no usable")],
)
def test_bad_load_arguments_raise(tmp_path, kwargs, error, match):
    path, _ = toy_file(tmp_path)
    with pytest.raises(error, match=match):
        load_fra_eng(path, **kwargs)


def test_a_missing_explicit_path_is_reported_by_name(tmp_path):
    with pytest.raises(DataNotFoundError, match="missing.txt"):
        load_fra_eng(tmp_path / "missing.txt")


# --- the data folder ---------------------------------------------------------------------------


@pytest.fixture
def no_shared_data(monkeypatch, tmp_path):
    """No COURSE_DATA_DIR and a repository with no shared/data above it."""
    monkeypatch.delenv("COURSE_DATA_DIR", raising=False)
    repo = tmp_path / "nowhere" / "repo"
    repo.mkdir(parents=True)
    monkeypatch.setattr(paths_module, "_repo_root", lambda: repo)
    return repo


def test_course_data_dir_wins(monkeypatch, tmp_path):
    (tmp_path / "fra-eng").mkdir()
    (tmp_path / "fra-eng" / "fra.txt").write_text("Go.\tVa !\nHi.\tSalut !\nRun!\tCours !\n", encoding="utf-8")
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path))
    assert data_dir() == tmp_path
    assert find_data_file(FRA_ENG_FILE) == tmp_path / "fra-eng" / "fra.txt"
    data = load_fra_eng(min_freq=1, valid_frac=0.0, test_frac=0.0)
    assert data.info["path"] == str(tmp_path / "fra-eng" / "fra.txt") and len(data.train) == 3


def test_shared_data_next_to_the_repository_is_found(no_shared_data):
    shared = no_shared_data.parent / "shared" / "data"
    shared.mkdir(parents=True)
    assert data_dir() == shared
    (no_shared_data / "shared" / "data").mkdir(parents=True)  # the repository's own shared/data comes first
    assert data_dir() == no_shared_data / "shared" / "data"


def test_no_data_folder_says_what_is_missing(no_shared_data):
    with pytest.raises(DataNotFoundError, match="COURSE_DATA_DIR is not set"):
        data_dir()
    with pytest.raises(DataNotFoundError, match=r"fra-eng/fra\.txt.*COURSE_DATA_DIR") as info:
        load_fra_eng()
    assert isinstance(info.value, FileNotFoundError)


def test_a_missing_file_in_the_data_folder_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path))
    with pytest.raises(DataNotFoundError, match=r"fra-eng/fra\.txt is missing.*set COURSE_DATA_DIR"):
        find_data_file("fra-eng/fra.txt")


def test_course_data_dir_pointing_nowhere_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path / "absent"))
    with pytest.raises(DataNotFoundError, match="COURSE_DATA_DIR=.*absent.* is not a folder"):
        data_dir()


@pytest.mark.parametrize(("arg", "error"), [(3, TypeError), ("/etc/passwd", ValueError)])
def test_bad_find_data_file_arguments_raise(arg, error):
    with pytest.raises(error, match="relative"):
        find_data_file(arg)


# --- the shared file ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_file():
    try:
        return find_data_file(FRA_ENG_FILE)
    except DataNotFoundError as e:
        pytest.skip(f"the shared fra-eng file is not on this machine ({e})")


def test_the_shared_file_counts(shared_file):
    pairs, n_malformed = read_sentence_pairs(shared_file)
    assert len(pairs) + n_malformed == 18066 and n_malformed == 1
    assert pairs[-1] == ("They deported Tom.", "Ils ont déporté Tom.")  # the cut "They did it again." is gone
    assert len({en for en, _ in pairs}) == 10974  # 10,975 in the file, one only on the cut line


def test_the_shared_file_splits_keep_every_source_and_its_translations_together(shared_file):
    data = load_fra_eng(shared_file)
    n = data.info["n_sources"]
    assert n["train"] + n["valid"] + n["test"] == 10974 and n["test"] == n["valid"] == round(0.1 * 10974)
    sides = [set(data.references[k]) for k in ("train", "valid", "test")]
    assert not (sides[0] & sides[1] or sides[0] & sides[2] or sides[1] & sides[2])
    lines = Path(shared_file).read_text(encoding="utf-8").split("\n")[:-2]  # without the cut last line
    expected = {}
    for line in lines:
        en, fr = line.split("\t")[:2]
        targets = expected.setdefault(tuple(normalize_text(en).split()), [])
        if normalize_text(fr).split() not in targets:
            targets.append(normalize_text(fr).split())
    assert {**data.references["train"], **data.references["valid"], **data.references["test"]} == expected
    assert len(data.train) + len(data.valid) + len(data.test) == 18065
