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
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone, tzinfo
from typing import Any, Literal

from nlql.errors import PlanError

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
_MONTH_REL_YEAR = _full(rf"{_MONTH_RE} (?P<rel>last|this|next) year")
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
    if m := _MONTH_REL_YEAR.match(s):
        return _month(today.year + {"last": -1, "this": 0, "next": 1}[m["rel"]], _MONTHS[m["month"]])
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
