"""Compaction equivalence and the task record round trip.

(e) Folding ``snapshot_records(fold(log), now)`` gives what folding the whole log
gives, on everything a reader can observe as of ``now`` (specs/log-format.md,
§9 "Compaction snapshot", guarantees 1-8). (f) A task survives being written as a
full-state line and read back.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from hypothesis_budget import examples
from loggen import Bytes, any_logs, nows, task_fields
from projcheck import (
    check_invariants,
    dlq_view,
    live_view,
    observable_view,
    recent_windows,
    sorted_ids,
    task_view,
)

from snerd.projections import events as ev
from snerd.projections.snapshot import snapshot_records
from snerd.projections.state import QueueState, advance, empty, fold
from snerd.projections.task import BLOCKED, Task, task_from_record, task_to_record

CORE = settings(
    max_examples=examples(1000), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def folded(records: list[dict[str, Any]], now: float) -> QueueState:
    state, _ = fold(empty(), records)
    state, _ = advance(state, now)
    return state


# --- (e) compaction equivalence ------------------------------------------------------------


@CORE
@given(any_logs, nows)
def test_snapshot_replays_to_the_same_observable_state(
    records: list[dict[str, Any]], now: float
) -> None:
    note(f"records = {records!r}")
    original = folded(records, now)
    snapshot = snapshot_records(original, now)
    rebuilt = folded([orjson.loads(orjson.dumps(r)) for r in snapshot], now)  # as read back
    # 0. a snapshot of the rebuilt state is the same snapshot (a fixed point)
    assert snapshot_records(rebuilt, now) == snapshot
    # 1. the same live tasks, every field but order (phases and claims included)
    assert live_view(rebuilt) == live_view(original)
    # 2. the same relative FIFO order
    assert sorted_ids(rebuilt.tasks) == sorted_ids(original.tasks)
    # 3. the same DLQ: keys, reasons, errors, times, task fields but order
    assert dlq_view(rebuilt) == dlq_view(original)
    # 4. the same blocking facts
    blocked = {t.id for t in original.tasks.values() if t.phase == BLOCKED}
    assert {t.id for t in rebuilt.tasks.values() if t.phase == BLOCKED} == blocked
    assert set(rebuilt.doomed) == set(original.doomed)
    # 5. the same claims (owner, attempt, since, lease) and progress
    assert {k: set(v) for k, v in rebuilt.by_daemon.items()} == {
        k: set(v) for k, v in original.by_daemon.items()
    }
    assert {k: set(v) for k, v in rebuilt.fingerprints.items()} == {
        k: set(v) for k, v in original.fingerprints.items()
    }
    # 6. the same rate windows as of now
    assert recent_windows(rebuilt, now) == recent_windows(original, now)
    check_invariants(rebuilt, now)
    assert observable_view(rebuilt, now) == observable_view(original, now)
    # 7. the same totals by task type (``counters``): compaction never moves them
    assert dict(rebuilt.counters) == dict(original.counters)
    assert dict(rebuilt.histograms) == dict(original.histograms)


@settings(max_examples=examples(300), deadline=None)
@given(any_logs, any_logs, nows)
def test_snapshot_plus_tail_equals_whole_log(
    head: list[dict[str, Any]], tail: list[dict[str, Any]], now: float
) -> None:
    """What a reader of a compacted log sees: the snapshot, then records appended since."""
    whole = folded(head + tail, now)
    rebuilt = folded([*snapshot_records(folded(head, now), now), *tail], now)
    assert live_view(rebuilt) == live_view(whole)
    assert sorted_ids(rebuilt.tasks) == sorted_ids(whole.tasks)
    assert set(rebuilt.dlq) == set(whole.dlq)
    assert set(rebuilt.doomed) == set(whole.doomed)
    assert dict(rebuilt.counters) == dict(whole.counters)
    assert dict(rebuilt.histograms) == dict(whole.histograms)


def test_snapshot_is_headed_by_counters_then_windows_then_dlq_then_live_tasks() -> None:
    records = [
        {"event": "enqueued", "taskId": "p", "taskType": "t"},
        {"event": "enqueued", "taskId": "c", "taskType": "t", "triggerAfterIds": ["p"]},
        {"event": "claimed", "taskId": "p", "daemon": "d1", "ts": 10_000, "group": "g"},
        {"event": "progress", "taskId": "p", "data": 40},
        {"event": "enqueued", "taskId": "x", "taskType": "t"},
        {"event": "dead_lettered", "taskId": "x", "taskType": "t", "ts": 11_000},
    ]
    out = snapshot_records(folded(records, 20.0), 20.0)
    assert [(r["event"], r.get("taskId", r.get("task"))) for r in out] == [
        ("counters", None),
        ("rate_window", None),
        ("dead_lettered", "x"),
        ("enqueued", "p"),
        ("claimed", "p"),
        ("progress", "p"),
        ("enqueued", "c"),
    ]
    assert all(r.get(ev.F_COMPACTED) for r in out if r["event"] == "enqueued")
    assert out[0]["counts"] == {"t": {"enqueued": 3, "started": 1, "failed_attempts": 1,
                                      "dead_lettered": 1}}  # fmt: skip
    assert out[1] == {"event": "rate_window", "group": "g", "times": [10_000]}


def test_snapshot_drops_rate_window_times_older_than_a_minute() -> None:
    records = [{"event": "rate_window", "group": "g", "times": [1_000, 50_000, 70_000]}]
    out = snapshot_records(folded(records, 100.0), 100.0)
    assert out == [{"event": "rate_window", "group": "g", "times": [50_000, 70_000]}]


# --- (f) task record round trip ------------------------------------------------------------


@settings(max_examples=examples(1000), deadline=None)
@given(st.binary(min_size=48, max_size=48), st.integers(min_value=0, max_value=10**6))
def test_task_survives_record_round_trip(data: bytes, order: int) -> None:
    task = task_from_record(task_fields(Bytes(data)), order=order)
    record = orjson.loads(orjson.dumps(task_to_record(task)))
    again = task_from_record(record, order=order)
    assert task_view(again) == task_view(task)
    assert task_to_record(again) == record


@settings(max_examples=examples(300), deadline=None)
@given(
    st.builds(
        Task,
        id=st.text(min_size=1, max_size=5),
        type=st.text(max_size=5),
        data=st.text(max_size=5),
        max_retries=st.integers(min_value=0, max_value=10),
        retry_after_hours=st.floats(min_value=0, max_value=100),
        retry_count=st.integers(min_value=0, max_value=10),
        urgency=st.floats(min_value=-1e9, max_value=1e9),
        execute_at=st.none()
        | st.integers(min_value=0, max_value=4 * 10**12).map(lambda m: m / 1000),
        retry_after_time=st.none()
        | st.integers(min_value=0, max_value=4 * 10**12).map(lambda m: m / 1000),
        cron=st.none() | st.text(min_size=1, max_size=5),  # "" means absent
        pool=st.none() | st.text(min_size=1, max_size=3),
        rate_group=st.none() | st.text(min_size=1, max_size=3),
        max_per_minute=st.none() | st.integers(min_value=1, max_value=1000),
        auto_dedupe=st.booleans(),
        fingerprint=st.none() | st.text(min_size=1, max_size=3),
        parents=st.lists(st.text(min_size=1, max_size=3), max_size=3).map(tuple),
        last_error=st.none() | st.text(max_size=5),
    )
)
def test_constructed_task_survives_record_round_trip(task: Task) -> None:
    again = task_from_record(orjson.loads(orjson.dumps(task_to_record(task))))
    assert task_view(again) == task_view(task)


def test_round_trip_keeps_unknown_fields() -> None:
    record = {"taskId": "a", "taskType": "t", "taskData": "{}", "tenant": {"id": 7}}
    task = task_from_record(record)
    assert task.extra == {"tenant": {"id": 7}}
    assert task_to_record(task)["tenant"] == {"id": 7}


# --- numbers a line cannot write back fall back to their defaults -----------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (ev.F_CREATED_AT, 1e308),
        (ev.F_EXECUTE_AT, 1e15),
        (ev.F_RETRY_AFTER_TIME, -1e15),
        (ev.F_EXECUTE_AT, "9999-12-31T23:59:59-05:00"),
        (ev.F_MAX_RETRIES, 1e308),
        (ev.F_RETRY_COUNT, 1e308),
        (ev.F_MAX_PER_MINUTE, 1e308),
        (ev.F_MAX_EXECUTION_SECONDS, 1e308),
    ],
)
def test_huge_numbers_survive_snapshot(name: str, value: Any) -> None:
    records = [{"event": "enqueued", "taskId": "a", "taskType": "t", name: value}]
    lines = snapshot_records(folded(records, 0.0), 0.0)
    orjson.dumps(lines)
