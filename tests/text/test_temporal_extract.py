"""Periods found inside free text (TEMPORAL's period), in six languages, and TEMPORAL's value."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nlql.errors import PlanError
from nlql.text import temporal
from nlql.text.temporal import (
    SUPPORTED_LANGUAGES,
    describe_extraction,
    extract_period,
    postgres_temporal_value,
    resolve_period,
    temporal_value,
    warm_up_extract,
)

NOW = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)  # a Monday
UTC = timezone.utc


def d(text: str) -> datetime:
    return datetime.fromisoformat(text if "T" in text else text + "T00:00").replace(tzinfo=UTC)


LAST_WEEK = ("2026-11-23", "2026-11-30")
YESTERDAY = ("2026-11-29", "2026-11-30")
LAST_MONTH = ("2026-10-01", "2026-11-01")
JUNE_2024 = ("2024-06-01", "2024-07-01")
THREE_DAYS_AGO = ("2026-11-27", "2026-11-28")
PAST_3_DAYS = ("2026-11-27T15:00", "2026-11-30T15:00")
SINCE_LAST_WEEK = ("2026-11-23", "2026-11-30T15:00")

CASES: list[tuple[str, str, tuple[str, str]]] = [
    # English
    ("what did we decide last week?", "last week", LAST_WEEK),
    ("What happened YESTERDAY", "YESTERDAY", YESTERDAY),
    ("summarise last month's notes", "last month", LAST_MONTH),
    ("notes from June 2024 please", "from June 2024", JUNE_2024),
    ("what did Russell say in June 2024?", "in June 2024", JUNE_2024),
    ("3 days ago", "3 days ago", THREE_DAYS_AGO),
    ("anything in the past 3 days?", "in the past 3 days", PAST_3_DAYS),
    ("changes since last week", "since last week", SINCE_LAST_WEEK),
    ("what was said in 2023 about it", "in 2023", ("2023-01-01", "2024-01-01")),
    ("between June and August 2024, who called?", "between June and August 2024", ("2024-06-01", "2024-09-01")),
    ("the meeting on monday", "on monday", ("2026-11-30", "2026-12-01")),
    ("what did we plan in March", "in March", ("2026-03-01", "2026-04-01")),
    # Spanish
    ("¿qué decidimos la semana pasada?", "la semana pasada", LAST_WEEK),
    ("¿Qué pasó ayer?", "ayer", YESTERDAY),
    ("notas del mes pasado", "mes pasado", LAST_MONTH),
    ("lo que dijimos en junio de 2024", "en junio de 2024", JUNE_2024),
    ("hace 3 días", "hace 3 días", THREE_DAYS_AGO),
    ("en los últimos 3 días", "en los últimos 3 días", PAST_3_DAYS),
    ("desde la semana pasada", "desde la semana pasada", SINCE_LAST_WEEK),
    ("qué pasó el 3 de junio de 2024", "el 3 de junio de 2024", ("2024-06-03", "2024-06-04")),
    # French
    ("qu'avons-nous décidé la semaine dernière ?", "la semaine dernière", LAST_WEEK),
    ("qu'avons-nous fait hier ?", "hier", YESTERDAY),
    ("les notes du mois dernier", "mois dernier", LAST_MONTH),
    ("en juin 2024", "en juin 2024", JUNE_2024),
    ("il y a 3 jours", "il y a 3 jours", THREE_DAYS_AGO),
    ("les 3 derniers jours", "les 3 derniers jours", PAST_3_DAYS),
    ("depuis la semaine dernière", "depuis la semaine dernière", SINCE_LAST_WEEK),
    ("le 3 juin 2024", "le 3 juin 2024", ("2024-06-03", "2024-06-04")),
    # German
    ("Was haben wir letzte Woche beschlossen?", "letzte Woche", LAST_WEEK),
    ("Was war gestern?", "gestern", YESTERDAY),
    ("Notizen vom letzten Monat", "letzten Monat", LAST_MONTH),
    ("Was geschah im Juni 2024?", "im Juni 2024", JUNE_2024),
    ("vor 3 Tagen", "vor 3 Tagen", THREE_DAYS_AGO),
    ("in den letzten 3 Tagen", "in den letzten 3 Tagen", PAST_3_DAYS),
    ("seit letzter Woche", "seit letzter Woche", SINCE_LAST_WEEK),
    ("am 3. Juni 2024", "am 3. Juni 2024", ("2024-06-03", "2024-06-04")),
    # Italian
    ("cosa abbiamo deciso la settimana scorsa?", "la settimana scorsa", LAST_WEEK),
    ("cosa è successo ieri?", "ieri", YESTERDAY),
    ("le note del mese scorso", "mese scorso", LAST_MONTH),
    ("a giugno 2024", "a giugno 2024", JUNE_2024),
    ("3 giorni fa", "3 giorni fa", THREE_DAYS_AGO),
    ("negli ultimi 3 giorni", "negli ultimi 3 giorni", PAST_3_DAYS),
    ("dalla settimana scorsa", "dalla settimana scorsa", SINCE_LAST_WEEK),
    # Chinese
    ("我们上周决定了什么？", "上周", LAST_WEEK),
    ("上个星期的会议", "上个星期", LAST_WEEK),
    ("昨天发生了什么", "昨天", YESTERDAY),
    ("上个月的笔记", "上个月", LAST_MONTH),
    ("2024年6月的会议", "2024年6月", JUNE_2024),
    ("3天前", "3天前", THREE_DAYS_AGO),
    ("三天前", "三天前", THREE_DAYS_AGO),
    ("过去3天", "过去3天", PAST_3_DAYS),
    ("上周以来", "上周以来", SINCE_LAST_WEEK),
    ("2024年6月3日", "2024年6月3日", ("2024-06-03", "2024-06-04")),
]


@pytest.mark.parametrize(("question", "found", "expected"), CASES, ids=[c[0] for c in CASES])
def test_periods_inside_questions(question: str, found: str, expected: tuple[str, str]) -> None:
    p = extract_period(question, NOW)
    assert p is not None
    assert (p.start, p.end) == (d(expected[0]), d(expected[1]))
    assert p.text == found and p.text in question
    assert p.method == "rule"


@pytest.mark.parametrize(("en", "es", "fr", "de", "it", "zh", "number"), [
    ("January", "enero", "janvier", "Januar", "gennaio", "1月", 1),
    ("March", "marzo", "mars", "März", "marzo", "三月", 3),
    ("May", "mayo", "mai", "Mai", "maggio", "5月", 5),
    ("December", "diciembre", "décembre", "Dezember", "dicembre", "十二月", 12),
])
def test_month_names_in_every_language(en, es, fr, de, it, zh, number) -> None:  # type: ignore[no-untyped-def]
    start = datetime(2026 if number <= 11 else 2025, number, 1, tzinfo=UTC)  # the most recent one begun
    for q in (f"in {en}", f"en {es}", f"en {fr}", f"im {de}", f"a {it}", zh):
        p = extract_period(f"notes {q}?", NOW)
        assert p is not None and p.start == start and p.text == q, q
    # with a year
    for q in (f"{en} 2024", f"{es} de 2024", f"{fr} 2024", f"{de} 2024", f"{it} 2024", f"2024年{number}月"):
        p = extract_period(q, NOW)
        assert p is not None and p.start == datetime(2024, number, 1, tzinfo=UTC), q


@pytest.mark.parametrize("text", [
    "may", "I may do it", "march", "do you march?", "do we have notes?", "we", "now", "issue 2024 status",
    "what is an h1 heading", "top 10 results", "Was ist hier passiert?", "guten Morgen", "por la mañana",
    "the last thing we did", "one day we will", "in a second", "next steps", "", "   ", "3", "2024",
])
def test_no_period_in_text_that_names_none(text: str) -> None:
    assert extract_period(text, NOW) is None
    assert describe_extraction(None) == "no period found"


def test_the_longest_period_wins_then_the_leftmost() -> None:
    assert extract_period("since last week, not yesterday", NOW).text == "since last week"  # type: ignore[union-attr]
    assert extract_period("yesterday or last week", NOW).text == "yesterday"  # type: ignore[union-attr]


def test_dateparser_finds_single_dates_the_rules_do_not_know() -> None:
    warm_up_extract()
    p = extract_period("what did we decide on 12/25/2024?", NOW)
    assert p is not None and p.method == "dateparser"
    assert (p.start, p.end, p.text) == (d("2024-12-25"), d("2024-12-26"), "12/25/2024")
    q = extract_period("on 25.12.2024 we met", NOW)
    assert q is not None and (q.start, q.text) == (d("2024-12-25"), "25.12.2024")
    assert extract_period("on 12/25/2024", NOW, fallback=False) is None
    assert describe_extraction(p) == "period '12/25/2024' (dateparser): [2024-12-25T00:00:00+00:00 .. 2024-12-26T00:00:00+00:00)"


def test_dateparser_failures_are_contained(monkeypatch: pytest.MonkeyPatch) -> None:
    import dateparser.search

    def boom(*args: object, **kwargs: object) -> None:
        raise RecursionError("dateparser broke")

    monkeypatch.setattr(dateparser.search, "search_dates", boom)
    assert extract_period("on 12/25/2024", NOW) is None
    assert extract_period("last week on 12/25/2024", NOW).text == "last week"  # type: ignore[union-attr]


def test_languages_limit_the_phrases_looked_for() -> None:
    assert extract_period("la semana pasada", NOW, languages=["en"]) is None
    assert extract_period("la semana pasada", NOW, languages="es") is not None
    assert extract_period("上周", NOW, languages=["en", "de"]) is None
    assert set(SUPPORTED_LANGUAGES) == {"en", "es", "fr", "de", "it", "zh"}
    with pytest.raises(ValueError, match="unsupported language"):
        extract_period("last week", NOW, languages=["pt"])
    with pytest.raises(ValueError, match="timezone-aware"):
        extract_period("last week", NOW.replace(tzinfo=None))


def test_calendar_units_follow_the_clock_time_zone() -> None:
    berlin = datetime(2026, 11, 30, 0, 30, tzinfo=ZoneInfo("Europe/Berlin"))  # Sunday 23:30 UTC
    p = extract_period("letzte Woche", berlin)
    assert p is not None and p.start == datetime(2026, 11, 23, tzinfo=ZoneInfo("Europe/Berlin"))
    assert p.start.utcoffset() == timedelta(hours=1)


def test_within_keeps_its_meaning() -> None:
    # WITHIN's resolver is untouched: a lone "from X" is "since X" there, and "march" is refused
    assert resolve_period("from June 2024", NOW).end == NOW
    with pytest.raises(PlanError):
        resolve_period("march", NOW)
    assert set(temporal.__all__) == {"OPEN_END", "OPEN_START", "Period", "resolve_period", "warm_up"}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([
    "last", "week", "semana", "pasada", "la", "上", "周", "月", "in", "June", "2024", "since", "from", "to",
    "may", "march", "do", "3", "days", "ago", "hace", "vor", "Tagen", "il", "y", "a", "jours", "fa", "giorni",
    "between", "and", "yesterday", "hier", "?", ",", "12/25/2024", "the", "past", "de", "junio", "Q3",
]), max_size=12).map(" ".join) | st.text(max_size=80))
def test_random_text_never_raises_and_periods_are_ordered_substrings(text: str) -> None:
    p = extract_period(text, NOW)
    if p is not None:
        assert p.start <= p.end
        assert p.text and p.text in text


# -------------------------------------------------------------------------------- TEMPORAL's value


def test_value_peaks_at_the_midpoint_and_stays_above_a_half_inside() -> None:
    p = extract_period("last week", NOW)
    assert p is not None
    mid = p.start + (p.end - p.start) / 2
    assert temporal_value(mid, p) == 1.0
    first, last = temporal_value(p.start, p), temporal_value(p.end - timedelta(microseconds=1), p)
    assert first is not None and last is not None and 0.5 < first < 0.5 + 1e-9 and 0.5 < last < 0.5 + 1e-9
    assert temporal_value(p.end, p) is None and temporal_value(p.start - timedelta(seconds=1), p) is None
    days = [temporal_value(p.start + timedelta(days=i, hours=12), p) for i in range(7)]
    assert days == sorted(days[:4]) + sorted(days[4:], reverse=True)[0:3] and days[3] == 1.0
    assert days[0] == days[6]  # symmetric around the midpoint
    assert temporal_value(None, p) is None and temporal_value(mid, None) is None


def test_open_periods_give_one_everywhere_inside() -> None:
    p = resolve_period("after 2020", NOW)
    assert temporal_value(d("2024-01-01"), p) == 1.0 and temporal_value(d("2020-06-01"), p) is None


@settings(max_examples=300, deadline=None)
@given(st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)),
       st.integers(1, 10**13), st.integers(0, 10**13))
def test_value_is_in_the_half_open_unit_interval(start: datetime, width_us: int, offset_us: int) -> None:
    p = resolve_period("last week", NOW)
    period = type(p)(start=start, end=start + timedelta(microseconds=width_us), text="x", method="rule",
                     description="x")
    moment = start + timedelta(microseconds=offset_us)
    v = temporal_value(moment, period)
    if offset_us < width_us:
        assert v is not None and 0.5 < v <= 1.0
    else:
        assert v is None


def test_postgres_computes_the_same_value(pg_dsn: str) -> None:
    psycopg = pytest.importorskip("psycopg")
    periods = [extract_period(q, NOW) for q in ("last week", "yesterday", "in 2023", "the past 3 days")]
    periods.append(resolve_period("after 2020", NOW))
    moments = [d("2026-11-23") + timedelta(hours=7 * i, microseconds=13 * i) for i in range(-30, 60)]
    moments += [d("2023-01-01"), d("2023-07-02T12:00"), d("2023-12-31T23:59:59.999999")]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (i int, at timestamptz)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s)", list(enumerate(moments)))
        for p in periods:
            sql, values = postgres_temporal_value("t.at", p).pyformat()
            got = dict(conn.execute(f"SELECT i, {sql} FROM t", values).fetchall())
            assert got == {i: temporal_value(m, p) for i, m in enumerate(moments)}, p.text  # type: ignore[union-attr]
        sql, values = postgres_temporal_value("t.at", None).pyformat()
        assert {v for (v,) in conn.execute(f"SELECT {sql} FROM t", values)} == {None}
