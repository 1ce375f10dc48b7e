"""projections/schedule.py: instants and cron, all with fixed instants (no clock)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_budget import examples

from snerd.errors import EventError
from snerd.projections import schedule
from snerd.projections.schedule import (
    Cron,
    format_instant,
    next_fire,
    parse_cron,
    parse_instant,
    reschedule,
    round_even,
)


def at(text: str) -> float:
    """Fixed instant for tests, via the stdlib (independent of parse_instant)."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


MONDAY = at("2024-01-01T00:00:00")  # 2024-01-01 was a Monday


# ------------------------------------------------------------------ parse_instant


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-01-01T00:00:00Z", MONDAY),
        ("2024-01-01T00:00:00z", MONDAY),
        ("2024-01-01t00:00:00Z", MONDAY),
        ("2024-01-01T00:00:00+00:00", MONDAY),
        ("2024-01-01T02:00:00+02:00", MONDAY),
        ("2023-12-31T19:00:00-05:00", MONDAY),
        ("2024-01-01T00:00:00", MONDAY),  # naive means UTC
        ("2024-01-01 00:00:00", MONDAY),
        ("2024-01-01", MONDAY),
        ("  2024-01-01T00:00:00Z\n", MONDAY),
        ("2024-01-01T00:00:00.250Z", MONDAY + 0.25),
        ("2024-01-01T00:00:00.123456789Z", MONDAY + 0.123456),  # Go/Rust nanoseconds
        ("2016-12-31T23:59:60Z", at("2017-01-01T00:00:00")),  # leap second
    ],
)
def test_parse_instant_accepts_rfc3339_forms(text: str, expected: float) -> None:
    assert parse_instant(text) == pytest.approx(expected, abs=1e-6)


def test_parse_instant_accepts_python_isoformat_of_aware_and_naive_datetimes() -> None:
    aware = datetime(2024, 1, 1, 12, 30, tzinfo=UTC)
    assert parse_instant(aware.isoformat()) == aware.timestamp()
    assert parse_instant(aware.replace(tzinfo=None).isoformat()) == aware.timestamp()


@pytest.mark.parametrize(
    "text", ["", "tomorrow", "2024-13-01T00:00:00Z", "2024-01-01T25:00:00Z", "1704067200"]
)
def test_parse_instant_rejects_and_names_the_value(text: str) -> None:
    with pytest.raises(EventError) as info:
        parse_instant(text)
    assert repr(text) in str(info.value)


def test_parse_instant_rejects_non_strings() -> None:
    with pytest.raises(EventError, match="must be a string"):
        parse_instant(1704067200)  # type: ignore[arg-type]


def test_format_instant_is_utc_z_with_milliseconds() -> None:
    assert format_instant(MONDAY) == "2024-01-01T00:00:00.000Z"
    assert format_instant(MONDAY + 1.2349) == "2024-01-01T00:00:01.234Z"
    assert format_instant(0) == "1970-01-01T00:00:00.000Z"


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e20, True])
def test_format_instant_rejects_non_instants(bad: float) -> None:
    with pytest.raises(EventError):
        format_instant(bad)


FIRST_MS = -62_135_596_800_000  # 0001-01-01T00:00:00Z
LAST_MS = 253_402_300_799_000  # 9999-12-31T23:59:59Z


@given(st.integers(min_value=0, max_value=4_102_444_800_000))
def test_format_then_parse_round_trips_at_millisecond_precision(millis: int) -> None:
    ts = millis / 1000
    assert parse_instant(format_instant(ts)) == pytest.approx(ts, abs=5e-4)


@given(st.integers(min_value=FIRST_MS, max_value=LAST_MS))
def test_every_year_a_line_may_hold_round_trips(millis: int) -> None:
    """Years 1 to 9999 (below 1000 too); far from 1970 a float holds the milliseconds
    only to within one (the text truncates to the millisecond)."""
    ts = millis / 1000
    assert parse_instant(format_instant(ts)) == pytest.approx(ts, abs=2e-3)


def _stdlib_instant(ts: float) -> str:
    """format_instant's reference: the stdlib's datetime of the instant (timedelta
    rounds a float's seconds half-even to the microsecond), truncated to the
    millisecond."""
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=ts)
    return f"{moment.year:04d}-{moment:%m-%dT%H:%M:%S}.{moment.microsecond // 1000:03d}Z"


INSTANTS = st.floats(min_value=FIRST_MS / 1000, max_value=LAST_MS / 1000)


@settings(max_examples=examples(2000))
@given(st.one_of(
    INSTANTS,
    st.floats(min_value=1.6e9, max_value=2.2e9),  # this century, where a clock reads
    st.integers(min_value=0, max_value=4_102_444_800_000).map(lambda ms: ms / 1000),
    st.integers(min_value=-10**9, max_value=10**9).map(lambda us: 1.7e9 + us / 1e6),
    st.integers(min_value=FIRST_MS // 1000, max_value=LAST_MS // 1000),
))  # fmt: skip
def test_format_instant_is_the_stdlibs_instant(ts: float) -> None:
    """The integer arithmetic gives the datetime's text for any instant a line may
    hold: floats near a millisecond or a microsecond's half, far from 1970, ints."""
    assert format_instant(ts) == _stdlib_instant(ts)


@pytest.mark.parametrize("ts", [
    -0.0005, -1e-7, -0.9999996, 0.0009995, 0.9999995, 1.0000005, 1704067199.9999996,
    -62135596800.0, 253402300799.0, 253402300798.9995,
])  # fmt: skip
def test_format_instant_at_rounding_edges(ts: float) -> None:
    assert format_instant(ts) == _stdlib_instant(ts)


def _stdlib_reading(text: str) -> float | type[EventError]:
    """parse_instant's reference for its own form: the stdlib's aware datetime's
    timestamp, or EventError where the stdlib refuses the text."""
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return EventError


@settings(max_examples=examples(1000))
@given(st.one_of(INSTANTS, st.floats(min_value=1.6e9, max_value=2.2e9),
                 st.integers(min_value=FIRST_MS, max_value=LAST_MS).map(lambda ms: ms / 1000)),
       st.one_of(st.text(min_size=3, max_size=3),  # digits int() reads but RFC 3339 not:
                 st.text("0123456789 _+-\t\u0663\uff13", min_size=3, max_size=3)),
       st.booleans())  # fmt: skip
def test_our_own_form_reads_back_as_the_stdlib_reads_it(ts: float, millis: str,
                                                         mangled: bool) -> None:  # fmt: skip
    """The text format_instant writes is read at once (its second looked up, not
    parsed): the same instant as the stdlib's reading, to the bit; a text of that
    second with anything else where its milliseconds go, as the stdlib reads it too."""
    text = format_instant(ts)
    assert schedule._SECONDS.get(text[:20]) is not None  # (so the quick reading is tried)
    if mangled:
        text = text[:20] + millis + "Z"
    expected = _stdlib_reading(text)
    if expected is EventError:
        with pytest.raises(EventError):
            parse_instant(text)
    else:
        assert parse_instant(text) == expected


def test_the_seconds_kept_are_bounded_and_read_back_both_ways() -> None:
    """Past the seconds it keeps, the formatter forgets them all, both ways: a second
    it formatted before that is formatted again, and read back at once after."""
    start, kept = 1_700_000_000, schedule._SECONDS_KEPT
    seconds = range(start, start + kept + kept // 2)
    for whole in [*seconds, *seconds[kept - 100 : kept]]:  # (the last of them: again)
        text = format_instant(float(whole))
        assert schedule._SECONDS.get(text[:20]) == whole
        assert len(schedule._TEXTS) <= kept and len(schedule._SECONDS) <= kept


_HALVES = st.integers(min_value=-(2**54), max_value=2**54).map(lambda n: n / 2)


@given(st.one_of(st.floats(allow_nan=False, allow_infinity=False), _HALVES,
                 _HALVES.map(lambda x: math.nextafter(x, math.inf)),
                 _HALVES.map(lambda x: math.nextafter(x, -math.inf)),
                 st.floats(min_value=-1.0, max_value=1.0)))  # fmt: skip
def test_round_even_is_round(x: float) -> None:
    assert round_even(x) == round(x) and type(round_even(x)) is int


@pytest.mark.parametrize("x", [math.inf, -math.inf, math.nan])
def test_round_even_of_no_number_raises_as_round_does(x: float) -> None:
    with pytest.raises(Exception) as expected:
        round(x)
    with pytest.raises(expected.type):
        round_even(x)


def test_a_small_year_keeps_its_four_digits() -> None:
    """RFC 3339 years have four digits; strftime's %Y writes year 1 as "1"."""
    assert format_instant(FIRST_MS / 1000) == "0001-01-01T00:00:00.000Z"
    assert format_instant(-59_011_459_200) == "0100-01-01T00:00:00.000Z"


# ------------------------------------------------------------------ parse_cron / next_fire


def fire(expr: str, after: float = MONDAY) -> float:
    return next_fire(parse_cron(expr), after)


def test_standard_five_fields() -> None:
    assert fire("*/5 * * * *") == at("2024-01-01T00:05:00")
    assert fire("30 9 * * *") == at("2024-01-01T09:30:00")
    assert fire("0 0 1 * *") == at("2024-02-01T00:00:00")
    assert not parse_cron("*/5 * * * *").seconds_first


def test_sunday_is_zero_and_seven_and_sun() -> None:
    sunday = at("2024-01-07T00:00:00")
    assert fire("0 0 * * 0") == sunday
    assert fire("0 0 * * 7") == sunday
    assert fire("0 0 * * SUN") == sunday
    assert fire("0 0 * * 1") == at("2024-01-08T00:00:00")  # strictly after Monday 00:00


def test_six_fields_are_seconds_first() -> None:
    cron = parse_cron("30 */5 * * * *")
    assert cron.seconds_first
    assert next_fire(cron, MONDAY) == MONDAY + 30
    assert next_fire(cron, MONDAY + 30) == MONDAY + 330
    assert fire("*/10 * * * * *") == MONDAY + 10
    assert fire("0 0 12 * * MON") == at("2024-01-01T12:00:00")


def test_seven_fields_end_with_a_year() -> None:
    assert fire("0 0 0 1 1 * 2030") == at("2030-01-01T00:00:00")
    with pytest.raises(EventError, match="no fire time"):
        fire("0 0 0 1 1 * 2020")


@pytest.mark.parametrize(
    ("expr", "seconds"), [("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86400), ("10M", 600)]
)
def test_shorthands_are_intervals_from_the_previous_fire(expr: str, seconds: float) -> None:
    cron = parse_cron(expr)
    assert cron.interval == seconds and cron.expression is None
    assert next_fire(cron, MONDAY + 0.5) == MONDAY + 0.5 + seconds


@pytest.mark.parametrize(
    ("alias", "expected"),
    [
        ("@hourly", "2024-01-01T01:00:00"),
        ("@daily", "2024-01-02T00:00:00"),
        ("@midnight", "2024-01-02T00:00:00"),
        ("@weekly", "2024-01-07T00:00:00"),
        ("@monthly", "2024-02-01T00:00:00"),
        ("@yearly", "2025-01-01T00:00:00"),
        ("@ANNUALLY", "2025-01-01T00:00:00"),
    ],
)
def test_aliases(alias: str, expected: str) -> None:
    assert fire(alias) == at(expected)


def test_text_is_kept_trimmed() -> None:
    assert parse_cron("  */5  * * * * ").text == "*/5  * * * *"
    assert parse_cron("  */5  * * * * ").expression == "*/5 * * * *"


def test_next_fire_is_strictly_after_an_exact_fire_time() -> None:
    assert fire("*/5 * * * *", MONDAY + 300) == MONDAY + 600
    assert fire("*/5 * * * *", MONDAY + 299.999) == MONDAY + 300


@pytest.mark.parametrize(
    ("expr", "hint"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("* * * *", "got 4 fields"),
        ("* * * * * * * *", "got 8 fields"),
        ("61 * * * *", "out of range"),
        ("* * * * 8", "out of range"),
        ("60 * * * * *", "out of range"),
        ("*/0 * * * *", "out of range"),
        ("a b c d e", "out of range"),
        ("0 0 31 2 *", "never fires"),
        ("H * * * *", "hashed/random"),
        ("R 0 * * *", "hashed/random"),
        ("@reboot", "unknown alias"),
        ("@every 5m", "unknown alias"),
        ("0s", ">= 1"),
        ("5w", "got 1 fields"),
        ("1.5h", "got 1 fields"),
        ("-5m", "got 1 fields"),
    ],
)
def test_invalid_expressions_name_the_expression(expr: str, hint: str) -> None:
    with pytest.raises(EventError) as info:
        parse_cron(expr)
    message = str(info.value)
    assert hint in message
    if expr.strip():
        assert repr(expr.strip()) in message


def test_parse_cron_rejects_non_strings() -> None:
    with pytest.raises(EventError, match="must be a string"):
        parse_cron(5)  # type: ignore[arg-type]


def test_next_fire_rejects_out_of_range_after() -> None:
    with pytest.raises(EventError):
        next_fire(parse_cron("10m"), float("nan"))


# ------------------------------------------------------------------ reschedule


def test_reschedule_cron_skips_missed_occurrences() -> None:
    cron = parse_cron("*/5 * * * *")
    assert reschedule(cron, scheduled_at=MONDAY, now=MONDAY + 10) == MONDAY + 300
    assert reschedule(cron, scheduled_at=MONDAY, now=MONDAY + 3600 + 1) == MONDAY + 3900


def test_reschedule_interval_keeps_its_phase() -> None:
    cron = parse_cron("30s")
    assert reschedule(cron, scheduled_at=MONDAY, now=MONDAY + 10) == MONDAY + 30
    assert reschedule(cron, scheduled_at=MONDAY, now=MONDAY + 30) == MONDAY + 60
    assert reschedule(cron, scheduled_at=MONDAY, now=MONDAY + 95) == MONDAY + 120


# ------------------------------------------------------------------ properties

EXPRESSIONS = [
    "*/5 * * * *",
    "0 0 * * 0",
    "15 3 1,15 * *",
    "0 12 * * MON-FRI",
    "*/7 * * * * *",
    "0 30 8 * * 1-5",
    "0 0 29 2 *",
    "@hourly",
    "@monthly",
    "45s",
    "3h",
]
INSTANTS = st.floats(min_value=at("1971-01-01T00:00:00"), max_value=at("2090-01-01T00:00:00"))


@settings(max_examples=examples(300), deadline=None)
@given(st.sampled_from(EXPRESSIONS), INSTANTS, INSTANTS)
def test_next_fire_is_after_and_monotone(expr: str, a: float, b: float) -> None:
    cron = parse_cron(expr)
    lo, hi = sorted((a, b))
    fire_lo, fire_hi = next_fire(cron, lo), next_fire(cron, hi)
    assert fire_lo > lo and fire_hi > hi
    assert fire_lo <= fire_hi


@settings(max_examples=examples(200), deadline=None)
@given(st.sampled_from(EXPRESSIONS), INSTANTS)
def test_no_fire_is_skipped(expr: str, after: float) -> None:
    """Nothing fires between ``after`` and ``next_fire(after)``: it is the *first* fire."""
    cron = parse_cron(expr)
    first = next_fire(cron, after)
    if cron.interval is None:
        assert next_fire(cron, first - 1) == first


@settings(max_examples=examples(200), deadline=None)
@given(st.sampled_from(EXPRESSIONS), INSTANTS, st.floats(min_value=0, max_value=10 * 86400))
def test_reschedule_is_in_the_future(expr: str, scheduled: float, late: float) -> None:
    cron = parse_cron(expr)
    now = scheduled + late
    nxt = reschedule(cron, scheduled_at=scheduled, now=now)
    assert nxt > now and nxt > scheduled


def test_cron_is_frozen_and_hashable() -> None:
    cron = parse_cron("10m")
    assert isinstance(cron, Cron)
    assert hash(cron) == hash(parse_cron("10m"))
    with pytest.raises(AttributeError):
        cron.text = "x"  # type: ignore[misc]
