"""execute_at and cron over stdio, driven by the daemon's test clock (T0 = 22:13:20Z)."""

from __future__ import annotations

import pytest
from daemonkit import T0, Wire, events_of, iso

# --- execute_at ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "execute_at",
    [
        "2023-11-14T22:18:20Z",
        "2023-11-14T22:18:20.000Z",
        "2023-11-14T23:18:20+01:00",
        "2023-11-14T22:18:20",  # no offset: UTC (what the Python SDK sends)
        T0 + 300,  # epoch seconds
    ],
)
async def test_execute_at_waits_until_the_clock_passes_it(daemon: Wire, execute_at) -> None:
    await daemon.ack("a", execute_at=execute_at)
    await daemon.quiet("execute")
    assert (await daemon.get("a"))["status"] == "scheduled"
    await daemon.advance(299.5)
    await daemon.quiet("execute")
    await daemon.advance(0.5)
    await daemon.expect("execute", task_id="a")


async def test_execute_at_in_the_past_is_due_now(daemon: Wire) -> None:
    await daemon.ack("a", execute_at="2020-01-01T00:00:00Z")
    await daemon.expect("execute", task_id="a")


async def test_execute_at_is_logged_as_rfc3339(daemon: Wire) -> None:
    await daemon.ack("a", execute_at=T0 + 90)
    [record] = events_of(daemon.storage, "a", "enqueued")
    assert record["executeAt"] == iso(T0 + 90) == "2023-11-14T22:14:50.000Z"


async def test_tasks_due_together_run_by_urgency_then_enqueue_order(one_worker) -> None:
    wire = await one_worker(register=("t",))
    await wire.ack("late", execute_at=T0 + 20)
    await wire.ack("early", execute_at=T0 + 10)
    await wire.ack("urgent-latest", execute_at=T0 + 25, urgency_score=1)
    await wire.advance(30)
    order = []
    for _ in range(3):
        execute = await wire.expect("execute")
        order.append(execute["task_id"])
        await wire.result(execute["task_id"])
    assert order == ["urgent-latest", "late", "early"]


# --- cron ---------------------------------------------------------------------------


async def run_occurrence(wire: Wire, task_id: str, wait: float, ok: bool = True) -> dict:
    """Advance to ``wait`` s from now, check nothing ran just before, answer the run."""
    await wire.advance(wait - 0.5)
    await wire.quiet("execute", task_id=task_id)
    await wire.advance(0.5)
    execute = await wire.expect("execute", task_id=task_id)
    await wire.result(task_id, ok=ok, error=None if ok else "occurrence failed")
    await wire.barrier()
    return execute


async def test_five_field_cron_runs_and_reschedules_after_success(daemon: Wire) -> None:
    await daemon.ack("c", cron="*/5 * * * *")  # next fires: 22:15:00, 22:20:00, ...
    await daemon.quiet("execute")
    assert (await daemon.get("c"))["executeAt"] == "2023-11-14T22:15:00.000Z"
    await run_occurrence(daemon, "c", 100)
    task = await daemon.get("c")
    assert task["executeAt"] == "2023-11-14T22:20:00.000Z"
    assert task["status"] == "scheduled"
    await run_occurrence(daemon, "c", 300)
    assert (await daemon.get("c"))["executeAt"] == "2023-11-14T22:25:00.000Z"
    assert events_of(daemon.storage, "c", "rescheduled")


async def test_six_field_cron_has_seconds_first(daemon: Wire) -> None:
    await daemon.ack("c", cron="30 * * * * *")  # second 30 of every minute
    assert (await daemon.get("c"))["executeAt"] == "2023-11-14T22:13:30.000Z"
    await run_occurrence(daemon, "c", 10)
    assert (await daemon.get("c"))["executeAt"] == "2023-11-14T22:14:30.000Z"
    await run_occurrence(daemon, "c", 60)


@pytest.mark.parametrize(("shorthand", "seconds"), [("30s", 30), ("10m", 600), ("2h", 7200)])
async def test_shorthand_cron_keeps_its_phase(daemon: Wire, shorthand: str, seconds: int) -> None:
    await daemon.ack("c", cron=shorthand)
    assert (await daemon.get("c"))["executeAt"] == iso(T0 + seconds)
    await daemon.advance(seconds)
    await daemon.expect("execute", task_id="c")
    await daemon.advance(seconds / 3)  # finishing late does not shift the phase
    await daemon.result("c")
    await daemon.barrier()
    assert (await daemon.get("c"))["executeAt"] == iso(T0 + 2 * seconds)
    await run_occurrence(daemon, "c", seconds - seconds / 3)


async def test_alias_cron(daemon: Wire) -> None:
    await daemon.ack("c", cron="@hourly")
    assert (await daemon.get("c"))["executeAt"] == "2023-11-14T23:00:00.000Z"


async def test_cron_with_execute_at_starts_at_execute_at(daemon: Wire) -> None:
    await daemon.ack("c", cron="10m", execute_at=T0 + 5)
    await run_occurrence(daemon, "c", 5)
    assert (await daemon.get("c"))["executeAt"] == iso(T0 + 605)


async def test_cron_occurrence_that_exhausts_retries_is_dead_lettered_and_schedule_goes_on(
    daemon: Wire,
) -> None:
    await daemon.ack("c", cron="10m", max_retries=1)
    await daemon.advance(600)
    await daemon.expect("execute", task_id="c")
    await daemon.result("c", ok=False, error="first")
    await daemon.expect("execute", task_id="c")  # the retry (no backoff)
    await daemon.result("c", ok=False, error="second")
    dead = await daemon.expect("max_retries_reached", task_id="c")
    assert dead["reason"] == "retries_exhausted"
    assert dead["retry_count"] == 1
    task = await daemon.get("c")
    assert task["status"] == "scheduled"
    assert task["executeAt"] == iso(T0 + 1200)
    assert task["retryCount"] == 0  # a fresh retry count for the next occurrence
    await run_occurrence(daemon, "c", 600)
    assert (await daemon.get("c"))["executeAt"] == iso(T0 + 1800)
    [record] = events_of(daemon.storage, "c", "dead_lettered")
    assert record["dlqKey"].startswith("c@")


async def test_cron_failure_retries_with_backoff_inside_the_occurrence(daemon: Wire) -> None:
    await daemon.ack("c", cron="1h", max_retries=2, retry_after_hours=0.25)
    await daemon.advance(3600)
    await daemon.expect("execute", task_id="c")
    await daemon.result("c", ok=False, error="x")
    await daemon.advance(899)
    await daemon.quiet("execute", task_id="c")
    await daemon.advance(1)
    await daemon.expect("execute", task_id="c")
    await daemon.result("c")
    await daemon.barrier()
    assert (await daemon.get("c"))["executeAt"] == iso(T0 + 7200)


async def test_missed_cron_fires_are_skipped_not_replayed(daemon: Wire) -> None:
    await daemon.ack("c", cron="1m")
    await daemon.advance(60 * 10 + 5)  # ten fires missed while nothing ran
    await daemon.expect("execute", task_id="c")
    await daemon.result("c")
    await daemon.quiet("execute", task_id="c")
    assert (await daemon.get("c"))["executeAt"] == iso(T0 + 660)


async def test_cancel_stops_a_cron_schedule(daemon: Wire) -> None:
    await daemon.ack("c", cron="30s")
    reply = await daemon.request("cancel", task_id="c")
    assert reply["action"] == "ok"
    await daemon.advance(120)
    await daemon.quiet("execute", task_id="c")


async def test_requeue_of_a_dead_cron_occurrence_is_a_one_off_task(daemon: Wire) -> None:
    await daemon.ack("c", cron="10m", max_retries=0)
    await daemon.advance(600)
    await daemon.expect("execute", task_id="c")
    await daemon.result("c", ok=False, error="x")
    await daemon.expect("max_retries_reached", task_id="c")
    key = f"c@{iso(T0 + 600)}"
    assert (await daemon.get(key))["status"] == "dead_lettered"
    reply = await daemon.request("requeue", task_id=key)
    assert reply["action"] == "ok", reply
    execute = await daemon.expect("execute", task_id=key)
    await daemon.result(key)
    await daemon.logged(key, "succeeded")
    assert execute["task_type"] == "t"
    assert (await daemon.get("c"))["executeAt"] == iso(T0 + 1200)  # the schedule is untouched
