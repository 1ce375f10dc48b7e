"""counters.Totals: a chain of folds' tallies, summed when read, gives the very counters
and histograms (to the bit) that adding each count and observation in turn gives, at
every point of the chain, across its collapses, for old links as for new ones."""

from __future__ import annotations

import pickle
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from immutables import Map

from snerd.projections.counters import (
    COLLAPSE,
    LATENCY,
    NO_TOTALS,
    RUN_TIME,
    CounterKey,
    Hist,
    HistKey,
    Totals,
    observed,
)
from snerd.projections.state import QueueState

_TYPES = ("mail", "report")
_COUNTER_KEYS = st.sampled_from([(m, t) for m in ("enqueued", "completed") for t in _TYPES])
_HIST_KEYS = st.sampled_from([(h, t) for h in (LATENCY, RUN_TIME) for t in _TYPES])
_SECONDS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),  # clamped, skewed and odd ones too
    st.sampled_from([0.1, 0.2, 0.3, 1e16, 0.001, 0.0051, 3600.0]),  # sums whose order shows
)
_TALLY = st.tuples(
    st.lists(_COUNTER_KEYS, max_size=4), st.lists(st.tuples(_HIST_KEYS, _SECONDS), max_size=3)
)

Expected = tuple[dict[CounterKey, int], dict[HistKey, Hist]]


def _one_at_a_time(
    before: Expected, counted: list[CounterKey], seen: list[tuple[HistKey, float]]
) -> Expected:
    counts, hists = dict(before[0]), dict(before[1])
    for key in counted:
        counts[key] = counts.get(key, 0) + 1
    for hkey, seconds in seen:
        hists[hkey] = observed(hists.get(hkey), seconds)
    return counts, hists


def _same(totals: Totals, expected: Expected) -> None:
    assert dict(totals.counters) == expected[0]
    # repr: the sums to the bit (and a NaN would compare unequal to itself)
    assert repr(sorted(totals.histograms.items())) == repr(sorted(expected[1].items()))


@settings(max_examples=150)
@given(st.lists(_TALLY, max_size=3 * COLLAPSE), st.sets(st.integers(0, 3 * COLLAPSE)))
def test_a_chain_sums_as_each_count_and_observation_in_turn(
    folds: list[tuple[list[CounterKey], list[tuple[HistKey, float]]]], reads: set[int]
) -> None:
    totals, expected = NO_TOTALS, ({}, {})
    kept: list[tuple[Totals, Expected]] = []
    for i, (counted, seen) in enumerate(folds):
        totals = totals.add(list(counted), list(seen))
        expected = _one_at_a_time(expected, counted, seen)
        kept.append((totals, expected))
        if i in reads:  # a read in the middle of a chain keeps its sums
            _same(totals, expected)
    _same(totals, expected)
    for old, sums in kept:  # every link still says its own totals
        _same(old, sums)


def test_the_chain_collapses_every_collapse_links() -> None:
    totals = NO_TOTALS
    for _ in range(COLLAPSE - 1):
        totals = totals.add([("enqueued", "mail")], [])
    assert totals._sums is None and totals._depth == COLLAPSE - 1  # nothing summed yet
    totals = totals.add([("enqueued", "mail")], [((LATENCY, "mail"), 0.5)])
    assert totals._parent is None and totals._depth == 0  # a new base, summed
    assert dict(totals.counters) == {("enqueued", "mail"): COLLAPSE}
    assert totals.histograms[(LATENCY, "mail")] == observed(None, 0.5)


def test_whole_totals_merged_come_after_the_tallies_before_them() -> None:
    totals = NO_TOTALS.add([("completed", "mail")], [((RUN_TIME, "mail"), 0.1)])
    merged = totals.merged({("completed", "mail"): 2}, {(RUN_TIME, "mail"): observed(None, 0.2)})
    assert dict(merged.counters) == {("completed", "mail"): 3}
    assert merged.histograms[(RUN_TIME, "mail")][1] == 0.1 + 0.2


def test_states_with_the_same_totals_are_equal_and_survive_pickling() -> None:
    counters: Map[CounterKey, int] = Map({("enqueued", "mail"): 2})
    base = Totals.of(counters, Map())
    chained = NO_TOTALS.add([("enqueued", "mail")], []).add([("enqueued", "mail")], [])
    assert chained == base and hash(chained) == hash(base)
    assert chained != NO_TOTALS
    state = QueueState(totals=chained, n=2)
    assert state == QueueState(totals=base, n=2)
    again: Any = pickle.loads(pickle.dumps(state))
    assert again == state and dict(again.counters) == {("enqueued", "mail"): 2}
