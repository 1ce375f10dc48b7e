"""The audit fold: every task's history, read from the log (pure; for ``snerdmq replay``).

:class:`Audit` folds records with the queue's own incremental fold (:class:`Folder`),
so a task's state after each record is what the dispatcher saw, and keeps per task
its :class:`Transition` s and final state; :class:`Summary` gets the same figures
without transitions from the bulk fold, much faster. Unlike the queue projection
both remember finished tasks (memory grows with task ids: right for an audit tool).

States are the read models' status vocabulary (:mod:`snerd.projections.views.status`:
pending, scheduled, blocked, active, completed, dead_lettered, cancelled). Pending vs
scheduled depends on an instant: the record's ``ts`` during the fold, ``now`` for the
final state. A ``check`` callable (a policy, kept out of this module) may name problems
of each record given what the fold knew just before it (:class:`Before`); records the
fold cannot use are always problems.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from snerd.projections import events as ev
from snerd.projections import evolve
from snerd.projections.apply import Folder, record_time
from snerd.projections.delta import DeltaBuilder
from snerd.projections.events import (
    Claimed,
    ClaimReleased,
    Counters,
    DeadLettered,
    Deduplicated,
    Event,
    Progressed,
    Purged,
    RateWindow,
    Record,
    SnapshotHeader,
    Unusable,
    decode,
)
from snerd.projections.replay import BulkFolder
from snerd.projections.state import QueueState, empty, from_tables
from snerd.projections.task import Task, record_error
from snerd.projections.views.status import BLOCKED as BLOCKED_STATE
from snerd.projections.views.status import (
    CANCELLED,
    COMPLETED,
    DEAD_LETTERED,
    ENDED,
    PENDING,
    STATES,
    status_of,
)

UNUSABLE: Final = "unusable record: skipped by the fold"
SNERDMQ_UPSERT: Final = "snerdmq:upsert"  # the event name shown for a SnerdMQ state line
SNERDMQ_DELETED: Final = "snerdmq:deleted"  # ... and for one with deletedAt

_ENDED_AS: Final = {
    evolve.COMPLETED: COMPLETED,
    evolve.CANCELLED: CANCELLED,
    evolve.DEAD_LETTERED: DEAD_LETTERED,
}
"""A task that left the live table and the DLQ ended as what evolve counted it as."""


@dataclass(frozen=True, slots=True)
class Transition:
    """One record's effect on one task. Times are epoch seconds."""

    event: str
    seq: int | None
    ts: float | None
    daemon: str | None
    attempt: int | None
    reason: str | None
    error: str | None
    state: str  # the task's state right after this record
    derived: bool = False  # caused by another task's record (a DAG parent's)


@dataclass(slots=True)
class TaskHistory:
    """Everything the log says about one task id (or one DLQ key)."""

    id: str
    type: str | None = None
    transitions: list[Transition] = field(default_factory=list)
    history_len: int = 0  # records naming the task (kept or not; derived ones not counted)
    state: str | None = None
    attempts: int = 0  # the highest attempt number the log shows
    last_error: str | None = None  # the last error any of its records carried


@dataclass(frozen=True, slots=True)
class Problem:
    """Something a correct log would not contain. ``index`` counts records from 1."""

    index: int
    seq: int | None
    task_id: str | None
    message: str


@dataclass(frozen=True, slots=True)
class Before:
    """What the fold knew just before a record: what a :data:`Checker` may look at."""

    task: Task | None  # the record's task, if live
    dlq: Container[str]  # the DLQ's keys
    ended: str | None  # the task's final state if it had already ended
    in_snapshot: bool  # the record is a compaction's snapshot header or block


Checker = Callable[[Record, Before], Iterable[str]]
"""Names the problems of one record (an empty iterable when there are none)."""


@dataclass(slots=True)
class History:
    """The result of :func:`audit`."""

    tasks: dict[str, TaskHistory]
    state: QueueState  # the queue projection after the last record
    events: int  # records folded
    invalid: int  # records the fold could not use
    problems: list[Problem]

    def counts(self) -> dict[str, int]:
        """Task ids per final state, every state present."""
        out = dict.fromkeys(STATES, 0)
        for history in self.tasks.values():
            if history.state is not None:
                out[history.state] += 1
        return out


def _subject(event: Event) -> str | None:
    """The task id an event is about (for a purge: the DLQ key, as the fold reads it)."""
    if type(event) is Purged:
        return event.key
    if type(event) is Unusable:
        task_id = ev.task_id_of(event.record)
        return task_id if isinstance(task_id, str) and task_id else None
    task_id = getattr(event, "task_id", None)
    return task_id if isinstance(task_id, str) else None


def _ending(counted: Iterable[tuple[str, Event]], task_id: str) -> str | None:
    """How evolve counted the end of ``task_id`` in this step, if it did."""
    for metric, event in counted:
        if metric in _ENDED_AS and getattr(event, "task_id", None) == task_id:
            return _ENDED_AS[metric]
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def tally(
    history: TaskHistory, record: Record, event: str, state: str, task_attempt: int
) -> tuple[str | None, int | None]:
    """Count one record into a task's figures; return its (error, attempt)."""
    error = record_error(record)
    attempt = _int(record.get(ev.F_ATTEMPT))
    # SnerdMQ's lines record no claims: their retryCount is the best lower bound.
    retries = _int(record.get(ev.F_RETRY_COUNT)) if event.startswith("snerdmq") else None
    history.attempts = max(history.attempts, attempt or 0, task_attempt, retries or 0)
    history.type = _str(record.get(ev.F_TASK_TYPE)) or history.type
    history.last_error = error or history.last_error
    history.state = state
    history.history_len += 1
    return error, attempt


_LIGHT: Final = (Claimed, Progressed, ClaimReleased, Purged, RateWindow, Deduplicated, Counters)


def _opens_history(event: Event) -> bool:
    """Whether an event may start a task's history (a light event needs a known id)."""
    return not isinstance(event, _LIGHT)


class _Fold:
    """What both folds share: the task table, problems, and the clock. A record is
    judged as of its ``ts``, else the last one seen, else ``now``."""

    def __init__(self, now: float | None) -> None:
        self.tasks: dict[str, TaskHistory] = {}
        self.problems: list[Problem] = []
        self.events = 0
        self.clock: float | None = None  # the last ts seen (a caller may set it)
        self.now = now  # the clock for records before any ts (SnerdMQ lines have none)

    def feed(self, records: Iterable[Record]) -> None:
        for record in records:
            self.add(record)

    def add(self, record: Record) -> None:
        raise NotImplementedError

    def _tick(self, record: Record) -> None:
        self.events += 1
        at = record_time(record)
        if at is not None:
            self.clock = at

    def _instant(self) -> float | None:
        return self.now if self.clock is None else self.clock

    def _problem(self, record: Record, subject: str | None, message: str) -> None:
        seq = _int(record.get(ev.F_SEQ))
        self.problems.append(Problem(self.events, seq, subject, message))

    def _opened(self, event: Event, subject: str) -> TaskHistory | None:
        """The subject's history, created unless a light event names an unknown id."""
        history = self.tasks.get(subject)
        if history is None and _opens_history(event):
            history = self.tasks[subject] = TaskHistory(subject)
        return history

    def _settle(self, state: QueueState, now: float | None) -> History:
        """Final states as of ``now`` (default: the last ``ts``)."""
        now = self._instant() if now is None else now
        for task_id, history in self.tasks.items():
            task = state.tasks.get(task_id)
            if task is not None:
                history.state = status_of(task, now)
            elif task_id in state.dlq:
                history.state = DEAD_LETTERED
        return History(self.tasks, state, self.events, state.invalid, self.problems)


class Audit(_Fold):
    """Feed records in order, then :meth:`finish`. ``keep(task_id)`` says whose
    transitions to store (all by default); figures and final states are always kept."""

    def __init__(
        self,
        *,
        keep: Callable[[str], bool] | None = None,
        check: Checker | None = None,
        rebuild_every: int = 1 << 16,
        now: float | None = None,
    ) -> None:
        super().__init__(now)
        self.folder = Folder(empty())
        self.keep = keep
        self.check = check
        self.snapshot_left = 0  # records of a snapshot block still to come
        self.rebuild_every = rebuild_every  # records between rebuilds of the fold's heaps

    def add(self, record: Record) -> None:
        self._tick(record)
        event = decode(record)
        in_snapshot = self._snapshot_block(event)
        subject = _subject(event)
        if self.check is not None:
            self._check(record, subject, in_snapshot)
        self.folder.apply_event(event)
        if type(event) is Unusable:
            self._problem(record, subject, UNUSABLE)
        elif subject is not None:
            self._note(event, subject)
        self.folder.delta = DeltaBuilder()
        if self.events % self.rebuild_every == 0:
            self._rebuild()

    def finish(self, now: float | None = None) -> History:
        """The histories with final states as of ``now`` (default: the last ``ts``)."""
        return self._settle(self.folder.finish()[0], now)

    # --- one record -------------------------------------------------------------------

    def _snapshot_block(self, event: Event) -> bool:
        """Whether ``event`` belongs to a compaction's snapshot (header included)."""
        if type(event) is SnapshotHeader:
            self.snapshot_left = event.records
            return True
        if self.snapshot_left > 0:
            self.snapshot_left -= 1
            return True
        return False

    def _check(self, record: Record, subject: str | None, in_snapshot: bool) -> None:
        assert self.check is not None
        history = self.tasks.get(subject) if subject is not None else None
        ended = history.state if history is not None and history.state in ENDED else None
        task = self.folder.tasks.get(subject) if subject is not None else None
        before = Before(task, self.folder.dlq, ended, in_snapshot)
        for message in self.check(record, before):
            self._problem(record, subject, message)

    def _note(self, event: Event, subject: str) -> None:
        name = ev.event_name(event)
        history = self._opened(event, subject)
        if history is None:
            return  # a light event about an id never seen: nothing to attach it to
        state = self._state_of(subject, event, history.state)
        record = event.record
        self._append(history, record, name, state)
        key = event.key if type(event) is DeadLettered else None
        if key is not None and key != subject:
            entry = self.tasks.setdefault(key, TaskHistory(key))
            self._append(entry, record, name, DEAD_LETTERED)
        self._side_effects(record, subject, key, name)

    def _append(
        self,
        history: TaskHistory,
        record: Record,
        event: str,
        state: str,
        derived: bool = False,
    ) -> None:
        task = self.folder.tasks.get(history.id)
        error, attempt = tally(history, record, event, state, task.attempt if task else 0)
        if derived:
            history.history_len -= 1
        if self.keep is None or self.keep(history.id):
            history.transitions.append(
                Transition(
                    event=event,
                    seq=_int(record.get(ev.F_SEQ)),
                    ts=record_time(record),
                    daemon=_str(record.get(ev.F_DAEMON)),
                    attempt=attempt,
                    reason=_str(record.get(ev.F_REASON)),
                    error=error,
                    state=state,
                    derived=derived,
                )
            )

    def _state_of(self, task_id: str, event: Event, previous: str | None) -> str:
        task = self.folder.tasks.get(task_id)
        if task is not None:
            return status_of(task, self._instant())
        if task_id in self.folder.dlq or type(event) is Purged:
            return DEAD_LETTERED  # purged from the DLQ: it still ended as a failure
        return _ending(self.folder.delta.counted, task_id) or previous or COMPLETED

    def _side_effects(
        self, record: Record, subject: str, key: str | None, event: str
    ) -> None:
        """Tasks whose state this record changed without naming them (DAG children)."""
        delta = self.folder.delta
        moved = dict.fromkeys([*delta.ready, *delta.delayed, *delta.blocked])
        doomed = set(delta.doomed)
        for task_id in moved:
            history = self.tasks.get(task_id)
            task = self.folder.tasks.get(task_id)
            if task_id in (subject, key) or history is None or task is None:
                continue
            state = status_of(task, self._instant())
            if state == history.state:
                continue
            name = "blocked" if state == BLOCKED_STATE else "unblocked"
            why = "a parent was dead-lettered" if task_id in doomed else f"{event} of {subject}"
            keys = (ev.F_SEQ, ev.F_TS, ev.F_DAEMON)
            cause: dict[str, Any] = {k: record[k] for k in keys if k in record}
            self._append(history, {**cause, ev.F_REASON: why}, name, state, derived=True)

    def _rebuild(self) -> None:
        """Drop the stale heap entries an incremental fold accumulates (same state)."""
        state, _ = self.folder.finish()
        fresh = from_tables(
            state.tasks, state.dlq, state.windows,
            n=state.n, last_seq=state.last_seq, invalid=state.invalid,
            counters=state.counters, histograms=state.histograms,
        )  # fmt: skip
        self.folder = Folder(fresh)


class Summary(_Fold):
    """What :class:`Audit` reports per task (final state, attempts, last error, type,
    history length), without transitions, in a fraction of the time: the bulk fold
    plus a few dict operations per record. Property tests check both agree."""

    def __init__(self, *, now: float | None = None) -> None:
        super().__init__(now)
        self.counted: list[tuple[str, Event]] = []
        self.bulk = BulkFolder(on_count=lambda metric, event: self.counted.append((metric, event)))

    def add(self, record: Record) -> None:
        self._tick(record)
        event = decode(record)
        self.counted.clear()
        self.bulk.feed_events((event,))
        subject = _subject(event)
        if type(event) is Unusable:
            self._problem(record, subject, UNUSABLE)
        elif subject is not None:
            self._note(event, subject)

    def finish(self, now: float | None = None) -> History:
        """The figures with final states as of ``now`` (default: the last ``ts``)."""
        return self._settle(self.bulk.finish(), now)

    def _note(self, event: Event, subject: str) -> None:
        name = ev.event_name(event)
        record = event.record
        history = self._opened(event, subject)
        if history is None:
            return
        entry = self.bulk.live.get(subject)
        if entry is not None:
            state = PENDING  # a placeholder: live tasks get their state in finish()
        elif subject in self.bulk.dlq or type(event) is Purged:
            state = DEAD_LETTERED
        else:
            state = _ending(self.counted, subject) or history.state or COMPLETED
        tally(history, record, name, state, entry.attempt if entry else 0)
        key = event.key if type(event) is DeadLettered else None
        if key is not None and key != subject:
            live = self.bulk.live.get(key)
            keyed = self.tasks.setdefault(key, TaskHistory(key))
            tally(keyed, record, name, DEAD_LETTERED, live.attempt if live else 0)


def summarize(records: Iterable[Record], now: float | None = None) -> History:
    """:func:`audit` without transitions (and without checks), fast."""
    summary = Summary(now=now)
    summary.feed(records)
    return summary.finish(now)


def audit(
    records: Iterable[Record],
    now: float | None = None,
    *,
    keep: Callable[[str], bool] | None = None,
    check: Checker | None = None,
) -> History:
    """Every task's history from ``records``; final states as of ``now``."""
    auditor = Audit(keep=keep, check=check, now=now)
    auditor.feed(records)
    return auditor.finish(now)


def until(records: Iterable[Record], at: float) -> Iterator[Record]:
    """The records with ``ts <= at``; a record without ``ts`` inherits the last one seen
    (records before any ``ts`` count as early)."""
    clock: float | None = None
    for record in records:
        seen = record_time(record)
        if seen is not None:
            clock = seen
        if clock is None or clock <= at:
            yield record


def state_at(
    records: Iterable[Record],
    at: float,
    *,
    keep: Callable[[str], bool] | None = None,
    check: Checker | None = None,
) -> History:
    """The histories as they stood at instant ``at`` (see :func:`until`)."""
    return audit(until(records, at), at, keep=keep, check=check)
