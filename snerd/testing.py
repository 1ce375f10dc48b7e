"""Testing handlers without a daemon or a disk: a queue on memory with a manual clock.

Like huey's immediate mode, but the real engine runs (retries, schedules, rate limits,
DAGs and results behave as in production), on an in-memory log (``MemoryLog``) and a
clock that moves only when the test says (``ManualClock``)::

    async with snerd.testing.in_memory(app.queue) as harness:   # the app's own queue
        handle = await app.send_welcome.enqueue("ada@example.com")
        assert await handle.result(timeout=5) == "sent"
        harness.advance(3600)                # an hour later: due retries, cron, ...
        await harness.run_until_idle()

:func:`in_memory` moves a queue that has not started onto memory for the duration and
puts its storage back afterwards; :func:`queue` makes a fresh one. Nothing touches the
disk, nothing sleeps, and time-dependent behaviour is exact.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from snerd.dispatcher.clock import ManualClock
from snerd.embedded import Queue
from snerd.eventlog import MemoryLog, MemoryStore

START: Final = 1_700_000_000.0
"""Where a harness's clock starts by default (2023-11-14T22:13:20Z, epoch seconds)."""


class Harness:
    """A queue on an in-memory log and a manual clock, with helpers to drive it.
    Use it as ``async with`` (start, then close and restore), or call :meth:`start` and
    :meth:`close`."""

    def __init__(self, queue: Queue, *, start: float = START) -> None:
        self.queue = queue
        self.clock = ManualClock(start)
        """The queue's clock: it moves only on :meth:`advance`."""
        self.store = MemoryStore()
        """The in-memory "file" holding the queue's log (see :meth:`records`)."""
        self._saved = (queue.engine, queue._results)
        queue._assemble(MemoryLog(self.store), self.clock, None)

    async def start(self) -> None:
        await self.queue.start()

    async def close(self) -> None:
        """Stop the queue (running attempts get a second) and give it back its own log."""
        await self.queue.close(timeout=1.0)
        self.queue.engine, self.queue._results = self._saved
        self.queue._handlers.on_free = self.queue.engine.wake

    async def __aenter__(self) -> Harness:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def advance(self, seconds: float) -> None:
        """Move the clock forward; whatever became due (delays, retries, cron
        occurrences, rate-limit slots, timeouts) is dispatched."""
        self.clock.advance(seconds)

    async def run_until_idle(self, *, timeout: float = 10.0) -> None:
        """Wait until nothing this queue can run is pending, running or due now (tasks
        scheduled later wait for :meth:`advance`); ``TimeoutError`` after ``timeout``
        seconds of real time (a handler that never returns)."""
        await self.queue.start()
        await self.queue.join(timeout=timeout)

    def records(self, task_id: str | None = None) -> list[dict[str, Any]]:
        """The log's records so far (about ``task_id``), oldest first."""
        out = [orjson.loads(line) for line in self.store.lines]
        if task_id is None:
            return out
        return [r for r in out if r.get("taskId", r.get("task")) == task_id]


def in_memory(queue: Queue, *, start: float = START) -> Harness:
    """Run ``queue`` (not started yet; the app's own, with its handlers and tasks) on
    memory and a manual clock starting at ``start`` until the harness closes."""
    return Harness(queue, start=start)


def queue(*, start: float = START, max_workers: int = 8,
          pools: dict[str, int] | None = None) -> Harness:  # fmt: skip
    """A fresh queue on memory and a manual clock: register handlers on ``.queue``."""
    return Harness(Queue(log=MemoryLog(MemoryStore()), max_workers=max_workers, pools=pools),
                   start=start)  # fmt: skip
