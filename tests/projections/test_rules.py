"""Example-based tests of the queue rules, each a small Given/When/Then story."""

from __future__ import annotations

from typing import Any

import pytest

from snerd.projections import queries
from snerd.projections.replay import bulk_fold
from snerd.projections.schedule import format_instant
from snerd.projections.state import QueueState, advance, empty, fold
from snerd.projections.task import ACTIVE, BLOCKED, DELAYED, READY

T = 1_700_000_000.0


def enq(task_id: str, **fields: Any) -> dict[str, Any]:
    return {"event": "enqueued", "taskId": task_id, "taskType": "t", **fields}


def claim(task_id: str, at: float = T, daemon: str = "d1", **fields: Any) -> dict[str, Any]:
    return {
        "event": "claimed",
        "taskId": task_id,
        "daemon": daemon,
        "ts": round(at * 1000),
        **fields,
    }


def done(task_id: str) -> dict[str, Any]:
    return {"event": "succeeded", "taskId": task_id}


def dead(task_id: str, **fields: Any) -> dict[str, Any]:
    return {"event": "dead_lettered", "taskId": task_id, "taskType": "t", **fields}


def run(*records: dict[str, Any], now: float = T) -> QueueState:
    """Fold ``records`` from the empty state, advance to ``now``; bulk fold must agree."""
    state, _ = fold(empty(), records)
    state, _ = advance(state, now)
    bulk, _ = advance(bulk_fold(records), now)
    assert {k: t.phase for k, t in bulk.tasks.items()} == {
        k: t.phase for k, t in state.tasks.items()
    }
    assert set(bulk.dlq) == set(state.dlq) and bulk.doomed == state.doomed
    return state


def then(state: QueueState, *records: dict[str, Any]) -> QueueState:
    return fold(state, records)[0]


def phases(state: QueueState) -> dict[str, str]:
    return {k: t.phase for k, t in state.tasks.items()}


def picked(state: QueueState, now: float = T) -> str | None:
    task = queries.pick(state, now, lambda t: True).task
    return None if task is None else task.id


# --- priority and FIFO --------------------------------------------------------------------


def test_pick_takes_the_most_urgent_then_the_oldest() -> None:
    state = run(
        enq("low"),
        enq("hi1", urgencyScore=5),
        enq("mid", urgencyScore=1),
        enq("hi2", urgencyScore=5),
    )
    order = []
    while (task_id := picked(state)) is not None:
        order.append(task_id)
        state = then(state, claim(task_id))
    assert order == ["hi1", "hi2", "mid", "low"]


def test_fifo_holds_across_lanes_of_different_types() -> None:
    state = run(enq("a", taskType="x"), enq("b", taskType="y"), enq("c", taskType="x"))
    assert picked(state) == "a"
    assert picked(then(state, claim("a"))) == "b"


def test_reenqueue_moves_a_task_to_the_back_of_its_priority() -> None:
    state = run(enq("a"), enq("b"), enq("a"))
    assert picked(state) == "b"


# --- rate limits ---------------------------------------------------------------------------


def test_rate_limit_wakes_exactly_when_the_oldest_slot_frees() -> None:
    limited = {"rateLimitGroup": "g", "maxPerMinute": 2}
    state = run(
        enq("a", **limited),
        enq("b", **limited),
        enq("c", **limited),
        claim("a", at=T + 1, group="g"),
        claim("b", at=T + 5, group="g"),
        now=T + 10,
    )
    assert queries.slot_free_at(state, "g", 2, T + 10) == T + 61
    choice = queries.pick(state, T + 10, lambda t: True)
    assert choice.task is None and choice.wake_at == T + 61
    assert queries.slot_free_at(state, "g", 2, T + 61) is None
    assert picked(state, T + 61) == "c"
    assert queries.slot_free_at(state, "g", 3, T + 10) is None


def test_only_claims_that_name_their_group_fill_the_window() -> None:
    state = run(enq("a"), claim("a", at=T), enq("b"), claim("b", at=T, group="g"))
    assert dict(state.windows) == {"g": (T,)}


def test_rate_window_lines_restore_a_window() -> None:
    state = run({"event": "rate_window", "group": "g", "times": [round(T * 1000)]})
    assert queries.slot_free_at(state, "g", 1, T + 30) == T + 60


# --- schedules ---------------------------------------------------------------------------------


def test_execute_at_delays_until_advance_reaches_it() -> None:
    at = format_instant(T + 30)
    state = run(enq("a", executeAt=at), now=T)
    assert phases(state) == {"a": DELAYED}
    assert picked(state) is None
    assert queries.pick(state, T, lambda t: True).wake_at == T + 30
    state, delta = advance(state, T + 30)
    assert phases(state) == {"a": READY} and delta.ready == ("a",)


# --- DAGs ----------------------------------------------------------------------------------------


def test_fan_in_unblocks_only_after_both_parents_succeed() -> None:
    state = run(enq("p1"), enq("p2"), enq("c", triggerAfterIds=["p1", "p2"]))
    assert phases(state)["c"] == BLOCKED
    state = then(state, claim("p1"), done("p1"))
    assert phases(state)["c"] == BLOCKED
    state, delta = fold(state, [claim("p2"), done("p2")])
    assert phases(state)["c"] == READY
    assert "c" in delta.ready


def test_a_retrying_parent_keeps_its_child_blocked() -> None:
    retry = {"event": "retry_scheduled", "taskId": "p", "taskType": "t", "retryCount": 1}
    state = run(enq("p"), enq("c", triggerAfterIds=["p"]), claim("p"), retry)
    assert phases(state) == {"p": READY, "c": BLOCKED}


def test_an_absent_parent_counts_as_completed() -> None:
    state = run(enq("c", triggerAfterIds=["never-enqueued"]))
    assert phases(state) == {"c": READY}


def test_a_parent_enqueued_after_its_child_blocks_it() -> None:
    state = run(enq("c", triggerAfterIds=["p"]), enq("p"))
    assert phases(state)["c"] == BLOCKED


def test_dead_lettered_parent_dooms_children_then_grandchildren() -> None:
    state = run(enq("p"), enq("c", triggerAfterIds=["p"]), enq("g", triggerAfterIds=["c"]))
    state, delta = fold(state, [claim("p"), dead("p", LastJobError="boom")])
    assert set(state.doomed) == {"c"} and delta.doomed == ("c",)
    assert phases(state) == {"c": BLOCKED, "g": BLOCKED}
    # the dispatcher fails the doomed child through; the grandchild follows
    state, delta = fold(state, [dead("c", reason="blocked_by_failed_parent")])
    assert set(state.doomed) == {"g"} and delta.doomed == ("g",)
    assert state.dlq["c"].reason == "blocked_by_failed_parent"


def test_cron_occurrence_in_the_dlq_dooms_children_of_its_key() -> None:
    state = run(
        enq("a", cronExpression="30s"), dead("a", dlqKey="a@t"), enq("c", triggerAfterIds=["a@t"])
    )
    assert "a@t" in state.dlq and set(state.doomed) == {"c"}


# --- the dead-letter queue --------------------------------------------------------------------


def test_requeue_moves_a_dlq_entry_back_and_frees_its_children() -> None:
    state = run(enq("p"), enq("c", triggerAfterIds=["p"]), dead("p"))
    assert set(state.doomed) == {"c"}
    state = then(state, {"event": "requeued", "taskId": "p", "taskType": "t", "retryCount": 0})
    assert "p" not in state.dlq and set(state.doomed) == set()
    assert phases(state) == {"p": READY, "c": BLOCKED}


def test_requeue_of_an_absent_key_still_enqueues_the_task() -> None:
    state = run({"event": "requeued", "taskId": "x", "taskType": "t", "dlqKey": "x@1"})
    assert phases(state) == {"x": READY} and not state.dlq


def test_purge_removes_the_entry_and_the_children_run() -> None:
    state = run(
        enq("p"), enq("c", triggerAfterIds=["p"]), dead("p"), {"event": "purged", "dlqKey": "p"}
    )
    assert not state.dlq and phases(state) == {"c": READY}


def test_snerdmq_deleted_line_with_exhausted_error_is_dead_lettered() -> None:
    line = {"taskId": "a", "taskType": "t", "retryCount": 3, "maxRetries": 3}
    failed = {**line, "LastJobError": "boom", "deletedAt": "2024-01-01T00:00:00Z"}
    state = run(line, failed)
    assert not state.tasks and state.dlq["a"].error == "boom"
    completed = run(line, {**line, "deletedAt": "2024-01-01T00:00:00Z"})
    assert not completed.tasks and not completed.dlq


# --- dedupe and claims ---------------------------------------------------------------------------


@pytest.mark.parametrize("end", [done("a"), {"event": "cancelled", "taskId": "a"}, dead("a")])
def test_dedupe_fingerprint_frees_when_the_task_ends(end: dict[str, Any]) -> None:
    state = run(enq("a", autoDedupe=True, payloadHash="f"))
    assert set(state.fingerprints["f"]) == {"a"}
    assert "f" not in then(state, claim("a"), end).fingerprints


def test_fingerprint_is_indexed_only_for_auto_dedupe_tasks() -> None:
    assert not run(enq("a", payloadHash="f")).fingerprints


def test_claim_released_by_its_owner_gets_a_fresh_order() -> None:
    state = run(enq("a"), enq("b"), claim("a", attempt=1))
    assert phases(state) == {"a": ACTIVE, "b": READY} and set(state.by_daemon["d1"]) == {"a"}
    wrong = then(state, {"event": "claim_released", "taskId": "a", "attempt": 2})
    assert phases(wrong)["a"] == ACTIVE
    state = then(state, {"event": "claim_released", "taskId": "a", "attempt": 1})
    assert phases(state)["a"] == READY and not state.by_daemon
    assert state.tasks["a"].order > state.tasks["b"].order
    assert picked(state) == "b"


def test_a_second_claim_of_a_running_task_is_ignored() -> None:
    state = run(enq("a"), claim("a", daemon="d1"), claim("a", daemon="d2"))
    claim_now = state.tasks["a"].claim
    assert claim_now is not None and claim_now.daemon == "d1"


def test_claim_of_an_unknown_task_changes_nothing_but_the_window() -> None:
    state = run(claim("ghost", group="g"))
    assert not state.tasks and state.invalid == 0 and "g" in state.windows


def test_unknown_events_are_counted_invalid_and_skipped() -> None:
    state = run(enq("a"), {"event": "teleported", "taskId": "a"}, {"taskId": 5})
    assert state.invalid == 2 and phases(state) == {"a": READY}
