"""The full history of a queue in PostgreSQL: every archive, then the live log.

The same items, in the same order, as :func:`snerd.eventlog.iter_history` gives for a
storage dir (the rows hold the same lines); blocking, for the tools.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg

from snerd.eventlog.base import Record, SkippedLine
from snerd.eventlog.chain import Lines, lines_of
from snerd.eventlog.codec import decode_complete
from snerd.eventlog.history import in_order, merge_history
from snerd.eventlog.postgres.connect import connect_sync, unavailable
from snerd.eventlog.postgres.schema import SCHEMA
from snerd.eventlog.postgres.sql import LISTED
from snerd.eventlog.postgres.url import PgTarget, parse

Item = Record | SkippedLine
CHUNK = 10_000

_ARCHIVES = f"SELECT name FROM {SCHEMA}.archives WHERE queue = %s AND {LISTED} ORDER BY name"
_ARCHIVE = (
    f"SELECT pos, line FROM {SCHEMA}.archive_log WHERE queue = %s AND name = %s AND pos > %s"
    f" ORDER BY pos LIMIT {CHUNK}"
)
_LIVE = (
    f"SELECT pos, line FROM {SCHEMA}.log WHERE queue = %s AND pos > %s"
    f" ORDER BY pos LIMIT {CHUNK}"
)


def iter_pg_history(url: str) -> Iterator[Item]:
    """Every record once (and every skipped line) of the queue ``url`` names."""
    target = parse(url)
    with _one_snapshot(target) as (conn, names):
        files = [_rows(conn, _ARCHIVE, (target.queue, name)) for name in names]
        files.append(_rows(conn, _LIVE, (target.queue,)))
        yield from merge_history(files)


def raw_logs(url: str) -> list[tuple[str, Lines]]:
    """Every archive (by name, oldest first), then the live log (``live``), each as
    its lines with their offsets (``chain.lines_of``): what ``replay --verify`` checks
    the chain through. One snapshot; the whole history in memory, as for files."""
    target = parse(url)
    with _one_snapshot(target) as (conn, names):
        return [(name or "live", lines_of(b"".join(raw_lines(conn, target.queue, name))))
                for name in [*names, None]]  # fmt: skip


@contextlib.contextmanager
def _one_snapshot(target: PgTarget) -> Iterator[tuple[psycopg.Connection[Any], list[str]]]:
    """A connection reading the queue's history in one snapshot, and its archives'
    names, oldest first (a database error: :func:`unavailable`)."""
    try:
        with connect_sync(target) as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            yield conn, [r[0] for r in conn.execute(_ARCHIVES, (target.queue,))]
    except psycopg.Error as exc:
        raise unavailable(target, exc) from exc


def live_records(url: str) -> Iterator[Item]:
    """The live log of the queue ``url`` names (what ``read_records`` is for a dir)."""
    target = parse(url)
    try:
        with connect_sync(target) as conn:
            yield from _rows(conn, _LIVE, (target.queue,))
    except psycopg.Error as exc:
        raise unavailable(target, exc) from exc


def _rows(conn: psycopg.Connection[Any], query: str, args: tuple[Any, ...]) -> Iterator[Item]:
    """The items of one log's rows, fetched in chunks, decoded like a file's lines."""
    pos, offset = 0, 0
    while True:
        rows = conn.cursor(binary=True).execute(query, (*args, pos)).fetchall()
        if not rows:
            return
        data = b"".join(bytes(r[1]) for r in rows)
        yield from in_order(decode_complete(data, offset))
        offset += len(data)
        pos = int(rows[-1][0])
        if len(rows) < CHUNK:
            return


def describe(url: str) -> tuple[bool, int, int]:
    """(whether the queue exists, bytes of its live log, number of archives)."""
    target = parse(url)
    try:
        with connect_sync(target) as conn:
            if conn.execute("SELECT to_regclass(%s)", (f"{SCHEMA}.queues",)).fetchone() == (None,):
                return False, 0, 0
            row = conn.execute(_DESCRIBE, (target.queue,) * 3).fetchone()
    except psycopg.Error as exc:
        raise unavailable(target, exc) from exc
    assert row is not None
    return bool(row[0]), int(row[1]), int(row[2])


_DESCRIBE = (
    f"SELECT EXISTS (SELECT 1 FROM {SCHEMA}.queues WHERE queue = %s),"
    f" (SELECT coalesce(sum(length(line)), 0) FROM {SCHEMA}.log WHERE queue = %s),"
    f" (SELECT count(*) FROM {SCHEMA}.archives WHERE queue = %s AND {LISTED})"
)


def raw_lines(conn: psycopg.Connection[Any], queue: str, archive: str | None) -> list[bytes]:
    """The lines, as stored, of the live log (``archive`` None) or of one archive."""
    query, args = (_LIVE, (queue,)) if archive is None else (_ARCHIVE, (queue, archive))
    out: list[bytes] = []
    pos = 0
    while True:
        rows = conn.cursor(binary=True).execute(query, (*args, pos)).fetchall()
        out.extend(bytes(r[1]) for r in rows)
        if len(rows) < CHUNK:
            return out
        pos = int(rows[-1][0])
