"""``Queue.configure`` (what ``snerdmq worker`` uses): storage, capacity and pools are
changed before start, and refused after it or where they cannot apply."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from embeddedkit import WAIT, MakeQueue

import snerd
from snerd.dispatcher.executors import Job
from snerd.errors import DispatchError


async def test_configure_moves_storage_and_sets_capacity(tmp_path: Path) -> None:
    queue = snerd.Queue(str(tmp_path / "named"), max_workers=8, pools={"a": 1}, fsync=False)
    gate = asyncio.Event()
    running: set[str] = set()

    @queue.handler("t")
    async def held(job: Job) -> None:
        running.add(job.id)
        await gate.wait()

    queue.configure(storage=str(tmp_path / "other"), max_workers=2, pools={"b": 3})
    assert queue.engine.config.pools == {"a": 1, "b": 3} and queue.task_types == ["t"]
    async with queue:
        for i in range(3):
            await queue.enqueue(f"x{i}", "t")
        assert queue.get("x2")["status"] == "pending"  # type: ignore[index]  # no slot left
        changed = queue.engine.changed
        while len(running) < 2:
            changed.clear()
            await asyncio.wait_for(changed.wait(), WAIT)
        assert len(queue.engine.runs) == 2
        with pytest.raises(DispatchError, match="before the queue starts"):
            queue.configure(max_workers=4)
        gate.set()
        await queue.join(timeout=WAIT)
    assert (tmp_path / "other" / "tasks").is_dir() and not (tmp_path / "named").exists()


async def test_configure_refuses_storage_for_a_queue_on_a_given_log(
    make_queue: MakeQueue,
) -> None:
    queue = await make_queue(start=False)
    with pytest.raises(DispatchError, match="runs on the log it was given"):
        queue.configure(storage="elsewhere")
    with pytest.raises(ValueError, match="at least 1"):
        queue.configure(max_workers=0)
