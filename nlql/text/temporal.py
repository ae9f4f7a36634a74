"""Natural-language periods for ``WITHIN "period"``: English text + the engine clock → ``[start, end)``.

Rules come first and cover what people write in queries; dateparser is a fallback for single dates
in formats the rules do not know (``12/25/2024``, ``25.12.2024``, ``the 3rd of june``), and it is
wrapped so no input can crash it or make it slow. Calendar units are taken in the clock's time zone.

Calendar periods (the whole unit, also the part still in the future):
    ``today``, ``yesterday``, ``tomorrow``, ``the day before yesterday``; ``this/last/next
    week|month|quarter|year|decade|weekend`` (weeks run Monday–Sunday, ``last week`` is the previous
    Monday–Sunday, ``last month`` the previous calendar month); ``the week before last``;
    ``Q3 2023``, ``2023-Q3``, ``the third quarter of 2023``, ``H1 2024``; ``June 2024``,
    ``2024-06``, ``06/2024``; ``2024``, ``the 1990s``, ``the 90s``, ``early/mid/late 2024``
    (Jan–Apr, May–Aug, Sep–Dec); ``2024-W23``, ``week 23 of 2024``; dates ``2024-06-01``,
    ``June 1, 2024``, ``1 June 2024``, ``June 1`` (the most recent one not in the future);
    ``the start of 2024``/``the end of 2024`` (Jan–Mar, Oct–Dec);
    weekdays ``monday`` (the most recent, today included), ``last monday`` (strictly before
    today), ``this monday`` (in this week), ``next monday`` (strictly after today);
    ``n days|weeks|months|years ago`` (the calendar unit that contains now − n units).
    A bare month name is accepted only after ``in``/``during``/``since``/``from``/``last``/``this``/
    ``next`` or inside a range (``in June``, ``since March``), because ``may`` and ``march`` alone
    are usually not dates.

Rolling periods ``[now − n·unit, now)``:
    ``the past 3 days``, ``past 3 days``, ``last 3 days``, ``last 24 hours``, ``the last 2 weeks``,
    ``past week`` / ``the last week`` (``past`` and ``the last`` are rolling; ``last week`` alone is
    the calendar week), ``last 90d``; and ``the next 3 days`` = ``[now, now + 3 days)``.

To date ``[start of unit, now)``: ``earlier this month``, ``this month so far``, ``so far this
year``, ``year to date``, ``ytd``/``mtd``/``qtd``/``wtd``.

Open and combined periods: ``since X`` = ``[start(X), now)`` (``since March``: from the most recent
March 1 not in the future); ``from X`` likewise; ``X onwards`` = ``[start(X), open)``; ``before X``
= ``[open, start(X))``; ``after X`` = ``[end(X), open)``; ``until X`` = ``[open, end(X))``;
``between X and Y``, ``from X to Y``, ``X - Y`` = ``[start(X), end(Y))`` — both ends inclusive, so
``between 2020 and 2022`` is ``[2020-01-01, 2023-01-01)``; ``between June and August 2024`` takes
the year from the right side. An open end is a far sentinel (``OPEN_START``/``OPEN_END``, chosen so
that converting them to any time zone cannot overflow) and is flagged in ``Period``.

A leading ``in``, ``within``, ``during``, ``over`` or ``on`` is ignored (``in the last 30 days``).
Anything else — ``may``, ``march on``, ``3``, ``12``, random words, reversed ranges — raises
``PlanError`` (without a span: the engine attaches the span of the string).

>>> from datetime import datetime, timezone
>>> now = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)  # a Monday
>>> resolve_period("last week", now).description
'2026-11-23T00:00:00+00:00 .. 2026-11-30T00:00:00+00:00'
>>> resolve_period("between 2020 and 2022", now).description
'2020-01-01T00:00:00+00:00 .. 2023-01-01T00:00:00+00:00'
"""

from __future__ import annotations

import re
import threading
import time
from calendar import monthrange
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone, tzinfo
from typing import Any, Literal

from nlql.errors import PlanError

# The free-text functions below (extract_period, temporal_value, describe_extraction, warm_up_extract,
# postgres_temporal_value, SUPPORTED_LANGUAGES) are public too; __all__ keeps the WITHIN surface.
__all__ = ["OPEN_END", "OPEN_START", "Period", "resolve_period", "warm_up"]

#: Start of a period that is open to the past (``before 2020``).
OPEN_START = datetime(1, 1, 2, tzinfo=timezone.utc)
#: End of a period that is open to the future (``after 2020``, ``2020 onwards``).
OPEN_END = datetime(9999, 12, 30, tzinfo=timezone.utc)

HINT = 'try e.g. "last week", "in June 2024", "since March", "between 2020 and 2022", "the past 3 days"'
_MAX_INPUT = 200  # longer text is never a period
_MAX_DATEPARSER_INPUT = 100  # dateparser gets slow on long input
_MIN_YEAR, _MAX_YEAR = 1000, 9998


@dataclass(frozen=True, slots=True)
class Period:
    """A resolved period: the half-open range ``[start, end)`` and how it was found.

    Attributes:
        start: Inclusive start (aware); ``OPEN_START`` when ``open_start``.
        end: Exclusive end (aware); ``OPEN_END`` when ``open_end``.
        text: The text as the user wrote it.
        method: ``"rule"`` or ``"dateparser"``.
        description: ``"<start ISO> .. <end ISO>"`` (an open end shows as ``-inf``/``+inf``).
        open_start: The period has no lower bound.
        open_end: The period has no upper bound.
    """

    start: datetime
    end: datetime
    text: str
    method: Literal["rule", "dateparser"]
    description: str
    open_start: bool = field(default=False)
    open_end: bool = field(default=False)

    def contains(self, moment: datetime) -> bool:
        """Whether an aware ``moment`` lies in ``[start, end)``."""
        return self.start <= moment < self.end

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view for explain."""
        return {
            "text": self.text,
            "start": None if self.open_start else self.start.isoformat(),
            "end": None if self.open_end else self.end.isoformat(),
            "method": self.method,
            "description": self.description,
        }


# ---------------------------------------------------------------------------- vocabulary

_MONTHS = {
    "january": 1, "jan": 1, "february": 2, "feb": 2, "march": 3, "mar": 3, "april": 4, "apr": 4,
    "may": 5, "june": 6, "jun": 6, "july": 7, "jul": 7, "august": 8, "aug": 8, "september": 9,
    "sept": 9, "sep": 9, "october": 10, "oct": 10, "november": 11, "nov": 11, "december": 12, "dec": 12,
}
_WEEKDAYS = {
    "monday": 0, "tuesday": 1, "wednesday": 2, "thursday": 3, "friday": 4, "saturday": 5, "sunday": 6,
}
_NUMBER_WORDS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20,
    "thirty": 30, "sixty": 60, "ninety": 90, "hundred": 100, "a couple of": 2, "couple of": 2,
}
_ORDINALS = {"first": 1, "1st": 1, "second": 2, "2nd": 2, "third": 3, "3rd": 3, "fourth": 4, "4th": 4}
# unit word → (canonical unit, multiplier)
_UNITS = {
    "second": ("second", 1), "sec": ("second", 1), "s": ("second", 1),
    "minute": ("minute", 1), "min": ("minute", 1),
    "hour": ("hour", 1), "hr": ("hour", 1), "h": ("hour", 1),
    "day": ("day", 1), "d": ("day", 1),
    "week": ("week", 1), "wk": ("week", 1), "w": ("week", 1), "fortnight": ("week", 2),
    "month": ("month", 1), "mo": ("month", 1),
    "quarter": ("month", 3),
    "year": ("year", 1), "yr": ("year", 1), "y": ("year", 1),
    "decade": ("year", 10),
}
_CALENDAR_UNITS = ("week", "month", "quarter", "year", "decade", "weekend")

_MONTH_ALT = "|".join(sorted(_MONTHS, key=len, reverse=True))
_MONTH_RE = f"(?P<month>{_MONTH_ALT})"
_WEEKDAY_RE = "(?P<weekday>" + "|".join(_WEEKDAYS) + ")"
_NUM_RE = (
    r"(?P<num>\d{1,6}|"
    + "|".join(sorted((re.escape(w) for w in _NUMBER_WORDS), key=len, reverse=True))
    + ")"
)
_UNIT_RE = r"(?P<unit>" + "|".join(sorted(_UNITS, key=len, reverse=True)) + r")s?"
_YEAR_RE = r"(?P<year>\d{4})"
_DAY_RE = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"


def _full(pattern: str) -> re.Pattern[str]:
    return re.compile(rf"^(?:{pattern})$")


# ---------------------------------------------------------------------------- calendar helpers


class _Clock:
    """``now`` and its time zone, with midnight construction that also works for pytz zones."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.tz: tzinfo = now.tzinfo  # type: ignore[assignment]
        self.today = now.date()

    def at(self, d: date) -> datetime:
        """Midnight of ``d`` in the clock's time zone."""
        naive = datetime(d.year, d.month, d.day)
        localize = getattr(self.tz, "localize", None)
        if localize is not None:  # pytz zones need localize() to pick the right offset
            return localize(naive)  # type: ignore[no-any-return]
        return naive.replace(tzinfo=self.tz)


def _add_months(d: date, months: int) -> date:
    total = d.year * 12 + (d.month - 1) + months
    year, month = divmod(total, 12)
    month += 1
    return date(year, month, min(d.day, monthrange(year, month)[1]))


def _unit_start(d: date, unit: str) -> date:
    if unit == "day":
        return d
    if unit == "week":
        return d - timedelta(days=d.weekday())
    if unit == "month":
        return d.replace(day=1)
    if unit == "quarter":
        return date(d.year, (d.month - 1) // 3 * 3 + 1, 1)
    if unit == "year":
        return date(d.year, 1, 1)
    if unit == "decade":
        return date(d.year // 10 * 10, 1, 1)
    raise AssertionError(unit)


def _shift(d: date, unit: str, n: int) -> date:
    if unit == "day":
        return d + timedelta(days=n)
    if unit == "week":
        return d + timedelta(weeks=n)
    if unit == "month":
        return _add_months(d, n)
    if unit == "quarter":
        return _add_months(d, 3 * n)
    if unit == "year":
        return _add_months(d, 12 * n)
    if unit == "decade":
        return _add_months(d, 120 * n)
    raise AssertionError(unit)


_Range = tuple[date, date]  # a calendar period [first day, day after the last)


def _unit_range(d: date, unit: str, n: int = 0) -> _Range:
    """The calendar ``unit`` containing ``d``, shifted by ``n`` units."""
    start = _unit_start(_shift(_unit_start(d, unit), unit, n), unit)
    return start, _shift(start, unit, 1)


def _year(text: str) -> int:
    y = int(text)
    if not _MIN_YEAR <= y <= _MAX_YEAR:
        raise _OutOfRange
    return y


def _number(text: str) -> int:
    text = text.strip()
    return int(text) if text.isdigit() else _NUMBER_WORDS[text]


class _OutOfRange(Exception):
    """A period that parses but lies outside what datetime can represent."""


# ---------------------------------------------------------------------------- calendar periods

_DAY_WORDS = {
    "today": 0, "yesterday": -1, "tomorrow": 1,
    "the day before yesterday": -2, "day before yesterday": -2,
    "the day after tomorrow": 2, "day after tomorrow": 2,
}
_REL_UNIT = _full(
    r"(?:(?:the )?(?P<rel>this|current|previous|prior)|(?P<rel2>last|next|coming)) "
    r"(?P<cal>week|month|quarter|year|decade|weekend)"
)
_PAST_WEEKEND = _full(r"(?:the )?(?:last|past|previous) weekend")
_BEFORE_LAST = _full(r"(?:the )?(?P<cal>week|month|quarter|year) before last")
_WEEKDAY = _full(rf"(?:(?P<rel>last|this|next|on) )?{_WEEKDAY_RE}")
_MONTH_YEAR = _full(rf"{_MONTH_RE}(?: of)? {_YEAR_RE}|(?P<year2>\d{{4}}) (?P<month2>{_MONTH_ALT})")
_REL_MONTH = _full(rf"(?P<rel>last|this|next) {_MONTH_RE}")
_MONTH_REL_YEAR = _full(rf"(?:{_MONTH_RE} (?:of |in )?(?:the )?(?P<rel>last|this|next|previous|past|coming) year|"
                        rf"(?P<rel2>last|this|next|previous|past|coming) year(?:'s|s|’s)? {_MONTH_RE.replace('month', 'month2')})")
_MONTH_BEFORE_LAST_YEAR = _full(rf"{_MONTH_RE} (?:of |in )?the year before last")
_BARE_MONTH = _full(_MONTH_RE)
_ISO_MONTH = _full(rf"{_YEAR_RE}[-/](?P<m>\d{{1,2}})|(?P<m2>\d{{1,2}})/(?P<year2>\d{{4}})")
_ISO_DATE = _full(rf"{_YEAR_RE}[-/.](?P<m>\d{{1,2}})[-/.](?P<d>\d{{1,2}})")
_MONTH_DAY = _full(rf"{_MONTH_RE} {_DAY_RE}(?: {_YEAR_RE})?")
_DAY_MONTH = _full(rf"(?:the )?{_DAY_RE} (?:of )?{_MONTH_RE}(?: {_YEAR_RE})?")
_QUARTER = _full(
    rf"q(?P<q>[1-4])(?:(?: of)? {_YEAR_RE})?|(?P<year2>\d{{4}})[- ]?q(?P<q2>[1-4])|q(?P<q3>[1-4])-(?P<year3>\d{{4}})"
    rf"|(?:the )?(?P<ord>first|second|third|fourth|1st|2nd|3rd|4th) quarter(?: of)?(?: (?P<year4>\d{{4}}))?"
)
_HALF = _full(
    rf"h(?P<h>[12])(?: {_YEAR_RE})?|(?P<year2>\d{{4}}) h(?P<h2>[12])"
    rf"|(?:the )?(?P<ord>first|second|1st|2nd) half(?: of)?(?: (?P<year3>\d{{4}}))?"
)
_PART_YEAR = _full(rf"(?P<part>early|mid|late|the start of|the end of|start of|end of) {_YEAR_RE}")
_YEAR_ONLY = _full(rf"(?:the year )?{_YEAR_RE}")
_DECADE = _full(r"(?:the )?(?P<c>\d{3})0'?s|(?:the )?'?(?P<d>\d)0'?s")
_ISO_WEEK = _full(rf"{_YEAR_RE}-?w(?P<w>\d{{1,2}})|(?:the )?week (?P<w2>\d{{1,2}})(?: of| in)?(?: (?P<year2>\d{{4}}))?")
_AGO = _full(rf"{_NUM_RE} {_UNIT_RE} ago")


def _calendar(s: str, clock: _Clock, bare_month: bool) -> _Range | None:
    """Resolve an expression naming one calendar period; ``None`` when it names none."""
    today = clock.today
    if s in _DAY_WORDS:
        d = today + timedelta(days=_DAY_WORDS[s])
        return d, d + timedelta(days=1)
    if _PAST_WEEKEND.match(s):
        monday = _unit_start(today, "week") - timedelta(weeks=1)
        return monday + timedelta(days=5), monday + timedelta(days=7)
    if m := _REL_UNIT.match(s):
        rel = m["rel"] or m["rel2"]
        n = {"this": 0, "current": 0, "last": -1, "previous": -1, "prior": -1, "next": 1, "coming": 1}[rel]
        if m["cal"] == "weekend":
            monday = _unit_start(today, "week") + timedelta(weeks=n)
            return monday + timedelta(days=5), monday + timedelta(days=7)
        return _unit_range(today, m["cal"], n)
    if m := _BEFORE_LAST.match(s):
        return _unit_range(today, m["cal"], -2)
    if m := _WEEKDAY.match(s):
        return _weekday(today, _WEEKDAYS[m["weekday"]], m["rel"] or "on")
    if m := _MONTH_YEAR.match(s):
        return _month(_year(m["year"] or m["year2"]), _MONTHS[m["month"] or m["month2"]])
    if m := _REL_MONTH.match(s):
        month = _MONTHS[m["month"]]
        rel = m["rel"]
        if rel == "this":
            year = today.year
        elif rel == "last":
            year = today.year if month < today.month else today.year - 1
        else:
            year = today.year if month > today.month else today.year + 1
        return _month(year, month)
    if m := _MONTH_REL_YEAR.match(s):  # a compound period: the month of that year
        shift = {"last": -1, "previous": -1, "past": -1, "this": 0, "next": 1, "coming": 1}[m["rel"] or m["rel2"]]
        return _month(today.year + shift, _MONTHS[m["month"] or m["month2"]])
    if m := _MONTH_BEFORE_LAST_YEAR.match(s):
        return _month(today.year - 2, _MONTHS[m["month"]])
    if bare_month and (m := _BARE_MONTH.match(s)):
        month = _MONTHS[m["month"]]
        return _month(today.year if month <= today.month else today.year - 1, month)
    if m := _ISO_DATE.match(s):
        return _day(_year(m["year"]), int(m["m"]), int(m["d"]))
    if m := _ISO_MONTH.match(s):
        month = int(m["m"] or m["m2"])
        if not 1 <= month <= 12:
            return None
        return _month(_year(m["year"] or m["year2"]), month)
    if (m := _MONTH_DAY.match(s)) or (m := _DAY_MONTH.match(s)):
        month, day = _MONTHS[m["month"]], int(m["day"])
        if m["year"]:
            return _day(_year(m["year"]), month, day)
        # No year: the most recent such day that is not in the future.
        year = today.year if (month, day) <= (today.month, today.day) else today.year - 1
        return _day(year, month, day)
    if m := _QUARTER.match(s):
        q = int(m["q"] or m["q2"] or m["q3"] or _ORDINALS.get(m["ord"] or "", 0))
        year_text = m["year"] or m["year2"] or m["year3"] or m["year4"]
        if year_text:
            year = _year(year_text)
        else:  # the most recent such quarter that has started
            year = today.year if q <= (today.month - 1) // 3 + 1 else today.year - 1
        start = date(year, 3 * q - 2, 1)
        return start, _add_months(start, 3)
    if m := _HALF.match(s):
        h = int(m["h"] or m["h2"] or _ORDINALS[m["ord"]])
        year_text = m["year"] or m["year2"] or m["year3"]
        year = _year(year_text) if year_text else (today.year if h == 1 or today.month > 6 else today.year - 1)
        start = date(year, 6 * h - 5, 1)
        return start, _add_months(start, 6)
    if m := _PART_YEAR.match(s):
        year = _year(m["year"])
        first, last = {
            "early": (1, 4), "mid": (5, 8), "late": (9, 12),
            "the start of": (1, 3), "start of": (1, 3), "the end of": (10, 12), "end of": (10, 12),
        }[m["part"]]
        return date(year, first, 1), _add_months(date(year, last, 1), 1)
    if m := _YEAR_ONLY.match(s):
        year = _year(m["year"])
        return date(year, 1, 1), date(year + 1, 1, 1)
    if m := _DECADE.match(s):
        if m["c"]:
            start_year = int(m["c"]) * 10
        else:  # "the 90s": the most recent such decade that has started
            start_year = today.year // 100 * 100 + int(m["d"]) * 10
            if start_year > today.year:
                start_year -= 100
        if not _MIN_YEAR <= start_year <= _MAX_YEAR - 9:
            raise _OutOfRange
        return date(start_year, 1, 1), date(start_year + 10, 1, 1)
    if m := _ISO_WEEK.match(s):
        week = int(m["w"] or m["w2"])
        year_text = m["year"] or m["year2"]
        year = _year(year_text) if year_text else today.isocalendar()[0]
        try:
            monday = date.fromisocalendar(year, week, 1)
        except ValueError:
            return None
        return monday, monday + timedelta(days=7)
    if m := _AGO.match(s):
        unit, mult = _UNITS[m["unit"]]
        n = _number(m["num"]) * mult
        if unit in ("second", "minute", "hour"):
            return None  # sub-day: handled by _rolling as an instant-precision period
        if m["unit"] == "quarter":
            return _unit_range(today, "quarter", -_number(m["num"]))
        if m["unit"] == "decade":
            return _unit_range(today, "decade", -_number(m["num"]))
        return _unit_range(today, unit, -n)
    return None


def _weekday(today: date, weekday: int, rel: str) -> _Range:
    if rel == "this":
        d = _unit_start(today, "week") + timedelta(days=weekday)
    elif rel == "next":
        d = today + timedelta(days=(weekday - today.weekday() - 1) % 7 + 1)
    elif rel == "last":
        d = today - timedelta(days=(today.weekday() - weekday - 1) % 7 + 1)
    else:  # bare / "on": the most recent one, today included
        d = today - timedelta(days=(today.weekday() - weekday) % 7)
    return d, d + timedelta(days=1)


def _month(year: int, month: int) -> _Range:
    start = date(year, month, 1)
    return start, _add_months(start, 1)


def _day(year: int, month: int, day: int) -> _Range | None:
    try:
        d = date(year, month, day)
    except ValueError:
        return None
    return d, d + timedelta(days=1)


# ---------------------------------------------------------------------------- rolling and to-date

_ROLLING = _full(rf"(?P<the>the )?(?P<rel>past|last|previous|prior|next|coming)(?: {_NUM_RE})? ?{_UNIT_RE}")
_TO_DATE = _full(
    r"(?:earlier )?this (?P<cal>week|month|quarter|year|decade)(?P<sofar> so far| to date)?"
    r"|so far this (?P<cal2>week|month|quarter|year|decade)"
    r"|(?:the )?(?P<cal3>week|month|quarter|year)[- ]to[- ]date"
    r"|(?P<abbr>wtd|mtd|qtd|ytd)"
)
_SUB_AGO = _full(rf"{_NUM_RE} (?P<unit>second|sec|minute|min|hour|hr)s? ago")


def _moment_shift(clock: _Clock, unit: str, n: int) -> datetime:
    """``now`` moved by ``n`` units: elapsed time for sub-day units, wall-clock calendar otherwise."""
    now = clock.now
    if unit in ("second", "minute", "hour"):
        delta = timedelta(**{unit + "s": n})
        return (now.astimezone(timezone.utc) + delta).astimezone(clock.tz)
    if unit == "day":
        moved = now + timedelta(days=n)
    elif unit == "week":
        moved = now + timedelta(weeks=n)
    else:
        d = _add_months(now.date(), n * (12 if unit == "year" else 1))
        moved = now.replace(year=d.year, month=d.month, day=d.day)
    normalize = getattr(clock.tz, "normalize", None)
    return normalize(moved) if normalize is not None else moved  # pytz: fix the offset after a DST change


def _rolling(s: str, clock: _Clock) -> tuple[datetime, datetime] | None:
    """``the past 3 days`` and friends: ``[now − n·unit, now)`` (or ``[now, now + n·unit)``)."""
    m = _ROLLING.match(s)
    if m is None:
        return None
    rel, unit_word, num = m["rel"], m["unit"], m["num"]
    # "last week", "next month", "previous year" without a number are calendar units (handled by
    # _calendar); "past …", "the last …" and "the next …" roll.
    if num is None and unit_word in _CALENDAR_UNITS and rel != "past":
        if m["the"] is None or rel not in ("last", "next", "coming"):
            return None
    if num in ("a", "an"):
        return None  # "the past a week" is not English
    unit, mult = _UNITS[unit_word]
    n = (_number(num) if num is not None else 1) * mult
    if n <= 0:
        return None
    if rel in ("next", "coming"):
        return clock.now, _moment_shift(clock, unit, n)
    return _moment_shift(clock, unit, -n), clock.now


def _to_date(s: str, clock: _Clock) -> tuple[datetime, datetime] | None:
    m = _TO_DATE.match(s)
    if m is None:
        return None
    if m["cal"] and not m["sofar"] and not s.startswith("earlier "):
        return None  # plain "this month" is the whole calendar month
    cal = m["cal"] or m["cal2"] or m["cal3"] or {"wtd": "week", "mtd": "month", "qtd": "quarter", "ytd": "year"}[m["abbr"]]
    return clock.at(_unit_start(clock.today, cal)), clock.now


def _sub_day_ago(s: str, clock: _Clock) -> tuple[datetime, datetime] | None:
    """``3 hours ago``: the clock hour (minute, second) that contained now − 3 hours."""
    m = _SUB_AGO.match(s)
    if m is None:
        return None
    unit = _UNITS[m["unit"]][0]
    n = _number(m["num"])
    moment = _moment_shift(clock, unit, -n)
    if unit == "hour":
        start = moment.replace(minute=0, second=0, microsecond=0)
    elif unit == "minute":
        start = moment.replace(second=0, microsecond=0)
    else:
        start = moment.replace(microsecond=0)
    step = timedelta(**{unit + "s": 1})
    end = (start.astimezone(timezone.utc) + step).astimezone(clock.tz)
    return start, end


# ---------------------------------------------------------------------------- composition

_PREFIX = re.compile(r"^(?:in|within|during|over|on|for)\s+")
_MONTH_PREFIX = re.compile(r"^(?:in|during)\s+")
_RANGE_INTRO = re.compile(r"^(?P<intro>between|from)\s+")
_RANGE_SEP = re.compile(r"\s+(?:to|until|till|through|thru)\s+|\s*-\s*")
_BETWEEN_SEP = re.compile(r"\s+(?:and|to)\s+|\s*-\s*")
_NO_YEAR = re.compile(
    rf"^(?:(?:{_MONTH_ALT})(?: \d{{1,2}}(?:st|nd|rd|th)?)?|(?:the )?\d{{1,2}}(?:st|nd|rd|th)? (?:of )?(?:{_MONTH_ALT}))$"
)
_HAS_YEAR = re.compile(r"\b(\d{4})\b")
_NOW_WORDS = frozenset({"now", "present", "the present", "date", "today so far"})


@dataclass(frozen=True, slots=True)
class _Resolved:
    start: datetime
    end: datetime
    open_start: bool = False
    open_end: bool = False


def _point(s: str, clock: _Clock, bare_month: bool = True) -> tuple[datetime, datetime] | None:
    """One calendar period or rolling/to-date period as datetimes."""
    cal = _calendar(s, clock, bare_month)
    if cal is not None:
        return clock.at(cal[0]), clock.at(cal[1])
    return _to_date(s, clock) or _rolling(s, clock) or _sub_day_ago(s, clock)


def _range(s: str, clock: _Clock) -> tuple[datetime, datetime] | None:
    """``between X and Y`` / ``from X to Y`` / ``X to Y`` / ``X - Y``: ``[start(X), end(Y))``."""
    intro = _RANGE_INTRO.match(s)
    body = s[intro.end() :] if intro else s
    separators = _BETWEEN_SEP if intro and intro["intro"] == "between" else _RANGE_SEP
    for sep in separators.finditer(body):
        left, right = body[: sep.start()].strip(), body[sep.end() :].strip()
        if not left or not right:
            continue
        if right in _NOW_WORDS:
            right_end: datetime | None = clock.now
        else:
            right_p = _point(right, clock)
            right_end = right_p[1] if right_p else None
        if right_end is None:
            continue
        left_p = _point(left, clock)
        year = _HAS_YEAR.search(right)
        if _NO_YEAR.match(left) and year:  # "between June and August 2024": August's year
            y = int(year.group(1))
            left_p = _point(f"{left} {y}", clock)
            if left_p is not None and left_p[0] >= right_end:
                left_p = _point(f"{left} {y - 1}", clock)
        if left_p is not None:
            return left_p[0], right_end
    return None


_SINCE = re.compile(r"^(?:since|from|starting(?: from| on| in)?|beginning)\s+(?P<x>.+)$")
_ONWARDS = re.compile(r"^(?:from\s+)?(?P<x>.+?)\s+(?:onwards?|and later|or later|and after)$")
_BEFORE = re.compile(r"^(?:before|prior to|earlier than)\s+(?P<x>.+)$")
_AFTER = re.compile(r"^(?:after|later than)\s+(?P<x>.+)$")
_UNTIL = re.compile(r"^(?:until|till|til|up to|up until|through|thru|no later than)\s+(?P<x>.+)$")


def _resolve_rules(s: str, clock: _Clock) -> _Resolved | None:
    bare_month = _MONTH_PREFIX.match(s) is not None
    inner = _PREFIX.sub("", s, count=1)
    p = _point(inner, clock, bare_month=bare_month)
    if p is not None:
        return _Resolved(*p)
    for pattern, kind in ((_BEFORE, "before"), (_AFTER, "after"), (_UNTIL, "until"), (_ONWARDS, "onwards")):
        m = pattern.match(inner)
        if m and (x := _point(m["x"], clock)) is not None:
            if kind == "before":
                return _Resolved(OPEN_START, x[0], open_start=True)
            if kind == "after":
                return _Resolved(x[1], OPEN_END, open_end=True)
            if kind == "until":
                return _Resolved(OPEN_START, x[1], open_start=True)
            return _Resolved(x[0], OPEN_END, open_end=True)
    r = _range(inner, clock)
    if r is not None:
        return _Resolved(*r)
    m = _SINCE.match(inner)
    if m and (x := _point(m["x"], clock)) is not None:
        return _Resolved(x[0], clock.now)
    return None


def _normalise(text: str) -> str:
    s = text.casefold().strip()
    s = re.sub(r"[\u2010-\u2015\u2212]", "-", s)
    s = s.replace(",", " ")
    s = re.sub(r"\s+", " ", s).strip()
    s = s.strip("\"'`“”‘’ ")
    s = re.sub(r"[.;!?]+$", "", s).strip()
    return s


# ---------------------------------------------------------------------------- dateparser fallback

_dateparser_lock = threading.Lock()
_dateparser_warm = False
_DATE_LIKE = re.compile(r"\d{1,4}\s*[./-]\s*\d{1,2}\s*[./-]\s*\d{1,4}")
_MONTH_WORD = re.compile(rf"\b(?:{_MONTH_ALT})\b")
_LETTERS = re.compile(r"[^\W\d_]+")
# The only words dateparser may see besides month names: a date and perhaps a time of day.
_DATE_WORDS = frozenset(_MONTHS) | frozenset(_WEEKDAYS) | frozenset(
    "mon tue tues wed thu thur thurs fri sat sun the of on at st nd rd th am pm a m p noon midnight "
    "utc gmt z t".split()
)


def _dateparser_day(s: str, clock: _Clock) -> date | None:
    """A single day via dateparser, or ``None``; never raises, never sees risky input."""
    if len(s) > _MAX_DATEPARSER_INPUT or not any(c.isdigit() for c in s):
        return None
    if _DATE_LIKE.search(s) is None and _MONTH_WORD.search(s) is None:
        return None  # no month and no numeric date: bare numbers like "3" are not days
    if any(w not in _DATE_WORDS for w in _LETTERS.findall(s)):
        return None  # other words ("I may go on the 5th") mean this is not just a date
    try:
        import dateparser

        settings = {
            "PREFER_DATES_FROM": "past",
            "RELATIVE_BASE": clock.now.replace(tzinfo=None),
            "REQUIRE_PARTS": ["day", "month"],
            "RETURN_AS_TIMEZONE_AWARE": False,
        }
        result = dateparser.parse(s, languages=["en"], settings=settings)
        if result is None:
            return None
        d = result.date()
        if not _MIN_YEAR <= d.year <= _MAX_YEAR:
            return None
        return d
    except Exception:  # dateparser is a best-effort fallback: any failure means "not understood"
        return None


def warm_up() -> float:
    """Import dateparser and parse once, so the first query does not pay its cold start.

    Returns:
        The seconds it took (0.0 when already warm; also when dateparser is missing).
    """
    global _dateparser_warm
    with _dateparser_lock:
        if _dateparser_warm:
            return 0.0
        t0 = time.perf_counter()
        now = datetime(2026, 1, 15, 12, 0, tzinfo=timezone.utc)
        _dateparser_day("12/25/2024", _Clock(now))
        _dateparser_day("3rd of june 2024", _Clock(now))
        _dateparser_warm = True
        return time.perf_counter() - t0


# ---------------------------------------------------------------------------- entry point


def _fmt(moment: datetime, open_bound: bool, sign: str) -> str:
    return f"{sign}inf" if open_bound else moment.isoformat()


def resolve_period(text: str, now: datetime) -> Period:
    """Resolve an English period against the clock to a half-open absolute range.

    Args:
        text: What the user wrote inside ``WITHIN "…"``.
        now: The engine clock, timezone-aware; calendar units are taken in its time zone.

    Returns:
        The ``Period``.

    Raises:
        PlanError: The text names no period this resolver understands, or a range that ends
            before it starts (no span: the caller attaches the span of the string).
        ValueError: ``now`` is naive (a programmer error).

    >>> from datetime import datetime, timezone
    >>> now = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)
    >>> resolve_period("since March", now).description
    '2026-03-01T00:00:00+00:00 .. 2026-11-30T15:00:00+00:00'
    >>> resolve_period("march", now)
    Traceback (most recent call last):
    ...
    nlql.errors.PlanError: cannot understand the period 'march'
    hint: try e.g. "last week", "in June 2024", "since March", "between 2020 and 2022", "the past 3 days"
    """
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("resolve_period needs a timezone-aware 'now'")
    not_understood = PlanError(f"cannot understand the period {text!r}", hint=HINT)
    if not isinstance(text, str) or len(text) > _MAX_INPUT:
        raise not_understood
    clock = _Clock(now)
    s = _normalise(text)
    if not s:
        raise not_understood
    method: Literal["rule", "dateparser"] = "rule"
    try:
        resolved = _resolve_rules(s, clock)
        if resolved is None:  # a whole phrase of another language ("на прошлой неделе", "지난주")
            whole = [c for c in _any_language_candidates(s, clock) + _all_rule_candidates(s, clock)
                     if c[0] == 0 and c[1] == len(s)]
            resolved = whole[0][2] if whole else None
        if resolved is None:
            inner = _PREFIX.sub("", s, count=1)
            d = _dateparser_day(inner, clock)
            if d is not None:
                resolved = _Resolved(clock.at(d), clock.at(d + timedelta(days=1)))
                method = "dateparser"
    except (_OutOfRange, OverflowError, ValueError):
        raise PlanError(
            f"the period {text!r} is out of range", hint=f"years from {_MIN_YEAR} to {_MAX_YEAR} are supported"
        ) from None
    if resolved is None:
        raise not_understood
    if resolved.end < resolved.start:
        raise PlanError(f"the period {text!r} ends before it starts", hint=HINT)
    return Period(
        start=resolved.start,
        end=resolved.end,
        text=text,
        method=method,
        description=f"{_fmt(resolved.start, resolved.open_start, '-')} .. {_fmt(resolved.end, resolved.open_end, '+')}",
        open_start=resolved.open_start,
        open_end=resolved.open_end,
    )


# ---------------------------------------------------------------------------- periods inside free text
#
# ``extract_period`` finds a period inside a whole question ("what did we decide last week?") for
# ``TEMPORAL(path, text)``. Rules first, in three steps:
#   1. English: every span of up to ``_SPAN_WORDS`` words that starts with a word that can open a
#      period is resolved with the WITHIN rules above; the longest span that resolves wins.
#   2. Spanish, French, German, Italian, Chinese: phrase rules that rewrite a foreign period into the
#      English phrase the same rules resolve ("la semana pasada" → "last week", "上个月" → "last month").
#   3. The longest match of steps 1 and 2 (in characters, then the leftmost) is the period.
# Only when no rule matches, dateparser's ``search_dates`` looks for a single date (warmed once,
# exceptions contained); its hits count only if they hold a digit and a month or a numeric date,
# which drops its usual false positives ("may", "march", "do", "we", "now").

SUPPORTED_LANGUAGES = ("en", "es", "fr", "de", "it", "zh")
_SPAN_WORDS = 10
_MAX_EXTRACT_INPUT = 2000  # longer text: only its first 2000 characters are searched
_MAX_SEARCH_INPUT = 300  # dateparser's search is slow on long text

_WORD_SPAN = re.compile(r"[^\s,;!?()\[\]{}\"“”«»„]+")
_EDGE_PUNCT = ".:'’`*_"
_EN_OPENERS = frozenset(
    "today yesterday tomorrow tonight the this last next past previous prior coming current in within during "
    "over on for since from starting beginning before after until till til up between earlier so year ytd "
    "mtd qtd wtd early mid late start end week day a an one two three four five six seven eight nine ten "
    "eleven twelve fifteen twenty thirty sixty ninety hundred couple prior later no".split()
) | frozenset(_MONTHS) | frozenset(_WEEKDAYS)
_OPENER_SHAPE = re.compile(r"^(?:\d|q[1-4]|h[12]\b|'?\d0'?s$)")
_BARE_YEAR = re.compile(r"^\d{1,6}$")  # a bare number is a period only with a preposition before it
_BARE_HALF = re.compile(r"^h[12]$")  # "h1" alone is a heading, not the first half of the year


def _en_candidates(text: str, clock: _Clock) -> list[tuple[int, int, _Resolved]]:
    words: list[tuple[int, int, str]] = []
    for m in _WORD_SPAN.finditer(text):
        w = m.group()
        lead = len(w) - len(w.lstrip(_EDGE_PUNCT))
        trail = len(w) - len(w.rstrip(_EDGE_PUNCT))
        if lead + trail >= len(w):
            continue
        a, b = m.start() + lead, m.end() - trail
        if text[a:b].endswith(("'s", "’s")):  # "last month's notes"
            b -= 2
        words.append((a, b, text[a:b].casefold()))
    out: list[tuple[int, int, _Resolved]] = []
    n = len(words)
    for i, (start, _, first) in enumerate(words):
        if first not in _EN_OPENERS and _OPENER_SHAPE.match(first) is None:
            continue
        for j in range(min(n, i + _SPAN_WORDS), i, -1):  # longest first
            end = words[j - 1][1]
            s = _normalise(text[start:end])
            if not s or (j == i + 1 and (_BARE_YEAR.match(s) or _BARE_HALF.match(s))):
                continue
            try:
                r = _resolve_rules(s, clock)
                if r is not None and s.startswith("from ") and _range(s, clock) is None:
                    # In a question "notes from June 2024" means the notes of June 2024; only WITHIN
                    # reads a lone "from X" as "since X".
                    r = _resolve_rules(s[5:], clock) or r
            except (_OutOfRange, OverflowError, ValueError):
                r = None
            if r is not None and not r.end < r.start:
                out.append((start, end, r))
                break
    return out


# --- foreign phrase rules: each rewrites a match into an English phrase the WITHIN rules resolve

_NUM = {
    # es
    "un": 1, "una": 1, "uno": 1, "dos": 2, "tres": 3, "cuatro": 4, "cinco": 5, "seis": 6, "siete": 7,
    "ocho": 8, "nueve": 9, "diez": 10,
    # fr
    "une": 1, "deux": 2, "trois": 3, "quatre": 4, "cinq": 5, "sept": 7, "huit": 8, "neuf": 9, "dix": 10,
    # de
    "ein": 1, "eine": 1, "einem": 1, "einer": 1, "einen": 1, "zwei": 2, "drei": 3, "vier": 4, "fünf": 5,
    "sechs": 6, "sieben": 7, "acht": 8, "neun": 9, "zehn": 10,
    # it
    "due": 2, "tre": 3, "quattro": 4, "cinque": 5, "sei": 6, "sette": 7, "otto": 8, "nove": 9, "dieci": 10,
    # zh
    "一": 1, "两": 2, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10,
    "十一": 11, "十二": 12,
}


def _num(word: str) -> int:
    w = word.casefold()
    return int(w) if w.isdigit() else _NUM[w]


_FOREIGN_MONTHS: dict[str, dict[str, str]] = {
    "es": dict(zip("enero febrero marzo abril mayo junio julio agosto septiembre octubre noviembre diciembre".split(),
                   "january february march april may june july august september october november december".split()))
    | {"setiembre": "september"},
    "fr": dict(zip("janvier février mars avril mai juin juillet août septembre octobre novembre décembre".split(),
                   "january february march april may june july august september october november december".split()))
    | {"fevrier": "february", "aout": "august", "decembre": "december"},
    "de": dict(zip("januar februar märz april mai juni juli august september oktober november dezember".split(),
                   "january february march april may june july august september october november december".split()))
    | {"jänner": "january", "maerz": "march"},
    "it": dict(zip("gennaio febbraio marzo aprile maggio giugno luglio agosto settembre ottobre novembre dicembre".split(),
                   "january february march april may june july august september october november december".split())),
}
_FOREIGN_WEEKDAYS: dict[str, dict[str, str]] = {
    "es": dict(zip("lunes martes miércoles jueves viernes sábado domingo".split(),
                   "monday tuesday wednesday thursday friday saturday sunday".split()))
    | {"miercoles": "wednesday", "sabado": "saturday"},
    "fr": dict(zip("lundi mardi mercredi jeudi vendredi samedi dimanche".split(),
                   "monday tuesday wednesday thursday friday saturday sunday".split())),
    "de": dict(zip("montag dienstag mittwoch donnerstag freitag samstag sonntag".split(),
                   "monday tuesday wednesday thursday friday saturday sunday".split())),
    "it": dict(zip("lunedì martedì mercoledì giovedì venerdì sabato domenica".split(),
                   "monday tuesday wednesday thursday friday saturday sunday".split()))
    | {"lunedi": "monday", "martedi": "tuesday", "mercoledi": "wednesday", "giovedi": "thursday",
       "venerdi": "friday"},
}
# unit words → English unit
_FOREIGN_UNITS: dict[str, dict[str, str]] = {
    "es": {"día": "day", "dia": "day", "días": "day", "dias": "day", "semana": "week", "semanas": "week",
           "mes": "month", "meses": "month", "año": "year", "años": "year", "ano": "year", "anos": "year"},
    "fr": {"jour": "day", "jours": "day", "semaine": "week", "semaines": "week", "mois": "month", "an": "year",
           "ans": "year", "année": "year", "années": "year", "annee": "year", "annees": "year"},
    "de": {"tag": "day", "tagen": "day", "tage": "day", "woche": "week", "wochen": "week", "monat": "month",
           "monaten": "month", "monate": "month", "jahr": "year", "jahren": "year", "jahre": "year"},
    "it": {"giorno": "day", "giorni": "day", "settimana": "week", "settimane": "week", "mese": "month",
           "mesi": "month", "anno": "year", "anni": "year"},
}


def _alt(words: Iterable[str]) -> str:
    return "(?:" + "|".join(sorted((re.escape(w) for w in words), key=len, reverse=True)) + ")"


def _rules_for(lang: str) -> list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]]:
    """(pattern, English phrase builder) pairs for one language, longest phrases first."""
    rules: list[tuple[str, Callable[[re.Match[str]], str]]] = []
    if lang == "zh":
        cn = r"(?P<n>\d{1,3}|十[一二]?|[一两二三四五六七八九十])"
        m12 = r"(?P<m>1[0-2]|0?[1-9]|十[一二]?|[一二三四五六七八九十])"
        # Chinese units, and the Japanese ones written in kanji (日, 週間, ヶ月/カ月/か月, 年)
        zh_u = r"(?P<u>天|日|週間|周|週|个?星期|个?礼拜|个?月|[ヶカか]月|年)"

        def zh_unit(u: str) -> str:
            return {"天": "day", "日": "day", "周": "week", "週": "week", "間": "week", "月": "month",
                    "年": "year"}.get(u[-1], "week")

        # 去年/今年/明年, and Japanese 昨年/来年; 的 (Chinese) or の (Japanese) may join the month
        rel_year = {"去年": "last year", "昨年": "last year", "今年": "this year", "明年": "next year",
                    "来年": "next year"}
        rules += [
            # compound periods: 去年三月 / 昨年の3月 = March of last year (the month, not the year)
            (r"(?P<ry>去年|昨年|今年|明年|来年)[的の]?" + m12 + r"月份?",
             lambda m: f"{_MONTH_NAMES[_num(m['m'])]} of {rel_year[m['ry']]}"),
            (r"(?:前年|一昨年)[的の]?" + m12 + r"月份?", lambda m: f"{_MONTH_NAMES[_num(m['m'])]} of the year before last"),
            (r"(?P<y>\d{4})年" + m12 + r"月(?P<d>\d{1,2})[日号]",
             lambda m: f"{m['y']}-{_num(m['m']):02d}-{int(m['d']):02d}"),
            (r"(?P<y>\d{4})年" + m12 + r"月份?", lambda m: f"{m['y']}-{_num(m['m']):02d}"),
            (m12 + r"月(?P<d>\d{1,2})[日号]", lambda m: f"{_MONTH_NAMES[_num(m['m'])]} {int(m['d'])}"),
            (r"(?P<y>\d{4})年", lambda m: m["y"]),
            (cn + zh_u + r"(?:之|以)?前", lambda m: f"{_num(m['n'])} {zh_unit(m['u'])}s ago"),
            (r"(?:过去|最近|近)(?:的)?" + cn + zh_u, lambda m: f"the past {_num(m['n'])} {zh_unit(m['u'])}s"),
            (r"先々週", lambda m: "the week before last"),
            (r"(?:上个?|前一个?)(?:星期|礼拜|周)|先週", lambda m: "last week"),
            (r"(?:这个?|本)(?:星期|礼拜|周)|今週", lambda m: "this week"),
            (r"下个?(?:星期|礼拜|周)|来週", lambda m: "next week"),
            (r"上个?季度", lambda m: "last quarter"),
            (r"(?:这个?|本)季度", lambda m: "this quarter"),
            (r"上个?月|先月", lambda m: "last month"),
            (r"(?:这个?|本)月|今月", lambda m: "this month"),
            (r"下个?月|来月", lambda m: "next month"),
            (m12 + r"月份?", lambda m: f"in {_MONTH_NAMES[_num(m['m'])]}"),
            (r"前天|一昨日", lambda m: "the day before yesterday"),
            (r"后天|明後日", lambda m: "the day after tomorrow"),
            (r"昨天|昨日", lambda m: "yesterday"),
            (r"今天|今日", lambda m: "today"),
            (r"明天|明日", lambda m: "tomorrow"),
            (r"前年|一昨年", lambda m: "2 years ago"),
            (r"去年|昨年", lambda m: "last year"),
            (r"今年", lambda m: "this year"),
            (r"明年|来年", lambda m: "next year"),
        ]
        # "X以来" = since X
        return [(re.compile("(?:" + p + r")(?P<since>以来)?"), _since_zh(f)) for p, f in rules]
    months, weekdays, units = _FOREIGN_MONTHS[lang], _FOREIGN_WEEKDAYS[lang], _FOREIGN_UNITS[lang]
    M = "(?P<month>" + _alt(months)[3:]
    WD = "(?P<wd>" + _alt(weekdays)[3:]
    U = "(?P<unit>" + _alt(units)[3:]
    N = r"(?P<n>\d{1,3}|" + _alt(w for w in _NUM if not w[0] > "\u2e80")[3:]
    Y = r"(?P<year>\d{4})"

    def month(m: re.Match[str]) -> str:
        return months[m["month"].casefold()]

    def unit(m: re.Match[str]) -> str:
        return f"{_num(m['n'])} {units[m['unit'].casefold()]}s"

    def wd(m: re.Match[str]) -> str:
        return weekdays[m["wd"].casefold()]

    def rel(word: str) -> Callable[[re.Match[str]], str]:
        return lambda m: word

    if lang == "es":
        since = r"desde(?: (?:el|la|hace))?"
        rules += [
            # compound periods: "marzo del año pasado" = March of last year (the month)
            (rf"(?:en )?{M} (?:del|de este) año(?: (?P<r>pasado|anterior|próximo|proximo|que viene))?",
             lambda m: f"{month(m)} of " + ("this year" if not m["r"] else "last year" if m["r"] in ("pasado", "anterior")
                                             else "next year")),
            (rf"(?:el |del )?{_DAY_NUM} de {M}(?: de(?:l)? {Y})?", lambda m: _dm(m, month(m))),
            (rf"(?:en |de )?{M} (?:de(?:l)? )?{Y}", lambda m: f"{month(m)} {m['year']}"),
            (rf"(?:el )?{M} pasado", lambda m: f"last {month(m)}"),
            (rf"el pasado {M}", lambda m: f"last {month(m)}"),
            (rf"(?:en|durante) (?:el mes de )?{M}", lambda m: f"in {month(m)}"),
            (rf"(?:en |durante )?(?:los|las) (?:últimos|últimas|ultimos|ultimas) {N} {U}", lambda m: f"the past {unit(m)}"),
            (rf"hace {N} {U}", lambda m: f"{unit(m)} ago"),
            (r"(?:la |esta )?semana (?:pasada|anterior)|la (?:última|ultima) semana", rel("last week")),
            (r"(?:el )?mes (?:pasado|anterior)|el (?:último|ultimo) mes", rel("last month")),
            (r"(?:el )?año (?:pasado|anterior)|el (?:último|ultimo) año", rel("last year")),
            (r"(?:el )?trimestre (?:pasado|anterior)", rel("last quarter")),
            (r"(?:el )?fin de semana (?:pasado|anterior)", rel("last weekend")),
            (r"esta semana", rel("this week")), (r"este mes", rel("this month")), (r"este año", rel("this year")),
            (r"(?:la )?(?:próxima|proxima) semana|(?:la )?semana (?:próxima|proxima|que viene)", rel("next week")),
            (r"(?:el )?(?:próximo|proximo) mes|(?:el )?mes (?:próximo|proximo|que viene)", rel("next month")),
            (r"(?:el )?(?:próximo|proximo) año|(?:el )?año (?:próximo|proximo|que viene)", rel("next year")),
            (rf"(?:el )?{WD} pasado", lambda m: f"last {wd(m)}"),
            (rf"el pasado {WD}", lambda m: f"last {wd(m)}"),
            (rf"el {WD}", wd),
            (r"anteayer|antes de ayer", rel("the day before yesterday")),
            (r"pasado mañana", rel("the day after tomorrow")),
            (r"ayer", rel("yesterday")), (r"hoy|esta mañana|esta tarde|esta noche", rel("today")),
            (r"(?<!la )(?<!una )(?<!esta )mañana", rel("tomorrow")),  # "por la mañana" is "in the morning"
        ]
    elif lang == "fr":
        since = r"depuis(?: le| la| l'| les)?"
        rules += [
            (rf"(?:en )?{M} (?:de l['’]|l['’])(?:année|annee) (?P<r>dernière|derniere|passée|passee|prochaine)",
             lambda m: f"{month(m)} of " + ("next year" if m["r"] == "prochaine" else "last year")),
            (rf"(?:en )?{M} (?:de )?cette (?:année|annee)", lambda m: f"{month(m)} of this year"),
            (rf"(?:le )?{_DAY_NUM}(?:er)? {M}(?: {Y})?", lambda m: _dm(m, month(m))),
            (rf"(?:en |au mois de )?{M} {Y}", lambda m: f"{month(m)} {m['year']}"),
            (rf"(?:en )?{M} dernier", lambda m: f"last {month(m)}"),
            (rf"(?:en|au mois de|pendant|durant) {M}", lambda m: f"in {month(m)}"),
            (rf"(?:les|ces|au cours des) {N} (?:derniers|dernières|dernieres) {U}", lambda m: f"the past {unit(m)}"),
            (rf"il y a {N} {U}", lambda m: f"{unit(m)} ago"),
            (r"(?:la )?semaine (?:dernière|derniere|passée|passee|précédente|precedente)", rel("last week")),
            (r"(?:le )?mois (?:dernier|passé|passe|précédent|precedent)", rel("last month")),
            (r"(?:l'|l’)?(?:année|annee|an) (?:dernière|derniere|dernier|passée|passee|précédente|precedente)",
             rel("last year")),
            (r"(?:le )?trimestre (?:dernier|passé|passe|précédent|precedent)", rel("last quarter")),
            (r"(?:le )?week-end (?:dernier|passé|passe)", rel("last weekend")),
            (r"cette semaine", rel("this week")), (r"ce mois(?:-ci)?", rel("this month")),
            (r"cette (?:année|annee)", rel("this year")),
            (r"(?:la )?semaine prochaine", rel("next week")), (r"(?:le )?mois prochain", rel("next month")),
            (r"(?:l'|l’)?(?:année|annee) prochaine", rel("next year")),
            (rf"{WD} (?:dernier|passé|passe)", lambda m: f"last {wd(m)}"),
            (r"avant-hier|avant hier", rel("the day before yesterday")),
            (r"après-demain|apres-demain", rel("the day after tomorrow")),
            (r"hier(?: soir| matin| après-midi| apres-midi)", rel("yesterday")),
            (r"hier", _french_hier), (r"aujourd['’]hui|ce matin|ce soir", rel("today")),
            (r"demain", rel("tomorrow")),
        ]
    elif lang == "de":
        since = r"seit(?: dem| der| letzter| letztem)?"
        e = r"(?:e|en|er|es|em)?"
        rules += [
            (rf"(?:im )?{M} (?P<r>letzt|vergangen|vorig|nächst|naechst|dies){e} jahres",
             lambda m: f"{month(m)} of " + ("this year" if m["r"] == "dies" else "next year" if m["r"].startswith("n")
                                             else "last year")),
            (rf"(?:am |vom )?{_DAY_NUM}\. ?{M}(?: {Y})?", lambda m: _dm(m, month(m))),
            (rf"(?:im )?{M} {Y}", lambda m: f"{month(m)} {m['year']}"),
            (rf"(?:im )?(?:letzten|vergangenen|vorigen) {M}", lambda m: f"last {month(m)}"),
            (rf"(?:im|in|während des) {M}", lambda m: f"in {month(m)}"),
            (rf"(?:in den |die |während der )?(?:letzten|vergangenen) {N} {U}", lambda m: f"the past {unit(m)}"),
            (rf"vor {N} {U}", lambda m: f"{unit(m)} ago"),
            (rf"(?:in der )?(?:letzt|vergangen|vorig){e} woche|(?:in der )?vorwoche", rel("last week")),
            (rf"(?:im )?(?:letzt|vergangen|vorig){e} monat|(?:im )?vormonat", rel("last month")),
            (rf"(?:im )?(?:letzt|vergangen|vorig){e} jahr|(?:im )?vorjahr", rel("last year")),
            (rf"(?:im )?(?:letzt|vergangen|vorig){e} quartal", rel("last quarter")),
            (rf"(?:am )?(?:letzt|vergangen|vorig){e} wochenende", rel("last weekend")),
            (rf"(?:in )?dies{e} woche", rel("this week")), (rf"(?:in )?dies{e} monat", rel("this month")),
            (rf"(?:in )?dies{e} jahr", rel("this year")),
            (rf"(?:in der |im )?nächst{e} woche|(?:in der |im )?naechst{e} woche", rel("next week")),
            (rf"(?:im )?nächst{e} monat", rel("next month")), (rf"(?:im )?nächst{e} jahr", rel("next year")),
            (rf"(?:am )?(?:letzt|vergangen|vorig){e} {WD}", lambda m: f"last {wd(m)}"),
            (rf"am {WD}", wd),
            (r"vorgestern", rel("the day before yesterday")), (r"übermorgen", rel("the day after tomorrow")),
            (r"gestern(?: morgen| abend| nachmittag)?", rel("yesterday")),
            (r"heute(?: morgen| abend| nachmittag)?", rel("today")),
            (r"(?<!guten )morgen", rel("tomorrow")),  # "guten Morgen" is "good morning"
        ]
    else:  # it
        since = r"(?:da|dal|dalla|dallo|dall'|dall’|a partire da(?:l|lla)?)"
        rules += [
            (rf"(?:a |in |nel )?{M} (?:dell['’]anno (?P<r>scorso|passato|prossimo)|di quest['’]anno)",
             lambda m: f"{month(m)} of " + ("this year" if not m["r"] else "next year" if m["r"] == "prossimo"
                                             else "last year")),
            (rf"(?:il |l'|l’)?{_DAY_NUM} {M}(?: {Y})?", lambda m: _dm(m, month(m))),
            (rf"(?:a |in |nel |di )?{M} (?:del )?{Y}", lambda m: f"{month(m)} {m['year']}"),
            (rf"(?:a |in )?{M} scorso", lambda m: f"last {month(m)}"),
            (rf"lo scorso {M}", lambda m: f"last {month(m)}"),
            (rf"(?:a|in|nel|nel mese di|durante) {M}", lambda m: f"in {month(m)}"),
            (rf"(?:negli |nelle |gli |le )?(?:ultimi|ultime) {N} {U}", lambda m: f"the past {unit(m)}"),
            (rf"{N} {U} fa", lambda m: f"{unit(m)} ago"),
            (r"(?:la |nella )?settimana (?:scorsa|passata)|(?:la |nella )?scorsa settimana", rel("last week")),
            (r"(?:il |nel |lo )?mese (?:scorso|passato)|(?:lo |nello )?scorso mese", rel("last month")),
            (r"(?:l'|l’|nell'|nell’)?anno (?:scorso|passato)|(?:lo |nello )?scorso anno", rel("last year")),
            (r"(?:il |nel |lo )?trimestre (?:scorso|passato)", rel("last quarter")),
            (r"(?:il |lo )?(?:fine settimana|weekend) (?:scorso|passato)", rel("last weekend")),
            (r"questa settimana", rel("this week")), (r"questo mese", rel("this month")),
            (r"quest['’]anno", rel("this year")),
            (r"(?:la )?(?:prossima settimana|settimana prossima)", rel("next week")),
            (r"(?:il )?(?:prossimo mese|mese prossimo)", rel("next month")),
            (r"(?:l['’])?(?:anno prossimo)|(?:il )?prossimo anno", rel("next year")),
            (rf"{WD} scors[oa]", lambda m: f"last {wd(m)}"),
            (rf"(?:lo |la )?scors[oa] {WD}", lambda m: f"last {wd(m)}"),
            (r"l['’]altro ieri|altroieri|l['’]altroieri", rel("the day before yesterday")),
            (r"dopodomani", rel("the day after tomorrow")),
            (r"ieri", rel("yesterday")), (r"oggi|stamattina|stasera", rel("today")), (r"domani", rel("tomorrow")),
        ]
    compiled = []
    for p, f in rules:
        pattern = re.compile(rf"(?<!\w)(?:(?P<since>{since}) )?(?:{p})(?!\w)", re.IGNORECASE)
        compiled.append((pattern, _with_since(f)))
    return compiled


_DAY_NUM = r"(?P<day>[0-3]?\d)"
_GERMAN = re.compile(r"(?<!\w)(?:ist|sind|war|wir|ich|was|wer|wo|der|die|das|und|nicht|haben|habe|hat|gibt|es|sie|"
                     r"bitte|noch|schon|auch|mit|von|zu|bin|bist)(?!\w)", re.IGNORECASE)
_FRENCH = re.compile(r"(?<!\w)(?:nous|vous|avons|avez|est|sont|qu|le|la|les|des|du|une|qui|quoi|que|ce|on|je|"
                     r"ai|a|été|fait|dit|depuis)(?!\w)", re.IGNORECASE)


def _french_hier(m: re.Match[str]) -> str:
    """French "hier" is German "here": yesterday only if the text does not read as German."""
    text = m.string
    if _GERMAN.search(text) and not _FRENCH.search(text):
        return ""
    return "yesterday"
_MONTH_NAMES = dict(enumerate("january february march april may june july august september october november december".split(), 1))


def _dm(m: re.Match[str], month: str) -> str:
    return f"{int(m['day'])} {month}" + (f" {m['year']}" if m["year"] else "")


def _with_since(f: Callable[[re.Match[str]], str]) -> Callable[[re.Match[str]], str]:
    return lambda m: ("since " if m["since"] else "") + f(m)


def _since_zh(f: Callable[[re.Match[str]], str]) -> Callable[[re.Match[str]], str]:
    return lambda m: ("since " if m["since"] else "") + f(m)


_foreign_cache: dict[str, list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]]] = {}
_foreign_lock = threading.Lock()


def _foreign_rules(lang: str) -> list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]]:
    rules = _foreign_cache.get(lang)
    if rules is None:
        with _foreign_lock:
            rules = _foreign_cache.get(lang)
            if rules is None:
                rules = _foreign_cache[lang] = _rules_for(lang)
    return rules


def _foreign_candidates(text: str, clock: _Clock, lang: str) -> list[tuple[int, int, _Resolved]]:
    out: list[tuple[int, int, _Resolved]] = []
    for pattern, build in _foreign_rules(lang):
        for m in pattern.finditer(text):
            try:
                r = _resolve_rules(_normalise(build(m)), clock)
            except (_OutOfRange, OverflowError, ValueError, KeyError):
                r = None
            if r is not None and not r.end < r.start:
                out.append((m.start(), m.end(), r))
    return out


# --- periods in every language dateparser knows
#
# dateparser ships, for each of its ~200 locales, the phrases of relative periods ("relative-type":
# "1 week ago" → ["на прошлой неделе", …], "0 day ago" → ["сегодня"]). Those for days, weeks, months
# and years become one regex (built once, when the engine warms up), each phrase rewritten to the
# English phrase the calendar rules resolve: "на прошлой неделе" is "last week", the previous
# Monday–Sunday. No language detection (slow, 0.8 s a call) and no date search in free text (it
# takes "we" and "do" for dates): whole-word phrase matches only.

_RELATIVE_ENGLISH = {
    "0 day ago": "today", "1 day ago": "yesterday", "2 day ago": "the day before yesterday", "in 1 day": "tomorrow",
    "in 2 day": "the day after tomorrow",
    "0 week ago": "this week", "1 week ago": "last week", "in 1 week": "next week",
    "0 month ago": "this month", "1 month ago": "last month", "in 1 month": "next month",
    "0 year ago": "this year", "1 year ago": "last year", "in 1 year": "next year",
}
_any_language_table: list[tuple[re.Pattern[str], dict[str, str], frozenset[str] | None]] = []
_any_language_lock = threading.Lock()
_SCRIPT_WITHOUT_SPACES = re.compile("[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf"
                                    "\u4e00-\u9fff\uac00-\ud7af]")
_WORD = re.compile(r"\w+")


#: Forms people write that dateparser's tables lack, merged into its locale's table (written by hand):
#: Russian's genitive and prepositional cases ("в марте прошлого года", in March of last year: dateparser
#: has "в прошлом году" and "марта" only), Hindi's oblique case and its everyday "हफ्ता" and "महीना"
#: (dateparser: "पिछला सप्ताह", "पिछला माह"), Arabic's "العام" beside "السنة" for year.
_MORE_FORMS: dict[str, dict[str, Any]] = {
    "ru": {"relative-type": {"1 week ago": ["прошлой недели", "прошлая неделя"], "0 week ago": ["этой недели"],
                             "1 month ago": ["прошлого месяца", "прошлый месяц"], "0 month ago": ["этого месяца"],
                             "1 year ago": ["прошлого года", "прошлый год"], "0 year ago": ["этого года", "этот год"],
                             "in 1 year": ["следующего года", "следующий год"]},
           **{m: [f] for m, f in zip(("january february march april june july august september october november "
                                      "december").split(),
                                     "январе феврале марте апреле июне июле августе сентябре октябре ноябре декабре"
                                     .split(), strict=True)}},
    "hi": {"relative-type": {"1 week ago": ["पिछले सप्ताह", "पिछले हफ्ते", "पिछले हफ़्ते", "पिछला हफ्ता"],
                             "0 week ago": ["इस हफ्ते", "इस हफ़्ते"], "in 1 week": ["अगले सप्ताह", "अगले हफ्ते"],
                             "1 month ago": ["पिछले महीने", "पिछला महीना", "पिछले माह"], "0 month ago": ["इस महीने"],
                             "in 1 month": ["अगले महीने"], "1 year ago": ["पिछले वर्ष", "पिछला साल"],
                             "in 1 year": ["अगले साल", "अगले वर्ष"]}},
    "ar": {"relative-type": {"1 year ago": ["العام الماضي"], "0 year ago": ["هذا العام", "العام الحالي"],
                             "in 1 year": ["العام القادم", "العام المقبل"], "in 1 month": ["الشهر القادم"]}},
}


def _with_more_forms(code: str, info: dict[str, Any]) -> dict[str, Any]:
    more = _MORE_FORMS.get(code)
    if not more:
        return info
    out = dict(info)
    for key, forms in more.items():
        if key == "relative-type":
            rel = {k: list(v) for k, v in (info.get(key) or {}).items()}
            for k, v in forms.items():
                rel[k] = rel.get(k, []) + v
            out[key] = rel
        else:
            out[key] = list(info.get(key) or ()) + forms
    return out


def _locale_tables() -> Iterator[dict[str, Any]]:
    """dateparser's table of each locale without rules of its own here, with :data:`_MORE_FORMS`
    (raises without dateparser)."""
    import importlib

    from dateparser.data import date_translation_data as data
    from dateparser.data.languages_info import language_order

    for code in language_order:
        if code.split("-")[0] in SUPPORTED_LANGUAGES:
            continue  # these have rules of their own ("hier" is yesterday only in French)
        try:
            yield _with_more_forms(code, importlib.import_module(f"{data.__name__}.{code.replace('-', '_')}").info)
        except ImportError:
            continue


def _alternation(words: Iterable[str]) -> str:
    """One regex alternative of ``words``, longest first: whole words in scripts written with spaces,
    anywhere in those written without."""
    alts = sorted(set(words), key=len, reverse=True)
    spaced = [re.escape(a) for a in alts if not _SCRIPT_WITHOUT_SPACES.search(a)]
    unspaced = [re.escape(a) for a in alts if _SCRIPT_WITHOUT_SPACES.search(a)]
    parts = ([r"(?<!\w)(?:" + "|".join(spaced) + r")(?!\w)"] if spaced else []) + (
        ["(?:" + "|".join(unspaced) + ")"] if unspaced else [])
    return "|".join(parts) if parts else r"(?!)"


def _key_words(phrases: Iterable[str]) -> frozenset[str] | None:
    """The longest word of each phrase (a phrase found in a text has each of its words there), or None
    when a phrase has no word."""
    keys = set()
    for phrase in phrases:
        words = _WORD.findall(phrase)
        if not words:
            return None
        keys.add(max(words, key=len))
    return frozenset(keys)


def _any_language_phrases() -> tuple[re.Pattern[str], dict[str, str], frozenset[str] | None] | None:
    """(one regex of every locale's relative-period phrases, phrase → English, the phrases' key words),
    built once; None without dateparser."""
    if _any_language_table:
        return _any_language_table[0] if _any_language_table[0][1] else None
    with _any_language_lock:
        if not _any_language_table:
            phrases: dict[str, str] = {}
            try:
                for info in _locale_tables():
                    for key, words in (info.get("relative-type") or {}).items():
                        english = _RELATIVE_ENGLISH.get(key)
                        if english is None:
                            continue
                        for w in words:
                            low = " ".join(str(w).casefold().split())
                            # a single Latin-script word is too often an ordinary word of another
                            # language ("morgen" is tomorrow in Dutch and morning in German): phrases only
                            # (two characters are a word in the scripts written without spaces: 어제)
                            short = len(low) < (2 if _SCRIPT_WITHOUT_SPACES.search(low) else 3)
                            if short or low in _ENGLISH_WORDS or (" " not in low and _LATIN_WORD.fullmatch(low)):
                                continue
                            phrases.setdefault(low, english)
            except Exception:  # noqa: BLE001 - without dateparser's data there is no such table
                phrases = {}
            pattern = re.compile(_alternation(phrases), re.IGNORECASE)
            _any_language_table.append((pattern, phrases, _key_words(phrases)))
    return _any_language_table[0] if _any_language_table[0][1] else None


_LATIN_WORD = re.compile("[a-z\u00c0-\u024f'’.-]+")
#: English words a locale's phrase must not be (dateparser's tables hold e.g. "now" for many locales).
_ENGLISH_WORDS = frozenset("""
today now this that week month year day last next past then soon later ago since when time date days
""".split())


def _any_language_candidates(text: str, clock: _Clock) -> list[tuple[int, int, _Resolved]]:
    table = _any_language_phrases()
    if table is None:
        return []
    pattern, phrases, keys = table
    out: list[tuple[int, int, _Resolved]] = []
    # the phrases' regex is slow to try at every position: only a text holding a phrase's key word, or
    # written in a script without spaces, is searched
    if keys is not None and not _SCRIPT_WITHOUT_SPACES.search(text) and not any(
            w in keys for w in _WORD.findall(text.casefold())):
        return _compound_candidates(text, clock)
    for m in pattern.finditer(text):
        english = phrases.get(" ".join(m.group().casefold().split()))
        if english is None:
            continue
        r = _resolve_rules(english, clock)
        if r is not None:
            out.append((m.start(), m.end(), r))
    return out + _compound_candidates(text, clock)


# Compound periods in every language dateparser knows: a month's name next to a relative year ("março do
# ano passado", "maart vorig jaar", "작년 3월"), in either order, with at most two short joining words
# between ("do", "of", "de"), is that month of that year, as "March of last year" is in English. The
# months' names and the year phrases ("0 year ago", "1 year ago", "in 1 year") come from dateparser's
# locale tables; a Latin-script name shorter than four letters ("mar", "ene") is left out.

_EN_MONTH_NAMES = ("january february march april may june july august september october november "
                   "december").split()
_compound_table: list[tuple[re.Pattern[str], dict[str, int], dict[str, str], re.Pattern[str]] | None] = []
_compound_lock = threading.Lock()
_YEAR_KEYS = {"0 year ago": "this year", "1 year ago": "last year", "in 1 year": "next year"}


def _words(words: Iterable[str], min_len: int) -> list[str]:
    out = []
    for w in words:
        low = " ".join(str(w).casefold().split())
        unspaced = bool(_SCRIPT_WITHOUT_SPACES.search(low))
        if low and (unspaced or len(low) >= min_len) and low not in _ENGLISH_WORDS:
            out.append(low)
    return out


def _compound_phrases() -> tuple[re.Pattern[str], dict[str, int], dict[str, str], re.Pattern[str]] | None:
    """(one regex of month-name + relative-year pairs, name → month, year phrase → English, the year
    phrases alone: a text without one is not searched further), built once beside
    :func:`_any_language_phrases`; None without dateparser."""
    if _compound_table:
        return _compound_table[0]
    with _compound_lock:
        if not _compound_table:
            months: dict[str, int] = {}
            years: dict[str, str] = {}
            try:
                for info in _locale_tables():
                    for n, name in enumerate(_EN_MONTH_NAMES, start=1):
                        for w in _words(info.get(name) or (), 4):
                            months.setdefault(w, n)
                    for key, english in _YEAR_KEYS.items():
                        for w in _words((info.get("relative-type") or {}).get(key) or (), 3):
                            years.setdefault(w, english)
            except Exception:  # noqa: BLE001 - without dateparser's data there is no such table
                months, years = {}, {}
            if not (months and years):
                _compound_table.append(None)
            else:
                m_alt, y_alt = _alternation(months), _alternation(years)
                join = r"[\s,]*(?:[^\W\d_]{1,4}['’]?[\s,]+){0,2}"  # at most two short joining words
                pattern = re.compile(rf"(?P<m>{m_alt}){join}(?P<y>{y_alt})|(?P<y2>{y_alt}){join}(?P<m2>{m_alt})",
                                     re.IGNORECASE)
                _compound_table.append((pattern, months, years, re.compile(y_alt, re.IGNORECASE)))
    return _compound_table[0]


def _compound_candidates(text: str, clock: _Clock) -> list[tuple[int, int, _Resolved]]:
    table = _compound_phrases()
    if table is None:
        return []
    pattern, months, years, year_words = table
    out: list[tuple[int, int, _Resolved]] = []
    if year_words.search(text) is None:  # (the pairs' regex is slow to try at every position)
        return out
    for m in pattern.finditer(text):
        month = months.get(" ".join((m.group("m") or m.group("m2")).casefold().split()))
        year = years.get(" ".join((m.group("y") or m.group("y2")).casefold().split()))
        if month is None or year is None:
            continue
        r = _resolve_rules(f"{_EN_MONTH_NAMES[month - 1]} of {year}", clock)
        if r is not None:
            out.append((m.start(), m.end(), r))
    return out


def warm_up_languages() -> float:
    """Build the every-language phrase table (about a second), so no query pays it.

    Returns:
        The seconds it took (0.0 when already built).
    """
    if _any_language_table and len(_foreign_cache) >= len(SUPPORTED_LANGUAGES) - 1:
        return 0.0
    started = time.perf_counter()
    for lang in SUPPORTED_LANGUAGES:
        if lang != "en":
            _foreign_rules(lang)
    _any_language_phrases()
    _compound_phrases()
    return time.perf_counter() - started


# --- the dateparser fallback

_search_lock = threading.Lock()
_search_warm: set[tuple[str, ...]] = set()
_ALL_MONTH_WORDS = frozenset(_MONTHS) | frozenset(w for table in _FOREIGN_MONTHS.values() for w in table)
_NUMERIC_DATE = re.compile(r"\d{1,4}\s*[./-]\s*\d{1,2}(?:\s*[./-]\s*\d{1,4})?|\d{4}年|\d{1,2}月")
_LETTER_WORDS = re.compile(r"[^\W\d_]+")
_DIGITS = re.compile(r"\d+")


def _all_rule_candidates(text: str, clock: _Clock) -> list[tuple[int, int, _Resolved]]:
    """The phrase rules of every supported language over ``text`` (for WITHIN in another language)."""
    out: list[tuple[int, int, _Resolved]] = []
    for lang in SUPPORTED_LANGUAGES:
        if lang != "en":
            out += _foreign_candidates(text, clock, lang)
    return out


def _search_day(text: str, clock: _Clock, languages: tuple[str, ...]) -> tuple[int, int, date] | None:
    """One day found by dateparser's search in ``text``, or None; never raises."""
    if len(text) > _MAX_SEARCH_INPUT or not any(c.isdigit() for c in text):
        return None
    try:
        from dateparser.search import search_dates

        settings = {
            "PREFER_DATES_FROM": "past",
            "RELATIVE_BASE": clock.now.replace(tzinfo=None),
            "RETURN_AS_TIMEZONE_AWARE": False,
        }
        with _search_lock:  # dateparser's language loading is not thread-safe on first use
            found = search_dates(text, languages=list(languages), settings=settings) or []
            _search_warm.add(languages)
    except Exception:  # dateparser is a best-effort fallback: any failure means "no date"
        return None
    for sub, moment in found:
        if not isinstance(sub, str) or not isinstance(moment, datetime):
            continue
        low = sub.casefold()
        if not any(c.isdigit() for c in low):
            continue  # "may", "march", "do", "we", "now", "sat": words, not dates
        numbers = len(_DIGITS.findall(low))
        month_word = any(w in _ALL_MONTH_WORDS for w in _LETTER_WORDS.findall(low))
        if not (numbers >= 2 and _NUMERIC_DATE.search(low)) and not (numbers >= 1 and month_word):
            continue  # a day needs a day and a month: "3", "at 10", "5月", "2024年" are not days
        d = moment.date()
        if not _MIN_YEAR <= d.year <= _MAX_YEAR:
            continue
        start = max(text.find(sub), 0)
        end = start + len(sub)
        # dateparser takes neighbouring words along ("on 25.12.2024 we"): keep from the first to the
        # last word that holds a digit or names a month
        words = [(w.start(), w.end()) for w in _WORD_SPAN.finditer(text, start, end)
                 if any(c.isdigit() for c in w.group()) or w.group().casefold().strip(_EDGE_PUNCT) in _ALL_MONTH_WORDS]
        if words:
            start, end = words[0][0], words[-1][1]
        return (start, end, d)
    return None


def warm_up_extract(languages: Sequence[str] = SUPPORTED_LANGUAGES) -> float:
    """Load dateparser's search for ``languages`` once, so the first TEMPORAL query does not pay it.

    Returns:
        The seconds it took (0.0 when already warm or when dateparser is missing).
    """
    langs = _languages(languages)
    if langs in _search_warm:
        return 0.0
    t0 = time.perf_counter()
    _search_day("12/25/2024", _Clock(datetime(2026, 1, 15, 12, 0, tzinfo=timezone.utc)), langs)
    _search_warm.add(langs)
    return time.perf_counter() - t0


def _languages(languages: Sequence[str] | str) -> tuple[str, ...]:
    if isinstance(languages, str):
        languages = (languages,)
    out = []
    for lang in languages:
        code = str(lang).strip().lower()
        if code not in SUPPORTED_LANGUAGES:
            raise ValueError(f"unsupported language {lang!r} for periods; choose from {', '.join(SUPPORTED_LANGUAGES)}")
        if code not in out:
            out.append(code)
    return tuple(out)


def extract_period(text: str, now: datetime, languages: Sequence[str] | str = SUPPORTED_LANGUAGES, *,
                   fallback: bool = True) -> Period | None:
    """Find the period a free text (a whole question) talks about, as a half-open range, or None.

    Args:
        text: Free text: ``"what did we decide last week?"``, ``"¿qué decidimos la semana pasada?"``.
        now: The engine clock (timezone-aware); calendar units are taken in its time zone.
        languages: The languages whose phrases are looked for (of :data:`SUPPORTED_LANGUAGES`).
        fallback: Let dateparser's search look for a single date when no rule matched.

    Returns:
        The :class:`Period` (``text`` is the part of ``text`` that named it, ``method`` says which
        step found it), or None when the text names no period.

    Raises:
        ValueError: ``now`` is naive or a language is not supported (programmer errors).

    >>> from datetime import datetime, timezone
    >>> now = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)  # a Monday
    >>> p = extract_period("What did we decide last week?", now)
    >>> p.text, p.description
    ('last week', '2026-11-23T00:00:00+00:00 .. 2026-11-30T00:00:00+00:00')
    >>> extract_period("letzte Woche", now).description == extract_period("上周", now).description == p.description
    True
    >>> extract_period("I may do it in a moment", now) is None
    True
    """
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("extract_period needs a timezone-aware 'now'")
    langs = _languages(languages)
    if not isinstance(text, str) or not text.strip():
        return None
    text = text[:_MAX_EXTRACT_INPUT]
    clock = _Clock(now)
    cands: list[tuple[int, int, _Resolved]] = []
    if "en" in langs:
        cands += _en_candidates(text, clock)
    for lang in langs:
        if lang != "en":
            cands += _foreign_candidates(text, clock, lang)
    method: Literal["rule", "dateparser"] = "rule"
    if not cands:  # the relative phrases of every other language dateparser knows
        cands = _any_language_candidates(text, clock)
    if cands:
        start, end, r = min(cands, key=lambda c: (-(c[1] - c[0]), c[0]))
    elif fallback and (hit := _search_day(text, clock, langs)) is not None:
        start, end, d = hit
        r = _Resolved(clock.at(d), clock.at(d + timedelta(days=1)))
        method = "dateparser"
    else:
        return None
    return Period(
        start=r.start, end=r.end, text=text[start:end], method=method,
        description=f"{_fmt(r.start, r.open_start, '-')} .. {_fmt(r.end, r.open_end, '+')}",
        open_start=r.open_start, open_end=r.open_end,
    )


def describe_extraction(period: Period | None) -> str:
    """The explain line for TEMPORAL: the period found and its range, or ``no period found``."""
    if period is None:
        return "no period found"
    return f"period {period.text!r} ({period.method}): [{period.description})"


# ---------------------------------------------------------------------------- the TEMPORAL value

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICRO = timedelta(microseconds=1)


def _micros(moment: datetime) -> int:
    return (moment - _EPOCH) // _MICRO


def temporal_value(moment: datetime | None, period: Period | None) -> float | None:
    """TEMPORAL's value for a row dated ``moment``: in (0.5, 1] inside the period, else None.

    With ``A``, ``B``, ``X`` the period's start, end and the moment in whole microseconds since the
    Unix epoch (exact integers)::

        value = 1 − (0.5 × |2X − A − B|) / (B − A + 2)

    so 1.0 at the midpoint, falling linearly towards the edges, and just above 0.5 at the first
    microsecond (the ``+ 2`` keeps the start, which the half-open period includes, above 0.5). A
    period open on one side (``after 2020``) has no midpoint: every moment inside gets 1.0. The
    float operations are fixed (two exact integer→float conversions, one multiply, one divide, one
    subtract) so SQL computes the same value (the hybrid statement's TEMPORAL arm,
    :meth:`nlql.sql.dialect.Dialect.visit_TemporalScore`; :func:`postgres_temporal_value` over a timestamptz).

    Args:
        moment: The row's date as an aware datetime (None → None).
        period: The period extracted from the text (None → None: no period, no value).

    >>> from datetime import datetime, timezone
    >>> now = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)
    >>> p = extract_period("last week", now)
    >>> temporal_value(datetime(2026, 11, 26, 12, tzinfo=timezone.utc), p)
    1.0
    >>> 0.5 < temporal_value(p.start, p) < 0.50001, temporal_value(p.end, p)
    (True, None)
    """
    if moment is None or period is None:
        return None
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("temporal_value needs a timezone-aware moment")
    if not period.contains(moment):
        return None
    if period.open_start or period.open_end:
        return 1.0
    a, b, x = _micros(period.start), _micros(period.end), _micros(moment)
    return 1.0 - (0.5 * float(abs(2 * x - a - b))) / float(b - a + 2)


@dataclass(frozen=True, slots=True)
class SqlValue:
    """A bound value inside a :class:`SqlStatement` (never formatted into the text)."""

    value: Any
    cast: str | None = None
    label: str | None = None


@dataclass(frozen=True)
class SqlStatement:
    """SQL as literal text interleaved with :class:`SqlValue` parts (PostgreSQL's spelling)."""

    parts: tuple[str | SqlValue, ...] = ()

    def pyformat(self) -> tuple[str, list[Any]]:
        """``(text with %s placeholders, values)`` for ``psycopg``'s ``cursor.execute``."""
        text, values = [], []
        for p in self.parts:
            if isinstance(p, SqlValue):
                text.append("%s" + (f"::{p.cast}" if p.cast else ""))
                values.append(p.value)
            else:
                text.append(p.replace("%", "%%"))
        return "".join(text), values

    def text_only(self) -> str:
        """The text with every value shown as ``?``."""
        return "".join("?" if isinstance(p, SqlValue) else p for p in self.parts)


def postgres_temporal_value(column_sql: str, period: Period | None) -> Any:
    """SQL for :func:`temporal_value` of a ``timestamptz`` expression (a :class:`SqlStatement`).

    ``column_sql`` is SQL text the caller built (e.g. ``"u.date"``); the period's bounds are bound
    values. NULL outside the period, and NULL everywhere when ``period`` is None.
    """
    if period is None:
        return SqlStatement(("CAST(NULL AS float8)",))
    start, end = SqlValue(period.start, "timestamptz", "period start"), SqlValue(period.end, "timestamptz", "period end")
    inside = ("(", column_sql, " >= ", start, " AND ", column_sql, " < ", end, ")")
    if period.open_start or period.open_end:
        return SqlStatement(("CASE WHEN ", *inside, " THEN 1.0::float8 END",))
    a, b = _micros(period.start), _micros(period.end)
    x = ("(extract(epoch FROM ", column_sql, ") * 1000000)::bigint")
    return SqlStatement((
        "CASE WHEN ", *inside, " THEN 1.0::float8 - (0.5::float8 * abs(2 * ", *x, " - ",
        SqlValue(a + b, "bigint", "A + B"), ")::float8) / ", SqlValue(b - a + 2, "bigint", "B - A + 2"),
        "::float8 END",
    ))
