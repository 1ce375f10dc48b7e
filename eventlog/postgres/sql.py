"""The statements of :class:`~snerd.eventlog.postgres.log.PostgresLog` (all parameterized).

Written with psycopg's placeholders; a batch's own (``LOCK``, ``READ``, ``APPEND``, ...)
go through :mod:`~snerd.eventlog.postgres.wire`, which numbers them ``$1``, ``$2``, ..."""

from __future__ import annotations

from snerd.eventlog.postgres.schema import SCHEMA

READ_BATCH = 10_000
"""Rows fetched per catch-up query."""

LOCK = "SELECT pg_advisory_xact_lock(%s)"
READ = (
    f"SELECT q.generation, l.pos, l.line FROM {SCHEMA}.queues q"
    f" LEFT JOIN LATERAL (SELECT pos, line FROM {SCHEMA}.log"
    f"   WHERE queue = q.queue AND pos > %(pos)s ORDER BY pos LIMIT {READ_BATCH}) l ON true"
    " WHERE q.queue = %(queue)s ORDER BY l.pos"
)
"""The queue's generation and the next lines after ``pos``, in one snapshot."""

# The lines' array goes as %b (binary): %s would send it as a hex-encoded text array,
# twice the bytes, and the server's parsing (benchmarks/README.md, bench_pg).
INSERT = (
    f"INSERT INTO {SCHEMA}.log (queue, pos, line)"
    " SELECT %s, %s + t.n, t.line FROM unnest(%b::bytea[]) WITH ORDINALITY AS t(line, n)"
)
NOTIFY = "SELECT pg_notify(%s, %s)"
APPEND = f"WITH appended AS ({INSERT}) SELECT pg_notify(%s, %s)"
"""A batch's lines and its notification in one statement (one statement fewer per
batch): a data-modifying ``WITH`` runs exactly once and to completion whether or not
the outer ``SELECT`` reads it."""
TOUCH_XID = "SELECT pg_current_xact_id()"
"""Gives an empty transaction an id, so that its commit waits for the WAL to reach disk:
a durable "sync" of the lines committed earlier with ``synchronous_commit = off``."""
ASYNC_COMMIT = "SET LOCAL synchronous_commit = off"

ARCHIVE_NAMES = f"SELECT name FROM {SCHEMA}.archives WHERE queue = %s AND ts_ms = %s"
ARCHIVE_HEAD = f"INSERT INTO {SCHEMA}.archives (queue, name, ts_ms, bytes) VALUES (%s, %s, %s, %s)"

# A compaction copies the old rows into its archive before it takes the queue's lock
# (``specs/log-storage.md`` §12): under a lock of its own (``COMPACT_LOCK``, held by a
# connection of its own for the whole compaction), in a transaction of its own, the rows
# read so far go into an archive whose head says ``bytes = -1`` (PENDING: no reader
# lists it); under the queue's lock, only the rows after them are copied, and the head
# gets its size. A pending head is a compaction in progress, or one that died: the next
# compaction (holding COMPACT_LOCK, so none is in progress) deletes those first.
PENDING: int = -1
COMPACT_LOCK = "SELECT pg_try_advisory_lock(%s)"
DROP_PENDING = f"DELETE FROM {SCHEMA}.archives WHERE queue = %s AND bytes = {PENDING}"
ARCHIVE_PENDING = (
    f"INSERT INTO {SCHEMA}.archives (queue, name, ts_ms, bytes) VALUES (%s, %s, %s, {PENDING})"
)
ARCHIVE_UPTO = (
    f"INSERT INTO {SCHEMA}.archive_log (queue, name, pos, line)"
    f" SELECT queue, %s, pos, line FROM {SCHEMA}.log WHERE queue = %s AND pos <= %s"
    f" AND (SELECT generation FROM {SCHEMA}.queues WHERE queue = %s) = %s"
)
"""The rows up to a pos, if the queue is still at that generation (one snapshot)."""
ARCHIVE_AFTER = (
    f"INSERT INTO {SCHEMA}.archive_log (queue, name, pos, line)"
    f" SELECT queue, %s, pos, line FROM {SCHEMA}.log WHERE queue = %s AND pos > %s"
)
ARCHIVE_DONE = f"UPDATE {SCHEMA}.archives SET bytes = %s WHERE queue = %s AND name = %s"
DROP_ARCHIVE_PENDING = (
    f"DELETE FROM {SCHEMA}.archives WHERE queue = %s AND name = %s AND bytes = {PENDING}"
)
LISTED = f"bytes <> {PENDING}"
"""The condition of an archive that readers list (a pending one is not there yet)."""
CLEAR = f"DELETE FROM {SCHEMA}.log WHERE queue = %s"
COPY_TAIL = (
    f"INSERT INTO {SCHEMA}.log (queue, pos, line)"
    f" SELECT queue, pos - %s + %s, line FROM {SCHEMA}.archive_log"
    " WHERE queue = %s AND name = %s AND pos > %s"
)
BUMP = (
    f"UPDATE {SCHEMA}.queues SET generation = generation + 1 WHERE queue = %s"
    " RETURNING generation"
)
ARCHIVE_SIZES = (
    f"SELECT name, ts_ms, bytes FROM {SCHEMA}.archives WHERE queue = %s AND {LISTED}"
    " ORDER BY name"
)
DROP_ARCHIVE = f"DELETE FROM {SCHEMA}.archives WHERE queue = %s AND name = %s"
