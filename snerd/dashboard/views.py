"""JSON shapes the dashboard serves, computed from the projection and the monitor.

Rows of ``/api/tasks`` keep the keys the SnerdMQ SDK dashboards read (``id``,
``type``, ``status``, ``progress``, ``retryCount``, ``maxRetries``, ``retryAfterTime``,
``cronExpression``, ``webhookUrl``, ``maxExecutionSeconds``) with their vocabulary for
``status`` (queued, active, failed, completed, dead_letter), and add ours: ``state``
in the replay tool's names (pending, scheduled, blocked, active, dead_lettered,
completed, cancelled) and the rest of the task.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from snerd.dispatcher.views import claim_view, state_counts, status_of
from snerd.projections import events as ev
from snerd.projections.queries import slot_free_at
from snerd.projections.rates import RATE_WINDOW_SECONDS
from snerd.projections.schedule import format_instant, parse_instant
from snerd.projections.state import DeadLetter, QueueState
from snerd.projections.task import Task, record_error, task_to_record

STATES = ("pending", "scheduled", "blocked", "active", "dead_lettered", "completed", "cancelled")
LIVE_STATES = frozenset({"pending", "scheduled", "blocked", "active"})
FINISHED_STATES = frozenset({"completed", "cancelled"})
DAG_LIMIT = 200

_PERCENT_KEYS = ("pct", "percent", "percentage", "progress")


def percent(data: Any) -> float:
    """A 0-100 number from progress data (a number, or an object with ``pct``...)."""
    if isinstance(data, Mapping):
        for key in _PERCENT_KEYS:
            if key in data:
                return percent(data[key])
        return 0.0
    if isinstance(data, bool) or not isinstance(data, int | float):
        return 0.0
    value = float(data)
    if isinstance(data, float) and 0.0 < value < 1.0:
        value *= 100.0  # a fraction
    return max(0.0, min(100.0, value))


def sdk_status(state: str, last_error: Any) -> str:
    """The SDK dashboards' status word for one of our states."""
    if state == "active":
        return "active"
    if state == "dead_lettered":
        return "dead_letter"
    if state in FINISHED_STATES:
        return "completed"
    return "failed" if last_error else "queued"


def _row(record: dict[str, Any], state: str, progress: Any = None) -> dict[str, Any]:
    last_error = record_error(record)
    row: dict[str, Any] = {
        "id": record.get(ev.F_TASK_ID),
        "type": record.get(ev.F_TASK_TYPE),
        "status": sdk_status(state, last_error),
        "progress": 100.0 if state == "completed" else percent(progress),
        "retryCount": record.get(ev.F_RETRY_COUNT, 0),
        "maxRetries": record.get(ev.F_MAX_RETRIES, 3),
        "retryAfterTime": record.get(ev.F_RETRY_AFTER_TIME),
        "cronExpression": record.get(ev.F_CRON),
        "webhookUrl": record.get(ev.F_WEBHOOK_URL),
        "maxExecutionSeconds": record.get(ev.F_MAX_EXECUTION_SECONDS),
        "state": state,
        "progressData": progress,
        "lastError": last_error,
        "urgencyScore": record.get(ev.F_URGENCY, 0.0),
        "executeAt": record.get(ev.F_EXECUTE_AT),
        "createdAt": record.get(ev.F_CREATED_AT),
        "parents": list(record.get(ev.F_TRIGGER_AFTER_IDS) or ()),
        "rateLimitGroup": record.get(ev.F_RATE_GROUP),
        "pool": record.get(ev.F_POOL),
        "taskData": record.get(ev.F_TASK_DATA),
        "runAt": _own_time(record, ev.F_EXECUTE_AT),
        "retryAt": _own_time(record, ev.F_RETRY_AFTER_TIME),
    }
    return row


def _own_time(record: Mapping[str, Any], key: str) -> Any:
    """A schedule field, or None where it only restates ``createdAt`` (SnerdMQ's filler)."""
    value = record.get(key)
    return None if value == record.get(ev.F_CREATED_AT) else value


def live_row(task: Task, now: float) -> dict[str, Any]:
    row = _row(task_to_record(task), status_of(task, now), task.progress)
    row["attempt"] = task.attempt
    if task.claim is not None:
        row["claim"] = claim_view(task)
    return row


def dead_row(entry: DeadLetter) -> dict[str, Any]:
    row = _row(task_to_record(entry.task), "dead_lettered")
    row.update(dlqKey=entry.key, reason=entry.reason, attempt=entry.task.attempt)
    row["deadLetteredAt"] = None if entry.at is None else format_instant(entry.at)
    if entry.key != entry.task.id:
        row["id"] = entry.key  # a cron occurrence: its own row
    return row


def finished_row(record: dict[str, Any]) -> dict[str, Any]:
    row = _row(record, str(record.get("state", "completed")))
    ts = record.get(ev.F_TS)
    row["finishedAt"] = format_instant(ts / 1000) if isinstance(ts, int | float) else None
    row["attempt"] = record.get(ev.F_ATTEMPT, 0)
    return row


# --- the task list ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Filter:
    """What ``/api/tasks`` may be narrowed by: state, type, a substring of the id."""

    state: str | None = None
    type: str | None = None
    search: str | None = None

    def wants(
        self, state: str | None = None, task_type: str | None = None, task_id: str = ""
    ) -> bool:
        if self.state and state is not None and state != self.state:
            return False
        if self.type and task_type is not None and task_type != self.type:
            return False
        return not self.search or self.search.lower() in task_id.lower()


def _created(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return parse_instant(value)
        except Exception:
            return 0.0
    return 0.0


def task_rows(
    state: QueueState,
    finished: Iterable[dict[str, Any]],
    flt: Filter,
    *,
    now: float,
    limit: int,
    offset: int = 0,
) -> tuple[list[dict[str, Any]], int]:
    """Matching rows newest first (by creation time), and how many matched in all."""
    keyed: list[tuple[float, str, Any]] = []
    want = flt.state
    if want is None or want in LIVE_STATES:
        for task in state.tasks.values():
            if flt.wants(None, task.type, task.id) and (
                want is None or status_of(task, now) == want
            ):
                keyed.append((task.created_at or 0.0, task.id, task))
    if want in (None, "dead_lettered"):
        for entry in state.dlq.values():
            if flt.wants(None, entry.task.type, entry.key):
                keyed.append((entry.task.created_at or 0.0, entry.key, entry))
    if want is None or want in FINISHED_STATES:
        for record in finished:
            task_id = str(record.get(ev.F_TASK_ID, ""))
            if flt.wants(str(record.get("state")), record.get(ev.F_TASK_TYPE), task_id):
                keyed.append((_created(record.get(ev.F_CREATED_AT)), task_id, record))
    keyed.sort(key=lambda item: (-item[0], item[1]))
    page = keyed[offset : offset + limit]
    rows = [_any_row(item, now) for _, _, item in page]
    return rows, len(keyed)


def _any_row(item: Any, now: float) -> dict[str, Any]:
    if isinstance(item, Task):
        return live_row(item, now)
    if isinstance(item, DeadLetter):
        return dead_row(item)
    return finished_row(item)


def task_types(state: QueueState, finished: Iterable[dict[str, Any]]) -> list[str]:
    types = {t.type for t in state.tasks.values()} | {e.task.type for e in state.dlq.values()}
    types.update(str(r.get(ev.F_TASK_TYPE)) for r in finished if r.get(ev.F_TASK_TYPE))
    return sorted(types)


def find_row(
    state: QueueState, finished: Mapping[str, Any] | None, task_id: str, now: float
) -> dict[str, Any] | None:
    """A task's row: live, dead-lettered, or recently finished; None if unknown."""
    task = state.tasks.get(task_id)
    if task is not None:
        return live_row(task, now)
    entry = state.dlq.get(task_id)
    if entry is not None:
        return dead_row(entry)
    if finished is not None:
        return finished_row(dict(finished))
    return None


def state_of(
    state: QueueState, task_id: str, now: float, finished: Mapping[str, Any] | None = None
) -> str:
    """One word for any id: a live state, dead_lettered, completed/cancelled, or absent."""
    task = state.tasks.get(task_id)
    if task is not None:
        return status_of(task, now)
    if task_id in state.dlq:
        return "dead_lettered"
    if finished is not None:
        return str(finished.get("state", "completed"))
    return "absent"


# --- overview pieces --------------------------------------------------------------


def counts(state: QueueState, now: float) -> dict[str, int]:
    return state_counts(state, now)


def rate_groups(state: QueueState, now: float) -> list[dict[str, Any]]:
    """Every rate-limit group with live tasks or recent dispatches: limit and window use."""
    limits: dict[str, int] = {}
    waiting: dict[str, int] = {}
    for task in state.tasks.values():
        if task.rate_group:
            waiting[task.rate_group] = waiting.get(task.rate_group, 0) + 1
            if task.max_per_minute:
                old = limits.get(task.rate_group)
                limits[task.rate_group] = (
                    min(old, task.max_per_minute) if old else (task.max_per_minute)
                )
    out = []
    for group in sorted(set(limits) | set(waiting) | set(state.windows)):
        used = sum(1 for t in state.windows.get(group, ()) if t > now - RATE_WINDOW_SECONDS)
        limit = limits.get(group)
        free_at = slot_free_at(state, group, limit, now) if limit else None
        out.append(
            {
                "group": group,
                "maxPerMinute": limit,
                "used": used,
                "waiting": waiting.get(group, 0),
                "nextSlotAt": None if free_at is None else format_instant(free_at),
            }
        )
    return out


def dlq_rows(state: QueueState) -> list[dict[str, Any]]:
    """The dead-letter queue, most recent first."""
    entries = sorted(state.dlq.values(), key=lambda e: (-(e.at or 0.0), e.key))
    return [dead_row(entry) for entry in entries]
