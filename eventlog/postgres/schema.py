"""Our tables in PostgreSQL, created on first use (``specs/log-storage.md`` §12).

=========================  ====================================================
``snerd.version``          the schema version (one row), for later migrations
``snerd.queues``           one row per queue: its compaction ``generation``
``snerd.log``              the live log: ``(queue, pos)`` -> ``line`` (bytes of a log line)
``snerd.archives``         one row per compaction: archive name, time, size
``snerd.archive_log``      the lines of each archived log, as ``snerd.log`` held them
``snerd.daemons``          daemons that held a liveness lock on a queue
=========================  ====================================================

``pos`` numbers the lines of the live log 1, 2, ... (a compaction renumbers them);
``line`` is exactly the bytes FileLog writes, newline included, so both backends
hold the same records and checksums.
"""

from __future__ import annotations

import hashlib
import re

from snerd.errors import LogError

SCHEMA = "snerd"
VERSION = 1
CHANNEL = "snerd_log"
"""The NOTIFY channel; the payload names the queue (see :func:`notify_payload`)."""

_DDL = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE TABLE IF NOT EXISTS {SCHEMA}.version (
    version integer NOT NULL,
    installed_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.queues (
    queue text PRIMARY KEY,
    generation bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.log (
    queue text NOT NULL,
    pos bigint NOT NULL,
    line bytea NOT NULL,
    PRIMARY KEY (queue, pos)
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.archives (
    queue text NOT NULL,
    name text NOT NULL,
    ts_ms bigint NOT NULL,
    bytes bigint NOT NULL,
    PRIMARY KEY (queue, name)
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.archive_log (
    queue text NOT NULL,
    name text NOT NULL,
    pos bigint NOT NULL,
    line bytea NOT NULL,
    PRIMARY KEY (queue, name, pos),
    FOREIGN KEY (queue, name) REFERENCES {SCHEMA}.archives ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.daemons (
    queue text NOT NULL,
    daemon_id text NOT NULL,
    since timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, daemon_id)
);
"""

SETUP: list[str] = [
    "SELECT pg_advisory_xact_lock(%(key)s)",  # first users race: one creates, others wait
    *[s.strip() for s in _DDL.split(";") if s.strip()],
    f"INSERT INTO {SCHEMA}.version (version) SELECT %(version)s"
    f" WHERE NOT EXISTS (SELECT 1 FROM {SCHEMA}.version)",
]
"""Statements run in one transaction on first use (parameters: :func:`setup_params`)."""

SELECT_VERSION = f"SELECT max(version) FROM {SCHEMA}.version"

TABLES: tuple[str, ...] = tuple(re.findall(rf"CREATE TABLE IF NOT EXISTS {SCHEMA}\.(\w+)", _DDL))
"""Our tables, as :data:`SETUP` creates them."""

SELECT_CURRENT = (
    f"SELECT (SELECT max(version) FROM {SCHEMA}.version),"
    " (SELECT count(to_regclass(t)) FROM unnest(%s::text[]) AS t)"
)
"""One round trip that tells whether the schema is already in place (:func:`is_current`);
it fails with ``undefined_table`` where it was never created. Any change to the DDL
bumps :data:`VERSION`, so a current version and every table present mean nothing to do."""

ADD_QUEUE = f"INSERT INTO {SCHEMA}.queues (queue) VALUES (%s) ON CONFLICT DO NOTHING"


def setup_params() -> dict[str, int]:
    return {"key": lock_key("schema", SCHEMA), "version": VERSION}


def current_params() -> tuple[list[str]]:
    return ([f"{SCHEMA}.{table}" for table in TABLES],)


def is_current(found: int | None, tables: int) -> bool:
    """Whether :data:`SELECT_CURRENT`'s answer means the schema needs no setup (a newer
    version is refused first, as the setup would)."""
    check_version(found)
    return found == VERSION and tables == len(TABLES)


def check_version(found: int | None) -> None:
    """Refuse a schema written by a newer snerd (it may hold what we would misread)."""
    if found is not None and found > VERSION:
        raise LogError(
            f"the {SCHEMA} schema is at version {found}; this snerd knows version {VERSION}"
            " (upgrade snerd)"
        )


def lock_key(kind: str, *names: str) -> int:
    """A signed 64-bit advisory lock key for ``kind`` and ``names`` (stable across
    processes and machines: a hash, not Python's salted ``hash``)."""
    data = "\0".join((SCHEMA, kind, *names)).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big", signed=True)


def notify_payload(queue: str, token: str) -> str:
    """What a writer NOTIFYs after a commit: the queue and the writer's instance token."""
    return f"{queue} {token}"


PAYLOAD_MAX = 7900
"""Bytes a notification may carry (PostgreSQL refuses 8,000 or more)."""


def lines_payload(queue: str, token: str, generation: int, after: int,
                  lines: list[bytes]) -> bytes | None:  # fmt: skip
    """A batch's notification that carries its lines, so that followers need not read
    them: ``<queue> <token> <generation> <pos before the lines>``, a newline, then the
    lines byte for byte. None when it would not fit (the plain payload goes instead)."""
    head = f"{queue} {token} {generation} {after}\n".encode()
    size = len(head) + sum(map(len, lines))
    return head + b"".join(lines) if size <= PAYLOAD_MAX else None


def parse_lines_payload(payload: bytes) -> tuple[int, int, list[bytes]] | None:
    """(generation, pos before the lines, the lines) of a :func:`lines_payload`, or
    None for a plain payload (or anything else)."""
    head, newline, body = payload.partition(b"\n")
    fields = head.split(b" ")
    if not newline or not body or len(fields) != 4 or not body.endswith(b"\n"):
        return None
    try:
        generation, after = int(fields[2]), int(fields[3])
    except ValueError:
        return None
    return generation, after, [line + b"\n" for line in body[:-1].split(b"\n")]


def parse_payload(payload: str) -> tuple[str, str]:
    """(queue, writer token) of a notification's first line, either form."""
    queue, _, rest = payload.partition(" ")
    return queue, rest.partition(" ")[0]
