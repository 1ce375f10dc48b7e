"""Opening connections (with keepalives), creating our schema, naming a failed call."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from snerd.eventlog.base import StorageUnavailable
from snerd.eventlog.postgres import schema
from snerd.eventlog.postgres.url import PgTarget


async def connect(target: PgTarget) -> psycopg.AsyncConnection[tuple[Any, ...]]:
    """An autocommit connection (transactions are explicit) with TCP keepalives."""
    try:
        return await psycopg.AsyncConnection.connect(_conninfo(target), autocommit=True)
    except psycopg.Error as exc:
        raise unavailable(target, exc) from exc


def connect_sync(target: PgTarget) -> psycopg.Connection[tuple[Any, ...]]:
    """:func:`connect` for blocking callers (liveness, tools)."""
    try:
        return psycopg.Connection.connect(_conninfo(target), autocommit=True)
    except psycopg.Error as exc:
        raise unavailable(target, exc) from exc


def _conninfo(target: PgTarget) -> str:
    return make_conninfo(target.conninfo, **target.connect_kwargs())


def unavailable(target: PgTarget, exc: BaseException) -> StorageUnavailable:
    """The error for a failed database call; names the database without its password."""
    return StorageUnavailable(f"PostgreSQL {target.display}: {_first_line(exc)}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


async def ensure_schema(conn: psycopg.AsyncConnection[tuple[Any, ...]], queue: str) -> None:
    """Create our schema (first use) and the queue's row; refuse a newer schema.

    On a schema already in place (every open but the first) this is two statements: the
    check (:data:`~schema.SELECT_CURRENT`) and the queue's row, without the setup's
    transaction, its advisory lock (which would queue every opener behind each other)
    and its DDL. ``conn`` is an autocommit connection outside a transaction."""
    try:
        cur = await conn.execute(schema.SELECT_CURRENT, schema.current_params())
        row = await cur.fetchone()
    except psycopg.errors.UndefinedTable:
        row = None  # never created: the setup below creates it
    if row is None or not schema.is_current(row[0], row[1]):
        await create_schema(conn)
    await conn.execute(schema.ADD_QUEUE, (queue,))


async def create_schema(conn: psycopg.AsyncConnection[tuple[Any, ...]]) -> None:
    """Run the setup (idempotent; first users race on its advisory lock)."""
    async with conn.transaction():
        for statement in schema.SETUP:
            await conn.execute(statement, schema.setup_params() if "%(" in statement else None)
        cur = await conn.execute(schema.SELECT_VERSION)
        row = await cur.fetchone()
        schema.check_version(None if row is None else row[0])


def ensure_schema_sync(conn: psycopg.Connection[tuple[Any, ...]], queue: str) -> None:
    """:func:`ensure_schema` on a blocking connection."""
    try:
        row = conn.execute(schema.SELECT_CURRENT, schema.current_params()).fetchone()
    except psycopg.errors.UndefinedTable:
        row = None
    if row is None or not schema.is_current(row[0], row[1]):
        create_schema_sync(conn)
    conn.execute(schema.ADD_QUEUE, (queue,))


def create_schema_sync(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
    """:func:`create_schema` on a blocking connection."""
    with conn.transaction():
        for statement in schema.SETUP:
            conn.execute(statement, schema.setup_params() if "%(" in statement else None)
        row = conn.execute(schema.SELECT_VERSION).fetchone()
        schema.check_version(None if row is None else row[0])
