"""The official SDK's own dashboard reads our tasks.log directly (issue 9.2).

It keeps, per task, the last line that has a ``taskId`` and reads SnerdMQ's fields
from it (``t['taskType']``...). Our light lines (claims, progress, releases, purges)
must never read as a task's state to it: during a run, after success, after a dead
letter and after compaction, its ``/api/tasks`` answers with every task's true state.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from daemonkit import ROOT, WAIT, events_of, read_log
from test_official_sdk import SnerdQueue, binary


@pytest.fixture
async def queue(tmp_path: Path) -> AsyncIterator[Any]:
    q = SnerdQueue(binary_path=binary(tmp_path), storage_path=str(tmp_path / "store"))
    yield q
    await asyncio.wait_for(q.shutdown(), 40)
    if q.dashboard_runner is not None:
        await q.dashboard_runner.cleanup()


async def _until(predicate: Any, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not predicate():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.02)


async def _sdk_tasks(port: int) -> dict[str, dict[str, Any]]:
    async with aiohttp.ClientSession() as http:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while True:
            try:
                async with http.get(f"http://127.0.0.1:{port}/api/tasks") as resp:
                    assert resp.status == 200, await resp.text()
                    return {t["id"]: t for t in await resp.json()}
            except aiohttp.ClientConnectionError:
                assert loop.time() < deadline, "the SDK dashboard never answered"
                await asyncio.sleep(0.02)


def _no_light_line_reads_as_a_state(storage: Path) -> None:
    for record in read_log(storage):
        if "taskId" in record:  # what a SnerdMQ reader takes for the task's state
            assert "taskType" in record and "retryCount" in record, record


async def test_the_sdk_dashboard_reads_true_states_during_a_run(
    queue: Any, tmp_path: Path
) -> None:
    storage = tmp_path / "store"
    release = asyncio.Event()
    running = asyncio.Event()
    dead: asyncio.Queue[Any] = asyncio.Queue()

    async def ok(data: Any) -> None:
        return None

    async def bad(data: Any) -> None:
        raise RuntimeError("nope")

    async def slow(data: Any) -> None:
        await queue.yield_progress_async({"pct": 30})
        running.set()
        await release.wait()

    async def on_dead(data: Any) -> None:
        await dead.put(data)

    for name, handler in (("ok", ok), ("bad", bad), ("slow", slow)):
        queue.register_handler(name, handler)
    queue.register_max_retry_handler("bad", on_dead)
    await queue.start_listening()
    await asyncio.wait_for(queue.enqueue("ok-1", "ok", {}), WAIT)
    await asyncio.wait_for(queue.enqueue("bad-1", "bad", {}, max_retries=0), WAIT)
    await asyncio.wait_for(dead.get(), WAIT)
    await _until(lambda: events_of(storage, "ok-1", "succeeded"), "ok-1 succeeded")
    await asyncio.wait_for(queue.enqueue("slow-1", "slow", {}), WAIT)
    await asyncio.wait_for(running.wait(), WAIT)
    await _until(lambda: events_of(storage, "slow-1", "progress"), "progress logged")

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    queue.start_dashboard(port=port)

    def check(tasks: dict[str, dict[str, Any]], *, compacted: bool = False) -> None:
        if compacted:  # a completed task's lines went to the archive, as SnerdMQ's do
            assert "ok-1" not in tasks
        else:
            assert tasks["ok-1"]["status"] == "completed"
        assert tasks["bad-1"]["status"] == "dead_letter"
        assert tasks["slow-1"]["type"] == "slow"
        assert tasks["slow-1"]["status"] in ("active", "queued")

    check(await _sdk_tasks(port))  # during the run: claim and progress lines written
    _no_light_line_reads_as_a_state(storage)

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "snerd.cli", "compact", str(storage)],
                          env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    check(await _sdk_tasks(port), compacted=True)  # the snapshot restates the claim
    _no_light_line_reads_as_a_state(storage)

    release.set()
    await _until(lambda: any(r.get("event") == "succeeded" and r.get("taskId") == "slow-1"
                             for r in read_log(storage)), "slow-1 succeeded")  # fmt: skip
    tasks = await _sdk_tasks(port)
    assert tasks["slow-1"]["status"] == "completed"
    _no_light_line_reads_as_a_state(storage)
