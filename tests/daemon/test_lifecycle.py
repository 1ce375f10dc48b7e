"""Priority, retries, backoff, the dead-letter queue, requeue and hard timeouts."""

from __future__ import annotations

import pytest
from daemonkit import Wire, events_of, iso, read_log


async def run_in_order(wire: Wire, n: int) -> list[str]:
    """With one worker: take each execute, answer it, and return the ids in order."""
    order = []
    for _ in range(n):
        execute = await wire.expect("execute")
        order.append(execute["task_id"])
        await wire.result(execute["task_id"])
    return order


# --- priority ------------------------------------------------------------------------


async def test_larger_urgency_first_fifo_on_ties(one_worker) -> None:
    wire = await one_worker()
    urgencies = {"a": 0, "b": 5, "c": 5, "d": 1, "e": 5, "f": -1, "g": 0, "h": 2.5}
    for task_id, urgency in urgencies.items():
        await wire.ack(task_id, urgency_score=urgency)
    await wire.register("t")
    assert await run_in_order(wire, len(urgencies)) == list("bcehdagf")


async def test_default_urgency_is_fifo(one_worker) -> None:
    wire = await one_worker()
    ids = [f"task-{i:02d}" for i in range(20)]
    for task_id in ids:
        await wire.ack(task_id)
    await wire.register("t")
    assert await run_in_order(wire, len(ids)) == ids


async def test_urgent_task_enqueued_later_overtakes_the_waiting_ones(one_worker) -> None:
    wire = await one_worker(register=("t",))
    await wire.ack("first")
    await wire.expect("execute", task_id="first")  # the one worker is busy
    for task_id in ("low-1", "low-2"):
        await wire.ack(task_id)
    await wire.ack("urgent", urgency_score=10)
    await wire.result("first")
    assert await run_in_order(wire, 3) == ["urgent", "low-1", "low-2"]


async def test_max_workers_bounds_attempts_in_flight(spawn) -> None:
    wire = await spawn(workers=3, register=("t",))
    for i in range(6):
        await wire.ack(f"w{i}")
    running = await wire.expect_n("execute", 3)
    await wire.quiet("execute")
    assert (await wire.stats())["daemon"]["in_flight"] == 3
    await wire.result(running[0]["task_id"])
    await wire.expect("execute")
    await wire.quiet("execute")


# --- retries -------------------------------------------------------------------------


async def test_max_retries_means_retries_after_the_first_attempt(daemon: Wire) -> None:
    await daemon.ack("a", max_retries=2, task_data={"k": 1})
    for attempt in (1, 2, 3):
        execute = await daemon.expect("execute", task_id="a")
        assert execute["attempt"] == attempt
        await daemon.result("a", ok=False, error=f"fail {attempt}")
    dead = await daemon.expect("max_retries_reached", task_id="a")
    assert dead["reason"] == "retries_exhausted"
    assert dead["retry_count"] == 2
    assert dead["task_type"] == "t" and dead["task_data"] == '{"k":1}'
    await daemon.quiet("execute", task_id="a")
    claims = events_of(daemon.storage, "a", "claimed")
    assert [r["attempt"] for r in claims] == [1, 2, 3]


async def test_max_retries_reached_carries_the_last_error_as_text(daemon: Wire) -> None:
    """§4: last_error is a string (or null)."""
    await daemon.ack("a", max_retries=1)
    await daemon.expect("execute", task_id="a")
    await daemon.result("a", ok=False, error="first")
    await daemon.expect("execute", task_id="a")
    await daemon.result("a", ok=False, error="second")
    dead = await daemon.expect("max_retries_reached", task_id="a")
    assert dead["last_error"] == "second"


async def test_zero_retries_means_one_attempt(daemon: Wire) -> None:
    await daemon.ack("a", max_retries=0)
    await daemon.expect("execute", task_id="a", attempt=1)
    await daemon.result("a", ok=False, error="no")
    dead = await daemon.expect("max_retries_reached", task_id="a")
    assert dead["retry_count"] == 0
    await daemon.quiet("execute", task_id="a")


async def test_success_after_a_retry_completes(daemon: Wire) -> None:
    await daemon.ack("a", max_retries=3)
    await daemon.expect("execute", task_id="a", attempt=1)
    await daemon.result("a", ok=False, error="flaky")
    await daemon.expect("execute", task_id="a", attempt=2)
    await daemon.result("a")
    await daemon.barrier()
    assert events_of(daemon.storage, "a", "succeeded")
    await daemon.quiet("max_retries_reached")


async def test_default_max_retries_is_three(daemon: Wire) -> None:
    await daemon.ack("a")
    for attempt in (1, 2, 3, 4):
        await daemon.expect("execute", task_id="a", attempt=attempt)
        await daemon.result("a", ok=False, error="e")
    dead = await daemon.expect("max_retries_reached", task_id="a")
    assert dead["retry_count"] == 3


# --- backoff -------------------------------------------------------------------------


@pytest.mark.parametrize("hours", [0.5, 2.0, 0.001])
async def test_backoff_waits_exactly_retry_after_hours(daemon: Wire, hours: float) -> None:
    delay = hours * 3600
    await daemon.ack("a", max_retries=2, retry_after_hours=hours)
    await daemon.expect("execute", task_id="a", attempt=1)
    await daemon.result("a", ok=False, error="later")
    await daemon.advance(delay - 0.5)
    await daemon.quiet("execute", task_id="a")
    assert (await daemon.get("a"))["retryCount"] == 1
    await daemon.advance(0.5)
    await daemon.expect("execute", task_id="a", attempt=2)


async def test_backoff_applies_before_every_retry(daemon: Wire) -> None:
    await daemon.ack("a", max_retries=2, retry_after_hours=1)
    await daemon.expect("execute", task_id="a", attempt=1)
    for attempt in (2, 3):
        await daemon.result("a", ok=False, error="e")
        await daemon.advance(3599)
        await daemon.quiet("execute", task_id="a")
        await daemon.advance(1)
        await daemon.expect("execute", task_id="a", attempt=attempt)
    await daemon.result("a", ok=False, error="final")
    await daemon.expect("max_retries_reached", task_id="a")


async def test_retry_in_backoff_is_scheduled_in_stats_and_logs_retry_after_time(
    daemon: Wire,
) -> None:
    await daemon.ack("a", max_retries=1, retry_after_hours=1)
    await daemon.expect("execute", task_id="a")
    await daemon.result("a", ok=False, error="e")
    stats = await daemon.stats()
    assert stats["scheduled"] == 1 and stats["active"] == 0
    [retry] = events_of(daemon.storage, "a", "retry_scheduled")
    assert retry["retryAfterTime"] == iso(daemon.now + 3600)


# --- dead letter, requeue ---------------------------------------------------------------


async def dead_letter(wire: Wire, task_id: str, **fields: object) -> dict:
    await wire.ack(task_id, max_retries=0, **fields)
    await wire.expect("execute", task_id=task_id)
    await wire.result(task_id, ok=False, error="broken")
    return await wire.expect("max_retries_reached", task_id=task_id)


async def test_dead_lettered_task_stays_inspectable(daemon: Wire) -> None:
    await dead_letter(daemon, "a", task_data={"x": 1})
    task = await daemon.get("a")
    assert task["taskId"] == "a" and task["taskData"] == '{"x":1}'
    assert task["status"] == "dead_lettered"
    assert task["reason"] == "retries_exhausted"
    stats = await daemon.stats()
    assert stats["dead_lettered"] == 1
    [record] = events_of(daemon.storage, "a", "dead_lettered")
    assert record["deletedAt"] is not None


async def test_requeue_from_the_dead_letter_queue(daemon: Wire) -> None:
    await dead_letter(daemon, "a")
    reply = await daemon.request("requeue", task_id="a")
    assert reply["action"] == "ok" and reply["of"] == "requeue" and reply["task_id"] == "a"
    execute = await daemon.expect("execute", task_id="a")
    assert execute["attempt"] >= 2  # a new attempt, never a reused number
    task = await daemon.get("a")
    assert task["retryCount"] == 0
    assert task["status"] == "active"
    assert "LastJobError" not in task or task["LastJobError"] in (None, "")
    await daemon.result("a")
    await daemon.barrier()
    assert events_of(daemon.storage, "a", "succeeded")
    assert events_of(daemon.storage, "a", "requeued")


async def test_requeue_refusals(daemon: Wire) -> None:
    unknown = await daemon.request("requeue", task_id="nope")
    assert unknown["code"] == "unknown_task" and unknown["task_id"] == "nope"
    await daemon.ack("live", "unregistered")
    live = await daemon.request("requeue", task_id="live")
    assert live["action"] == "error" and live["code"] == "invalid_state"
    assert live["task_id"] == "live"


async def test_dead_lettered_id_cannot_be_enqueued_again(daemon: Wire) -> None:
    await dead_letter(daemon, "a")
    reply = await daemon.enqueue("a")
    assert reply["code"] == "duplicate_task" and reply["task_id"] == "a"
    assert "a" in reply["message"]


# --- hard timeouts ---------------------------------------------------------------------


async def test_timeout_fails_the_attempt_after_limit_plus_grace(daemon: Wire) -> None:
    await daemon.ack("a", max_retries=1, max_execution_seconds=10)
    execute = await daemon.expect("execute", task_id="a", attempt=1)
    assert execute["max_execution_seconds"] == 10
    await daemon.advance(10.5)  # inside the 1 s grace
    await daemon.quiet("execute", task_id="a")
    await daemon.advance(0.6)
    await daemon.expect("execute", task_id="a", attempt=2)
    late = await daemon.request("result", task_id="a", status="success", attempt=1)
    assert late["code"] == "not_active"
    [retry] = events_of(daemon.storage, "a", "retry_scheduled")
    assert "timed out" in retry["LastErrorObj"]


async def test_late_result_without_attempt_after_timeout_is_not_active(daemon: Wire) -> None:
    await daemon.ack("a", max_retries=0, max_execution_seconds=5)
    await daemon.expect("execute", task_id="a")
    await daemon.advance(6.5)
    dead = await daemon.expect("max_retries_reached", task_id="a")
    assert "timed out" in str(dead["last_error"])
    late = await daemon.request("result", task_id="a", status="success")
    assert late["action"] == "error" and late["code"] == "not_active"
    assert late["task_id"] == "a"
    assert (await daemon.get("a"))["status"] == "dead_lettered"


async def test_timeout_dead_letter_reason_is_retries_exhausted(daemon: Wire) -> None:
    """§4.2: reason is retries_exhausted when the last attempt failed *or timed out*."""
    await daemon.ack("a", max_retries=0, max_execution_seconds=5)
    await daemon.expect("execute", task_id="a")
    await daemon.advance(6.5)
    dead = await daemon.expect("max_retries_reached", task_id="a")
    assert dead["reason"] == "retries_exhausted"


async def test_a_result_in_time_beats_the_timeout(daemon: Wire) -> None:
    await daemon.ack("a", max_retries=0, max_execution_seconds=5)
    await daemon.expect("execute", task_id="a")
    await daemon.advance(4)
    await daemon.result("a")
    await daemon.advance(10)
    await daemon.quiet("max_retries_reached")
    assert events_of(daemon.storage, "a", "succeeded")


async def test_pipelined_enqueues_keep_their_order(one_worker) -> None:
    """§9.2: enqueues read from one stdin are appended in the order they were read."""
    wire = await one_worker()
    ids = [f"p{i:03d}" for i in range(60)]
    await wire.raw(b"".join(
        b'{"action":"enqueue","task_type":"t","task_id":"%s"}\n' % i.encode() for i in ids
    ))  # fmt: skip
    await wire.expect_n("ack", len(ids))
    logged = [r["taskId"] for r in read_log(wire.storage) if r.get("event") == "enqueued"]
    assert logged == ids
    await wire.register("t")
    assert await run_in_order(wire, len(ids)) == ids


async def test_progress_after_a_timeout_is_dropped_silently(daemon: Wire) -> None:
    await daemon.ack("a", max_retries=0, max_execution_seconds=5)
    await daemon.expect("execute", task_id="a")
    await daemon.advance(6.5)
    await daemon.expect("max_retries_reached", task_id="a")
    for i in range(20):
        await daemon.send({"action": "progress", "task_id": "a", "data": i})
    await daemon.quiet("progress")
    assert not daemon.taken("error")
