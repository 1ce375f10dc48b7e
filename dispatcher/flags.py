"""A flag that wakes whoever waits for it (:class:`Flag`): ``asyncio.Event``'s ``set``,
``clear``, ``is_set`` and ``wait``, as a class the wheel compiles.

The engine sets its ``changed`` flag on every fold and every attempt's end, and asks
its dispatcher's whether a pass is due, three calls a task: an ``asyncio.Event`` is
Python code, which compiled code calls through the interpreter (~600 instructions a
call; ``benchmarks/README.md``, thirty-sixth session); a native ``set`` with nobody
waiting is a field read. Only for code that runs on one event loop, as the engine's.
"""

from __future__ import annotations

import asyncio


class Flag:
    """Set or clear; :meth:`wait` returns once it is set (at once if it is).
    ``raised``: how many times :meth:`set` found it clear (its wake-ups, for a test to
    count where it cannot wrap a method of a compiled class)."""

    __slots__ = ("_set", "_waiters", "raised")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[None]] = []
        self.raised = 0

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        """Set it, and wake every waiter (each sees it set, unless cleared before its
        turn: as ``asyncio.Event``, it then returns all the same)."""
        if self._set:
            return
        self._set = True
        self.raised += 1
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> bool:
        """Return True once it is set; a waiter cancelled is forgotten."""
        if self._set:
            return True
        waiter: asyncio.Future[None] = asyncio.Future(loop=asyncio.get_running_loop())
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self._waiters:  # (cancelled before a set took it)
                self._waiters.remove(waiter)
        return True
