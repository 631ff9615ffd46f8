"""course_lib.progress: a live bar by default, one line (or nothing) when COURSE_PROGRESS says so."""

import pytest

from course_lib.progress import PROGRESS_ENV, progress, progress_mode


def _lines(text: str) -> list[str]:
    return [part for part in text.replace("\r", "\n").split("\n") if part.strip()]


def test_line_mode_prints_exactly_one_final_line_for_an_iterable(monkeypatch, capsys):
    monkeypatch.setenv(PROGRESS_ENV, "line")
    seen = list(progress(range(500), desc="fitting w", mininterval=0))
    out, err = capsys.readouterr()
    assert seen == list(range(500))
    assert out == ""
    assert len(_lines(err)) == 1
    assert err.startswith("fitting w: 100%") and "500/500" in err


def test_line_mode_with_manual_updates_reports_the_last_count_and_postfix(monkeypatch, capsys):
    monkeypatch.setenv(PROGRESS_ENV, "line")
    bar = progress(total=40, unit="step")
    for _ in range(40):
        bar.update(1)
        bar.set_postfix(loss="0.125", refresh=False)
    bar.close()
    bar.close()  # a second close prints nothing more
    err = capsys.readouterr().err
    assert len(_lines(err)) == 1
    assert "40/40" in err and "loss=0.125" in err


def test_bar_mode_redraws_the_bar_as_tqdm_does(monkeypatch, capsys):
    monkeypatch.setenv(PROGRESS_ENV, "bar")
    for _ in progress(range(5), desc="x", mininterval=0, miniters=1):
        pass
    assert len(_lines(capsys.readouterr().err)) > 2


@pytest.mark.parametrize("mode", ["off", "line", "bar"])
def test_off_mode_and_disable_print_nothing(monkeypatch, capsys, mode):
    monkeypatch.setenv(PROGRESS_ENV, mode)
    for _ in progress(range(5), disable=mode != "off"):
        pass
    assert capsys.readouterr() == ("", "")


def test_default_is_a_live_bar_and_unknown_modes_are_rejected(monkeypatch):
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    assert progress_mode() == "bar"
    monkeypatch.setenv(PROGRESS_ENV, "quiet")
    with pytest.raises(ValueError, match=PROGRESS_ENV):
        progress_mode()
