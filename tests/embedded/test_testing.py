"""``snerd.testing`` (issue 11.7): users' handlers tested on memory with a manual clock,
no daemon, no disk, no sleeps."""

from __future__ import annotations

from pathlib import Path

import pytest
from embeddedkit import WAIT

import snerd
import snerd.testing
from snerd.dispatcher.executors import Job
from snerd.errors import DispatchError, TaskDeadLetteredError
from snerd.eventlog import FileLog


async def test_an_apps_queue_runs_on_memory_and_gets_its_storage_back(tmp_path: Path) -> None:
    storage = tmp_path / "store"
    app = snerd.Queue(str(storage))
    calls: list[int] = []

    @app.task(name="flaky", max_retries=2, retry_after_hours=1)
    async def flaky(n: int) -> int:
        calls.append(n)
        if len(calls) == 1:
            raise ConnectionError("down")
        return n * 2

    async with snerd.testing.in_memory(app) as harness:
        handle = await flaky.enqueue(21)
        await harness.run_until_idle()
        assert calls == [21]  # failed; the retry is an hour away
        harness.advance(3599)
        await harness.run_until_idle()
        assert calls == [21]
        harness.advance(1)
        assert await handle.result(timeout=WAIT) == 42
        events = [r.get("event") for r in harness.records(handle.id)]
        assert events == ["enqueued", "claimed", "retry_scheduled", "claimed", "succeeded"]
    assert not storage.exists()  # nothing touched the disk
    assert isinstance(app.engine.log, FileLog)  # its own storage again


async def test_a_fresh_queue_with_a_plain_handler() -> None:
    harness = snerd.testing.queue(start=0.0)
    seen: list[str] = []

    @harness.queue.handler("mail")
    def mail(job: Job) -> str:
        seen.append(job.data["to"])
        return "sent"

    async with harness:
        await harness.queue.enqueue("m1", "mail", {"to": "a@b.c"}, execute_at=60.0)
        await harness.run_until_idle()
        assert seen == []  # scheduled for a minute later
        harness.advance(60)
        await harness.run_until_idle()
        assert seen == ["a@b.c"]
        assert await harness.queue.result("m1") == "sent"
        assert harness.clock.now() == 60.0


async def test_dead_letters_show_through_the_handle() -> None:
    harness = snerd.testing.queue()

    @harness.queue.task(name="boom", max_retries=0)
    def boom() -> None:
        raise ValueError("no")

    async with harness:
        handle = await boom.enqueue()
        with pytest.raises(TaskDeadLetteredError, match="ValueError: no"):
            await handle.result(timeout=WAIT)


async def test_a_started_queue_cannot_move_to_memory() -> None:
    harness = snerd.testing.queue()
    async with harness:
        with pytest.raises(DispatchError, match="cannot be replaced"):
            snerd.testing.in_memory(harness.queue)
