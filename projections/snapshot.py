"""The records a compacted log starts with: the projection, written back as lines.

Guarantee (checked by property tests): folding ``snapshot_records(fold(log), now)``
gives the same live tasks (with their relative FIFO order), DLQ, blocking facts,
claims, rate windows and totals by task type (``counters``) as of ``now`` as folding
the whole log. Every line of a snapshot but ``counters`` is marked ``compacted`` (or is
light and counts nothing), so its restatements are never counted again.
"""

from __future__ import annotations

from typing import Any

from snerd.projections import events as ev
from snerd.projections.counters import counters_record
from snerd.projections.rates import RATE_WINDOW_SECONDS
from snerd.projections.state import DeadLetter, QueueState
from snerd.projections.task import ACTIVE, Task, task_to_record


def dead_letter_record(entry: DeadLetter) -> dict[str, Any]:
    record = task_to_record(entry.task, deleted_at=entry.at or entry.task.created_at or 0.0)
    record[ev.F_EVENT] = ev.DEAD_LETTERED
    record[ev.F_REASON] = entry.reason
    record[ev.F_COMPACTED] = True
    if entry.key != entry.task.id:
        record[ev.F_DLQ_KEY] = entry.key
    if entry.at is not None:
        record[ev.F_TS] = ev.ms(entry.at)
    if entry.task.attempt:
        record[ev.F_ATTEMPT] = entry.task.attempt
    return record


def task_records(task: Task) -> list[dict[str, Any]]:
    """A live task as a full-state line, plus its claim and progress if running."""
    record = task_to_record(task)
    record[ev.F_EVENT] = ev.ENQUEUED
    record[ev.F_COMPACTED] = True
    if task.attempt:
        record[ev.F_ATTEMPT] = task.attempt
    out = [record]
    claim = task.claim
    if task.phase == ACTIVE and claim is not None:
        light: dict[str, Any] = {
            ev.F_EVENT: ev.CLAIMED,
            ev.F_TASK: task.id,
            ev.F_TS: ev.ms(claim.at),
            ev.F_DAEMON: claim.daemon,
            ev.F_ATTEMPT: claim.attempt,
            ev.F_COMPACTED: True,
        }
        if claim.lease_until is not None:
            light[ev.F_LEASE_UNTIL] = ev.ms(claim.lease_until)
        out.append(light)
        if task.progress is not None:
            out.append(
                {
                    ev.F_EVENT: ev.PROGRESSED,
                    ev.F_TASK: task.id,
                    ev.F_ATTEMPT: claim.attempt,
                    ev.F_DATA: task.progress,
                }
            )
    return out


def snapshot_records(state: QueueState, now: float) -> list[dict[str, Any]]:
    """Every record needed to rebuild ``state`` as of ``now``, in replay order."""
    out: list[dict[str, Any]] = []
    totals = counters_record(state.counters, state.histograms)
    if totals is not None:
        out.append(totals)
    for group, times in sorted(state.windows.items()):
        recent = [ev.ms(t) for t in times if t > now - RATE_WINDOW_SECONDS]
        if recent:
            out.append({ev.F_EVENT: ev.RATE_WINDOW, ev.F_GROUP: group, ev.F_TIMES: recent})
    for entry in sorted(state.dlq.values(), key=lambda e: e.key):
        out.append(dead_letter_record(entry))
    for task in sorted(state.tasks.values(), key=lambda t: t.order):
        out.extend(task_records(task))
    return out
