"""Wake-ups when a file in a directory may have changed.

On Linux an inotify descriptor on the directory (``IN_MODIFY``, ``IN_MOVED_TO``,
``IN_CREATE``) is registered with the event loop, so a follower sleeps until the
kernel says the log grew or was replaced. Elsewhere, or if inotify cannot be set up,
:class:`PollWatcher` wakes every ``interval`` seconds. Either way a wake-up is only a
hint: the follower checks the file itself, so spurious wake-ups are harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

try:  # Linux only
    import inotify_simple
except ImportError:  # pragma: no cover - non-Linux platforms
    inotify_simple = None

INOTIFY_AVAILABLE = inotify_simple is not None
"""Whether inotify may be tried; tests set it to False to exercise polling."""


def _give_inotify_simple_libc() -> None:
    """inotify_simple loads the C library on its first ``INotify()`` with
    ``ctypes.util.find_library("c")``, which runs ``ldconfig -p`` in a child process: a
    fork of the whole daemon at every start-up (~5 ms here). The C library is already in the
    process (Python runs on it), so hand inotify_simple that one: ``dlopen(NULL)``, the
    symbols the process has loaded, ``inotify_init1`` and ``read`` among them."""
    if inotify_simple is not None and getattr(inotify_simple, "_libc", None) is None:
        inotify_simple._libc = ctypes.CDLL(None, use_errno=True)

SAFETY_INTERVAL = 1.0
"""With inotify, also wake this often: inotify misses writes made by other hosts
on a shared network volume, and a missed event must not stall a follower forever."""


_READ_BYTES = 1 << 16
"""Raw inotify events read per wake-up (what is left wakes the loop again)."""


class Watcher(Protocol):
    """Something a follower awaits between checks of the log."""

    async def wait(self) -> None:
        """Return when the watched file may have changed (or on a timeout)."""

    def forget_pending(self) -> None:
        """Drop the change events queued so far. Only for a writer that holds the log's
        lock and has read the file to its end: every change they can stand for is read
        (others wrote before the lock was granted) or its own (the append just made)."""

    def close(self) -> None:
        """Stop watching; idempotent."""


class PollWatcher:
    """Wakes every ``interval`` seconds."""

    def __init__(self, interval: float) -> None:
        self._interval = interval

    async def wait(self) -> None:
        await asyncio.sleep(self._interval)

    def forget_pending(self) -> None:
        pass

    def close(self) -> None:
        pass


class InotifyWatcher:
    """Wakes when the kernel reports a change to ``name`` inside ``directory``.

    ``worth_waking`` (optional) is asked when an event arrives; returning False
    drops it (e.g. the change is the follower's own append, already accounted for).
    """

    def __init__(
        self,
        directory: Path,
        name: str,
        *,
        safety_interval: float,
        worth_waking: Callable[[], bool] | None = None,
    ) -> None:
        assert inotify_simple is not None
        self._name = name
        self._needle = os.fsencode(name) + b"\0"
        self._worth_waking = worth_waking
        self._safety = safety_interval
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        _give_inotify_simple_libc()
        self._inotify: Any = inotify_simple.INotify(nonblocking=True)
        f = inotify_simple.flags
        self._wd = self._inotify.add_watch(os.fspath(directory), f.MODIFY | f.MOVED_TO | f.CREATE)
        self._fd: int = self._inotify.fileno()
        self._loop.add_reader(self._fd, self._on_readable)

    def _on_readable(self) -> None:
        # The raw events, not parsed: a name is NUL-terminated (and NUL-padded) in its
        # event, so whether ours is among them is one search. A false match only wakes
        # the follower, which checks the file itself.
        try:
            raw: bytes | None = os.read(self._fd, _READ_BYTES)
        except BlockingIOError:  # drained already
            return
        except OSError:  # the descriptor went away under us: fall back to waking
            raw = None
        if raw is not None and self._needle not in raw:
            return
        if raw is not None and self._worth_waking is not None and not self._worth_waking():
            return
        self._event.set()

    def forget_pending(self) -> None:
        """Read the queued events and drop them: a writer's own append then costs the
        event loop no wake-up (nor a ``worth_waking`` check)."""
        if self._fd < 0:
            return
        try:
            while len(os.read(self._fd, _READ_BYTES)) == _READ_BYTES:
                pass
        except OSError:  # drained (EAGAIN), or gone: a wake-up stays a hint either way
            pass

    async def wait(self) -> None:
        timer = self._loop.call_later(self._safety, self._event.set)
        try:
            await self._event.wait()
        finally:
            timer.cancel()
        self._event.clear()

    def close(self) -> None:
        """Stop watching at once; the descriptor itself is closed off the caller's path.

        Closing an inotify descriptor that still has a watch waits, in the kernel, for
        the watch to be retired (an RCU grace period: up to ~15 ms, a quarter of the
        time here), which every daemon's exit and every ``Queue`` close would pay.
        Removing the watch first lets the kernel retire it in the background, and a
        short-lived thread closes the descriptor (a close right after the removal would
        still wait)."""
        if self._fd < 0:
            return
        with contextlib.suppress(Exception):
            self._loop.remove_reader(self._fd)
        with contextlib.suppress(OSError):  # gone with its directory already
            self._inotify.rm_watch(self._wd)
        self._fd = -1
        threading.Thread(target=_close_quietly, args=(self._inotify,), daemon=True,
                         name="snerd-inotify-close").start()  # fmt: skip


def _close_quietly(inotify: Any) -> None:
    with contextlib.suppress(OSError):
        inotify.close()


def watch(
    directory: Path,
    name: str,
    *,
    poll_interval: float,
    safety_interval: float = SAFETY_INTERVAL,
    worth_waking: Callable[[], bool] | None = None,
) -> Watcher:
    """An inotify watcher if possible, else a poller (must run inside the event loop)."""
    if INOTIFY_AVAILABLE:
        try:
            return InotifyWatcher(
                directory, name, safety_interval=safety_interval, worth_waking=worth_waking
            )
        except (OSError, NotImplementedError, RuntimeError):
            pass
    return PollWatcher(poll_interval)
