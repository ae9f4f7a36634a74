"""Period resolution for WITHIN "…": phrases, rejections, time zones, robustness."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nlql.errors import NLQLError, PlanError
from nlql.text import temporal
from nlql.text.temporal import HINT, OPEN_END, OPEN_START, Period, resolve_period, warm_up

NOW = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)


def test_the_clock_is_a_monday() -> None:
    assert NOW.weekday() == 0


def _d(text: str) -> datetime:
    """'2026-11-23' or '2026-11-27T15:00' → aware UTC datetime."""
    return datetime.fromisoformat(text if "T" in text else text + "T00:00").replace(tzinfo=timezone.utc)


N = "2026-11-30T15:00"  # now, as an expected bound

PHRASES: list[tuple[str, str, str]] = [
    # days
    ("today", "2026-11-30", "2026-12-01"),
    ("Today", "2026-11-30", "2026-12-01"),
    ("yesterday", "2026-11-29", "2026-11-30"),
    ("tomorrow", "2026-12-01", "2026-12-02"),
    ("the day before yesterday", "2026-11-28", "2026-11-29"),
    ("3 days ago", "2026-11-27", "2026-11-28"),
    ("one day ago", "2026-11-29", "2026-11-30"),
    # weeks (Monday–Sunday)
    ("this week", "2026-11-30", "2026-12-07"),
    ("last week", "2026-11-23", "2026-11-30"),
    ("Last Week", "2026-11-23", "2026-11-30"),
    ("the previous week", "2026-11-23", "2026-11-30"),
    ("next week", "2026-12-07", "2026-12-14"),
    ("the week before last", "2026-11-16", "2026-11-23"),
    ("2 weeks ago", "2026-11-16", "2026-11-23"),
    ("this weekend", "2026-12-05", "2026-12-07"),
    ("last weekend", "2026-11-28", "2026-11-30"),
    ("2024-W23", "2024-06-03", "2024-06-10"),
    ("week 23 of 2024", "2024-06-03", "2024-06-10"),
    # weekdays
    ("monday", "2026-11-30", "2026-12-01"),
    ("last monday", "2026-11-23", "2026-11-24"),
    ("this monday", "2026-11-30", "2026-12-01"),
    ("next monday", "2026-12-07", "2026-12-08"),
    ("on friday", "2026-11-27", "2026-11-28"),
    ("last sunday", "2026-11-29", "2026-11-30"),
    ("next friday", "2026-12-04", "2026-12-05"),
    # months
    ("this month", "2026-11-01", "2026-12-01"),
    ("last month", "2026-10-01", "2026-11-01"),
    ("next month", "2026-12-01", "2027-01-01"),
    ("a month ago", "2026-10-01", "2026-11-01"),
    ("in June 2024", "2024-06-01", "2024-07-01"),
    ("June 2024", "2024-06-01", "2024-07-01"),
    ("jun 2024", "2024-06-01", "2024-07-01"),
    ("june, 2024", "2024-06-01", "2024-07-01"),
    ("june of 2024", "2024-06-01", "2024-07-01"),
    ("2024-06", "2024-06-01", "2024-07-01"),
    ("06/2024", "2024-06-01", "2024-07-01"),
    ("in may", "2026-05-01", "2026-06-01"),
    ("in December", "2025-12-01", "2026-01-01"),
    ("in november", "2026-11-01", "2026-12-01"),
    ("last june", "2026-06-01", "2026-07-01"),
    ("last november", "2025-11-01", "2025-12-01"),
    ("next june", "2027-06-01", "2027-07-01"),
    ("june last year", "2025-06-01", "2025-07-01"),
    ("February 2024", "2024-02-01", "2024-03-01"),
    # quarters and halves
    ("this quarter", "2026-10-01", "2027-01-01"),
    ("last quarter", "2026-07-01", "2026-10-01"),
    ("Q3 2023", "2023-07-01", "2023-10-01"),
    ("q1", "2026-01-01", "2026-04-01"),
    ("2023-Q3", "2023-07-01", "2023-10-01"),
    ("the third quarter of 2023", "2023-07-01", "2023-10-01"),
    ("4th quarter 2022", "2022-10-01", "2023-01-01"),
    ("H1 2024", "2024-01-01", "2024-07-01"),
    ("the second half of 2024", "2024-07-01", "2025-01-01"),
    # years and decades
    ("2024", "2024-01-01", "2025-01-01"),
    ("in 2024", "2024-01-01", "2025-01-01"),
    ("during 2019", "2019-01-01", "2020-01-01"),
    ("the year 2024", "2024-01-01", "2025-01-01"),
    ("this year", "2026-01-01", "2027-01-01"),
    ("last year", "2025-01-01", "2026-01-01"),
    ("a year ago", "2025-01-01", "2026-01-01"),
    ("early 2024", "2024-01-01", "2024-05-01"),
    ("mid 2024", "2024-05-01", "2024-09-01"),
    ("late 2023", "2023-09-01", "2024-01-01"),
    ("the 1990s", "1990-01-01", "2000-01-01"),
    ("the 90s", "1990-01-01", "2000-01-01"),
    ("the '90s", "1990-01-01", "2000-01-01"),
    ("this decade", "2020-01-01", "2030-01-01"),
    ("last decade", "2010-01-01", "2020-01-01"),
    # dates
    ("2024-06-01", "2024-06-01", "2024-06-02"),
    ("on 2024-06-01", "2024-06-01", "2024-06-02"),
    ("2024/06/01", "2024-06-01", "2024-06-02"),
    ("June 1, 2024", "2024-06-01", "2024-06-02"),
    ("1 June 2024", "2024-06-01", "2024-06-02"),
    ("the 1st of June 2024", "2024-06-01", "2024-06-02"),
    ("june 1", "2026-06-01", "2026-06-02"),
    ("december 25", "2025-12-25", "2025-12-26"),
    ("2024-02-29", "2024-02-29", "2024-03-01"),
    # rolling
    ("the past 3 days", "2026-11-27T15:00", N),
    ("past 3 days", "2026-11-27T15:00", N),
    ("last 3 days", "2026-11-27T15:00", N),
    ("last three days", "2026-11-27T15:00", N),
    ("last 24 hours", "2026-11-29T15:00", N),
    ("last 24h", "2026-11-29T15:00", N),
    ("past 7d", "2026-11-23T15:00", N),
    ("the last 2 weeks", "2026-11-16T15:00", N),
    ("the past week", "2026-11-23T15:00", N),
    ("past week", "2026-11-23T15:00", N),
    ("the last week", "2026-11-23T15:00", N),
    ("the past month", "2026-10-30T15:00", N),
    ("the past year", "2025-11-30T15:00", N),
    ("past 90 minutes", "2026-11-30T13:30", N),
    ("within the last 30 days", "2026-10-31T15:00", N),
    ("in the past 2 weeks", "2026-11-16T15:00", N),
    ("over the last 3 months", "2026-08-30T15:00", N),
    ("the last fortnight", "2026-11-16T15:00", N),
    ("the next 3 days", N, "2026-12-03T15:00"),
    ("3 hours ago", "2026-11-30T12:00", "2026-11-30T13:00"),
    # to date
    ("earlier this month", "2026-11-01", N),
    ("this month so far", "2026-11-01", N),
    ("so far this year", "2026-01-01", N),
    ("year to date", "2026-01-01", N),
    ("YTD", "2026-01-01", N),
    ("earlier this week", "2026-11-30", N),
    # since / from / ranges
    ("since March", "2026-03-01", N),
    ("since 2020", "2020-01-01", N),
    ("since last week", "2026-11-23", N),
    ("since monday", "2026-11-30", N),
    ("since yesterday", "2026-11-29", N),
    ("since June 2024", "2024-06-01", N),
    ("from 2020", "2020-01-01", N),
    ("between 2020 and 2022", "2020-01-01", "2023-01-01"),
    ("Between 2020 And 2022", "2020-01-01", "2023-01-01"),
    ("2020-2022", "2020-01-01", "2023-01-01"),
    ("2020 – 2022", "2020-01-01", "2023-01-01"),
    ("from May 2023 to July 2023", "2023-05-01", "2023-08-01"),
    ("from may to july 2023", "2023-05-01", "2023-08-01"),
    ("between june and august 2024", "2024-06-01", "2024-09-01"),
    ("from november to february 2024", "2023-11-01", "2024-03-01"),
    ("from 2024-06-01 to 2024-06-30", "2024-06-01", "2024-07-01"),
    ("from 2020 to now", "2020-01-01", N),
    ("between last monday and yesterday", "2026-11-23", "2026-11-30"),
    ("Q1 2024 to Q2 2024", "2024-01-01", "2024-07-01"),
    # decorations
    ('"last week"', "2026-11-23", "2026-11-30"),
    ("  last   week. ", "2026-11-23", "2026-11-30"),
]


@pytest.mark.parametrize(("text", "start", "end"), PHRASES)
def test_phrase(text: str, start: str, end: str) -> None:
    p = resolve_period(text, NOW)
    assert (p.start, p.end) == (_d(start), _d(end))
    assert p.text == text
    assert p.method == "rule"
    assert p.description == f"{p.start.isoformat()} .. {p.end.isoformat()}"
    assert not p.open_start and not p.open_end


def test_enough_phrases() -> None:
    assert len(PHRASES) >= 60


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("before 2020", None, "2020-01-01"),
        ("prior to June 2024", None, "2024-06-01"),
        ("until 2020", None, "2021-01-01"),
        ("after 2020", "2021-01-01", None),
        ("2020 onwards", "2020-01-01", None),
        ("from March 2024 onwards", "2024-03-01", None),
    ],
)
def test_open_periods(text: str, start: str | None, end: str | None) -> None:
    p = resolve_period(text, NOW)
    assert p.open_start is (start is None) and p.open_end is (end is None)
    assert p.start == (OPEN_START if start is None else _d(start))
    assert p.end == (OPEN_END if end is None else _d(end))
    assert ("-inf" in p.description) is (start is None) and ("+inf" in p.description) is (end is None)
    # the sentinels survive a conversion to any offset
    for hours in (-12, 14):
        p.start.astimezone(timezone(timedelta(hours=hours)))
        p.end.astimezone(timezone(timedelta(hours=hours)))


def test_the_description_format() -> None:
    p = resolve_period("last week", NOW)
    assert p.description == "2026-11-23T00:00:00+00:00 .. 2026-11-30T00:00:00+00:00"
    assert p.to_dict() == {
        "text": "last week",
        "start": "2026-11-23T00:00:00+00:00",
        "end": "2026-11-30T00:00:00+00:00",
        "method": "rule",
        "description": p.description,
    }
    assert p.contains(_d("2026-11-29T23:59")) and not p.contains(_d("2026-11-30"))
    assert isinstance(p, Period)
    with pytest.raises(AttributeError):
        p.start = NOW  # type: ignore[misc]  # frozen


REJECTED = [
    "may", "March", "march on", "march", "3", "12", "0", "42", "hello world", "banana", "recently",
    "", "   ", "last", "next", "the", "week", "month", "the past few days", "q5 2024", "2024-13",
    "2024-02-30", "last 0 days", "in 3 days", "now", "soon", "christmas", "may be", "march forward",
    "sun", "12 34", "1/2", "-5", "3.5", "last banana", "since", "between 2020", "from", "before",
    "x" * 150, "2024 " * 30, "I may go on the 5th", "march 5 protest",
]


@pytest.mark.parametrize("text", REJECTED)
def test_rejected(text: str) -> None:
    with pytest.raises(PlanError) as info:
        resolve_period(text, NOW)
    err = info.value
    assert err.message == f"cannot understand the period {text!r}"
    assert err.hint == HINT
    assert err.span is None


@pytest.mark.parametrize("text", ["between 2022 and 2020", "since tomorrow", "from next year to last year"])
def test_reversed_periods(text: str) -> None:
    with pytest.raises(PlanError, match="ends before it starts"):
        resolve_period(text, NOW)


@pytest.mark.parametrize("text", ["9999", "between 9998 and 9999", "last 100000 years", "0999", "999999 weeks ago"])
def test_out_of_range(text: str) -> None:
    with pytest.raises(PlanError):
        resolve_period(text, NOW)


def test_dateparser_fallback_for_single_days() -> None:
    for text, day in [("12/25/2024", "2024-12-25"), ("25.12.2024", "2024-12-25"), ("Dec 25th 2024 at 3pm", "2024-12-25")]:
        p = resolve_period(text, NOW)
        assert p.method == "dateparser", text
        assert (p.start, p.end) == (_d(day), _d(day) + timedelta(days=1))


def test_dateparser_failures_never_escape(monkeypatch: pytest.MonkeyPatch) -> None:
    import dateparser

    def boom(*args: object, **kwargs: object) -> None:
        raise RecursionError("dateparser blew up")

    monkeypatch.setattr(dateparser, "parse", boom)
    with pytest.raises(PlanError):
        resolve_period("12/25/2024", NOW)


def test_dateparser_never_sees_long_or_numberless_input(monkeypatch: pytest.MonkeyPatch) -> None:
    import dateparser

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("dateparser must not be called")

    monkeypatch.setattr(dateparser, "parse", fail)
    for text in ["march", "may", "hello there", "3", "12", "june 5 " + "x" * 100]:
        with pytest.raises(PlanError):
            resolve_period(text, NOW)


def test_warm_up() -> None:
    first = warm_up()
    assert first >= 0.0
    assert warm_up() == 0.0


def test_naive_clock_is_a_programmer_error() -> None:
    with pytest.raises(ValueError):
        resolve_period("today", datetime(2026, 11, 30, 15))


# ---------------------------------------------------------------------------- other clocks


def test_calendar_units_use_the_clock_time_zone() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    now = datetime(2026, 11, 30, 0, 30, tzinfo=berlin)  # still Sunday 29th in UTC
    p = resolve_period("today", now)
    assert p.start == datetime(2026, 11, 30, tzinfo=berlin)
    assert p.description == "2026-11-30T00:00:00+01:00 .. 2026-12-01T00:00:00+01:00"
    assert resolve_period("yesterday", now).start == datetime(2026, 11, 29, tzinfo=berlin)


def test_dst_change_day() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    now = datetime(2026, 3, 29, 15, 0, tzinfo=berlin)  # clocks went forward at 02:00
    today = resolve_period("today", now)
    assert today.start.utcoffset() == timedelta(hours=1) and today.end.utcoffset() == timedelta(hours=2)
    utc = timezone.utc
    assert today.end.astimezone(utc) - today.start.astimezone(utc) == timedelta(hours=23)
    last_day = resolve_period("last 24 hours", now)
    assert now.astimezone(utc) - last_day.start.astimezone(utc) == timedelta(hours=24)  # elapsed time
    assert last_day.start.isoformat() == "2026-03-28T14:00:00+01:00"


def test_pytz_clock() -> None:
    pytz = pytest.importorskip("pytz")
    tz = pytz.timezone("America/New_York")
    now = tz.localize(datetime(2026, 7, 4, 12, 0))
    p = resolve_period("this month", now)
    assert p.start.isoformat() == "2026-07-01T00:00:00-04:00"
    assert p.end.isoformat() == "2026-08-01T00:00:00-04:00"
    assert resolve_period("last 24 hours", now).start == now - timedelta(hours=24)


@pytest.mark.parametrize(
    ("now", "text", "start", "end"),
    [
        (datetime(2026, 2, 10, tzinfo=timezone.utc), "since March", "2025-03-01", "2026-02-10"),
        (datetime(2026, 3, 15, tzinfo=timezone.utc), "since March", "2026-03-01", "2026-03-15"),
        (datetime(2026, 3, 31, tzinfo=timezone.utc), "the past month", "2026-02-28", "2026-03-31"),
        (datetime(2024, 3, 31, tzinfo=timezone.utc), "last month", "2024-02-01", "2024-03-01"),
        (datetime(2026, 1, 5, tzinfo=timezone.utc), "last month", "2025-12-01", "2026-01-01"),
        (datetime(2026, 1, 5, tzinfo=timezone.utc), "last quarter", "2025-10-01", "2026-01-01"),
        (datetime(2026, 1, 1, tzinfo=timezone.utc), "last week", "2025-12-22", "2025-12-29"),
        (datetime(2026, 12, 6, 9, tzinfo=timezone.utc), "last monday", "2026-11-30", "2026-12-01"),
        (datetime(2026, 12, 6, 9, tzinfo=timezone.utc), "this weekend", "2026-12-05", "2026-12-07"),
        (datetime(2026, 5, 20, tzinfo=timezone.utc), "q3", "2025-07-01", "2025-10-01"),
        (datetime(2026, 5, 20, tzinfo=timezone.utc), "december 25", "2025-12-25", "2025-12-26"),
    ],
)
def test_other_clocks(now: datetime, text: str, start: str, end: str) -> None:
    p = resolve_period(text, now)
    assert (p.start, p.end) == (_d(start), _d(end))


# ---------------------------------------------------------------------------- robustness


def _check_any(text: str) -> None:
    try:
        p = resolve_period(text, NOW)
    except NLQLError:
        return
    assert p.start <= p.end
    assert p.start.tzinfo is not None and p.end.tzinfo is not None


@settings(max_examples=1000, deadline=None)
@given(st.text(max_size=120))
def test_random_strings_raise_only_nlql_errors(text: str) -> None:
    _check_any(text)


_WORDS = [
    "last", "this", "next", "the", "past", "since", "before", "after", "between", "and", "from", "to",
    "in", "week", "weeks", "month", "months", "year", "years", "day", "days", "ago", "q3", "h2",
    "june", "may", "march", "monday", "2024", "2020", "9999", "0", "3", "12", "99999", "-", "of",
    "quarter", "weekend", "early", "late", "1990s", "90s", "so", "far", "earlier", "onwards",
    "2024-06", "2024-06-01", "2024-13-45", "w53", "1st", "31st", "feb", "29", "a", "an", "fortnight",
]


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.sampled_from(_WORDS), min_size=1, max_size=7).map(" ".join))
def test_random_phrases_raise_only_nlql_errors(text: str) -> None:
    _check_any(text)


@settings(max_examples=200, deadline=None)
@given(
    st.datetimes(
        min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.sampled_from(
            [timezone.utc, ZoneInfo("Europe/Berlin"), ZoneInfo("America/Santiago"), timezone(timedelta(hours=-11))]
        )
    ),
    st.sampled_from([p[0] for p in PHRASES]),
)
def test_any_clock_gives_an_ordered_range(now: datetime, text: str) -> None:
    try:
        p = resolve_period(text, now)
    except PlanError:
        return  # e.g. "since tomorrow"-like phrases whose order depends on the clock
    assert p.start <= p.end


def test_module_exports() -> None:
    assert set(temporal.__all__) == {"OPEN_END", "OPEN_START", "Period", "resolve_period", "warm_up"}
