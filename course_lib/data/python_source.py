"""A corpus every Python installation carries: the standard library's own source code (chapter 12).

"A GPT that writes Python" needs real text of at least a megabyte that is present offline, on a fresh
machine, in CI and in Colab, with a known licence and the same bytes on every run. The Python standard
library is such a text: its modules ship as ``.py`` files next to the interpreter (``sysconfig``'s
``stdlib`` folder), under the Python Software Foundation License (PSF-2.0).

The corpus is chosen by a rule that reads no list: the **public top-level modules** of that folder
(``*.py`` directly in it, names not starting with ``_``: no packages, no test suite, no private
helpers, and not the build's generated ``_sysconfigdata_*``), each of at most ``max_bytes`` bytes (the
few largest, such as ``typing.py``, would otherwise dominate a split), sorted by name. Under the
course's pinned Python 3.11.7 the default gives 135 files and 2,626,478 bytes; another Python version
ships other versions of the modules and gives a slightly different corpus (the counts are in
:attr:`course_lib.data.LMData.info`).

:func:`load_python_lm` splits the files into training and held-out ones *by file* and makes them token
streams with :meth:`course_lib.data.LMData.from_documents` (byte-level BPE that keeps every space and
newline).
"""

from __future__ import annotations

import os
import platform
import sysconfig
from pathlib import Path

from .._validation import check_positive_int
from .lm import LMData
from .paths import DataNotFoundError

__all__ = ["PYTHON_SOURCE_LICENSE", "load_python_lm", "python_source_files"]

PYTHON_SOURCE_LICENSE = "Python Software Foundation License Version 2 (PSF-2.0)"
_MAX_BYTES = 65_536


def python_source_files(root: str | os.PathLike[str] | None = None, max_bytes: int = _MAX_BYTES) -> list[Path]:
    """The public top-level modules of the standard library folder, of at most ``max_bytes`` each, by name.

    Args:
        root: the folder; ``None`` is this interpreter's standard library, ``sysconfig.get_paths()["stdlib"]``.
        max_bytes: files larger than this are left out.

    Returns:
        The ``*.py`` files directly in ``root`` whose names do not start with ``_``, sorted by name.

    Raises:
        DataNotFoundError: ``root`` is not a folder, or holds no such file.

    Examples:
        >>> files = python_source_files()  # this interpreter's standard library
        >>> [f.name for f in files if f.name in ("abc.py", "this.py", "typing.py", "_pyio.py")]
        ['abc.py', 'this.py']
        >>> all(f.stat().st_size <= 65536 for f in files), files == sorted(files)
        (True, True)
    """
    max_bytes = check_positive_int(max_bytes, "max_bytes")
    folder = Path(sysconfig.get_paths()["stdlib"] if root is None else root)
    if not folder.is_dir():
        raise DataNotFoundError(f"the standard library folder {folder} does not exist")
    files = sorted(f for f in folder.glob("*.py")
                   if f.is_file() and not f.name.startswith("_") and f.stat().st_size <= max_bytes)
    if not files:
        raise DataNotFoundError(f"{folder} holds no public module (*.py not starting with _) of at most "
                                f"{max_bytes} bytes")
    return files


def load_python_lm(vocab_size: int = 2048, seed: int = 0, valid_frac: float = 0.1, test_frac: float = 0.1,
                   root: str | os.PathLike[str] | None = None, max_bytes: int = _MAX_BYTES) -> LMData:
    """The standard library's source as a language-modelling corpus, split by file (see the module docstring).

    The files of :func:`python_source_files` are read as UTF-8, shuffled with ``seed`` and split into
    train / valid / test by file, a byte-level BPE tokenizer that keeps whitespace is learned on the
    training files, and each split becomes one stream ``file <eos> file <eos> ...``
    (:meth:`LMData.from_documents`).

    Args:
        vocab_size: of the BPE (>= 260).
        seed, valid_frac, test_frac: the split (fractions of the files).
        root, max_bytes: which files (:func:`python_source_files`).

    Returns:
        An :class:`LMData` named ``"python"``. ``info`` also holds ``root``, ``files`` (the count),
        ``bytes`` (all files), ``python`` (the interpreter's version) and ``license``.

    Raises:
        DataNotFoundError: no standard library folder or no file in it.

    Examples:
        >>> data = load_python_lm(vocab_size=512)
        >>> data.name, data.vocab_size, data.info["license"]
        ('python', 512, 'Python Software Foundation License Version 2 (PSF-2.0)')
        >>> held_out = data.info["documents"]["test"] + data.info["documents"]["valid"]
        >>> set(held_out).isdisjoint(data.info["documents"]["train"])  # split by file
        True
    """
    files = python_source_files(root, max_bytes)
    documents = {f.name: f.read_text(encoding="utf-8") for f in files}
    data = LMData.from_documents(documents, vocab_size, seed, valid_frac, test_frac, name="python")
    data.info.update(root=str(files[0].parent), files=len(files), bytes=sum(f.stat().st_size for f in files),
                     python=platform.python_version(), license=PYTHON_SOURCE_LICENSE)
    return data
