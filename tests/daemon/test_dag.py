"""DAGs (seed 003): trigger_after_ids blocks a task until its parents complete."""

from __future__ import annotations

from daemonkit import Wire, events_of


async def complete(wire: Wire, task_id: str) -> None:
    await wire.expect("execute", task_id=task_id)
    await wire.result(task_id)


async def fail_for_good(wire: Wire, task_id: str) -> dict:
    await wire.expect("execute", task_id=task_id)
    await wire.result(task_id, ok=False, error="parent broke")
    return await wire.expect("max_retries_reached", task_id=task_id)


async def test_linear_chain_runs_in_order(daemon: Wire) -> None:
    await daemon.ack("A")
    await daemon.ack("B", trigger_after_ids=["A"])
    await daemon.ack("C", trigger_after_ids=["B"])
    assert (await daemon.get("B"))["status"] == "blocked"
    await daemon.expect("execute", task_id="A")
    await daemon.quiet("execute")
    await daemon.result("A")
    await daemon.expect("execute", task_id="B")
    await daemon.quiet("execute", task_id="C")
    await daemon.result("B")
    await complete(daemon, "C")
    assert (await daemon.stats())["blocked"] == 0


async def test_child_waits_while_its_parent_runs(daemon: Wire) -> None:
    await daemon.ack("A")
    await daemon.expect("execute", task_id="A")
    await daemon.ack("B", trigger_after_ids=["A"])
    await daemon.quiet("execute", task_id="B")
    await daemon.result("A")
    await daemon.expect("execute", task_id="B")


async def test_fan_in_waits_for_every_parent(daemon: Wire) -> None:
    await daemon.ack("fetch_a")
    await daemon.ack("fetch_b")
    await daemon.ack("aggregate", trigger_after_ids=["fetch_a", "fetch_b"])
    await daemon.expect("execute", task_id="fetch_a")
    await daemon.expect("execute", task_id="fetch_b")
    await daemon.result("fetch_a")
    await daemon.quiet("execute", task_id="aggregate")
    assert (await daemon.get("aggregate"))["status"] == "blocked"
    await daemon.result("fetch_b")
    await daemon.expect("execute", task_id="aggregate")


async def test_child_stays_blocked_while_the_parent_retries(daemon: Wire) -> None:
    await daemon.ack("A", max_retries=1, retry_after_hours=1)
    await daemon.ack("B", trigger_after_ids=["A"])
    await daemon.expect("execute", task_id="A")
    await daemon.result("A", ok=False, error="once")
    await daemon.quiet("execute", task_id="B")
    assert (await daemon.get("B"))["status"] == "blocked"
    await daemon.advance(3600)
    await complete(daemon, "A")
    await daemon.expect("execute", task_id="B")


async def test_fail_through_dead_letters_children_and_grandchildren_at_once(
    daemon: Wire,
) -> None:
    await daemon.ack("A", max_retries=0)
    await daemon.ack("B", trigger_after_ids=["A"], max_retries=5)
    await daemon.ack("C", trigger_after_ids=["B"], max_retries=5)
    await daemon.ack("D", trigger_after_ids=["B", "other"])
    await daemon.ack("sibling", "unregistered", trigger_after_ids=[])
    await fail_for_good(daemon, "A")
    for task_id in ("B", "C", "D"):
        dead = await daemon.expect("max_retries_reached", task_id=task_id)
        assert dead["reason"] == "blocked_by_failed_parent"
        assert dead["retry_count"] == 0
        task = await daemon.get(task_id)
        assert task["status"] == "dead_lettered"
        assert task["reason"] == "blocked_by_failed_parent"
        [record] = events_of(daemon.storage, task_id, "dead_lettered")
        assert record["reason"] == "blocked_by_failed_parent"
    await daemon.quiet("execute")
    assert not daemon.taken("max_retries_reached")  # exactly one notice each
    assert (await daemon.get("sibling"))["status"] == "pending"


async def test_child_of_an_already_dead_parent_fails_at_once(daemon: Wire) -> None:
    await daemon.ack("A", max_retries=0)
    await fail_for_good(daemon, "A")
    await daemon.ack("late-child", trigger_after_ids=["A"])
    dead = await daemon.expect("max_retries_reached", task_id="late-child")
    assert dead["reason"] == "blocked_by_failed_parent"
    await daemon.quiet("execute", task_id="late-child")


async def test_absent_parent_counts_as_completed(daemon: Wire) -> None:
    await daemon.ack("orphan", trigger_after_ids=["never-enqueued"])
    await daemon.expect("execute", task_id="orphan")


async def test_completed_parent_counts_as_completed(daemon: Wire) -> None:
    await daemon.ack("A")
    await complete(daemon, "A")
    await daemon.barrier()
    await daemon.ack("B", trigger_after_ids=["A"])
    await daemon.expect("execute", task_id="B")


async def test_cancelled_parent_fails_its_children(daemon: Wire) -> None:
    await daemon.ack("A", "unregistered")
    await daemon.ack("B", trigger_after_ids=["A"])
    await daemon.request("cancel", task_id="A")
    dead = await daemon.expect("max_retries_reached", task_id="B")
    assert dead["reason"] == "blocked_by_failed_parent"


async def test_requeued_parent_does_not_revive_failed_children(daemon: Wire) -> None:
    await daemon.ack("A", max_retries=0)
    await daemon.ack("B", trigger_after_ids=["A"])
    await fail_for_good(daemon, "A")
    await daemon.expect("max_retries_reached", task_id="B")
    await daemon.request("requeue", task_id="A")
    await complete(daemon, "A")
    await daemon.quiet("execute", task_id="B")
    assert (await daemon.get("B"))["status"] == "dead_lettered"


async def test_a_cycle_is_refused(daemon: Wire) -> None:
    await daemon.ack("x", "unregistered", trigger_after_ids=["y"])
    reply = await daemon.enqueue("y", "unregistered", trigger_after_ids=["x"])
    assert reply["action"] == "error" and reply["code"] == "invalid_field"
    assert reply["task_id"] == "y"


async def test_duplicate_parents_are_collapsed(daemon: Wire) -> None:
    await daemon.ack("A", "unregistered")
    await daemon.ack("B", trigger_after_ids=["A", "A", "A"])
    [record] = events_of(daemon.storage, "B", "enqueued")
    assert record["triggerAfterIds"] == ["A"]
