"""Which daemons on one PostgreSQL queue are alive: a session advisory lock each.

A daemon holds a session-level advisory lock keyed by (queue, daemon id) on a
connection of its own for as long as it runs; the server drops the lock when that
connection ends, however it ends (the process killed, the machine gone: TCP
keepalives notice within seconds). So a checker that *can* take the lock knows the
holder is gone (it releases it again at once), as with ``flock`` on files
(:mod:`snerd.eventlog.liveness`).

A daemon whose connection dropped counts as dead until it reconnects: others may
release its claims meanwhile; its late results for them are refused by attempt
number. A keeper thread checks the connection every :data:`KEEP_SECONDS` and, when it
was lost, reconnects with backoff and takes the locks again.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from pathlib import Path
from typing import Any

import psycopg

from snerd.errors import LogError
from snerd.eventlog.base import StorageUnavailable
from snerd.eventlog.layout import Layout
from snerd.eventlog.postgres.connect import connect_sync, ensure_schema_sync
from snerd.eventlog.postgres.schema import SCHEMA, lock_key
from snerd.eventlog.postgres.url import PgTarget, parse

log = logging.getLogger(__name__)

KEEP_SECONDS = 1.0
"""How often the keeper checks the liveness connection."""

LOCK_WAIT_SECONDS = 0.2
"""Longest :meth:`PgLiveness.is_alive` (called on the event loop) waits for the keeper."""

_TRY = "SELECT pg_try_advisory_lock(%s)"
_UNLOCK = "SELECT pg_advisory_unlock(%s)"
_PROBE = "SELECT CASE WHEN pg_try_advisory_lock(%s) THEN pg_advisory_unlock(%s) ELSE false END"
"""True when nobody held the lock (we took it and gave it back at once): the holder is gone."""
_REGISTER = (
    f"INSERT INTO {SCHEMA}.daemons (queue, daemon_id) VALUES (%s, %s)"
    " ON CONFLICT (queue, daemon_id) DO UPDATE SET since = now()"
)
_UNREGISTER = f"DELETE FROM {SCHEMA}.daemons WHERE queue = %s AND daemon_id = %s"
_SERVER_KEEPALIVES = (
    "SET tcp_keepalives_idle = 3",
    "SET tcp_keepalives_interval = 1",
    "SET tcp_keepalives_count = 3",
)
"""The server's side of the liveness connection: when a daemon's machine vanishes
(no FIN ever comes), its backend ends, and the lock with it, within seconds."""
_LIST = f"SELECT daemon_id FROM {SCHEMA}.daemons WHERE queue = %s ORDER BY daemon_id"


class PgLiveness:
    """Liveness locks of the daemons on one queue (blocking calls; they are quick)."""

    def __init__(self, url: str) -> None:
        self.target: PgTarget = parse(url)
        self.queue = self.target.queue
        self._held: set[str] = set()
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._keeper: threading.Thread | None = None

    def _key(self, daemon_id: str) -> int:
        _check_id(daemon_id)
        return lock_key("daemon", self.queue, daemon_id)

    def _connection(self) -> psycopg.Connection[tuple[Any, ...]]:
        """The liveness connection (reconnecting, and retaking held locks, if lost)."""
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        self._conn = None
        conn = connect_sync(self.target)
        try:
            for setting in _SERVER_KEEPALIVES:  # the server notices a vanished machine too
                conn.execute(setting)
            ensure_schema_sync(conn, self.queue)
            for daemon_id in sorted(self._held):
                self._take(conn, daemon_id)
        except BaseException:
            conn.close()
            raise
        if self._held:
            log.warning("liveness connection re-established; holding %s again",
                        ", ".join(sorted(self._held)))  # fmt: skip
        self._conn = conn
        return conn

    def _take(self, conn: psycopg.Connection[tuple[Any, ...]], daemon_id: str) -> None:
        row = conn.execute(_TRY, (self._key(daemon_id),)).fetchone()
        if row is None or not row[0]:
            raise LogError(f"daemon_id {daemon_id!r} is held by a live process")
        conn.execute(_REGISTER, (self.queue, daemon_id))

    def hold(self, daemon_id: str) -> None:
        """Take ``daemon_id``'s lock until :meth:`release`; LogError if someone holds it."""
        with self._lock:
            if daemon_id in self._held:
                return
            try:
                self._take(self._connection(), daemon_id)
            except psycopg.Error as exc:
                raise StorageUnavailable(f"liveness on {self.target.display}: {exc}") from exc
            self._held.add(daemon_id)
            if self._keeper is None:
                self._keeper = threading.Thread(
                    target=self._keep, name="snerd-pg-liveness", daemon=True
                )
                self._keeper.start()

    def release(self, daemon_id: str | None = None) -> None:
        """Release ``daemon_id`` (default: every id this object holds)."""
        with self._lock:
            ids = [daemon_id] if daemon_id is not None else sorted(self._held)
            for d in ids:
                if d not in self._held:
                    continue
                self._held.discard(d)
                conn = self._conn
                if conn is not None and not conn.closed:
                    with contextlib.suppress(psycopg.Error):
                        conn.execute(_UNREGISTER, (self.queue, d))
                        conn.execute(_UNLOCK, (self._key(d),))
            if not self._held:
                self._stop.set()
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
        keeper, self._keeper = self._keeper, None
        if keeper is not None and not self._held and keeper is not threading.current_thread():
            keeper.join(timeout=5)
            self._stop.clear()

    def holds(self, daemon_id: str) -> bool:
        return daemon_id in self._held

    def confirm(self, daemon_id: str) -> None:
        """Make sure ``daemon_id``'s lock is ours now: ask on the liveness connection
        and, if the session is gone (the lock with it), reconnect and take it again.
        StorageUnavailable while the database cannot be reached; LogError if another
        process took the id meanwhile."""
        with self._lock:
            if daemon_id not in self._held:
                raise LogError(f"daemon_id {daemon_id!r} is not held here")
            try:
                self._connection().execute("SELECT 1")
                return
            except psycopg.Error as exc:
                log.warning("liveness connection lost (%s); taking the lock again", exc)
                self._drop()
            try:
                self._connection()
            except psycopg.Error as exc:
                self._drop()
                raise StorageUnavailable(f"liveness on {self.target.display}: {exc}") from exc

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    def is_alive(self, daemon_id: str) -> bool:
        """Whether some session holds ``daemon_id``'s lock. When the database cannot
        be asked, the answer is "alive": claims are never released on a guess."""
        if daemon_id in self._held:
            return True
        key = self._key(daemon_id)
        if not self._lock.acquire(timeout=LOCK_WAIT_SECONDS):
            return True  # the keeper is reconnecting: ask again next round
        try:
            conn = self._conn
            if conn is None or conn.closed or conn.broken:
                if self._held:  # the keeper reconnects; the event loop does not wait for it
                    return True
                conn = self._connection()
            try:
                row = conn.execute(_PROBE, (key, key)).fetchone()
                dead = row is not None and bool(row[0])
                if dead:  # forget the dead daemon's registration
                    conn.execute(_UNREGISTER, (self.queue, daemon_id))
            except psycopg.Error as exc:
                log.warning("cannot tell whether %s is alive (%s); assuming it is", daemon_id,
                            exc)  # fmt: skip
                return True
        except StorageUnavailable as exc:
            log.warning("cannot tell whether %s is alive (%s); assuming it is", daemon_id, exc)
            return True
        finally:
            self._lock.release()
        return not dead

    def list_daemons(self, *, alive_only: bool = False) -> list[str]:
        """Ids that held a lock on this queue, sorted; with ``alive_only`` the live ones."""
        with self._lock:
            try:
                names = [r[0] for r in self._connection().execute(_LIST, (self.queue,))]
            except (psycopg.Error, StorageUnavailable):
                return []
        return [n for n in names if self.is_alive(n)] if alive_only else names

    def _keep(self) -> None:
        """Keeper thread: notice a lost connection and take the locks again."""
        backoff = KEEP_SECONDS
        while not self._stop.wait(backoff):
            with self._lock:
                if not self._held:
                    return
                try:
                    self._connection().execute("SELECT 1")
                    backoff = KEEP_SECONDS
                except (psycopg.Error, StorageUnavailable, LogError) as exc:
                    log.warning("liveness connection lost (%s); retrying", exc)
                    self._drop()
                    backoff = min(backoff * 2, 5.0)


def _check_id(daemon_id: str) -> None:
    """The same rule for ids as on files (LogError on an unsafe one)."""
    Layout(Path(".")).daemon_lock(daemon_id)
