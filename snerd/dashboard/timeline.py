"""A task's history as timeline entries, from the stored audit trail.

The states come from the replay tool's audit fold (:mod:`snerd.projections.history`),
fed only the records about the task and its ancestors: a task's state depends on
nothing else, and one filtering pass over the history is far cheaper than folding
every record. Blocking work (:func:`stored_records`, :func:`entries`): call it in a
thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from snerd.eventlog.base import Record, SkippedLine
from snerd.eventlog.history import iter_history
from snerd.projections import events as ev
from snerd.projections.history import Transition, audit
from snerd.projections.schedule import format_instant
from snerd.projections.state import QueueState
from snerd.projections.task import record_error

MAX_ENTRIES = 2000
MAX_PASSES = 4

Finished = Callable[[str], Mapping[str, Any] | None]


def subject(record: Mapping[str, Any]) -> Any:
    return record.get(ev.F_DLQ_KEY) or record.get(ev.F_TASK_ID)


def concerns(record: Mapping[str, Any], ids: str | set[str]) -> bool:
    """Whether ``record`` is about one of ``ids`` (a task id or a cron DLQ key)."""
    wanted = {ids} if isinstance(ids, str) else ids
    return record.get(ev.F_TASK_ID) in wanted or record.get(ev.F_DLQ_KEY) in wanted


def ancestors(state: QueueState, finished: Finished, task_id: str) -> set[str]:
    """The task's parents, transitively, as far as the projection and the recently
    finished tasks know them."""
    out: set[str] = set()
    frontier = [task_id]
    while frontier:
        node = frontier.pop()
        task = state.tasks.get(node)
        entry = state.dlq.get(node)
        record = finished(node)
        if task is not None:
            parents: Iterable[str] = task.parents
        elif entry is not None:
            parents = entry.task.parents
        else:
            parents = (record or {}).get(ev.F_TRIGGER_AFTER_IDS) or ()
        for parent in parents:
            if parent not in out and parent != task_id:
                out.add(parent)
                frontier.append(parent)
    return out


def _parents_named(records: Iterable[Mapping[str, Any]], ids: set[str]) -> set[str]:
    named: set[str] = set()
    for record in records:
        if record.get(ev.F_TASK_ID) in ids:
            parents = record.get(ev.F_TRIGGER_AFTER_IDS)
            if isinstance(parents, list):
                named.update(p for p in parents if isinstance(p, str))
    return named


def stored_records(storage: str | os.PathLike[str], task_id: str, known: set[str]) -> list[Record]:
    """Every stored record about ``task_id`` and its ancestors (``known`` ones first; a
    parent only the log still names costs another pass)."""
    ids = {task_id, *known}
    records: list[Record] = []
    for _ in range(MAX_PASSES):
        records = [
            item for item in iter_history(storage)
            if not isinstance(item, SkippedLine) and concerns(item, ids)
        ]  # fmt: skip
        more = _parents_named(records, ids) - ids
        if not more:
            break
        ids |= more
    return records


def entries(records: Sequence[Mapping[str, Any]], task_id: str) -> list[dict[str, Any]]:
    """The timeline of ``task_id``: one entry per transition the audit fold saw."""
    by_seq = {r[ev.F_SEQ]: r for r in records if type(r.get(ev.F_SEQ)) is int}
    history = audit(records, keep=lambda t: t == task_id).tasks.get(task_id)
    if history is None:
        return []
    out = []
    for transition in history.transitions:
        raw = by_seq.get(transition.seq) if transition.seq is not None else None
        out.append(entry(transition, raw if raw is not None and concerns(raw, task_id) else None))
    if len(out) > MAX_ENTRIES:  # keep the start and the most recent
        elided = {"event": "elided", "count": len(out) - MAX_ENTRIES}
        out = [*out[:100], elided, *out[-(MAX_ENTRIES - 100) :]]
    return out


def entry(transition: Transition, raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """When, what, who, which attempt, why, the state after, and any payload."""
    at = format_instant(transition.ts) if transition.ts else None
    out: dict[str, Any] = {"event": transition.event, "state": transition.state, "at": at}
    for name in ("seq", "daemon", "attempt", "reason", "error"):
        value = getattr(transition, name)
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
