"""What the fold properties compare: views of a state, and its invariants."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from operator import attrgetter
from typing import Any, Final

from snerd.projections import decide, heap
from snerd.projections.rates import RATE_WINDOW_SECONDS
from snerd.projections.rules import phase_for
from snerd.projections.state import QueueState, lane_key, timer_key
from snerd.projections.task import ACTIVE, BLOCKED, DELAYED, FIELDS, READY, Task, with_


def phase_expected(task: Task, state: QueueState, now: float) -> str:
    """The phase the rules give a task after ``advance(now)``."""
    if task.phase == ACTIVE:
        return ACTIVE
    phase, _ = phase_for(task, state.tasks, state.dlq)
    if phase == DELAYED and task.not_before is not None and task.not_before <= now:
        return READY
    return phase


def task_view(task: Task, *, order: bool = True) -> tuple[Any, ...]:
    """Every field of a task (``extra`` included, ``order`` optionally left out)."""
    return (*_FIELDS[order](task), dict(task.extra))


_FIELDS: Final = {
    keep_order: attrgetter(*(name for name in FIELDS if keep_order or name != "order"))
    for keep_order in (True, False)
}
"""Task's fields as one getter each way (a getattr per field and call cost most)."""


def valid_lane_entries(state: QueueState) -> set[tuple[Any, ...]]:
    """(lane, key) of every lane entry the state counts as valid (READY, same order)."""
    out: set[tuple[Any, ...]] = set()
    for lane, lane_heap in state.lanes.items():
        for key in heap.iter_keys(lane_heap):
            task = state.tasks.get(key[2])
            if task is not None and task.phase == READY and task.order == key[1]:
                out.add((lane, key))
    return out


def valid_timer_entries(state: QueueState) -> set[tuple[Any, ...]]:
    out: set[tuple[Any, ...]] = set()
    for key in heap.iter_keys(state.timers):
        task = state.tasks.get(key[2])
        if task is not None and task.phase == DELAYED and task.order == key[1]:
            out.add(key)
    return out


def state_view(state: QueueState) -> dict[str, Any]:
    """Everything observable about a state, for equality checks between fold paths."""
    return {
        "tasks": {k: task_view(t) for k, t in state.tasks.items()},
        "dlq": {
            k: (d.key, task_view(d.task), d.reason, d.error, d.at) for k, d in state.dlq.items()
        },
        "refs": {k: set(v) for k, v in state.refs.items()},
        "doomed": set(state.doomed),
        "fingerprints": {k: set(v) for k, v in state.fingerprints.items()},
        "windows": dict(state.windows),
        "by_daemon": {k: set(v) for k, v in state.by_daemon.items()},
        "n": state.n,
        "last_seq": state.last_seq,
        "invalid": state.invalid,
        "lanes": valid_lane_entries(state),
        "timers": valid_timer_entries(state),
    }


def check_invariants(state: QueueState, now: float) -> None:
    """The invariants every folded-then-advanced state keeps (asserts)."""
    tasks = state.tasks
    for task_id, task in tasks.items():
        assert task.id == task_id
        assert task.phase in (READY, DELAYED, BLOCKED, ACTIVE)
        assert (task.phase == ACTIVE) == (task.claim is not None), task
        assert task.phase == phase_expected(task, state, now), task
        if task.phase in (READY, DELAYED):
            live = [p for p in task.parents if p != task_id and (p in tasks or p in state.dlq)]
            assert not live, (task, live)
    ready = {(t.lane, lane_key(t)) for t in tasks.values() if t.phase == READY}
    assert valid_lane_entries(state) == ready
    delayed = {timer_key(t) for t in tasks.values() if t.phase == DELAYED}
    assert valid_timer_entries(state) == delayed
    for lane, lane_heap in state.lanes.items():
        top = heap.top(lane_heap)
        assert top is not None, lane
        assert (lane, top) in ready, (lane, top)
    doomed = {
        t.id
        for t in tasks.values()
        if t.phase == BLOCKED and any(p in state.dlq and p != t.id for p in t.parents)
    }
    assert set(state.doomed) == doomed
    prints: dict[str, set[str]] = {}
    for t in tasks.values():
        if t.auto_dedupe and t.fingerprint:
            prints.setdefault(t.fingerprint, set()).add(t.id)
    assert {k: set(v) for k, v in state.fingerprints.items()} == prints
    owners: dict[str, set[str]] = {}
    for t in tasks.values():
        if t.phase == ACTIVE and t.claim is not None:
            owners.setdefault(t.claim.daemon, set()).add(t.id)
    assert {k: set(v) for k, v in state.by_daemon.items()} == owners
    refs: dict[str, set[str]] = {}
    for t in tasks.values():
        for p in t.parents:
            refs.setdefault(p, set()).add(t.id)
    assert {k: set(v) for k, v in state.refs.items()} == refs


def sorted_ids(tasks: Mapping[str, Task]) -> list[str]:
    """Task ids in FIFO order."""
    return [t.id for t in sorted(tasks.values(), key=lambda t: t.order)]


# --- what a compaction must preserve (specs/log-format.md §9) -----------------------------


def ms(seconds: float | None) -> int | None:
    """Times compare in whole milliseconds: the unit a snapshot line writes."""
    return None if seconds is None else round(seconds * 1000)


def observable(task: Task) -> tuple[Any, ...]:
    """Every field but ``order``, with the claim's times in whole milliseconds."""
    claim = task.claim
    if claim is not None:
        claim = claim._replace(at=ms(claim.at), lease_until=ms(claim.lease_until))
    return task_view(with_(task, claim=claim), order=False)


def live_view(state: QueueState) -> dict[str, tuple[Any, ...]]:
    return {k: observable(t) for k, t in state.tasks.items()}


def dlq_view(state: QueueState) -> dict[str, tuple[Any, ...]]:
    return {k: (d.reason, d.error, ms(d.at), observable(d.task)) for k, d in state.dlq.items()}


def recent_windows(state: QueueState, now: float) -> dict[str, tuple[int | None, ...]]:
    out = {}
    for group, times in state.windows.items():
        recent = tuple(ms(t) for t in times if t > now - RATE_WINDOW_SECONDS)
        if recent:
            out[group] = recent
    return out


def observable_view(state: QueueState, now: float) -> dict[str, Any]:
    """Everything §9 guarantees a snapshot preserves, as of ``now``."""
    return {
        "live": live_view(state),
        "fifo": sorted_ids(state.tasks),
        "dlq": dlq_view(state),
        "blocked": {t.id for t in state.tasks.values() if t.phase == BLOCKED},
        "doomed": set(state.doomed),
        "by_daemon": {k: set(v) for k, v in state.by_daemon.items()},
        "fingerprints": {k: set(v) for k, v in state.fingerprints.items()},
        "windows": recent_windows(state, now),
    }


class Checked:
    """The inputs each of a state machine's pure checks last ran on, so that an
    invariant runs again only once something it reads has changed: about half the
    steps change nothing (a refused command, a plan with nothing to do). Inputs are
    compared by identity (states are immutable; a log list is passed with its length,
    since records are only appended to it) and numbers by value; an unchanged input
    gives the same verdict, which has already been checked."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[object, ...]] = {}

    def due(self, check: str, *inputs: object) -> bool:
        last = self._last.get(check)
        self._last[check] = inputs
        return last is None or not all(map(_same, last, inputs))


def _same(a: object, b: object) -> bool:
    return a is b or (isinstance(a, int | float) and isinstance(b, int | float) and a == b)


class RunningAudit:
    """``audit(log, now, check=Verifier()).problems``, carried on as ``log`` grows: an
    audit is a left fold over the records (each judged as of its own ``ts``), so the
    problems of a prefix plus those of the rest are those of the whole. A new ``log``
    (a compaction replaced the file) starts a new audit."""

    def __init__(self) -> None:
        self._log: list[Any] | None = None
        self._upto = 0

    def problems(self, log: list[Any], now: float) -> list[Any]:
        from snerd.projections.history import Audit
        from snerd.tools.replay_checks import Verifier

        if self._log is not log:
            self._log, self._upto = log, 0
            self._auditor = Audit(check=Verifier(), now=now)
        self._auditor.feed(log[self._upto :])
        self._upto = len(log)
        return self._auditor.problems


def decided_one_at_a_time(state: QueueState, commands: Any, *, now: float,
                          daemon: str) -> list[tuple[object, list[Any]]]:  # fmt: skip
    """Each command's ``(outcome, records)`` decided alone, its records folded before
    the next: what a run decided at once must equal."""
    out: list[tuple[object, list[Any]]] = []
    for cmd in commands:
        decision = decide.decide(state, cmd, now=now, daemon=daemon)
        out.append((decision.outcome, decision.records))
        state = decide.fold(state, decision.records)[0]
    return out


@contextmanager
def folds_in_decide() -> Iterator[list[QueueState]]:
    """The states ``snerd.projections.decide`` folds records into while the block runs
    (its ``fold``, counted): what a run decided at once folds in between."""
    real = decide.fold
    calls: list[QueueState] = []

    def counting(state: QueueState, records: Any) -> Any:
        calls.append(state)
        return real(state, records)

    decide.fold = counting  # type: ignore[assignment]
    try:
        yield calls
    finally:
        decide.fold = real  # type: ignore[assignment]
