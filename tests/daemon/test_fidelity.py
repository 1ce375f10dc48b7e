"""Drop-in fidelity with SnerdMQ (issue 9): what its SDKs and tools read from us."""

from __future__ import annotations

import asyncio

import pytest
from daemonkit import WAIT, Wire


async def test_stats_reply_has_snerdmqs_top_level_keys(daemon: Wire) -> None:
    """The Node SDK sends a bare ``{"action":"stats"}`` and reads these keys at the top."""
    await daemon.ack("ok-1", "t")
    await daemon.expect("execute", task_id="ok-1")
    await daemon.result("ok-1")
    await daemon.ack("bad-1", "t", max_retries=0)
    await daemon.expect("execute", task_id="bad-1")
    await daemon.result("bad-1", ok=False, error="boom")
    await daemon.logged("bad-1", "dead_lettered")
    await daemon.ack("waiting", "nobody")
    await daemon.advance(30)
    await daemon.send({"action": "stats"})
    reply = await daemon.expect("stats")
    assert reply["total_enqueued"] == 3
    assert reply["total_executed"] == 1
    assert reply["total_failed"] == 1
    assert reply["total_dlq"] == 1
    assert reply["queue_depth"] == 1
    assert reply["uptime_secs"] >= 30
    assert reply["per_shard"] == [
        {"shard": 0, "total_enqueued": 3, "total_executed": 1, "total_failed": 1,
         "total_dlq": 1, "queue_depth": 1}
    ]  # fmt: skip
    assert reply["stats"]["pending"] == 1  # ours stay, nested as before


async def _stderr_says(wire: Wire, text: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not any(text in line for line in wire.client.stderr_tail):
        assert loop.time() < deadline, list(wire.client.stderr_tail)
        await asyncio.sleep(0.01)


@pytest.mark.process
async def test_ack_and_stderr_name_unknown_parents(daemon: Wire) -> None:
    """Seed 003: a mistyped parent id makes a child run at once; the caller is told."""
    await daemon.ack("real", "nobody")
    await daemon.ack("dead", "t", max_retries=0)
    await daemon.expect("execute", task_id="dead")
    await daemon.result("dead", ok=False, error="x")
    await daemon.expect("max_retries_reached", task_id="dead")
    ack = await daemon.ack("child", "t", trigger_after_ids=["real", "dead", "mistyped"])
    assert ack["unknown_parents"] == ["mistyped"]
    await _stderr_says(daemon, "mistyped")
    ok = await daemon.ack("other", "nobody", trigger_after_ids=["real"])
    assert "unknown_parents" not in ok
    [line] = await daemon.logged("child", "dead_lettered")  # failed through from "dead"
    assert line["unknownParents"] == ["mistyped"]  # recorded, so every reader can show it
    assert (await daemon.get("child"))["unknownParents"] == ["mistyped"]


async def test_schedules_and_timeouts_are_stored_as_snerdmq_reads_them(daemon: Wire) -> None:
    """SnerdMQ's reader takes six-field cron (seconds first) and whole-second timeouts."""
    await daemon.ack("daily", "nobody", cron="13 4 * * 1-5")
    await daemon.ack("often", "nobody", cron="30s")
    await daemon.ack("odd", "nobody", cron="7m")
    await daemon.ack("quick", "nobody", max_execution_seconds=2.5)
    lines = {t: (await daemon.logged(t, "enqueued"))[0] for t in ("daily", "often", "odd", "quick")}
    assert lines["daily"]["cronExpression"] == "0 13 4 * * MON-FRI"
    assert lines["daily"]["cronText"] == "13 4 * * 1-5"
    assert lines["often"]["cronExpression"] == "*/30 * * * * *"
    assert lines["odd"]["cronExpression"] == "7m" and "cronText" not in lines["odd"]
    assert lines["quick"]["maxExecutionSeconds"] == 3  # an integer, rounded up
    assert lines["quick"]["maxExecutionSecondsExact"] == 2.5
    assert (await daemon.get("quick"))["maxExecutionSecondsExact"] == 2.5
