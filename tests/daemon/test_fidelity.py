"""Drop-in fidelity with SnerdMQ (issue 9): what its SDKs and tools read from us."""

from __future__ import annotations

from daemonkit import Wire


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
