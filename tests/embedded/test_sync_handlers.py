"""Plain ``def`` handlers run in a bounded pool of worker threads (issue 9.10)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from embeddedkit import WAIT, MakeQueue, records

from snerd import embedded
from snerd.dispatcher.clock import ManualClock
from snerd.dispatcher.executors import Job
from snerd.eventlog import MemoryStore


async def _until(predicate: Any, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not predicate():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.005)


async def test_a_def_handler_runs_once_in_a_worker_thread(
    make_queue: MakeQueue, store: MemoryStore
) -> None:
    queue = await make_queue()
    calls: list[tuple[Any, str]] = []
    loop_thread = threading.current_thread().name

    @queue.handler("t")
    def handle(job: Job) -> str:
        calls.append((job.data, threading.current_thread().name))
        job.progress_sync({"pct": 50})
        embedded.progress({"pct": 100})
        return "ignored"

    await queue.enqueue("a", "t", {"n": 1}, max_retries=2)
    await queue.join(timeout=WAIT)
    [(data, thread)] = calls  # ran once: it succeeded (it used to fail every attempt)
    assert data == {"n": 1} and thread != loop_thread
    assert records(store, "a", "succeeded")
    assert [r["data"] for r in records(store, "a", "progress")] == [{"pct": 50}, {"pct": 100}]


async def test_a_raising_def_handler_fails_the_attempt(
    make_queue: MakeQueue, store: MemoryStore
) -> None:
    queue = await make_queue()
    calls: list[int] = []

    @queue.handler("t")
    def handle(job: Job) -> None:
        calls.append(job.attempt)
        raise ValueError("nope")

    await queue.enqueue("a", "t", max_retries=1)
    await queue.join(timeout=WAIT)
    assert calls == [1, 2]
    [dead] = records(store, "a", "dead_lettered")
    assert "ValueError: nope" in str(dead["LastErrorObj"])


async def test_def_handlers_do_not_block_the_loop_and_the_pool_is_bounded(
    make_queue: MakeQueue,
) -> None:
    queue = await make_queue(max_workers=2)
    gate = threading.Event()
    running: list[str] = []
    most = [0]
    lock = threading.Lock()

    @queue.handler("t")
    def handle(job: Job) -> None:
        with lock:
            running.append(job.id)
            most[0] = max(most[0], len(running))
        gate.wait(WAIT)
        with lock:
            running.remove(job.id)

    for n in range(4):
        await queue.enqueue(f"t{n}", "t")
    await _until(lambda: len(running) == 2, "two threads running")
    assert queue.stats()["active"] == 2  # the loop still answers while they block
    gate.set()
    await queue.join(timeout=WAIT)
    assert most[0] == 2


async def test_a_timed_out_def_handler_fails_its_attempt_and_holds_its_slot(
    make_queue: MakeQueue, clock: ManualClock, store: MemoryStore
) -> None:
    queue = await make_queue(max_workers=1)
    release = threading.Event()
    started = threading.Event()
    ran: list[str] = []

    @queue.handler("slow")
    def slow(job: Job) -> None:
        started.set()
        release.wait(WAIT)
        ran.append(job.id)

    @queue.handler("fast")
    def fast(job: Job) -> None:
        ran.append(job.id)

    await queue.enqueue("s", "slow", max_retries=0, max_execution_seconds=10)
    await _until(started.is_set, "the slow handler started")
    await queue.enqueue("f", "fast")
    clock.advance(11.5)
    await _until(lambda: records(store, "s", "dead_lettered"), "timeout dead-letters it")
    [dead] = records(store, "s", "dead_lettered")
    assert "timed out" in str(dead["LastErrorObj"])
    assert queue.stats()["pending"] == 1  # "f" waits: the stuck thread holds the one slot
    assert ran == []
    release.set()  # the thread returns late: its result is ignored, its slot frees
    await queue.join(timeout=WAIT)
    assert ran == ["s", "f"]
    assert not records(store, "s", "succeeded")
