"""The incremental fold: one record at a time, through evolvers, frozen at the end.

:class:`Folder` is local to one :func:`state.fold` call; it mutates nothing it did
not create, so the input state stays valid. Each event type has one small method.
A record the fold cannot use is counted in ``invalid`` and skipped, never fatal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pyrsistent import pset

from snerd.errors import EventError
from snerd.projections import events as ev
from snerd.projections import heap
from snerd.projections.cells import MapCell, SetCell
from snerd.projections.delta import Delta, DeltaBuilder
from snerd.projections.rates import extend_window
from snerd.projections.rules import phase_for
from snerd.projections.state import (
    DeadLetter,
    QueueState,
    lane_key,
    timer_key,
)
from snerd.projections.task import ACTIVE, BLOCKED, DELAYED, READY, Claim, Task, task_from_record

MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the last instant RFC 3339 writes


def ms_time(value: Any) -> float | None:
    """A time in integer ms (``ts``, ``leaseUntil``, rate ``times``) as epoch seconds.

    None unless a number in [0, MAX_MS]: a corrupt value (1e308, a boolean) must not
    reach a snapshot line that JSON or RFC 3339 cannot write.
    """
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= MAX_MS:
        return value / 1000.0
    return None


def record_time(record: Mapping[str, Any]) -> float | None:
    """The record's ``ts`` (integer milliseconds) in seconds, or None."""
    return ms_time(record.get(ev.F_TS))


def ms_times(values: Any) -> list[float]:
    """A ``times`` list (integer ms) in seconds; raises EventError if any is unusable."""
    if not isinstance(values, list):
        raise EventError(f"{ev.F_TIMES} must be a list")
    times: list[float] = []
    for value in values:
        seconds = ms_time(value)
        if seconds is None:
            raise EventError(f"{ev.F_TIMES} must hold integer milliseconds, got {value!r}")
        times.append(seconds)
    return times


def claim_fields(record: Mapping[str, Any]) -> tuple[str, str, int | None]:
    """(taskId, daemon, attempt or None) of a claim; EventError if it is unusable."""
    attempt = record.get(ev.F_ATTEMPT)
    if attempt is not None and (type(attempt) is not int or attempt < 1):
        raise EventError(f"{ev.F_ATTEMPT} must be an integer >= 1")
    return _str(record, ev.F_TASK_ID), _str(record, ev.F_DAEMON), attempt


def _str(record: Mapping[str, Any], key: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value:
        raise EventError(f"{key} must be a non-empty string")
    return value


def _int(record: Mapping[str, Any], key: str, default: int = 0) -> int:
    value = record.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise EventError(f"{key} must be an integer")
    return value


class Folder:
    """Applies records to a :class:`QueueState` and collects the :class:`Delta`."""

    def __init__(self, state: QueueState) -> None:
        self.tasks = MapCell(state.tasks)
        self.dlq = MapCell(state.dlq)
        self.lanes = MapCell(state.lanes)
        self.timers = state.timers
        self.refs = MapCell(state.refs)
        self.doomed = SetCell(state.doomed)
        self.fingerprints = MapCell(state.fingerprints)
        self.windows = MapCell(state.windows)
        self.by_daemon = MapCell(state.by_daemon)
        self.n = state.n
        self.last_seq = state.last_seq
        self.invalid = state.invalid
        self.delta = DeltaBuilder()

    # --- dispatch -------------------------------------------------------------------

    def apply(self, record: Mapping[str, Any]) -> None:
        self.n += 1
        seq = record.get(ev.F_SEQ)
        if isinstance(seq, int) and not isinstance(seq, bool) and seq > self.last_seq:
            self.last_seq = seq
        event = record.get(ev.F_EVENT)
        try:
            if event is None:
                self._snerdmq_line(record)
            elif event in ev.FULL_STATE_EVENTS:
                self._full_state(event, record)
            elif event == ev.CLAIMED:
                self._claimed(record)
            elif event == ev.PROGRESSED:
                self._progressed(record)
            elif event == ev.CLAIM_RELEASED:
                self._released(record)
            elif event == ev.PURGED:
                self._purged(record)
            elif event == ev.RATE_WINDOW:
                self._rate_window(record)
            elif event != ev.SNAPSHOT:
                self.invalid += 1  # an event type from the future: skip it
        except (EventError, TypeError, ValueError, OverflowError):
            self.invalid += 1

    def finish(self) -> tuple[QueueState, Delta]:
        tasks = self.tasks.persistent()
        lanes = self.lanes
        for lane in lanes:  # iterates the map as it was; deleting is safe
            cleaned = _clean_lane(lanes[lane], tasks)
            if cleaned is None:
                del lanes[lane]
            elif cleaned is not lanes[lane]:
                lanes[lane] = cleaned
        state = QueueState(
            tasks=tasks,
            dlq=self.dlq.persistent(),
            lanes=lanes.persistent(),
            timers=self.timers,
            refs=self.refs.persistent(),
            doomed=self.doomed.persistent(),
            fingerprints=self.fingerprints.persistent(),
            windows=self.windows.persistent(),
            by_daemon=self.by_daemon.persistent(),
            n=self.n,
            last_seq=self.last_seq,
            invalid=self.invalid,
        )
        return state, self.delta.freeze()

    # --- full-state events -------------------------------------------------------------

    def _snerdmq_line(self, record: Mapping[str, Any]) -> None:
        task = task_from_record(record, order=self.n)
        if record.get(ev.F_DELETED_AT):
            if task.last_error and task.retry_count >= task.max_retries:
                self._dead_letter(task, task.id, ev.REASON_MAX_RETRIES, None)
            else:
                self._remove(task.id)
        else:
            self._put_live(task, record)

    def _full_state(self, event: str, record: Mapping[str, Any]) -> None:
        if event in (ev.SUCCEEDED, ev.CANCELLED):
            self._remove(_str(record, ev.F_TASK_ID))  # a tombstone needs only the id
            return
        task = task_from_record(record, order=self.n)
        if event == ev.DEAD_LETTERED:
            attempt = record.get(ev.F_ATTEMPT)  # a snapshot's DLQ line carries the count
            if isinstance(attempt, int) and not isinstance(attempt, bool):
                task = replace(task, attempt=attempt)
            key = record.get(ev.F_DLQ_KEY) or task.id
            reason = record.get(ev.F_REASON) or ev.REASON_MAX_RETRIES
            self._dead_letter(task, str(key), str(reason), record_time(record))
            return
        if event == ev.REQUEUED:
            key = str(record.get(ev.F_DLQ_KEY) or task.id)
            if key in self.dlq:
                del self.dlq[key]
                self._touch_children(key)
        self._put_live(task, record)

    def _put_live(self, task: Task, record: Mapping[str, Any]) -> None:
        old = self.tasks.get(task.id)
        attempt = record.get(ev.F_ATTEMPT)
        attempts = attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else 0
        if old is not None:
            self._unindex(old)
            attempts = max(attempts, old.attempt)
        task = replace(task, attempt=attempts)
        task = self._placed(task)
        self.tasks[task.id] = task
        self._index(task)
        if old is None:
            self._touch_children(task.id)

    def _dead_letter(self, task: Task, key: str, reason: str, at: float | None) -> None:
        old = self.tasks.get(task.id)
        if old is not None:
            task = replace(task, attempt=max(task.attempt, old.attempt))
        self.dlq[key] = DeadLetter(key, task, reason, task.last_error, at)
        self.delta.dead.append(key)
        self._remove(task.id)
        if key != task.id:
            self._touch_children(key)

    def _remove(self, task_id: str) -> None:
        """The task left the live table (completed, cancelled or dead-lettered)."""
        old = self.tasks.get(task_id)
        if old is not None:
            self._unindex(old)
            del self.tasks[task_id]
            self.delta.finished.append(task_id)
        self._touch_children(task_id)

    # --- light events ------------------------------------------------------------------

    def _claimed(self, record: Mapping[str, Any]) -> None:
        task_id, daemon, attempt = claim_fields(record)  # an unusable claim changes nothing
        at = record_time(record)
        task = self.tasks.get(task_id)
        group = record.get(ev.F_GROUP)  # only a claim that names its group counts
        if group and at is not None:
            self._window_add(str(group), (at,))
        if task is None or task.phase == ACTIVE:
            return
        attempt = task.attempt + 1 if attempt is None else attempt
        lease_until = ms_time(record.get(ev.F_LEASE_UNTIL))
        claim = Claim(daemon, attempt, at or 0.0, lease_until)
        self._unindex(task)
        task = replace(task, phase=ACTIVE, attempt=attempt, claim=claim, progress=None)
        self.tasks[task_id] = task
        self._index(task)
        self.delta.claimed.append(task_id)

    def _progressed(self, record: Mapping[str, Any]) -> None:
        task_id = _str(record, ev.F_TASK_ID)
        task = self.tasks.get(task_id)
        attempt = record.get(ev.F_ATTEMPT)
        if task is None or task.phase != ACTIVE:
            return
        if attempt is not None and task.claim is not None and attempt != task.claim.attempt:
            return
        data = record.get(ev.F_DATA)
        self.tasks[task_id] = replace(task, progress=data)
        self.delta.progress.append((task_id, data))

    def _released(self, record: Mapping[str, Any]) -> None:
        task_id = _str(record, ev.F_TASK_ID)
        task = self.tasks.get(task_id)
        if task is None or task.phase != ACTIVE or task.claim is None:
            return
        if record.get(ev.F_ATTEMPT, task.claim.attempt) != task.claim.attempt:
            return
        self._unindex(task)
        # A fresh order: the old heap entry may still sit in its lane.
        task = self._placed(replace(task, claim=None, order=self.n, progress=None))
        self.tasks[task_id] = task
        self._index(task)
        self.delta.released.append(task_id)

    def _purged(self, record: Mapping[str, Any]) -> None:
        key = str(record.get(ev.F_DLQ_KEY) or _str(record, ev.F_TASK_ID))
        if key in self.dlq:
            del self.dlq[key]
            self._touch_children(key)

    def _rate_window(self, record: Mapping[str, Any]) -> None:
        group = _str(record, ev.F_GROUP)
        self._window_add(group, tuple(ms_times(record.get(ev.F_TIMES))))

    def _window_add(self, group: str, times: tuple[float, ...]) -> None:
        window = extend_window(self.windows.get(group) or (), times)
        if window:
            self.windows[group] = window

    # --- indexes --------------------------------------------------------------------------

    def _placed(self, task: Task) -> Task:
        """The task with the phase the rules give it (running tasks keep theirs)."""
        if task.phase == ACTIVE and task.claim is not None:
            return task
        phase, doomed = phase_for(task, self.tasks, self.dlq)
        if doomed:
            if task.id not in self.doomed:
                self.doomed.add(task.id)
                self.delta.doomed.append(task.id)
        elif task.id in self.doomed:
            self.doomed.remove(task.id)
        return task if task.phase == phase else replace(task, phase=phase)

    def _index(self, task: Task) -> None:
        self._index_phase(task)
        if task.phase == ACTIVE and task.claim is not None:
            owned = self.by_daemon.get(task.claim.daemon) or pset()
            self.by_daemon[task.claim.daemon] = owned.add(task.id)
        for parent in task.parents:
            self.refs[parent] = (self.refs.get(parent) or pset()).add(task.id)
        if task.auto_dedupe and task.fingerprint:
            holders = self.fingerprints.get(task.fingerprint) or pset()
            self.fingerprints[task.fingerprint] = holders.add(task.id)

    def _unindex(self, task: Task) -> None:
        """Drop the task from every index but the heaps (their entries go stale)."""
        if task.claim is not None:
            owned = self.by_daemon.get(task.claim.daemon)
            if owned is not None and task.id in owned:
                owned = owned.remove(task.id)
                if owned:
                    self.by_daemon[task.claim.daemon] = owned
                else:
                    del self.by_daemon[task.claim.daemon]
        for parent in task.parents:
            children = self.refs.get(parent)
            if children is not None and task.id in children:
                children = children.remove(task.id)
                if children:
                    self.refs[parent] = children
                else:
                    del self.refs[parent]
        fingerprint = task.fingerprint
        holders = self.fingerprints.get(fingerprint) if fingerprint else None
        if fingerprint and holders is not None and task.id in holders:
            holders = holders.remove(task.id)
            if holders:
                self.fingerprints[fingerprint] = holders
            else:
                del self.fingerprints[fingerprint]
        if task.id in self.doomed:
            self.doomed.remove(task.id)

    def _touch_children(self, parent_id: str) -> None:
        """A parent joined or left the live table or the DLQ: re-place its children."""
        for child_id in self.refs.get(parent_id) or ():
            child = self.tasks.get(child_id)
            if child is None or child.phase == ACTIVE:
                continue
            placed = self._placed(child)
            if placed.phase != child.phase:
                self.tasks[child_id] = placed
                self._index_phase(placed)

    def _index_phase(self, task: Task) -> None:
        if task.phase == READY:
            self.lanes[task.lane] = heap.push(self.lanes.get(task.lane), lane_key(task))
            self.delta.ready.append(task.id)
        elif task.phase == DELAYED:
            self.timers = heap.push(self.timers, timer_key(task))
            self.delta.delayed.append(task.id)
        elif task.phase == BLOCKED:
            self.delta.blocked.append(task.id)


def _clean_lane(lane: heap.Heap, tasks: Mapping[str, Task]) -> heap.Heap:
    """Pop stale tops so that a lane's top, if any, is a READY task."""
    while lane is not None:
        _, order, task_id = heap.top(lane)
        task = tasks.get(task_id)
        if task is not None and task.phase == READY and task.order == order:
            return lane
        lane = heap.pop(lane)
    return None
