"""``GET /metrics`` (Prometheus text format) and ``GET /healthz`` on the dashboard.

The figures come from the read models every face uses, over the projection the
engine folds from the shared log, so any process serving ``/metrics`` reports the
whole queue (every daemon's work):

====================================  =========  ==========================================
metric                                kind       from
====================================  =========  ==========================================
``snerd_tasks_enqueued_total``...     counter    ``QueueState.counters`` by ``type``: the
                                                 whole history (compaction restates it)
``snerd_tasks``                       gauge      tasks per ``state`` (``views.status``)
``snerd_rate_limit_*``                gauge      window use per ``group`` (``views.stats``)
``snerd_task_latency_seconds``        histogram  due -> claim, by ``type``
``snerd_task_run_seconds``            histogram  claim -> outcome, by ``type``
``snerd_log_*``                       mixed      the log file (size, records) and this
                                                 process's writes (commits, fsyncs)
``snerd_daemons_live``                gauge      daemons holding a liveness lock
====================================  =========  ==========================================

A fresh registry and a one-shot :class:`QueueCollector` per scrape: no global mutable
metrics, nothing to keep in step with the log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from snerd.dashboard.api import storage_of
from snerd.dispatcher.engine import Engine
from snerd.eventlog import Liveness
from snerd.eventlog.base import LogStats
from snerd.projections import counters as ctr
from snerd.projections import evolve
from snerd.projections.state import QueueState
from snerd.projections.views import stats as figures
from snerd.projections.views import status as st

COUNTERS: Final[Mapping[str, tuple[str, str]]] = {
    evolve.ENQUEUED: ("snerd_tasks_enqueued", "Tasks enqueued."),
    evolve.STARTED: ("snerd_attempts_started", "Attempts started (claims that start one)."),
    evolve.COMPLETED: ("snerd_tasks_succeeded", "Successes (a cron occurrence's included)."),
    evolve.FAILED_ATTEMPTS: (
        "snerd_attempts_failed", "Attempts that failed (retried or dead-lettered)."),
    evolve.DEAD_LETTERED: ("snerd_tasks_dead_lettered", "Tasks that went to the DLQ."),
    evolve.DEDUPLICATED: ("snerd_tasks_deduplicated", "Enqueues dropped by auto_dedupe."),
    evolve.CANCELLED: ("snerd_tasks_cancelled", "Tasks cancelled by an operator."),
}  # fmt: skip
HISTOGRAMS: Final[Mapping[str, tuple[str, str]]] = {
    ctr.LATENCY: ("snerd_task_latency_seconds",
                  "From when an attempt was due (enqueue, execute_at, retry) to its claim."),
    ctr.RUN_TIME: ("snerd_task_run_seconds", "From an attempt's claim to its outcome."),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Scrape:
    """What one scrape reports, gathered from the engine (the collector reads no engine)."""

    state: QueueState
    now: float
    log: LogStats
    live_daemons: int | None


class QueueCollector(Collector):
    """The queue's figures as Prometheus metric families."""

    def __init__(self, scrape: Scrape) -> None:
        self.scrape = scrape

    def collect(self) -> Iterator[Metric]:
        yield from self._counters()
        yield from self._histograms()
        yield from self._gauges()
        yield from self._log()

    def _counters(self) -> Iterator[Metric]:
        state = self.scrape.state
        families = {
            metric: CounterMetricFamily(name, text, labels=["type"])
            for metric, (name, text) in COUNTERS.items()
        }
        for (metric, kind), n in sorted(state.counters.items()):
            family = families.get(metric)
            if family is not None:
                family.add_metric([kind], n)
        yield from families.values()

    def _histograms(self) -> Iterator[Metric]:
        state = self.scrape.state
        for name, (metric, text) in HISTOGRAMS.items():
            family = HistogramMetricFamily(metric, text, labels=["type"])
            for (hist_name, kind), hist in sorted(state.histograms.items()):
                if hist_name == name:
                    family.add_metric([kind], ctr.cumulative(hist), hist[1])
            yield family

    def _gauges(self) -> Iterator[Metric]:
        state, now = self.scrape.state, self.scrape.now
        tasks = GaugeMetricFamily("snerd_tasks", "Tasks per state now.", labels=["state"])
        for state_name, n in st.counts(state, now).items():
            tasks.add_metric([state_name], n)
        yield tasks
        used = GaugeMetricFamily("snerd_rate_limit_window_used",
                                 "Dispatches in the group's rolling 60 s window.",
                                 labels=["group"])  # fmt: skip
        limit = GaugeMetricFamily(
            "snerd_rate_limit_max_per_minute",
            "The group's limit (from its live tasks).",
            labels=["group"],
        )
        waiting = GaugeMetricFamily("snerd_rate_limit_waiting",
                                    "Live tasks in the group.", labels=["group"])  # fmt: skip
        for row in figures.rate_groups(state, now):
            used.add_metric([row["group"]], row["used"])
            waiting.add_metric([row["group"]], row["waiting"])
            if row["maxPerMinute"]:
                limit.add_metric([row["group"]], row["maxPerMinute"])
        yield from (used, limit, waiting)
        if self.scrape.live_daemons is not None:
            yield GaugeMetricFamily("snerd_daemons_live",
                                    "Daemons holding a liveness lock on the storage.",
                                    value=self.scrape.live_daemons)  # fmt: skip

    def _log(self) -> Iterator[Metric]:
        log = self.scrape.log
        yield GaugeMetricFamily("snerd_log_bytes", "Size of the live log file.",
                                value=log.size_bytes)  # fmt: skip
        yield GaugeMetricFamily("snerd_log_records",
                                "Records in the live log (since its last compaction).",
                                value=log.records)  # fmt: skip
        yield GaugeMetricFamily("snerd_log_skipped_records",
                                "Torn or garbage lines skipped in the live log.",
                                value=log.skipped)  # fmt: skip
        yield CounterMetricFamily("snerd_log_group_commits",
                                  "Batches this process wrote (one write each).",
                                  value=log.commits)  # fmt: skip
        yield CounterMetricFamily("snerd_log_fsyncs", "fsyncs this process made.",
                                  value=log.fsyncs)  # fmt: skip
        yield CounterMetricFamily("snerd_log_fsync_seconds",
                                  "Time this process spent in fsync.",
                                  value=log.fsync_seconds)  # fmt: skip


def exposition(scrape: Scrape) -> bytes:
    """The text exposition of one scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(scrape))
    return generate_latest(registry)


def _live_daemons(engine: Engine) -> int | None:
    storage = storage_of(engine)
    if storage is not None:
        return len(Liveness(storage).list_daemons(alive_only=True))
    return None if engine.liveness is None else 1


async def metrics(request: web.Request, engine: Engine) -> web.Response:
    live = await asyncio.to_thread(_live_daemons, engine)
    scrape = Scrape(engine.state, engine.clock.now(), engine.log.stats(), live)
    body = exposition(scrape)
    content_type, _, charset = CONTENT_TYPE_LATEST.partition("; charset=")
    return web.Response(body=body, content_type=content_type, charset=charset or None)


def health(engine: Engine) -> tuple[bool, dict[str, Any]]:
    """(ready, details): the log is open and not refusing writes, and this process has
    read all of it (``unread_bytes`` 0, the projection at the log's last ``seq``)."""
    stats = engine.log.stats()
    degraded = bool(getattr(engine.log, "degraded", False))
    caught_up = stats.unread_bytes == 0 and engine.state.last_seq >= stats.last_seq
    ready = not degraded and caught_up
    return ready, {
        "status": "ok" if ready else "unavailable",
        "log": "degraded" if degraded else "open",
        "caughtUp": caught_up,
        "seq": engine.state.last_seq,
        "logSeq": stats.last_seq,
        "unreadBytes": stats.unread_bytes,
        "draining": engine.draining,
    }
