"""The opt-in download of the English-French archive (course_lib.data.download), against a local HTTP server."""

import hashlib
import http.server
import io
import threading
import urllib.request
import zipfile

import pytest

from course_lib.data import DataNotFoundError, download_fra_eng, load_fra_eng, load_fra_eng_subwords
from course_lib.data import download as download_module

LINES = "".join(f"Go {i}.\tVa {i}\u202f!\tCC-BY 2.0 (France)\n" for i in range(40)).encode()


def _archive() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("fra-eng/_about.txt", "Tatoeba")
        z.writestr("fra-eng/fra.txt", LINES)
    return buffer.getvalue()


@pytest.fixture
def server():
    """A local HTTP server serving one zip at /fra-eng.zip; counts the requests."""
    body = _archive()
    hits = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            hits.append(self.path)
            if self.path != "/fra-eng.zip":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/fra-eng.zip", hashlib.sha1(body).hexdigest(), hits
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def no_data(tmp_path, monkeypatch):
    """An empty data folder and an empty cache folder."""
    (tmp_path / "data").mkdir()
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def test_the_published_url_and_checksum_are_d2ls():
    assert download_module.FRA_ENG_URL == "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"
    assert download_module.FRA_ENG_SHA1 == "94646ad1522d915e7b0f9296181140edcf86a4f5"


def test_nothing_is_downloaded_without_the_opt_in(no_data, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a download was attempted without download=True")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    for loader in (load_fra_eng, load_fra_eng_subwords):
        with pytest.raises(DataNotFoundError, match="download=True"):
            loader()
    assert not (no_data / "cache").exists()


def test_download_verifies_caches_and_says_where(no_data, server, monkeypatch, capsys):
    url, sha1, hits = server
    monkeypatch.setattr(download_module, "FRA_ENG_URL", url)
    monkeypatch.setattr(download_module, "FRA_ENG_SHA1", sha1)
    data = load_fra_eng(download=True, min_freq=1)
    assert data.info["n_pairs"] == 40 and data.info["path"] == str(no_data / "cache" / "fra-eng" / "fra.txt")
    err = capsys.readouterr().err
    assert f"downloaded {url} (SHA-1 verified) to {no_data / 'cache' / 'fra-eng.zip'}" in err
    assert str(no_data / "cache" / "fra-eng" / "fra.txt") in err
    assert hits == ["/fra-eng.zip"]
    load_fra_eng_subwords(download=True, vocab_size=280)  # the cached copy: no second request
    assert hits == ["/fra-eng.zip"]


def test_a_wrong_checksum_is_refused_and_nothing_is_kept(no_data, server):
    url, sha1, hits = server
    with pytest.raises(ValueError, match=f"expected {'0' * 40}: refused"):
        download_fra_eng(no_data / "cache", url=url, sha1="0" * 40, quiet=True)
    assert hits == ["/fra-eng.zip"]
    assert list((no_data / "cache").iterdir()) == []


def test_a_failed_download_is_an_os_error(no_data, server):
    url, sha1, _ = server
    with pytest.raises(OSError):
        download_fra_eng(no_data / "cache", url=url.replace("fra-eng.zip", "missing.zip"), sha1=sha1, quiet=True)
