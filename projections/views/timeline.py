"""A task's history as timeline entries, from the audit fold.

The states come from :mod:`snerd.projections.history` (the replay tool's fold), fed
only the records about the task and its ancestors: a task's state depends on nothing
else, and one filtering pass over the stored history (the caller's I/O, with
:func:`concerns` and :func:`parents_named`) is far cheaper than folding every record.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from snerd.projections import events as ev
from snerd.projections import history
from snerd.projections.events import Record
from snerd.projections.schedule import format_instant
from snerd.projections.task import record_error

MAX_ENTRIES: Final = 2000
"""Entries at most: the first 100 and the most recent, with one ``elided`` between."""


def subject(record: Record) -> Any:
    """The id a record is shown under: a cron occurrence's DLQ key, else its task id."""
    return record.get(ev.F_DLQ_KEY) or ev.task_id_of(record)


def concerns(record: Record, ids: str | set[str]) -> bool:
    """Whether ``record`` is about one of ``ids`` (a task id or a cron DLQ key)."""
    wanted = {ids} if isinstance(ids, str) else ids
    return ev.task_id_of(record) in wanted or record.get(ev.F_DLQ_KEY) in wanted


def parents_named(records: Iterable[Record], ids: set[str]) -> set[str]:
    """The DAG parents that records about ``ids`` name."""
    named: set[str] = set()
    for record in records:
        if record.get(ev.F_TASK_ID) in ids:
            parents = record.get(ev.F_TRIGGER_AFTER_IDS)
            if isinstance(parents, list):
                named.update(p for p in parents if isinstance(p, str))
    return named


def timeline(records: Sequence[Record], task_id: str) -> list[dict[str, Any]]:
    """The timeline of ``task_id``: one entry per transition the audit fold saw."""
    by_seq = {r[ev.F_SEQ]: r for r in records if type(r.get(ev.F_SEQ)) is int}
    found = history.audit(records, keep=lambda t: t == task_id).tasks.get(task_id)
    if found is None:
        return []
    out = []
    for transition in found.transitions:
        raw = by_seq.get(transition.seq) if transition.seq is not None else None
        out.append(entry(transition, raw if raw is not None and concerns(raw, task_id) else None))
    if len(out) > MAX_ENTRIES:  # keep the start and the most recent
        elided = {"event": "elided", "count": len(out) - MAX_ENTRIES}
        out = [*out[:100], elided, *out[-(MAX_ENTRIES - 100) :]]
    return out


def entry(transition: history.Transition, raw: Record | None) -> dict[str, Any]:
    """When, what, who, which attempt, why, the state after, and any payload."""
    at = format_instant(transition.ts) if transition.ts else None
    out: dict[str, Any] = {"event": transition.event, "state": transition.state, "at": at}
    for name, value in (
        ("seq", transition.seq), ("daemon", transition.daemon),
        ("attempt", transition.attempt), ("reason", transition.reason),
        ("error", transition.error),
    ):  # fmt: skip
        if value is not None:
            out[name] = value
    if raw is None:
        return out
    event = raw.get(ev.F_EVENT)
    if event == ev.PROGRESSED:
        out["data"] = raw.get(ev.F_DATA)
    if event == ev.RETRY_SCHEDULED:
        out["retryCount"] = raw.get(ev.F_RETRY_COUNT)
        if raw.get(ev.F_RETRY_AFTER_TIME) != raw.get(ev.F_CREATED_AT):
            out["retryAfterTime"] = raw.get(ev.F_RETRY_AFTER_TIME)
    runs_at = raw.get(ev.F_EXECUTE_AT)
    if event in (ev.ENQUEUED, ev.RESCHEDULED) and runs_at != raw.get(ev.F_CREATED_AT):
        out["executeAt"] = runs_at
    if raw.get(ev.F_DLQ_KEY):
        out["dlqKey"] = raw[ev.F_DLQ_KEY]
    if raw.get(ev.F_COMPACTED):
        out["compacted"] = True
    if "error" not in out and event in (ev.RETRY_SCHEDULED, ev.DEAD_LETTERED):
        error = record_error(raw)
        if error:
            out["error"] = error
    return out
