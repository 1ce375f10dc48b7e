"""The queue projection: every index the dispatcher needs, folded from the log.

``fold(state, records) -> (state, delta)`` is pure: no I/O, no clock. Time arrives
in records (``ts``) or as the ``now`` argument of :func:`advance`, which moves due
timers into the ready heaps. The state is immutable (persistent maps: ``immutables``'
HAMT for the tables, the indexes and the sets of ids in them (``pmaps.IdSet``), and
persistent heaps); a fold writes new maps one key at a time through :mod:`pmaps` (one
call per read or write), so the state it started from stays valid.

Indexes and what they hold (all derived from ``tasks`` and ``dlq``):

- ``lanes``: per (type, pool, rate group, limit), a heap of ``(-urgency, order, id)``; an entry
  counts only while its task is READY with that order (stale entries are dropped
  when they reach the top, so every lane's top is runnable).
- ``timers``: a heap of ``(not_before, order, id)`` for DELAYED tasks, same rule.
- ``refs``: parent id -> live children that name it in ``triggerAfterIds``.
- ``doomed``: blocked children with a dead-lettered parent, awaiting fail-through.
- ``fingerprints``: dedupe fingerprint -> ids of the live tasks that carry it.
- ``windows``: rate group -> claim times within 60 s of the group's latest claim.
- ``by_daemon``: daemon id -> ids of the tasks it has claimed.
- ``counters``, ``histograms``: totals by task type since the log began
  (:mod:`snerd.projections.counters`), restated by compaction; kept in ``totals``, a
  chain of the folds' tallies summed when first read (``counters.Totals``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from immutables import Map

from snerd.projections import heap
from snerd.projections.counters import CounterKey, Hist, HistKey, Totals
from snerd.projections.delta import NO_CHANGE, Delta, DeltaBuilder
from snerd.projections.events import Record, decode
from snerd.projections.pmaps import IdSet, assoc, get, id_set
from snerd.projections.queue_state import QueueState, with_state
from snerd.projections.rules import phase_for
from snerd.projections.task import (
    ACTIVE,
    BLOCKED,
    DELAYED,
    READY,
    Lane,
    Task,
    lane_key,
    timer_key,
    with_phase,
)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A task in the dead-letter queue: inspectable, requeueable, purgeable."""

    key: str
    task: Task
    reason: str
    error: str | None
    at: float | None


def empty() -> QueueState:
    """The state of an empty log."""
    return QueueState()


def fold(state: QueueState, records: Iterable[Record]) -> tuple[QueueState, Delta]:
    """Apply records in order; return the new state and what changed."""
    return fold_events(state, map(decode, records))


def fold_events(state: QueueState, events: Iterable[Any]) -> tuple[QueueState, Delta]:
    """:func:`fold` for records already decoded into events (``events.decode``)."""
    folder = (_folder or _load_folder())(state)
    folder.feed(events)
    result: tuple[QueueState, Delta] = folder.finish()
    return result


_folder: Any = None  # apply.Folder, which imports this module: loaded on the first fold


def _load_folder() -> Any:
    global _folder
    from snerd.projections.apply import Folder

    _folder = Folder
    return Folder


def apply(state: QueueState, record: Record) -> tuple[QueueState, Delta]:
    """Apply one record."""
    return fold(state, (record,))


def advance(state: QueueState, now: float) -> tuple[QueueState, Delta]:
    """Move every DELAYED task whose time has come (``not_before <= now``) to READY."""
    timers = state.timers
    if timers is None or heap.top(timers)[0] > now:  # nothing due (the common case)
        return state, NO_CHANGE
    tasks = state.tasks
    lanes = state.lanes
    delta = DeltaBuilder()
    while timers is not None:
        due, order, task_id = heap.top(timers)
        task = get(tasks, task_id)
        if task is None or task.phase != DELAYED or task.order != order:
            timers = heap.pop(timers)  # stale entry
            continue
        if due > now:
            break
        timers = heap.pop(timers)
        task = with_phase(task, READY)
        tasks = assoc(tasks, task_id, task)
        lane = task.lane
        lanes = assoc(lanes, lane, heap.push(get(lanes, lane), lane_key(task)))
        delta.ready.append(task_id)
    if not delta:
        return state, NO_CHANGE
    new = with_state(state, tasks=tasks, timers=timers, lanes=lanes)
    return new, delta.freeze()


def from_tables(
    tasks: Mapping[str, Task],
    dlq: Mapping[str, DeadLetter],
    windows: Mapping[str, Sequence[float]],
    *,
    n: int,
    last_seq: int,
    invalid: int = 0,
    counters: Mapping[CounterKey, int] | None = None,
    histograms: Mapping[HistKey, Hist] | None = None,
) -> QueueState:
    """Build every index from the final task table and DLQ (the bulk-replay path).

    ``tasks`` must carry their final order, attempt and claim; phases of tasks that
    are not ACTIVE are recomputed by :func:`rules.phase_for`, exactly as the
    incremental fold computes them.
    """
    final: dict[str, Task] = {}
    lane_keys: dict[Lane, list[tuple[float, int, str]]] = {}
    timer_keys: list[tuple[float, int, str]] = []
    refs: dict[str, set[str]] = {}
    doomed: set[str] = set()
    fingerprints: dict[str, set[str]] = {}
    by_daemon: dict[str, set[str]] = {}
    for task in tasks.values():
        if task.phase != ACTIVE:
            phase, is_doomed = phase_for(task, tasks, dlq)
            if phase != task.phase:
                task = with_phase(task, phase)
            if is_doomed:
                doomed.add(task.id)
        final[task.id] = task
        if task.phase == READY:
            lane_keys.setdefault(task.lane, []).append(lane_key(task))
        elif task.phase == DELAYED:
            timer_keys.append(timer_key(task))
        elif task.phase == ACTIVE and task.claim is not None:
            by_daemon.setdefault(task.claim.daemon, set()).add(task.id)
        for parent in task.parents:
            refs.setdefault(parent, set()).add(task.id)
        if task.auto_dedupe and task.fingerprint:
            fingerprints.setdefault(task.fingerprint, set()).add(task.id)
    return QueueState(
        tasks=Map(final),
        dlq=Map(dlq),
        lanes=Map({lane: heap.from_keys(keys) for lane, keys in lane_keys.items()}),
        timers=heap.from_keys(timer_keys),
        refs=Map({k: id_set(v) for k, v in refs.items()}),
        doomed=id_set(doomed),
        fingerprints=Map({k: id_set(v) for k, v in fingerprints.items()}),
        windows=Map({g: tuple(sorted(t)) for g, t in windows.items() if t}),
        by_daemon=Map({k: id_set(v) for k, v in by_daemon.items()}),
        totals=Totals.of(Map(counters or {}), Map(histograms or {})),
        n=n,
        last_seq=last_seq,
        invalid=invalid,
    )


__all__ = [
    "BLOCKED",
    "DeadLetter",
    "IdSet",
    "Map",
    "QueueState",
    "advance",
    "apply",
    "empty",
    "fold",
    "from_tables",
    "lane_key",
    "timer_key",
]
