"""Evolve: the one place where each event's meaning is written.

``evolve(state, event) -> (state, delta)`` is the decider's evolve. Every fold goes
through the per-event rules below: the incremental fold the engine runs on each batch
(:class:`~snerd.projections.apply.Folder`), the bulk replay at start-up and in
``snerdmq replay`` (:class:`~snerd.projections.replay.BulkFolder`, which keeps plain
dicts and decodes only the tasks still live at the end), the audit history and the
dashboard's counters. The rules speak to a :class:`Tables` (the working copy of the
task table, DLQ and rate windows); how a fold stores and indexes them is its own
business, what an event *means* is written only here.

A reader looking for where ``claimed`` or ``dead_lettered`` changes state: it is
:func:`_claimed` and :func:`_dead_lettered`, and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Protocol

from mypy_extensions import mypyc_attr

from snerd.projections import events as ev
from snerd.projections.counters import LATENCY, RUN_TIME, CounterKey, Hist, HistKey
from snerd.projections.delta import Delta
from snerd.projections.events import (
    Cancelled,
    Claimed,
    ClaimReleased,
    Counters,
    DeadLettered,
    Deduplicated,
    Enqueued,
    Event,
    Progressed,
    Purged,
    RateWindow,
    Requeued,
    Rescheduled,
    RetryScheduled,
    SnapshotHeader,
    StateLine,
    Succeeded,
    TaskStateEvent,
    Unusable,
)
from snerd.projections.task import Claim

# Counters (what the dashboard's throughput and metrics count), one word per outcome.
ENQUEUED: Final = "enqueued"
STARTED: Final = "started"
COMPLETED: Final = "completed"
FAILED_ATTEMPTS: Final = "failed_attempts"  # it retries or dead-letters: an event, not a state
DEAD_LETTERED: Final = "dead_lettered"
CANCELLED: Final = "cancelled"
DEDUPLICATED: Final = "deduplicated"  # an enqueue dropped by auto_dedupe
METRICS: Final = (
    ENQUEUED, STARTED, COMPLETED, FAILED_ATTEMPTS, DEAD_LETTERED, CANCELLED, DEDUPLICATED
)  # fmt: skip


class Entry(Protocol):
    """What the rules read of a live task: its attempt count, claim and type."""

    @property
    def attempt(self) -> int: ...

    @property
    def task_type(self) -> str: ...

    @property
    def claim(self) -> Claim | None: ...


@mypyc_attr(allow_interpreted_subclasses=True)
class Tables:
    """A fold's working copy, as the rules see it. ``n`` counts the records folded (the
    FIFO order of a task written now); ``count`` hears every counter an event bumps.

    A base class rather than a protocol: compiled (``setup.py``), the rules then call
    the bulk folder's methods through its vtable, not by attribute lookup. The engine's
    interpreted ``apply.Folder`` subclasses it too, which the decorator allows.
    """

    __slots__ = ("invalid", "last_seq", "n")

    n: int
    last_seq: int
    invalid: int

    def entry(self, task_id: str) -> Entry | None:
        raise NotImplementedError

    def upsert(self, event: TaskStateEvent, attempt: int) -> None:
        raise NotImplementedError

    def remove(self, task_id: str) -> None:
        raise NotImplementedError

    def dead_letter(self, event: DeadLettered | StateLine, key: str, reason: str,
                    at: float | None, attempt: int) -> None:  # fmt: skip
        raise NotImplementedError

    def drop_dead(self, key: str) -> None:
        raise NotImplementedError

    def claim(self, task_id: str, claim: Claim) -> None:
        raise NotImplementedError

    def progress(self, task_id: str, data: Any) -> None:
        raise NotImplementedError

    def release(self, task_id: str) -> None:
        raise NotImplementedError

    def window_add(self, group: str, times: tuple[float, ...]) -> None:
        raise NotImplementedError

    def count(self, metric: str, event: Event, entry: Entry | None) -> None:
        raise NotImplementedError

    def add_totals(self, counts: Mapping[CounterKey, int],
                   histograms: Mapping[HistKey, Hist]) -> None:  # fmt: skip
        raise NotImplementedError


# --- what a count adds up to, by task type (``counters.py``) ----------------------------


def tally(
    metric: str, event: Event, entry: Entry | None
) -> tuple[CounterKey, tuple[HistKey, float] | None]:
    """The (metric, task type) a counted event bumps, and the duration it observes if
    any: a claim's ``waited`` (latency), an outcome's time since its claim (run time).
    ``entry`` is the live task as it was before the event's rule changed it."""
    kind = kind_of(event, entry)
    observes = OBSERVES.get(metric)
    if observes is not None:
        seconds = observes[1](event, entry)
        if seconds is not None:
            return (metric, kind), ((observes[0], kind), seconds)
    return (metric, kind), None


def kind_of(event: Event, entry: Entry | None) -> str:
    """The task type a counted event is counted under (``entry``: the live task before
    the event's rule changed it): the record's, else the task's, else ``""``."""
    kind = event.record.get(_F_TASK_TYPE)
    if type(kind) is str:
        return kind
    if type(event) is Deduplicated:
        return event.task_type
    return entry.task_type if entry is not None else ""


def _waited(event: Event, entry: Entry | None) -> float | None:
    """What a start observes: the claim's ``waited``."""
    return event.waited if type(event) is Claimed else None


def _run_time(event: Event, entry: Entry | None) -> float | None:
    """What an outcome observes: its time since the claim it ends (none unclaimed)."""
    if entry is None:
        return None
    claim = entry.claim
    if claim is None:
        return None
    # record_time(event.record), its common case (an int in range) inline: a replay
    # observes millions of outcomes
    at = event.record.get(_F_TS)
    at = at / 1000.0 if type(at) is int and 0 <= at <= _MAX_MS else _ms_time(at)
    return None if at is None else at - claim.at


Observe = Callable[[Event, Entry | None], float | None]

OBSERVES: Final[dict[str, tuple[str, Observe]]] = {
    STARTED: (LATENCY, _waited),
    COMPLETED: (RUN_TIME, _run_time),
    FAILED_ATTEMPTS: (RUN_TIME, _run_time),
}
"""The histogram a metric's count observes into, and what it observes there: a
claim's ``waited``; an outcome's time since the claim it ends."""

def observed_seconds(metric: str, event: Event, entry: Entry | None) -> float | None:
    """The duration a count of ``metric`` observes in its histogram, if any."""
    observes = OBSERVES.get(metric)
    return None if observes is None else observes[1](event, entry)


_new: Final = tuple.__new__  # a NamedTuple built without its Python-level __new__
_F_TASK_TYPE: Final = ev.F_TASK_TYPE
_F_TS: Final = ev.F_TS
_MAX_MS: Final = ev.MAX_MS
_ms_time: Final = ev.ms_time


# --- the rules --------------------------------------------------------------------------


def _upserted(t: Tables, e: TaskStateEvent, old: Entry | None) -> None:
    """A full-state line: the task's latest state (``old``: the live entry before it).
    Attempts only ever grow."""
    t.upsert(e, max(e.attempt, old.attempt) if old is not None else e.attempt)


def _enqueued(t: Tables, e: Enqueued) -> None:
    old = t.entry(e.task_id)
    if not e.compacted:
        t.count(ENQUEUED, e, old)
    _upserted(t, e, old)


def _retry_scheduled(t: Tables, e: RetryScheduled) -> None:
    old = t.entry(e.task_id)
    t.count(FAILED_ATTEMPTS, e, old)
    _upserted(t, e, old)


def _rescheduled(t: Tables, e: Rescheduled) -> None:
    # A cron task's next occurrence. It completed the current one unless that one was
    # just dead-lettered (which took the task out of the live table first).
    old = t.entry(e.task_id)
    if old is not None:
        t.count(COMPLETED, e, old)
    _upserted(t, e, old)


def _requeued(t: Tables, e: Requeued) -> None:
    t.drop_dead(e.key)
    _upserted(t, e, t.entry(e.task_id))


def _state_line(t: Tables, e: StateLine) -> None:
    """SnerdMQ's own line: an upsert; with ``deletedAt`` an end, a dead letter when it
    still carries an error with its retries spent (SnerdMQ writes no reason)."""
    old = t.entry(e.task_id)
    if not e.deleted:
        _upserted(t, e, old)
        return
    task = e.task(0)
    if task.last_error and task.retry_count >= task.max_retries:
        t.count(FAILED_ATTEMPTS, e, old)
        t.count(DEAD_LETTERED, e, old)
        t.dead_letter(e, e.task_id, ev.REASON_MAX_RETRIES, None, old.attempt if old else 0)
    else:
        t.count(COMPLETED, e, old)
        t.remove(e.task_id)


def _succeeded(t: Tables, e: Succeeded) -> None:
    t.count(COMPLETED, e, t.entry(e.task_id))
    t.remove(e.task_id)


def _cancelled(t: Tables, e: Cancelled) -> None:
    t.count(CANCELLED, e, t.entry(e.task_id))
    t.remove(e.task_id)


def _dead_lettered(t: Tables, e: DeadLettered) -> None:
    """Into the DLQ under its key; the task leaves the live table (a cron task comes
    back with the ``rescheduled`` that follows)."""
    old = t.entry(e.task_id)
    if e.record.get(ev.F_COMPACTED) is not True:  # a snapshot's restatement counts nothing
        if e.reason != ev.REASON_FAILED_PARENT:
            t.count(FAILED_ATTEMPTS, e, old)
        t.count(DEAD_LETTERED, e, old)
    attempt = max(e.attempt, old.attempt) if old is not None else e.attempt
    t.dead_letter(e, e.key, e.reason, e.ts, attempt)


def _claimed(t: Tables, e: Claimed) -> None:
    """An attempt starts. Only a claim that names its group and time fills a rate
    window; a claim of a task already running (or gone) changes nothing else."""
    task_id, ts = e.task_id, e.ts  # (each field read once: a replay folds millions)
    if e.group and ts is not None:
        t.window_add(e.group, (ts,))
    old = t.entry(task_id)
    if old is None or old.claim is not None:
        return
    if e.record.get(ev.F_COMPACTED) is not True:  # a snapshot's restatement counts nothing
        t.count(STARTED, e, old)
    attempt = e.attempt
    if attempt is None:
        attempt = old.attempt + 1
    t.claim(task_id, _new(Claim, (e.daemon, attempt, ts or 0.0, e.lease_until)))


def _progressed(t: Tables, e: Progressed) -> None:
    """Progress of the running attempt; late progress of an earlier attempt is dropped."""
    old = t.entry(e.task_id)
    if old is None or old.claim is None:
        return
    if e.attempt is not None and e.attempt != old.claim.attempt:
        return
    t.progress(e.task_id, e.data)


def _released(t: Tables, e: ClaimReleased) -> None:
    """The claim on that attempt ends without an outcome: the task queues again (no
    retry counted), behind what was enqueued meanwhile."""
    old = t.entry(e.task_id)
    if old is None or old.claim is None:
        return
    if e.attempt is not None and e.attempt != old.claim.attempt:
        return
    t.release(e.task_id)


def _purged(t: Tables, e: Purged) -> None:
    t.drop_dead(e.key)


def _rate_window(t: Tables, e: RateWindow) -> None:
    t.window_add(e.group, e.times)


def _deduplicated(t: Tables, e: Deduplicated) -> None:
    """An enqueue dropped by dedupe: counted, nothing else changes."""
    t.count(DEDUPLICATED, e, t.entry(e.task_id))


def _counters(t: Tables, e: Counters) -> None:
    """A compaction's totals: the history before the snapshot, added back."""
    t.add_totals(e.counts, e.histograms)


def _nothing(t: Tables, e: Event) -> None:
    return None


def _unusable(t: Tables, e: Event) -> None:
    t.invalid += 1


RULES: Final[dict[type, Callable[[Any, Any], None]]] = {
    Enqueued: _enqueued,
    RetryScheduled: _retry_scheduled,
    Rescheduled: _rescheduled,
    Requeued: _requeued,
    StateLine: _state_line,
    Succeeded: _succeeded,
    Cancelled: _cancelled,
    DeadLettered: _dead_lettered,
    Claimed: _claimed,
    Progressed: _progressed,
    ClaimReleased: _released,
    Purged: _purged,
    RateWindow: _rate_window,
    Deduplicated: _deduplicated,
    Counters: _counters,
    SnapshotHeader: _nothing,
    Unusable: _unusable,
}
"""The rule of each event type (every type has exactly one)."""


def step(t: Tables, event: Event) -> None:
    """Fold one event into ``t``: count it, note its seq, apply its rule."""
    t.n += 1
    seq = event.seq
    if seq is not None and seq > t.last_seq:
        t.last_seq = seq
    RULES[type(event)](t, event)


def step_all(t: Tables, events: Iterable[Event]) -> None:
    rules = RULES
    for event in events:
        t.n += 1
        seq = event.seq
        if seq is not None and seq > t.last_seq:
            t.last_seq = seq
        rules[type(event)](t, event)


def evolve(state: Any, event: Event) -> tuple[Any, Delta]:
    """The state after ``event``, and what changed (pure; see :func:`state.fold`)."""
    from snerd.projections.apply import Folder

    folder = Folder(state)
    step(folder, event)
    return folder.finish()
