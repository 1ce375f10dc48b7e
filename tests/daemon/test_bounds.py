"""Issue 12.4: every number that becomes a time or a count is bounded at the edge.

An enqueue that is acked must never fail later (when its retry time, lease or timeout
is computed and written) nor read back differently after a restart. Out-of-range
values are refused at once with ``invalid_field`` naming the field.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from daemonkit import Wire

from snerd.rpc import protocol as p

Spawn = Callable[..., Awaitable[Wire]]

HUGE_SPAN = 1e10  # hours: the retry time lands after year 9999 (issue 12.4)

REFUSED: list[tuple[str, dict[str, Any]]] = [
    ("retry_after_hours", {"retry_after_hours": HUGE_SPAN}),
    ("retry_after_hours", {"retry_after_hours": 1e16}),  # used to read back as 0
    ("retry_after_hours", {"retry_after_hours": p.MAX_RETRY_AFTER_HOURS + 0.001}),
    ("max_execution_seconds", {"max_execution_seconds": 1e29}),
    ("max_execution_seconds", {"max_execution_seconds": p.MAX_EXECUTION_SECONDS + 1}),
    ("urgency_score", {"urgency_score": 1e300}),
    ("urgency_score", {"urgency_score": -(2.0**53)}),
    ("max_retries", {"max_retries": p.MAX_COUNT + 1}),
    ("max_retries", {"max_retries": 2**63}),
    ("max_per_minute", {"rate_limit_group": "g", "max_per_minute": p.MAX_COUNT + 1}),
    ("execute_at", {"execute_at": 1e12}),
    ("execute_at", {"execute_at": p.MAX_EXECUTE_AT}),
    ("execute_at", {"execute_at": "9900-01-01T00:00:00Z"}),
    ("execute_at", {"execute_at": "9999-12-31T23:59:59-10:00"}),  # past 9999 in UTC
    ("execute_at", {"execute_at": p.MIN_EXECUTE_AT - 1}),
    ("cron", {"cron": "2000000d"}),  # a second occurrence would be after year 9999
]


@pytest.mark.parametrize(("field", "fields"), REFUSED, ids=[f"{f}={v}" for f, v in REFUSED])
async def test_out_of_range_numbers_are_refused_naming_the_field(
    daemon: Wire, field: str, fields: dict[str, Any]
) -> None:
    reply = await daemon.enqueue("x", **fields)
    assert reply["action"] == "error", reply
    assert reply["code"] == "invalid_field", reply
    assert reply["field"] == field, reply
    assert field in reply["message"], reply
    assert reply["task_id"] == "x"
    await daemon.quiet("execute", task_id="x")


async def test_result_attempt_beyond_a_count_is_refused(daemon: Wire) -> None:
    reply = await daemon.request("result", task_id="x", status="success", attempt=p.MAX_COUNT + 1)
    assert (reply["code"], reply["field"]) == ("invalid_field", "attempt"), reply


async def test_a_failed_attempt_with_the_longest_backoff_is_scheduled_not_stuck(
    daemon: Wire,
) -> None:
    await daemon.ack("slow", retry_after_hours=p.MAX_RETRY_AFTER_HOURS, max_retries=1)
    await daemon.expect("execute", task_id="slow", attempt=1)
    await daemon.result("slow", ok=False, error="boom")
    await daemon.logged("slow", "retry_scheduled")
    task = await daemon.get("slow")
    assert (task["status"], task["retryCount"]) == ("scheduled", 1), task
    assert not daemon.taken("error"), daemon.taken("error")
    await daemon.advance(p.MAX_RETRY_AFTER_HOURS * 3600)
    await daemon.expect("execute", task_id="slow", attempt=2)
    await daemon.result("slow", ok=False, error="boom again")
    await daemon.expect("max_retries_reached", task_id="slow")


async def test_the_longest_timeout_runs_and_times_out(daemon: Wire) -> None:
    await daemon.ack("long", max_execution_seconds=p.MAX_EXECUTION_SECONDS, max_retries=0)
    line = await daemon.expect("execute", task_id="long")
    assert line["max_execution_seconds"] == p.MAX_EXECUTION_SECONDS
    await daemon.advance(p.MAX_EXECUTION_SECONDS + 2)
    notice = await daemon.expect("max_retries_reached", task_id="long")
    assert "timed out" in str(notice["last_error"])


async def test_extreme_accepted_values_read_back_the_same_after_a_restart(
    spawn: Spawn,
) -> None:
    first = await spawn()
    extremes: dict[str, dict[str, Any]] = {
        "hi": {"urgency_score": p.MAX_URGENCY, "max_retries": p.MAX_COUNT},
        "lo": {
            "urgency_score": -p.MAX_URGENCY,
            "rate_limit_group": "g",
            "max_per_minute": p.MAX_COUNT,
        },
        "late": {"execute_at": p.MAX_EXECUTE_AT - 1, "retry_after_hours": 87_600},
        "early": {"execute_at": "0001-01-01T00:00:00Z"},  # Go's zero time: due now
        "cron": {"cron": "3650d"},
    }
    before = {}
    for task_id, fields in extremes.items():
        await first.ack(task_id, **fields)
        before[task_id] = await first.get(task_id)
    second = await spawn()
    for task_id in extremes:
        after = await second.get(task_id)
        keys = ("urgencyScore", "maxRetries", "maxPerMinute", "retryAfterHours",
                "executeAt", "cronExpression", "status")  # fmt: skip
        assert {k: after.get(k) for k in keys} == {k: before[task_id].get(k) for k in keys}
    assert before["early"]["status"] == "pending"
    assert before["late"]["status"] == "scheduled"


LAST_YEAR_CRON = "0 0 0 1 1 * 2024"  # fires once: 2024-01-01T00:00:00Z
UNTIL_FIRE = 1_704_067_200 - 1_700_000_000  # from the test clock's start (T0)


async def test_the_last_occurrence_of_a_cron_ends_the_task_instead_of_sticking(
    daemon: Wire,
) -> None:
    """A 7-field cron whose year passes has no next occurrence: its last success ends
    the task like a one-off (it used to be an internal_error, leaving it active)."""
    await daemon.ack("once", cron=LAST_YEAR_CRON)
    await daemon.advance(UNTIL_FIRE)
    await daemon.expect("execute", task_id="once", attempt=1)
    await daemon.result("once")
    await daemon.logged("once", "succeeded")
    assert (await daemon.get("once"))["status"] == "completed"
    assert not daemon.taken("error"), daemon.taken("error")


async def test_the_last_occurrence_of_a_cron_dead_letters_like_a_one_off(daemon: Wire) -> None:
    await daemon.ack("once", cron=LAST_YEAR_CRON, max_retries=0)
    await daemon.advance(UNTIL_FIRE)
    await daemon.expect("execute", task_id="once", attempt=1)
    await daemon.result("once", ok=False, error="no")
    notice = await daemon.expect("max_retries_reached", task_id="once")
    assert notice["reason"] == "retries_exhausted"
    task = await daemon.get("once")
    assert task["status"] == "dead_lettered", task
    assert not daemon.taken("error"), daemon.taken("error")
