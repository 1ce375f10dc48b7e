"""The task record: what one full-state log line says about a task.

:class:`Task` is immutable. :func:`task_from_record` reads SnerdMQ's camelCase
fields (and keeps fields it does not know in ``extra``); :func:`task_to_record`
writes them back, so a line survives a read/write round trip unchanged.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pyrsistent import pmap

from snerd.errors import EventError
from snerd.projections import events as ev
from snerd.projections.schedule import format_instant, parse_instant

# Phases of a live task inside the projection.
READY: Final = "ready"  # runnable now: in its lane's heap
DELAYED: Final = "delayed"  # waiting for executeAt / retryAfterTime: in the timer heap
BLOCKED: Final = "blocked"  # waiting for DAG parents
ACTIVE: Final = "active"  # claimed by a daemon

_EMPTY: Final[Mapping[str, Any]] = pmap()
_parse_cached = functools.lru_cache(maxsize=4096)(parse_instant)
_format_cached = functools.lru_cache(maxsize=4096)(format_instant)


@dataclass(frozen=True, slots=True)
class Claim:
    """Who runs the current attempt, since when, and until when the lease holds."""

    daemon: str
    attempt: int
    at: float
    lease_until: float | None


@dataclass(frozen=True, slots=True)
class Task:
    """A task's lasting state plus the projection's bookkeeping (order, phase, claim)."""

    id: str
    type: str
    data: str = "null"
    max_retries: int = 3
    retry_after_hours: float = 0.0
    retry_count: int = 0
    urgency: float = 0.0
    execute_at: float | None = None
    retry_after_time: float | None = None
    cron: str | None = None
    webhook_url: str | None = None
    max_execution_seconds: float | None = None
    pool: str | None = None
    rate_group: str | None = None
    max_per_minute: int | None = None
    auto_dedupe: bool = False
    fingerprint: str | None = None
    parents: tuple[str, ...] = ()
    last_error: str | None = None
    created_at: float | None = None
    extra: Mapping[str, Any] = field(default=_EMPTY, compare=False)
    # bookkeeping, not written to full-state lines
    order: int = 0
    phase: str = READY
    attempt: int = 0
    claim: Claim | None = None
    progress: Any = None

    @property
    def not_before(self) -> float | None:
        """The earliest time the task may run, or None for 'now'."""
        times = [t for t in (self.execute_at, self.retry_after_time) if t is not None]
        return max(times) if times else None

    @property
    def lane(self) -> tuple[str, str, str]:
        """The ready heap this task waits in: (type, pool, rate group)."""
        return (self.type, self.pool or "", self.rate_group or "")


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _number(value: Any, name: str, default: float) -> float:
    if value is None:
        return default
    kind = type(value)
    if kind is float or kind is int:
        if value != value or value in (math.inf, -math.inf):
            raise EventError(f"{name} must be finite, got {value!r}")
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise EventError(f"{name} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise EventError(f"{name} must be finite, got {value!r}")
    return number


def _instant(value: Any, name: str) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        return _parse_cached(value)
    raise EventError(f"{name} must be an RFC 3339 time, got {value!r}")


def _execute_at(record: Mapping[str, Any]) -> float | None:
    # We write executeAt = createdAt for tasks with no schedule (SnerdMQ always has
    # one); reading it back as "no schedule" keeps the round trip exact.
    raw = record.get(ev.F_EXECUTE_AT)
    if raw is not None and raw == record.get(ev.F_CREATED_AT):
        return None
    return _instant(raw, ev.F_EXECUTE_AT)


def _retry_after_time(record: Mapping[str, Any]) -> float | None:
    # SnerdMQ requires retryAfterTime and sets it to the creation time; so do we.
    raw = record.get(ev.F_RETRY_AFTER_TIME)
    if raw is not None and raw == record.get(ev.F_CREATED_AT):
        return None
    return _instant(raw, ev.F_RETRY_AFTER_TIME)


def _last_error(record: Mapping[str, Any]) -> str | None:
    value = record.get(ev.F_LAST_ERROR)
    if isinstance(value, dict):
        value = value.get("error")
    if value is None:
        value = record.get(ev.F_LAST_ERROR_TEXT)
    return None if value is None else str(value)


def _parents(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(p, str) for p in value):
        raise EventError(f"{ev.F_TRIGGER_AFTER_IDS} must be a list of task ids")
    return tuple(value)


def _data(value: Any) -> str:
    if isinstance(value, str):
        return value
    import orjson

    return orjson.dumps(value).decode()


_KNOWN_FIELDS: Final = ev.TASK_FIELDS | ev.OUR_FIELDS


def _maybe_number(value: Any, name: str) -> float | None:
    return None if value is None else _number(value, name, 0.0)


def task_from_record(record: Mapping[str, Any], *, order: int = 0) -> Task:
    """Read a full-state line. Raises EventError when a field is unusable."""
    get = record.get
    task_id = get(ev.F_TASK_ID)
    task_type = get(ev.F_TASK_TYPE)
    if not isinstance(task_id, str) or not task_id:
        raise EventError(f"{ev.F_TASK_ID} must be a non-empty string")
    if not isinstance(task_type, str):
        raise EventError(f"{ev.F_TASK_TYPE} must be a string (task {task_id})")
    unknown = record.keys() - _KNOWN_FIELDS
    per_minute = _maybe_number(get(ev.F_MAX_PER_MINUTE), ev.F_MAX_PER_MINUTE)
    return Task(
        id=task_id,
        type=task_type,
        data=_data(get(ev.F_TASK_DATA)),
        max_retries=int(_number(get(ev.F_MAX_RETRIES), ev.F_MAX_RETRIES, 3)),
        retry_after_hours=_number(get(ev.F_RETRY_AFTER_HOURS), ev.F_RETRY_AFTER_HOURS, 0.0),
        retry_count=int(_number(get(ev.F_RETRY_COUNT), ev.F_RETRY_COUNT, 0)),
        urgency=_number(get(ev.F_URGENCY), ev.F_URGENCY, 0.0),
        execute_at=_execute_at(record),
        retry_after_time=_retry_after_time(record),
        cron=_opt_str(get(ev.F_CRON)),
        webhook_url=_opt_str(get(ev.F_WEBHOOK_URL)),
        max_execution_seconds=_maybe_number(
            get(ev.F_MAX_EXECUTION_SECONDS), ev.F_MAX_EXECUTION_SECONDS
        ),
        pool=_opt_str(get(ev.F_POOL)),
        rate_group=_opt_str(get(ev.F_RATE_GROUP)),
        max_per_minute=None if per_minute is None else int(per_minute),
        auto_dedupe=bool(get(ev.F_AUTO_DEDUPE, False)),
        fingerprint=_opt_str(get(ev.F_FINGERPRINT)),
        parents=_parents(get(ev.F_TRIGGER_AFTER_IDS)),
        last_error=_last_error(record),
        created_at=_instant(get(ev.F_CREATED_AT), ev.F_CREATED_AT),
        extra=pmap({k: record[k] for k in unknown}) if unknown else _EMPTY,
        order=order,
    )


def _put(record: dict[str, Any], key: str, value: Any) -> None:
    if value is not None and value != () and value is not False:
        record[key] = list(value) if isinstance(value, tuple) else value


def task_to_record(task: Task, *, deleted_at: float | None = None) -> dict[str, Any]:
    """The task's full-state fields, SnerdMQ's core ones always present."""
    created = task.created_at
    executes = task.execute_at if task.execute_at is not None else created
    retries = task.retry_after_time if task.retry_after_time is not None else created
    record: dict[str, Any] = dict(task.extra)
    record.update(
        {
            ev.F_TASK_ID: task.id,
            ev.F_TASK_TYPE: task.type,
            ev.F_TASK_DATA: task.data,
            ev.F_RETRY_COUNT: task.retry_count,
            ev.F_MAX_RETRIES: task.max_retries,
            ev.F_RETRY_AFTER_HOURS: task.retry_after_hours,
            ev.F_RETRY_AFTER_TIME: _fmt(retries),
            ev.F_EXECUTE_AT: _fmt(executes),
            ev.F_DELETED_AT: _fmt(deleted_at),
            ev.F_URGENCY: task.urgency,
        }
    )
    _put(record, ev.F_RATE_GROUP, task.rate_group)
    _put(record, ev.F_MAX_PER_MINUTE, task.max_per_minute)
    _put(record, ev.F_AUTO_DEDUPE, task.auto_dedupe)
    _put(record, ev.F_FINGERPRINT, task.fingerprint)
    _put(record, ev.F_CRON, task.cron)
    _put(record, ev.F_WEBHOOK_URL, task.webhook_url)
    _put(record, ev.F_MAX_EXECUTION_SECONDS, _whole(task.max_execution_seconds))
    _put(record, ev.F_POOL, task.pool)
    _put(record, ev.F_TRIGGER_AFTER_IDS, task.parents)
    if task.last_error is not None:
        record[ev.F_LAST_ERROR] = {"error": task.last_error, "retry_worthy": True}
        record[ev.F_LAST_ERROR_TEXT] = task.last_error
    _put(record, ev.F_CREATED_AT, _fmt(task.created_at))
    return record


def _whole(number: float | None) -> float | int | None:
    """SnerdMQ reads maxExecutionSeconds as an integer: write whole numbers as such."""
    if number is not None and float(number).is_integer():
        return int(number)
    return number


def _fmt(instant: float | None) -> str | None:
    return None if instant is None else _format_cached(instant)
