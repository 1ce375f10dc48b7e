"""projections/history.py: the audit fold behind ``snerdmq replay``."""

from __future__ import annotations

from typing import Any

from hypothesis import given, note, settings
from hypothesis_budget import examples
from loggen import T0, any_logs, nows
from projcheck import state_view

from snerd.projections import history as h
from snerd.projections.history import Before, audit, state_at, until
from snerd.projections.state import advance, empty, fold
from snerd.projections.views import status as st
from snerd.projections.views.status import status_of

T = 1_700_000_000.0


def ms(seconds: float) -> int:
    return round(seconds * 1000)


def enq(task_id: str, at: float = T, **fields: Any) -> dict[str, Any]:
    return {"event": "enqueued", "taskId": task_id, "taskType": "t", "ts": ms(at), **fields}


def claim(task_id: str, at: float, attempt: int = 1, daemon: str = "d1") -> dict[str, Any]:
    return {
        "event": "claimed",
        "taskId": task_id,
        "ts": ms(at),
        "daemon": daemon,
        "attempt": attempt,
    }


def retry(task_id: str, at: float, count: int, error: str) -> dict[str, Any]:
    return {
        "event": "retry_scheduled", "taskId": task_id, "taskType": "t", "ts": ms(at),
        "retryCount": count, "daemon": "d1", "attempt": count,
        "LastJobError": {"error": error, "retry_worthy": True}, "LastErrorObj": error,
    }  # fmt: skip


def done(task_id: str, at: float, attempt: int = 1) -> dict[str, Any]:
    return {
        "event": "succeeded",
        "taskId": task_id,
        "ts": ms(at),
        "daemon": "d1",
        "attempt": attempt,
    }


def dead(task_id: str, at: float, **fields: Any) -> dict[str, Any]:
    return {"event": "dead_lettered", "taskId": task_id, "taskType": "t", "ts": ms(at), **fields}


# --- properties -----------------------------------------------------------------------------


@settings(max_examples=examples(400), deadline=None)
@given(any_logs, nows)
def test_final_states_agree_with_the_queue_fold(records: list[dict[str, Any]], now: float) -> None:
    note(f"records = {records!r}")
    result = audit(records, now, check=lambda record, before: ["x"])
    state, _ = fold(empty(), records)
    assert state_view(result.state) == state_view(state)
    assert result.events == len(records) and result.invalid == state.invalid
    for task_id, task in state.tasks.items():
        assert result.tasks[task_id].state == status_of(task, now)
    for key in state.dlq:  # an id both live and dead-lettered shows as live
        assert result.tasks[key].state == st.DEAD_LETTERED or key in state.tasks
    for task_id, history in result.tasks.items():
        assert history.state in st.STATES
        assert len(history.transitions) >= history.history_len >= 1
        if task_id not in state.tasks and task_id not in state.dlq:
            assert history.state in st.ENDED
    live = sum(result.counts()[s] for s in (st.PENDING, st.SCHEDULED, st.BLOCKED, st.ACTIVE))
    assert live == len(state.tasks)
    advanced, _ = advance(state, now)
    ready = {t for t, task in advanced.tasks.items() if task.phase == "ready"}
    assert ready == {t for t in state.tasks if result.tasks[t].state == st.PENDING}


def figures(tasks: dict[str, h.TaskHistory]) -> dict[str, tuple[Any, ...]]:
    return {k: (t.state, t.attempts, t.last_error, t.type, t.history_len) for k, t in tasks.items()}


@settings(max_examples=examples(400), deadline=None)
@given(any_logs, nows)
def test_summary_and_heap_rebuilds_equal_the_audit(
    records: list[dict[str, Any]], now: float
) -> None:
    """The summary is the audit without transitions; an audit that rebuilds its heaps
    every few records ends where one that never does ends."""
    note(f"records = {records!r}")
    full = audit(records, now)
    fast = h.summarize(records, now)
    assert figures(fast.tasks) == figures(full.tasks)
    assert fast.problems == full.problems and fast.events == full.events
    assert fast.invalid == full.invalid
    assert all(t.transitions == [] for t in fast.tasks.values())
    for entry in full.tasks.values():
        assert entry.history_len == sum(not t.derived for t in entry.transitions)
    auditor = h.Audit(rebuild_every=3, now=now)
    auditor.feed(records)
    rebuilt = auditor.finish(now)
    assert rebuilt.tasks == full.tasks
    assert {k: t.phase for k, t in rebuilt.state.tasks.items()} == {
        k: t.phase for k, t in full.state.tasks.items()
    }


@settings(max_examples=examples(200), deadline=None)
@given(any_logs, nows)
def test_state_at_folds_exactly_the_records_until_the_instant(
    records: list[dict[str, Any]], at: float
) -> None:
    kept = list(until(records, at))
    assert state_at(records, at).tasks == audit(kept, at).tasks
    clock = None
    for record in records:
        ts = record.get("ts")
        if type(ts) is int and ts >= 0:
            clock = ts / 1000
        assert (record in kept) or (clock is not None and clock > at)


def test_keep_limits_stored_transitions_not_counts() -> None:
    records = [enq("a"), enq("b"), claim("a", T + 1), done("a", T + 2)]
    result = audit(records, keep=lambda task_id: task_id == "a")
    assert len(result.tasks["a"].transitions) == 3 and result.tasks["b"].transitions == []
    assert result.tasks["b"].history_len == 1


# --- stories ---------------------------------------------------------------------------------


def test_retried_task_history() -> None:
    records = [
        enq("r"), claim("r", T + 1), retry("r", T + 2, 1, "boom"),
        claim("r", T + 3, attempt=2), done("r", T + 4, attempt=2),
    ]  # fmt: skip
    task = audit(records).tasks["r"]
    assert [(x.event, x.state) for x in task.transitions] == [
        ("enqueued", "pending"),
        ("claimed", "active"),
        ("retry_scheduled", "pending"),
        ("claimed", "active"),
        ("succeeded", "completed"),
    ]
    assert task.state == "completed" and task.attempts == 2 and task.last_error == "boom"
    assert task.transitions[1].daemon == "d1" and task.transitions[1].ts == T + 1


def test_failed_dag_history() -> None:
    records = [
        enq("p"), enq("c", triggerAfterIds=["p"]), enq("g", triggerAfterIds=["c"]),
        claim("p", T + 1), dead("p", T + 2, reason="retries_exhausted", LastErrorObj="boom"),
        dead("c", T + 2, reason="blocked_by_failed_parent"),
        dead("g", T + 2, reason="blocked_by_failed_parent"),
    ]  # fmt: skip
    result = audit(records)
    assert result.counts()["dead_lettered"] == 3
    child = result.tasks["c"]
    assert [(x.event, x.state) for x in child.transitions] == [
        ("enqueued", "blocked"),
        ("dead_lettered", "dead_lettered"),
    ]
    assert child.transitions[-1].reason == "blocked_by_failed_parent"
    assert result.tasks["p"].last_error == "boom"


def test_children_get_a_transition_when_their_parent_completes() -> None:
    records = [enq("p"), enq("c", triggerAfterIds=["p"]), claim("p", T + 1), done("p", T + 2)]
    child = audit(records).tasks["c"]
    last = child.transitions[-1]
    assert (last.event, last.state, last.reason) == ("unblocked", "pending", "succeeded of p")
    assert last.ts == T + 2


def test_cron_occurrence_in_the_dlq_has_its_own_history() -> None:
    records = [
        enq("cr", cronExpression="30s"), claim("cr", T + 1),
        dead("cr", T + 2, dlqKey="cr@t", reason="retries_exhausted"),
        enq("cr", T + 2, cronExpression="30s", executeAt="2023-11-14T22:14:00Z")
        | {"event": "rescheduled"},
    ]  # fmt: skip
    result = audit(records, T + 3)
    assert result.tasks["cr@t"].state == "dead_lettered"
    assert result.tasks["cr"].state == "scheduled"
    assert audit(records, T + 100).tasks["cr"].state == "pending"


def test_snerdmq_lines_replay_with_tombstones_as_completed() -> None:
    base = {"taskType": "email", "taskData": "{}", "maxRetries": 2}
    records = [
        {"taskId": "ok", "retryCount": 0, **base},
        {"taskId": "ok", "retryCount": 1, "LastJobError": "timeout", **base},
        {"taskId": "ok", "retryCount": 1, "deletedAt": "2024-01-01T00:00:00Z", **base},
        {"taskId": "bad", "retryCount": 2, "LastJobError": "boom", **base},
        {"taskId": "bad", "retryCount": 2, "LastJobError": "boom",
         "deletedAt": "2024-01-01T00:00:00Z", **base},
    ]  # fmt: skip
    result = audit(records)
    assert result.tasks["ok"].state == "completed" and result.tasks["ok"].attempts == 1
    assert result.tasks["ok"].last_error == "timeout"
    assert result.tasks["bad"].state == "dead_lettered"
    assert [x.event for x in result.tasks["ok"].transitions] == [
        h.SNERDMQ_UPSERT,
        h.SNERDMQ_UPSERT,
        h.SNERDMQ_DELETED,
    ]


def test_state_at_inherits_the_last_timestamp() -> None:
    records = [
        {"taskId": "x", "taskType": "t"},  # no ts yet: counts as early
        enq("a", T),
        {"event": "claimed", "taskId": "a", "daemon": "d1"},  # inherits T
        done("a", T + 10),
        {"event": "enqueued", "taskId": "late", "taskType": "t"},  # inherits T + 10
    ]
    at_5 = state_at(records, T + 5)
    assert at_5.tasks["a"].state == "active" and set(at_5.tasks) == {"x", "a"}
    assert state_at(records, T + 10).tasks["late"].state == "pending"


def test_checker_sees_the_state_before_each_record() -> None:
    seen: list[tuple[str, str | None, bool]] = []

    def check(record: dict[str, Any], before: Before) -> list[str]:
        seen.append(
            (str(record.get("event")), before.task and before.task.phase, before.in_snapshot)
        )
        return (
            ["claimed twice"] if before.task is not None and before.task.phase == "active" else []
        )

    snapshot = {"event": "snapshot", "seq": 1, "records": 1}
    result = audit([snapshot, enq("a"), claim("a", T), claim("a", T)], check=check)
    assert seen == [
        ("snapshot", None, True),
        ("enqueued", None, True),
        ("claimed", "ready", False),
        ("claimed", "active", False),
    ]
    assert [(p.index, p.task_id, p.message) for p in result.problems] == [(4, "a", "claimed twice")]


def test_unusable_records_are_problems() -> None:
    result = audit([{"event": "teleported", "taskId": "a"}, enq("a"), {"taskId": 7}])
    assert [p.index for p in result.problems] == [1, 3] and result.invalid == 2
    assert T0 == T


@settings(max_examples=examples(30), deadline=None)
@given(any_logs)
def test_an_audit_keeps_the_counters_across_its_heap_rebuilds(
    records: list[dict[str, Any]],
) -> None:
    """The audit's fold (rebuilt every few records to drop stale heap entries) ends
    with the same totals and histograms as one fold of the log."""
    auditor = h.Audit(rebuild_every=3)
    auditor.feed(records)
    state, _ = auditor.folder.finish()
    whole, _ = fold(empty(), records)
    assert dict(state.counters) == dict(whole.counters)
    assert dict(state.histograms) == dict(whole.histograms)
