"""An embedded worker and a stdio daemon share one storage directory (one log format)."""

from __future__ import annotations

import asyncio
import collections
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from embeddedkit import WAIT

from snerd.dispatcher.executors import Job
from snerd.embedded import Queue
from snerd.rpc.client import Client

sys.path.insert(0, str(Path(__file__).parents[1] / "daemon"))
from daemonkit import ForkingClient, read_log

ENV = {"SNERD_LOG_LEVEL": "warning", "SNERD_DRAIN_TIMEOUT": "2"}


async def eventually(condition: Callable[[], Awaitable[bool]], timeout: float = WAIT) -> None:
    """Wait until ``condition()`` holds, checking every 20 ms, failing after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await condition():
        assert loop.time() < deadline, f"{condition.__name__} did not hold in {timeout}s"
        await asyncio.sleep(0.02)


@pytest.fixture
def storage(tmp_path: Path) -> Path:
    return tmp_path / "shared"


@pytest.fixture
async def daemon(storage: Path) -> AsyncIterator[Client]:
    client = ForkingClient(storage, env=ENV)  # a real daemon process, forked (forkserver.py)
    await client.start()
    yield client
    await client.close_stdin()
    assert await client.wait(timeout=15) == 0


@pytest.fixture
async def embedded(storage: Path) -> AsyncIterator[Queue]:
    queue = Queue(str(storage))
    yield queue
    await queue.close(timeout=2)


async def test_enqueue_through_the_daemon_runs_on_the_embedded_handler(
    daemon: Client, embedded: Queue
) -> None:
    got: asyncio.Queue[Job] = asyncio.Queue()

    @embedded.handler("local")
    async def handle(job: Job) -> None:
        await job.progress("half")
        await got.put(job)

    await embedded.start()
    ack = await asyncio.wait_for(daemon.enqueue("from-daemon", "local", {"n": 1}), WAIT)
    assert ack["action"] == "ack"
    job = await asyncio.wait_for(got.get(), WAIT)
    assert (job.id, job.data, job.attempt) == ("from-daemon", {"n": 1}, 1)
    await asyncio.wait_for(embedded.join(), WAIT)

    async def completed_for_the_daemon() -> bool:  # it learns of the completion from the log
        return (await daemon.get("from-daemon"))["status"] == "completed"

    await eventually(completed_for_the_daemon)


async def test_enqueue_through_the_embedded_queue_runs_on_the_daemon(
    daemon: Client, embedded: Queue
) -> None:
    got: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    async def handle(task_id: str, data: Any) -> None:
        await got.put((task_id, data))

    daemon.register("remote", handle)
    await embedded.start()
    await daemon.stats()  # the registration has been read
    await embedded.enqueue("from-embedded", "remote", {"n": 2})
    assert await asyncio.wait_for(got.get(), WAIT) == ("from-embedded", {"n": 2})

    async def completed() -> bool:  # seen through the log
        return embedded.get("from-embedded") is None

    await eventually(completed)


async def test_work_is_shared_and_each_task_runs_once(
    daemon: Client, embedded: Queue, storage: Path
) -> None:
    runs: list[tuple[str, str]] = []

    @embedded.handler("both")
    async def local(job: Job) -> None:
        runs.append(("embedded", job.id))
        await asyncio.sleep(0.002)

    async def remote(task_id: str, data: Any) -> None:
        runs.append(("daemon", task_id))
        await asyncio.sleep(0.002)

    daemon.register("both", remote)
    await embedded.start()
    n = 120
    await asyncio.gather(*(
        (daemon.enqueue(f"s{i}", "both") if i % 2 else embedded.enqueue(f"s{i}", "both"))
        for i in range(n)
    ))  # fmt: skip

    async def all_ran() -> bool:
        return len(runs) >= n

    await eventually(all_ran, 30)
    assert sorted(t for _, t in runs) == sorted(f"s{i}" for i in range(n))
    claims = collections.Counter(
        r["task"] for r in read_log(storage) if r.get("event") == "claimed"
    )  # every attempt claimed once, so no task can have run twice
    assert set(claims.values()) == {1} and len(claims) == n
    assert {who for who, _ in runs} == {"embedded", "daemon"}
