"""Chapter 12's corpus: the standard library's source (course_lib.data.python_source), documents split by file
(LMData.from_documents) and the byte-level BPE that keeps whitespace (SubwordTokenizer keep_whitespace)."""

from __future__ import annotations

import ast
import platform
import sysconfig
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from course_lib.data import (
    PYTHON_SOURCE_LICENSE,
    DataNotFoundError,
    LMData,
    SubwordTokenizer,
    load_python_lm,
    python_source_files,
)

STDLIB = Path(sysconfig.get_paths()["stdlib"])
CODE = ["def f(x):\n    return x + 1\n", "class A:\n\tpass\n\n\n", "if x:\n    y = [1,  2]  # two spaces\n"] * 5


@pytest.fixture(scope="module")
def python_lm():
    return load_python_lm(vocab_size=600)


# ----------------------------------------------------------------------- the tokenizer keeps whitespace


@given(st.text(alphabet=st.sampled_from(list("ab  \t\n\r():#é€")), max_size=40))
def test_whitespace_keeping_tokenizer_round_trips_any_text(text):
    tok = SubwordTokenizer.train(CODE, 300, keep_whitespace=True)
    assert tok.detokenize(tok.tokenize(text)) == text


def test_the_default_tokenizer_still_cleans_spaces_and_the_mode_survives_json():
    plain, code = SubwordTokenizer.train(CODE, 300), SubwordTokenizer.train(CODE, 300, keep_whitespace=True)
    assert not plain.keeps_whitespace and code.keeps_whitespace
    assert plain.detokenize(plain.tokenize("a\n    b")) == "a b"
    assert code.detokenize(code.tokenize("a\n    b")) == "a\n    b"
    again = SubwordTokenizer.from_json(code.to_json())
    assert again.keeps_whitespace and again.tokenize("x  =\n\t1") == code.tokenize("x  =\n\t1")
    assert not SubwordTokenizer.from_json(plain.to_json()).keeps_whitespace
    assert "whitespace kept" in repr(code) and "whitespace" not in repr(plain)


def test_indentation_runs_become_tokens():
    tok = SubwordTokenizer.train(["def f():\n        return 1\n"] * 20, 300, keep_whitespace=True)
    assert any(set(t) == {"Ġ"} and len(t) >= 4 for t in tok.vocab.idx_to_token)  # a run of spaces merged


def test_keep_whitespace_must_be_a_bool():
    with pytest.raises(TypeError, match="keep_whitespace"):
        SubwordTokenizer.train(CODE, 300, keep_whitespace="yes")
    with pytest.raises(TypeError, match="text must be a str"):
        SubwordTokenizer.train(CODE, 300, keep_whitespace=True).tokenize(b"x")


# ----------------------------------------------------------------------------- documents split by file


DOCS = {f"m{i:02d}.py": f"def f{i}(x):\n    return x * {i}\n" for i in range(20)}


def test_from_documents_splits_by_document_and_keeps_each_one_exactly():
    data = LMData.from_documents(DOCS, vocab_size=300, seed=1, valid_frac=0.1, test_frac=0.2)
    names = data.info["documents"]
    assert sorted(names["train"] + names["valid"] + names["test"]) == sorted(DOCS)
    assert (len(names["train"]), len(names["valid"]), len(names["test"])) == (14, 2, 4)
    for split in ("train", "valid", "test"):
        texts = data.decode(data.split(split)).split("\n")  # documents joined by a newline at each <eos>
        assert data.decode(data.split(split)) == "\n".join(DOCS[n] for n in names[split]) + "\n"
        assert len(texts) >= len(names[split])
        assert data.info["chars"][split] == sum(len(DOCS[n]) for n in names[split])
        assert data.info["tokens"][split] == len(data.split(split))
        assert int(data.split(split)[-1]) == data.eos_id
        assert (data.split(split) == data.eos_id).sum() == len(names[split])


def test_from_documents_follows_the_seed_not_the_mapping_order():
    a = LMData.from_documents(DOCS, vocab_size=300, seed=2)
    b = LMData.from_documents(dict(reversed(list(DOCS.items()))), vocab_size=300, seed=2)
    c = LMData.from_documents(DOCS, vocab_size=300, seed=3)
    assert a.info["documents"] == b.info["documents"] and a.train.tolist() == b.train.tolist()
    assert a.info["documents"] != c.info["documents"]


@pytest.mark.parametrize("documents, error, words", [
    ({"a": "x", "b": "y"}, ValueError, "at least 3 non-empty documents"),
    ({"a": "x", "b": "y", "c": ""}, ValueError, "at least 3"),
    (["x", "y", "z"], TypeError, "mapping {name: text}"),
    ({"a": "x", "b": "y", "c": 3}, TypeError, "mapping {name: text}"),
])
def test_from_documents_refuses_bad_corpora(documents, error, words):
    with pytest.raises(error) as info:
        LMData.from_documents(documents, vocab_size=300)
    assert words in str(info.value)


def test_fractions_that_leave_no_training_document_are_refused():
    with pytest.raises(ValueError, match="leave no training document"):
        LMData.from_documents({"a": "x", "b": "y", "c": "z"}, vocab_size=300, valid_frac=0.5, test_frac=0.5)


# ------------------------------------------------------------------------ the standard library corpus


def test_the_files_are_the_public_top_level_modules_under_the_size_cap():
    files = python_source_files()
    expected = sorted(p for p in STDLIB.iterdir()
                      if p.suffix == ".py" and p.name[0] != "_" and p.is_file() and p.stat().st_size <= 65536)
    assert files == expected and files == sorted(files)
    assert all(f.parent == STDLIB for f in files)
    assert {"os.py", "abc.py", "this.py"} <= {f.name for f in files}
    assert not {"typing.py", "_pyio.py", "__future__.py"} & {f.name for f in files}  # too large, private
    small = python_source_files(max_bytes=4096)
    assert set(small) < set(files) and all(f.stat().st_size <= 4096 for f in small)


def test_the_corpus_is_at_least_a_megabyte_of_python_split_by_file(python_lm):
    info = python_lm.info
    assert info["bytes"] >= 1_000_000 and info["files"] == len(python_source_files())
    assert info["python"] == platform.python_version() and info["license"] == PYTHON_SOURCE_LICENSE
    docs = info["documents"]
    assert not set(docs["train"]) & (set(docs["valid"]) | set(docs["test"]))
    assert not set(docs["valid"]) & set(docs["test"])
    assert len(docs["train"]) + len(docs["valid"]) + len(docs["test"]) == info["files"]
    # the held-out stream decodes to the held-out files exactly, each of which is valid Python
    first = docs["test"][0]
    text = (STDLIB / first).read_text(encoding="utf-8")
    stream = python_lm.test.tolist()
    assert python_lm.decode(stream[:stream.index(python_lm.eos_id)]) == text
    ast.parse(text)


@pytest.mark.skipif(platform.python_version() != "3.11.7", reason="the counts are those of the pinned Python 3.11.7")
def test_the_pinned_python_gives_the_documented_corpus():
    files = python_source_files()
    assert (len(files), sum(f.stat().st_size for f in files)) == (135, 2_626_478)


def test_a_missing_folder_is_reported(tmp_path):
    with pytest.raises(DataNotFoundError, match="does not exist"):
        python_source_files(tmp_path / "nowhere")
    (tmp_path / "_private.py").write_text("x = 1\n")
    with pytest.raises(DataNotFoundError, match="no public module"):
        python_source_files(tmp_path)
    with pytest.raises(ValueError, match="max_bytes"):
        python_source_files(max_bytes=0)


def test_any_folder_of_modules_can_be_the_corpus(tmp_path):
    for i in range(6):
        (tmp_path / f"mod{i}.py").write_text(f"X = {i}\n\n\ndef g{i}():\n    return X\n", encoding="utf-8")
    data = load_python_lm(vocab_size=280, root=tmp_path, valid_frac=0.2, test_frac=0.2)
    assert data.info["files"] == 6 and data.info["root"] == str(tmp_path)
