"""Read-only questions the dispatcher and the tools ask of a :class:`QueueState`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from snerd.projections import heap
from snerd.projections.pmaps import get
from snerd.projections.rates import extend_window, window_slot_free_at
from snerd.projections.state import QueueState
from snerd.projections.task import READY, Lane, Task


def slot_free_at(state: QueueState, group: str, max_per_minute: int, now: float) -> float | None:
    """None if the group may dispatch now, else the instant its next slot frees."""
    return window_slot_free_at(state.windows.get(group, ()), max_per_minute, now)


@dataclass(frozen=True, slots=True)
class Pick:
    """What the dispatcher may claim next, and when to look again if nothing."""

    task: Task | None
    wake_at: float | None


def pick(state: QueueState, now: float, eligible: Callable[[Task], bool]) -> Pick:
    """The most urgent READY task (FIFO on ties) that ``eligible`` accepts and whose
    rate group has a free slot; else the earliest instant a limit or timer frees."""
    best: Task | None = None
    wake: list[float] = []
    timer = heap.top(state.timers)
    if timer is not None:
        wake.append(timer[0])
    tasks = state.tasks
    for node in state.lanes.values():
        task = None if node is None else get(tasks, node[1][2])
        if task is None or not eligible(task):
            continue
        if task.rate_group and task.max_per_minute:
            free_at = slot_free_at(state, task.rate_group, task.max_per_minute, now)
            if free_at is not None:
                wake.append(free_at)
                continue
        if best is None or (-task.urgency, task.order) < (-best.urgency, best.order):
            best = task
    return Pick(best, min(wake) if wake else None)


def pick_many(
    state: QueueState, now: float, eligible: Callable[[Task], bool], limit: int,
    out: list[Task] | None = None,
) -> list[Task]:  # fmt: skip
    """Up to ``limit`` tasks in dispatch order, as successive :func:`pick` calls would
    return them if each pick were claimed (rate windows filling as they go).

    Picks are appended to ``out`` as they are made, so ``eligible`` may look at it
    (e.g. to count a pool's capacity used by this batch)."""
    lanes = dict(state.lanes.items())
    windows: dict[str, tuple[float, ...]] = {}  # rate windows with this batch's claims
    out = [] if out is None else out
    picked: set[str] = set()  # a lane may hold two live entries of one task (lazy heaps)
    while len(out) < limit:
        best: tuple[tuple[float, int], Lane, Task] | None = None
        for lane, node in list(lanes.items()):
            task, node = _valid_top(state, node, picked)
            if task is None:
                del lanes[lane]
                continue
            lanes[lane] = node  # stale entries dropped: the pop below removes ``task``
            if not eligible(task) or not _has_slot(state, task, now, windows):
                continue
            rank = (-task.urgency, task.order)
            if best is None or rank < best[0]:
                best = (rank, lane, task)
        if best is None:
            return out
        _, lane, task = best
        out.append(task)
        if len(out) >= limit:  # the last pick: what follows only serves the next one
            return out
        lanes[lane] = heap.pop(lanes[lane])
        if task.rate_group:
            group = task.rate_group
            windows[group] = extend_window(windows.get(group, state.windows.get(group, ())), (now,))
        picked.add(task.id)
    return out


def _valid_top(
    state: QueueState, node: heap.Heap, picked: set[str]
) -> tuple[Task | None, heap.Heap]:
    """The lane's best READY task not picked yet, and the lane without the entries
    above it that are stale (or already picked)."""
    while node is not None:
        _, order, task_id = node[1]
        task = get(state.tasks, task_id)
        fresh = task is not None and task.phase == READY and task.order == order
        if fresh and task_id not in picked:
            return task, node
        node = heap.pop(node)
    return None, None


def _has_slot(
    state: QueueState, task: Task, now: float, windows: dict[str, tuple[float, ...]]
) -> bool:
    if not (task.rate_group and task.max_per_minute):
        return True
    group = task.rate_group
    window = windows.get(group, state.windows.get(group, ()))
    return window_slot_free_at(window, task.max_per_minute, now) is None


def expired_leases(state: QueueState, now: float) -> list[Task]:
    """Running tasks whose lease ran out before ``now``."""
    return [
        task
        for task in iter_active(state)
        if task.claim is not None
        and task.claim.lease_until is not None
        and task.claim.lease_until < now
    ]


def iter_active(state: QueueState) -> Iterator[Task]:
    for ids in state.by_daemon.values():
        for task_id in ids:
            task = state.tasks.get(task_id)
            if task is not None:
                yield task


def descendants(state: QueueState, task_id: str) -> list[str]:
    """Live tasks that wait on ``task_id``, transitively, parents before children."""
    seen: set[str] = set()
    order: list[str] = []
    frontier = [task_id]
    while frontier:
        parent = frontier.pop(0)
        for child in sorted(state.refs.get(parent, ())):
            if child not in seen and child in state.tasks and child != task_id:
                seen.add(child)
                order.append(child)
                frontier.append(child)
    return order
