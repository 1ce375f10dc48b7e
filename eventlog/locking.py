"""Cross-process exclusive locks on a file descriptor (flock through portalocker).

On POSIX the hot path calls ``fcntl.flock`` directly (what portalocker does, minus
its per-call overhead); portalocker covers the blocking wait and other platforms.
A flock belongs to an open file description: two descriptors opened separately
conflict even inside one process, which is what lets several log instances in one
process (and the tests) behave like several processes. The event loop never blocks:
an uncontended lock is taken with a non-blocking try, a contended one in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib

import portalocker

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: portalocker's own locker
    fcntl = None  # type: ignore[assignment]

_EX_NB = portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING
_EX = portalocker.LockFlags.EXCLUSIVE


def try_lock(fd: int) -> bool:
    """Take the exclusive lock on ``fd`` if nobody holds it; never blocks."""
    if fcntl is not None:  # the hot path: flock directly, as portalocker would
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True
    try:  # pragma: no cover
        portalocker.lock(fd, _EX_NB)
    except portalocker.AlreadyLocked:
        return False
    return True


def lock_blocking(fd: int) -> None:
    """Take the exclusive lock on ``fd``, waiting as long as it takes (call in a thread)."""
    portalocker.lock(fd, _EX)


def unlock(fd: int) -> None:
    """Release the lock on ``fd`` (a no-op if ``fd`` was closed meanwhile)."""
    if fcntl is not None:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        return
    with contextlib.suppress(OSError, portalocker.LockException):  # pragma: no cover
        portalocker.unlock(fd)


async def acquire(fd: int) -> None:
    """Take the exclusive lock on ``fd`` without blocking the event loop.

    If the caller is cancelled while the thread still waits, the lock is released
    as soon as the thread gets it, so a cancelled wait never leaks the lock.
    """
    if try_lock(fd):
        return
    waiter = asyncio.ensure_future(asyncio.to_thread(lock_blocking, fd))
    try:
        await asyncio.shield(waiter)
    except asyncio.CancelledError:
        waiter.add_done_callback(lambda t: _release_if_taken(t, fd))
        raise


def _release_if_taken(task: asyncio.Future[None], fd: int) -> None:
    if not task.cancelled() and task.exception() is None:
        unlock(fd)
