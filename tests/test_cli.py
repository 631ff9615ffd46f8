"""The command line: a tiny training run, translating from arguments and stdin, one-line errors."""

import io
import os
import re
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


def _one_line_error(capsys, argv, exit_code=1):
    """The one line on stderr of a failing command; usage errors exit 2 (argparse), runtime errors return 1."""
    if exit_code == 2:
        with pytest.raises(SystemExit) as info:
            main(argv)
        code = info.value.code
    else:
        code = main(argv)
    err = capsys.readouterr().err
    assert code == exit_code, (code, err)
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
        (["train", "--task", "dates", "--context", "32"], "--context applies to --task lm only"),
        (["train", "--task", "fra-eng", "--positional", "alibi"], "--positional applies to --task lm only"),
        (["train", "--task", "lm", "--model", "rnn"], "--model applies to the translation tasks"),
        (["train", "--task", "lm", "--beam-size", "2"], "--beam-size applies to the translation tasks"),
        (["train", "--task", "lm", "--vocab", "word"], "--vocab applies to the translation tasks"),
        (["train", "--task", "lm", "--positional", "xpos"], "invalid choice: 'xpos'"),
        (["train", "--task", "lm", "--context", "0"], "--context: must be a positive integer"),
        (["generate"], "--checkpoint"),
        (["generate", "--checkpoint", "x.pt", "--temperature", "-1"], "--temperature: must be a number >= 0"),
        (["generate", "--checkpoint", "x.pt", "--top-k", "0"], "--top-k: must be a positive integer"),
        (["train", "--task", "dates", "--device", "gpu"], "--device: expected a device such as cpu, cuda"),
        (["translate", "--checkpoint", "x.pt", "--device", "cuda:x"], "--device: expected a device"),
        (["generate", "--checkpoint", "x.pt", "--device", "meta"], "course_lib runs on cpu, cuda, mps, xpu"),
        (["train", "--task", "dates", "--download"], "--download applies to --task fra-eng and lm only"),
        (["train", "--task", "fra-eng", "--data", "x.tsv", "--download"], "give one or the other"),
        (["generate", "--checkpoint", "x.pt", "--top-p", "1.5"], "--top-p: must be in [0, 1]"),
        (["train", "--task", "lm", "--corpus", "python", "--download"], "--corpus python reads the standard library"),
    ],
)
def test_bad_arguments_are_one_line_usage_errors(capsys, argv, match):
    assert match in _one_line_error(capsys, argv, exit_code=2)


def test_missing_data_file_is_a_one_line_error(capsys, tmp_path):
    err = _one_line_error(capsys, ["train", "--task", "fra-eng", "--data", str(tmp_path / "nope.txt"),
                                   "--minutes", "0.01"])
    assert "nope.txt" in err


def test_data_option_with_the_dates_task_is_refused(capsys, tmp_path):
    err = _one_line_error(capsys, ["train", "--task", "dates", "--data", str(tmp_path), "--minutes", "0.01"],
                          exit_code=2)
    assert "--data applies to --task fra-eng and lm only" in err


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


# --- the language model: train --task lm, generate ------------------------------------------------


LM_LINES = ["Tom is tired.", "Mary is happy.", "I like the red bike.", "Do you swim?", "We want to sing.",
            "They are at home.", "She is late.", "He likes my dog.", "I can cook.", "You are right."]


@pytest.fixture(scope="module")
def lm_checkpoint(tmp_path_factory):
    """A language model trained for a few epochs on a small text file (once for the module)."""
    folder = tmp_path_factory.mktemp("lm")
    text = folder / "text.txt"
    from course_lib.data import generated_sentences

    text.write_text("".join(f"{s}\tignored column\n" for s in LM_LINES + generated_sentences(600, seed=5)),
                    encoding="utf-8")
    path = folder / "lm.pt"
    out = io.StringIO()
    rc = main(["train", "--task", "lm", "--data", str(text), "--epochs", "3", "--context", "16",
               "--vocab-size", "300", "--out", str(path), "--device", "cpu"], stdout=out)
    assert rc == 0
    return path, out.getvalue()


def test_train_lm_reports_held_out_perplexity_and_saves_a_language_model(lm_checkpoint):
    import math

    import torch

    path, report = lm_checkpoint
    assert "decoder (rotary positions)" in report and "stopped by epochs" in report
    assert "test: perplexity" in report and f"saved {path}" in report
    meta = torch.load(path, weights_only=True)["meta"]
    assert meta["task"] == "lm" and meta["context"] == 16
    # the reported perplexity is exp of the reported cross-entropy, and the model's own on the test split
    metrics = meta["metrics"]
    assert metrics["perplexity"] == pytest.approx(math.exp(metrics["cross_entropy"]))
    from course_lib import evaluate_lm, load_lm_checkpoint
    from course_lib.data import load_english_lm

    model, _, _ = load_lm_checkpoint(path, device="cpu")
    data = load_english_lm(meta["path"], vocab_size=300, seed=0)
    assert evaluate_lm(model, data, "test", 16) == pytest.approx(metrics["cross_entropy"], abs=1e-6)


def test_generate_continues_prompts_from_arguments_and_stdin(lm_checkpoint):
    path, _ = lm_checkpoint
    out = io.StringIO()
    args = ["generate", "--checkpoint", str(path), "--device", "cpu", "--temperature", "0"]
    assert main([*args, "Tom is", ""], stdout=out) == 0
    lines = out.getvalue().split("\n")
    assert len(lines) == 3 and lines[0].startswith("Tom is") and lines[1] and lines[2] == ""
    assert "<eos>" not in out.getvalue() and "Ġ" not in out.getvalue()
    piped = io.StringIO()
    assert main(args, stdin=io.StringIO("Tom is\n\n"), stdout=piped) == 0
    assert piped.getvalue() == out.getvalue()  # greedy: the same sentences either way


def test_generate_samples_follow_the_seed(lm_checkpoint):
    path, _ = lm_checkpoint
    runs = []
    for seed in (1, 1, 2):
        out = io.StringIO()
        main(["generate", "--checkpoint", str(path), "--device", "cpu", "--seed", str(seed), "", "", "", ""],
             stdout=out)
        runs.append(out.getvalue())
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_a_checkpoint_of_the_other_kind_is_a_one_line_error(capsys, lm_checkpoint, dates_checkpoint):
    lm_path, s2s_path = lm_checkpoint[0], dates_checkpoint[0]
    assert "generate command" in _one_line_error(capsys, ["translate", "--checkpoint", str(lm_path), "x"])
    assert "translate command" in _one_line_error(capsys, ["generate", "--checkpoint", str(s2s_path), "x"])


def test_train_lm_without_a_usable_file_is_a_one_line_error(capsys, tmp_path):
    assert "nope.txt" in _one_line_error(capsys, ["train", "--task", "lm", "--data", str(tmp_path / "nope.txt")])
    short = tmp_path / "short.txt"
    short.write_text("Go.\nHi.\nRun!\nWow.\n", encoding="utf-8")
    err = _one_line_error(capsys, ["train", "--task", "lm", "--data", str(short), "--vocab-size", "270"])
    assert "no window of length 64" in err


# --- the device, checked first; the data, said in the shell's words; the exit statuses ------------------


@pytest.fixture
def nothing_loads(monkeypatch):
    """Fail the test if a command reads data or a checkpoint (the device must be refused before)."""
    import course_lib.data as data
    import course_lib.training.checkpoint as checkpoint

    def loaded(*args, **kwargs):
        raise AssertionError("data or a checkpoint was loaded before the device was checked")

    for name in ("load_dates", "load_fra_eng", "load_fra_eng_subwords", "load_english_lm"):
        monkeypatch.setattr(data, name, loaded)
    for name in ("load_checkpoint", "load_lm_checkpoint"):
        monkeypatch.setattr(checkpoint, name, loaded)


@pytest.mark.parametrize("command", [["train", "--task", "dates"], ["train", "--task", "lm"],
                                     ["translate", "--checkpoint", "x.pt", "hi"],
                                     ["generate", "--checkpoint", "x.pt", "hi"]])
def test_a_cuda_device_on_a_torch_without_cuda_is_one_line_before_anything_loads(capsys, monkeypatch, nothing_loads,
                                                                                 command):
    import torch

    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    err = _one_line_error(capsys, [*command, "--device", "cuda"])
    assert f"--device cuda: this torch ({torch.__version__}) is built without CUDA" in err


def test_unavailable_gpus_and_mps_are_one_line_runtime_errors(capsys, monkeypatch, nothing_loads):
    import torch

    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "torch sees no CUDA GPU here" in _one_line_error(capsys, ["train", "--task", "dates", "--device", "cuda"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    err = _one_line_error(capsys, ["train", "--task", "dates", "--device", "cuda:2"])
    assert "this machine has 2 CUDA device(s), cuda:0 to cuda:1" in err
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert "Apple's MPS is not available here" in _one_line_error(
        capsys, ["translate", "--checkpoint", "x.pt", "--device", "mps", "hi"])


@pytest.mark.skipif(__import__("torch").backends.cuda.is_built(), reason="this torch has CUDA")
def test_device_cuda_in_a_shell_on_this_cpu_torch_exits_1_without_a_traceback():
    """The issue's case as a user meets it: a real process, torch's CPU build, no monkeypatching."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "course_lib", "train", "--task", "dates", "--device", "cuda"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr and "AssertionError" not in done.stderr
    assert done.stderr.count("\n") == 1 and "built without CUDA" in done.stderr and not done.stdout


@pytest.mark.parametrize("task", ["fra-eng", "lm"])
def test_missing_data_says_what_to_type(capsys, no_course_data, task):
    err = _one_line_error(capsys, ["train", "--task", task, "--device", "cpu"])
    assert "fra-eng/fra.txt is missing" in err and "add --download" in err and "--data PATH" in err
    assert "download=True" not in err and "nothing is downloaded" not in err
    assert not (no_course_data / "cache").exists()


def test_data_naming_a_folder_says_so(capsys, no_course_data):
    (no_course_data / "data" / "fra-eng").mkdir()
    (no_course_data / "data" / "fra-eng" / "fra.txt").write_text("Go.\tVa !\n", encoding="utf-8")
    err = _one_line_error(capsys, ["train", "--task", "fra-eng", "--data", str(no_course_data / "data")])
    assert f"--data {no_course_data / 'data'} is a folder: give the file itself" in err
    assert f"({no_course_data / 'data' / 'fra-eng' / 'fra.txt'} is there)" in err and "does not exist" not in err
    missing = str(no_course_data / "nope.txt")
    assert "no such file" in _one_line_error(capsys, ["train", "--task", "lm", "--data", missing])


def test_download_fetches_the_pairs_once_from_a_local_server(capsys, no_course_data, fra_eng_server, monkeypatch,
                                                             tmp_path):
    """--download against a local HTTP server on 127.0.0.1 (conftest's, as the library's download test), then the
    cached copy."""
    from course_lib.data import download as download_module

    url, sha1, hits = fra_eng_server
    monkeypatch.setattr(download_module, "FRA_ENG_URL", url)
    monkeypatch.setattr(download_module, "FRA_ENG_SHA1", sha1)
    out = io.StringIO()
    rc = main(["train", "--task", "fra-eng", "--download", "--vocab", "word", "--model", "rnn", "--epochs", "1",
               "--device", "cpu", "--out", str(tmp_path / "fe.pt")], stdout=out)
    assert rc == 0 and "BLEU" in out.getvalue(), capsys.readouterr().err
    cached = no_course_data / "cache" / "fra-eng" / "fra.txt"
    assert hits == ["/fra-eng.zip"] and cached.is_file()
    assert f"English-French pairs: {cached} (downloaded once from {url}" in capsys.readouterr().err
    rc = main(["train", "--task", "lm", "--download", "--epochs", "1", "--context", "4", "--vocab-size", "260",
               "--device", "cpu", "--out", str(tmp_path / "lm.pt")], stdout=io.StringIO())
    assert rc == 0 and hits == ["/fra-eng.zip"], "the second run reads the cached copy"


def test_evaluation_time_is_reported_beside_the_budget(dates_checkpoint):
    _, report = dates_checkpoint
    assert re.search(r"evaluated in \d+\.\d s, after the --minutes budget", report), report


def test_help_says_evaluation_is_not_in_the_budget_and_how_to_download(capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "evaluation after it is not counted" in text
    assert "--download" in text and "nothing is downloaded without it" in text


def test_train_lm_on_a_folder_of_python_modules_keeps_its_whitespace(tmp_path):
    # --corpus python: modules split by file (here a folder of 10; by default the standard library's)
    import torch

    from course_lib import load_lm_checkpoint

    folder = tmp_path / "modules"
    folder.mkdir()
    for i in range(10):
        (folder / f"mod{i}.py").write_text("".join(f"def f{j}(x):\n    return x + {j}\n\n\n" for j in range(i + 5)),
                                           encoding="utf-8")
    path, out = tmp_path / "py.pt", io.StringIO()
    rc = main(["train", "--task", "lm", "--corpus", "python", "--data", str(folder), "--epochs", "2", "--context",
               "16", "--vocab-size", "300", "--out", str(path), "--device", "cpu"], stdout=out)
    assert rc == 0
    assert "lm: 8 train / 1 valid / 1 test files" in out.getvalue()
    meta = torch.load(path, weights_only=True)["meta"]
    assert meta["data"] == "python" and meta["path"] == str(folder)
    _, tokenizer, _ = load_lm_checkpoint(path, device="cpu")
    assert tokenizer.keeps_whitespace
    generated = io.StringIO()
    assert main(["generate", "--checkpoint", str(path), "--device", "cpu", "--max-new-tokens", "12",
                 "--top-p", "0.9", "def f1(x):"], stdout=generated) == 0
    assert generated.getvalue().startswith("def f1(x):")


@pytest.mark.parametrize("argv, match", [
    (["train", "--task", "dates", "--corpus", "python"], "--corpus applies to --task lm only"),
    (["train", "--task", "lm", "--corpus", "python", "--examples", "5"], "--examples applies to --corpus english"),
    (["train", "--task", "lm", "--corpus", "latin"], "invalid choice: 'latin'"),
])
def test_corpus_usage_errors(capsys, argv, match):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and match in capsys.readouterr().err
