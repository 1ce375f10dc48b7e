"""Totals by task type in the projection: counters, histograms, dedupe records."""

from __future__ import annotations

from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_budget import examples

from snerd.projections import counters as ctr
from snerd.projections import decide as cmds
from snerd.projections import events as ev
from snerd.projections import replay
from snerd.projections.commands import Enqueue
from snerd.projections.history import audit, summarize
from snerd.projections.replay import BulkFolder, bulk_fold
from snerd.projections.snapshot import snapshot_records
from snerd.projections.state import QueueState, empty, fold

T0 = 1_700_000_000.0


def enqueue_cmd(task_id: str, task_type: str = "mail", **fields: Any) -> Enqueue:
    return Enqueue(task_id=task_id, task_type=task_type, task_data='{"to": "x"}', **fields)


class Log:
    """Records decided by the real commands, folded as they are written."""

    def __init__(self) -> None:
        self.state: QueueState = empty()
        self.records: list[dict[str, Any]] = []

    def add(self, records: list[Any]) -> None:
        self.state, _ = fold(self.state, records)
        self.records.extend(records)

    def enqueue(self, cmd: Enqueue, now: float) -> Any:
        records, outcome = cmds.enqueue(self.state, cmd, now=now, daemon="d")
        self.add(records)
        return outcome

    def claim(self, task_id: str, now: float) -> None:
        task = self.state.tasks[task_id]
        self.add([cmds.claim(task, now=now, daemon="d", lease_seconds=60)])

    def succeed(self, task_id: str, now: float) -> None:
        self.add(cmds.succeed(self.state.tasks[task_id], now=now, daemon="d"))

    def fail(self, task_id: str, now: float) -> None:
        records, _ = cmds.fail(self.state, self.state.tasks[task_id], "boom", now=now, daemon="d")
        self.add(records)


def test_a_deduplicated_enqueue_writes_a_light_record_that_counts_by_type() -> None:
    log = Log()
    assert log.enqueue(enqueue_cmd("a", auto_dedupe=True), T0) is None
    verdict = log.enqueue(enqueue_cmd("b", auto_dedupe=True), T0 + 1)
    assert isinstance(verdict, cmds.Deduplicated) and verdict.duplicate_of == "a"
    light = log.records[-1]
    assert light["event"] == "deduplicated"
    assert (light["task"], light["type"], light["duplicateOf"]) == ("b", "mail", "a")
    assert "taskId" not in light  # never read as a task's state by a SnerdMQ reader
    assert set(log.state.tasks) == {"a"}
    assert dict(log.state.counters) == {("enqueued", "mail"): 1, ("deduplicated", "mail"): 1}


def test_counts_and_durations_by_type() -> None:
    log = Log()
    log.enqueue(enqueue_cmd("a"), T0)
    log.enqueue(enqueue_cmd("b", task_type="report", max_retries=1), T0)
    log.claim("a", T0 + 0.5)  # waited 0.5 s
    log.succeed("a", T0 + 2.5)  # ran 2 s
    log.claim("b", T0 + 10)
    log.fail("b", T0 + 10.04)  # retries
    assert dict(log.state.counters) == {
        ("enqueued", "mail"): 1, ("started", "mail"): 1, ("completed", "mail"): 1,
        ("enqueued", "report"): 1, ("started", "report"): 1,
        ("failed_attempts", "report"): 1,
    }  # fmt: skip
    latency = log.state.histograms[(ctr.LATENCY, "mail")]
    assert latency[0][ctr.bucket_of(0.5)] == 1 and sum(latency[0]) == 1
    assert latency[1] == pytest.approx(0.5)
    run = log.state.histograms[(ctr.RUN_TIME, "report")]
    assert run[0][ctr.bucket_of(0.04)] == 1 and run[1] == pytest.approx(0.04)
    assert log.records[2][ev.F_WAITED] == 500  # the claim line says how long it waited


def test_bulk_replay_reaches_the_same_totals() -> None:
    log = Log()
    for n in range(5):
        log.enqueue(enqueue_cmd(f"t{n}", task_type=f"k{n % 2}"), T0 + n)
        log.claim(f"t{n}", T0 + n + 0.1)
        log.succeed(f"t{n}", T0 + n + 0.3)
    bulk = bulk_fold(log.records)
    assert dict(bulk.counters) == dict(log.state.counters)
    assert dict(bulk.histograms) == dict(log.state.histograms)


def test_a_snapshot_restates_the_totals_and_counts_nothing_twice() -> None:
    log = Log()
    log.enqueue(enqueue_cmd("a"), T0)
    log.enqueue(enqueue_cmd("dead", max_retries=0), T0)
    log.claim("a", T0 + 1)  # still running at the snapshot
    log.claim("dead", T0 + 1)
    log.fail("dead", T0 + 2)
    lines = [orjson.loads(orjson.dumps(r)) for r in snapshot_records(log.state, T0 + 3)]
    assert lines[0]["event"] == "counters"
    rebuilt, _ = fold(empty(), lines)
    assert dict(rebuilt.counters) == dict(log.state.counters)
    assert dict(rebuilt.histograms) == dict(log.state.histograms)
    log.succeed("a", T0 + 4)  # the tail after the snapshot
    after, _ = fold(rebuilt, log.records[-1:])
    assert dict(after.counters) == dict(log.state.counters)
    assert after.counters[("completed", "mail")] == 1


@pytest.mark.parametrize(
    "record",
    [
        {"event": "counters", "counts": []},
        {"event": "counters", "counts": {"t": {"enqueued": -1}}},
        {"event": "counters", "counts": {"t": {"enqueued": True}}},
        {"event": "counters", "counts": {}, "histograms": {"latency": {"t": {"buckets": [1]}}}},
        {"event": "counters", "counts": {},
         "histograms": {"latency": {"t": {"buckets": [0] * 17, "sum": -1}}}},
        {"event": "deduplicated", "task": "a"},
        {"event": "deduplicated", "type": "t"},
    ],
)  # fmt: skip
def test_malformed_light_records_are_unusable_not_fatal(record: dict[str, Any]) -> None:
    event = ev.decode(record)
    assert isinstance(event, ev.Unusable), event
    state, _ = fold(empty(), [record])
    assert state.invalid == 1 and not state.counters


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), max_size=30))
def test_histogram_buckets_are_cumulative_and_complete(values: list[float]) -> None:
    hist: ctr.Hist | None = None
    for value in values:
        hist = ctr.observed(hist, value)
    if hist is None:
        return
    rows = ctr.cumulative(hist)
    assert rows[-1] == ("+Inf", len(values))
    counts = [n for _, n in rows]
    assert counts == sorted(counts)
    for bound, n in rows[:-1]:
        assert n == sum(1 for v in values if v <= float(bound))
    assert hist[1] == pytest.approx(sum(values))


def test_the_audit_trail_does_not_take_a_dropped_enqueue_for_a_task() -> None:
    log = Log()
    log.enqueue(enqueue_cmd("a", auto_dedupe=True), T0)
    log.enqueue(enqueue_cmd("b", auto_dedupe=True), T0 + 1)  # dropped: a duplicate of a
    lines = [orjson.loads(orjson.dumps(r)) for r in snapshot_records(log.state, T0 + 2)]
    for history in (summarize(log.records + lines), audit(log.records + lines)):
        assert set(history.tasks) == {"a"}
        assert history.counts()["pending"] == 1 and history.counts()["completed"] == 0


# --- the bulk fold's batched totals (issue 7) ----------------------------------------------

_SECONDS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, -1.0, *ctr.BUCKETS, 1e-9, 86400.0001]),
)


@given(st.lists(_SECONDS, max_size=40), st.lists(_SECONDS, max_size=5))
def test_observe_all_is_observe_in_turn(first: list[float], samples: list[float]) -> None:
    one, batch = ctr.Tally(), ctr.Tally()
    for seconds in first:  # a total already under way
        one.observe(seconds)
        batch.observe(seconds)
    for seconds in samples:
        one.observe(seconds)
    batch.observe_all(samples)
    assert one.counts == batch.counts
    assert repr(one.total) == repr(batch.total)  # the same sums in the same order


_TIMES = st.integers(min_value=0, max_value=5_000).map(lambda ms: ms * 7 + 1)


def _counters_record(n: int, total: float) -> dict[str, Any]:
    """A compaction's totals record (as the snapshot writes it)."""
    run_time = {"buckets": [n] + [0] * len(ctr.BUCKETS), "sum": total}
    return {
        "event": "counters",
        "counts": {"mail": {"completed": n}, "other": {"started": 0}},
        "histograms": {"run_time": {"mail": run_time}},
    }


_COUNTERS_RECORD = st.builds(
    _counters_record,
    st.integers(min_value=0, max_value=3),
    st.sampled_from([0.1, 0.7, 1234.567, 1e-3, 3.3]),  # sums whose order shows in the bits
)


@st.composite
def _timed_log(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Tasks enqueued, claimed (``waited`` or not), then succeeded or failed at drawn
    instants, with ``counters`` records between them."""
    out: list[dict[str, Any]] = []
    base = 1_760_000_000_000
    for i in range(draw(st.integers(min_value=0, max_value=8))):
        task = {"taskId": f"t{i}", "taskType": draw(st.sampled_from(["mail", "sms"])),
                "taskData": "{}", "maxRetries": 3}  # fmt: skip
        out.append({**task, "event": "enqueued", "ts": base})
        claim: dict[str, Any] = {"event": "claimed", "task": f"t{i}", "daemon": "d",
                                 "ts": base + draw(_TIMES)}  # fmt: skip
        if draw(st.booleans()):
            claim["waited"] = draw(_TIMES)
        out.append(claim)
        outcome = draw(st.sampled_from(["succeeded", "retry_scheduled", "dead_lettered"]))
        out.append({**task, "event": outcome, "ts": base + draw(_TIMES), "attempt": 1})
        if draw(st.booleans()):
            out.append(draw(_COUNTERS_RECORD))
    return out


@settings(max_examples=examples(300), deadline=None)
@given(_timed_log(), st.integers(min_value=1, max_value=10), st.integers(min_value=1, max_value=6))
def test_bulk_totals_equal_the_incremental_folds_exactly(
    records: list[dict[str, Any]], chunk: int, settle_every: int
) -> None:
    state, _ = fold(empty(), records)
    with mock.patch.object(replay, "_SETTLE_EVERY", settle_every):  # settled mid-batch too
        folder = BulkFolder()
        for start in range(0, len(records), chunk):
            folder.feed(records[start : start + chunk])
        bulk = folder.finish()
        by_events = BulkFolder()
        by_events.feed_events(ev.decode(record) for record in records)
        assert by_events.finish().histograms == bulk.histograms
    assert dict(bulk.counters) == dict(state.counters)
    assert {k: (c, repr(t)) for k, (c, t) in bulk.histograms.items()} == {
        k: (c, repr(t)) for k, (c, t) in state.histograms.items()
    }
    assert bulk.n == state.n and bulk.last_seq == state.last_seq
