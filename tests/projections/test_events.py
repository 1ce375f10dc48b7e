"""Typed events: one decoder, one validity rule, one evolve for every fold."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from loggen import any_records

from snerd.projections import events as ev
from snerd.projections.evolve import COMPLETED, RULES, evolve, observed_seconds
from snerd.projections.replay import bulk_fold
from snerd.projections.state import empty, fold
from snerd.projections.task import Claim


def _deep(levels: int) -> Any:
    value: Any = []
    for _ in range(levels):
        value = [value]
    return value


POISON = [
    # issue 12.2: taskData nested past what the JSON encoder writes (bulk replay raised)
    {"event": "enqueued", "taskId": "deep", "taskType": "t", "taskData": _deep(300), "seq": 2},
    # issue 12.3: a seq no writer can continue from
    {"event": "enqueued", "taskId": "big", "taskType": "t", "seq": 2**64 - 1},
    {"event": "enqueued", "taskId": "", "taskType": "t"},
    {"event": "claimed", "taskId": "ok", "daemon": "d", "attempt": 0},
    {"event": "rate_window", "group": "g", "times": [1e308]},
    {"event": "from_the_future", "taskId": "ok"},
    {"event": ["unhashable"], "taskId": "ok"},
]


@pytest.mark.parametrize("record", POISON)
def test_unusable_records_are_judged_alike_by_every_fold(record: dict[str, Any]) -> None:
    event = ev.decode(record)
    assert isinstance(event, ev.Unusable)
    assert event.reason
    good = {"event": "enqueued", "taskId": "ok", "taskType": "t", "seq": 1}
    incremental, _ = fold(empty(), [good, record])
    bulk = bulk_fold([good, record])
    for state in (incremental, bulk):
        assert state.invalid == 1
        assert set(state.tasks) == {"ok"}
        # a seq out of range never becomes the one the writer continues from
        assert state.last_seq == (2 if record.get("seq") == 2 else 1)


def test_every_event_type_has_exactly_one_rule() -> None:
    decoded = {type(ev.decode(r)) for r in POISON}
    assert decoded == {ev.Unusable}
    kinds = set(RULES)
    assert ev.Unusable in kinds and ev.Claimed in kinds and ev.DeadLettered in kinds
    assert len(kinds) == 17


def test_evolve_counts_outcomes_once() -> None:
    state = empty()
    counted = []
    for record in [
        {"event": "enqueued", "taskId": "a", "taskType": "t", "maxRetries": 0, "seq": 1},
        {"event": "claimed", "taskId": "a", "daemon": "d", "ts": 1000, "seq": 2},
        {"event": "claimed", "taskId": "a", "daemon": "e", "ts": 1000, "seq": 3},  # no-op
        {"event": "dead_lettered", "taskId": "a", "taskType": "t", "seq": 4},
    ]:
        state, delta = evolve(state, ev.decode(record))
        counted += [metric for metric, _ in delta.counted]
    assert counted == ["enqueued", "started", "failed_attempts", "dead_lettered"]
    assert "a" in state.dlq


def test_a_fractional_millisecond_ts_reads_as_whole_milliseconds() -> None:
    """Found by hypothesis: a dead letter with ts 1.5 ms snapshotted to .001 then .002
    (truncated, then rounded); a time reads as whole milliseconds, as writers write it."""
    from snerd.projections.snapshot import snapshot_records

    record = {"event": "dead_lettered", "taskId": "a", "taskType": "t", "ts": 1.5}
    first = snapshot_records(bulk_fold([record]), 10.0)
    second = snapshot_records(bulk_fold(first), 10.0)
    assert first == second
    assert ev.ms_time(1.5) == ev.ms_time(2) == 0.002


# ms() is round(seconds * 1000) without calling round() (a generic call from compiled
# code): schedule.round_even, tested there against round() itself.
@given(st.one_of(st.floats(allow_nan=False, allow_infinity=False, width=64),
                 st.integers(min_value=-(2**53), max_value=2**53).map(lambda n: n / 2000.0)))
def test_ms_rounds_as_round_does(seconds: float) -> None:
    try:
        expected = round(seconds * 1000)
    except OverflowError:  # (a finite float whose product overflows)
        with pytest.raises(OverflowError):
            ev.ms(seconds)
        return
    assert ev.ms(seconds) == expected and type(ev.ms(seconds)) is int


# The hot decoders read a claim's instants and a tombstone's id inline (a replay decodes
# millions); they must say exactly what ms_time and the non-empty-string rule say.
_ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.sampled_from([0, ev.MAX_MS, ev.MAX_MS + 1, -1, 1_760_000_000_000]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=2),
)


@given(ts=_ANY_VALUE, lease=_ANY_VALUE)
def test_a_claims_instants_read_as_ms_time_reads_them(ts: Any, lease: Any) -> None:
    record = {"event": "claimed", "task": "t", "daemon": "d", "ts": ts, "leaseUntil": lease}
    event = ev.decode(record)
    assert type(event) is ev.Claimed
    assert event.ts == ev.ms_time(ts) and type(event.ts) is type(ev.ms_time(ts))
    assert event.lease_until == ev.ms_time(lease)
    assert type(event.lease_until) is type(ev.ms_time(lease))


@pytest.mark.parametrize("name", ["succeeded", "cancelled"])
@given(task_id=st.one_of(_ANY_VALUE, st.just("")))
def test_a_tombstone_needs_a_non_empty_string_id(name: str, task_id: Any) -> None:
    event = ev.decode({"event": name, "taskId": task_id})
    usable = type(task_id) is str and task_id != ""
    assert (type(event) is not ev.Unusable) is usable
    if usable:
        assert event.task_id == task_id  # type: ignore[union-attr]


_NAMES = st.one_of(st.sampled_from(sorted(ev.SEQUENCED)), st.none(), _ANY_VALUE)


@given(record=any_records, seq=_ANY_VALUE, name=_NAMES)
def test_the_sequenced_table_decodes_as_decode(record: dict[str, Any], seq: Any, name: Any) -> None:
    """The bulk replay's shortcut (``events.SEQUENCED``) gives decode's verdict."""
    record = {**record, ev.F_SEQ: seq, ev.F_EVENT: name}
    if name is None:
        del record[ev.F_EVENT]
    decoder = ev.SEQUENCED.get(name) if type(name) is str else None
    if decoder is not None and type(seq) is int and 0 < seq <= ev.MAX_SEQ:
        assert decoder(record, seq) == ev.decode(record)


@given(ts=_ANY_VALUE, at=st.floats(min_value=0, max_value=1e10))
def test_an_outcomes_run_time_reads_ts_as_record_time_does(ts: Any, at: float) -> None:
    record = {"event": "succeeded", "taskId": "t", "ts": ts}
    entry = SimpleNamespace(claim=Claim("d", 1, at, None), attempt=1, task_type="x")
    seconds = observed_seconds(COMPLETED, ev.decode(record), entry)
    expected = ev.record_time(record)
    assert seconds == (None if expected is None else expected - at)
