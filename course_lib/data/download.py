"""The opt-in download of the English-French archive (the one Dive into Deep Learning uses).

Nothing in ``course_lib`` downloads anything unless asked: :func:`download_fra_eng` is called only by
``load_fra_eng(download=True)`` / ``load_fra_eng_subwords(download=True)`` or by hand. It fetches the
zip archive, checks its SHA-1 against the published one, keeps it in a cache folder and extracts
``fra-eng/fra.txt`` next to it; a second call reuses the cached copy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

__all__ = ["CACHE_DIR_ENV", "FRA_ENG_SHA1", "FRA_ENG_URL", "cache_dir", "download_fra_eng"]

# D2L's copy of the Tatoeba English-French pairs and the SHA-1 D2L publishes for it (d2l.ai, section 10.5).
FRA_ENG_URL = "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"
FRA_ENG_SHA1 = "94646ad1522d915e7b0f9296181140edcf86a4f5"
CACHE_DIR_ENV = "COURSE_CACHE_DIR"


def cache_dir() -> Path:
    """Where downloads are kept: ``$COURSE_CACHE_DIR``, else ``~/.cache/course_lib``.

    Examples:
        >>> from unittest import mock
        >>> with mock.patch.dict(os.environ, {CACHE_DIR_ENV: "/tmp/course-cache"}):
        ...     print(cache_dir())
        /tmp/course-cache
    """
    env = os.environ.get(CACHE_DIR_ENV, "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache" / "course_lib"


def _sha1(path: Path) -> str:
    digest = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_fra_eng(folder: str | os.PathLike[str] | None = None, url: str | None = None, sha1: str | None = None,
                     timeout: float = 60.0, quiet: bool = False) -> Path:
    """Fetch, verify and unpack the English-French archive; return the path of its ``fra.txt``.

    Args:
        folder: the cache folder (default :func:`cache_dir`); the archive is kept as
            ``folder/fra-eng.zip`` and unpacked to ``folder/fra-eng/fra.txt``.
        url: where to fetch the archive (default :data:`FRA_ENG_URL`).
        sha1: its expected SHA-1 (hex, default :data:`FRA_ENG_SHA1`); a download that does not match
            is deleted and refused.
        timeout: seconds to wait for the server.
        quiet: do not say on stderr what was downloaded and where it is kept.

    Returns:
        The path of ``fra.txt``, which ``load_fra_eng(path=...)`` reads (or point ``COURSE_DATA_DIR``
        at ``folder``).

    Raises:
        OSError: the download failed (no network, HTTP error).
        ValueError: the downloaded archive's SHA-1 is not ``sha1``, or it holds no ``fra.txt``.

    Examples:
        Offline, with a local archive standing in for the server (a ``file://`` URL):

        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     archive = Path(tmp) / "fra-eng.zip"
        ...     with zipfile.ZipFile(archive, "w") as z:
        ...         z.writestr("fra-eng/fra.txt", "Go.\\tVa !\\n")
        ...     sha1 = hashlib.sha1(archive.read_bytes()).hexdigest()
        ...     text = download_fra_eng(Path(tmp) / "cache", url=archive.as_uri(), sha1=sha1, quiet=True)
        ...     print(text.relative_to(tmp), text.read_text().split("\\t"))
        cache/fra-eng/fra.txt ['Go.', 'Va !\\n']
    """
    url = FRA_ENG_URL if url is None else url
    sha1 = FRA_ENG_SHA1 if sha1 is None else sha1
    folder = Path(folder) if folder is not None else cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    archive, text = folder / "fra-eng.zip", folder / "fra-eng" / "fra.txt"
    if not (archive.is_file() and _sha1(archive) == sha1):
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".fra-eng.", suffix=".zip.part")
        try:
            with os.fdopen(fd, "wb") as f, urllib.request.urlopen(url, timeout=timeout) as response:
                shutil.copyfileobj(response, f)
            got = _sha1(Path(tmp))
            if got != sha1:
                raise ValueError(f"the archive downloaded from {url} has SHA-1 {got}, expected {sha1}: refused "
                                 f"(a changed or corrupted file)")
            os.replace(tmp, archive)
        finally:
            Path(tmp).unlink(missing_ok=True)
        if not quiet:
            print(f"downloaded {url} (SHA-1 verified) to {archive}", file=sys.stderr)
    if not text.is_file():
        with zipfile.ZipFile(archive) as z:
            members = [m for m in z.namelist() if m.endswith("fra.txt")]
            if not members:
                raise ValueError(f"{archive} holds no fra.txt (members: {z.namelist()[:5]})")
            text.parent.mkdir(parents=True, exist_ok=True)
            with z.open(members[0]) as src, open(text, "wb") as dst:
                shutil.copyfileobj(src, dst)
    if not quiet:
        print(f"English-French pairs: {text} (cached; set COURSE_DATA_DIR={folder} to use it without download=True)",
              file=sys.stderr)
    return text
