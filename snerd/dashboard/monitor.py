"""What the dashboard knows beyond the live projection: totals, throughput, recent ends.

:class:`Monitor` is an engine observer (``engine.observers``). It counts records by
event type per minute (throughput), keeps the tasks that recently completed or were
cancelled (they leave the projection), the last events of recently touched tasks, and
tells its listeners what changed. Each record is counted once: only records with an
integer ``seq`` above the last one counted (compaction snapshots and replays after a
reset restate history and are not counted again). :func:`scan` computes the same
figures from the stored history so a dashboard started late still shows them.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from snerd.eventlog.base import Record, SkippedLine
from snerd.projections import events as ev
from snerd.projections import evolve
from snerd.projections.delta import Delta
from snerd.projections.events import Event
from snerd.projections.views.stats import counted as views_counted

MINUTES = 15
"""How many minutes of throughput are kept and shown."""
RECENT_FINISHED = 500
RECENT_TASKS = 500
EVENTS_PER_TASK = 50

METRICS = evolve.METRICS
"""The counters, bumped by ``projections.evolve`` (the one place that says what an event
counts as): a failed attempt counts as ``failed_attempts`` whether it retries or
dead-letters; a cron task's next occurrence counts as ``completed`` unless its current one
was dead-lettered; a claim counts as ``started`` only when it starts an attempt."""

Listener = Callable[[Sequence[str], Sequence[tuple[str, Any]], bool], None]
"""Called with (changed task ids, progress items, reset) after every observed fold."""

Counted = Sequence[tuple[str, Event]]


def _seq(record: Record) -> int | None:
    seq = record.get(ev.F_SEQ)
    return seq if type(seq) is int else None


@dataclass(slots=True)
class Figures:
    """Totals since the log began, per-minute counts, and recently finished tasks."""

    totals: collections.Counter[str] = field(default_factory=collections.Counter)
    minutes: dict[int, collections.Counter[str]] = field(default_factory=dict)
    finished: collections.OrderedDict[str, dict[str, Any]] = field(
        default_factory=collections.OrderedDict
    )

    def count(self, counted: Counted, keep_after_minute: int) -> None:
        for metric, event in counted:
            self.totals[metric] += 1
            at = ev.record_time(event.record)
            if at is not None:
                minute = int(at // 60)
                if minute > keep_after_minute:
                    self.minutes.setdefault(minute, collections.Counter())[metric] += 1
            if metric in (evolve.COMPLETED, evolve.CANCELLED) or metric == evolve.ENQUEUED:
                self.note_end(event.record)

    def note_end(self, record: Record) -> None:
        """Remember a completed/cancelled task; forget it when its id comes back."""
        event = record.get(ev.F_EVENT)
        task_id = record.get(ev.F_TASK_ID)
        if not isinstance(task_id, str):
            return
        if event in (ev.SUCCEEDED, ev.CANCELLED) and not record.get(ev.F_COMPACTED):
            self.finished.pop(task_id, None)
            row = {k: v for k, v in record.items() if k not in (ev.F_SEQ, ev.F_RESULT)}
            row["state"] = "completed" if event == ev.SUCCEEDED else "cancelled"
            self.finished[task_id] = row
            while len(self.finished) > RECENT_FINISHED:
                self.finished.popitem(last=False)
        elif event in (ev.ENQUEUED, ev.REQUEUED):
            self.finished.pop(task_id, None)

    def trim(self, keep_after_minute: int) -> None:
        for minute in [m for m in self.minutes if m <= keep_after_minute]:
            del self.minutes[minute]


def scan(items: Iterable[Record | SkippedLine], *, upto_seq: int, now: float) -> Figures:
    """The figures of every stored record with ``seq <= upto_seq`` (blocking: a thread),
    counted by the same ``evolve`` as the live fold (through a bulk fold,
    :func:`snerd.projections.views.stats.counted`)."""
    figures = Figures()
    keep_after = int(now // 60) - MINUTES
    counted: list[tuple[str, Event]] = []
    records = (
        item for item in items
        if not isinstance(item, SkippedLine) and ((seq := _seq(item)) is None or seq <= upto_seq)
    )  # fmt: skip
    for metric, event in views_counted(records):
        if event.seq is not None and event.seq <= upto_seq:
            counted.append((metric, event))
        if len(counted) >= 4096:
            figures.count(counted, keep_after)
            counted.clear()
    figures.count(counted, keep_after)
    return figures


class Monitor:
    """The dashboard's engine observer. Register with :meth:`attach`."""

    def __init__(self, *, now: Callable[[], float], watermark: int = 0) -> None:
        self._now = now
        self.watermark = watermark
        """Records with a seq at or below this were counted (or belong to the scan)."""
        self.scan_upto = watermark
        self.figures = Figures()
        self.history_ready = False
        self.events: collections.OrderedDict[str, list[Record]] = collections.OrderedDict()
        self.listeners: list[Listener] = []

    # --- observing --------------------------------------------------------------------

    def observe(self, events: Sequence[Event], delta: Delta) -> None:
        fresh = [e for e in events if e.seq is not None and e.seq > self.watermark]
        if fresh:
            watermark = self.watermark
            self.watermark = max(e.seq or 0 for e in fresh)
            counted = [(m, e) for m, e in delta.counted if e.seq is not None and e.seq > watermark]
            self.figures.count(counted, self._keep_after())
            self._remember([e.record for e in fresh])  # the log's dicts
        changed = _changed_ids([e.record for e in events], delta)
        for listener in list(self.listeners):
            listener(changed, delta.progress, delta.reset)

    def _remember(self, records: Sequence[Record]) -> None:
        for record in records:
            task_id = ev.task_id_of(record)
            if not isinstance(task_id, str):
                continue
            trail = self.events.pop(task_id, None) or []
            trail.append(record)
            del trail[:-EVENTS_PER_TASK]
            self.events[task_id] = trail
        while len(self.events) > RECENT_TASKS:
            self.events.popitem(last=False)

    def merge_scan(self, scanned: Figures) -> None:
        """Fold in the history counted by :func:`scan` (older than anything observed)."""
        self.figures.totals.update(scanned.totals)
        for minute, counter in scanned.minutes.items():
            self.figures.minutes.setdefault(minute, collections.Counter()).update(counter)
        merged = collections.OrderedDict(scanned.finished)
        for task_id, row in self.figures.finished.items():
            merged.pop(task_id, None)
            merged[task_id] = row
        while len(merged) > RECENT_FINISHED:
            merged.popitem(last=False)
        self.figures.finished = merged
        self.history_ready = True

    # --- reading ----------------------------------------------------------------------

    def _keep_after(self) -> int:
        return int(self._now() // 60) - MINUTES

    def throughput(self) -> list[dict[str, Any]]:
        """One row per minute, oldest first, the current minute last."""
        keep_after = self._keep_after()
        self.figures.trim(keep_after)
        rows = []
        for minute in range(keep_after + 1, keep_after + MINUTES + 1):
            counter = self.figures.minutes.get(minute, collections.Counter())
            row: dict[str, Any] = {"minute": minute * 60}
            row.update({metric: counter.get(metric, 0) for metric in METRICS})
            rows.append(row)
        return rows

    def finished(self, task_id: str) -> dict[str, Any] | None:
        return self.figures.finished.get(task_id)

    def finished_rows(self) -> list[dict[str, Any]]:
        """Recently completed or cancelled tasks, newest first."""
        return list(reversed(self.figures.finished.values()))

    def recent_events(self, task_id: str) -> list[Record]:
        return list(self.events.get(task_id, ()))


def _changed_ids(records: Sequence[Record], delta: Delta) -> list[str]:
    ids: dict[str, None] = {}
    for record in records:
        for value in (ev.task_id_of(record), record.get(ev.F_DLQ_KEY)):
            if isinstance(value, str):
                ids[value] = None
    for name in ("ready", "delayed", "blocked", "doomed", "claimed", "released", "finished"):
        for task_id in getattr(delta, name):
            ids[task_id] = None
    return list(ids)
