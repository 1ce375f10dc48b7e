"""A task's history as timeline entries, from the stored audit trail.

:func:`timeline` reads every archived and live log (``iter_history``) and keeps the
records about one task (its id, or a cron occurrence's DLQ key). It is blocking:
call it in a thread. :func:`entries` turns records into what the page draws.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from snerd.dashboard.views import error_text
from snerd.eventlog.base import Record, SkippedLine
from snerd.eventlog.history import iter_history
from snerd.projections import events as ev
from snerd.projections.schedule import format_instant

STATE_AFTER = {
    ev.ENQUEUED: "pending",
    ev.CLAIMED: "active",
    ev.PROGRESSED: "active",
    ev.SUCCEEDED: "completed",
    ev.RETRY_SCHEDULED: "scheduled",
    ev.DEAD_LETTERED: "dead_lettered",
    ev.RESCHEDULED: "scheduled",
    ev.CANCELLED: "cancelled",
    ev.REQUEUED: "pending",
    ev.CLAIM_RELEASED: "pending",
    ev.PURGED: "purged",
}
MAX_ENTRIES = 2000


def concerns(record: Mapping[str, Any], task_id: str) -> bool:
    """Whether ``record`` is about ``task_id`` (or the cron occurrence it names)."""
    return record.get(ev.F_TASK_ID) == task_id or record.get(ev.F_DLQ_KEY) == task_id


def entry(record: Mapping[str, Any]) -> dict[str, Any]:
    """One timeline entry: when, what, who, which attempt, why, and any payload."""
    event = record.get(ev.F_EVENT)
    if event is None:  # a SnerdMQ state line
        event = "completed" if record.get(ev.F_DELETED_AT) else "state"
        state = "completed" if record.get(ev.F_DELETED_AT) else "pending"
    else:
        state = STATE_AFTER.get(str(event), str(event))
    ts = record.get(ev.F_TS)
    at = format_instant(ts / 1000) if isinstance(ts, int | float) and ts > 0 else None
    out: dict[str, Any] = {"event": event, "state": state, "at": at, "ts": ts}
    for key, name in (
        (ev.F_SEQ, "seq"),
        (ev.F_DAEMON, "daemon"),
        (ev.F_ATTEMPT, "attempt"),
        (ev.F_REASON, "reason"),
        (ev.F_DLQ_KEY, "dlqKey"),
    ):
        if key in record:
            out[name] = record[key]
    error = error_text(record)
    if event in (ev.RETRY_SCHEDULED, ev.DEAD_LETTERED) and error:
        out["error"] = error
    if event == ev.RETRY_SCHEDULED:
        out["retryCount"] = record.get(ev.F_RETRY_COUNT)
        retry_at = record.get(ev.F_RETRY_AFTER_TIME)
        if retry_at != record.get(ev.F_CREATED_AT):
            out["retryAfterTime"] = retry_at
    runs_at = record.get(ev.F_EXECUTE_AT)
    if event in (ev.ENQUEUED, ev.RESCHEDULED) and runs_at != record.get(ev.F_CREATED_AT):
        out["executeAt"] = record.get(ev.F_EXECUTE_AT)
    if event == ev.PROGRESSED:
        out["data"] = record.get(ev.F_DATA)
    if record.get(ev.F_COMPACTED):
        out["compacted"] = True
    return out


def entries(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = [entry(r) for r in records]
    if len(out) > MAX_ENTRIES:  # keep the start and the most recent
        elided = {"event": "elided", "count": len(out) - MAX_ENTRIES}
        out = [*out[:100], elided, *out[-(MAX_ENTRIES - 100) :]]
    return out


def task_records(items: Iterable[Record | SkippedLine], task_id: str) -> list[Record]:
    return [i for i in items if not isinstance(i, SkippedLine) and concerns(i, task_id)]


def timeline(storage: str | os.PathLike[str], task_id: str) -> list[Record]:
    """Every stored record about ``task_id``, oldest first (blocking)."""
    return task_records(iter_history(storage), task_id)
