"""The status vocabulary: the one word every face shows for a task.

A task is ``pending`` (runnable now), ``scheduled`` (waiting for its time: ``executeAt``
or a retry's backoff), ``blocked`` (waiting for DAG parents), ``active`` (an attempt
is running), or it has ended: ``completed``, ``dead_lettered`` (retries exhausted, or
failed through from a dead-lettered parent; it stays inspectable and requeueable) or
``cancelled``. A failed attempt is an event (counted by
:data:`snerd.projections.views.stats.FAILED_ATTEMPTS`), never a status: a task whose
attempt failed is ``scheduled`` for its retry, or ``dead_lettered``.

Pending vs scheduled depends on an instant, so :func:`status_of` takes ``now``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from snerd.projections import task as phases
from snerd.projections.state import QueueState
from snerd.projections.task import Task

PENDING: Final = "pending"
SCHEDULED: Final = "scheduled"
BLOCKED: Final = "blocked"
ACTIVE: Final = "active"
COMPLETED: Final = "completed"
DEAD_LETTERED: Final = "dead_lettered"
CANCELLED: Final = "cancelled"

STATES: Final = (PENDING, SCHEDULED, BLOCKED, ACTIVE, COMPLETED, DEAD_LETTERED, CANCELLED)
"""Every status, in the order the faces list them."""
LIVE: Final = frozenset({PENDING, SCHEDULED, BLOCKED, ACTIVE})
"""Statuses of tasks in the projection's task table."""
ENDED: Final = frozenset({COMPLETED, DEAD_LETTERED, CANCELLED})
FINISHED: Final = frozenset({COMPLETED, CANCELLED})
"""Ended and gone from the projection (a dead-lettered task stays, in the DLQ)."""
ABSENT: Final = "absent"
"""Not a status: an id nothing knows (a DAG child treats such a parent as completed)."""


def status_of(task: Task, now: float | None) -> str:
    """The status of a live task as of ``now`` (None: no clock known, so a delayed
    task counts as scheduled)."""
    if task.phase == phases.ACTIVE:
        return ACTIVE
    if task.phase == phases.BLOCKED:
        return BLOCKED
    if task.phase == phases.DELAYED and (now is None or (task.not_before or 0.0) > now):
        return SCHEDULED
    return PENDING


def state_of(
    state: QueueState, task_id: str, now: float, finished: Mapping[str, Any] | None = None
) -> str:
    """The status of any id: live, dead-lettered, or ended as ``finished`` (a recently
    finished task's row, with its ``state``) says; :data:`ABSENT` if nothing knows it."""
    task = state.tasks.get(task_id)
    if task is not None:
        return status_of(task, now)
    if task_id in state.dlq:
        return DEAD_LETTERED
    if finished is not None:
        return str(finished.get("state", COMPLETED))
    return ABSENT


def counts(state: QueueState, now: float) -> dict[str, int]:
    """Tasks per status the projection holds: the live ones and the dead-lettered."""
    out = dict.fromkeys((PENDING, SCHEDULED, BLOCKED, ACTIVE), 0)
    for task in state.tasks.values():
        out[status_of(task, now)] += 1
    out[DEAD_LETTERED] = len(state.dlq)
    return out


def phase_counts(state: QueueState) -> dict[str, int]:
    """Live tasks per projection phase (ready, delayed, blocked, active), plus the DLQ:
    the dispatcher's view, for diagnostics (``stats`` reply key ``phases``)."""
    out = dict.fromkeys((phases.READY, phases.DELAYED, phases.BLOCKED, phases.ACTIVE), 0)
    for task in state.tasks.values():
        out[task.phase] += 1
    out[DEAD_LETTERED] = len(state.dlq)
    return out


# --- the SnerdMQ SDK dashboards' words ---------------------------------------------------

SDK_QUEUED: Final = "queued"
SDK_ACTIVE: Final = "active"
SDK_FAILED: Final = "failed"
SDK_COMPLETED: Final = "completed"
SDK_DEAD_LETTER: Final = "dead_letter"


def sdk_status(status: str, last_error: str | None) -> str:
    """The word the SnerdMQ SDK dashboards show in a task row's ``status`` for one of
    ours. Their ``failed`` is a live task whose last attempt failed (it waits for its
    retry): the only place "failed" is a task's word, and only in that SDK key."""
    if status == ACTIVE:
        return SDK_ACTIVE
    if status == DEAD_LETTERED:
        return SDK_DEAD_LETTER
    if status in FINISHED:
        return SDK_COMPLETED
    return SDK_FAILED if last_error else SDK_QUEUED
