"""Totals by task type: what ``/metrics`` reports, kept in the projection.

Every counter evolve bumps (``evolve.METRICS``) is also added up per task type in the
state (``QueueState.counters``), and two durations per type are kept as histograms
(``QueueState.histograms``):

* ``latency``: how long an attempt waited between becoming due (its enqueue, or its
  ``executeAt`` / retry time when later) and its claim (the claim's ``waited`` field);
* ``run_time``: from the claim to the attempt's outcome (success, or a failure that
  retries or dead-letters), by the two records' ``ts``.

A compaction writes both back as one ``counters`` record at the head of the snapshot
(:func:`counters_record`), and the snapshot's own restatements (``compacted`` lines)
count nothing, so the totals of a compacted log equal those of the whole history:
compaction, restarts and pruned archives never move them backwards.

The state holds them as :class:`Totals`: the sums of a base and of the tallies of the
folds since, added up when first read (a fold that wrote a new map entry for each
counter and a new histogram for each observation cost the engine 4% of a task).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping
from functools import reduce
from itertools import repeat
from math import isnan
from operator import add
from typing import Any, Final, TypeAlias

from immutables import Map

from snerd.projections.fields import COUNTERS, F_COUNTS, F_EVENT, F_HISTOGRAMS

BUCKETS: Final[tuple[float, ...]] = (
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
    21600.0, 86400.0,
)  # fmt: skip
"""Upper bounds (seconds) of the histogram buckets; a last one, +Inf, is implied."""
LATENCY: Final = "latency"
RUN_TIME: Final = "run_time"
HISTOGRAMS: Final = (LATENCY, RUN_TIME)

Hist: TypeAlias = tuple[tuple[int, ...], float]
"""(observations per bucket, the last one +Inf: not cumulative; sum of seconds)."""
CounterKey: TypeAlias = tuple[str, str]
"""(metric, task type)."""
HistKey: TypeAlias = tuple[str, str]
"""(histogram name, task type)."""

_EMPTY_COUNTS: Final = (0,) * (len(BUCKETS) + 1)


def bucket_of(seconds: float) -> int:
    """The index of the bucket an observation falls in (the last: +Inf): the first bound
    at or above ``seconds``; NaN, below no bound, goes to +Inf."""
    return bisect_left(BUCKETS, seconds) if seconds == seconds else len(BUCKETS)


def observed(hist: Hist | None, seconds: float) -> Hist:
    """``hist`` with one more observation (negative durations, clock skew, count as 0)."""
    seconds = max(0.0, seconds)
    counts, total = hist if hist is not None else (_EMPTY_COUNTS, 0.0)
    i = bucket_of(seconds)
    return (*counts[:i], counts[i] + 1, *counts[i + 1 :]), total + seconds


class Tally:
    """A histogram being added up in place (local to one bulk fold): the same sums, in
    the same order, as :func:`observed` and :func:`merged` on the immutable :data:`Hist`."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = list(_EMPTY_COUNTS)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.counts[bisect_left(BUCKETS, seconds)] += 1
        self.total = self.total + seconds

    def observe_all(self, samples: list[float]) -> None:
        """:meth:`observe` of each sample in turn (the same counts, the same sums in the
        same order), in a few C calls: the bulk fold collects a batch's samples in a
        list. The buckets are counted by bisecting the sorted samples at each bound."""
        if samples and not any(map(isnan, samples)) and min(samples) > 0.0:
            clamped = samples  # max(0.0, s) is s for every one of them
        else:
            clamped = list(map(max, repeat(0.0), samples))  # as observe clamps
        ordered = sorted(clamped)
        counts = self.counts
        below = 0
        for i, bound in enumerate(BUCKETS):  # bucket i: BUCKETS[i-1] < s <= BUCKETS[i]
            upto = bisect_right(ordered, bound, below)
            counts[i] += upto - below
            below = upto
        counts[-1] += len(ordered) - below
        self.total = reduce(add, clamped, self.total)  # left to right, as observe adds

    def add(self, hist: Hist) -> None:
        counts = self.counts
        for i, n in enumerate(hist[0]):
            counts[i] += n
        self.total = self.total + hist[1]

    def frozen(self) -> Hist:
        return tuple(self.counts), self.total


COLLAPSE: Final = 64
"""Folds whose tallies a :class:`Totals` chain holds at most before it adds them up."""


class Totals:
    """The counters and histograms by task type (``QueueState.counters`` and
    ``.histograms``): a base's sums plus the tallies of the folds made since, added up
    when first read.

    A fold adds its tally (a key for each count, a key and the seconds for each
    observation) as one more link, without touching the maps; :meth:`sums` adds the
    links to the nearest sums known, oldest first (so each histogram's sum is the same
    to the bit as one observation at a time), and keeps the result. Every
    :data:`COLLAPSE` links the chain is added up into a new base, whether or not anyone
    read it, so it stays short and holds no old tally for long. Immutable to every
    reader: the sums a link keeps once made are a function of the links before it,
    which never change."""

    __slots__ = ("_counted", "_depth", "_observed", "_parent", "_sums")

    def __init__(
        self,
        parent: Totals | None,
        counted: list[CounterKey],
        observed: list[tuple[HistKey, float]],
        depth: int,
        sums: tuple[Map[CounterKey, int], Map[HistKey, Hist]] | None,
    ) -> None:
        self._parent = parent
        self._counted = counted
        self._observed = observed
        self._depth = depth
        self._sums = sums

    @staticmethod
    def of(counters: Map[CounterKey, int], histograms: Map[HistKey, Hist]) -> Totals:
        """Totals that are these sums."""
        return Totals(None, [], [], 0, (counters, histograms))

    def add(self, counted: list[CounterKey], observed: list[tuple[HistKey, float]]) -> Totals:
        """These totals with a fold's tally after them: a key for each count, a (key,
        seconds) for each histogram sample, in the order seen (the lists are kept: the
        caller gives them up)."""
        link = Totals(self, counted, observed, self._depth + 1, None)
        if link._depth < COLLAPSE:
            return link
        counters, histograms = link.sums()
        return Totals.of(counters, histograms)

    @property
    def counters(self) -> Map[CounterKey, int]:
        return self.sums()[0]

    @property
    def histograms(self) -> Map[HistKey, Hist]:
        return self.sums()[1]

    def sums(self) -> tuple[Map[CounterKey, int], Map[HistKey, Hist]]:
        """(counters, histograms): the base's with every tally since added."""
        sums = self._sums
        if sums is not None:
            return sums
        links: list[Totals] = []
        node: Totals | None = self
        while node is not None and node._sums is None:
            links.append(node)
            node = node._parent
        assert node is not None and node._sums is not None  # a chain starts at a base
        counters, histograms = node._sums
        # (the keys and samples typed Any: compiled, a typed tuple is unpacked into a
        # struct and boxed anew for each dict operation)
        counts: dict[Any, int] = {}
        samples: dict[Any, list[Any]] = {}  # each key's samples in the order seen
        for link in reversed(links):  # oldest first
            counted: list[Any] = link._counted
            for key in counted:
                counts[key] = counts.get(key, 0) + 1
            seen_here: list[Any] = link._observed
            for pair in seen_here:
                seen = samples.get(pair[0])
                if seen is None:
                    samples[pair[0]] = [pair[1]]
                else:
                    seen.append(pair[1])
        counters = _added(counters, counts)
        if samples:
            with histograms.mutate() as changing_h:
                for hkey, seen in samples.items():
                    tally = Tally()
                    hist = changing_h.get(hkey)
                    if hist is not None:
                        tally.add(hist)
                    tally.observe_all(seen)
                    changing_h[hkey] = tally.frozen()
                histograms = changing_h.finish()
        sums = self._sums = (counters, histograms)
        return sums

    def merged(self, counts: Mapping[CounterKey, int],
               histograms: Mapping[HistKey, Hist]) -> Totals:  # fmt: skip
        """These totals with whole totals added (a ``counters`` record's)."""
        mine, hists = self.sums()
        mine = _added(mine, counts)
        with hists.mutate() as changing_h:
            for hkey, hist in histograms.items():
                changing_h[hkey] = merged(changing_h.get(hkey), hist)
            hists = changing_h.finish()
        return Totals.of(mine, hists)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Totals):
            return NotImplemented
        return self is other or self.sums() == other.sums()

    def __hash__(self) -> int:
        return hash(self.sums())

    def __repr__(self) -> str:
        counters, histograms = self.sums()
        return f"Totals(counters={dict(counters)!r}, histograms={dict(histograms)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return Totals.of, self.sums()


def _added(
    counters: Map[CounterKey, int], counts: Mapping[CounterKey, int]
) -> Map[CounterKey, int]:
    """``counters`` with ``counts`` added, key by key (``counters`` itself for none)."""
    if not counts:
        return counters
    with counters.mutate() as changing:
        for key, n in counts.items():
            changing[key] = changing.get(key, 0) + n
        added: Map[CounterKey, int] = changing.finish()
    return added


NO_TOTALS: Final = Totals.of(Map(), Map())
"""The totals of an empty log."""


def merged(a: Hist | None, b: Hist) -> Hist:
    if a is None:
        return b
    return tuple(x + y for x, y in zip(a[0], b[0], strict=True)), a[1] + b[1]


def cumulative(hist: Hist) -> list[tuple[str, int]]:
    """Prometheus buckets: (``le`` label, observations at or below it), +Inf last."""
    out: list[tuple[str, int]] = []
    running = 0
    for bound, n in zip((*BUCKETS, math.inf), hist[0], strict=True):
        running += n
        out.append(("+Inf" if bound == math.inf else repr(bound), running))
    return out


# --- the snapshot's ``counters`` record -------------------------------------------------


def counters_record(
    counts: Mapping[CounterKey, int], hists: Mapping[HistKey, Hist]
) -> dict[str, Any] | None:
    """The ``counters`` record restating ``counts`` and ``hists``; None when both are empty."""
    if not counts and not hists:
        return None
    by_type: dict[str, dict[str, int]] = {}
    for (metric, kind), n in sorted(counts.items()):
        by_type.setdefault(kind, {})[metric] = n
    out_h: dict[str, dict[str, Any]] = {}
    for (name, kind), (buckets, total) in sorted(hists.items()):
        out_h.setdefault(name, {})[kind] = {"buckets": list(buckets), "sum": total}
    return {F_EVENT: COUNTERS, F_COUNTS: by_type, F_HISTOGRAMS: out_h}


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def parse_counts(raw: Any) -> dict[CounterKey, int] | str:
    """``counts`` of a ``counters`` record, or why it is unusable."""
    if not isinstance(raw, dict):
        return "counts must be an object"
    out: dict[CounterKey, int] = {}
    for kind, metrics in raw.items():
        if not isinstance(metrics, dict):
            return f"counts[{kind!r}] must be an object"
        for metric, n in metrics.items():
            if not _count(n):
                return f"counts[{kind!r}][{metric!r}] must be an integer >= 0"
            out[(metric, kind)] = n
    return out


def parse_histograms(raw: Any) -> dict[HistKey, Hist] | str:
    """``histograms`` of a ``counters`` record, or why it is unusable."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        return "histograms must be an object"
    out: dict[HistKey, Hist] = {}
    for name, per_type in raw.items():
        if not isinstance(per_type, dict):
            return f"histograms[{name!r}] must be an object"
        for kind, value in per_type.items():
            hist = _parse_hist(value)
            if hist is None:
                return (f"histograms[{name!r}][{kind!r}] must be {{buckets: "
                        f"{len(BUCKETS) + 1} integers >= 0, sum: a number >= 0}}")  # fmt: skip
            out[(name, kind)] = hist
    return out


def _parse_hist(value: Any) -> Hist | None:
    if not isinstance(value, dict):
        return None
    buckets, total = value.get("buckets"), value.get("sum")
    if not isinstance(buckets, list) or len(buckets) != len(BUCKETS) + 1:
        return None
    if not all(_count(n) for n in buckets):
        return None
    if not isinstance(total, int | float) or isinstance(total, bool):
        return None
    if not 0 <= total < math.inf:
        return None
    return tuple(buckets), float(total)


def by_type(counts: Iterable[tuple[CounterKey, int]]) -> dict[str, dict[str, int]]:
    """``{type: {metric: n}}`` of (metric, type) counts."""
    out: dict[str, dict[str, int]] = {}
    for (metric, kind), n in counts:
        out.setdefault(kind, {})[metric] = n
    return out
