"""The embedded queue (``snerd.Queue``): handlers in-process, a manual clock, no sleeps."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from embeddedkit import T0, WAIT, MakeQueue, records

import snerd
from snerd import embedded
from snerd.dispatcher.clock import ManualClock
from snerd.dispatcher.executors import Job
from snerd.embedded import Queue
from snerd.errors import DispatchError, ProtocolError
from snerd.eventlog import MemoryStore


async def test_snerd_exports_queue_and_client() -> None:
    from snerd.rpc.client import Client

    assert snerd.Queue is Queue
    assert snerd.Client is Client


async def test_handler_decorator_enqueue_and_join(queue: Queue) -> None:
    seen: list[Job] = []

    @queue.handler("send_email")
    async def send_email(job: Job) -> None:
        seen.append(job)

    async with queue:
        assert await queue.enqueue("e1", "send_email", {"to": "a@b.c"}) == "e1"
        await queue.join(timeout=WAIT)
    [job] = seen
    assert (job.id, job.type, job.data, job.attempt) == ("e1", "send_email", {"to": "a@b.c"}, 1)


async def test_string_data_is_passed_verbatim_when_not_json(make_queue: MakeQueue) -> None:
    queue = await make_queue()
    got: list[Any] = []

    @queue.handler("t")
    async def handle(job: Job) -> None:
        got.append(job.data)

    await queue.enqueue("a", "t", "plain text")
    await queue.enqueue("b", "t", '{"json": true}')
    await queue.join(timeout=WAIT)
    assert got == ["plain text", {"json": True}]


async def test_completion_tombstones_the_task(make_queue: MakeQueue, store: MemoryStore) -> None:
    queue = await make_queue()

    @queue.handler("t")
    async def handle(job: Job) -> None:
        return None

    await queue.enqueue("a", "t")
    await queue.join(timeout=WAIT)
    assert queue.get("a") is None
    [done] = records(store, "a", "succeeded")
    assert done["deletedAt"] is not None


async def test_priority_and_fifo_with_one_worker(make_queue: MakeQueue) -> None:
    queue = await make_queue(max_workers=1)
    order: list[str] = []
    for task_id, urgency in [("a", 0), ("b", 5), ("c", 5), ("d", 1)]:
        await queue.enqueue(task_id, "t", urgency_score=urgency)

    @queue.handler("t")
    async def handle(job: Job) -> None:
        order.append(job.id)

    await queue.join(timeout=WAIT)
    assert order == ["b", "c", "d", "a"]


async def test_progress_from_inside_a_handler(make_queue: MakeQueue, store: MemoryStore) -> None:
    queue = await make_queue()
    updates: list[tuple[str, Any]] = []
    queue.on_progress(lambda task_id, data: updates.append((task_id, data)))

    @queue.handler("t")
    async def handle(job: Job) -> None:
        await job.progress({"pct": 50})
        await embedded.progress({"pct": 100})

    await queue.enqueue("a", "t")
    await queue.join(timeout=WAIT)
    assert updates == [("a", {"pct": 50}), ("a", {"pct": 100})]
    assert [r["data"] for r in records(store, "a", "progress")] == [{"pct": 50}, {"pct": 100}]


async def test_progress_outside_a_handler_is_an_error() -> None:
    with pytest.raises(DispatchError):
        embedded.progress(1)


async def test_failures_retry_with_backoff_on_the_manual_clock(
    make_queue: MakeQueue, clock: ManualClock
) -> None:
    queue = await make_queue()
    attempts: list[int] = []

    @queue.handler("t")
    async def flaky(job: Job) -> None:
        attempts.append(job.attempt)
        if job.attempt < 3:
            raise ConnectionError(f"try {job.attempt}")

    await queue.enqueue("a", "t", max_retries=3, retry_after_hours=1)
    await queue.join(timeout=WAIT)
    assert attempts == [1]
    task = queue.get("a")
    assert task is not None and task["retryCount"] == 1
    assert task["status"] == "scheduled"
    clock.advance(3599)
    await queue.join(timeout=WAIT)
    assert attempts == [1]
    clock.advance(1)
    await queue.join(timeout=WAIT)
    assert attempts == [1, 2]
    clock.advance(3600)
    await queue.join(timeout=WAIT)
    assert attempts == [1, 2, 3]
    assert queue.get("a") is None  # the third attempt succeeded


async def test_exhausted_retries_dead_letter_and_notify(
    make_queue: MakeQueue, store: MemoryStore
) -> None:
    queue = await make_queue()
    dead: list[dict] = []
    queue.on_dead_letter(dead.append)
    runs: list[int] = []

    @queue.handler("t")
    async def broken(job: Job) -> None:
        runs.append(job.attempt)
        raise ValueError("nope")

    await queue.enqueue("a", "t", {"x": 1}, max_retries=2)
    await queue.join(timeout=WAIT)
    assert runs == [1, 2, 3]
    [record] = dead
    assert record["taskId"] == "a" and record["reason"] == "retries_exhausted"
    assert record["retryCount"] == 2
    assert "ValueError: nope" in str(record.get("LastErrorObj") or record.get("LastJobError"))
    view = queue.get("a")
    assert view is not None and view["status"] == "dead_lettered"
    assert records(store, "a", "dead_lettered")


async def test_requeue_purge_and_cancel(make_queue: MakeQueue) -> None:
    queue = await make_queue()
    runs: list[str] = []
    fail = {"a"}

    @queue.handler("t")
    async def handle(job: Job) -> None:
        runs.append(job.id)
        if job.id in fail:
            raise RuntimeError("x")

    await queue.enqueue("a", "t", max_retries=0)
    await queue.join(timeout=WAIT)
    fail.clear()
    await queue.requeue("a")
    await queue.join(timeout=WAIT)
    assert runs == ["a", "a"] and queue.get("a") is None
    with pytest.raises(DispatchError):
        await queue.requeue("a")
    await queue.enqueue("later", "t", execute_at=T0 + 60)
    await queue.cancel("later")
    assert queue.get("later") is None
    with pytest.raises(DispatchError):
        await queue.cancel("nope")
    fail.add("b")
    await queue.enqueue("b", "t", max_retries=0)
    await queue.join(timeout=WAIT)
    await queue.purge("b")
    assert queue.get("b") is None


async def test_dag_fail_through(make_queue: MakeQueue) -> None:
    queue = await make_queue()
    dead: list[dict] = []
    queue.on_dead_letter(dead.append)
    runs: list[str] = []

    @queue.handler("t")
    async def handle(job: Job) -> None:
        runs.append(job.id)
        if job.id == "A":
            raise RuntimeError("parent broke")

    await queue.enqueue("B", "t", trigger_after_ids=["A"])  # A not yet enqueued: absent
    await queue.join(timeout=WAIT)
    assert runs == ["B"]
    await queue.enqueue("A", "t", max_retries=0)
    await queue.enqueue("C", "t", trigger_after_ids=["A"])
    await queue.enqueue("D", "t", trigger_after_ids=["C"])
    await queue.join(timeout=WAIT)
    assert runs == ["B", "A"]
    reasons = {r["taskId"]: r["reason"] for r in dead}
    assert reasons == {"A": "retries_exhausted", "C": "blocked_by_failed_parent",
                       "D": "blocked_by_failed_parent"}  # fmt: skip


async def test_join_waits_until_what_the_attempts_decided_is_out(make_queue: MakeQueue) -> None:
    """``join`` returns once the dead letters' notices are out and the children of a
    dead-lettered parent are failed through, not merely once no attempt runs: at the
    fold of each dead letter the queue still counts as busy. (Python 3.12's ``wait_for``
    looks at once, without the loop turns 3.11's gave: ``join`` returned before the
    cascade's last notice.)"""
    from snerd.projections import events as ev

    queue = await make_queue()
    dead: list[dict[str, Any]] = []
    queue.on_dead_letter(dead.append)
    busy_at_fold: list[bool] = []

    def observe(events: Any, delta: Any) -> None:
        if any(ev.event_name(e) == ev.DEAD_LETTERED for e in events):
            busy_at_fold.append(queue._busy())

    queue.engine.observers.append(observe)

    @queue.handler("t")
    async def broken(job: Job) -> None:
        raise snerd.Fail("no")

    await queue.enqueue("A", "t")
    await queue.enqueue("C", "t", trigger_after_ids=["A"])
    await queue.enqueue("D", "t", trigger_after_ids=["C"])
    await queue.join(timeout=WAIT)
    assert sorted(r["taskId"] for r in dead) == ["A", "C", "D"]
    assert len(busy_at_fold) >= 2 and all(busy_at_fold), busy_at_fold


async def test_dag_linear_chain(make_queue: MakeQueue) -> None:
    queue = await make_queue()
    runs: list[str] = []

    @queue.handler("t")
    async def handle(job: Job) -> None:
        runs.append(job.id)

    await queue.enqueue("A", "t")
    await queue.enqueue("B", "t", trigger_after_ids=["A"], urgency_score=9)
    await queue.enqueue("C", "t", trigger_after_ids=["B"], urgency_score=9)
    await queue.join(timeout=WAIT)
    assert runs == ["A", "B", "C"]


async def test_dedupe_returns_the_live_duplicate(make_queue: MakeQueue) -> None:
    queue = await make_queue()
    assert await queue.enqueue("a", "t", {"k": 1}, auto_dedupe=True) == "a"
    assert await queue.enqueue("b", "t", {"k": 1}, auto_dedupe=True) == "a"
    assert queue.get("b") is None
    assert await queue.enqueue("c", "t", {"k": 2}, auto_dedupe=True) == "c"

    @queue.handler("t")
    async def handle(job: Job) -> None:
        return None

    await queue.join(timeout=WAIT)
    assert await queue.enqueue("d", "t", {"k": 1}, auto_dedupe=True) == "d"


async def test_refusals_raise(make_queue: MakeQueue) -> None:
    queue = await make_queue()
    await queue.enqueue("a", "t")
    with pytest.raises(DispatchError, match="'a'"):
        await queue.enqueue("a", "t")
    with pytest.raises(ProtocolError) as info:
        await queue.enqueue("b", "t", max_retries=-1)
    assert info.value.field == "max_retries"
    with pytest.raises(ProtocolError):
        await queue.enqueue("c", "t", cron="not a cron")


async def test_execute_at_datetime_and_cron_on_the_manual_clock(
    make_queue: MakeQueue, clock: ManualClock
) -> None:
    queue = await make_queue()
    runs: list[tuple[str, float]] = []

    @queue.handler("t")
    async def handle(job: Job) -> None:
        runs.append((job.id, clock.now()))

    at = dt.datetime.fromtimestamp(T0 + 30, tz=dt.UTC)
    await queue.enqueue("once", "t", execute_at=at)
    await queue.enqueue("tick", "t", cron="1m")
    await queue.join(timeout=WAIT)
    assert runs == []
    clock.advance(30)
    await queue.join(timeout=WAIT)
    assert runs == [("once", T0 + 30)]
    clock.advance(30)
    await queue.join(timeout=WAIT)
    clock.advance(60)
    await queue.join(timeout=WAIT)
    assert [r for r in runs if r[0] == "tick"] == [("tick", T0 + 60), ("tick", T0 + 120)]


async def test_timeout_with_the_manual_clock(make_queue: MakeQueue, clock: ManualClock) -> None:
    queue = await make_queue()
    dead: list[dict] = []
    queue.on_dead_letter(dead.append)
    started = asyncio.Event()

    @queue.handler("t")
    async def stuck(job: Job) -> None:
        started.set()
        await asyncio.Event().wait()  # never returns by itself

    await queue.enqueue("a", "t", max_retries=0, max_execution_seconds=10)
    await asyncio.wait_for(started.wait(), WAIT)
    clock.advance(11.5)
    await queue.join(timeout=WAIT)
    [record] = dead
    assert "timed out" in str(record.get("LastErrorObj") or record.get("LastJobError"))


async def test_join_times_out_while_work_is_running(make_queue: MakeQueue) -> None:
    queue = await make_queue()
    release = asyncio.Event()

    @queue.handler("t")
    async def slow(job: Job) -> None:
        await release.wait()

    await queue.enqueue("a", "t")
    with pytest.raises(asyncio.TimeoutError):
        await queue.join(timeout=0.2)
    release.set()
    await queue.join(timeout=WAIT)


async def test_stats(make_queue: MakeQueue) -> None:
    queue = await make_queue()
    await queue.enqueue("a", "t")
    await queue.enqueue("b", "t", execute_at=T0 + 60)
    await queue.enqueue("c", "t", trigger_after_ids=["b"])
    stats = queue.stats()
    assert stats["scheduled"] == 1 and stats["blocked"] == 1
    assert stats["pending"] == 1


async def test_two_queues_on_one_store_run_each_task_once(make_queue: MakeQueue) -> None:
    queues = [await make_queue(max_workers=4) for _ in range(2)]
    runs: list[tuple[int, str]] = []
    for index, queue in enumerate(queues):

        async def handle(job: Job, index: int = index) -> None:
            runs.append((index, job.id))
            await asyncio.sleep(0)

        queue.handler("t")(handle)
    await asyncio.gather(*(queues[i % 2].enqueue(f"t{i}", "t") for i in range(100)))
    for _ in range(3):
        for queue in queues:
            await queue.join(timeout=WAIT)
    assert sorted(task_id for _, task_id in runs) == sorted(f"t{i}" for i in range(100))


async def test_file_storage_survives_a_restart(tmp_path: Path) -> None:
    storage = str(tmp_path / "store")
    async with Queue(storage) as first:
        await first.enqueue("kept", "t", {"v": 1}, urgency_score=2)
        await first.enqueue("dead", "u", max_retries=0)

        @first.handler("u")
        async def fail(job: Job) -> None:
            raise RuntimeError("x")

        await first.join(timeout=WAIT)
    runs: list[Job] = []
    second = Queue(storage)

    @second.handler("t")
    async def handle(job: Job) -> None:
        runs.append(job)

    async with second:
        await second.join(timeout=WAIT)
        view = second.get("dead")
        assert view is not None and view["status"] == "dead_lettered"
    assert [(j.id, j.data) for j in runs] == [("kept", {"v": 1})]


async def test_close_releases_a_running_attempt(tmp_path: Path) -> None:
    storage = str(tmp_path / "store")
    started = asyncio.Event()
    first = Queue(storage)

    @first.handler("t")
    async def stuck(job: Job) -> None:
        started.set()
        await asyncio.Event().wait()

    await first.start()
    await first.enqueue("a", "t")
    await asyncio.wait_for(started.wait(), WAIT)
    await asyncio.wait_for(first.close(timeout=0.1), WAIT)
    runs: list[int] = []
    second = Queue(storage)

    @second.handler("t")
    async def handle(job: Job) -> None:
        runs.append(job.attempt)

    async with second:
        await second.join(timeout=WAIT)
    assert runs == [2]
