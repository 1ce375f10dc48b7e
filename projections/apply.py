"""The incremental fold: the engine's projection, kept current one batch at a time.

:class:`Folder` is the :class:`~snerd.projections.evolve.Tables` of the queue
projection: the rules of ``evolve`` say what each event means, and this class keeps
every index (lanes, timers, DAG refs, fingerprints, claims by daemon) current and
collects the :class:`Delta`. Its working copy is the state's own persistent maps:
every write makes a new one (one call each, through :mod:`~snerd.projections.pmaps`),
so the input state stays valid, and :meth:`Folder.finish` puts them back together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from immutables import Map

from snerd.projections import heap
from snerd.projections.counters import CounterKey, Hist, HistKey, Totals
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
from snerd.projections.evolve import Entry, Tables, step, step_all, tally
from snerd.projections.pmaps import (
    EMPTY_SET,
    IdSet,
    assoc,
    dissoc,
    get,
    has,
    set_add,
    set_discard,
    set_has,
)
from snerd.projections.rates import extend_window
from snerd.projections.rules import phase_for
from snerd.projections.state import DeadLetter, QueueState
from snerd.projections.task import (
    ACTIVE,
    BLOCKED,
    DELAYED,
    READY,
    Claim,
    Lane,
    Task,
    lane_key,
    rebooked,
    timer_key,
    with_phase,
)


class Folder(Tables):
    """Applies records to a :class:`QueueState` and collects the :class:`Delta`."""

    __slots__ = ("any_doomed", "by_daemon", "counted", "delta", "dirty", "dlq", "doomed",
                 "fingerprints", "fresh", "lanes", "observations", "refs", "tasks", "timers",
                 "totals", "windows")  # fmt: skip
    # (n, last_seq and invalid are Tables' own slots: declared here again, compiled, the
    # base's copies would stay unset)

    def __init__(self, state: QueueState) -> None:
        self.tasks: Map[str, Task] = state.tasks
        self.dlq: Map[str, DeadLetter] = state.dlq
        self.lanes: Map[Lane, heap.Heap] = state.lanes
        self.timers: heap.Heap = state.timers
        self.refs: Map[str, IdSet[str]] = state.refs
        self.doomed: IdSet[str] = state.doomed
        self.fingerprints: Map[str, IdSet[str]] = state.fingerprints
        self.windows: Map[str, tuple[float, ...]] = state.windows
        self.by_daemon: Map[str, IdSet[str]] = state.by_daemon
        self.totals: Totals = state.totals
        self.n = state.n
        self.last_seq = state.last_seq
        self.invalid = state.invalid
        self.delta = DeltaBuilder()
        # This fold's tally, added to the totals at finish as one link (counters.Totals
        # adds the links up when read): a key for each count, a (key, seconds) for each
        # histogram sample, in the order seen.
        self.counted: list[CounterKey] = []
        self.observations: list[tuple[HistKey, float]] = []
        self.any_doomed = len(state.doomed) > 0  # skips the doomed set when it is empty
        self.dirty: list[Lane] = []  # lanes whose top may have gone stale in this fold
        # Keys entering each lane in this fold, merged in at finish as one sorted chain:
        # a burst of enqueues then costs the lane one child, not one per key (whose first
        # pop would pair them all up, once for every reader of this state).
        self.fresh: dict[Lane, list[Any]] = {}

    # --- feeding ----------------------------------------------------------------------

    def apply_event(self, event: Event) -> None:
        step(self, event)

    def feed(self, events: Iterable[Event]) -> None:
        step_all(self, events)

    def _settle(self) -> None:
        """Add this fold's counts and samples to the totals, as one tally (samples in
        the order seen, so histogram sums are the same to the bit as one observation at
        a time)."""
        if self.counted or self.observations:
            self.totals = self.totals.add(self.counted, self.observations)
            self.counted = []
            self.observations = []

    def finish(self) -> tuple[QueueState, Delta]:
        self._settle()
        tasks = self.tasks
        if self.fresh:
            lanes = self.lanes
            for lane, keys in self.fresh.items():
                # a key whose task left READY in this fold (claimed with its enqueue, as
                # a rule) is stale already: it never enters the heap to be popped again
                live = [key for key in keys if _current(get(tasks, key[2]), key[1], READY)]
                if live:
                    live.sort()  # (sorted already, as a rule: a fold's orders rise)
                    lanes = assoc(lanes, lane,
                                  heap.merge(get(lanes, lane), heap.from_sorted(live)))  # fmt: skip
            self.lanes = lanes
            self.fresh = {}
        if self.dirty:
            lanes = self.lanes
            for lane in set(self.dirty):  # only a lane whose task changed can go stale
                entries = get(lanes, lane)
                if entries is None:
                    continue
                cleaned = _clean(entries, tasks, READY)
                if cleaned is None:
                    lanes = dissoc(lanes, lane)
                elif cleaned is not entries:
                    lanes = assoc(lanes, lane, cleaned)
            self.lanes = lanes
        timers: heap.Heap = self.timers
        state = QueueState(
            tasks,
            self.dlq,
            self.lanes,
            timers if timers is None else _clean(timers, tasks, DELAYED),
            self.refs,
            self.doomed,
            self.fingerprints,
            self.windows,
            self.by_daemon,
            self.totals,
            self.n,
            self.last_seq,
            self.invalid,
        )
        return state, self.delta.freeze()

    # --- Tables (what evolve's rules call) ----------------------------------------------

    def entry(self, task_id: str) -> Task | None:
        task: Task | None = get(self.tasks, task_id)
        return task

    def count(self, metric: str, event: Event, entry: Entry | None) -> None:
        self.delta.counted.append((metric, event))
        key, seen = tally(metric, event, entry)
        self.counted.append(key)
        if seen is not None:
            self.observations.append(seen)

    def add_totals(self, counts: Mapping[CounterKey, int],
                   histograms: Mapping[HistKey, Hist]) -> None:  # fmt: skip
        self._settle()  # what came before the totals first: the sums' order is kept
        self.totals = self.totals.merged(counts, histograms)

    def upsert(self, event: TaskStateEvent, attempt: int) -> None:
        task_id = event.task_id
        old = get(self.tasks, task_id)
        task = event.task(self.n, attempt)
        if old is not None:
            self._unindex(old)
        task = self._placed(task)
        self.tasks = assoc(self.tasks, task_id, task)
        self._index(task)
        if old is None:
            self._touch_children(task_id)

    def dead_letter(self, event: DeadLettered | StateLine, key: str, reason: str,
                    at: float | None, attempt: int) -> None:  # fmt: skip
        task = event.task(self.n, attempt)
        self.dlq = assoc(self.dlq, key, DeadLetter(key, task, reason, task.last_error, at))
        self.delta.dead.append(key)
        self.remove(task.id)
        if key != task.id:
            self._touch_children(key)

    def remove(self, task_id: str) -> None:
        """The task left the live table (completed, cancelled or dead-lettered)."""
        old = get(self.tasks, task_id)
        if old is not None:
            self._unindex(old)
            self.tasks = dissoc(self.tasks, task_id)
            self.delta.finished.append(task_id)
        self._touch_children(task_id)

    def drop_dead(self, key: str) -> None:
        if has(self.dlq, key):
            self.dlq = dissoc(self.dlq, key)
            self._touch_children(key)

    def claim(self, task_id: str, claim: Claim) -> None:
        task = get(self.tasks, task_id)
        self._unindex(task)
        task = rebooked(task, task.order, ACTIVE, claim.attempt, claim, None)
        self.tasks = assoc(self.tasks, task_id, task)
        self._index(task)
        self.delta.claimed.append(task_id)

    def progress(self, task_id: str, data: Any) -> None:
        task = get(self.tasks, task_id)
        task = rebooked(task, task.order, task.phase, task.attempt, task.claim, data)
        self.tasks = assoc(self.tasks, task_id, task)
        self.delta.progress.append((task_id, data))

    def release(self, task_id: str) -> None:
        task = get(self.tasks, task_id)
        self._unindex(task)
        # A fresh order: the old heap entry may still sit in its lane.
        task = self._placed(rebooked(task, self.n, task.phase, task.attempt, None, None))
        self.tasks = assoc(self.tasks, task_id, task)
        self._index(task)
        self.delta.released.append(task_id)

    def window_add(self, group: str, times: tuple[float, ...]) -> None:
        window = extend_window(get(self.windows, group) or (), times)
        if window:
            self.windows = assoc(self.windows, group, window)

    # --- indexes --------------------------------------------------------------------------

    def _placed(self, task: Task) -> Task:
        """The task with the phase the rules give it (running tasks keep theirs)."""
        if task.phase == ACTIVE and task.claim is not None:
            return task
        if task.parents:
            phase, doomed = phase_for(task, self.tasks, self.dlq)
        else:  # phase_for without parents: no lookups to make
            phase, doomed = (READY if task.not_before is None else DELAYED), False
        if doomed:
            if not set_has(self.doomed, task.id):
                self.doomed = set_add(self.doomed, task.id)
                self.any_doomed = True
                self.delta.doomed.append(task.id)
        elif self.any_doomed:
            self.doomed = set_discard(self.doomed, task.id)
        return task if task.phase == phase else with_phase(task, phase)

    def _index(self, task: Task) -> None:
        self._index_phase(task)
        task_id = task.id
        claim = task.claim
        if claim is not None and task.phase == ACTIVE:
            daemon = claim.daemon
            owned = get(self.by_daemon, daemon) or EMPTY_SET
            self.by_daemon = assoc(self.by_daemon, daemon, set_add(owned, task_id))
        for parent in task.parents:
            children = get(self.refs, parent) or EMPTY_SET
            self.refs = assoc(self.refs, parent, set_add(children, task_id))
        if task.auto_dedupe and task.fingerprint:
            holders = get(self.fingerprints, task.fingerprint) or EMPTY_SET
            self.fingerprints = assoc(self.fingerprints, task.fingerprint,
                                      set_add(holders, task_id))  # fmt: skip

    def _unindex(self, task: Task) -> None:
        """Drop the task from every index but the heaps (their entries go stale)."""
        task_id = task.id
        if task.phase == READY:
            self.dirty.append(task.lane)
        claim = task.claim
        if claim is not None:
            self.by_daemon = _without(self.by_daemon, claim.daemon, task_id)
        for parent in task.parents:
            self.refs = _without(self.refs, parent, task_id)
        fingerprint = task.fingerprint
        if fingerprint:
            self.fingerprints = _without(self.fingerprints, fingerprint, task_id)
        if self.any_doomed:
            self.doomed = set_discard(self.doomed, task_id)

    def _touch_children(self, parent_id: str) -> None:
        """A parent joined or left the live table or the DLQ: re-place its children."""
        children = get(self.refs, parent_id)
        if not children:
            return
        for child_id in children:
            child = get(self.tasks, child_id)
            if child is None or child.phase == ACTIVE:
                continue
            placed = self._placed(child)
            if placed.phase != child.phase:
                if child.phase == READY:
                    self.dirty.append(child.lane)
                self.tasks = assoc(self.tasks, child_id, placed)
                self._index_phase(placed)

    def _index_phase(self, task: Task) -> None:
        phase = task.phase
        if phase == READY:
            keys = self.fresh.get(task.lane)
            if keys is None:
                self.fresh[task.lane] = [lane_key(task)]
            else:
                keys.append(lane_key(task))
            self.delta.ready.append(task.id)
        elif phase == DELAYED:
            self.timers = heap.push(self.timers, timer_key(task))
            self.delta.delayed.append(task.id)
        elif phase == BLOCKED:
            self.delta.blocked.append(task.id)


def _without(index: Map[str, IdSet[str]], key: str, task_id: str) -> Map[str, IdSet[str]]:
    """``index`` with ``task_id`` gone from the set under ``key`` (and an emptied set gone)."""
    held: IdSet[str] | None = get(index, key)
    if held is None:
        return index
    rest = set_discard(held, task_id)
    if rest is held:
        return index
    out: Map[str, IdSet[str]] = assoc(index, key, rest) if rest else dissoc(index, key)
    return out


def _clean(entries: heap.Heap, tasks: Mapping[str, Task], phase: str) -> heap.Heap:
    """Pop stale tops, so that the heap's top (if any) is a task in ``phase`` under the
    order it was pushed with. Lanes hold READY tasks; timers DELAYED ones (a timer that
    came due stays on top until its task is claimed, then leaves with the next fold)."""
    while entries is not None:
        _, order, task_id = entries[1]
        if _current(get(tasks, task_id), order, phase):
            return entries
        entries = heap.pop(entries)
    return None


def _current(task: Task | None, order: int, phase: str) -> bool:
    """Whether a heap entry of this order is current: its task is in ``phase`` with it."""
    return task is not None and task.phase == phase and task.order == order
