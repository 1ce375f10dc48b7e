"""Typed events: the one place where a log record becomes an event (and back).

Each event type is an immutable, slotted class (a ``NamedTuple``: the cheapest frozen
class CPython builds, about 3x faster to construct than a frozen dataclass, which
matters when a start-up replays millions of records). :func:`decode` is the one rule
for whether a record is usable: every fold, the audit history, the dashboard's
counters and the replay tool's ``--verify`` go through it. A full-state event keeps
its record and decodes the :class:`~snerd.projections.task.Task` only when a fold
needs it (most tasks of a long log end before the replay does), but everything that
could make that decoding fail is checked here, once.

The field names and event names (``F_*``, ``ENQUEUED``, ...) live in ``fields`` and
are re-exported here, so ``events`` is the one vocabulary of the log.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple, TypeAlias

import orjson

from snerd.projections import fields as _fields
from snerd.projections.counters import CounterKey, Hist, HistKey, parse_counts, parse_histograms
from snerd.projections.fields import *  # noqa: F403  (the log's vocabulary, re-exported)
from snerd.projections.fields import (
    CANCELLED,
    CLAIM_RELEASED,
    CLAIMED,
    COUNTERS,
    DEAD_LETTERED,
    DEDUPLICATED,
    ENQUEUED,
    F_ATTEMPT,
    F_COMPACTED,
    F_COUNTS,
    F_DAEMON,
    F_DATA,
    F_DELETED_AT,
    F_DLQ_KEY,
    F_EVENT,
    F_GROUP,
    F_HISTOGRAMS,
    F_LEASE_UNTIL,
    F_REASON,
    F_SEQ,
    F_TASK,
    F_TASK_DATA,
    F_TASK_ID,
    F_TASK_TYPE,
    F_TIMES,
    F_TS,
    F_TYPE,
    F_WAITED,
    LIGHT_EVENTS,
    PROGRESSED,
    PURGED,
    RATE_WINDOW,
    REASON_MAX_RETRIES,
    REQUEUED,
    RESCHEDULED,
    RETRY_SCHEDULED,
    SNAPSHOT,
    SUCCEEDED,
)
from snerd.projections.schedule import round_even
from snerd.projections.task import Task, rebooked, task_from_record

# A compiled build (mypyc, ``setup.py``) binds a star import's names for this module's
# own code only; this puts the vocabulary in the module's namespace, as the
# interpreter's star import does (``events.F_TASK_ID`` works in both).
globals().update({k: v for k, v in vars(_fields).items() if k.isupper()})

Record: TypeAlias = dict[str, Any]

MAX_MS: Final = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the last instant RFC 3339 writes
MAX_SEQ: Final = 2**53 - 1  # the largest seq a writer continues from (eventlog's bound too)


def ms(seconds: float) -> int:
    """Epoch seconds as the log's integer milliseconds, rounded as ``round`` rounds
    (halves to even; :func:`ms_time` reads them back)."""
    return round_even(seconds * 1000.0)


def ms_time(value: Any) -> float | None:
    """A time in integer ms (``ts``, ``leaseUntil``, rate ``times``) as epoch seconds.

    None unless a number in [0, MAX_MS]: a corrupt value (1e308, a boolean) must not
    reach a snapshot line that JSON or RFC 3339 cannot write.
    """
    kind = type(value)
    if kind is int and 0 <= value <= MAX_MS:
        return float(value) / 1000.0
    if kind is float and 0 <= value <= MAX_MS:  # whole milliseconds, as every writer
        return float(round(value)) / 1000.0  # writes them: a snapshot restates the instant
    return None


def record_time(record: Record) -> float | None:
    """The record's ``ts`` (integer milliseconds) in seconds, or None."""
    return ms_time(record.get(F_TS))


def _count(value: Any) -> int:
    """An attempt count: a non-negative integer, else 0."""
    return value if type(value) is int and value >= 0 else 0


def task_id_of(record: Record) -> Any:
    """The task a record is about: ``taskId`` on a full-state line, ``task`` on a light
    one (``taskId`` on the light lines of logs written before ``task`` existed)."""
    event = record.get(F_EVENT)
    if type(event) is str and event in LIGHT_EVENTS:
        task_id = record.get(F_TASK)
        if task_id is not None:
            return task_id
    return record.get(F_TASK_ID)


def _light_id(record: Record) -> str | None:
    """The task of a light line (``task``; ``taskId`` in older logs), if usable."""
    task_id = record.get(F_TASK)
    if task_id is None:
        task_id = record.get(F_TASK_ID)
    return task_id if type(task_id) is str and task_id else None


def _text(value: Any) -> str | None:
    return value if type(value) is str and value else None


# An event keeps the record it was decoded from (``record``): readers that want its
# time or writer ask :func:`record_time` or the record itself, so decoding reads only
# what the fold's rules need.


class Enqueued(NamedTuple):
    """A task entered the queue (or a compaction wrote a live task back: ``compacted``)."""

    task_id: str
    attempt: int
    seq: int | None
    record: Record
    compacted: bool = False
    built: Task | None = None
    """The task ``record`` states, when its writer holds it already (the engine: the
    task it read from its own enqueue's record to claim it): not read again."""

    def task(self, order: int, attempt: int = 0) -> Task:
        built = self.built
        if built is not None:
            return rebooked(built, order, built.phase, attempt, built.claim, built.progress)
        return task_from_record(self.record, order=order, attempt=attempt)


class RetryScheduled(NamedTuple):
    """An attempt failed and retries remain: the task waits out its backoff."""

    task_id: str
    attempt: int
    seq: int | None
    record: Record

    def task(self, order: int, attempt: int = 0) -> Task:
        return task_from_record(self.record, order=order, attempt=attempt)


class Rescheduled(NamedTuple):
    """A cron task's next occurrence (after a success, or after a dead-lettered one)."""

    task_id: str
    attempt: int
    seq: int | None
    record: Record

    def task(self, order: int, attempt: int = 0) -> Task:
        return task_from_record(self.record, order=order, attempt=attempt)


class Requeued(NamedTuple):
    """A dead-lettered task (DLQ ``key``) came back with its retries restored."""

    task_id: str
    attempt: int
    seq: int | None
    record: Record
    key: str

    def task(self, order: int, attempt: int = 0) -> Task:
        return task_from_record(self.record, order=order, attempt=attempt)


class StateLine(NamedTuple):
    """A SnerdMQ state line (no ``event`` field): an upsert, or with ``deletedAt`` an end."""

    task_id: str
    attempt: int
    seq: int | None
    record: Record
    deleted: bool

    def task(self, order: int, attempt: int = 0) -> Task:
        return task_from_record(self.record, order=order, attempt=attempt)


class Succeeded(NamedTuple):
    """The attempt succeeded: the task left the queue (a tombstone)."""

    task_id: str
    seq: int | None
    record: Record


class Cancelled(NamedTuple):
    """An operator cancelled a task that was not running (a tombstone)."""

    task_id: str
    seq: int | None
    record: Record


class DeadLettered(NamedTuple):
    """The task (or a cron occurrence, under ``key``) went to the dead-letter queue."""

    task_id: str
    attempt: int
    seq: int | None
    ts: float | None
    record: Record
    key: str
    reason: str

    def task(self, order: int, attempt: int = 0) -> Task:
        return task_from_record(self.record, order=order, attempt=attempt)


class Claimed(NamedTuple):
    """``daemon`` claimed an attempt (None: the task's next one) until ``lease_until``."""

    task_id: str
    daemon: str
    attempt: int | None
    lease_until: float | None
    group: str | None  # the rate group the claim counts against
    seq: int | None
    ts: float | None
    record: Record
    waited: float | None = None  # seconds the attempt waited since it was due


class Progressed(NamedTuple):
    """Progress of the running attempt (``attempt`` None: whichever runs)."""

    task_id: str
    attempt: Any
    data: Any
    seq: int | None
    record: Record


class ClaimReleased(NamedTuple):
    """A claim ended without an outcome (owner died, lease expired, drain)."""

    task_id: str
    attempt: Any
    reason: str | None
    seq: int | None
    record: Record


class Purged(NamedTuple):
    """A dead-letter entry was deleted for good."""

    key: str
    seq: int | None
    record: Record


class RateWindow(NamedTuple):
    """A compaction's restatement of a rate group's recent dispatch times."""

    group: str
    times: tuple[float, ...]
    seq: int | None
    record: Record


class Deduplicated(NamedTuple):
    """An enqueue of ``task_id`` was dropped: a live task had the same fingerprint."""

    task_id: str
    task_type: str
    seq: int | None
    record: Record


class Counters(NamedTuple):
    """A compaction's restatement of the totals by task type (``counters.py``)."""

    counts: Mapping[CounterKey, int]
    histograms: Mapping[HistKey, Hist]
    seq: int | None
    record: Record


class SnapshotHeader(NamedTuple):
    """The first line of a compacted log: ``records`` snapshot lines follow."""

    records: int
    seq: int | None
    record: Record


class Unusable(NamedTuple):
    """A record no fold can use (reported, never fatal): ``reason`` says why."""

    reason: str
    seq: int | None
    record: Record


Event: TypeAlias = (
    Enqueued | RetryScheduled | Rescheduled | Requeued | StateLine | Succeeded | Cancelled
    | DeadLettered | Claimed | Progressed | ClaimReleased | Purged | RateWindow
    | Deduplicated | Counters | SnapshotHeader | Unusable
)  # fmt: skip
TaskStateEvent: TypeAlias = Enqueued | RetryScheduled | Rescheduled | Requeued | StateLine
"""Events that carry a task's whole latest state (upserts)."""


def _usable_data(record: Record) -> str | None:
    """None when ``taskData`` is usable, else why not. A non-text value must encode as
    JSON now (a value nested too deep for the encoder would fail every later fold)."""
    data = record.get(F_TASK_DATA)
    if data is None or type(data) is str:
        return None
    try:
        orjson.dumps(data)
    except (TypeError, RecursionError, OverflowError):
        return f"{F_TASK_DATA} cannot be written back as JSON"
    return None


def _full_state(record: Record) -> tuple[str, int] | str:
    """(taskId, attempt) of a usable full-state line, else why it is unusable."""
    task_id = record.get(F_TASK_ID)
    if type(task_id) is not str or not task_id:
        return f"{F_TASK_ID} must be a non-empty string"
    if type(record.get(F_TASK_TYPE)) is not str:
        return f"{F_TASK_TYPE} must be a string (task {task_id})"
    data = record.get(F_TASK_DATA)
    if data is not None and type(data) is not str:
        problem = _usable_data(record)
        if problem is not None:
            return problem
    attempt = record.get(F_ATTEMPT)
    return task_id, attempt if type(attempt) is int and attempt >= 0 else 0


# The hot decoders build their event with ``tuple.__new__`` (what a NamedTuple's own
# ``__new__`` does, minus a Python call per record: a replay decodes millions).
_new: Final = tuple.__new__


def _enqueued(record: Record, seq: int | None) -> Event:
    checked = _full_state(record)
    if isinstance(checked, str):
        return Unusable(checked, seq, record)
    task_id, attempt = checked
    return _new(Enqueued, (task_id, attempt, seq, record, record.get(F_COMPACTED) is True, None))


def _upsert(kind: type[RetryScheduled] | type[Rescheduled]) -> Any:
    def decode(record: Record, seq: int | None) -> Event:
        checked = _full_state(record)
        if isinstance(checked, str):
            return Unusable(checked, seq, record)
        return _new(kind, (checked[0], checked[1], seq, record))

    return decode


def _requeued(record: Record, seq: int | None) -> Event:
    checked = _full_state(record)
    if isinstance(checked, str):
        return Unusable(checked, seq, record)
    key = str(record.get(F_DLQ_KEY) or checked[0])
    return Requeued(checked[0], checked[1], seq, record, key)


def _state_line(record: Record, seq: int | None) -> Event:
    checked = _full_state(record)
    if isinstance(checked, str):
        return Unusable(checked, seq, record)
    deleted = bool(record.get(F_DELETED_AT))
    return StateLine(checked[0], checked[1], seq, record, deleted)


def _dead_lettered(record: Record, seq: int | None) -> Event:
    checked = _full_state(record)
    if isinstance(checked, str):
        return Unusable(checked, seq, record)
    key = str(record.get(F_DLQ_KEY) or checked[0])
    reason = str(record.get(F_REASON) or REASON_MAX_RETRIES)
    ts = record_time(record)
    return DeadLettered(checked[0], checked[1], seq, ts, record, key, reason)


def _tombstone(kind: type[Succeeded] | type[Cancelled]) -> Any:
    def decode(record: Record, seq: int | None) -> Event:
        task_id = record.get(F_TASK_ID)  # a tombstone needs only the id
        if type(task_id) is not str or not task_id:
            return Unusable(f"{F_TASK_ID} must be a non-empty string", seq, record)
        return _new(kind, (task_id, seq, record))

    return decode


def _claimed(record: Record, seq: int | None) -> Event:
    attempt = record.get(F_ATTEMPT)
    task_id = record.get(F_TASK)  # taskId on the light lines of older logs
    if task_id is None:
        task_id = record.get(F_TASK_ID)
    daemon = record.get(F_DAEMON)
    if attempt is not None and (type(attempt) is not int or attempt < 1):
        return Unusable(f"{F_ATTEMPT} must be an integer >= 1", seq, record)
    if type(task_id) is not str or not task_id or type(daemon) is not str or not daemon:
        return Unusable(f"{F_TASK} and {F_DAEMON} must be non-empty strings",
                        seq, record)  # fmt: skip
    group = record.get(F_GROUP)
    waited = record.get(F_WAITED)
    # ms_time of each instant, its common case (an int in range) inline: a replay
    # decodes millions of claims
    lease = record.get(F_LEASE_UNTIL)
    lease = lease / 1000.0 if type(lease) is int and 0 <= lease <= MAX_MS else ms_time(lease)
    ts = record.get(F_TS)
    ts = ts / 1000.0 if type(ts) is int and 0 <= ts <= MAX_MS else ms_time(ts)
    return _new(Claimed, (task_id, daemon, attempt, lease, str(group) if group else None,
                          seq, ts, record,
                          None if waited is None else ms_time(waited)))  # fmt: skip


def _progressed(record: Record, seq: int | None) -> Event:
    task_id = _light_id(record)
    if task_id is None:
        return Unusable(f"{F_TASK} must be a non-empty string", seq, record)
    return _new(Progressed, (task_id, record.get(F_ATTEMPT), record.get(F_DATA), seq, record))


def _released(record: Record, seq: int | None) -> Event:
    task_id = _light_id(record)
    if task_id is None:
        return Unusable(f"{F_TASK} must be a non-empty string", seq, record)
    reason = record.get(F_REASON)
    return ClaimReleased(task_id, record.get(F_ATTEMPT), reason if type(reason) is str else None,
                         seq, record)  # fmt: skip


def _purged(record: Record, seq: int | None) -> Event:
    key = record.get(F_DLQ_KEY) or _light_id(record)
    if not key:
        return Unusable(f"{F_DLQ_KEY} or {F_TASK} is required", seq, record)
    return Purged(str(key), seq, record)


def _rate_window(record: Record, seq: int | None) -> Event:
    group = _text(record.get(F_GROUP))
    values = record.get(F_TIMES)
    if group is None or not isinstance(values, list):
        return Unusable(f"{F_GROUP} and {F_TIMES} are required", seq, record)
    times = []
    for value in values:
        seconds = ms_time(value)
        if seconds is None:
            return Unusable(f"{F_TIMES} must hold integer milliseconds, got {value!r}",
                            seq, record)  # fmt: skip
        times.append(seconds)
    return RateWindow(group, tuple(times), seq, record)


def _deduplicated(record: Record, seq: int | None) -> Event:
    task_id, kind = _light_id(record), record.get(F_TYPE)
    if task_id is None or type(kind) is not str:
        return Unusable(f"{F_TASK} (non-empty) and {F_TYPE} must be strings", seq, record)
    return Deduplicated(task_id, kind, seq, record)


def _counters(record: Record, seq: int | None) -> Event:
    counts = parse_counts(record.get(F_COUNTS))
    if isinstance(counts, str):
        return Unusable(counts, seq, record)
    histograms = parse_histograms(record.get(F_HISTOGRAMS))
    if isinstance(histograms, str):
        return Unusable(histograms, seq, record)
    return Counters(counts, histograms, seq, record)


def _snapshot(record: Record, seq: int | None) -> Event:
    count = record.get("records")
    return SnapshotHeader(_count(count), seq, record)


_DECODERS: Final[dict[Any, Any]] = {
    None: _state_line,
    ENQUEUED: _enqueued,
    RETRY_SCHEDULED: _upsert(RetryScheduled),
    RESCHEDULED: _upsert(Rescheduled),
    REQUEUED: _requeued,
    SUCCEEDED: _tombstone(Succeeded),
    CANCELLED: _tombstone(Cancelled),
    DEAD_LETTERED: _dead_lettered,
    CLAIMED: _claimed,
    PROGRESSED: _progressed,
    CLAIM_RELEASED: _released,
    PURGED: _purged,
    RATE_WINDOW: _rate_window,
    DEDUPLICATED: _deduplicated,
    COUNTERS: _counters,
    SNAPSHOT: _snapshot,
}


Decoder: TypeAlias = Callable[[Record, "int | None"], Event]

SEQUENCED: Final[dict[str, Decoder]] = {k: v for k, v in _DECODERS.items() if k is not None}
""":func:`decode`'s own table, for a loop that decodes millions of records (the bulk
replay) and would rather not pay a call to ``decode`` for each: when a record's ``seq``
is an ``int`` in 1..MAX_SEQ and its ``event`` a ``str`` found here, ``decode(record)``
is ``SEQUENCED[event](record, seq)`` (that is what decode does then; a property test
checks the two agree). Any other record goes through :func:`decode`."""


def decode(record: Record) -> Event:
    """The event a log record states, or :class:`Unusable` with the reason. Never raises.

    This is the one validity rule: a full-state line needs a ``taskId`` and a
    ``taskType`` and a ``taskData`` that JSON can write; a light line needs the fields
    it changes; every other field falls back to its default when missing or malformed.
    (``ts`` and ``daemon`` are read when an event's rule or a reader needs them.)
    """
    seq = record.get(F_SEQ)
    event = record.get(F_EVENT)
    if seq is not None:
        if type(seq) is not int or seq == 0:  # 0: "no seq" (a header of an empty log)
            seq = None
        elif not 0 < seq <= MAX_SEQ:
            return Unusable(f"{F_SEQ} out of range (0..{MAX_SEQ})", None, record)
    decoder = _DECODERS.get(event) if event is None or type(event) is str else None
    if decoder is None:
        return Unusable(f"unknown event {event!r}", seq, record)
    result: Event = decoder(record, seq)
    return result


def use_built(events: list[Event], built: Mapping[str, tuple[Record, Task]]) -> None:
    """Give each :class:`Enqueued` in ``events`` whose record is a record in ``built``
    (by task id) with at most its ``seq`` added (the log's copy) the task read from that
    record, which is the task its copy states: the fold then takes it rather than
    reading the record again. In place; the fold's result is the same."""
    for i, event in enumerate(events):
        if type(event) is Enqueued:
            entry = built.get(event.task_id)
            if entry is None:
                continue
            mine, copy = entry[0], event.record
            if len(copy) <= len(mine) + 1 and mine.items() <= copy.items():
                events[i] = _new(Enqueued, (*event[:5], entry[1]))


def event_name(event: Event) -> str:
    """The event's name as the log writes it (SnerdMQ lines: ``snerdmq:upsert``/``:deleted``)."""
    if type(event) is StateLine:
        return "snerdmq:deleted" if event.deleted else "snerdmq:upsert"
    if type(event) is Unusable:
        name = event.record.get(F_EVENT)
        return str(name) if name is not None else "snerdmq:upsert"
    return _NAMES[type(event)]


_NAMES: Final[dict[type, str]] = {
    Enqueued: ENQUEUED,
    RetryScheduled: RETRY_SCHEDULED,
    Rescheduled: RESCHEDULED,
    Requeued: REQUEUED,
    Succeeded: SUCCEEDED,
    Cancelled: CANCELLED,
    DeadLettered: DEAD_LETTERED,
    Claimed: CLAIMED,
    Progressed: PROGRESSED,
    ClaimReleased: CLAIM_RELEASED,
    Purged: PURGED,
    RateWindow: RATE_WINDOW,
    Deduplicated: DEDUPLICATED,
    Counters: COUNTERS,
    SnapshotHeader: SNAPSHOT,
}
