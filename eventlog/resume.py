"""The rest of a coroutine run by hand until its first wait, as a task's coroutine.

Kept apart from ``batching.py``, which a wheel compiles: mypyc compiles a generator
that drives a task by hand into one whose task never resumes
(``tests/test_compiled_build.py``).

A native coroutine (``async def``) awaiting a plain generator, not a ``types.coroutine``
generator: from Python 3.12 on, ``asyncio`` takes only a coroutine object for a task
(``create_task`` of a generator raises ``TypeError``), which killed the writer the first
time it had to wait (a contended lock, an ``fsync`` in the pool)."""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from typing import Any


async def resumed(drain: Coroutine[Any, Any, None], awaited: Any) -> None:
    """The rest of a coroutine that :meth:`BatchingLog._start_writer` ran by hand until
    it awaited ``awaited`` (what it yielded to the loop): a task runs this as it would
    have run the coroutine from there, cancellation included."""
    await _Rest(drain, awaited)


class _Rest:
    """An awaitable whose iterator is :func:`_rest` (``await`` delegates to it as
    ``yield from`` does: what it yields goes to the task, what the task throws in comes
    back to it)."""

    __slots__ = ("awaited", "drain")

    def __init__(self, drain: Coroutine[Any, Any, None], awaited: Any) -> None:
        self.drain = drain
        self.awaited = awaited

    def __await__(self) -> Generator[Any, None, None]:
        return _rest(self.drain, self.awaited)


def _rest(drain: Coroutine[Any, Any, None], awaited: Any) -> Generator[Any, None, None]:
    while True:
        try:
            yield awaited
        except BaseException as exc:  # thrown in by the task (a cancellation)
            try:
                awaited = drain.throw(exc)
            except StopIteration:
                return
            continue
        try:
            awaited = drain.send(None)
        except StopIteration:
            return
