"""Embedded mode: the same engine in-process, with async Python handlers and no daemon.

    queue = snerd.Queue(".snerdata")

    @queue.handler("send_email")
    async def send_email(job):
        await job.progress({"pct": 50})

    async with queue:
        await queue.enqueue("email-1", "send_email", {"to": "a@b.c"})
        await queue.join()

The log format is the daemon's, so an embedded worker and SDK daemons can share one
storage directory.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import difflib
import functools
import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace as dc_replace
from typing import Any, TypeVar, cast

from snerd.dispatcher import info
from snerd.dispatcher.clock import Clock
from snerd.dispatcher.engine import Engine, EngineConfig
from snerd.dispatcher.engine import Liveness as LivenessLike
from snerd.dispatcher.executors import Handler, HandlerExecutor, Job, current_job
from snerd.dispatcher.notify import Notifier
from snerd.dispatcher.results import Results, lookup
from snerd.dispatcher.webhooks import WebhookExecutor
from snerd.errors import DispatchError, ProtocolError
from snerd.eventlog.base import EventLog, Record
from snerd.eventlog.storage import open_liveness, open_log
from snerd.projections import decide as cmds
from snerd.projections.options import OptionError, enqueue_command
from snerd.projections.views.tasks import task_view
from snerd.tasks import TaskDecorator, TaskIds, TaskOptions

log = logging.getLogger("snerd.queue")
F = TypeVar("F", bound=Callable[..., Any])

ProgressCallback = Callable[[str, Any], Any]
DeadLetterCallback = Callable[[Record], Any]


def strict_keywords(function: F) -> F:
    """``function`` refusing unknown keyword arguments with one ``TypeError`` that names
    every one of them, with the nearest known name (``urgency -> urgency_score?``)."""
    known = [
        p.name for p in inspect.signature(function).parameters.values()
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]  # fmt: skip

    names = frozenset(known)

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
        unknown = [name for name in kwargs if name not in names] if kwargs else None
        if unknown:
            named = ", ".join(_suggest(name, known) for name in unknown)
            raise TypeError(f"{function.__qualname__}() got unknown keyword arguments: {named}")
        return function(*args, **kwargs)

    return cast(F, checked)


def _suggest(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in name)
    if not close and snake in known:
        close = [snake]
    return f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name)


class _Callbacks:
    """Notifier listener that calls the user's progress / dead-letter callbacks."""

    def __init__(self) -> None:
        self.progress: list[ProgressCallback] = []
        self.dead: list[DeadLetterCallback] = []

    def on_progress(self, task_id: str, task_type: str | None, data: Any, local: bool) -> None:
        for callback in self.progress:
            callback(task_id, data)

    def on_dead_letter(self, record: Record) -> None:
        for callback in self.dead:
            callback(record)

    async def close(self) -> None:
        return None


class Queue:
    """An in-process queue over a storage directory, a ``postgresql://`` URL (see
    ``specs/log-storage.md`` §12), or any :class:`EventLog`."""

    def __init__(
        self,
        storage: str = ".snerdata",
        *,
        log: EventLog | None = None,
        clock: Clock | None = None,
        max_workers: int = 8,
        pools: dict[str, int] | None = None,
        fsync: bool = True,
        daemon_id: str = "",
    ) -> None:
        self.storage = storage
        self._handlers = HandlerExecutor(threads=max_workers)
        self._callbacks = _Callbacks()
        self._webhooks = WebhookExecutor()
        self._config = EngineConfig(daemon_id=daemon_id, max_workers=max_workers,
                                    pools=pools or {})  # fmt: skip
        self._ids = TaskIds()
        self._started = False
        self._fsync = fsync
        self._given_log = log is not None
        self._assemble(log or open_log(storage, fsync=fsync), clock,
                       None if log is not None else open_liveness(storage))  # fmt: skip

    def _assemble(self, log: EventLog, clock: Clock | None, liveness: LivenessLike | None) -> None:
        """Build the engine on ``log`` (again, for ``snerd.testing``: before start only)."""
        if self._started:
            raise DispatchError("a started queue's log cannot be replaced")
        self.engine = Engine(
            log, executors=[self._webhooks, self._handlers], clock=clock, config=self._config,
            liveness=liveness, notifier=Notifier([self._callbacks, self._webhooks]),
        )  # fmt: skip
        self._handlers.on_free = self.engine.wake
        self._results = Results(self.engine)

    # --- registration -----------------------------------------------------------------

    def handler(self, task_type: str) -> Callable[[Handler], Handler]:
        """Decorator: run tasks of ``task_type`` with this function.

        An ``async def`` runs on the event loop. A plain ``def`` runs in a worker
        thread (at most ``max_workers`` of them), so blocking calls are fine; report
        progress from it with ``job.progress_sync(data)`` or ``snerd.embedded.progress(data)``.
        A thread cannot be killed: past ``max_execution_seconds`` the attempt fails (and
        retries) at once, but the thread runs on, its return value ignored, and holds
        one of the ``max_workers`` slots until it returns."""

        def register(function: Handler) -> Handler:
            self._handlers.handlers[task_type] = function
            if self._started:
                self.engine.wake()
            return function

        return register

    @strict_keywords
    def task(
        self,
        *,
        name: str | None = None,
        max_retries: int | None = None,
        retry_after_hours: float | None = None,
        retry_backoff: str | None = None,
        retry_max_delay: float | None = None,
        urgency_score: float | None = None,
        rate_limit_group: str | None = None,
        max_per_minute: int | None = None,
        auto_dedupe: bool | None = None,
        max_execution_seconds: float | None = None,
        pool: str | None = None,
    ) -> TaskDecorator:
        """Decorator: make a function (``async def`` or ``def``) a task of this queue,
        of type ``name`` (default ``module.qualname``), with these enqueue options by
        default. ``await f.enqueue(*args, **kwargs)`` (or ``f.delay``) enqueues a call
        under a fresh time-ordered id and returns a handle (``.id``, ``await
        .result()``); ``f.options(id=..., urgency_score=..., ...)`` sets per-call
        options. See :mod:`snerd.tasks`."""
        options = TaskOptions(
            max_retries=max_retries, retry_after_hours=retry_after_hours,
            retry_backoff=retry_backoff, retry_max_delay=retry_max_delay,
            urgency_score=urgency_score, rate_limit_group=rate_limit_group,
            max_per_minute=max_per_minute, auto_dedupe=auto_dedupe,
            max_execution_seconds=max_execution_seconds, pool=pool,
        )  # fmt: skip
        return TaskDecorator(self, name, options)

    def new_id(self) -> str:
        """A fresh task id: time-ordered (on this queue's clock) and sortable."""
        return self._ids(self.engine.clock.now())

    def on_progress(self, callback: ProgressCallback) -> ProgressCallback:
        """Decorator: called with (task_id, data) for every progress update seen."""
        self._callbacks.progress.append(callback)
        return callback

    def on_dead_letter(self, callback: DeadLetterCallback) -> DeadLetterCallback:
        """Decorator: called with the dead_lettered record this queue wrote."""
        self._callbacks.dead.append(callback)
        return callback

    @property
    def task_types(self) -> list[str]:
        """The task types this queue has handlers for, sorted."""
        return sorted(self._handlers.handlers)

    def configure(
        self, *, storage: str | None = None, max_workers: int | None = None,
        pools: dict[str, int] | None = None,
    ) -> None:  # fmt: skip
        """Before :meth:`start`: run on another storage directory, with ``max_workers``
        attempts (and handler threads) at most, and these pools added (``snerdmq worker``'s
        ``--storage``, ``--concurrency``, ``--pool``). Handlers and callbacks stay."""
        if self._started:
            raise DispatchError("configure() must be called before the queue starts")
        log, liveness = self.engine.log, self.engine.liveness
        if storage is not None:
            if self._given_log:
                raise DispatchError("this queue runs on the log it was given, not on a storage")
            log, liveness = open_log(storage, fsync=self._fsync), open_liveness(storage)
            self.storage = storage
        if max_workers is not None:
            if max_workers < 1:
                raise ValueError(f"max_workers must be at least 1, got {max_workers}")
            self._config = dc_replace(self._config, max_workers=max_workers)
            self._handlers.threads = max_workers
        if pools:
            self._config = dc_replace(self._config, pools={**self._config.pools, **pools})
        self._assemble(log, self.engine.clock, liveness)

    # --- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        if not self._started:
            await self.engine.start()
            self._started = True

    async def close(self, *, timeout: float | None = None) -> None:
        """Finish running attempts (up to ``timeout`` s), release the rest, close."""
        if self._started:
            await self.engine.drain(timeout)
            self._handlers.shutdown()
            self._started = False

    async def __aenter__(self) -> Queue:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- commands -----------------------------------------------------------------------

    @strict_keywords
    async def enqueue(
        self,
        task_id: str,
        task_type: str,
        data: Any = None,
        *,
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
        webhook_url: str | None = None,
        max_execution_seconds: float | None = None,
        pool: str | None = None,
    ) -> str:
        """Durably enqueue; returns ``task_id``, or the id of the live duplicate when
        ``auto_dedupe`` dropped it. The options are the protocol's enqueue fields
        (``specs/protocol.md`` §3.1; None = the default there); ``execute_at`` is a
        datetime (naive = UTC), RFC 3339 text or epoch seconds. Raises
        :class:`~snerd.errors.ProtocolError` naming a bad value,
        :class:`~snerd.errors.DispatchError` for a refused enqueue, and ``TypeError``
        naming every unknown keyword (``urgency=`` for ``urgency_score=``)."""
        if isinstance(execute_at, dt.datetime):
            execute_at = execute_at.isoformat()
        options: dict[str, Any] = {
            "max_retries": max_retries, "retry_after_hours": retry_after_hours,
            "retry_backoff": retry_backoff, "retry_max_delay": retry_max_delay,
            "urgency_score": urgency_score, "execute_at": execute_at, "cron": cron,
            "trigger_after_ids": None if trigger_after_ids is None else list(trigger_after_ids),
            "rate_limit_group": rate_limit_group, "max_per_minute": max_per_minute,
            "auto_dedupe": auto_dedupe, "webhook_url": webhook_url,
            "max_execution_seconds": max_execution_seconds, "pool": pool,
        }  # fmt: skip
        given = {name: value for name, value in options.items() if value is not None}
        try:
            command = enqueue_command(task_id, task_type, data, **given)
        except OptionError as exc:
            raise ProtocolError(exc.message, field=exc.field, task_id=task_id) from None
        outcome = await self.engine.enqueue_soon(command)
        if isinstance(outcome, cmds.Refusal):
            raise DispatchError(outcome.message)
        if isinstance(outcome, cmds.Deduplicated):
            return outcome.duplicate_of
        if isinstance(outcome, cmds.UnknownParents):
            log.warning(
                "task %r: trigger_after_ids %s: neither live nor dead-lettered, so it does "
                "not wait for them (a mistyped id?)", task_id, ", ".join(outcome.ids)
            )  # fmt: skip
        return task_id

    async def cancel(self, task_id: str) -> None:
        _raise(await self.engine.cancel(task_id))

    async def requeue(self, key: str) -> None:
        _raise(await self.engine.requeue(key))

    async def purge(self, key: str) -> None:
        _raise(await self.engine.purge(key))

    def get(self, task_id: str) -> dict[str, Any] | None:
        return task_view(self.engine.state, task_id, now=self.engine.clock.now())

    async def lookup(self, task_id: str) -> dict[str, Any] | None:
        """:meth:`get`, and for a task that has left the queue (completed, cancelled,
        purged) its view read back from the stored history: ``status``, ``result``,
        ``attempts`` (each one's start, end, outcome and error), ``enqueuedAt``,
        ``finishedAt``. None when nothing names it (its archive may have been pruned)."""
        return await lookup(self.engine, task_id)

    async def result(self, task_id: str, *, timeout: float | None = None) -> Any:
        """Wait (up to ``timeout`` seconds: ``TimeoutError``) until the task completes
        and its success is durable, and return its handler's return value (None if it
        returned nothing). A task that ended otherwise raises
        :class:`~snerd.errors.TaskDeadLetteredError` or
        :class:`~snerd.errors.TaskCancelledError`; one the queue and its stored history
        do not know, :class:`~snerd.errors.UnknownTaskError`. Results are kept in the log
        and its archives (``specs/log-format.md``), not in memory. A cron task ends only
        when its schedule does: each occurrence's result is on its ``rescheduled`` line."""
        return await asyncio.wait_for(self._results.result(task_id), timeout)

    def stats(self) -> dict[str, Any]:
        return info.stats(self.engine)

    async def join(self, *, timeout: float | None = None) -> None:
        """Wait until no task that this queue can run is pending, running or due, and
        what its attempts decided is out: dead-letter notices sent (``on_dead_letter``),
        the children of a dead-lettered parent failed through.

        Tasks scheduled for later (or blocked on parents nobody here runs) do not
        count; use ``timeout`` to bound the wait.
        """

        changed = self.engine.changed

        async def idle() -> None:
            while self._busy():
                changed.clear()
                await changed.wait()

        await asyncio.wait_for(idle(), timeout)

    def _busy(self) -> bool:
        now = self.engine.clock.now()
        for task in self.engine.state.tasks.values():
            mine = task.type in self._handlers.handlers or bool(task.webhook_url)
            due = task.not_before is None or task.not_before <= now
            if mine and (task.phase in ("ready", "active") or (task.phase == "delayed" and due)):
                return True
        return bool(self.engine.runs) or self.engine.settling


def progress(data: Any) -> asyncio.Task[None] | None:
    """Report progress from inside a handler without holding the Job object: from an
    ``async def`` handler it is scheduled (a task is returned); from a sync handler's
    thread it is recorded before this returns (None)."""
    job: Job | None = current_job.get()
    if job is None:
        raise DispatchError("snerd.progress() must be called inside a task handler")
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        job.progress_sync(data)
        return None
    return loop.create_task(job.progress(data))


def _raise(refusal: cmds.Refusal | None) -> None:
    if refusal is not None:
        raise DispatchError(refusal.message)
