"""A character-level toy translation task: dates written as people write them -> ISO dates.

``"dimanche 22 novembre 2026"``, ``"Sunday, November 22, 2026"``, ``"22.11.2026"`` -> ``"2026-11-22"``.

Inputs are rendered by Babel (CLDR data shipped with the package, nothing downloaded) in several
locales and formats: the four CLDR lengths ``"full" "long" "medium" "short"`` and a few LDML patterns
per locale (:data:`DATE_FORMATS`). Dates are drawn uniformly from a year range, 1950-2049 by default.

Every input determines its answer. Numeric formats collide across locales: ``"5/6/22"`` is
6 May 2022 in en_US (``M/d/yy``) and 5 June 2022 in es_ES (``d/M/yy``). Before sampling, every date
of the range is rendered in every chosen (locale, format); a string produced by two *different*
dates is ambiguous and is never used (:func:`ambiguous_date_strings`; the count per format is kept in
``data.info["ambiguous_per_format"]``). The same string from two formats for the *same* date
(``"22/11/2026"`` in en_GB and fr_FR) is fine.

Two-digit years (``yy``) are read in the window of the year range: with the default 1950-2049,
``50``-``99`` mean 1950-1999 and ``00``-``49`` mean 2000-2049. A range longer than 100 years makes
two-digit-year strings ambiguous, and the scan above drops them.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from babel import Locale
from babel.core import UnknownLocaleError
from babel.dates import DateTimeFormat, format_date, get_date_format, parse_pattern, tokenize_pattern

from .._validation import check_int, check_positive_int, check_probability
from .dataset import Seq2SeqData, split_by_source

__all__ = ["DATE_FORMATS", "DATE_LOCALES", "DEFAULT_YEARS", "NAMED_DATE_FORMATS", "ambiguous_date_strings",
           "date_formats", "date_target", "format_date_example", "load_dates"]

DATE_LOCALES: tuple[str, ...] = ("en_US", "en_GB", "fr_FR", "de_DE", "es_ES")
DEFAULT_YEARS: tuple[int, int] = (1950, 2049)
NAMED_DATE_FORMATS: tuple[str, ...] = ("full", "long", "medium", "short")
# The CLDR lengths plus LDML patterns people also write (numeric with four-digit years, weekday abbreviations).
DATE_FORMATS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "en_US": (*NAMED_DATE_FORMATS, "M/d/y", "EEE, MMM d, y"),
    "en_GB": (*NAMED_DATE_FORMATS, "d/M/yy", "EEE d MMM y"),
    "fr_FR": (*NAMED_DATE_FORMATS, "d/M/y", "EEE d MMM y"),
    "de_DE": (*NAMED_DATE_FORMATS, "d.M.y", "EEE, d. MMM y"),
    "es_ES": (*NAMED_DATE_FORMATS, "d/M/y", "EEE, d MMM y"),
})

# Pattern letters whose text depends on one calendar component only: year, month, day, weekday.
_COMPONENT = {"y": 0, "M": 1, "L": 1, "d": 2, "E": 3, "e": 3, "c": 3}


def _locale(locale: str) -> Locale:
    if not isinstance(locale, str):
        raise TypeError(f"locale must be a str such as 'en_US', got {type(locale).__name__}")
    try:
        return Locale.parse(locale)
    except (UnknownLocaleError, ValueError) as e:
        raise ValueError(f"locale {locale!r} is not a locale Babel knows (e.g. 'en_US', 'fr_FR'): {e}") from None


def _pattern(locale: Locale, fmt: str):
    if not isinstance(fmt, str) or not fmt:
        raise TypeError(f"fmt must be one of {NAMED_DATE_FORMATS} or an LDML pattern str, got {fmt!r}")
    return get_date_format(fmt, locale=locale) if fmt in NAMED_DATE_FORMATS else parse_pattern(fmt)


def format_date_example(day: dt.date, locale: str, fmt: str) -> str:
    """Write ``day`` the way ``locale`` does in format ``fmt`` (Babel's ``format_date``).

    ``format_date_example(date(2026, 11, 22), "fr_FR", "full")`` -> ``"dimanche 22 novembre 2026"``.

    Args:
        day: the date.
        locale: a Babel locale name, e.g. ``"de_DE"``.
        fmt: ``"full"``, ``"long"``, ``"medium"``, ``"short"`` or an LDML pattern such as ``"d.M.y"``.

    Returns:
        The input string of the dates task.

    Raises:
        TypeError: ``day`` is not a date, or ``fmt`` is not a non-empty str.
        ValueError: unknown locale.

    Examples:
        >>> format_date_example(dt.date(2026, 11, 22), "fr_FR", "full")
        'dimanche 22 novembre 2026'
        >>> format_date_example(dt.date(2026, 11, 22), "de_DE", "d.M.y")
        '22.11.2026'
    """
    if not isinstance(day, dt.date):
        raise TypeError(f"day must be a datetime.date, got {type(day).__name__}")
    loc = _locale(locale)
    _pattern(loc, fmt)
    return format_date(day, format=fmt, locale=loc)


def date_target(day: dt.date) -> str:
    """The answer of the dates task: ``"YYYY-MM-DD"`` (ISO 8601).

    Examples:
        >>> date_target(dt.date(2026, 11, 22))
        '2026-11-22'
    """
    if not isinstance(day, dt.date):
        raise TypeError(f"day must be a datetime.date, got {type(day).__name__}")
    return f"{day.year:04d}-{day.month:02d}-{day.day:02d}"


def date_formats(locales: Sequence[str] = DATE_LOCALES,
                 formats: Mapping[str, Sequence[str]] | None = None) -> list[tuple[str, str]]:
    """The (locale, format) pairs a dates data set uses.

    Args:
        locales: Babel locale names.
        formats: locale -> formats; None (or a locale missing from it) uses :data:`DATE_FORMATS`,
            and the four CLDR lengths for a locale missing there too.

    Returns:
        The distinct (locale, format) pairs, in order.

    Raises:
        TypeError / ValueError: a locale or format is not valid, or there is none.

    Examples:
        >>> date_formats(("en_US", "de_DE"), formats={"de_DE": ("d.M.y",)})
        [('en_US', 'full'), ('en_US', 'long'), ('en_US', 'medium'), ('en_US', 'short'), ('en_US', 'M/d/y'),
         ('en_US', 'EEE, MMM d, y'), ('de_DE', 'd.M.y')]
    """
    if isinstance(locales, str):
        raise TypeError("locales must be a sequence of locale names, got a single str (wrap it in a tuple)")
    specs: list[tuple[str, str]] = []
    for locale in locales:
        loc = _locale(locale)
        chosen = (formats or {}).get(locale, DATE_FORMATS.get(locale, NAMED_DATE_FORMATS))
        if isinstance(chosen, str):
            raise TypeError(f"formats[{locale!r}] must be a sequence of formats, got a single str")
        for fmt in chosen:
            _pattern(loc, fmt)
            if (locale, fmt) not in specs:
                specs.append((locale, fmt))
    if not specs:
        raise ValueError("locales must name at least one locale")
    return specs


def _check_years(years: tuple[int, int]) -> tuple[int, int]:
    if not isinstance(years, (tuple, list)) or len(years) != 2:
        raise TypeError(f"years must be a (first, last) pair of ints, got {years!r}")
    first, last = check_int(years[0], "years[0]"), check_int(years[1], "years[1]")
    if not 1 <= first <= last <= 9999:
        raise ValueError(f"years must satisfy 1 <= first <= last <= 9999, got {years!r}")
    return first, last


def _all_days(years: tuple[int, int]) -> list[dt.date]:
    start, end = dt.date(years[0], 1, 1), dt.date(years[1], 12, 31)
    return [start + dt.timedelta(days=i) for i in range((end - start).days + 1)]


def _renderer(locale: str, fmt: str, years: tuple[int, int]) -> Callable[[dt.date], str]:
    """A fast equivalent of ``format_date(day, fmt, locale)`` for days in ``years``.

    Each field of the pattern is looked up in a table built with Babel's own field formatting, so
    rendering a day costs one ``%`` instead of Babel's per-call parsing; a pattern with a field that
    depends on more than one calendar component (week of year, day of year...) falls back to Babel.
    """
    loc = _locale(locale)
    pattern = _pattern(loc, fmt)
    tokens = tokenize_pattern(pattern.pattern)
    if any(kind == "field" and value[0] not in _COMPONENT for kind, value in tokens):
        return lambda day: pattern.apply(day, loc)
    samples = (
        {y: dt.date(y, 1, 1) for y in range(years[0], years[1] + 1)},
        {m: dt.date(2001, m, 1) for m in range(1, 13)},
        {d: dt.date(2001, 1, d) for d in range(1, 32)},
        {w: dt.date(2001, 1, 1 + w) for w in range(7)},  # 2001-01-01 was a Monday: weekday() 0
    )
    template, fields = [], []
    for kind, value in tokens:
        if kind == "chars":
            template.append(value.replace("%", "%%"))
        else:
            letter, count = value
            component = _COMPONENT[letter]
            key = letter * count
            fields.append((component, {c: DateTimeFormat(s, loc)[key] for c, s in samples[component].items()}))
            template.append("%s")
    text = "".join(template)

    def render(day: dt.date) -> str:
        parts = (day.year, day.month, day.day, day.weekday())
        return text % tuple(table[parts[c]] for c, table in fields)

    return render


def _scan(specs: list[tuple[str, str]], years: tuple[int, int]):
    """Render every day in every format; find the strings that two different days produce."""
    days = _all_days(years)
    rendered = {spec: [render(day) for day in days] for spec in specs
                for render in (_renderer(*spec, years),)}
    first_day: dict[str, int] = {}
    ambiguous: dict[str, set[int]] = {}
    for strings in rendered.values():
        for i, s in enumerate(strings):
            j = first_day.setdefault(s, i)
            if j != i:
                ambiguous.setdefault(s, {j}).add(i)
    return days, rendered, first_day, ambiguous


def ambiguous_date_strings(locales: Sequence[str] = DATE_LOCALES, formats: Mapping[str, Sequence[str]] | None = None,
                           years: tuple[int, int] = DEFAULT_YEARS) -> dict[str, tuple[dt.date, ...]]:
    """The strings that two different days of ``years`` render to in the chosen (locale, format)s.

    ``"5/6/22"`` is among them with the default settings: en_US ``short`` (``M/d/yy``) writes
    6 May 2022 so and es_ES ``short`` (``d/M/yy``) 5 June 2022.

    Args:
        locales, formats: as in :func:`date_formats`.
        years: (first, last) year, inclusive.

    Returns:
        ambiguous string -> the days that produce it (sorted).

    Raises:
        TypeError, ValueError: a bad locale, format or year range (see :func:`date_formats`).

    Examples:
        >>> short = {"en_US": ("short",), "es_ES": ("short",)}
        >>> ambiguous = ambiguous_date_strings(("en_US", "es_ES"), short, years=(2022, 2022))
        >>> ambiguous["5/6/22"]
        (datetime.date(2022, 5, 6), datetime.date(2022, 6, 5))
    """
    days, _, _, ambiguous = _scan(date_formats(locales, formats), _check_years(years))
    return {s: tuple(days[i] for i in sorted(idx)) for s, idx in sorted(ambiguous.items())}


def load_dates(n_examples: int = 20000, locales: Sequence[str] = DATE_LOCALES, seed: int = 0,
               formats: Mapping[str, Sequence[str]] | None = None, years: tuple[int, int] = DEFAULT_YEARS,
               valid_frac: float = 0.1, test_frac: float = 0.1) -> Seq2SeqData:
    """The dates task: Babel-rendered dates -> ``"YYYY-MM-DD"``, character by character.

    Examples are drawn with ``random.Random(seed)``: a (locale, format) uniformly from
    :func:`date_formats`, then a day uniformly from ``years``; a draw whose string is ambiguous or
    already taken is redrawn, so the ``n_examples`` input strings are distinct and each has exactly
    one answer. They are split 80/10/10 (by default) at random; the splits share no input string.
    Tokens are characters (``list(string)``); the vocabularies are built on the training split.

    Args:
        n_examples: number of (input, answer) pairs.
        locales, formats: the (locale, format)s to render with (see :func:`date_formats`).
        seed: the sampling and splitting seed.
        years: (first, last) year, inclusive; two-digit years are read inside this window.
        valid_frac, test_frac: split fractions.

    Returns:
        A character-level :class:`Seq2SeqData` named ``"dates"``. ``info`` holds ``formats`` (the
        (locale, format) list), ``years``, ``seed``, ``ambiguous_per_format`` (``"locale|format"``
        -> how many of its strings over the whole range are ambiguous, hence never drawn),
        ``n_ambiguous`` (distinct ambiguous strings), ``n_available`` (distinct usable strings) and
        ``source_format`` (input string -> the (locale, format) it was drawn with).

    Raises:
        ValueError: ``n_examples`` is larger than the number of distinct unambiguous strings, or a
            bad locale, format, year range or fraction.

    Examples:
        >>> data = load_dates(n_examples=20, locales=("en_US",), years=(2000, 2009), seed=0)
        >>> data
        Seq2SeqData(name='dates', tokenizer='char',
                    train=16, valid=2, test=2,
                    src_vocab=40, tgt_vocab=15)
        >>> src, tgt = data.train[0]
        >>> data.to_text(src, "src"), data.to_text(tgt), data.info["source_format"][data.to_text(src, "src")]
        ('7/1/08', '2008-07-01', ('en_US', 'short'))
    """
    n_examples = check_positive_int(n_examples, "n_examples")
    seed = check_int(seed, "seed")
    years = _check_years(years)
    valid_frac, test_frac = check_probability(valid_frac, "valid_frac"), check_probability(test_frac, "test_frac")
    specs = date_formats(locales, formats)
    days, rendered, first_day, ambiguous = _scan(specs, years)
    n_available = len(first_day) - len(ambiguous)
    if n_examples > n_available:
        raise ValueError(f"n_examples={n_examples} is more than the {n_available} distinct unambiguous date strings "
                         f"of {len(specs)} formats over the years {years[0]}-{years[1]}")
    rng = random.Random(seed)
    source_format: dict[str, tuple[str, str]] = {}
    pairs = []
    while len(pairs) < n_examples:
        spec = specs[rng.randrange(len(specs))]
        i = rng.randrange(len(days))
        s = rendered[spec][i]
        if s in ambiguous or s in source_format:
            continue
        source_format[s] = spec
        pairs.append((list(s), list(date_target(days[i]))))
    train, valid, test = split_by_source(pairs, valid_frac, test_frac, seed)
    per_format = {f"{loc}|{fmt}": sum(s in ambiguous for s in rendered[(loc, fmt)]) for loc, fmt in specs}
    info = {"formats": specs, "years": years, "seed": seed, "ambiguous_per_format": per_format,
            "n_ambiguous": len(ambiguous), "n_available": n_available, "source_format": source_format}
    return Seq2SeqData.from_splits(train, valid, test, tokenizer="char", name="dates", info=info)
