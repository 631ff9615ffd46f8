"""The dates task (course_lib.data.dates): Babel-rendered dates -> ISO dates, every input unambiguous."""

import datetime as dt
import re
import string

import pytest
from babel.dates import format_date

from course_lib.data import (
    DATE_FORMATS,
    ambiguous_date_strings,
    date_formats,
    date_target,
    format_date_example,
    load_dates,
)


@pytest.fixture(scope="module")
def data():
    return load_dates()  # the defaults: 20,000 examples, five locales, 1950-2049


def all_pairs(data):
    return [("".join(s), "".join(t)) for split in ("train", "valid", "test") for s, t in getattr(data, split)]


def test_the_notes_examples():
    day = dt.date(2026, 11, 22)
    assert format_date_example(day, "fr_FR", "full") == "dimanche 22 novembre 2026"
    assert format_date_example(day, "en_US", "full") == "Sunday, November 22, 2026"
    assert format_date_example(day, "de_DE", "medium") == "22.11.2026"
    assert format_date_example(day, "de_DE", "full") == "Sonntag, 22. November 2026"
    assert format_date_example(day, "en_GB", "long") == "22 November 2026"
    assert format_date_example(day, "en_US", "short") == "11/22/26"
    assert date_target(day) == "2026-11-22"


def test_default_sizes_are_80_10_10_with_at_least_1000_test_examples(data):
    assert (len(data.train), len(data.valid), len(data.test)) == (16000, 2000, 2000)
    assert data.tokenizer == "char" and data.name == "dates"
    assert data.info["formats"] == [(loc, f) for loc in ("en_US", "en_GB", "fr_FR", "de_DE", "es_ES")
                                    for f in DATE_FORMATS[loc]]


def test_every_input_has_exactly_one_answer(data):
    answers = {}
    for s, t in all_pairs(data):
        answers.setdefault(s, set()).add(t)
    assert all(len(v) == 1 for v in answers.values())
    assert len(answers) == 20000  # inputs are distinct, so the splits cannot share one
    for split in ("train", "valid", "test"):
        assert all(len(refs) == 1 for refs in data.references[split].values())


def test_splits_share_no_input_string(data):
    sides = [{"".join(s) for s, _ in getattr(data, split)} for split in ("train", "valid", "test")]
    assert not (sides[0] & sides[1] or sides[0] & sides[2] or sides[1] & sides[2])


def test_babel_renders_each_target_back_into_its_input(data):
    source_format = data.info["source_format"]
    for s, t in all_pairs(data):
        locale, fmt = source_format[s]
        assert format_date(dt.date.fromisoformat(t), format=fmt, locale=locale) == s
        assert 1950 <= int(t[:4]) <= 2049


def test_every_format_is_used(data):
    used = set(data.info["source_format"].values())
    assert used == set(data.info["formats"])


def test_tokens_are_characters_and_the_target_vocab_is_digits_and_dash(data):
    s, t = data.train[0]
    assert all(len(c) == 1 for c in s) and all(len(c) == 1 for c in t)
    assert set(data.tgt_vocab.idx_to_token[4:]) == set(string.digits) | {"-"}
    unseen = {c for split in ("valid", "test") for x, _ in getattr(data, split) for c in x} - set(
        data.src_vocab.idx_to_token)
    assert not unseen  # 16,000 training inputs cover every character of the held-out ones


def brute_force_ambiguous(specs, first, last):
    """Render every day with Babel directly and collect the strings two different days produce."""
    days = {}
    day = dt.date(first, 1, 1)
    while day.year <= last:
        for locale, fmt in specs:
            days.setdefault(format_date(day, format=fmt, locale=locale), set()).add(day)
        day += dt.timedelta(days=1)
    return {s: tuple(sorted(d)) for s, d in days.items() if len(d) > 1}


def test_ambiguous_strings_match_a_brute_force_scan_over_ten_years():
    specs = date_formats()
    expected = brute_force_ambiguous(specs, 2020, 2029)
    assert ambiguous_date_strings(years=(2020, 2029)) == expected
    assert expected["5/6/22"] == (dt.date(2022, 5, 6), dt.date(2022, 6, 5))  # en_US M/d/yy vs es_ES d/M/yy
    assert expected["11/12/2024"] == (dt.date(2024, 11, 12), dt.date(2024, 12, 11))  # en_US M/d/y vs dd/MM/y


def test_ambiguous_counts_per_format_follow_from_which_numbers_can_be_a_day_or_a_month(data):
    per = data.info["ambiguous_per_format"]
    n_years = 100
    # M/d and d/M without zero padding collide when day and month are both <= 12 and differ: 12 * 11 a year.
    for spec in ("en_US|short", "en_US|M/d/y", "es_ES|short", "es_ES|d/M/y", "en_GB|d/M/yy", "fr_FR|d/M/y"):
        assert per[spec] == 12 * 11 * n_years, spec
    # dd/MM/y (en_GB, fr_FR short) meets en_US M/d/y only when both numbers have two digits: 10-12, differing.
    assert per["en_GB|short"] == per["fr_FR|short"] == 3 * 2 * n_years
    # dotted German dates and every format with a month or weekday name are never ambiguous here
    others = {k: v for k, v in per.items() if k.startswith("de_DE") or "MMM" in k or k.split("|")[1] in (
        "full", "long", "medium")}
    assert set(others.values()) == {0} and len(others) == 30 - 8
    assert data.info["n_ambiguous"] == 26400  # each ambiguous numeric string is counted once
    inputs = {s for s, _ in all_pairs(data)}
    assert "5/6/22" not in inputs


def test_no_input_could_be_read_as_day_first_and_as_month_first(data):
    # "a/b/yy" or "a/b/yyyy" with a != b both in 1..12 and no zero padding is written by en_US (M/d) and by
    # es_ES, fr_FR or en_GB (d/M) for two different days: none may be an input.
    for s, _ in all_pairs(data):
        m = re.fullmatch(r"([1-9]\d?)/([1-9]\d?)/\d+", s)
        if m:
            a, b = int(m[1]), int(m[2])
            assert not (a <= 12 and b <= 12 and a != b), s


def test_two_digit_years_are_read_in_the_window_of_the_year_range():
    assert format_date_example(dt.date(1950, 1, 2), "en_US", "short") == "1/2/50"
    assert format_date_example(dt.date(2049, 1, 2), "en_US", "short") == "1/2/49"
    one = {"en_US": ("short",)}
    assert ambiguous_date_strings(("en_US",), one, years=(1950, 2049)) == {}
    wider = ambiguous_date_strings(("en_US",), one, years=(1950, 2050))
    assert wider["1/1/50"] == (dt.date(1950, 1, 1), dt.date(2050, 1, 1)) and len(wider) == 365


def test_same_seed_same_data_other_seed_other_data():
    kwargs = {"n_examples": 300, "locales": ("en_US", "de_DE"), "years": (2000, 2009)}
    a, b, c = load_dates(seed=5, **kwargs), load_dates(seed=5, **kwargs), load_dates(seed=6, **kwargs)
    assert (a.train, a.valid, a.test) == (b.train, b.valid, b.test) and a.src_vocab == b.src_vocab
    assert a.train != c.train
    assert (len(a.train), len(a.valid), len(a.test)) == (240, 30, 30)


def test_custom_formats_and_small_ranges():
    d = load_dates(n_examples=366, locales=("de_DE",), formats={"de_DE": ("d.M.y",)}, years=(2000, 2000),
                   valid_frac=0.0, test_frac=0.5)
    inputs = sorted("".join(s) for split in ("train", "valid", "test") for s, _ in getattr(d, split))
    assert inputs == sorted(f"{day.day}.{day.month}.2000" for day in
                            (dt.date(2000, 1, 1) + dt.timedelta(i) for i in range(366)))
    assert len(d.valid) == 0 and len(d.test) == 183


def test_any_ldml_pattern_round_trips_through_babel():
    # "D" (day of the year) depends on the whole date, "%" and quoted text are literals
    formats = {"en_US": ("'day' D 'of' y", "d%M%yy", "EEEE d MMMM y"), "fr_FR": ("full",)}
    d = load_dates(n_examples=400, locales=("en_US", "fr_FR"), formats=formats, years=(2001, 2002))
    assert any(s.startswith("day ") for s in d.info["source_format"]) and any("%" in s for s in d.info["source_format"])
    for s, (locale, fmt) in d.info["source_format"].items():
        (target,) = [t for split in ("train", "valid", "test") for x, t in getattr(d, split) if "".join(x) == s]
        assert format_date(dt.date.fromisoformat("".join(target)), format=fmt, locale=locale) == s


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: load_dates(n_examples=0), ValueError, "n_examples"),
        (lambda: load_dates(n_examples=367, locales=("de_DE",), formats={"de_DE": ("d.M.y",)}, years=(2000, 2000)),
         ValueError, "366 distinct"),
        (lambda: load_dates(locales=("xx_YY",)), ValueError, "xx_YY"),
        (lambda: load_dates(locales="en_US"), TypeError, "single str"),
        (lambda: load_dates(locales=()), ValueError, "at least one"),
        (lambda: load_dates(formats={"en_US": "short"}), TypeError, "single str"),
        (lambda: load_dates(years=(2050, 1950)), ValueError, "years"),
        (lambda: load_dates(years=2000), TypeError, "years"),
        (lambda: load_dates(valid_frac=1.5), ValueError, "valid_frac"),
        (lambda: format_date_example("2026-11-22", "fr_FR", "full"), TypeError, "datetime.date"),
        (lambda: format_date_example(dt.date(2026, 1, 1), "fr_FR", ""), TypeError, "fmt"),
        (lambda: format_date_example(dt.date(2026, 1, 1), "klingon", "full"), ValueError, "klingon"),
        (lambda: date_target(None), TypeError, "datetime.date"),
    ],
)
def test_bad_arguments_raise(call, error, match):
    with pytest.raises(error, match=match):
        call()
