"""Command options: checking what a caller asks for, field by field (pure).

:func:`enqueue_command` turns keyword options (the wire's names: ``max_retries``,
``retry_after_hours``, ``execute_at``, ...) into an
:class:`~snerd.projections.commands.Enqueue`, or raises :class:`OptionError` naming the
field at fault. The stdio protocol (``rpc/protocol.py``) reads its ``enqueue`` lines
with the same :class:`Fields`, so the embedded API, the dashboard, the CLI and the SDKs
meet exactly one set of rules.

Every number that becomes a time or a count is bounded here, at the edge, so that no
enqueue that is accepted can fail later (when a retry time, a lease or a timeout is
computed and written) or read back differently (readers take numbers beyond 2**53 as
malformed). The table is in ``specs/protocol.md`` §3.1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final, NoReturn
from urllib.parse import urlsplit

import orjson
from mypy_extensions import mypyc_attr

from snerd.errors import EventError
from snerd.projections import backoff
from snerd.projections.commands import DEFAULT_MAX_RETRIES, Enqueue
from snerd.projections.schedule import parse_cron, parse_instant

MAX_DEPTH: Final = 64
"""Deepest accepted nesting of arrays and objects in a message or an option set (the
message object itself is level 1): deeper input could not be written back as JSON."""

INVALID_FIELD: Final = "invalid_field"
MISSING_FIELD: Final = "missing_field"

MAX_COUNT: Final = 2**31 - 1
"""Largest ``max_retries``, ``max_per_minute`` and result ``attempt`` (a 32-bit int)."""
MAX_SPAN_SECONDS: Final = 10 * 365 * 86_400
"""Longest duration (10 years): a retry backoff, a timeout, a cron shorthand interval."""
MAX_RETRY_AFTER_HOURS: Final = MAX_SPAN_SECONDS / 3600  # 87,600 hours
MAX_EXECUTION_SECONDS: Final = float(MAX_SPAN_SECONDS)
MAX_URGENCY: Final = float(2**53 - 1)
"""Largest ``urgency_score`` magnitude: every JSON reader holds it exactly."""
MIN_EXECUTE_AT: Final = -62_135_596_800.0  # 0001-01-01T00:00:00Z
MAX_EXECUTE_AT: Final = 250_246_627_200.0  # 9900-01-01T00:00:00Z
"""``execute_at`` must be before this, so that a retry or the lease of an attempt that
starts then still fits the log's instants (which end with year 9999)."""


class OptionError(EventError):
    """An option is missing or unusable: ``field`` names it, ``code`` says which."""

    def __init__(self, field: str, message: str, code: str = INVALID_FIELD) -> None:
        super().__init__(message)
        self.field = field
        self.message = message
        self.code = code


@mypyc_attr(allow_interpreted_subclasses=True)  # the wire's reader extends it
class Fields:
    """Typed access to a dict of options; every failure names the field."""

    __slots__ = ("msg",)

    def __init__(self, msg: dict[str, Any]) -> None:
        self.msg = msg

    def fail(self, name: str, message: str, code: str = INVALID_FIELD) -> NoReturn:
        raise OptionError(name, message, code)

    def get(self, name: str) -> Any:
        return self.msg.get(name)

    def text(self, name: str) -> str:
        value = self.msg.get(name)
        if value is None:
            self.fail(name, f"{name} is required", code=MISSING_FIELD)
        if not isinstance(value, str) or not value:
            self.fail(name, f"{name} must be a non-empty string, got {show(value)}")
        return value

    def opt_text(self, name: str) -> str | None:
        value = self.msg.get(name)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            self.fail(name, f"{name} must be a string, got {show(value)}")
        return value

    def integer(self, name: str, *, default: int, minimum: int, maximum: int = MAX_COUNT) -> int:
        value = self.msg.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.fail(name, f"{name} must be an integer >= {minimum}, got {show(value)}")
        if value > maximum:
            self.fail(name, f"{name} must be at most {maximum}, got {show(value)}")
        return value

    def number(
        self, name: str, *, default: float, minimum: float | None, maximum: float,
        exclusive: bool = False,
    ) -> float:  # fmt: skip
        """A finite number in range; ``minimum`` None means ``-maximum``."""
        value = self.msg.get(name)
        if value is None:
            return default
        ok = not isinstance(value, bool) and isinstance(value, int | float)
        if ok and minimum is not None:
            ok = value > minimum if exclusive else value >= minimum
        if not ok or not math.isfinite(value):
            bound = "" if minimum is None else f" {'>' if exclusive else '>='} {minimum:g}"
            self.fail(name, f"{name} must be a finite number{bound}, got {show(value)}")
        if abs(value) > maximum if minimum is None else value > maximum:
            what = f"between {_num(-maximum)} and {_num(maximum)}" if minimum is None else (
                f"at most {_num(maximum)}")  # fmt: skip
            self.fail(name, f"{name} must be {what}, got {show(value)}")
        return float(value)

    def boolean(self, name: str, *, default: bool) -> bool:
        value = self.msg.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(name, f"{name} must be true or false, got {show(value)}")
        return value


_RARE_OPTIONS: Final = frozenset({
    "retry_backoff", "retry_max_delay", "auto_dedupe", "urgency_score", "rate_limit_group",
    "max_per_minute", "execute_at", "cron", "webhook_url", "max_execution_seconds", "pool",
    "trigger_after_ids",
})  # fmt: skip
"""The options beyond a task's id, type, data, retry count and retry delay (what the
official SDK sends with every enqueue): most enqueues carry none of them."""


def enqueue_options(r: Fields, kind: Callable[..., Enqueue] = Enqueue) -> Enqueue:
    """The enqueue the options in ``r`` ask for (``r.fail`` on the first bad one), made
    by ``kind`` (the wire's subclass, say, with what it adds bound)."""
    common = common_options(r)
    if common is None:
        return all_enqueue_options(r, kind)
    task_id, task_type, data, retries, hours = common
    return kind(task_id, task_type, task_data=data, max_retries=retries, retry_after_hours=hours)


def common_options(r: Fields) -> tuple[str, str, str, int, float] | None:
    """An enqueue's id, type, data, retry count and retry delay, as :func:`enqueue_options`
    reads them (``r.fail`` on the first bad one), when ``r`` has none of the rare options
    (the rest default); else None, for :func:`all_enqueue_options`. (The wire's parser
    builds its own class with them: a direct call where the class is compiled.)"""
    if not _RARE_OPTIONS.isdisjoint(r.msg):
        return None
    # None of the rare options: the same checks in the same order, the rest defaults.
    task_id = r.text("task_id")
    task_type, data, retries, hours = _common(r)
    return task_id, task_type, data, retries, hours


def _common(r: Fields) -> tuple[str, str, int, float]:
    """The options every enqueue reads after its id, in this order: type, data, retry
    count, retry delay."""
    return (
        r.text("task_type"),
        _task_data(r),
        r.integer("max_retries", default=DEFAULT_MAX_RETRIES, minimum=0),
        r.number("retry_after_hours", default=0.0, minimum=0.0, maximum=MAX_RETRY_AFTER_HOURS),
    )


def all_enqueue_options(r: Fields, kind: Callable[..., Enqueue] = Enqueue) -> Enqueue:
    """:func:`enqueue_options`, every option read (what it answers for any input)."""
    task_id = r.text("task_id")
    group, per_minute = _rate_limit(r)
    cron = r.opt_text("cron")
    if cron is not None:
        cron = _cron(r, cron)
    task_type, data, retries, hours = _common(r)
    return kind(
        task_id,
        task_type,
        task_data=data,
        max_retries=retries,
        retry_after_hours=hours,
        **_retry_policy(r),
        auto_dedupe=r.boolean("auto_dedupe", default=False),
        urgency_score=r.number("urgency_score", default=0.0, minimum=None, maximum=MAX_URGENCY),
        rate_limit_group=group,
        max_per_minute=per_minute,
        execute_at=_execute_at(r),
        cron=cron,
        webhook_url=_webhook_url(r),
        max_execution_seconds=_max_execution_seconds(r),
        pool=r.opt_text("pool"),
        trigger_after_ids=_parents(r, task_id),
    )


def _retry_policy(r: Fields) -> dict[str, Any]:
    """``retry_backoff`` and ``retry_max_delay`` (``projections/backoff.py``): an
    exponential policy is stored with its cap, so the log states the whole policy."""
    policy = r.opt_text("retry_backoff")
    if policy is None or policy == backoff.FIXED:
        if r.get("retry_max_delay") is not None:
            r.fail("retry_max_delay", 'retry_max_delay needs retry_backoff "exponential"')
        return {}
    if policy != backoff.EXPONENTIAL:
        why = f'retry_backoff must be "fixed" or "exponential", got {show(policy)}'
        r.fail("retry_backoff", why)
    hours = r.number("retry_after_hours", default=0.0, minimum=0.0,
                     maximum=MAX_RETRY_AFTER_HOURS)  # fmt: skip
    base = backoff.base_seconds(hours, policy)
    cap = r.number("retry_max_delay", default=backoff.default_cap(base), minimum=0.0,
                   maximum=float(MAX_SPAN_SECONDS), exclusive=True)  # fmt: skip
    if cap < base:
        r.fail("retry_max_delay", f"retry_max_delay must be at least the base delay ({_num(base)}"
               f" s, from retry_after_hours), got {show(r.get('retry_max_delay'))}")  # fmt: skip
    return {"retry_backoff": policy, "retry_max_delay": cap}


def _task_data(r: Fields) -> str:
    value = r.get("task_data")
    if isinstance(value, str):
        return value
    try:
        text = orjson.dumps(value)
    except TypeError as exc:  # (orjson's JSONEncodeError): e.g. an integer past 64 bits
        _shallow_enough(r, value)  # (or nested past orjson's own limit, or a cycle)
        r.fail("task_data", f"task_data cannot be encoded as JSON: {exc}")
    if opened(text) >= MAX_DEPTH:  # else it cannot nest that deep: no walk
        _shallow_enough(r, value)
    return text.decode()


def opened(text: bytes) -> int:
    """How many arrays and objects JSON ``text`` opens at most (its ``[`` and ``{``, some
    perhaps inside strings): a bound on how deeply they nest, counted in C, so that
    :func:`depth` walks only text that could reach the limit."""
    return text.count(b"[") + text.count(b"{")


def _shallow_enough(r: Fields, value: Any) -> None:
    if depth(value, MAX_DEPTH) >= MAX_DEPTH:
        r.fail("task_data", f"task_data nests deeper than {MAX_DEPTH - 1} levels")


def _rate_limit(r: Fields) -> tuple[str | None, int | None]:
    group = r.opt_text("rate_limit_group")
    if group is None:
        if not _is_zero(r.get("max_per_minute")):
            r.fail("max_per_minute", "max_per_minute needs a rate_limit_group")
        return None, None
    if r.get("max_per_minute") is None:
        r.fail("max_per_minute", "max_per_minute is required with rate_limit_group", MISSING_FIELD)
    return group, r.integer("max_per_minute", default=0, minimum=1)


def _cron(r: Fields, text: str) -> str:
    try:
        cron = parse_cron(text)
    except EventError as exc:
        r.fail("cron", str(exc))
    if cron.interval is not None and cron.interval > MAX_SPAN_SECONDS:
        r.fail("cron", f"cron interval {show(text)} is longer than {MAX_SPAN_SECONDS} seconds"
                       " (10 years)")  # fmt: skip
    return cron.text


def _execute_at(r: Fields) -> float | None:
    value = r.get("execute_at")
    if value is None or value == "":
        return None
    instant: float | None = None
    try:
        if isinstance(value, str):
            instant = parse_instant(value)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            instant = float(value)
    except EventError as exc:
        r.fail("execute_at", f"execute_at must be an RFC 3339 timestamp or epoch seconds: {exc}")
    if instant is None:
        why = f"execute_at must be an RFC 3339 string or a number, got {show(value)}"
        r.fail("execute_at", why)
    if not (math.isfinite(instant) and MIN_EXECUTE_AT <= instant < MAX_EXECUTE_AT):
        r.fail("execute_at", "execute_at is out of range: from 0001-01-01T00:00:00Z (epoch"
               f" {_num(MIN_EXECUTE_AT)}) to before 9900-01-01T00:00:00Z (epoch"
               f" {_num(MAX_EXECUTE_AT)}), got {show(value)}")  # fmt: skip
    return instant


def _webhook_url(r: Fields) -> str | None:
    url = r.opt_text("webhook_url")
    if url is None:
        return None
    try:
        parts = urlsplit(url)
        valid = parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
        _ = parts.port  # raises ValueError on a bad port
    except ValueError:
        valid = False
    if not valid or any(ch.isspace() for ch in url):
        r.fail("webhook_url", f"webhook_url must be an http:// or https:// URL, got {show(url)}")
    return url


def _max_execution_seconds(r: Fields) -> float | None:
    if _is_zero(r.get("max_execution_seconds")):
        return None
    return r.number(
        "max_execution_seconds", default=0.0, minimum=0.0, maximum=MAX_EXECUTION_SECONDS,
        exclusive=True,
    ) or None  # fmt: skip


def _parents(r: Fields, task_id: str) -> tuple[str, ...]:
    value = r.get("trigger_after_ids")
    if value is None:
        return ()
    name = "trigger_after_ids"
    if not isinstance(value, list):
        r.fail(name, f"{name} must be a list of task ids, got {show(value)}")
    for item in value:
        if not isinstance(item, str) or not item:
            r.fail(name, f"{name} items must be non-empty strings, got {show(item)}")
        if item == task_id:
            r.fail(name, f"{name} cannot contain the task's own id {show(task_id)}")
    return tuple(dict.fromkeys(value))


def _is_zero(value: Any) -> bool:
    """Absent, null or a numeric zero (the "unset" value of SDKs with zero values)."""
    if value is None:
        return True
    return not isinstance(value, bool) and isinstance(value, int | float) and value == 0


def depth(value: Any, limit: int) -> int:
    """How deeply arrays and objects nest in ``value`` (a scalar is 0), counted up to
    ``limit + 1`` at most. Iterative: no input can exhaust the interpreter's stack."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        level += 1
        if level > limit:
            return level
        deepest = max(deepest, level)
        stack.extend((child, level) for child in item)
    return deepest


def _num(value: float) -> str:
    """A bound for a message: whole numbers without a fraction or an exponent."""
    return str(int(value)) if float(value).is_integer() else repr(value)


def show(value: Any) -> str:
    """A value as JSON text, for error messages (shortened)."""
    try:
        text = orjson.dumps(value).decode()
    except (TypeError, RecursionError):
        text = f"a value of type {type(value).__name__}"
    return text if len(text) <= 60 else text[:57] + "..."


def enqueue_command(task_id: Any, task_type: Any, task_data: Any = None,
                    **options: Any) -> Enqueue:  # fmt: skip
    """The enqueue these options ask for (the wire's names and rules), or
    :class:`OptionError` naming the first bad field."""
    return enqueue_options(
        Fields({"task_id": task_id, "task_type": task_type, "task_data": task_data, **options})
    )
