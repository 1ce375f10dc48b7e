"""Figures: the ``stats`` reply, rate-limit groups, and metrics counted from records.

:func:`stats_view` is what the daemon's ``stats`` reply, ``Queue.stats()`` and the
dashboard's ``/api/stats`` carry about the queue now (the caller gathers the daemon's
and the log's figures and passes them in: a view reads no engine).

Metrics count events, not tasks (:data:`METRICS`, bumped by evolve): ``enqueued``,
``started`` (claims that start an attempt), ``completed`` (successes, a cron
occurrence's included), ``failed_attempts`` (every attempt that failed, whether it
retries or dead-letters), ``dead_lettered`` and ``cancelled``. "failed" alone is no key
of ours; the SnerdMQ SDK dashboards' ``failed`` (in :func:`sdk_totals`) is their count
of tasks that ended as failures, i.e. our ``dead_lettered``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from snerd.projections import evolve
from snerd.projections.events import Event, Record
from snerd.projections.rates import RATE_WINDOW_SECONDS, window_slot_free_at
from snerd.projections.replay import BulkFolder
from snerd.projections.schedule import format_instant
from snerd.projections.state import QueueState
from snerd.projections.task import Task
from snerd.projections.views.status import counts, phase_counts

# --- now -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DaemonInfo:
    """The running daemon (or embedded engine) a ``stats`` reply describes."""

    id: str
    pid: int
    registered: Collection[str]  # task types this process runs
    in_flight: int
    max_workers: int
    draining: bool


@dataclass(frozen=True, slots=True)
class LogFigures:
    """The log's size as its owner reports it."""

    bytes: int
    records: int
    skipped: int


def stats_view(
    state: QueueState, now: float, *, daemon: DaemonInfo | None = None,
    log: LogFigures | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Tasks per status, per phase (``phases``), and the daemon's and log's figures."""
    out: dict[str, Any] = dict(counts(state, now))
    out["phases"] = phase_counts(state)
    if daemon is not None:
        out["daemon"] = {
            "id": daemon.id,
            "pid": daemon.pid,
            "registered": sorted(daemon.registered),
            "in_flight": daemon.in_flight,
            "max_workers": daemon.max_workers,
            "draining": daemon.draining,
        }
    if log is not None:
        out["log"] = {"bytes": log.bytes, "records": log.records, "skipped": log.skipped}
    return out


@dataclass(frozen=True, slots=True)
class Totals:
    """Events this process has folded since it started (its start-up replay not
    included): what SnerdMQ's daemon counts in its ``total_*`` stats keys."""

    counts: Mapping[str, int]
    uptime: float  # seconds since this process started


def snerdmq_stats(state: QueueState, now: float, totals: Totals) -> dict[str, Any]:
    """SnerdMQ's top-level ``stats`` reply keys, which the Node SDK's dashboard reads:
    ``total_enqueued``, ``total_executed`` (attempts that succeeded), ``total_failed``
    (attempts that failed), ``total_dlq`` (dead letters), ``queue_depth`` (live tasks
    not running: pending, scheduled, blocked), ``uptime_secs`` and ``per_shard`` (one
    log, so one shard, numbered 0, with the same figures)."""
    live = counts(state, now)
    figures = {
        "total_enqueued": totals.counts.get(evolve.ENQUEUED, 0),
        "total_executed": totals.counts.get(evolve.COMPLETED, 0),
        "total_failed": totals.counts.get(evolve.FAILED_ATTEMPTS, 0),
        "total_dlq": totals.counts.get(evolve.DEAD_LETTERED, 0),
        "queue_depth": live["pending"] + live["scheduled"] + live["blocked"],
    }
    return {**figures, "uptime_secs": int(max(0.0, totals.uptime)),
            "per_shard": [{"shard": 0, **figures}]}  # fmt: skip


def slot_free_at(state: QueueState, task: Task, now: float) -> float | None:
    """When a rate-limited task's group frees a slot; None if it may dispatch now."""
    if not (task.rate_group and task.max_per_minute):
        return None
    return window_slot_free_at(state.windows.get(task.rate_group, ()), task.max_per_minute, now)


def group_limits(
    state: QueueState, known_limits: Mapping[str, int] | None = None
) -> dict[str, int | None]:
    """Every rate-limit group with live tasks or recent dispatches, and its limit: the
    least its live tasks give, else ``known_limits``' (the last limit the history gave
    it: its tasks may all have ended while the window holds), else None."""
    limits: dict[str, int | None] = dict.fromkeys(state.windows)
    for task in state.tasks.values():
        group = task.rate_group
        if group:
            old = limits.get(group)
            mine = task.max_per_minute
            limits[group] = min(old, mine) if old and mine else (old or mine or None)
    known = known_limits or {}
    return {group: limit or known.get(group) for group, limit in limits.items()}


def rate_groups(
    state: QueueState, now: float, known_limits: Mapping[str, int] | None = None
) -> list[dict[str, Any]]:
    """Every rate-limit group with live tasks or recent dispatches: limit and window use
    (the limit as :func:`group_limits` gives it)."""
    waiting: dict[str, int] = {}
    for task in state.tasks.values():
        if task.rate_group:
            waiting[task.rate_group] = waiting.get(task.rate_group, 0) + 1
    out = []
    for group, limit in sorted(group_limits(state, known_limits).items()):
        window = state.windows.get(group, ())
        used = sum(1 for t in window if t > now - RATE_WINDOW_SECONDS)
        free_at = window_slot_free_at(window, limit, now) if limit else None
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


# --- metrics: events counted ---------------------------------------------------------

METRICS: Final = evolve.METRICS
"""What each event counts as is written in :mod:`snerd.projections.evolve` (the one place
an event's meaning is written); the words are ``enqueued``, ``started``, ``completed``,
``failed_attempts``, ``dead_lettered``, ``cancelled``."""


def counted(records: Iterable[Record]) -> Iterator[tuple[str, Event]]:
    """(metric, event) for every counter evolve bumps over ``records``, in order: the
    history the live fold's delta (``delta.counted``) would have reported, read by a
    bulk fold (memory proportional to live tasks)."""
    heard: list[tuple[str, Event]] = []
    folder = BulkFolder(on_count=lambda metric, event: heard.append((metric, event)))
    for record in records:
        folder.feed((record,))
        if heard:
            yield from heard
            heard.clear()


def state_totals(state: QueueState) -> dict[str, int]:
    """Every metric's count since the log began, from the projection's totals by task
    type (``QueueState.counters``, restated by compaction): what ``/metrics`` reports,
    summed over types."""
    totals = dict.fromkeys(METRICS, 0)
    for (metric, _), n in state.counters.items():
        if metric in totals:
            totals[metric] += n
    return totals


def sdk_totals(totals: Mapping[str, int]) -> dict[str, int]:
    """The SnerdMQ SDK dashboards' ``enqueued``/``processed``/``failed`` from our
    metric totals (their ``failed``: tasks that ended as failures, our dead letters)."""
    return {
        "enqueued": totals.get(evolve.ENQUEUED, 0),
        "processed": totals.get(evolve.COMPLETED, 0),
        "failed": totals.get(evolve.DEAD_LETTERED, 0),
    }
