"""Time and schedule arithmetic for ``execute_at`` and ``cron`` (pure: no clock reads).

Every instant is a float of epoch seconds in UTC. Callers pass "now" in; nothing here
looks at the wall clock, so projections and tests stay deterministic.

Accepted cron forms (see ``specs/protocol.md`` for the normative text):

* 5 fields ``minute hour day-of-month month day-of-week`` (day-of-week 0 or 7 = Sunday);
* 6 fields with **seconds first** ``second minute hour dom month dow`` (as the SnerdMQ
  SDKs send them), optionally a 7th field, the year (1970-2099);
* interval shorthands ``<n>s``, ``<n>m``, ``<n>h``, ``<n>d`` (n >= 1): every n units,
  counted from the previous fire;
* aliases ``@yearly @annually @monthly @weekly @daily @midnight @hourly``.

croniter is the engine underneath; schedules are evaluated in UTC.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from snerd.errors import EventError

__all__ = [
    "ALIASES",
    "Cron",
    "format_instant",
    "next_fire",
    "parse_cron",
    "parse_instant",
    "reschedule",
    "round_even",
    "snerdmq_cron",
]

ALIASES = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)
"""The ``@`` aliases accepted (croniter's deterministic ones; ``@reboot`` is not)."""

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SHORTHAND = re.compile(r"^([0-9]{1,9})([smhd])$")
_LEAP_SECOND = re.compile(r"^(.*[T ]\d\d:\d\d):60(?=[.,+\-Z]|$)")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MIN_TS = datetime(1, 1, 1, tzinfo=UTC).timestamp()
_MAX_TS = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
_CRON_REFERENCE = 0.0  # validation probe: an expression must fire after 1970-01-01
_MAX_YEARS_BETWEEN = 130  # enough for a 7-field year anywhere in croniter's 1970-2099


# --------------------------------------------------------------------------- instants


def round_even(x: float) -> int:
    """``round(x)`` for a float (halves to even), without ``round``: from compiled code
    that is a generic call, where ``math.floor`` is native. The rest is exact:
    ``x - floor(x)`` is exact for every finite ``x`` (every float of ``|x| >= 2**52`` is
    whole), but for ``-1 < x < 0``, where its rounding cannot move it across the half.
    Infinities and NaN raise as ``round`` does."""
    whole = math.floor(x)
    part = x - whole
    if part > 0.5 or (part == 0.5 and whole & 1):
        whole += 1
    return whole


def parse_instant(text: object) -> float:
    """RFC 3339 / ISO 8601 text -> epoch seconds (UTC).

    Accepts ``Z`` or a numeric offset, ``T``/``t`` or a space as separator, any number
    of fraction digits (kept to microseconds), a leap second ``:60``, and date-only
    values (midnight). A value without an offset is taken as UTC. Raises
    :class:`EventError` naming the value when it is not a timestamp.
    """
    if not isinstance(text, str):
        raise EventError(f"timestamp must be a string, got {_show(text)}")
    if len(text) == 24 and text[23] == "Z":  # (our own form, format_instant's, at once)
        whole = _SECONDS.get(text[:20])
        millis = text[20:23]
        if whole is not None and millis.isascii() and millis.isdigit():
            return (whole * 1000 + int(millis)) / 1000  # as timestamp() divides: exactly
    raw = text.strip().upper()
    extra = 0.0
    leap = _LEAP_SECOND.match(raw) if ":60" in raw else None  # (no regex for the rest)
    if leap:
        raw, extra = leap.group(1) + ":59" + raw[leap.end() :], 1.0
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise EventError(f"not an RFC 3339 timestamp: {_show(text)}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.timestamp() + extra
    except (OverflowError, ValueError):
        raise EventError(f"timestamp out of range: {_show(text)}") from None


def format_instant(ts: object) -> str:
    """Epoch seconds -> RFC 3339 in UTC with milliseconds, e.g. ``2024-01-01T00:00:00.000Z``.

    Exactly ``timedelta(seconds=ts)``'s instant, truncated to the millisecond, but in
    integer arithmetic (every enqueue and outcome formats at least one new instant):
    the whole seconds, plus the fraction rounded half-even to the microsecond, as
    timedelta rounds it."""
    ts = _instant(ts, what="instant")
    whole = int(ts)  # (toward zero, as math.modf; the fraction below is exact)
    micros = round_even((ts - whole) * 1e6)  # within +-1,000,000
    return _format_second(whole + micros // 1_000_000) + _MILLIS[micros % 1_000_000 // 1000]


_MILLIS = tuple(f"{ms:03d}Z" for ms in range(1000))
"""A millisecond's text and the ``Z`` after it, by the millisecond."""


def _format_second(whole: int) -> str:
    """The text of a whole second, up to its dot: formatted once while it is among the
    seconds seen lately, kept both ways (:func:`parse_instant` reads the text back)."""
    text = _TEXTS.get(whole)
    if text is None:
        t = _EPOCH + timedelta(seconds=whole)  # (not strftime: %Y drops a small year's zeros)
        text = f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}."
        if len(_TEXTS) >= _SECONDS_KEPT:
            _TEXTS.clear()
            _SECONDS.clear()
        _TEXTS[whole] = text
        _SECONDS[text] = whole
    return text


_SECONDS_KEPT: Final = 4096
_TEXTS: dict[int, str] = {}
"""The text of each whole second formatted lately (every enqueue and outcome formats
an instant: most fall in a second formatted already)."""
_SECONDS: dict[str, int] = {}
"""The same seconds by their text: :func:`parse_instant` reads our own form at once."""


def _instant(ts: object, *, what: str) -> float:
    """``ts`` if it is epoch seconds a datetime can hold (years 1 to 9999), else
    EventError. (Any object: a compiled build checks no argument type of its own here.
    The tuple, not ``int | float``: no union object built at every call.)"""
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        raise EventError(f"{what} must be epoch seconds, got {_show(ts)}")
    if not math.isfinite(ts) or not _MIN_TS <= ts <= _MAX_TS:
        raise EventError(f"{what} out of range: {ts!r}")
    return ts


# --------------------------------------------------------------------------- cron


@dataclass(frozen=True, slots=True)
class Cron:
    """A validated schedule.

    ``text`` is the expression as given (trimmed), kept for the log and for replies.
    Exactly one of ``expression`` (what croniter evaluates) and ``interval`` (seconds
    between fires, for shorthands like ``10m``) is set. ``seconds_first`` is true when
    ``expression`` has a leading seconds field.
    """

    text: str
    expression: str | None = None
    seconds_first: bool = False
    interval: float | None = None


def parse_cron(expr: object) -> Cron:
    """Validate a cron expression, shorthand or alias; raise :class:`EventError` if bad."""
    if not isinstance(expr, str):
        raise EventError(f"cron expression must be a string, got {_show(expr)}")
    text = expr.strip()
    if not text:
        raise EventError("cron expression is empty")
    short = _SHORTHAND.match(text.lower())
    if short:
        count = int(short.group(1))
        if count < 1:
            raise EventError(f"invalid cron shorthand {text!r}: the interval must be >= 1")
        return Cron(text=text, interval=count * _UNITS[short.group(2)])
    if text.startswith("@"):
        if text.lower() not in ALIASES:
            raise EventError(
                f"invalid cron expression {text!r}: unknown alias"
                f" (accepted: {', '.join(sorted(ALIASES))})"
            )
        return _checked(Cron(text=text, expression=text.lower()))
    fields = text.split()
    if len(fields) not in (5, 6, 7):
        raise EventError(
            f"invalid cron expression {text!r}: expected 5 fields, or 6-7 with seconds"
            f" first, or a shorthand like 30s/10m/2h/1d; got {len(fields)} fields"
        )
    _reject_nondeterministic(text, fields)
    return _checked(Cron(text=text, expression=" ".join(fields), seconds_first=len(fields) > 5))


def _reject_nondeterministic(text: str, fields: list[str]) -> None:
    # croniter's H (hash) and R (random) make the schedule depend on hidden inputs;
    # no month or weekday name starts with H or R, so a leading H/R is always one.
    for part in ",".join(fields).split(","):
        if part[:1] in ("H", "h", "R", "r"):
            raise EventError(
                f"invalid cron expression {text!r}: hashed/random fields ({part!r}) are"
                " not supported"
            )


def _checked(cron: Cron) -> Cron:
    assert cron.expression is not None
    from croniter import croniter  # lazily: a daemon without cron tasks never needs it

    if not croniter.is_valid(cron.expression, second_at_beginning=cron.seconds_first):
        raise EventError(f"invalid cron expression {cron.text!r}: a field is out of range")
    try:
        _cron_next(cron, _CRON_REFERENCE)
    except EventError:
        raise EventError(f"invalid cron expression {cron.text!r}: it never fires") from None
    return cron


def next_fire(cron: Cron, after: float) -> float:
    """The first fire time strictly after ``after`` (epoch seconds, UTC).

    Shorthands give ``after + interval``. Cron expressions have whole-second
    resolution, so a fractional ``after`` behaves like its floor; the result is
    monotone in ``after``. Raises :class:`EventError` when the schedule has no fire
    after ``after`` (e.g. a 7-field expression whose year has passed).
    """
    _instant(after, what="after")
    if cron.interval is not None:
        return float(after) + cron.interval
    return _cron_next(cron, after)


def reschedule(cron: Cron, *, scheduled_at: float, now: float) -> float:
    """The next occurrence once the occurrence planned for ``scheduled_at`` has ended.

    Missed occurrences are skipped, never replayed: the result is the first fire on
    the schedule that is strictly after both ``scheduled_at`` and ``now``. Intervals
    keep their phase: ``scheduled_at + k * interval`` for the smallest k >= 1.
    """
    if cron.interval is None:
        return next_fire(cron, max(scheduled_at, now))
    _instant(now, what="now")
    fire = next_fire(cron, scheduled_at)
    if fire <= now:
        fire = scheduled_at + (math.floor((now - scheduled_at) / cron.interval) + 1) * cron.interval
        if fire <= now:  # float rounding at an exact multiple
            fire += cron.interval
    return fire


def _cron_next(cron: Cron, after: float) -> float:
    from croniter import CroniterError, croniter

    base = datetime.fromtimestamp(math.floor(after), tz=UTC)
    years = _MAX_YEARS_BETWEEN if cron.expression and len(cron.expression.split()) == 7 else None
    try:
        it = croniter(
            cron.expression,
            base,
            second_at_beginning=cron.seconds_first,
            max_years_between_matches=years,
        )
        fire = it.get_next(float)
    except (CroniterError, ValueError, OverflowError) as exc:
        raise EventError(
            f"cron expression {cron.text!r} has no fire time after {after!r}: {exc}"
        ) from None
    return float(fire)


_DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")
_DAY_NUMBER = re.compile(r"\b([0-7])\b")


def snerdmq_cron(text: str) -> str | None:
    """The same schedule as SnerdMQ's reader takes it (six fields, seconds first), when
    ``text`` is a form it cannot read and one exists; else None.

    Five fields get a leading ``0`` (second 0: croniter fires five-field schedules on
    the minute too) and their numeric days of the week become names (SUN..SAT: readers
    number weekdays differently, names mean the same to all). An interval shorthand
    becomes the cron schedule with the same period when the period divides the next
    unit (``30s`` -> ``*/30 * * * * *``, ``10m``, ``2h``, ``1d``); it then fires on the
    clock's multiples of the period rather than counted from the previous fire.
    """
    stripped = text.strip()
    short = _SHORTHAND.match(stripped.lower())
    if short:
        return _interval_cron(int(short.group(1)) * int(_UNITS[short.group(2)]))
    fields = stripped.split()
    if len(fields) != 5 or stripped.startswith("@"):
        return None
    dow = fields[4]
    if "/" not in dow:
        dow = _DAY_NUMBER.sub(lambda m: _DAY_NAMES[int(m.group(1))], dow)
    return " ".join(("0", *fields[:4], dow))


def _interval_cron(seconds: int) -> str | None:
    if 0 < seconds < 60 and 60 % seconds == 0:
        return f"*/{seconds} * * * * *"
    minutes, hours = seconds // 60, seconds // 3600
    if seconds % 60 == 0 and 0 < minutes < 60 and 60 % minutes == 0:
        return f"0 */{minutes} * * * *"
    if seconds % 3600 == 0 and 0 < hours < 24 and 24 % hours == 0:
        return f"0 0 */{hours} * * *"
    if seconds == 86400:
        return "0 0 0 * * *"
    return None


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
