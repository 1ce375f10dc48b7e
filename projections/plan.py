"""Plan: ``plan(state, now, capacity, ...) -> Plan``, the dispatcher's pure step function.

Given the projection and an instant, a plan says which tasks to claim (up to the
free capacity, in dispatch order: most urgent first, FIFO on ties, rate windows
filling as the batch goes), which dead-lettered parents to fail through, which claims
of dead owners (or run-out leases) to release, and the next instant something becomes
due (a timer, a backoff, a rate-limit slot) if nothing can run now. A plan only
proposes: each release and fail-through is a command that ``decide`` checks under the
log lock against the caught-up state; claims are planned again under the lock, against
that state, and a plan made there picks exactly what ``decide`` would grant for it
(``decide.planned_claims``: both pick with :func:`queries.pick_many`; a property test
holds them to it). The state is not changed: timers that
came due are moved in a local copy (:func:`state.advance`), so the engine's state keeps
exactly one writer, its log listener.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from snerd.projections import heap, queries
from snerd.projections.state import QueueState, advance
from snerd.projections.task import READY, Task


@dataclass(frozen=True, slots=True)
class Plan:
    claims: tuple[Task, ...] = ()
    fail_through: tuple[str, ...] = ()  # dead-lettered parents of waiting children
    releases: tuple[tuple[str, int], ...] = ()  # (task id, attempt) of orphaned claims
    wake_at: float | None = None  # look again then, if nothing else wakes the dispatcher

    def __bool__(self) -> bool:
        return bool(self.claims or self.fail_through or self.releases)


def due(state: QueueState, now: float) -> QueueState:
    """``state`` with every timer due by ``now`` moved to the ready lanes."""
    return advance(state, now)[0]


def idle(state: QueueState, now: float, accepts: Callable[[Task], bool] | None = None) -> bool:
    """Whether a plan at ``now`` could propose nothing but a time to wake: no READY task
    (one waiting for a slot, a pool or a rate window is READY too), no timer due by
    ``now``, no blocked child of a dead-lettered parent.

    With ``accepts``, a lane whose first task no executor here accepts does not count:
    :func:`plan` never looks past a lane's first task, nor takes its time to wake from
    one it does not accept, so a backlog of types this daemon does not run costs no
    pass per event."""
    if state.doomed:
        return False
    if state.lanes and (accepts is None or not _unrunnable(state, accepts)):
        return False
    timer = heap.top(state.timers)
    return timer is None or timer[0] > now


def _unrunnable(state: QueueState, accepts: Callable[[Task], bool]) -> bool:
    """Whether every lane's first entry is a fresh READY task that ``accepts`` refuses
    (a stale entry counts as runnable: only a plan walks past it)."""
    tasks = state.tasks
    for node in state.lanes.values():
        if node is None:
            continue
        _, order, task_id = node[1]
        task = tasks.get(task_id)
        if task is None or task.phase != READY or task.order != order or accepts(task):
            return False
    return True


def plan(
    state: QueueState,
    now: float,
    capacity: int,
    *,
    accepts: Callable[[Task], bool],
    pools: Mapping[str, int] | None = None,
    busy: Mapping[str, int] | None = None,
    gone: Collection[str] = (),
    leases: bool = False,
) -> Plan:
    """What to do at ``now``.

    ``accepts`` says whether some executor here runs a task (registered types);
    ``pools`` caps the attempts per pool and ``busy`` counts those running here;
    ``gone`` names daemons whose claims are to be released (known dead); with
    ``leases`` (no liveness facility), only those of their claims whose lease ran out.
    """
    if not gone and idle(state, now):  # nothing to claim or fail through: at once
        timer = heap.top(state.timers)
        return Plan(wake_at=None if timer is None or capacity <= 0 else timer[0])
    state = due(state, now)
    doomed = [t for t in state.doomed if t in state.tasks]
    parents = sorted({p for t in doomed for p in state.tasks[t].parents if p in state.dlq})
    releases = tuple(
        (task.id, task.claim.attempt)
        for daemon in sorted(gone)  # only the claims of those daemons: no scan of all claims
        for task_id in sorted(state.by_daemon.get(daemon, ()))
        if (task := state.tasks.get(task_id)) is not None and task.claim is not None
        and task.claim.daemon == daemon
        and not (leases and (task.claim.lease_until or now) >= now)
    )  # fmt: skip
    claims: list[Task] = []
    if capacity > 0:
        eligible = _eligible(accepts, pools or {}, busy or {}, claims)
        queries.pick_many(state, now, eligible, capacity, claims)
    wake_at = None
    if len(claims) < capacity:  # nothing more runs now: when will something?
        wake_at = queries.pick(state, now, accepts).wake_at
    return Plan(tuple(claims), tuple(parents), releases, wake_at)


def _eligible(
    accepts: Callable[[Task], bool], pools: Mapping[str, int], busy: Mapping[str, int],
    planned: list[Task],
) -> Callable[[Task], bool]:  # fmt: skip
    def eligible(task: Task) -> bool:
        pool = task.pool
        if pool and pool in pools:
            used = busy.get(pool, 0) + sum(1 for t in planned if t.pool == pool)
            if used >= pools[pool]:
                return False
        return accepts(task)

    return eligible
