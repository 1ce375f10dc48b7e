"""``plan.idle`` is a promise about ``plan``: when it says a pass would find nothing,
the plan proposes nothing (no claim, no fail-through) at any capacity, with or without
an ``accepts`` that refuses some task types (a backlog of types run elsewhere)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_budget import examples
from loggen import TYPES, any_logs, nows

from snerd.projections.plan import idle, plan
from snerd.projections.state import empty, fold
from snerd.projections.task import Task

PROPS = settings(
    max_examples=examples(500), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@PROPS
@given(any_logs, nows, st.sets(st.sampled_from(TYPES)), st.integers(1, 4))
def test_idle_means_the_plan_proposes_nothing(
    records: list[dict[str, Any]], now: float, runnable: set[str], capacity: int
) -> None:
    state, _ = fold(empty(), records)

    def accepts(task: Task) -> bool:
        return task.type in runnable

    if idle(state, now, accepts):
        step = plan(state, now, capacity, accepts=accepts)
        assert not step.claims and not step.fail_through
    if idle(state, now):  # without accepts: at least as strict
        assert idle(state, now, accepts)


def test_a_lane_of_refused_tasks_is_idle_and_a_runnable_one_is_not() -> None:
    record = {"event": "enqueued", "taskId": "x", "taskType": "t1", "taskData": "{}", "seq": 1}
    state, _ = fold(empty(), [record])
    assert not idle(state, 0.0)
    assert idle(state, 0.0, lambda task: task.type != "t1")
    assert not idle(state, 0.0, lambda task: task.type == "t1")
