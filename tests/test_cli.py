"""The command line: a tiny training run, translating from arguments and stdin, one-line errors."""

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib.cli import main

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dates_checkpoint(tmp_path_factory):
    """Train the RNN on a few hundred generated dates for 3 seconds (once for the whole module)."""
    path = tmp_path_factory.mktemp("cli") / "dates.pt"
    out = io.StringIO()
    rc = main(["train", "--task", "dates", "--model", "rnn", "--minutes", "0.05", "--examples", "400",
               "--out", str(path), "--device", "cpu"], stdout=out)
    assert rc == 0
    return path, out.getvalue()


def test_train_reports_held_out_metrics_and_saves(dates_checkpoint):
    path, report = dates_checkpoint
    assert path.is_file()
    assert "exact match" in report and "BLEU" in report
    assert "stopped by" in report and f"saved {path}" in report


def test_translate_sentences_given_as_arguments(dates_checkpoint):
    path, _ = dates_checkpoint
    out = io.StringIO()
    assert main(["translate", "--checkpoint", str(path), "March 3, 2001", "4/5/99"], stdout=out) == 0
    assert len(out.getvalue().splitlines()) == 2


def test_translate_stdin_gives_one_line_per_line_and_keeps_blank_lines(dates_checkpoint):
    path, _ = dates_checkpoint
    lines = ["March 3, 2001", "", "12 juin 1987", "   ", "4/5/99"]
    out = io.StringIO()
    rc = main(["translate", "--checkpoint", str(path), "--batch-size", "2"], stdin=io.StringIO("\n".join(lines) + "\n"),
              stdout=out)
    assert rc == 0
    result = out.getvalue().split("\n")
    assert result[-1] == "" and len(result) == len(lines) + 1
    assert result[1] == "" and result[3] == ""
    # Batched through stdin == one sentence at a time through the arguments.
    single = io.StringIO()
    main(["translate", "--checkpoint", str(path), "12 juin 1987"], stdout=single)
    assert result[2] == single.getvalue().rstrip("\n")


def test_beam_search_translation_runs(dates_checkpoint):
    path, _ = dates_checkpoint
    out = io.StringIO()
    assert main(["translate", "--checkpoint", str(path), "--beam-size", "3", "March 3, 2001"], stdout=out) == 0
    assert len(out.getvalue().splitlines()) == 1


def test_python_dash_m_entry_point_translates_and_fails_cleanly(dates_checkpoint, tmp_path):
    path, _ = dates_checkpoint
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    ok = subprocess.run([sys.executable, "-m", "course_lib", "translate", "--checkpoint", str(path)],
                        input="March 3, 2001\n\n", capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert len(ok.stdout.split("\n")) == 3 and ok.stdout.split("\n")[1] == ""
    bad = tmp_path / "bad.pt"
    bad.write_bytes(path.read_bytes()[:1000])
    fail = subprocess.run([sys.executable, "-m", "course_lib", "translate", "--checkpoint", str(bad), "x"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert fail.returncode != 0
    assert len(fail.stderr.strip().splitlines()) == 1 and "Traceback" not in fail.stderr
    assert "corrupted or truncated" in fail.stderr


def _one_line_error(capsys, argv, exit_code=None):
    if exit_code == 2:
        with pytest.raises(SystemExit) as info:
            main(argv)
        code = info.value.code
    else:
        code = main(argv)
    err = capsys.readouterr().err
    assert code != 0
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    "argv, match",
    [
        (["train", "--task", "dates", "--minutes", "-1"], "--minutes: must be a positive number"),
        (["train", "--task", "dates", "--minutes", "nan"], "--minutes: must be a positive number"),
        (["train", "--task", "klingon"], "invalid choice: 'klingon'"),
        (["train"], "--task"),
        (["translate"], "--checkpoint"),
        (["fly"], "invalid choice: 'fly'"),
        (["train", "--task", "dates", "--seed", "-3"], "--seed"),
        (["train", "--task", "dates", "--label-smoothing", "1"], "--label-smoothing: must be in [0, 1)"),
    ],
)
def test_bad_arguments_are_one_line_usage_errors(capsys, argv, match):
    assert match in _one_line_error(capsys, argv, exit_code=2)


def test_missing_data_file_is_a_one_line_error(capsys, tmp_path):
    err = _one_line_error(capsys, ["train", "--task", "fra-eng", "--data", str(tmp_path / "nope.txt"),
                                   "--minutes", "0.01"])
    assert "nope.txt" in err


def test_data_option_with_the_dates_task_is_refused(capsys, tmp_path):
    err = _one_line_error(capsys, ["train", "--task", "dates", "--data", str(tmp_path), "--minutes", "0.01"])
    assert "--data applies to --task fra-eng only" in err


def test_corrupt_and_missing_checkpoints_are_one_line_errors(capsys, tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint at all")
    assert "not a readable checkpoint" in _one_line_error(capsys, ["translate", "--checkpoint", str(bad), "x"])
    assert "not found" in _one_line_error(capsys, ["translate", "--checkpoint", str(tmp_path / "no.pt"), "x"])


def test_fra_eng_accepts_any_file_in_the_tab_separated_format(tmp_path):
    pairs = [("Go.", "Va !"), ("Run!", "Cours !"), ("Run!", "Courez !"), ("Hi.", "Salut !"), ("Stop!", "Arrête !"),
             ("Wait!", "Attends !"), ("Go on.", "Continue."), ("I see.", "Je vois."), ("I won!", "J'ai gagné !"),
             ("Help!", "À l'aide !")] * 6
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{en}\t{fr}\n" for en, fr in pairs), encoding="utf-8")
    out = io.StringIO()
    ckpt = tmp_path / "fe.pt"
    rc = main(["train", "--task", "fra-eng", "--data", str(data), "--model", "rnn", "--minutes", "0.02", "--out",
               str(ckpt), "--device", "cpu"], stdout=out)
    assert rc == 0 and "BLEU" in out.getvalue()
    tr = io.StringIO()
    assert main(["translate", "--checkpoint", str(ckpt), "Go.", "", "Run!"], stdout=tr) == 0
    assert tr.getvalue().split("\n")[1] == ""


def test_transformer_trains_and_translates_end_to_end(tmp_path):
    ckpt = tmp_path / "dates-transformer.pt"
    out = io.StringIO()
    rc = main(["train", "--task", "dates", "--model", "transformer", "--minutes", "0.03", "--examples", "200",
               "--out", str(ckpt), "--device", "cpu"], stdout=out)
    assert rc == 0 and "exact match" in out.getvalue()
    tr = io.StringIO()
    assert main(["translate", "--checkpoint", str(ckpt), "--beam-size", "2"], stdin=io.StringIO("3/4/99\n\n"),
                stdout=tr) == 0
    assert tr.getvalue().split("\n")[1:] == ["", ""]


def test_fra_eng_subword_checkpoint_carries_its_tokenizers_and_never_writes_unk(tmp_path):
    pairs = [("Go.", "Va\u202f!"), ("Run!", "Cours\u202f!"), ("I won!", "J'ai gagné\u202f!"),
             ("Help!", "À l'aide\u202f!"), ("I see.", "Je vois."), ("Wait.", "Attends.")] * 8
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{en}\t{fr}\n" for en, fr in pairs), encoding="utf-8")
    ckpt, out = tmp_path / "fe.pt", io.StringIO()
    rc = main(["train", "--task", "fra-eng", "--data", str(data), "--epochs", "30", "--batch-size", "16",
               "--vocab-size", "300", "--out", str(ckpt), "--device", "cpu"], stdout=out)
    assert rc == 0
    assert "sacrebleu on detokenised text" in out.getvalue() and "0 translations with <unk>" in out.getvalue()
    import torch

    meta = torch.load(ckpt, weights_only=True)["meta"]
    assert meta["tokenizer"] == "subword" and set(meta["subword"]) == {"src", "tgt"}
    tr = io.StringIO()
    unseen = "Zoé kiffe les kiwis!"  # words never seen in training: spelled from bytes, no <unk>
    sources = [en for en, _ in pairs[:6]]
    assert main(["translate", "--checkpoint", str(ckpt), "--device", "cpu", *sources, unseen], stdout=tr) == 0
    lines = tr.getvalue().split("\n")
    # detokenised French: capitals, accents, apostrophes, one plain space before "!"
    french = {fr.replace("\u202f", " ") for _, fr in pairs}
    assert sum(line in french for line in lines[:6]) >= 4  # the training sources (4 of 6) at least
    assert "<unk>" not in tr.getvalue() and "Ġ" not in tr.getvalue() and lines[6]
    out_word = io.StringIO()
    assert main(["train", "--task", "fra-eng", "--vocab", "word", "--data", str(data), "--epochs", "1",
                 "--out", str(tmp_path / "w.pt"), "--device", "cpu"], stdout=out_word) == 0
    assert "token BLEU" in out_word.getvalue()
