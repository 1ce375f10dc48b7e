"""Tasks' results: wait for a task to end, and read an ended task back from the log.

A success records the handler's return value on its line (``result``, see
``specs/log-format.md``). :class:`Results` hands it to a waiting caller once the line
is durable (successes are written without an fsync of their own: the waiter syncs the
log first). The live state forgets a task when it ends, so a task that ended before
anyone asked is read back from the stored history (:func:`lookup`), archives included.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from snerd.errors import (
    ResultError,
    TaskCancelledError,
    TaskDeadLetteredError,
    UnknownTaskError,
)
from snerd.projections import events as ev
from snerd.projections.delta import Delta
from snerd.projections.task import record_error
from snerd.projections.views.ended import ended_view
from snerd.projections.views.status import CANCELLED, COMPLETED, DEAD_LETTERED, ENDED
from snerd.projections.views.tasks import task_view

if TYPE_CHECKING:
    from snerd.dispatcher.engine import Engine


class Ended(NamedTuple):
    """How a task ended: ``state`` (completed, cancelled, dead_lettered), the success's
    ``result``, or the last ``error``."""

    state: str
    result: Any = None
    error: str | None = None


async def lookup(engine: Engine, task_id: str) -> dict[str, Any] | None:
    """The ``get`` view of a task: live or dead-lettered from the state, else (it ended
    or another process just enqueued it) from the stored history, read in a thread."""
    view = task_view(engine.state, task_id, now=engine.clock.now())
    if view is not None:
        return view
    return await asyncio.to_thread(
        lambda: ended_view(engine.log.history_about((task_id,)), task_id)
    )


class Results:
    """Callers waiting for tasks to end on one engine (an observer of its folds)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._waiting: dict[str, list[asyncio.Future[Ended | None]]] = {}
        engine.observers.append(self._observe)

    async def result(self, task_id: str) -> Any:
        """The task's result once it completed and the success is durable (None when
        its handler returned nothing). Raises :class:`~snerd.errors.TaskDeadLetteredError`,
        :class:`~snerd.errors.TaskCancelledError` or :class:`~snerd.errors.UnknownTaskError`."""
        ended = await self.ended(task_id)
        if ended.state == COMPLETED:
            await self.engine.log.sync()
            return ended.result
        raise _error(task_id, ended)

    async def ended(self, task_id: str) -> Ended:
        """How the task ended, waiting for it while it is live."""
        while True:
            state = self.engine.state
            if task_id in state.tasks:
                ended = await self._wait(task_id)
                if ended is not None:
                    return ended
                continue  # it left the state without an event saying how: read the log
            entry = state.dlq.get(task_id)
            if entry is not None:
                return Ended(DEAD_LETTERED, error=entry.error or entry.reason)
            view = await lookup(self.engine, task_id)
            if view is None:
                raise UnknownTaskError(f"no task {task_id!r} in the queue or its stored history",
                                       task_id=task_id)  # fmt: skip
            if view["status"] in ENDED:
                return Ended(view["status"], view.get("result"), record_error(view))
            await self.engine.log.catch_up()  # enqueued elsewhere, not folded here yet
            if task_id not in self.engine.state.tasks:
                self.engine.changed.clear()
                await self.engine.changed.wait()

    async def _wait(self, task_id: str) -> Ended | None:
        future: asyncio.Future[Ended | None] = asyncio.get_running_loop().create_future()
        waiters = self._waiting.setdefault(task_id, [])
        waiters.append(future)
        try:
            return await future
        finally:
            waiters.remove(future)
            if not waiters:
                self._waiting.pop(task_id, None)

    def _observe(self, events: Sequence[ev.Event], delta: Delta) -> None:
        if not self._waiting:
            return
        state = self.engine.state
        how: dict[str, Ended] = {}
        for event in events:
            if isinstance(event, ev.Succeeded):
                how[event.task_id] = Ended(COMPLETED, event.record.get(ev.F_RESULT))
            elif isinstance(event, ev.Cancelled):
                how[event.task_id] = Ended(CANCELLED)
            elif isinstance(event, ev.DeadLettered) and event.key == event.task_id:
                how[event.task_id] = Ended(DEAD_LETTERED, error=record_error(event.record))
        for task_id, waiters in self._waiting.items():
            if task_id in state.tasks and not delta.reset:
                continue
            for future in waiters:
                if not future.done():
                    future.set_result(how.get(task_id))


def _error(task_id: str, ended: Ended) -> ResultError:
    why = f": {ended.error}" if ended.error else ""
    if ended.state == CANCELLED:
        return TaskCancelledError(f"task {task_id!r} was cancelled", task_id=task_id,
                                  state=ended.state)  # fmt: skip
    return TaskDeadLetteredError(f"task {task_id!r} was dead-lettered{why}", task_id=task_id,
                                 state=ended.state, error=ended.error)  # fmt: skip
