"""The incremental fold: the engine's projection, kept current one batch at a time.

:class:`Folder` is the :class:`~snerd.projections.evolve.Tables` of the queue
projection: the rules of ``evolve`` say what each event means, and this class keeps
every index (lanes, timers, DAG refs, fingerprints, claims by daemon) current and
collects the :class:`Delta`. It is local to one :func:`state.fold` call and mutates
nothing it did not create, so the input state stays valid.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pyrsistent import pset

from snerd.projections import heap
from snerd.projections.cells import MapCell, SetCell
from snerd.projections.counters import CounterKey, Hist, HistKey, merged, observed
from snerd.projections.delta import Delta, DeltaBuilder
from snerd.projections.events import (
    MAX_MS as MAX_MS,
)
from snerd.projections.events import (
    DeadLettered,
    Event,
    StateLine,
    TaskStateEvent,
)
from snerd.projections.events import (
    ms_time as ms_time,
)
from snerd.projections.events import (
    record_time as record_time,
)
from snerd.projections.evolve import step, step_all, tally
from snerd.projections.rates import extend_window
from snerd.projections.rules import phase_for
from snerd.projections.state import (
    DeadLetter,
    QueueState,
    lane_key,
    timer_key,
)
from snerd.projections.task import ACTIVE, BLOCKED, DELAYED, READY, Claim, Lane, Task, with_


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
        self.counters = MapCell(state.counters)
        self.histograms = MapCell(state.histograms)
        self.n = state.n
        self.last_seq = state.last_seq
        self.invalid = state.invalid
        self.delta = DeltaBuilder()
        self.dirty: set[Lane] = set()  # lanes whose top may have gone stale in this fold

    # --- feeding ----------------------------------------------------------------------

    def apply_event(self, event: Event) -> None:
        step(self, event)

    def feed(self, events: Iterable[Event]) -> None:
        step_all(self, events)

    def finish(self) -> tuple[QueueState, Delta]:
        tasks = self.tasks.persistent()
        lanes = self.lanes
        for lane in self.dirty:  # only a lane whose task changed can have a stale top
            if lane not in lanes:
                continue
            cleaned = _clean(lanes[lane], tasks, READY)
            if cleaned is None:
                del lanes[lane]
            elif cleaned is not lanes[lane]:
                lanes[lane] = cleaned
        state = QueueState(
            tasks=tasks,
            dlq=self.dlq.persistent(),
            lanes=lanes.persistent(),
            timers=_clean(self.timers, tasks, DELAYED),
            refs=self.refs.persistent(),
            doomed=self.doomed.persistent(),
            fingerprints=self.fingerprints.persistent(),
            windows=self.windows.persistent(),
            by_daemon=self.by_daemon.persistent(),
            counters=self.counters.persistent(),
            histograms=self.histograms.persistent(),
            n=self.n,
            last_seq=self.last_seq,
            invalid=self.invalid,
        )
        return state, self.delta.freeze()

    # --- Tables (what evolve's rules call) ----------------------------------------------

    def entry(self, task_id: str) -> Task | None:
        return self.tasks.get(task_id)

    def count(self, metric: str, event: Event) -> None:
        self.delta.counted.append((metric, event))
        task_id = getattr(event, "task_id", None)
        key, seen = tally(metric, event, self.tasks.get(task_id) if task_id else None)
        self.counters[key] = (self.counters.get(key) or 0) + 1
        if seen is not None:
            self.histograms[seen[0]] = observed(self.histograms.get(seen[0]), seen[1])

    def add_totals(self, counts: Mapping[CounterKey, int],
                   histograms: Mapping[HistKey, Hist]) -> None:  # fmt: skip
        for key, n in counts.items():
            self.counters[key] = (self.counters.get(key) or 0) + n
        for hkey, hist in histograms.items():
            self.histograms[hkey] = merged(self.histograms.get(hkey), hist)

    def upsert(self, event: TaskStateEvent, attempt: int) -> None:
        old = self.tasks.get(event.task_id)
        task = event.task(self.n, attempt)
        if old is not None:
            self._unindex(old)
        task = self._placed(task)
        self.tasks[task.id] = task
        self._index(task)
        if old is None:
            self._touch_children(task.id)

    def dead_letter(self, event: DeadLettered | StateLine, key: str, reason: str,
                    at: float | None, attempt: int) -> None:  # fmt: skip
        task = event.task(self.n, attempt)
        self.dlq[key] = DeadLetter(key, task, reason, task.last_error, at)
        self.delta.dead.append(key)
        self.remove(task.id)
        if key != task.id:
            self._touch_children(key)

    def remove(self, task_id: str) -> None:
        """The task left the live table (completed, cancelled or dead-lettered)."""
        old = self.tasks.get(task_id)
        if old is not None:
            self._unindex(old)
            del self.tasks[task_id]
            self.delta.finished.append(task_id)
        self._touch_children(task_id)

    def drop_dead(self, key: str) -> None:
        if key in self.dlq:
            del self.dlq[key]
            self._touch_children(key)

    def claim(self, task_id: str, claim: Claim) -> None:
        task = self.tasks[task_id]
        self._unindex(task)
        task = with_(task, phase=ACTIVE, attempt=claim.attempt, claim=claim, progress=None)
        self.tasks[task_id] = task
        self._index(task)
        self.delta.claimed.append(task_id)

    def progress(self, task_id: str, data: Any) -> None:
        self.tasks[task_id] = with_(self.tasks[task_id], progress=data)
        self.delta.progress.append((task_id, data))

    def release(self, task_id: str) -> None:
        task = self.tasks[task_id]
        self._unindex(task)
        # A fresh order: the old heap entry may still sit in its lane.
        task = self._placed(with_(task, claim=None, order=self.n, progress=None))
        self.tasks[task_id] = task
        self._index(task)
        self.delta.released.append(task_id)

    def window_add(self, group: str, times: tuple[float, ...]) -> None:
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
        return task if task.phase == phase else with_(task, phase=phase)

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
        if task.phase == READY:
            self.dirty.add(task.lane)
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
                if child.phase == READY:
                    self.dirty.add(child.lane)
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


def _clean(entries: heap.Heap, tasks: Mapping[str, Task], phase: str) -> heap.Heap:
    """Pop stale tops, so that the heap's top (if any) is a task in ``phase`` under the
    order it was pushed with. Lanes hold READY tasks; timers DELAYED ones (a timer that
    came due stays on top until its task is claimed, then leaves with the next fold)."""
    while entries is not None:
        _, order, task_id = heap.top(entries)
        task = tasks.get(task_id)
        if task is not None and task.phase == phase and task.order == order:
            return entries
        entries = heap.pop(entries)
    return None
