"""Where the course's data files live. Nothing is downloaded here (the opt-in download is in :mod:`.download`).

The data folder is, in this order:

1. the folder named by the environment variable ``COURSE_DATA_DIR``;
2. the first ``shared/data`` folder found in the repository or one of its parent folders (the
   course keeps its data next to the repository, in ``../shared/data``).

A missing folder or file raises :class:`DataNotFoundError` saying what is missing and how to point
the library at it.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DATA_DIR_ENV", "DataNotFoundError", "data_dir", "find_data_file"]

DATA_DIR_ENV = "COURSE_DATA_DIR"


class DataNotFoundError(FileNotFoundError):
    """A data folder or file the course needs is not on this machine.

    A :class:`FileNotFoundError`, so code that already catches that keeps working.

    Examples:
        >>> try:
        ...     load_fra_eng(path="no-such-folder/fra.txt")
        ... except DataNotFoundError as e:
        ...     print(isinstance(e, FileNotFoundError), e)
        True the sentence-pair file no-such-folder/fra.txt does not exist
    """


def _repo_root() -> Path:
    # course_lib/data/paths.py -> the folder that holds course_lib/
    return Path(__file__).resolve().parents[2]


def _candidates() -> list[Path]:
    root = _repo_root()
    return [folder / "shared" / "data" for folder in (root, *root.parents)]


def data_dir() -> Path:
    """The course's data folder.

    Returns:
        ``$COURSE_DATA_DIR`` when set, else the first existing ``shared/data`` in the repository
        folder or one of its parents.

    Raises:
        DataNotFoundError: ``COURSE_DATA_DIR`` names a folder that does not exist, or it is unset
            and no ``shared/data`` folder was found.

    Examples:
        >>> import tempfile
        >>> from unittest import mock
        >>> with tempfile.TemporaryDirectory() as tmp, mock.patch.dict(os.environ, {DATA_DIR_ENV: tmp}):
        ...     data_dir() == Path(tmp)
        True
    """
    env = os.environ.get(DATA_DIR_ENV, "").strip()
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise DataNotFoundError(f"{DATA_DIR_ENV}={env!r} is not a folder: set {DATA_DIR_ENV} to the folder that "
                                    f"holds the course data (e.g. the one with fra-eng/fra.txt in it)")
        return path
    candidates = _candidates()
    for path in candidates:
        if path.is_dir():
            return path
    raise DataNotFoundError(f"no course data folder: {DATA_DIR_ENV} is not set and there is no shared/data folder "
                            f"in {candidates[0].parents[1]} or its parent folders; set {DATA_DIR_ENV} to the "
                            f"folder that holds the data (nothing is downloaded)")


def find_data_file(relative: str | os.PathLike[str]) -> Path:
    """The path of a file inside the data folder, checked to exist.

    Args:
        relative: the file's path inside the data folder, e.g. ``"fra-eng/fra.txt"``.

    Returns:
        The existing file's path.

    Raises:
        TypeError: ``relative`` is not a str or path.
        ValueError: ``relative`` is absolute.
        DataNotFoundError: the data folder or the file is missing; the message names the file and
            says to set ``COURSE_DATA_DIR``.

    Examples:
        >>> import tempfile
        >>> from unittest import mock
        >>> with tempfile.TemporaryDirectory() as tmp, mock.patch.dict(os.environ, {DATA_DIR_ENV: tmp}):
        ...     _ = (Path(tmp) / "notes.txt").write_text("hello")
        ...     print(find_data_file("notes.txt") == Path(tmp) / "notes.txt")
        ...     try:
        ...         find_data_file("fra-eng/fra.txt")
        ...     except DataNotFoundError as e:
        ...         print(str(e)[:48])
        True
        the data file fra-eng/fra.txt is missing: looked
    """
    if not isinstance(relative, (str, os.PathLike)):
        raise TypeError(f"relative must be a str or a path, got {type(relative).__name__}")
    rel = Path(relative)
    if rel.is_absolute():
        raise ValueError(f"relative must be a path inside the data folder, got the absolute path {str(rel)!r}")
    try:
        folder = data_dir()
    except DataNotFoundError as e:
        raise DataNotFoundError(f"cannot find the data file {rel.as_posix()}: {e}") from None
    path = folder / rel
    if not path.is_file():
        raise DataNotFoundError(f"the data file {rel.as_posix()} is missing: looked for {path}; put it there or set "
                                f"{DATA_DIR_ENV} to a folder that holds {rel.as_posix()} (nothing is downloaded)")
    return path
