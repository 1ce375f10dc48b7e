"""Rate limits, dedupe and duplicate task ids."""

from __future__ import annotations

from daemonkit import Wire, events_of, read_log


async def test_rate_limit_waits_exactly_until_the_oldest_slot_frees(daemon: Wire) -> None:
    group = {"rate_limit_group": "api", "max_per_minute": 2}
    await daemon.ack("r1", **group)
    await daemon.expect("execute", task_id="r1")
    await daemon.advance(10)
    await daemon.ack("r2", **group)
    await daemon.ack("r3", **group)
    await daemon.ack("r4", **group)
    await daemon.expect("execute", task_id="r2")
    for task_id in ("r1", "r2"):  # finishing does not free a slot: dispatches count
        await daemon.result(task_id)
    await daemon.quiet("execute")
    await daemon.advance(49.9)  # T0+59.9: r1's dispatch is still inside the window
    await daemon.quiet("execute")
    await daemon.advance(0.1)  # T0+60: exactly when r1's slot frees
    await daemon.expect("execute", task_id="r3")
    await daemon.quiet("execute")
    await daemon.advance(9.9)
    await daemon.quiet("execute")
    await daemon.advance(0.1)  # T0+70: r2's slot frees
    await daemon.expect("execute", task_id="r4")


async def test_rate_limit_third_task_runs_after_one_minute(daemon: Wire) -> None:
    group = {"rate_limit_group": "g", "max_per_minute": 2}
    for task_id in ("a", "b", "c"):
        await daemon.ack(task_id, **group)
    await daemon.expect_n("execute", 2)
    await daemon.advance(59.999)
    await daemon.quiet("execute", task_id="c")
    await daemon.advance(0.001)
    await daemon.expect("execute", task_id="c")


async def test_rate_limit_groups_are_independent(daemon: Wire) -> None:
    await daemon.ack("g1", rate_limit_group="one", max_per_minute=1)
    await daemon.ack("g1b", rate_limit_group="one", max_per_minute=1)
    await daemon.ack("g2", rate_limit_group="two", max_per_minute=1)
    await daemon.ack("free")
    got = {(await daemon.expect("execute"))["task_id"] for _ in range(3)}
    assert got == {"g1", "g2", "free"}
    await daemon.quiet("execute", task_id="g1b")


async def test_rate_limited_task_does_not_block_other_work(one_worker) -> None:
    wire = await one_worker(register=("t",))
    await wire.ack("a", rate_limit_group="g", max_per_minute=1, urgency_score=9)
    await wire.expect("execute", task_id="a")
    await wire.result("a")
    await wire.ack("b", rate_limit_group="g", max_per_minute=1, urgency_score=9)
    await wire.ack("plain")
    await wire.expect("execute", task_id="plain")


async def test_rate_limit_claims_record_the_group(daemon: Wire) -> None:
    await daemon.ack("a", rate_limit_group="g", max_per_minute=5)
    await daemon.expect("execute", task_id="a")
    [claim] = events_of(daemon.storage, "a", "claimed")
    assert claim["group"] == "g"


# --- dedupe --------------------------------------------------------------------------


async def test_auto_dedupe_drops_a_duplicate_of_a_live_task(spawn) -> None:
    wire = await spawn()
    first = await wire.enqueue("a", "t", task_data='{"to":"x"}', auto_dedupe=True)
    assert first["action"] == "ack" and "deduplicated" not in first
    dup = await wire.enqueue("b", "t", task_data='{"to":"x"}', auto_dedupe=True)
    assert dup["action"] == "ack" and dup["task_id"] == "b"
    assert dup["deduplicated"] is True and dup["duplicate_of"] == "a"
    # no task was written for b: only the light line that counts the dropped enqueue
    assert [(r["event"], r["duplicateOf"]) for r in events_of(wire.storage, "b")] == [
        ("deduplicated", "a")
    ]
    reply = await wire.request("get", task_id="b")
    assert reply["code"] == "unknown_task"


async def test_dedupe_fingerprint_is_type_and_data_text(spawn) -> None:
    wire = await spawn()
    await wire.ack("a", "t", task_data='{"a":1}', auto_dedupe=True)
    for task_id, task_type, data in [
        ("other-data", "t", '{"a":2}'),
        ("other-type", "u", '{"a":1}'),
        ("other-text", "t", '{"a": 1}'),  # the text differs: a different payload
    ]:
        reply = await wire.enqueue(task_id, task_type, task_data=data, auto_dedupe=True)
        assert "deduplicated" not in reply, reply
    same_object = await wire.enqueue("same", "t", task_data={"a": 1}, auto_dedupe=True)
    assert same_object.get("duplicate_of") == "a"  # an object is stored compact


async def test_without_auto_dedupe_equal_payloads_are_both_kept(spawn) -> None:
    wire = await spawn()
    await wire.ack("a", task_data="same", auto_dedupe=True)
    reply = await wire.enqueue("b", task_data="same")
    assert "deduplicated" not in reply


async def test_fingerprint_frees_when_the_task_completes(daemon: Wire) -> None:
    await daemon.ack("a", task_data="payload", auto_dedupe=True)
    await daemon.expect("execute", task_id="a")
    dup = await daemon.enqueue("b", task_data="payload", auto_dedupe=True)
    assert dup["duplicate_of"] == "a"  # still live while running
    await daemon.result("a")
    await daemon.barrier()
    again = await daemon.enqueue("c", task_data="payload", auto_dedupe=True)
    assert again["action"] == "ack" and "deduplicated" not in again
    await daemon.expect("execute", task_id="c")


async def test_fingerprint_frees_when_the_task_is_dead_lettered(daemon: Wire) -> None:
    await daemon.ack("a", task_data="p", auto_dedupe=True, max_retries=0)
    await daemon.expect("execute", task_id="a")
    await daemon.result("a", ok=False, error="x")
    await daemon.expect("max_retries_reached", task_id="a")
    again = await daemon.enqueue("b", task_data="p", auto_dedupe=True)
    assert "deduplicated" not in again


async def test_dedupe_holds_while_a_retry_waits(daemon: Wire) -> None:
    await daemon.ack("a", task_data="p", auto_dedupe=True, retry_after_hours=1)
    await daemon.expect("execute", task_id="a")
    await daemon.result("a", ok=False, error="x")
    dup = await daemon.enqueue("b", task_data="p", auto_dedupe=True)
    assert dup["duplicate_of"] == "a"


# --- duplicate ids -------------------------------------------------------------------


async def test_duplicate_live_task_id_is_refused_naming_it(spawn) -> None:
    wire = await spawn()
    await wire.ack("job-7")
    reply = await wire.enqueue("job-7", task_data="other")
    assert reply["action"] == "error" and reply["code"] == "duplicate_task"
    assert reply["task_id"] == "job-7" and "job-7" in reply["message"]
    enqueued = [r for r in read_log(wire.storage) if r.get("event") == "enqueued"]
    assert len(enqueued) == 1 and enqueued[0]["taskData"] == "null"


async def test_duplicate_id_of_a_running_task_is_refused(daemon: Wire) -> None:
    await daemon.ack("a")
    await daemon.expect("execute", task_id="a")
    reply = await daemon.enqueue("a")
    assert reply["code"] == "duplicate_task"


async def test_two_pipelined_enqueues_of_one_id_get_one_ack_and_one_error(spawn) -> None:
    wire = await spawn()
    await wire.send({"action": "enqueue", "task_id": "x", "task_type": "t", "request_id": 1})
    await wire.send({"action": "enqueue", "task_id": "x", "task_type": "t", "request_id": 2})
    first = await wire.expect(None, request_id=1)
    second = await wire.expect(None, request_id=2)
    assert first["action"] == "ack"
    assert second["action"] == "error" and second["code"] == "duplicate_task"


async def test_a_rate_limited_task_counts_as_pending(daemon: Wire) -> None:
    await daemon.ack("a", rate_limit_group="g", max_per_minute=1)
    await daemon.expect("execute", task_id="a")
    await daemon.ack("b", rate_limit_group="g", max_per_minute=1)
    stats = await daemon.stats()
    assert stats["pending"] == 1 and stats["scheduled"] == 0
    assert (await daemon.get("b"))["status"] == "pending"


async def test_each_task_is_limited_by_its_own_max_per_minute(daemon: Wire) -> None:
    """§3.1.1: a task runs only while fewer than *its own* limit dispatches happened."""
    await daemon.ack("strict-1", rate_limit_group="g", max_per_minute=1)
    await daemon.expect("execute", task_id="strict-1")
    await daemon.ack("strict-2", rate_limit_group="g", max_per_minute=1)
    await daemon.ack("loose", rate_limit_group="g", max_per_minute=3)
    await daemon.expect("execute", task_id="loose", timeout=3)  # 1 dispatch < its 3
    await daemon.quiet("execute", task_id="strict-2")
    await daemon.advance(59.9)
    await daemon.quiet("execute", task_id="strict-2")
    await daemon.advance(0.1)  # T0+60: the newest dispatch in the window is 60 s old
    await daemon.expect("execute", task_id="strict-2")


async def test_pools_bound_their_own_attempts(spawn) -> None:
    wire = await spawn(register=("t",), env={"SNERD_POOLS": "slow=1"})
    await wire.ack("slow-1", pool="slow")
    await wire.ack("slow-2", pool="slow")
    await wire.ack("fast", pool="fast")
    await wire.ack("plain")
    got = {(await wire.expect("execute"))["task_id"] for _ in range(3)}
    assert got == {"slow-1", "fast", "plain"}
    await wire.quiet("execute", task_id="slow-2")
    await wire.result("slow-1")
    await wire.expect("execute", task_id="slow-2")
