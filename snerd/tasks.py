"""The task decorator: ``@queue.task(...)`` turns a function into an enqueueable task.

    @queue.task(max_retries=3)
    async def resize(path: str, width: int = 640) -> dict[str, int]:
        ...

    handle = await resize.enqueue("a.png", width=320)     # or resize.delay(...)
    size = await handle.result(timeout=30)
    await resize.options(id="resize-a", urgency_score=5).enqueue("a.png")

The function's parameter types are kept (``ParamSpec``): a type checker checks the
arguments of ``enqueue`` against them. Arguments travel as JSON (``{"args": [...],
"kwargs": {...}}`` as the task's data) and so does the result: a tuple comes back as a
list, a dataclass as an object. The task type is ``module.qualname`` unless ``name=``
is given (give one when the function lives in ``__main__`` and another process runs
it). An ``async def`` runs on the event loop, a plain ``def`` in a worker thread.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, cast, overload

import orjson
from ulid import ULID

from snerd.dispatcher.executors import Handler, Job, is_async

if TYPE_CHECKING:
    import datetime as dt

    from snerd.embedded import Queue

P = ParamSpec("P")
R = TypeVar("R")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TaskOptions:
    """Enqueue options of a task (``Queue.enqueue``'s keywords; None = the default),
    set by the decorator and overridden per call by :meth:`TaskFunction.options`."""

    id: str | None = None
    max_retries: int | None = None
    retry_after_hours: float | None = None
    retry_backoff: str | None = None
    retry_max_delay: float | None = None
    urgency_score: float | None = None
    execute_at: dt.datetime | str | float | None = None
    cron: str | None = None
    trigger_after_ids: Sequence[str] | None = None
    rate_limit_group: str | None = None
    max_per_minute: int | None = None
    auto_dedupe: bool | None = None
    max_execution_seconds: float | None = None
    pool: str | None = None

    def given(self) -> dict[str, Any]:
        """The options set, as ``Queue.enqueue`` keywords (without ``id``)."""
        return {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self)
            if f.name != "id" and getattr(self, f.name) is not None
        }  # fmt: skip


class TaskIds:
    """Time-ordered, sortable task ids: ULIDs (48-bit milliseconds, 80 random bits, 26
    characters of Crockford base32), strictly increasing within one process even when
    the clock stands still (a manual clock) or goes back."""

    def __init__(self) -> None:
        self._last: ULID | None = None
        self._lock = threading.Lock()

    def __call__(self, now: float) -> str:
        fresh = ULID.from_timestamp(now)
        with self._lock:
            if self._last is not None and fresh <= self._last:
                fresh = ULID.from_int(int(self._last) + 1)
            self._last = fresh
        return str(fresh)


@dataclasses.dataclass(frozen=True, slots=True)
class TaskHandle(Generic[R]):
    """An enqueued task: its ``id``, and a way to wait for its result."""

    id: str
    queue: Queue = dataclasses.field(repr=False, compare=False)

    async def result(self, *, timeout: float | None = None) -> R:
        """The function's return value (as JSON round-trips it) once the task completed;
        raises as :meth:`snerd.Queue.result` does."""
        return cast(R, await self.queue.result(self.id, timeout=timeout))


class TaskFunction(Generic[P, R]):
    """A function registered as a task type on a queue (made by ``@queue.task``)."""

    def __init__(self, queue: Queue, fn: Callable[P, Any], name: str, options: TaskOptions):
        self.queue = queue
        self.fn = fn
        """The function itself, to call directly (in tests, say)."""
        self.name = name
        """The task type it is registered and enqueued under."""
        self.defaults = options

    async def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        """Durably enqueue a call with these arguments (JSON-serializable: ``TypeError``
        otherwise). The id is :attr:`TaskOptions.id` or a fresh time-ordered one; with
        ``auto_dedupe`` the handle may name the live duplicate instead."""
        data = {"args": list(args), "kwargs": kwargs}
        try:
            orjson.dumps(data)
        except TypeError as exc:
            raise TypeError(f"the arguments of task {self.name!r} are not JSON-serializable: "
                            f"{exc}") from None  # fmt: skip
        task_id = self.defaults.id or self.queue.new_id()
        enqueued = await self.queue.enqueue(task_id, self.name, data, **self.defaults.given())
        return TaskHandle(enqueued, self.queue)

    delay = enqueue
    """Alias of :meth:`enqueue` (Celery's and Huey's name)."""

    def options(
        self,
        *,
        id: str | None = None,
        max_retries: int | None = None,
        retry_after_hours: float | None = None,
        retry_backoff: str | None = None,
        retry_max_delay: float | None = None,
        urgency_score: float | None = None,
        execute_at: dt.datetime | str | float | None = None,
        cron: str | None = None,
        trigger_after_ids: Sequence[str] | None = None,
        rate_limit_group: str | None = None,
        max_per_minute: int | None = None,
        auto_dedupe: bool | None = None,
        max_execution_seconds: float | None = None,
        pool: str | None = None,
    ) -> TaskFunction[P, R]:
        """This task with some options set for the calls made through the result
        (``id=`` for an explicit id); the others keep the decorator's."""
        given = {k: v for k, v in locals().items() if k != "self" and v is not None}
        options = dataclasses.replace(self.defaults, **given)
        return TaskFunction(self.queue, self.fn, self.name, options)

    def __repr__(self) -> str:
        return f"<task {self.name!r}>"


class TaskDecorator:
    """What ``queue.task(...)`` returns: apply it to an ``async def`` or a ``def``."""

    def __init__(self, queue: Queue, name: str | None, options: TaskOptions) -> None:
        self.queue = queue
        self.name = name
        self.options = options

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]]) -> TaskFunction[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, R]) -> TaskFunction[P, R]: ...

    def __call__(self, fn: Callable[P, Any]) -> TaskFunction[P, Any]:
        name = self.name or f"{fn.__module__}.{fn.__qualname__}"
        self.queue.handler(name)(_handler(fn, name))
        return TaskFunction(self.queue, fn, name, self.options)


def _handler(fn: Callable[..., Any], name: str) -> Handler:
    """The job handler that calls ``fn`` with the arguments a job carries."""
    if is_async(fn):

        async def run_async(job: Job) -> Any:
            args, kwargs = call_arguments(job, name)
            return await fn(*args, **kwargs)

        return run_async

    def run(job: Job) -> Any:
        args, kwargs = call_arguments(job, name)
        return fn(*args, **kwargs)

    return run


def call_arguments(job: Job, name: str) -> tuple[list[Any], dict[str, Any]]:
    """The ``(args, kwargs)`` a task's data holds; ``TypeError`` (failing the attempt)
    when the data is not what :meth:`TaskFunction.enqueue` writes."""
    data = job.data
    if isinstance(data, dict) and data.keys() <= {"args", "kwargs"}:
        args, kwargs = data.get("args", []), data.get("kwargs", {})
        if isinstance(args, list) and isinstance(kwargs, dict):
            return args, kwargs
    shown = orjson.dumps(data)[:80].decode(errors="replace")
    raise TypeError(f"task {job.id!r} of type {name!r}: its data must be "
                    f'{{"args": [...], "kwargs": {{...}}}}, got {shown}')  # fmt: skip
