"""Progress bars: live where a person watches, one line in a stored notebook.

tqdm redraws its bar by writing a new line of text; a notebook executed by ``make book`` or
``make test`` stores every redraw (hundreds of lines in the HTML). :func:`progress` gives a live tqdm
bar in Jupyter, Colab or a terminal, and, when the environment variable ``COURSE_PROGRESS`` is
``line`` (the Makefile sets it for the runs that store or check outputs), no bar at all but one
summary line when the loop ends. ``COURSE_PROGRESS=off`` prints nothing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from tqdm import tqdm

__all__ = ["PROGRESS_ENV", "progress", "progress_mode"]

PROGRESS_ENV = "COURSE_PROGRESS"
_MODES = ("bar", "line", "off")


def progress_mode() -> str:
    """The progress style in force: ``"bar"`` (default), ``"line"`` or ``"off"``, from ``COURSE_PROGRESS``.

    Raises:
        ValueError: if ``COURSE_PROGRESS`` holds another value.

    Examples:
        >>> from unittest import mock
        >>> with mock.patch.dict(os.environ, {PROGRESS_ENV: " Line "}):
        ...     progress_mode()
        'line'
        >>> with mock.patch.dict(os.environ, {PROGRESS_ENV: ""}):
        ...     progress_mode()  # empty: the default
        'bar'
    """
    mode = os.environ.get(PROGRESS_ENV, "bar").strip().lower() or "bar"
    if mode not in _MODES:
        raise ValueError(f"{PROGRESS_ENV} must be one of {_MODES}, got {mode!r}")
    return mode


class _Discard:
    """A file that swallows the bar's redraws."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


class _OneLine(tqdm):
    """A tqdm bar that draws nothing while it runs and prints its final state once, on close."""

    def __init__(self, *args, **kwargs):
        self._summary_file = kwargs.pop("file", None)
        kwargs.pop("dynamic_ncols", None)
        kwargs["mininterval"] = float("inf")
        kwargs.setdefault("ascii", False)  # the discarding file has no encoding to choose from
        super().__init__(*args, file=_Discard(), **kwargs)
        self._summarised = False

    def close(self) -> None:
        if not self.disable and not self._summarised:
            self._summarised = True
            line = self.format_meter(**{**self.format_dict, "ncols": None})
            print(line.strip(), file=self._summary_file or sys.stderr, flush=True)
        super().close()


def progress(iterable: Iterable | None = None, *, total: int | None = None, desc: str | None = None,
             disable: bool = False, **kwargs) -> tqdm:
    """A progress bar over ``iterable`` (or updated by hand with ``.update(n)``), styled by :func:`progress_mode`.

    Args:
        iterable: what to iterate over; ``None`` for a bar driven by ``update``.
        total: number of steps, when ``len(iterable)`` does not give it (``None``: unknown).
        desc: a label in front of the bar.
        disable: no bar and no line, whatever the mode.
        **kwargs: passed to :class:`tqdm.tqdm` (``unit``, ``mininterval``, ...).

    Returns:
        A :class:`tqdm.tqdm` object: iterate over it, or call ``update``, ``set_postfix`` and ``close``
        (or use it as a context manager). In ``"line"`` mode it prints its final line once, on stderr,
        when closed (a ``for`` loop over it closes it at the end).

    Examples:
        In ``"line"`` mode (here on stdout, to show it), one line when the loop ends:

        >>> from unittest import mock
        >>> with mock.patch.dict(os.environ, {PROGRESS_ENV: "line"}):
        ...     total = sum(progress(range(3), desc="epochs", file=sys.stdout))
        epochs: 100%|██████████| 3/3 [00:00<...]
        >>> with mock.patch.dict(os.environ, {PROGRESS_ENV: "line"}), progress(total=10, file=sys.stdout) as bar:
        ...     bar.update(4)
        40%|████      | 4/10 [00:00<...]
    """
    mode = progress_mode()
    disable = disable or mode == "off"
    if mode == "line":
        return _OneLine(iterable, total=total, desc=desc, disable=disable, **kwargs)
    kwargs.setdefault("mininterval", 1.0)
    return tqdm(iterable, total=total, desc=desc, disable=disable, **kwargs)
