"""queries: what the dispatcher asks of a state (pick, pick_many, rate slots)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, note, settings
from hypothesis import strategies as st
from hypothesis_budget import examples
from loggen import any_logs, nows

from snerd.projections import queries
from snerd.projections.state import QueueState, advance, empty, fold
from snerd.projections.task import Task

ELIGIBLE: dict[str, Callable[[Task], bool]] = {
    "all": lambda t: True,
    "t1": lambda t: t.type == "t1",
    "urgent": lambda t: t.urgency > 0,
}


def folded(records: list[dict[str, Any]], now: float) -> QueueState:
    state, _ = fold(empty(), records)
    state, _ = advance(state, now)
    return state


def picks_one_by_one(
    state: QueueState, now: float, eligible: Callable[[Task], bool], limit: int
) -> list[str]:
    """The reference: pick, claim what was picked (through the fold), repeat."""
    out: list[str] = []
    while len(out) < limit:
        task = queries.pick(state, now, eligible).task
        if task is None:
            break
        out.append(task.id)
        claim: dict[str, Any] = {
            "event": "claimed",
            "taskId": task.id,
            "daemon": "me",
            "ts": round(now * 1000),
        }
        if task.rate_group:
            claim["group"] = task.rate_group
        state, _ = fold(state, [claim])
    return out


@settings(max_examples=examples(500), deadline=None)
@given(any_logs, nows, st.sampled_from(sorted(ELIGIBLE)), st.integers(min_value=1, max_value=8))
def test_pick_many_equals_successive_picks_with_claims(
    records: list[dict[str, Any]], now: float, which: str, limit: int
) -> None:
    note(f"records = {records!r}")
    state = folded(records, now)
    eligible = ELIGIBLE[which]
    batch = [t.id for t in queries.pick_many(state, now, eligible, limit)]
    assert batch == picks_one_by_one(state, now, eligible, limit)
    assert len(set(batch)) == len(batch)


def test_pick_many_skips_stale_entries_below_the_top() -> None:
    """A re-enqueued task leaves a stale lane entry; a batch must not pick it twice."""
    records = [
        {"event": "enqueued", "taskId": "a", "taskType": "t"},
        {"event": "enqueued", "taskId": "b", "taskType": "t"},
        {"event": "enqueued", "taskId": "b", "taskType": "t"},  # stale (0, 2, b) stays
    ]
    state = folded(records, 0.0)
    assert [t.id for t in queries.pick_many(state, 0.0, ELIGIBLE["all"], 5)] == ["a", "b"]
