"""One task as the faces show it: the ``get`` reply, the dashboard's rows, the DLQ list.

Two shapes, one status: :func:`task_view` is the daemon's ``get`` reply and
``Queue.get`` (the log's own field names, plus ``status``, ``attempt``, ``claim``,
``progress``); :func:`live_row`/:func:`dead_row`/:func:`finished_row` are the rows of
the dashboard's ``/api/tasks`` and of ``snerdmq dlq list``. Rows keep the keys the
SnerdMQ SDK dashboards read (``id``, ``type``, ``status``, ``progress``,
``retryCount``, ``maxRetries``, ``retryAfterTime``, ``cronExpression``, ``webhookUrl``,
``maxExecutionSeconds``), ``status`` in their words (:func:`.status.sdk_status`), and
add ours: ``state`` (our status) and the rest of the task.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from snerd.projections import events as ev
from snerd.projections.schedule import format_instant, parse_instant
from snerd.projections.state import DeadLetter, QueueState
from snerd.projections.task import Task, record_error, task_to_record
from snerd.projections.views.status import (
    COMPLETED,
    DEAD_LETTERED,
    FINISHED,
    LIVE,
    sdk_status,
    status_of,
)

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


def claim_view(task: Task) -> dict[str, Any] | None:
    """Who runs the task's current attempt, and since when (None if not running)."""
    claim = task.claim
    if claim is None:
        return None
    return {"daemon": claim.daemon, "attempt": claim.attempt, "since": format_instant(claim.at)}


# --- the get reply ---------------------------------------------------------------------


def task_view(state: QueueState, task_id: str, *, now: float) -> dict[str, Any] | None:
    """A live or dead-lettered task in the log's field names, with its status; None if
    the projection does not hold it (completed tasks leave it)."""
    task = state.tasks.get(task_id)
    if task is not None:
        view = task_to_record(task)
        view["status"] = status_of(task, now)
        view["attempt"] = task.attempt
        if task.claim is not None:
            view["claim"] = claim_view(task)
        if task.progress is not None:
            view["progress"] = task.progress
        return view
    entry = state.dlq.get(task_id)
    if entry is None:
        return None
    view = task_to_record(entry.task)
    view.update(status=DEAD_LETTERED, reason=entry.reason, dlqKey=entry.key)
    view["attempt"] = entry.task.attempt
    if entry.at is not None:
        view["deadLetteredAt"] = format_instant(entry.at)
    return view


# --- rows ------------------------------------------------------------------------------


def _row(record: Mapping[str, Any], status: str, progress: Any = None) -> dict[str, Any]:
    last_error = record_error(record)
    return {
        "id": record.get(ev.F_TASK_ID),
        "type": record.get(ev.F_TASK_TYPE),
        "status": sdk_status(status, last_error),
        "progress": 100.0 if status == COMPLETED else percent(progress),
        "retryCount": record.get(ev.F_RETRY_COUNT, 0),
        "maxRetries": record.get(ev.F_MAX_RETRIES, 3),
        "retryAfterTime": record.get(ev.F_RETRY_AFTER_TIME),
        "cronExpression": record.get(ev.F_CRON_TEXT) or record.get(ev.F_CRON),
        "webhookUrl": record.get(ev.F_WEBHOOK_URL),
        "maxExecutionSeconds": record.get(ev.F_MAX_EXECUTION_EXACT)
        or record.get(ev.F_MAX_EXECUTION_SECONDS),
        "state": status,
        "progressData": progress,
        "lastError": last_error,
        "urgencyScore": record.get(ev.F_URGENCY, 0.0),
        "executeAt": record.get(ev.F_EXECUTE_AT),
        "createdAt": record.get(ev.F_CREATED_AT),
        "parents": list(record.get(ev.F_TRIGGER_AFTER_IDS) or ()),
        "unknownParents": list(record.get(ev.F_UNKNOWN_PARENTS) or ()),
        "rateLimitGroup": record.get(ev.F_RATE_GROUP),
        "pool": record.get(ev.F_POOL),
        "taskData": record.get(ev.F_TASK_DATA),
        "runAt": _own_time(record, ev.F_EXECUTE_AT),
        "retryAt": _own_time(record, ev.F_RETRY_AFTER_TIME),
    }


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
    row = _row(task_to_record(entry.task), DEAD_LETTERED)
    row.update(dlqKey=entry.key, reason=entry.reason, attempt=entry.task.attempt)
    row["deadLetteredAt"] = None if entry.at is None else format_instant(entry.at)
    if entry.key != entry.task.id:
        row["id"] = entry.key  # a cron occurrence: its own row
    return row


def finished_row(record: Mapping[str, Any]) -> dict[str, Any]:
    """The row of a recently finished task, from its last record (with its ``state``)."""
    row = _row(record, str(record.get("state", COMPLETED)))
    ts = record.get(ev.F_TS)
    row["finishedAt"] = format_instant(ts / 1000) if isinstance(ts, int | float) else None
    row["attempt"] = record.get(ev.F_ATTEMPT, 0)
    return row


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
        return finished_row(finished)
    return None


def dlq_rows(state: QueueState) -> list[dict[str, Any]]:
    """The dead-letter queue, most recent first."""
    entries = sorted(state.dlq.values(), key=lambda e: (-(e.at or 0.0), e.key))
    return [dead_row(entry) for entry in entries]


# --- the task list ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Filter:
    """What a task list may be narrowed by: status, type, a substring of the id."""

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
    finished: Iterable[Mapping[str, Any]],
    flt: Filter,
    *,
    now: float,
    limit: int,
    offset: int = 0,
) -> tuple[list[dict[str, Any]], int]:
    """Matching rows newest first (by creation time), and how many matched in all.
    ``finished``: rows of recently finished tasks (they left the projection)."""
    keyed: list[tuple[float, str, Any]] = []
    want = flt.state
    if want is None or want in LIVE:
        for task in state.tasks.values():
            if flt.wants(None, task.type, task.id) and (
                want is None or status_of(task, now) == want
            ):
                keyed.append((task.created_at or 0.0, task.id, task))
    if want in (None, DEAD_LETTERED):
        for entry in state.dlq.values():
            if flt.wants(None, entry.task.type, entry.key):
                keyed.append((entry.task.created_at or 0.0, entry.key, entry))
    if want is None or want in FINISHED:
        for record in finished:
            task_id = str(record.get(ev.F_TASK_ID, ""))
            if flt.wants(str(record.get("state")), record.get(ev.F_TASK_TYPE), task_id):
                keyed.append((_created(record.get(ev.F_CREATED_AT)), task_id, record))
    keyed.sort(key=lambda item: (-item[0], item[1]))
    page = keyed[offset : offset + limit]
    return [_any_row(item, now) for _, _, item in page], len(keyed)


def _any_row(item: Any, now: float) -> dict[str, Any]:
    if isinstance(item, Task):
        return live_row(item, now)
    if isinstance(item, DeadLetter):
        return dead_row(item)
    return finished_row(item)


def task_types(state: QueueState, finished: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every task type the projection or the recently finished tasks show."""
    types = {t.type for t in state.tasks.values()} | {e.task.type for e in state.dlq.values()}
    types.update(str(r.get(ev.F_TASK_TYPE)) for r in finished if r.get(ev.F_TASK_TYPE))
    return sorted(types)
