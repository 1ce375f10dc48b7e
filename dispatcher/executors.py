"""Where a claimed attempt runs: an executor starts it and later reports its outcome.

Three kinds: the stdio SDK (``rpc/daemon.py`` sends ``execute`` and waits for
``result``), an in-process async handler (:class:`HandlerExecutor`), and a webhook
POST (``webhooks.py``). The engine picks the first executor that accepts a task.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from snerd.dispatcher.runs import Run
from snerd.errors import Fail
from snerd.projections.slots import fast_init


class Outcomes(Protocol):
    """What executors report back to (the engine)."""

    async def finish(
        self, task_id: str, *, success: bool, error: str | None = None,
        attempt: int | None = None, result: Any = None, retry: bool = True,
    ) -> object: ...  # fmt: skip

    def finish_soon(
        self, task_id: str, *, success: bool, error: str | None = None,
        attempt: int | None = None, result: Any = None, retry: bool = True,
    ) -> asyncio.Future[Any]:  # fmt: skip
        """:meth:`finish`, submitted now; the future resolves once it is written."""

    async def report_progress(self, task_id: str, data: Any) -> object: ...


class Executor(Protocol):
    @property
    def task_types(self) -> Collection[str]:
        """The task types registered here (for ``stats``; a webhook executor has none)."""

    def accepts(self, task_type: str, webhook_url: str | None) -> bool:
        """Whether this executor can run a task of that type and webhook URL (its type
        is registered here, say): only these two fields decide, so the engine can ask
        before a task exists (an enqueue that nothing here runs claims nothing)."""

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
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False, compare=False)

    async def progress(self, data: Any) -> None:
        """Record progress (any JSON value); the dashboard and other processes see it."""
        await self._outcomes.report_progress(self.id, data)

    def progress_sync(self, data: Any, timeout: float | None = 30.0) -> None:
        """:meth:`progress` for a sync (``def``) handler, which runs in a worker thread:
        hands the update to the queue's event loop and waits until it is recorded."""
        if self._loop is None:
            raise RuntimeError("this job has no event loop to report progress to")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            raise RuntimeError("progress_sync() would block the event loop: await progress()")
        asyncio.run_coroutine_threadsafe(self.progress(data), self._loop).result(timeout)


_, _new_job = fast_init(Job)  # one a task: the frozen class's __init__ is 3x dearer

Handler = Callable[[Job], Any]
"""An ``async def`` handler (awaited on the event loop), or a plain ``def`` one (run in
a worker thread; see :class:`HandlerExecutor`). Raising fails the attempt; what it
returns is the task's result (recorded with its success when not None)."""

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
    """Runs tasks on functions registered by type, in this process.

    ``async def`` handlers run on the event loop. Plain ``def`` handlers run in a pool
    of at most ``threads`` worker threads, so they never block the loop. A thread
    cannot be killed: when a sync handler overruns its hard timeout the attempt fails
    at once (its late return is ignored) while the thread runs on, and it keeps
    counting against the pool (:attr:`lingering`) until it returns.
    """

    def __init__(self, *, threads: int = 8, on_free: Callable[[], None] | None = None) -> None:
        self.handlers: dict[str, Handler] = {}
        self.threads = threads
        self.on_free = on_free
        """Called when a lingering thread returns (capacity freed: look again)."""
        self.lingering = 0
        """Threads still running a sync handler whose attempt already ended (timeout)."""
        self._pool: ThreadPoolExecutor | None = None
        self._in_threads: dict[int, Run] = {}
        self._kinds: dict[int, tuple[Handler, bool]] = {}  # id -> (handler, is_async)

    @property
    def task_types(self) -> Collection[str]:
        return self.handlers.keys()

    def accepts(self, task_type: str, webhook_url: str | None) -> bool:
        return task_type in self.handlers

    def start(self, run: Run, outcomes: Outcomes) -> None:
        handler = self.handlers[run.task.type]
        loop = asyncio.get_running_loop()
        task = run.task
        job: Job = _new_job(id=task.id, type=task.type, data=decode_data(task.data),
                            attempt=run.attempt, _outcomes=outcomes, _loop=loop)  # fmt: skip
        run.handle = loop.create_task(self._run(handler, job, run, outcomes))

    def _is_async(self, handler: Handler) -> bool:
        """:func:`is_async`, asked once per handler (``inspect`` is slow for a call a task)."""
        known = self._kinds.get(id(handler))
        if known is None or known[0] is not handler:
            known = self._kinds[id(handler)] = (handler, is_async(handler))
        return known[1]

    async def _in_thread(self, handler: Handler, job: Job, run: Run) -> Any:
        loop = asyncio.get_running_loop()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="snerd-handler")
        context = contextvars.copy_context()
        context.run(current_job.set, job)
        future = self._pool.submit(context.run, handler, job)
        self._in_threads[id(run)] = run
        future.add_done_callback(lambda _: _call_soon(loop, self._returned, run))
        result = await asyncio.wrap_future(future)
        if inspect.isawaitable(result):  # a def that returned a coroutine
            return await result
        return result

    def _returned(self, run: Run) -> None:
        if self._in_threads.pop(id(run), None) is None:  # it outlived its attempt
            self.lingering -= 1
            if self.on_free is not None:
                self.on_free()

    async def _run(self, handler: Handler, job: Job, run: Run, outcomes: Outcomes) -> None:
        """Run the attempt and submit its outcome. The task ends there: the outcome is
        the engine's to write (the attempt is over for it at once, ``finish_soon``), so
        nothing waits here for the write."""
        try:
            if self._is_async(handler):
                current_job.set(job)  # in this task's own copy of the context
                result = await handler(job)
            else:
                result = await self._in_thread(handler, job, run)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failing handler is an outcome, not a crash
            message = f"{type(exc).__name__}: {exc}"
            outcomes.finish_soon(job.id, success=False, error=message, attempt=job.attempt,
                                 retry=not isinstance(exc, Fail))  # fmt: skip
            return
        outcomes.finish_soon(job.id, success=True, attempt=job.attempt, result=result)

    def stop(self, run: Run) -> None:
        if run.handle is not None and not run.handle.done():
            run.handle.cancel()
        if self._in_threads.pop(id(run), None) is not None:
            self.lingering += 1  # its thread runs on; _returned counts it back

    def shutdown(self) -> None:
        """Let the worker threads go (a lingering one still runs to its end)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[Run], None], run: Run) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed while the thread ran on
        loop.call_soon_threadsafe(callback, run)


def is_async(handler: Handler) -> bool:
    """Whether calling ``handler`` returns an awaitable to run on the loop (an ``async
    def``, a partial of one, or an object whose ``__call__`` is one)."""
    while isinstance(handler, functools.partial):
        handler = handler.func
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004
    )
