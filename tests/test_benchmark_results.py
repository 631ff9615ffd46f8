"""The translation benchmark's results file: written by benchmarks/bench_translation_quality.py, kept in the
repository, read by section 8.1 (book/08b_translation.ipynb), which quotes the command line's three-minute
scores from it instead of typing them."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks/ is a package of the repository, not of course_lib
from benchmarks import bench_translation_quality as bench  # noqa: E402

sys.path.pop(0)
RESULTS = ROOT / "benchmarks" / "results" / "translation_quality.json"
MODELS = {"course_lib.Transformer", "torch.nn.Transformer", "Bahdanau GRU"}


def test_the_kept_results_hold_what_section_8_1_reads():
    record = json.loads(RESULTS.read_text(encoding="utf-8"))
    assert record["vocab"] == "subword" and record["minutes_per_model"] > 0
    assert {"device", "threads", "cpus"} <= set(record["machine"])
    assert record["date"] and record["test_sources"] > 0
    rows = {r["name"]: r for r in record["results"]}
    assert set(rows) == MODELS
    for row in rows.values():
        assert row["steps"] > 0
        assert 0 <= row["bleu"] <= 100 and 0 <= row["bleu_beam"] <= 100
    # section 8.1 shows each model's translations of the same held-out sentences
    examples = record["examples"]
    assert examples and all(e["source"] and e["references"] for e in examples)
    for row in rows.values():
        assert len(row["translations"]) == len(examples) and all(isinstance(t, str) for t in row["translations"])


def test_write_results_round_trips_the_rows(tmp_path):
    rows = [bench.Result("course_lib.Transformer", 10, 5, 0, 1.5, 2.0, 2.1, 12.5, 0.1, ms_per_step=float("nan"),
                         bleu_beam=13.0, exact_match_beam=0.2, translations=("Va !",))]
    path = tmp_path / "results" / "out.json"
    bench.write_results(rows, path, minutes=3.0, epochs=None, vocab="subword", vocab_size=2000,
                        device=torch.device("cpu"), n_train=100, n_test=10, load=("1.0", "2.0"),
                        examples=(["Go."], [["Va !", "Bouge !"]]))
    record = json.loads(path.read_text())
    assert record["minutes_per_model"] == 3.0 and record["machine"]["load_average_after"] == "2.0"
    assert record["examples"] == [{"source": "Go.", "references": ["Va !", "Bouge !"]}]
    (row,) = record["results"]
    assert row["bleu_beam"] == 13.0 and row["steps"] == 5 and row["translations"] == ["Va !"]
    assert row["ms_per_step"] is None  # NaN is not JSON
    assert not any(isinstance(v, float) and math.isnan(v) for v in row.values())


def test_the_examples_are_test_sources_with_all_their_references(tmp_path):
    import course_lib as cl

    file = tmp_path / "fra.txt"
    file.write_text("Go.\tVa !\nHi.\tSalut !\nRun!\tCours !\nRun!\tCourez !\nWho?\tQui ?\nWow!\tÇa alors !\n"
                    "Stop!\tArrête !\nWait!\tAttends !\nWait!\tAttendez !\nHello!\tBonjour !\n", encoding="utf-8")
    data = cl.load_fra_eng_subwords(file, vocab_size=300, valid_frac=0.2, test_frac=0.4)
    test_sources = {data.src_tokenizer.detokenize(list(s)) for s in data.references["test"]}
    sources, references = bench.example_sentences(data, n=len(test_sources))
    assert set(sources) == test_sources
    translations = {"Go.": ["Va !"], "Hi.": ["Salut !"], "Run!": ["Cours !", "Courez !"], "Who?": ["Qui ?"],
                    "Wow!": ["Ça alors !"], "Stop!": ["Arrête !"], "Wait!": ["Attends !", "Attendez !"],
                    "Hello!": ["Bonjour !"]}
    for source, refs in zip(sources, references, strict=True):
        assert sorted(refs) == sorted(translations[source])
