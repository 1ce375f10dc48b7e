"""Folding a whole log at once: the fast path for start-up and the replay tool.

The incremental fold (``apply.py``) keeps every index current after each record.
Replaying a million records does not need that: only the tasks still live at the
end need a :class:`Task`, and indexes can be built once. :class:`BulkFolder` is a
:class:`~snerd.projections.evolve.Tables` over plain dicts: it keeps the latest event
per live task plus its claim bookkeeping, runs the very same ``evolve`` rules as the
incremental fold, and hands the survivors to :func:`state.from_tables`. Property
tests check that both reach the same state.
"""

from __future__ import annotations

from collections import Counter as PyCounter
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from itertools import islice
from typing import Any, Final

from snerd.projections import events as ev
from snerd.projections.counters import CounterKey, Hist, HistKey, Tally
from snerd.projections.events import (
    MAX_SEQ,
    SEQUENCED,
    DeadLettered,
    Event,
    Record,
    StateLine,
    TaskStateEvent,
    decode,
)
from snerd.projections.evolve import (
    OBSERVES,
    RULES,
    Entry,
    Tables,
    kind_of,
    step_all,
)
from snerd.projections.rates import extend_window
from snerd.projections.state import DeadLetter, QueueState, from_tables
from snerd.projections.task import ACTIVE, Claim, Task, rebooked


class _Live:
    """A live task's latest full-state event plus what light events did since.

    The event is turned into a :class:`Task` only if the task is still live at
    the end (most tasks of a long log are not).
    """

    __slots__ = ("attempt", "claim", "event", "order", "progress", "task_type")

    def __init__(self, event: TaskStateEvent, order: int, attempt: int) -> None:
        self.event = event
        self.order = order
        self.attempt = attempt
        self.claim: Claim | None = None
        self.progress: Any = None
        kind = event.record.get(_F_TASK_TYPE)  # a usable full-state line has one
        self.task_type: str = kind if type(kind) is str else ""

    def materialize(self) -> Task:
        claim = self.claim
        task = self.event.task(self.order)
        if claim is None:
            return rebooked(task, task.order, task.phase, self.attempt, None, None)
        return rebooked(task, task.order, ACTIVE, self.attempt, claim, self.progress)


class _Dead:
    """A DLQ entry, built into a :class:`DeadLetter` at the end."""

    __slots__ = ("at", "attempt", "event", "order", "reason")

    def __init__(self, event: DeadLettered | StateLine, order: int, attempt: int, reason: str,
                 at: float | None) -> None:  # fmt: skip
        self.event, self.order, self.attempt = event, order, attempt
        self.reason, self.at = reason, at

    def build(self, key: str) -> DeadLetter:
        task = self.event.task(self.order, self.attempt)
        return DeadLetter(key, task, self.reason, task.last_error, self.at)


Counter = Callable[[str, Event], None]


def _tallies() -> defaultdict[str, Tally]:
    return defaultdict(Tally)


def _samples() -> defaultdict[str, list[float]]:
    return defaultdict(list)


_OBSERVES: Final = OBSERVES
_F_TASK_TYPE: Final = ev.F_TASK_TYPE
_F_SEQ: Final = ev.F_SEQ
_F_EVENT: Final = ev.F_EVENT
_RULES: Final = RULES
_SETTLE_EVERY: Final = 16_384  # records: bounds what the collected counts hold


class BulkFolder(Tables):
    """Feed records (or events) in chunks, then :meth:`finish` into a :class:`QueueState`.

    ``on_count`` hears every counter an event bumps (the dashboard's history scan).
    """

    def __init__(self, on_count: Counter | None = None) -> None:
        self.live: dict[str, _Live] = {}
        self.dlq: dict[str, _Dead] = {}
        self.windows: dict[str, list[float]] = {}
        self.n = 0
        self.last_seq = 0
        self.invalid = 0
        # Counted in batches: each metric's task types in a list, and each histogram's
        # samples per task type, added up now and then (``_settle``: every
        # _SETTLE_EVERY records, before a compaction's totals, at finish) in a few C
        # calls (``Counter.update``, ``Tally.observe_all``) instead of a dict update and
        # a method call per event. No key tuple is built per event either: counts are
        # keyed by (metric, type) once, at finish.
        self.counts: defaultdict[str, PyCounter[str]] = defaultdict(PyCounter)
        self.tallies: defaultdict[str, defaultdict[str, Tally]] = defaultdict(_tallies)
        self.kinds: defaultdict[str, list[str]] = defaultdict(list)
        self.samples: defaultdict[str, defaultdict[str, list[float]]] = defaultdict(_samples)
        self.settled = 0  # n at the last _settle
        self.on_count = on_count

    def feed(self, records: Iterable[Record]) -> None:
        """Fold ``records``: what ``step_all(self, map(decode, records))`` does, with
        decode's common case (``events.SEQUENCED``) taken in this loop, and ``n`` and
        ``last_seq`` kept in locals (no rule reads ``last_seq``; ``n`` is written back
        before each rule, which reads it as the record's order)."""
        rules, get_decoder = _RULES, SEQUENCED.get
        n, last_seq = self.n, self.last_seq
        it = iter(records)
        while True:  # in slices, to settle the counts of a long iterable now and then
            start = n
            for record in islice(it, _SETTLE_EVERY):
                seq = record.get(_F_SEQ)
                name = record.get(_F_EVENT)
                decoder = get_decoder(name) if type(name) is str else None
                if decoder is not None and type(seq) is int and 0 < seq <= MAX_SEQ:
                    event = decoder(record, seq)
                    if seq > last_seq:
                        last_seq = seq
                else:
                    event = decode(record)
                    if event.seq is not None and event.seq > last_seq:
                        last_seq = event.seq
                n += 1
                self.n = n
                rules[type(event)](self, event)
            self.last_seq = last_seq
            if n - self.settled >= _SETTLE_EVERY:
                self._settle()
            if n - start < _SETTLE_EVERY:
                return

    def feed_events(self, events: Iterable[Event]) -> None:
        it = iter(events)
        while True:
            start = self.n
            step_all(self, islice(it, _SETTLE_EVERY))
            if self.n - self.settled >= _SETTLE_EVERY:
                self._settle()
            if self.n - start < _SETTLE_EVERY:
                return

    def finish(self) -> QueueState:
        self._settle()
        tasks = {task_id: entry.materialize() for task_id, entry in self.live.items()}
        dlq = {key: entry.build(key) for key, entry in self.dlq.items()}
        windows = {g: self._trimmed(t) for g, t in self.windows.items()}
        return from_tables(
            tasks,
            dlq,
            windows,
            n=self.n,
            last_seq=self.last_seq,
            invalid=self.invalid,
            counters={
                (metric, kind): n for metric, per in self.counts.items() for kind, n in per.items()
            },
            histograms={
                (name, kind): acc.frozen()
                for name, per in self.tallies.items()
                for kind, acc in per.items()
            },
        )

    def _settle(self) -> None:
        """Add up what :meth:`count` collected."""
        self.settled = self.n
        for metric, kinds in self.kinds.items():
            self.counts[metric].update(kinds)
        self.kinds.clear()
        for name, per in self.samples.items():
            tallies = self.tallies[name]
            for kind, samples in per.items():
                tallies[kind].observe_all(samples)
        self.samples.clear()

    # --- Tables (what evolve's rules call) ------------------------------------------

    def count(self, metric: str, event: Event, entry: Entry | None) -> None:
        # what evolve.tally says, collected for _settle
        kind = event.record.get(_F_TASK_TYPE)  # kind_of's first answer, inline
        if type(kind) is not str:
            kind = kind_of(event, entry)
        self.kinds[metric].append(kind)
        observes = _OBSERVES.get(metric)
        if observes is not None:
            seconds = observes[1](event, entry)
            if seconds is not None:
                self.samples[observes[0]][kind].append(seconds)
        if self.on_count is not None:
            self.on_count(metric, event)

    def add_totals(self, counts: Mapping[CounterKey, int],
                   histograms: Mapping[HistKey, Hist]) -> None:  # fmt: skip
        self._settle()  # the samples before these totals, so the sums keep their order
        for (metric, kind), n in counts.items():
            self.counts[metric][kind] += n
        for (name, kind), hist in histograms.items():
            self.tallies[name][kind].add(hist)

    def entry(self, task_id: str) -> _Live | None:
        return self.live.get(task_id)

    def upsert(self, event: TaskStateEvent, attempt: int) -> None:
        self.live[event.task_id] = _Live(event, self.n, attempt)

    def remove(self, task_id: str) -> None:
        self.live.pop(task_id, None)

    def dead_letter(self, event: DeadLettered | StateLine, key: str, reason: str,
                    at: float | None, attempt: int) -> None:  # fmt: skip
        self.live.pop(event.task_id, None)
        self.dlq[key] = _Dead(event, self.n, attempt, reason, at)

    def drop_dead(self, key: str) -> None:
        self.dlq.pop(key, None)

    def claim(self, task_id: str, claim: Claim) -> None:
        entry = self.live[task_id]
        entry.claim = claim
        entry.attempt = claim.attempt
        entry.progress = None

    def progress(self, task_id: str, data: Any) -> None:
        self.live[task_id].progress = data

    def release(self, task_id: str) -> None:
        entry = self.live[task_id]
        entry.claim = None
        entry.progress = None
        entry.order = self.n

    def window_add(self, group: str, times: tuple[float, ...]) -> None:
        window = self.windows.setdefault(group, [])
        window.extend(times)
        if len(window) > 4096:
            self.windows[group] = self._trimmed(window)

    @staticmethod
    def _trimmed(times: list[float]) -> list[float]:
        return list(extend_window((), times))


def bulk_fold(records: Iterable[Record]) -> QueueState:
    """The state :func:`state.fold` reaches from the empty state, built in one pass."""
    folder = BulkFolder()
    folder.feed(records)
    return folder.finish()
