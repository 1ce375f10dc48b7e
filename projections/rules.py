"""The rules that decide a queued task's phase, shared by both fold paths."""

from __future__ import annotations

from collections.abc import Container

from snerd.projections.task import BLOCKED, DELAYED, READY, Task


def phase_for(task: Task, tasks: Container[str], dlq: Container[str]) -> tuple[str, bool]:
    """(phase, doomed) of a task that is not running.

    Blocked while some parent is live or dead-lettered (an absent parent counts as
    completed, per seed 003); doomed when some parent is dead-lettered. A free task
    with a ``not_before`` time waits in the timers until :func:`state.advance`
    says the time has come, so the phase never depends on a clock.
    """
    doomed = False
    blocked = False
    for parent in task.parents:
        if parent == task.id:
            continue
        if parent in dlq:
            doomed = blocked = True
            break
        if parent in tasks:
            blocked = True
    if blocked:
        return BLOCKED, doomed
    return (DELAYED if task.not_before is not None else READY), False
