"""Which daemons sharing a storage are alive, through one lock file each.

A daemon holds an exclusive flock on ``tasks/daemons/<daemon_id>.lock`` for as long
as it runs; the kernel drops the lock when the process dies, however it dies. So a
checker that *can* take the lock knows the holder is gone: it deletes the stale file
(while holding the lock) and releases it at once.

Lock-file dance: a holder takes the lock and then checks that the path still names
the file it locked; if a checker deleted it in between, the holder starts over. This
keeps "the path exists and is locked" equivalent to "the daemon is alive".
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from snerd.errors import LogError
from snerd.eventlog import locking
from snerd.eventlog.layout import resolve

_FLAGS = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
_ATTEMPTS = 20


class Liveness:
    """Liveness locks of the daemons on one storage (blocking calls; they are quick)."""

    def __init__(self, storage: str | os.PathLike[str]) -> None:
        self.layout = resolve(storage)
        self._held: dict[str, int] = {}

    def hold(self, daemon_id: str) -> None:
        """Take ``daemon_id``'s lock until :meth:`release`; LogError if someone holds it."""
        if daemon_id in self._held:
            return
        path = self.layout.daemon_lock(daemon_id)
        self.layout.daemons_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(_ATTEMPTS):
            fd = os.open(path, _FLAGS, 0o644)
            if not locking.try_lock(fd):
                os.close(fd)
                if self._lock_held_elsewhere(path):
                    raise LogError(f"daemon_id {daemon_id!r} is held by a live process")
                continue  # a checker held it for an instant; try again
            if _same_file(fd, path):
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                self._held[daemon_id] = fd
                return
            os.close(fd)  # a checker deleted the stale file we opened; start over
        raise LogError(f"could not take the liveness lock of {daemon_id!r}")

    def _lock_held_elsewhere(self, path: Path) -> bool:
        """Whether a live holder (not a passing checker) owns ``path``."""
        for _ in range(_ATTEMPTS):
            try:
                fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                return False
            try:
                if locking.try_lock(fd):
                    return False
            finally:
                os.close(fd)
            time.sleep(0.0005)  # a checker holds the lock for microseconds
        return True

    def release(self, daemon_id: str | None = None) -> None:
        """Release ``daemon_id`` (default: every id this object holds); deletes the file."""
        ids = [daemon_id] if daemon_id is not None else list(self._held)
        for d in ids:
            fd = self._held.pop(d, -1)
            if fd < 0:
                continue
            try:
                if _same_file(fd, self.layout.daemon_lock(d)):
                    self.layout.daemon_lock(d).unlink()
            except OSError:
                pass
            locking.unlock(fd)
            os.close(fd)

    def holds(self, daemon_id: str) -> bool:
        """Whether this object holds ``daemon_id``."""
        return daemon_id in self._held

    def confirm(self, daemon_id: str) -> None:
        """Make sure ``daemon_id``'s lock is ours now. The kernel keeps a live process's
        flock, but a lock file deleted by hand makes the daemon look dead to others:
        then take a new one. LogError if ``daemon_id`` is not held here."""
        fd = self._held.get(daemon_id)
        if fd is None:
            raise LogError(f"daemon_id {daemon_id!r} is not held here")
        if _same_file(fd, self.layout.daemon_lock(daemon_id)):
            return
        del self._held[daemon_id]
        os.close(fd)
        self.hold(daemon_id)

    def is_alive(self, daemon_id: str) -> bool:
        """Whether some process holds ``daemon_id``'s lock; cleans up a stale file."""
        if daemon_id in self._held:
            return True
        path = self.layout.daemon_lock(daemon_id)
        try:
            fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return False
        try:
            if not locking.try_lock(fd):
                return True
            if _same_file(fd, path):
                path.unlink()  # stale: delete while holding the lock (see module doc)
            locking.unlock(fd)
            return False
        finally:
            os.close(fd)

    def list_daemons(self, *, alive_only: bool = False) -> list[str]:
        """Ids with a lock file, sorted; with ``alive_only`` only the live ones."""
        try:
            names = sorted(p.stem for p in self.layout.daemons_dir.glob("*.lock"))
        except OSError:
            return []
        if alive_only:
            return [n for n in names if self._alive_or_false(n)]
        return names

    def _alive_or_false(self, daemon_id: str) -> bool:
        try:
            return self.is_alive(daemon_id)
        except LogError:  # a stray file whose name is not a valid id
            return False


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False
