"""Fixtures for the in-process queue: a manual clock and an in-memory log per test.

At teardown what the store holds must pass ``snerdmq replay --verify`` (audit and
checksum chain) unless the test is marked ``damaged_log``."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from auditkit import store_problems
from embeddedkit import T0, MakeQueue

from snerd.dispatcher.clock import ManualClock
from snerd.embedded import Queue
from snerd.eventlog import MemoryLog, MemoryStore


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
async def make_queue(
    clock: ManualClock, store: MemoryStore, request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[MakeQueue]:
    """``await make_queue(**options)``: a started Queue on the shared in-memory store."""
    queues: list[Queue] = []

    async def _make(*, start: bool = True, **options: Any) -> Queue:
        options.setdefault("clock", clock)
        queue = Queue(log=MemoryLog(store), **options)
        queues.append(queue)
        if start:
            await queue.start()
        return queue

    yield _make
    for queue in queues:
        await queue.close(timeout=1)
    for queue in queues:  # every dead letter decided had its notice sent or dropped
        assert queue.engine._notices == 0, queue.engine._notices
    if store.lines and request.node.get_closest_marker("damaged_log") is None:
        assert store_problems(store, tmp_path / "audited") == []  # replay --verify: sound


@pytest.fixture
async def queue(make_queue: MakeQueue) -> Queue:
    return await make_queue(start=False)
