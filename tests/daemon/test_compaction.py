"""Compaction inside a running daemon (thresholds lowered through the environment)."""

from __future__ import annotations

import asyncio

from daemonkit import Wire, assert_sound_history, events_of, read_log

COMPACT_SOON = {"SNERD_COMPACT_BYTES": "1", "SNERD_HOUSEKEEPING_SECONDS": "1"}


async def compacted(wire: Wire, timeout: float = 10) -> None:
    """Trigger housekeeping (test clock) until the daemon has archived the old log."""
    archive = wire.storage / "tasks" / "archive"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (archive.is_dir() and any(archive.iterdir())):
        assert loop.time() < deadline, "the daemon did not compact"
        await wire.advance(1)
        await asyncio.sleep(0.02)


async def test_compaction_keeps_live_and_dead_tasks_and_drops_finished_ones(spawn) -> None:
    wire = await spawn(register=("t",), env=COMPACT_SOON)
    for i in range(20):
        await wire.ack(f"done-{i}")
        await wire.expect("execute", task_id=f"done-{i}")
        await wire.result(f"done-{i}")
    await wire.ack("dead", max_retries=0)
    await wire.expect("execute", task_id="dead")
    await wire.result("dead", ok=False, error="x")
    await wire.expect("max_retries_reached", task_id="dead")
    await wire.ack("waiting", "unregistered", task_data={"keep": True})
    await wire.barrier()
    before = len(read_log(wire.storage))
    await compacted(wire)
    await wire.barrier()
    after = read_log(wire.storage)
    assert len(after) < before
    assert not any(r.get("taskId", "").startswith("done-") for r in after)
    assert (await wire.get("waiting"))["taskData"] == '{"keep":true}'
    assert (await wire.get("dead"))["status"] == "dead_lettered"
    await wire.ack("after-compaction")
    await wire.expect("execute", task_id="after-compaction")
    await wire.result("after-compaction")
    await wire.logged("after-compaction", "succeeded")
    assert_sound_history(wire.storage)


async def test_a_dead_parent_survives_compaction_for_late_children(spawn) -> None:
    """Compaction must never turn a failed parent into an absent (= completed) one."""
    wire = await spawn(register=("t",), env=COMPACT_SOON)
    for i in range(10):
        await wire.ack(f"filler-{i}")
        await wire.expect("execute", task_id=f"filler-{i}")
        await wire.result(f"filler-{i}")
    await wire.ack("parent", max_retries=0)
    await wire.expect("execute", task_id="parent")
    await wire.result("parent", ok=False, error="broken")
    await wire.expect("max_retries_reached", task_id="parent")
    await compacted(wire)
    await wire.ack("child", trigger_after_ids=["parent"])
    dead = await wire.expect("max_retries_reached", task_id="child")
    assert dead["reason"] == "blocked_by_failed_parent"
    await wire.quiet("execute", task_id="child")


async def test_a_restart_after_compaction_sees_the_same_queue(spawn, storage) -> None:
    first = await spawn(register=("t",), env=COMPACT_SOON)
    for i in range(10):
        await first.ack(f"f{i}")
        await first.expect("execute", task_id=f"f{i}")
        await first.result(f"f{i}")
    await first.ack("later", "t", execute_at=first.now + 3600)
    await first.ack("blocked", "t", trigger_after_ids=["later"])
    await compacted(first)
    await first.client.close_stdin()
    assert await first.client.wait(timeout=10) == 0
    second = await spawn(register=("t",))
    assert (await second.get("later"))["status"] == "scheduled"
    assert (await second.get("blocked"))["status"] == "blocked"
    await second.advance(3600 + 5)
    await second.expect("execute", task_id="later")
    await second.result("later")
    await second.expect("execute", task_id="blocked")
    assert not events_of(storage, "f0")
    await second.barrier()
    assert_sound_history(storage)  # the restarted daemon linked past the snapshot
