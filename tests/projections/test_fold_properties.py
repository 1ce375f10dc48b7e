"""Properties of the fold over arbitrary logs: it never raises, keeps its indexes
consistent, and the bulk path and chunked folding reach the same state."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_budget import examples
from loggen import any_logs, any_records, json_values, nows, valid_logs
from projcheck import check_invariants, state_view

from snerd.projections import events as ev
from snerd.projections.replay import BulkFolder, bulk_fold
from snerd.projections.state import QueueState, advance, empty, fold

CORE = settings(
    max_examples=examples(1000), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
WIDE = settings(
    max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def folded(records: list[dict[str, Any]], now: float) -> QueueState:
    state, _ = fold(empty(), records)
    state, _ = advance(state, now)
    return state


# --- one drawn log, every way of folding it ---------------------------------------------
# One test draws a log, cut points and an instant and checks every property that needs
# only those: the draw and the whole fold are shared, and each property sees every example.

cut_points = st.lists(st.integers(min_value=0, max_value=40), max_size=6)


def in_chunks(records: list[dict[str, Any]], cuts: list[int]) -> list[list[dict[str, Any]]]:
    """``records`` split at ``cuts`` (sorted; a cut past the end or before the last
    one gives an empty chunk)."""
    chunks, start = [], 0
    for cut in sorted(cuts):
        chunks.append(records[start:cut])
        start = max(start, cut)
    return [*chunks, records[start:]]


@CORE
@given(any_logs, cut_points, nows)
def test_every_fold_of_any_log_counts_keeps_invariants_and_agrees(
    records: list[dict[str, Any]], cuts: list[int], now: float
) -> None:
    # (a) the fold never raises and counts every record
    whole = folded(records, now)
    assert whole.n == len(records)
    assert 0 <= whole.invalid <= len(records)
    # (b) its indexes are consistent after the fold and an advance
    check_invariants(whole, now)
    view = state_view(whole)
    # (c) the bulk fold, at once and fed in chunks, reaches the same state
    bulk = bulk_fold(records)
    assert bulk.n == len(records)
    assert state_view(advance(bulk, now)[0]) == view, "bulk fold"
    chunks = in_chunks(records, cuts)
    folder = BulkFolder()
    for chunk in chunks:
        folder.feed(chunk)
    assert state_view(advance(folder.finish(), now)[0]) == view, "bulk fold in chunks"
    # (d) so does the incremental fold in chunks
    state = empty()
    for chunk in chunks:
        state, _ = fold(state, chunk)
    assert state_view(advance(state, now)[0]) == view, "incremental fold in chunks"


# --- the fold never raises on any mapping at all ---------------------------------------

FIELD_NAMES = sorted(ev.TASK_FIELDS | ev.OUR_FIELDS | {ev.F_GROUP, ev.F_TIMES})
any_mappings = st.dictionaries(
    st.one_of(st.sampled_from(FIELD_NAMES), st.text(max_size=6)), json_values, max_size=8
)


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(any_mappings, max_size=12))
def test_fold_never_raises_on_any_mapping(records: list[dict[str, Any]]) -> None:
    fold(empty(), records)
    bulk_fold(records)


def test_valid_events_are_not_counted_invalid() -> None:
    records = [
        {"event": "enqueued", "taskId": "a", "taskType": "t"},
        {"event": "claimed", "taskId": "a", "daemon": "d1", "ts": 1000},
        {"event": "progress", "taskId": "a", "data": 50},
        {"event": "succeeded", "taskId": "a"},
        {"event": "rate_window", "group": "g", "times": [1000]},
        {"event": "snapshot", "seq": 3, "records": 0},
    ]
    assert fold(empty(), records)[0].invalid == 0
    assert bulk_fold(records).invalid == 0


# --- invariants after every step ----------------------------------------------


@CORE
@given(st.lists(st.lists(any_records, max_size=8), max_size=6), st.lists(nows, min_size=6))
def test_invariants_hold_after_every_step(
    chunks: list[list[dict[str, Any]]], times: list[float]
) -> None:
    state = empty()
    for chunk, now in zip(chunks, sorted(times), strict=False):
        state, _ = fold(state, chunk)
        state, _ = advance(state, now)
        check_invariants(state, now)


@WIDE
@given(any_logs, nows)
def test_fold_leaves_its_input_state_untouched(records: list[dict[str, Any]], now: float) -> None:
    half = len(records) // 2
    base = folded(records[:half], now)
    before = state_view(base)
    fold(base, records[half:])
    advance(base, now + 1000)
    assert state_view(base) == before


# --- folding one record at a time == folding at once -----------------------------------


@WIDE
@given(valid_logs, nows)
def test_one_record_at_a_time_equals_fold_at_once(
    records: list[dict[str, Any]], now: float
) -> None:
    state = empty()
    for record in records:
        state, _ = fold(state, [record])
    state, _ = advance(state, now)
    assert state_view(state) == state_view(folded(records, now))
