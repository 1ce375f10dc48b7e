"""A task that has left the live projection (completed, cancelled, purged), as the
``get`` reply shows it: rebuilt from its stored records with the audit fold.

The queue projection forgets a task when it ends (memory follows live tasks only), so
its result, attempts and timings are read back from the log's history (archives
included) on demand; what compaction's archive retention deleted is gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from snerd.projections import events as ev
from snerd.projections.events import Record
from snerd.projections.history import Transition, audit
from snerd.projections.schedule import format_instant
from snerd.projections.views.status import COMPLETED
from snerd.projections.views.tasks import finished_row

_ENDS_ATTEMPT = frozenset(
    {ev.SUCCEEDED, ev.RETRY_SCHEDULED, ev.DEAD_LETTERED, ev.RESCHEDULED, ev.CLAIM_RELEASED}
)


def ended_view(records: Iterable[Record], task_id: str) -> dict[str, Any] | None:
    """The task's last full state in the log's field names, with ``status``,
    ``attempt`` (attempts made), ``attempts`` (each one's start, end, outcome and
    error), ``enqueuedAt``/``finishedAt`` and, when it completed, ``result`` (the
    last success's value, null when none was recorded). ``task_id`` may be a DLQ key
    (a cron occurrence's ``id@instant``). None when no usable record names it."""
    mine = [r for r in records if ev.task_id_of(r) == task_id or r.get(ev.F_DLQ_KEY) == task_id]
    history = audit(mine).tasks.get(task_id)
    if history is None or history.state is None:
        return None
    last = next((r for r in reversed(mine) if ev.F_TASK_TYPE in r), {})
    view = {k: v for k, v in last.items() if k in ev.TASK_FIELDS}
    view["status"] = history.state
    view["attempt"] = history.attempts
    view["attempts"] = attempts(history.transitions)
    times = [t.ts for t in history.transitions if t.ts is not None]
    view["enqueuedAt"] = _instant(times[0] if times else None)
    view["finishedAt"] = _instant(times[-1] if times and ev.F_DELETED_AT in last else None)
    if history.state == COMPLETED:
        done = next((r for r in reversed(mine) if r.get(ev.F_EVENT) == ev.SUCCEEDED), last)
        view["result"] = done.get(ev.F_RESULT)
    return view


def ended_row(view: Mapping[str, Any]) -> dict[str, Any]:
    """The dashboard's row of an ended task from its :func:`ended_view`, with its
    ``result`` and ``attempts``."""
    row = finished_row({**view, "state": view["status"]})
    row.update(finishedAt=view["finishedAt"], attempt=view["attempt"])
    row.update(attempts=view["attempts"], result=view.get("result"))
    return row


def attempts(transitions: Iterable[Transition]) -> list[dict[str, Any]]:
    """One entry per claimed attempt: ``attempt``, ``daemon``, ``startedAt``,
    ``endedAt`` and ``outcome`` (the event that ended it; null while it runs) and
    ``error``."""
    out: list[dict[str, Any]] = []
    for t in transitions:
        if t.event == ev.CLAIMED:
            out.append({"attempt": t.attempt, "daemon": t.daemon, "startedAt": _instant(t.ts),
                        "endedAt": None, "outcome": None, "error": None})  # fmt: skip
        elif t.event in _ENDS_ATTEMPT and out and out[-1]["outcome"] is None:
            out[-1].update(endedAt=_instant(t.ts), outcome=t.event, error=t.error)
    return out


def _instant(ts: float | None) -> str | None:
    return None if ts is None else format_instant(ts)
