"""Where a claimed attempt runs: an executor starts it and later reports its outcome.

Three kinds: the stdio SDK (``rpc/daemon.py`` sends ``execute`` and waits for
``result``), an in-process async handler (:class:`HandlerExecutor`), and a webhook
POST (``webhooks.py``). The engine picks the first executor that accepts a task.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from snerd.projections.task import Task


@dataclass(slots=True)
class Run:
    """One attempt this daemon has claimed and is running."""

    task: Task
    attempt: int
    started: float
    executor: Executor | None = None
    timer: Any = None
    handle: asyncio.Task[None] | None = field(default=None, repr=False)


class Outcomes(Protocol):
    """What executors report back to (the engine)."""

    async def finish(
        self, task_id: str, *, success: bool, error: str | None = None,
        attempt: int | None = None,
    ) -> object: ...  # fmt: skip

    async def report_progress(self, task_id: str, data: Any) -> object: ...


class Executor(Protocol):
    @property
    def task_types(self) -> Collection[str]:
        """The task types registered here (for ``stats``; a webhook executor has none)."""

    def accepts(self, task: Task) -> bool:
        """Whether this executor can run the task (its type is registered here)."""

    def start(self, run: Run, outcomes: Outcomes) -> None:
        """Begin the attempt; report through ``outcomes.finish`` when it ends."""

    def stop(self, run: Run) -> None:
        """The attempt timed out or the daemon is shutting down: abandon it."""


# --- in-process handlers -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Job:
    """What an in-process handler receives: the task and a way to report progress."""

    id: str
    type: str
    data: Any
    attempt: int
    _outcomes: Outcomes = field(repr=False, compare=False)

    async def progress(self, data: Any) -> None:
        """Record progress (any JSON value); the dashboard and other processes see it."""
        await self._outcomes.report_progress(self.id, data)


Handler = Callable[[Job], Awaitable[Any]]

current_job: contextvars.ContextVar[Job | None] = contextvars.ContextVar(
    "snerd_current_job", default=None
)


def decode_data(data: str) -> Any:
    """Stored task data as the JSON value it holds, or the text itself if not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return data


class HandlerExecutor:
    """Runs tasks on async functions registered by type, in this process."""

    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}

    @property
    def task_types(self) -> Collection[str]:
        return self.handlers.keys()

    def accepts(self, task: Task) -> bool:
        return task.type in self.handlers

    def start(self, run: Run, outcomes: Outcomes) -> None:
        handler = self.handlers[run.task.type]
        job = Job(run.task.id, run.task.type, decode_data(run.task.data), run.attempt, outcomes)
        run.handle = asyncio.get_running_loop().create_task(self._run(handler, job, outcomes))

    async def _run(self, handler: Handler, job: Job, outcomes: Outcomes) -> None:
        current_job.set(job)
        try:
            await handler(job)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failing handler is an outcome, not a crash
            message = f"{type(exc).__name__}: {exc}"
            await outcomes.finish(job.id, success=False, error=message, attempt=job.attempt)
            return
        await outcomes.finish(job.id, success=True, attempt=job.attempt)

    def stop(self, run: Run) -> None:
        if run.handle is not None and not run.handle.done():
            run.handle.cancel()
