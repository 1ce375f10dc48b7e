"""What a ``stats`` reply says about this process: gathered here, shown by a pure view.

The shell reads the engine, the process and the log (:func:`daemon_info`,
:func:`log_figures`); :func:`snerd.projections.views.stats.stats_view` turns them and
the state into the reply. :func:`stats` is both, for the daemon's ``stats`` reply,
``Queue.stats()`` and the dashboard's ``/api/stats``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from snerd.eventlog.base import EventLog
from snerd.projections.views.stats import (
    DaemonInfo,
    LogFigures,
    Totals,
    snerdmq_stats,
    stats_view,
)

if TYPE_CHECKING:
    from snerd.dispatcher.engine import Engine


def daemon_info(engine: Engine) -> DaemonInfo:
    registered: set[str] = set()
    for executor in engine.executors:
        registered.update(executor.task_types)
    return DaemonInfo(
        id=engine.daemon,
        pid=os.getpid(),
        registered=frozenset(registered),
        in_flight=len(engine.runs),
        max_workers=engine.config.max_workers,
        draining=engine.draining,
    )


def log_figures(log: EventLog) -> LogFigures:
    figures = log.stats()
    return LogFigures(figures.size_bytes, figures.records, figures.skipped)


def stats(engine: Engine) -> dict[str, Any]:
    """The ``stats`` view of a started engine, now."""
    return stats_view(
        engine.state, engine.clock.now(), daemon=daemon_info(engine), log=log_figures(engine.log)
    )


def sdk_stats(engine: Engine) -> dict[str, Any]:
    """SnerdMQ's top-level ``stats`` keys for a started engine, now."""
    now = engine.clock.now()
    totals = Totals(dict(engine.totals), now - engine.started_at)
    return snerdmq_stats(engine.state, now, totals)
