"""A queue's rows read and written whole, for ``snerdmq migrate`` (blocking)."""

from __future__ import annotations

import psycopg

from snerd.errors import LogError
from snerd.eventlog.postgres.connect import connect_sync, ensure_schema_sync, unavailable
from snerd.eventlog.postgres.history import raw_lines
from snerd.eventlog.postgres.schema import CHANNEL, SCHEMA, lock_key, notify_payload
from snerd.eventlog.postgres.sql import ARCHIVE_HEAD, DROP_PENDING, INSERT, LISTED
from snerd.eventlog.postgres.url import parse

_ARCHIVES = f"SELECT name FROM {SCHEMA}.archives WHERE queue = %s AND {LISTED} ORDER BY name"
_ANY = (
    f"SELECT EXISTS (SELECT 1 FROM {SCHEMA}.log WHERE queue = %s)"
    f" OR EXISTS (SELECT 1 FROM {SCHEMA}.archives WHERE queue = %s AND {LISTED})"
)
"""Whether the queue holds anything (a pending archive, left by a compaction that died
on an otherwise empty queue, does not count: it is dropped on install)."""
_ARCHIVE_LINES = (
    f"INSERT INTO {SCHEMA}.archive_log (queue, name, pos, line)"
    " SELECT %s, %s, t.n, t.line FROM unnest(%s::bytea[]) WITH ORDINALITY AS t(line, n)"
)

Archives = list[tuple[str, list[bytes]]]


def read_queue(url: str) -> tuple[Archives, list[bytes]]:
    """(archives as (name, lines), live lines) of the queue ``url`` names, one snapshot."""
    target = parse(url)
    try:
        with connect_sync(target) as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            if conn.execute("SELECT to_regclass(%s)", (f"{SCHEMA}.queues",)).fetchone() == (None,):
                return [], []
            names = [r[0] for r in conn.execute(_ARCHIVES, (target.queue,))]
            archives = [(name, raw_lines(conn, target.queue, name)) for name in names]
            return archives, raw_lines(conn, target.queue, None)
    except psycopg.Error as exc:
        raise unavailable(target, exc) from exc


def write_queue(url: str, archives: Archives, live: list[bytes]) -> None:
    """Install ``archives`` and ``live`` as the queue ``url`` names, in one transaction
    under the queue's lock; LogError if that queue already has rows."""
    target = parse(url)
    try:
        with connect_sync(target) as conn:
            ensure_schema_sync(conn, target.queue)
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key("log", target.queue),))
                row = conn.execute(_ANY, (target.queue, target.queue)).fetchone()
                if row is not None and row[0]:
                    raise LogError(f"{target.display} already holds a queue; migrate only into"
                                   " an empty one")  # fmt: skip
                conn.execute(DROP_PENDING, (target.queue,))
                for name, lines in archives:
                    ts = _archive_ts(name)
                    conn.execute(ARCHIVE_HEAD, (target.queue, name, ts, sum(map(len, lines))))
                    conn.execute(_ARCHIVE_LINES, (target.queue, name, lines))
                conn.execute(INSERT, (target.queue, 0, live))
                conn.execute("SELECT pg_notify(%s, %s)",
                             (CHANNEL, notify_payload(target.queue, "migrate")))  # fmt: skip
    except psycopg.Error as exc:
        raise unavailable(target, exc) from exc


def _archive_ts(name: str) -> int:
    """The compaction time in an archive's name (``tasks-<ms>-<seq>.log``), else 0."""
    parts = name.split("-")
    return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else 0
