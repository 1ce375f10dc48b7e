"""Results (issue 11.2): a handler's return value is recorded with its success, and
``await queue.result(id)`` hands it over once durable; ended tasks are read back from
the stored history (``queue.lookup``). In-process, on a memory log and a manual clock."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from typing import Any

import pytest
from embeddedkit import WAIT, MakeQueue, records

from snerd.dispatcher.clock import ManualClock
from snerd.dispatcher.executors import Job
from snerd.embedded import Queue
from snerd.errors import TaskCancelledError, TaskDeadLetteredError, UnknownTaskError
from snerd.eventlog import MemoryLog, MemoryStore
from snerd.projections.commands import MAX_RESULT_BYTES


async def registered(queue: Queue, task_id: str) -> None:
    """Until a result waiter for ``task_id`` is registered (event-loop steps, no sleep)."""
    while task_id not in queue._results._waiting:
        await asyncio.sleep(0)


@dataclasses.dataclass
class Point:
    x: int
    y: int


async def test_a_return_value_is_recorded_and_handed_to_a_waiter(
    make_queue: MakeQueue, store: MemoryStore
) -> None:
    queue = await make_queue()

    gate = asyncio.Event()

    @queue.handler("add")
    async def add(job: Job) -> dict[str, Any]:
        await gate.wait()
        return {"sum": job.data["a"] + job.data["b"], "pair": (1, 2)}

    await queue.enqueue("a", "add", {"a": 2, "b": 3})
    waiting = asyncio.ensure_future(queue.result("a", timeout=WAIT))
    await asyncio.wait_for(registered(queue, "a"), WAIT)
    gate.set()
    assert await waiting == {"sum": 5, "pair": [1, 2]}  # as JSON holds it
    [done] = records(store, "a", "succeeded")
    assert done["result"] == {"sum": 5, "pair": [1, 2]}


async def test_a_result_asked_for_after_the_end_is_read_from_the_history(
    make_queue: MakeQueue, store: MemoryStore
) -> None:
    queue = await make_queue()

    @queue.handler("t")
    def sync_handler(job: Job) -> Point:  # a plain def, run in a thread
        return Point(job.attempt, 7)

    await queue.enqueue("a", "t")
    await queue.join(timeout=WAIT)
    assert queue.get("a") is None  # the live state forgot it
    assert await queue.result("a", timeout=WAIT) == {"x": 1, "y": 7}
    await queue.engine.compact()  # the success goes to the archive
    assert not records(store, "a")
    assert await queue.result("a", timeout=WAIT) == {"x": 1, "y": 7}


async def test_no_return_value_records_no_result_field(
    make_queue: MakeQueue, store: MemoryStore
) -> None:
    queue = await make_queue()

    @queue.handler("t")
    async def handle(job: Job) -> None:
        return None

    await queue.enqueue("a", "t")
    assert await queue.result("a", timeout=WAIT) is None
    [done] = records(store, "a", "succeeded")
    assert "result" not in done


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({1, 2}, "not JSON-serializable"),
        ("x" * (MAX_RESULT_BYTES + 1), f"more than MAX_RESULT_BYTES ({MAX_RESULT_BYTES})"),
    ],
)
async def test_a_result_that_cannot_be_recorded_fails_the_attempt(
    make_queue: MakeQueue, store: MemoryStore, value: Any, says: str
) -> None:
    queue = await make_queue()

    @queue.handler("t")
    async def handle(job: Job) -> Any:
        return value

    await queue.enqueue("a", "t", max_retries=0)
    with pytest.raises(TaskDeadLetteredError, match=re.escape(says)) as caught:
        await queue.result("a", timeout=WAIT)
    assert caught.value.state == "dead_lettered" and caught.value.task_id == "a"
    [dead] = records(store, "a", "dead_lettered")
    assert says in str(dead["LastJobError"])
    assert not records(store, "a", "succeeded")


async def test_the_largest_result_allowed_is_recorded(make_queue: MakeQueue) -> None:
    queue = await make_queue()
    value = "x" * (MAX_RESULT_BYTES - 2)  # plus two quotes: exactly the bound

    @queue.handler("t")
    async def handle(job: Job) -> str:
        return value

    await queue.enqueue("a", "t", max_retries=0)
    assert await queue.result("a", timeout=WAIT) == value


async def test_a_waiter_sees_retries_through_to_the_success(
    make_queue: MakeQueue, clock: ManualClock
) -> None:
    queue = await make_queue()

    @queue.handler("t")
    async def flaky(job: Job) -> int:
        if job.attempt == 1:
            raise ConnectionError("first try")
        return job.attempt

    await queue.enqueue("a", "t", retry_after_hours=1)
    waiting = asyncio.ensure_future(queue.result("a"))
    await queue.join(timeout=WAIT)
    assert not waiting.done()
    clock.advance(3600)
    assert await asyncio.wait_for(waiting, WAIT) == 2
    view = await queue.lookup("a")
    assert view is not None and view["status"] == "completed" and view["result"] == 2
    assert [a["outcome"] for a in view["attempts"]] == ["retry_scheduled", "succeeded"]
    assert view["attempts"][0]["error"] == "ConnectionError: first try"
    assert view["attempts"][1]["startedAt"] == "2023-11-14T23:13:20.000Z"  # T0 + 1 h
    assert view["enqueuedAt"] == "2023-11-14T22:13:20.000Z"
    assert view["finishedAt"] == "2023-11-14T23:13:20.000Z"
    assert view["attempt"] == 2 and view["taskId"] == "a"


async def test_dead_letters_and_cancels_raise(make_queue: MakeQueue) -> None:
    queue = await make_queue()

    @queue.handler("t")
    async def broken(job: Job) -> None:
        raise ValueError("bad input")

    await queue.enqueue("a", "t", max_retries=0)
    waiting = asyncio.ensure_future(queue.result("a", timeout=WAIT))
    with pytest.raises(TaskDeadLetteredError, match="ValueError: bad input"):
        await waiting
    with pytest.raises(TaskDeadLetteredError):  # from the dead-letter queue
        await queue.result("a")
    await queue.purge("a")
    with pytest.raises(TaskDeadLetteredError):  # purged: from the history
        await queue.result("a")

    await queue.enqueue("later", "t", execute_at="2099-01-01T00:00:00Z")
    waiting = asyncio.ensure_future(queue.result("later"))
    await queue.cancel("later")
    with pytest.raises(TaskCancelledError, match="'later' was cancelled"):
        await asyncio.wait_for(waiting, WAIT)
    with pytest.raises(TaskCancelledError):
        await queue.result("later")


async def test_unknown_tasks_and_timeouts(make_queue: MakeQueue) -> None:
    queue = await make_queue()
    with pytest.raises(UnknownTaskError, match="no task 'nope'"):
        await queue.result("nope")
    assert await queue.lookup("nope") is None
    await queue.enqueue("later", "t", execute_at="2099-01-01T00:00:00Z")
    with pytest.raises(TimeoutError):
        await queue.result("later", timeout=0.01)
    assert not queue._results._waiting  # a timed-out waiter leaves nothing behind


class GatedSync(MemoryLog):
    """A memory log whose ``sync`` waits for the test to open the gate."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def sync(self) -> None:
        self.entered.set()
        await self.gate.wait()
        await super().sync()


async def test_a_result_is_handed_over_only_after_the_log_synced(
    clock: ManualClock, store: MemoryStore
) -> None:
    log = GatedSync(store)
    queue = Queue(log=log, clock=clock)

    @queue.handler("t")
    async def handle(job: Job) -> str:
        return "done"

    async with queue:
        await queue.enqueue("a", "t")
        waiting = asyncio.ensure_future(queue.result("a", timeout=WAIT))
        await asyncio.wait_for(log.entered.wait(), WAIT)
        assert records(store, "a", "succeeded") and not waiting.done()
        log.gate.set()
        assert await waiting == "done"
