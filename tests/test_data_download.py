"""The opt-in download of the English-French archive (course_lib.data.download), against a local HTTP server
(the fixtures fra_eng_server and no_course_data of tests/conftest.py)."""

import urllib.request

import pytest

from course_lib.data import DataNotFoundError, download_fra_eng, load_fra_eng, load_fra_eng_subwords
from course_lib.data import download as download_module


def test_the_published_url_and_checksum_are_d2ls():
    assert download_module.FRA_ENG_URL == "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"
    assert download_module.FRA_ENG_SHA1 == "94646ad1522d915e7b0f9296181140edcf86a4f5"


def test_nothing_is_downloaded_without_the_opt_in(no_course_data, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a download was attempted without download=True")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    for loader in (load_fra_eng, load_fra_eng_subwords):
        with pytest.raises(DataNotFoundError, match="download=True"):
            loader()
    assert not (no_course_data / "cache").exists()


def test_download_verifies_caches_and_says_where(no_course_data, fra_eng_server, monkeypatch, capsys):
    url, sha1, hits = fra_eng_server
    monkeypatch.setattr(download_module, "FRA_ENG_URL", url)
    monkeypatch.setattr(download_module, "FRA_ENG_SHA1", sha1)
    data = load_fra_eng(download=True, min_freq=1)
    assert data.info["n_pairs"] == 40 and data.info["path"] == str(no_course_data / "cache" / "fra-eng" / "fra.txt")
    err = capsys.readouterr().err
    assert f"downloaded {url} (SHA-1 verified) to {no_course_data / 'cache' / 'fra-eng.zip'}" in err
    assert str(no_course_data / "cache" / "fra-eng" / "fra.txt") in err
    assert hits == ["/fra-eng.zip"]
    load_fra_eng_subwords(download=True, vocab_size=280)  # the cached copy: no second request
    assert hits == ["/fra-eng.zip"]


def test_a_wrong_checksum_is_refused_and_nothing_is_kept(no_course_data, fra_eng_server):
    url, sha1, hits = fra_eng_server
    with pytest.raises(ValueError, match=f"expected {'0' * 40}: refused"):
        download_fra_eng(no_course_data / "cache", url=url, sha1="0" * 40, quiet=True)
    assert hits == ["/fra-eng.zip"]
    assert list((no_course_data / "cache").iterdir()) == []


def test_a_failed_download_is_an_os_error(no_course_data, fra_eng_server):
    url, sha1, _ = fra_eng_server
    with pytest.raises(OSError):
        download_fra_eng(no_course_data / "cache", url=url.replace("fra-eng.zip", "missing.zip"), sha1=sha1, quiet=True)
