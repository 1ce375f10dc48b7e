"""Folding a whole log at once: the fast path for start-up and the replay tool.

The incremental fold (``apply.py``) keeps every index current after each record.
Replaying a million records does not need that: only the tasks still live at the
end need a :class:`Task`, and indexes can be built once. :class:`BulkFolder` keeps
the latest record per live task plus its claim bookkeeping in plain dicts, and
hands the survivors to :func:`state.from_tables`. It follows the same rules as the
incremental fold; property tests check that both reach the same state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from snerd.errors import EventError
from snerd.projections import events as ev
from snerd.projections.apply import claim_fields, ms_time, ms_times, record_time
from snerd.projections.rates import extend_window
from snerd.projections.state import DeadLetter, QueueState, from_tables
from snerd.projections.task import ACTIVE, Claim, Task, require_ids, task_from_record

_UPSERTS = frozenset({ev.ENQUEUED, ev.RETRY_SCHEDULED, ev.RESCHEDULED, ev.REQUEUED})
_TOMBSTONES = frozenset({ev.SUCCEEDED, ev.CANCELLED})


class _Live:
    """A live task's latest full-state record plus what light events did since.

    The record is turned into a :class:`Task` only if the task is still live at
    the end (most tasks of a long log are not).
    """

    __slots__ = ("attempt", "claim", "order", "progress", "record")

    def __init__(self, record: Mapping[str, Any], order: int, attempt: int) -> None:
        self.record = record
        self.order = order
        self.attempt = attempt
        self.claim: Claim | None = None
        self.progress: Any = None

    def materialize(self) -> Task:
        claim = self.claim
        task = task_from_record(self.record, order=self.order)
        return replace(
            task,
            attempt=self.attempt,
            claim=claim,
            phase=ACTIVE if claim is not None else task.phase,
            progress=self.progress if claim is not None else None,
        )


class _Dead:
    """A DLQ entry, built into a :class:`DeadLetter` at the end."""

    __slots__ = ("at", "attempt", "order", "reason", "record")

    def __init__(
        self, record: Mapping[str, Any], order: int, attempt: int, reason: str, at: float | None
    ) -> None:
        self.record, self.order, self.attempt = record, order, attempt
        self.reason, self.at = reason, at

    def build(self, key: str) -> DeadLetter:
        task = replace(task_from_record(self.record, order=self.order), attempt=self.attempt)
        return DeadLetter(key, task, self.reason, task.last_error, self.at)


def _task_id(record: Mapping[str, Any]) -> str:
    value = record.get(ev.F_TASK_ID)
    if not isinstance(value, str) or not value:
        raise EventError(f"{ev.F_TASK_ID} must be a non-empty string")
    return value


def _attempt(record: Mapping[str, Any]) -> int:
    value = record.get(ev.F_ATTEMPT)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class BulkFolder:
    """Feed records in chunks, then :meth:`finish` into a :class:`QueueState`."""

    def __init__(self) -> None:
        self.live: dict[str, _Live] = {}
        self.dlq: dict[str, _Dead] = {}
        self.windows: dict[str, list[float]] = {}
        self.n = 0
        self.last_seq = 0
        self.invalid = 0

    def feed(self, records: Iterable[Mapping[str, Any]]) -> None:
        for record in records:
            self.n += 1
            seq = record.get(ev.F_SEQ)
            if isinstance(seq, int) and not isinstance(seq, bool) and seq > self.last_seq:
                self.last_seq = seq
            try:
                self._apply(record)
            except (EventError, TypeError, ValueError, OverflowError):
                self.invalid += 1

    def finish(self) -> QueueState:
        tasks = {task_id: entry.materialize() for task_id, entry in self.live.items()}
        dlq = {key: entry.build(key) for key, entry in self.dlq.items()}
        windows = {g: self._trimmed(t) for g, t in self.windows.items()}
        return from_tables(
            tasks, dlq, windows, n=self.n, last_seq=self.last_seq, invalid=self.invalid
        )

    # --- one record ---------------------------------------------------------------

    def _apply(self, record: Mapping[str, Any]) -> None:
        event = record.get(ev.F_EVENT)
        if event in _TOMBSTONES:
            self.live.pop(_task_id(record), None)
        elif event in _UPSERTS:
            task_id, _ = require_ids(record)
            if event == ev.REQUEUED:
                self.dlq.pop(str(record.get(ev.F_DLQ_KEY) or task_id), None)
            self._upsert(task_id, record)
        elif event == ev.CLAIMED:
            self._claimed(record)
        elif event == ev.PROGRESSED:
            self._progressed(record)
        elif event == ev.DEAD_LETTERED:
            task_id, _ = require_ids(record)
            key = str(record.get(ev.F_DLQ_KEY) or task_id)
            reason = str(record.get(ev.F_REASON) or ev.REASON_MAX_RETRIES)
            self._dead_letter(task_id, record, key, reason, record_time(record), _attempt(record))
        elif event is None:
            self._snerdmq_line(record)
        else:
            self._rare(event, record)

    def _rare(self, event: Any, record: Mapping[str, Any]) -> None:
        if event == ev.CLAIM_RELEASED:
            entry = self.live.get(_task_id(record))
            claim = entry.claim if entry is not None else None
            if (
                entry is not None
                and claim is not None
                and (record.get(ev.F_ATTEMPT, claim.attempt) == claim.attempt)
            ):
                entry.claim = None
                entry.progress = None
                entry.order = self.n
        elif event == ev.PURGED:
            self.dlq.pop(str(record.get(ev.F_DLQ_KEY) or _task_id(record)), None)
        elif event == ev.RATE_WINDOW:
            group = record.get(ev.F_GROUP)
            if not isinstance(group, str) or not group:
                raise EventError(f"{ev.F_GROUP} must be a non-empty string")
            self._window_add(group, ms_times(record.get(ev.F_TIMES)))
        elif event != ev.SNAPSHOT:
            self.invalid += 1

    def _snerdmq_line(self, record: Mapping[str, Any]) -> None:
        task = task_from_record(record, order=self.n)
        if not record.get(ev.F_DELETED_AT):
            self._upsert(task.id, record)
        elif task.last_error and task.retry_count >= task.max_retries:
            self._dead_letter(task.id, record, task.id, ev.REASON_MAX_RETRIES, None, attempt=0)
        else:
            self.live.pop(task.id, None)

    def _upsert(self, task_id: str, record: Mapping[str, Any]) -> None:
        old = self.live.get(task_id)
        attempt = _attempt(record)
        if old is not None:
            attempt = max(attempt, old.attempt)
        self.live[task_id] = _Live(record, self.n, attempt)

    def _dead_letter(
        self, task_id: str, record: Mapping[str, Any], key: str, reason: str,
        at: float | None, attempt: int,
    ) -> None:  # fmt: skip
        old = self.live.pop(task_id, None)
        if old is not None:
            attempt = max(attempt, old.attempt)
        self.dlq[key] = _Dead(record, self.n, attempt, reason, at)

    def _claimed(self, record: Mapping[str, Any]) -> None:
        task_id, daemon, attempt = claim_fields(record)
        at = record_time(record)
        group = record.get(ev.F_GROUP)
        if group and at is not None:
            self._window_add(str(group), [at])
        entry = self.live.get(task_id)
        if entry is None or entry.claim is not None:
            return
        attempt = entry.attempt + 1 if attempt is None else attempt
        lease_until = ms_time(record.get(ev.F_LEASE_UNTIL))
        entry.claim = Claim(daemon, attempt, at or 0.0, lease_until)
        entry.attempt = attempt
        entry.progress = None

    def _progressed(self, record: Mapping[str, Any]) -> None:
        entry = self.live.get(_task_id(record))
        if entry is None or entry.claim is None:
            return
        attempt = record.get(ev.F_ATTEMPT)
        if attempt is not None and attempt != entry.claim.attempt:
            return
        entry.progress = record.get(ev.F_DATA)

    def _window_add(self, group: str, times: list[float]) -> None:
        window = self.windows.setdefault(group, [])
        window.extend(times)
        if len(window) > 4096:
            self.windows[group] = self._trimmed(window)

    @staticmethod
    def _trimmed(times: list[float]) -> list[float]:
        return list(extend_window((), times))


def bulk_fold(records: Iterable[Mapping[str, Any]]) -> QueueState:
    """The state :func:`state.fold` reaches from the empty state, built in one pass."""
    folder = BulkFolder()
    folder.feed(records)
    return folder.finish()
