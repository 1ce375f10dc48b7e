"""Several daemons on one storage: exactly-once attempts, crash recovery, shared limits."""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

import pytest
from daemonkit import assert_sound_history, compacting_workload, events_of, read_log

# Each daemon is its own process here: what is shared is only the storage and its locks.
pytestmark = pytest.mark.process

FAST_HOUSEKEEPING = {"SNERD_HOUSEKEEPING_SECONDS": "0.05"}


async def wait_until(condition, timeout: float, what: str, step: float = 0.005) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(step)


async def test_three_daemons_execute_every_task_exactly_once(spawn) -> None:
    wires = [await spawn(clock=False) for _ in range(3)]
    executed: list[tuple[int, str, int]] = []

    def handler_for(index: int):
        async def handle(task_id: str, data: Any) -> None:
            executed.append((index, task_id, data["n"]))
            await asyncio.sleep(0.002)  # a little work, so the daemons overlap

        return handle

    for index, wire in enumerate(wires):
        wire.client.register("t", handler_for(index))
    n = 300
    acks = await asyncio.wait_for(
        asyncio.gather(*(
            wires[i % 3].client.enqueue(f"task-{i}", "t", {"n": i}) for i in range(n)
        )),
        60,
    )  # fmt: skip
    assert all(a["action"] == "ack" for a in acks)
    await wait_until(lambda: len(executed) >= n, 60, f"{n} executions")
    for wire in wires:
        await wire.barrier()
    per_task = collections.Counter(task_id for _, task_id, _ in executed)
    assert len(per_task) == n
    assert max(per_task.values()) == 1, [t for t, c in per_task.items() if c > 1]
    per_daemon = collections.Counter(index for index, _, _ in executed)
    assert len(per_daemon) > 1, per_daemon
    records = read_log(wires[0].storage)
    claims = collections.Counter(r["task"] for r in records if r.get("event") == "claimed")
    assert set(claims.values()) == {1}
    await wait_until(
        lambda: sum(r.get("event") == "succeeded" for r in read_log(wires[0].storage)) == n,
        20, "every success in the log",
    )  # fmt: skip


async def test_tasks_enqueued_by_one_daemon_are_shared_with_the_others(spawn) -> None:
    producer = await spawn(clock=False)  # registers nothing: it only enqueues
    workers = [await spawn(clock=False) for _ in range(2)]
    executed: list[tuple[int, str]] = []

    for index, wire in enumerate(workers):

        async def handle(task_id: str, data: Any, index: int = index) -> None:
            executed.append((index, task_id))
            await asyncio.sleep(0.005)

        wire.client.register("t", handle)
    n = 100
    await asyncio.gather(*(producer.client.enqueue(f"p{i}", "t") for i in range(n)))
    await wait_until(lambda: len(executed) >= n, 60, f"{n} executions")
    assert sorted(t for _, t in executed) == sorted(f"p{i}" for i in range(n))
    claims = collections.Counter(
        r["task"] for r in read_log(producer.storage) if r.get("event") == "claimed"
    )  # each task claimed once: no second execute can be on its way
    assert set(claims.values()) == {1} and len(claims) == n
    assert len({index for index, _ in executed}) == 2


async def test_kill_9_with_an_unanswered_execute_is_recovered_by_another_daemon(
    spawn, storage
) -> None:
    doomed = await spawn(clock=False, register=("t",), env=FAST_HOUSEKEEPING)
    await doomed.ack("held", max_retries=0)
    await doomed.expect("execute", task_id="held", attempt=1)
    survivor = await spawn(clock=False, register=("t",), env=FAST_HOUSEKEEPING)
    await survivor.quiet("execute", task_id="held")  # still claimed by a live daemon
    await doomed.kill()
    started = time.monotonic()
    execute = await survivor.expect("execute", task_id="held", timeout=10)
    assert time.monotonic() - started < 5
    assert execute["attempt"] == 2
    released = events_of(storage, "held", "claim_released")
    assert [r["reason"] for r in released] == ["owner_died"]
    await survivor.result("held")
    await survivor.logged("held", "succeeded")
    assert not events_of(storage, "held", "dead_lettered")  # a crash is not a failure
    assert_sound_history(storage)


async def test_every_acked_enqueue_survives_kill_9(spawn, storage) -> None:
    victim = await spawn(clock=False)
    acked: list[str] = []
    n = 400

    async def enqueue(i: int) -> None:
        reply = await victim.client.enqueue(f"k{i}", "t", {"i": i})
        acked.append(reply["task_id"])

    jobs = [asyncio.create_task(enqueue(i)) for i in range(n)]
    await wait_until(lambda: len(acked) >= n // 4, 30, "some acks")
    await victim.kill()
    survived = list(acked)  # everything acked before the kill
    await asyncio.gather(*jobs, return_exceptions=True)
    assert survived
    executed: set[str] = set()
    heir = await spawn(clock=False)

    async def handle(task_id: str, data: Any) -> None:
        executed.add(task_id)

    heir.client.register("t", handle)
    await wait_until(lambda: set(survived) <= executed, 30, "every acked task to run")
    assert set(survived) <= {r["taskId"] for r in read_log(storage) if r.get("event") == "enqueued"}
    assert_sound_history(storage, torn_tail=True)  # a killed writer may tear its last line


async def test_rate_limit_is_shared_across_daemons(spawn) -> None:
    first = await spawn(register=("t",))
    second = await spawn()
    group = {"rate_limit_group": "shared", "max_per_minute": 2}
    await first.ack("a", **group)
    await first.ack("b", **group)
    await first.expect_n("execute", 2)
    await second.register("t")
    await second.ack("c", **group)
    await second.quiet("execute", task_id="c")
    await first.quiet("execute", task_id="c")
    await second.advance(59.5)
    await second.quiet("execute", task_id="c")
    await second.advance(0.5)
    await second.expect("execute", task_id="c")


async def test_a_result_sent_to_another_daemon_is_not_active(spawn) -> None:
    owner = await spawn(register=("t",))
    other = await spawn()
    await owner.ack("a")
    await owner.expect("execute", task_id="a")
    await other.barrier()
    reply = await other.request("result", task_id="a", status="success")
    assert reply["code"] == "not_active"
    await owner.result("a")
    await owner.logged("a", "succeeded")


async def test_max_retries_reached_goes_only_to_the_daemon_that_ran_it(spawn) -> None:
    runner = await spawn(register=("t",))
    bystander = await spawn()
    await bystander.ack("a", max_retries=0)
    await runner.expect("execute", task_id="a")
    await runner.result("a", ok=False, error="x")
    await runner.expect("max_retries_reached", task_id="a")
    await bystander.quiet("max_retries_reached")


async def test_a_live_owner_keeps_its_claim_past_the_lease(spawn, storage) -> None:
    """§7/§10: the lease is the fallback for when liveness cannot be told; a daemon whose
    liveness lock shows it alive keeps its claim, so a long handler is not run twice."""
    env = {"SNERD_LEASE_SECONDS": "10", "SNERD_HOUSEKEEPING_SECONDS": "1"}
    owner = await spawn(register=("t",), env=env)
    await owner.ack("long")
    await owner.expect("execute", task_id="long")
    other = await spawn(register=("t",), env=env)
    await other.barrier()
    for _ in range(3):  # well past the lease, housekeeping runs on the other daemon
        await other.advance(10)
    await other.quiet("execute", task_id="long")
    assert not events_of(storage, "long", "claim_released")
    await owner.result("long")
    await owner.logged("long", "succeeded")


async def test_dedupe_and_duplicate_ids_hold_across_daemons(spawn) -> None:
    first = await spawn()
    second = await spawn()
    await first.ack("d1", task_data="same", auto_dedupe=True)
    dup = await second.enqueue("d2", task_data="same", auto_dedupe=True)
    assert dup.get("duplicate_of") == "d1"
    clash = await second.enqueue("d1", task_data="other")
    assert clash["code"] == "duplicate_task"


async def test_a_daemon_started_after_a_crash_releases_the_dead_claim(spawn, storage) -> None:
    crashed = await spawn(clock=False, register=("t",))
    await crashed.ack("orphaned")
    await crashed.expect("execute", task_id="orphaned")
    await crashed.kill()
    heir = await spawn(clock=False, register=("t",), env=FAST_HOUSEKEEPING)
    execute = await heir.expect("execute", task_id="orphaned", timeout=10)
    assert execute["attempt"] == 2
    assert [r["reason"] for r in events_of(storage, "orphaned", "claim_released")] == ["owner_died"]


async def test_fail_through_across_daemons(spawn) -> None:
    runner = await spawn(register=("parent",))
    other = await spawn(register=("child",))
    await other.ack("P", "parent", max_retries=0)
    await other.ack("C", "child", trigger_after_ids=["P"])
    await runner.expect("execute", task_id="P")
    await runner.result("P", ok=False, error="x")
    await runner.expect("max_retries_reached", task_id="P")
    dead = await runner.expect("max_retries_reached", task_id="C")  # the writer tells
    assert dead["reason"] == "blocked_by_failed_parent"
    await other.quiet("execute", task_id="C")
    assert (await other.get("C"))["status"] == "dead_lettered"


async def test_daemons_compacting_often_leave_a_log_replay_verify_finds_sound(
    spawn, storage
) -> None:
    """Three daemons, each compacting whenever the log passes 4 KB: every one appends
    after compactions made by the others (a snapshot with no tail included), and the
    whole history still verifies: checksum chain and audit alike."""
    from snerd.eventlog.history import history_files

    env = {**FAST_HOUSEKEEPING, "SNERD_COMPACT_BYTES": "4096"}
    wires = [await spawn(clock=False, env=env) for _ in range(3)]
    await compacting_workload(wires, lambda: len(history_files(storage)))
    assert len(history_files(storage)) >= 3, "the daemons did not compact"
    assert_sound_history(storage)  # each daemon linked past the others' snapshots
