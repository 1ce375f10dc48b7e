"""An engine on a shared in-memory log with a manual clock: no disk, no sleeps."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from snerd.dispatcher.clock import ManualClock
from snerd.dispatcher.engine import Engine, EngineConfig
from snerd.dispatcher.executors import HandlerExecutor, Job
from snerd.errors import LogError
from snerd.eventlog.base import EventLog
from snerd.eventlog.memory import MemoryLog, MemoryStore


class FakeLiveness:
    """Liveness as a set: tests kill a daemon by discarding its id."""

    def __init__(self) -> None:
        self.alive: set[str] = set()
        self.reachable = threading.Event()  # cleared: confirm cannot take the lock again
        self.reachable.set()
        self.confirmed: list[str] = []

    def confirm(self, daemon_id: str) -> None:
        """Take the lock again (a reconnect), once :attr:`reachable` (a thread waits)."""
        if not self.reachable.wait(timeout=1.0):
            raise LogError("liveness storage unreachable")
        self.alive.add(daemon_id)
        self.confirmed.append(daemon_id)

    def hold(self, daemon_id: str) -> None:
        self.alive.add(daemon_id)

    def is_alive(self, daemon_id: str) -> bool:
        return daemon_id in self.alive

    def release(self, daemon_id: str | None = None) -> None:
        if daemon_id is not None:
            self.alive.discard(daemon_id)


class Harness:
    """Engines sharing one store, clock and liveness, with recording handlers."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.new_log: Callable[[], EventLog] = lambda: MemoryLog(self.store)
        """Each engine's log: on the shared memory store unless a test says otherwise."""
        self.clock = ManualClock()
        self.liveness: FakeLiveness | None = FakeLiveness()
        self.engines: list[Engine] = []
        self.calls: list[tuple[str, str, int]] = []  # (daemon, task id, attempt)

    async def engine(
        self,
        handlers: dict[str, Callable[[Job], Awaitable[Any]]] | None = None,
        **config: Any,
    ) -> Engine:
        executor = HandlerExecutor()
        name = f"d{len(self.engines)}"
        for task_type, handler in (handlers or {}).items():
            executor.handlers[task_type] = self._recording(name, handler)
        engine = Engine(
            self.new_log(),
            executors=[executor],
            clock=self.clock,
            config=EngineConfig(daemon_id=name, **config),
            liveness=self.liveness,
        )
        await engine.start()
        self.engines.append(engine)
        return engine

    def _recording(
        self, name: str, handler: Callable[[Job], Awaitable[Any]]
    ) -> Callable[[Job], Awaitable[Any]]:
        async def run(job: Job) -> Any:
            self.calls.append((name, job.id, job.attempt))
            for engine in self.engines:
                engine.changed.set()  # wake settle() in tests waiting on calls
            return await handler(job)

        return run


async def settle(engine: Engine, condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait (event-driven, bounded) until ``condition()`` holds. The condition may read
    other engines too (whose folds don't set this one's event): look again at least
    every 10 ms of real time."""

    for _ in range(3):  # the loop's turns Python 3.11's wait_for gave before its first
        await asyncio.sleep(0)  # look (its own task); 3.12's looks at once: a start-up pass
    # that a test lets run with ``condition=lambda: True`` runs in them

    async def wait() -> None:
        while not condition():
            engine.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(engine.changed.wait(), 0.01)

    await asyncio.wait_for(wait(), timeout)
