"""Cross-process exclusive locks on a file descriptor (flock through portalocker).

On POSIX every call is ``fcntl.flock`` directly (what portalocker's POSIX locker
does, minus its per-call overhead); portalocker covers the other platforms. It is
imported only there: ``import portalocker`` resolves its version from installed
package metadata, which costs more than a tenth of a second at every daemon start.
A flock belongs to an open file description: two descriptors opened separately
conflict even inside one process, which is what lets several log instances in one
process (and the tests) behave like several processes. The event loop never blocks:
an uncontended lock is taken with a non-blocking try, a contended one in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: portalocker's own locker
    fcntl = None  # type: ignore[assignment]


def try_lock(fd: int) -> bool:
    """Take the exclusive lock on ``fd`` if nobody holds it; never blocks."""
    if fcntl is not None:  # the hot path: flock directly, as portalocker would
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True
    import portalocker  # pragma: no cover

    try:  # pragma: no cover
        portalocker.lock(fd, portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING)
    except portalocker.AlreadyLocked:
        return False
    return True


def lock_blocking(fd: int) -> None:
    """Take the exclusive lock on ``fd``, waiting as long as it takes (call in a thread)."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return
    import portalocker  # pragma: no cover

    portalocker.lock(fd, portalocker.LockFlags.EXCLUSIVE)  # pragma: no cover


def unlock(fd: int) -> None:
    """Release the lock on ``fd`` (a no-op if ``fd`` was closed meanwhile)."""
    if fcntl is not None:
        try:  # noqa: SIM105  (not contextlib.suppress: an object a call, once a batch)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            pass
        return
    import portalocker  # pragma: no cover

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
