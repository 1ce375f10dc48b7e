"""JSON-ready views of the projection for replies, the CLI and the dashboard."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from snerd.projections.queries import counts
from snerd.projections.schedule import format_instant
from snerd.projections.state import QueueState
from snerd.projections.task import ACTIVE, BLOCKED, DELAYED, Task, task_to_record

if TYPE_CHECKING:
    from snerd.dispatcher.engine import Engine

PENDING = "pending"
SCHEDULED = "scheduled"


def status_of(task: Task, now: float) -> str:
    """pending, scheduled, blocked or active (the names the replay tool uses)."""
    if task.phase == ACTIVE:
        return "active"
    if task.phase == BLOCKED:
        return "blocked"
    if task.phase == DELAYED and (task.not_before or 0.0) > now:
        return SCHEDULED
    return PENDING


def claim_view(task: Task) -> dict[str, Any] | None:
    """Who runs the task's current attempt, and since when (None if not running)."""
    claim = task.claim
    if claim is None:
        return None
    return {"daemon": claim.daemon, "attempt": claim.attempt, "since": format_instant(claim.at)}


def live_view(task: Task, now: float) -> dict[str, Any]:
    view = task_to_record(task)
    view["status"] = status_of(task, now)
    view["attempt"] = task.attempt
    if task.claim is not None:
        view["claim"] = claim_view(task)
    if task.progress is not None:
        view["progress"] = task.progress
    return view


def task_view(state: QueueState, task_id: str, *, now: float) -> dict[str, Any] | None:
    """A live or dead-lettered task, or None (completed tasks leave the projection)."""
    task = state.tasks.get(task_id)
    if task is not None:
        return live_view(task, now)
    entry = state.dlq.get(task_id)
    if entry is None:
        return None
    view = task_to_record(entry.task)
    view.update(status="dead_lettered", reason=entry.reason, dlqKey=entry.key)
    view["attempt"] = entry.task.attempt
    if entry.at is not None:
        view["deadLetteredAt"] = format_instant(entry.at)
    return view


def state_counts(state: QueueState, now: float) -> dict[str, int]:
    out = {PENDING: 0, SCHEDULED: 0, "blocked": 0, "active": 0}
    for task in state.tasks.values():
        out[status_of(task, now)] += 1
    out["dead_lettered"] = len(state.dlq)
    return out


def stats_view(engine: Engine) -> dict[str, Any]:
    now = engine.clock.now()
    out: dict[str, Any] = dict(state_counts(engine.state, now))
    out["phases"] = counts(engine.state)
    out["daemon"] = {
        "id": engine.daemon,
        "pid": os.getpid(),
        "registered": sorted(_registered(engine)),
        "in_flight": len(engine.runs),
        "max_workers": engine.config.max_workers,
        "draining": engine.draining,
    }
    stats = engine.log.stats()
    out["log"] = {"bytes": stats.size_bytes, "records": stats.records, "skipped": stats.skipped}
    return out


def _registered(engine: Engine) -> set[str]:
    types: set[str] = set()
    for executor in engine.executors:
        types.update(getattr(executor, "registered", ()) or ())
        types.update(getattr(executor, "handlers", {}).keys())
    return types
