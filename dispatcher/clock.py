"""Time for the shell: wall-clock now, and wake-ups scheduled on the event loop.

Everything time-dependent in the dispatcher (execute_at, cron, backoff, rate
windows, timeouts, leases) reads :meth:`Clock.now` and waits with
:meth:`Clock.call_at`, so tests drive it with :class:`ManualClock` and no sleeps.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the Unix epoch."""

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` on the event loop once ``now() >= when``."""


async def sleep(clock: Clock, seconds: float) -> None:
    """Wait ``seconds`` on ``clock``: the dispatcher's backoffs (a pass or an outcome
    the storage refused, a liveness lock not confirmed) wait on the same clock as
    everything else, so a :class:`ManualClock` drives them too."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake() -> None:
        if not done.done():
            done.set_result(None)

    timer = clock.call_at(clock.now() + seconds, wake)
    try:
        await done
    finally:
        timer.cancel()


class SystemClock:
    """The real wall clock."""

    now = staticmethod(time.time)
    """Seconds since the Unix epoch (``time.time`` itself: no frame of ours, as the engine
    asks several times a task)."""

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        loop = asyncio.get_running_loop()
        return loop.call_later(max(0.0, when - time.time()), callback)


class _ManualTimer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that moves only when told to; due callbacks run on :meth:`advance`."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _ManualTimer, Callable[[], None]]] = []
        self._ids = itertools.count()

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        """``callback`` at ``when``: on the :meth:`advance` that reaches it, or, for an
        instant already reached, on the loop's next turn, as :class:`SystemClock`'s
        (a timer armed for a past instant otherwise waited for the next advance)."""
        timer = _ManualTimer()
        if when <= self._now:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop (a synchronous test): the next advance runs it
                pass
            else:
                loop.call_soon(_unless_cancelled, timer, callback)
                return timer
        heapq.heappush(self._timers, (when, next(self._ids), timer, callback))
        return timer

    def advance(self, seconds: float) -> None:
        """Move time forward and run every callback that became due, in time order."""
        self.set(self._now + seconds)

    def set(self, instant: float) -> None:
        self._now = max(self._now, instant)
        while self._timers and self._timers[0][0] <= self._now:
            _, _, timer, callback = heapq.heappop(self._timers)
            _unless_cancelled(timer, callback)


def _unless_cancelled(timer: _ManualTimer, callback: Callable[[], None]) -> None:
    if not timer.cancelled:
        callback()
