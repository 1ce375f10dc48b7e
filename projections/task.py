"""The task record: what one full-state log line says about a task.

:class:`Task` is immutable. :func:`task_from_record` reads SnerdMQ's camelCase
fields (and keeps fields it does not know in ``extra``); :func:`task_to_record`
writes them back, so a line survives a read/write round trip unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final, NamedTuple, TypeVar

from pyrsistent import pmap

from snerd.errors import EventError
from snerd.projections import fields as ev
from snerd.projections.schedule import format_instant, parse_instant, snerdmq_cron
from snerd.projections.slots import field_repr, field_values, freeze, replaced

# Phases of a live task inside the projection.
READY: Final = "ready"  # runnable now: in its lane's heap
DELAYED: Final = "delayed"  # waiting for executeAt / retryAfterTime: in the timer heap
BLOCKED: Final = "blocked"  # waiting for DAG parents
ACTIVE: Final = "active"  # claimed by a daemon

Lane = tuple[str, str, str, int]
_EMPTY: Final[Mapping[str, Any]] = pmap()
_MAX_EXACT: Final = float(2**53)
_LAST_INSTANT: Final = 253_402_300_799.999  # 9999-12-31T23:59:59.999Z
_PARSED: Final[dict[str, float]] = {}
_FORMATTED: Final[dict[float, str]] = {}
_INSTANTS_KEPT: Final = 4096
T = TypeVar("T")


def _parse_cached(text: str) -> float:
    """:func:`parse_instant`, remembered for the texts read lately: a task's instants
    are most often one, read once for each field that holds it (and its record is read
    back right after it is written). A plain dict where compiled code looks it up
    natively, not an ``lru_cache`` (a generic call and its list kept in order, ~2,000
    instructions a lookup); emptied once it holds :data:`_INSTANTS_KEPT` texts."""
    instant = _PARSED.get(text)
    if instant is None:  # (parse_instant raises before anything is kept)
        return _kept(_PARSED, text, parse_instant(text))
    return instant


def _format_cached(instant: float) -> str:
    """:func:`format_instant`, remembered as :func:`_parse_cached` remembers (equal
    numbers share their text: ``1`` and ``1.0``, ``0.0`` and ``-0.0``, as an
    ``lru_cache`` would share them, and as :func:`format_instant` writes them)."""
    text = _FORMATTED.get(instant)
    if text is None:
        return _kept(_FORMATTED, instant, format_instant(instant))
    return text


def _kept(memo: dict[Any, Any], key: Any, value: T) -> T:
    """``value``, kept under ``key`` in ``memo``, which is emptied first once it holds
    :data:`_INSTANTS_KEPT` entries."""
    if len(memo) >= _INSTANTS_KEPT:
        memo.clear()
    memo[key] = value
    return value


class Claim(NamedTuple):
    """Who runs the current attempt, since when, and until when the lease holds.
    (A NamedTuple: every claim a replay folds builds one.)"""

    daemon: str
    attempt: int
    at: float
    lease_until: float | None


FIELDS: Final[tuple[str, ...]] = (
    "id",
    "type",
    "data",
    "max_retries",
    "retry_after_hours",
    "retry_count",
    "urgency",
    "execute_at",
    "retry_after_time",
    "cron",
    "webhook_url",
    "max_execution_seconds",
    "pool",
    "rate_group",
    "max_per_minute",
    "auto_dedupe",
    "fingerprint",
    "parents",
    "last_error",
    "created_at",
    "retry_backoff",
    "retry_max_delay",
    "extra",
    "order",
    "phase",
    "attempt",
    "claim",
    "progress",
)
"""A task's fields, in its constructor's order (its slots)."""

_COMPARED: Final = tuple(name for name in FIELDS if name != "extra")
"""The fields a task's equality and hash look at (not the fields we do not know)."""


class Task:
    """A task's lasting state plus the projection's bookkeeping (order, phase, claim).

    Immutable: every field is ``Final`` (mypy refuses an assignment; in a wheel's
    compiled build, where this is a native class, so does the runtime, and
    :func:`~snerd.projections.slots.freeze` makes the interpreted class refuse it too).
    Equal when every field but ``extra`` is. A plain class rather than a frozen
    dataclass: compiled, its fields are read and its instances built without the
    generic attribute machinery (a frozen dataclass is built through the
    ``dataclasses`` module's interpreted ``__init__``; ``benchmarks/README.md``,
    twentieth session)."""

    __slots__ = FIELDS

    def __init__(
        self,
        id: str,
        type: str,
        data: str = "null",
        max_retries: int = 3,
        retry_after_hours: float = 0.0,
        retry_count: int = 0,
        urgency: float = 0.0,
        execute_at: float | None = None,
        retry_after_time: float | None = None,
        cron: str | None = None,
        webhook_url: str | None = None,
        max_execution_seconds: float | None = None,
        pool: str | None = None,
        rate_group: str | None = None,
        max_per_minute: int | None = None,
        auto_dedupe: bool = False,
        fingerprint: str | None = None,
        parents: tuple[str, ...] = (),
        last_error: str | None = None,
        created_at: float | None = None,
        retry_backoff: str | None = None,
        retry_max_delay: float | None = None,
        extra: Mapping[str, Any] = _EMPTY,
        order: int = 0,
        phase: str = READY,
        attempt: int = 0,
        claim: Claim | None = None,
        progress: Any = None,
    ) -> None:
        self.id: Final[str] = id
        self.type: Final[str] = type
        self.data: Final[str] = data
        self.max_retries: Final[int] = max_retries
        self.retry_after_hours: Final[float] = retry_after_hours
        self.retry_count: Final[int] = retry_count
        self.urgency: Final[float] = urgency
        self.execute_at: Final[float | None] = execute_at
        self.retry_after_time: Final[float | None] = retry_after_time
        self.cron: Final[str | None] = cron
        self.webhook_url: Final[str | None] = webhook_url
        self.max_execution_seconds: Final[float | None] = max_execution_seconds
        self.pool: Final[str | None] = pool
        self.rate_group: Final[str | None] = rate_group
        self.max_per_minute: Final[int | None] = max_per_minute
        self.auto_dedupe: Final[bool] = auto_dedupe
        self.fingerprint: Final[str | None] = fingerprint
        self.parents: Final[tuple[str, ...]] = parents
        self.last_error: Final[str | None] = last_error
        self.created_at: Final[float | None] = created_at
        # "exponential", or None: the fixed retry_after_hours
        self.retry_backoff: Final[str | None] = retry_backoff
        self.retry_max_delay: Final[float | None] = retry_max_delay  # exponential's cap, s
        self.extra: Final[Mapping[str, Any]] = extra  # fields we do not know (not compared)
        # bookkeeping, not written to full-state lines
        self.order: Final[int] = order  # FIFO order
        self.phase: Final[str] = phase
        self.attempt: Final[int] = attempt
        self.claim: Final[Claim | None] = claim
        self.progress: Final[Any] = progress

    def _key(self) -> tuple[Any, ...]:
        return field_values(self, _COMPARED)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Task) or type(other) is not type(self):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return field_repr(self, FIELDS)

    def __reduce__(self) -> tuple[Any, ...]:
        return Task, field_values(self, FIELDS)

    @property
    def task_type(self) -> str:
        return self.type

    @property
    def not_before(self) -> float | None:
        """The earliest time the task may run (the later of ``execute_at`` and
        ``retry_after_time``), or None for 'now'. (Read for every task a fold places.)"""
        execute_at, retry_at = self.execute_at, self.retry_after_time
        if retry_at is None:
            return execute_at
        if execute_at is None or retry_at > execute_at:
            return retry_at
        return execute_at

    @property
    def lane(self) -> Lane:
        """The ready heap this task waits in: (type, pool, rate group, its limit).

        Tasks of one group with different limits wait apart, so a task whose own
        limit is reached never holds up one whose limit is not (no head-of-line
        blocking).
        """
        return (self.type, self.pool or "", self.rate_group or "", self.max_per_minute or 0)


freeze(Task, inline=True)


def rebooked(
    task: Task, order: int, phase: str, attempt: int, claim: Claim | None, progress: Any
) -> Task:
    """The task with its bookkeeping (order, phase, attempt, claim, progress) replaced,
    its lasting fields as they are: every copy a fold makes (placed, claimed,
    released, its progress), one constructor call."""
    return Task(
        task.id,
        task.type,
        task.data,
        task.max_retries,
        task.retry_after_hours,
        task.retry_count,
        task.urgency,
        task.execute_at,
        task.retry_after_time,
        task.cron,
        task.webhook_url,
        task.max_execution_seconds,
        task.pool,
        task.rate_group,
        task.max_per_minute,
        task.auto_dedupe,
        task.fingerprint,
        task.parents,
        task.last_error,
        task.created_at,
        task.retry_backoff,
        task.retry_max_delay,
        task.extra,
        order,
        phase,
        attempt,
        claim,
        progress,
    )


def with_(task: Task, **changes: Any) -> Task:
    """The task with those fields changed (``AttributeError`` for a name it has not)."""
    return replaced(task, FIELDS, changes)


def lane_key(task: Task) -> tuple[float, int, str]:
    """A READY task's key in its lane's heap: max urgency first, then FIFO by order.
    (Here, compiled with the fold that calls it for every task made ready.)"""
    return (-task.urgency, task.order, task.id)


def timer_key(task: Task) -> tuple[float, int, str]:
    """A DELAYED task's key in the timer heap: earliest first, then FIFO by order."""
    return (task.not_before or 0.0, task.order, task.id)


def with_phase(task: Task, phase: str) -> Task:
    """The task in ``phase``, the rest of its bookkeeping as it is."""
    return rebooked(task, task.order, phase, task.attempt, task.claim, task.progress)


def _number(value: Any, name: str, default: float, *, low: float = -_MAX_EXACT) -> float:
    """A number in [low, 2**53) (what a line can hold again), else ``default``: a bad
    optional field never loses a task (``snerdmq replay --verify`` reports it)."""
    kind = type(value)
    if (kind is float or kind is int) and low <= value < _MAX_EXACT:
        return float(value)
    return default


def _positive(value: Any, name: str) -> float | None:
    """A number > 0, else None (absent, or a limit that cannot hold)."""
    number = _number(value, name, 0.0, low=0.0)
    return number if number > 0 else None


def _text(value: Any) -> str | None:
    """Non-empty text, else None (a cron, URL, pool or group must be text)."""
    return value if type(value) is str and value else None


def _instant(value: Any, name: str) -> float | None:
    """Epoch seconds from an RFC 3339 string or a number; None when absent or bad."""
    kind = type(value)
    instant: float | None = None
    if kind is str and value:
        try:
            instant = _parse_cached(value)
        except (EventError, ValueError, OverflowError):
            return None
    elif kind is float or kind is int:
        instant = float(value)
    if instant is not None and 0.0 <= instant <= _LAST_INSTANT:
        return instant
    return None  # absent, unreadable, or outside what RFC 3339 lines can say


def _after_creation(value: Any, key: str, created: float | None) -> float | None:
    # We write executeAt / retryAfterTime = createdAt when a task has none (SnerdMQ
    # requires both); an instant equal to the creation reads back as "none", so a
    # line survives any number of read/write round trips unchanged.
    instant = _instant(value, key)
    return None if instant is not None and instant == created else instant


def record_error(record: Mapping[str, Any]) -> str | None:
    """The error a line carries: LastJobError (object or text), else LastErrorObj."""
    value = record.get(ev.F_LAST_ERROR)
    if isinstance(value, dict):
        value = value.get("error")
    if value is None:
        value = record.get(ev.F_LAST_ERROR_TEXT)
    return None if value is None else str(value)


def _parents(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        return ()
    return tuple(p for p in value if isinstance(p, str))


def _data(value: Any) -> str:
    if isinstance(value, str):
        return value
    import orjson

    return orjson.dumps(value).decode()


_KNOWN_FIELDS: Final = ev.TASK_FIELDS | ev.OUR_FIELDS | ev.OUR_TASK_FIELDS


def require_ids(record: dict[str, Any]) -> tuple[str, str]:
    """(taskId, taskType) of a full-state line; EventError if either is unusable.

    These are the only fields whose absence makes a line unusable: every other
    field falls back to its default when it is missing or malformed.
    """
    task_id = record.get(ev.F_TASK_ID)
    task_type = record.get(ev.F_TASK_TYPE)
    if type(task_id) is not str or not task_id:
        raise EventError(f"{ev.F_TASK_ID} must be a non-empty string")
    if type(task_type) is not str:
        raise EventError(f"{ev.F_TASK_TYPE} must be a string (task {task_id})")
    return task_id, task_type


def task_from_record(record: dict[str, Any], *, order: int = 0, attempt: int = 0) -> Task:
    """Read a full-state line. Raises EventError only when :func:`require_ids` does.

    Every fold reads one per enqueue, so each field's common case is read inline and
    a helper is called only for the rest: an absent optional field (most are, on most
    lines) costs one lookup; a count or number of the usual type and range, one test
    (:func:`_number` and :func:`_text` give the same answers for them).
    """
    task_id, task_type = require_ids(record)
    created_text = record.get(ev.F_CREATED_AT)
    created = None if created_text is None else _instant(created_text, ev.F_CREATED_AT)
    unknown = () if _KNOWN_FIELDS.issuperset(record) else record.keys() - _KNOWN_FIELDS
    # The same text as createdAt is the same instant: "none" (see _after_creation).
    value = record.get(ev.F_EXECUTE_AT)
    execute_at = (
        None if value is None or value == created_text
        else _after_creation(value, ev.F_EXECUTE_AT, created)
    )  # fmt: skip
    value = record.get(ev.F_RETRY_AFTER_TIME)
    retry_after_time = (
        None if value is None or value == created_text
        else _after_creation(value, ev.F_RETRY_AFTER_TIME, created)
    )  # fmt: skip
    value = record.get(ev.F_MAX_PER_MINUTE)
    per_minute = 0.0 if value is None else _number(value, ev.F_MAX_PER_MINUTE, 0.0, low=1.0)
    value = record.get(ev.F_MAX_EXECUTION_EXACT)
    limit = None if value is None else _positive(value, ev.F_MAX_EXECUTION_EXACT)
    if limit is None:
        value = record.get(ev.F_MAX_EXECUTION_SECONDS)
        limit = None if value is None else _positive(value, ev.F_MAX_EXECUTION_SECONDS)
    value = record.get(ev.F_CRON_TEXT)
    cron = None if value is None else _text(value)
    if cron is None:
        value = record.get(ev.F_CRON)
        cron = None if value is None else _text(value)
    data = record.get(ev.F_TASK_DATA)
    if type(data) is not str:
        data = _data(data)
    max_retries = record.get(ev.F_MAX_RETRIES)
    if type(max_retries) is not int or not 0 <= max_retries < _MAX_EXACT:
        max_retries = int(_number(max_retries, ev.F_MAX_RETRIES, 3, low=0))
    retry_count = record.get(ev.F_RETRY_COUNT)
    if type(retry_count) is not int or not 0 <= retry_count < _MAX_EXACT:
        retry_count = int(_number(retry_count, ev.F_RETRY_COUNT, 0, low=0))
    hours = record.get(ev.F_RETRY_AFTER_HOURS)
    if type(hours) is not float or not 0.0 <= hours < _MAX_EXACT:
        hours = _number(hours, ev.F_RETRY_AFTER_HOURS, 0.0, low=0.0)
    urgency = record.get(ev.F_URGENCY)
    if type(urgency) is not float or not -_MAX_EXACT <= urgency < _MAX_EXACT:
        urgency = _number(urgency, ev.F_URGENCY, 0.0)
    webhook_url, pool = record.get(ev.F_WEBHOOK_URL), record.get(ev.F_POOL)
    rate_group, fingerprint = record.get(ev.F_RATE_GROUP), record.get(ev.F_FINGERPRINT)
    backoff, max_delay = record.get(ev.F_RETRY_BACKOFF), record.get(ev.F_RETRY_MAX_DELAY)
    parents = record.get(ev.F_TRIGGER_AFTER_IDS)
    has_error = (record.get(ev.F_LAST_ERROR) is not None
                 or record.get(ev.F_LAST_ERROR_TEXT) is not None)
    return Task(
        id=task_id,
        type=task_type,
        data=data,
        max_retries=max_retries,
        retry_after_hours=hours,
        retry_count=retry_count,
        urgency=urgency,
        execute_at=execute_at,
        retry_after_time=retry_after_time,
        cron=cron,
        webhook_url=None if webhook_url is None else _text(webhook_url),
        max_execution_seconds=limit,
        pool=None if pool is None else _text(pool),
        rate_group=None if rate_group is None else _text(rate_group),
        max_per_minute=int(per_minute) or None,
        auto_dedupe=record.get(ev.F_AUTO_DEDUPE) is True,
        fingerprint=None if fingerprint is None else _text(fingerprint),
        parents=() if parents is None else _parents(parents),
        last_error=record_error(record) if has_error else None,
        created_at=created,
        retry_backoff=None if backoff is None else _text(backoff),
        retry_max_delay=None if max_delay is None else _positive(max_delay, ev.F_RETRY_MAX_DELAY),
        extra=pmap({k: record[k] for k in unknown}) if unknown else _EMPTY,
        order=order,
        attempt=attempt,
    )


def _put(record: dict[str, Any], key: str, value: Any) -> None:
    if value is not None and value != () and value is not False:
        record[key] = list(value) if isinstance(value, tuple) else value


def task_to_record(task: Task, *, deleted_at: float | None = None) -> dict[str, Any]:
    """The task's full-state fields, SnerdMQ's core ones always present."""
    created = task.created_at
    executes = task.execute_at if task.execute_at is not None else created
    retries = task.retry_after_time if task.retry_after_time is not None else created
    core = {
        ev.F_TASK_ID: task.id,
        ev.F_TASK_TYPE: task.type,
        ev.F_TASK_DATA: task.data,
        ev.F_RETRY_COUNT: task.retry_count,
        ev.F_MAX_RETRIES: task.max_retries,
        ev.F_RETRY_AFTER_HOURS: task.retry_after_hours,
        ev.F_RETRY_AFTER_TIME: None if retries is None else _format_cached(retries),
        ev.F_EXECUTE_AT: None if executes is None else _format_cached(executes),
        ev.F_DELETED_AT: None if deleted_at is None else _format_cached(deleted_at),
        ev.F_URGENCY: task.urgency,
    }
    record: dict[str, Any]
    if task.extra is not _EMPTY and task.extra:  # fields we do not know come first, as read
        record = dict(task.extra)
        record.update(core)
    else:
        record = core
    # The optional fields (``_put``'s rule: absent when None, empty or False), inline:
    # every enqueue and outcome writes one of these records.
    if task.rate_group is not None:
        record[ev.F_RATE_GROUP] = task.rate_group
    if task.max_per_minute is not None:
        record[ev.F_MAX_PER_MINUTE] = task.max_per_minute
    _put(record, ev.F_AUTO_DEDUPE, task.auto_dedupe)
    if task.fingerprint is not None:
        record[ev.F_FINGERPRINT] = task.fingerprint
    if task.cron is not None:
        readable = snerdmq_cron(task.cron)
        if readable is None:
            record[ev.F_CRON] = task.cron
        else:  # SnerdMQ's form where it reads it; ours as given beside it
            record[ev.F_CRON], record[ev.F_CRON_TEXT] = readable, task.cron
    if task.webhook_url is not None:
        record[ev.F_WEBHOOK_URL] = task.webhook_url
    limit = task.max_execution_seconds
    if limit is not None:
        whole = float(limit).is_integer()
        record[ev.F_MAX_EXECUTION_SECONDS] = int(limit) if whole else math.ceil(limit)
        if not whole:
            record[ev.F_MAX_EXECUTION_EXACT] = limit
    if task.pool is not None:
        record[ev.F_POOL] = task.pool
    if task.parents:
        _put(record, ev.F_TRIGGER_AFTER_IDS, task.parents)
    if task.last_error is not None:
        record[ev.F_LAST_ERROR] = {"error": task.last_error, "retry_worthy": True}
        record[ev.F_LAST_ERROR_TEXT] = task.last_error
    if created is not None:
        record[ev.F_CREATED_AT] = _format_cached(created)
    if task.retry_backoff is not None:
        record[ev.F_RETRY_BACKOFF] = task.retry_backoff
    if task.retry_max_delay is not None:
        record[ev.F_RETRY_MAX_DELAY] = task.retry_max_delay
    return record
