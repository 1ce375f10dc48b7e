"""PostgreSQL for the tests: where it is, a fresh queue per test, cleanup after.

The server is ``$SNERD_TEST_PG_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``,
what the development machines and ``.ci/run`` provide). Under CI (``CI`` set) a test
that needs it fails when no server answers; locally it is skipped, with the reason.
"""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from urllib.parse import urlencode

import pytest

PG_URL = os.environ.get("SNERD_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")

TABLES = ("archive_log", "archives", "log", "daemons", "queues")


@functools.cache
def _why_unavailable() -> str | None:
    try:
        import psycopg
    except ImportError as exc:
        return f"psycopg is not installed ({exc})"
    try:
        with psycopg.connect(PG_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"no PostgreSQL answers at {PG_URL} ({str(exc).strip().splitlines()[0]})"
    return None


@functools.cache
def _vacuum() -> None:
    """Once per session, before the first PostgreSQL test: vacuum our tables.

    The tests delete what they write (:func:`drop_queue`), but deleted rows stay in the
    tables and their indexes until a vacuum, and a test server may run without
    autovacuum (the development VMs' does): after a few dozen runs ``snerd.log`` held
    280k dead rows for 1.3k live ones, and the PostgreSQL-heavy test files ran ~15%
    slower (10.97 s against 9.1-9.7 s vacuumed), more with every run. Not our tables'
    owner: left as they are."""
    import psycopg

    with contextlib.suppress(psycopg.Error), psycopg.connect(PG_URL, autocommit=True) as conn:
        found = conn.execute("SELECT to_regclass('snerd.log')").fetchone()
        if found is not None and found[0] is not None:
            conn.execute("VACUUM " + ", ".join(f"snerd.{table}" for table in TABLES))


def require_pg() -> None:
    """Fail (under CI) or skip loudly (locally) when PostgreSQL is not reachable."""
    why = _why_unavailable()
    if why is None:
        _vacuum()
        return
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL tests must run under CI: {why}", pytrace=False)
    pytest.skip(f"SKIPPING POSTGRESQL TESTS: {why} (set SNERD_TEST_PG_URL)")


def queue_url(queue: str) -> str:
    sep = "&" if "?" in PG_URL else "?"
    return f"{PG_URL}{sep}{urlencode({'queue': queue})}"


def fresh_queue() -> str:
    return f"t{uuid.uuid4().hex[:16]}"


def drop_queue(queue: str) -> None:
    """Delete every row of ``queue`` in our schema (the schema itself stays)."""
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        exists = conn.execute("SELECT to_regclass('snerd.queues')").fetchone()
        if exists is None or exists[0] is None:
            return
        for table in TABLES:
            conn.execute(f"DELETE FROM snerd.{table} WHERE queue = %s", (queue,))


def inject(queue: str, raw: bytes) -> None:
    """Append raw lines to ``queue``'s live log, bypassing the log (tests: garbage)."""
    from snerd.eventlog.postgres.connect import connect_sync, ensure_schema_sync
    from snerd.eventlog.postgres.schema import lock_key
    from snerd.eventlog.postgres.url import parse

    lines = [line + b"\n" for line in raw.split(b"\n") if line]
    conn = connect_sync(parse(queue_url(queue)))
    try:
        ensure_schema_sync(conn, queue)
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key("log", queue),))
            row = conn.execute(
                "SELECT coalesce(max(pos), 0) FROM snerd.log WHERE queue = %s", (queue,)
            ).fetchone()
            start = 0 if row is None else int(row[0])
            for i, line in enumerate(lines, 1):
                conn.execute(
                    "INSERT INTO snerd.log (queue, pos, line) VALUES (%s, %s, %s)",
                    (queue, start + i, line),
                )
            conn.execute("SELECT pg_notify('snerd_log', %s)", (f"{queue} inject",))
    finally:
        conn.close()
