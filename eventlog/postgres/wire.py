"""A group-commit batch's statements sent straight through libpq (``psycopg.pq``).

Each statement through psycopg's cursors costs ~40 us of client CPU on our 2-core VM
(cursor state, adaptation, its prepared-statement bookkeeping, a wait per statement); a
batch ran six of them in two pipelines, about half of the client's busy time with 32
appenders (benchmarks/README.md, bench_pg_queue). Here a round trip's statements go out
in one libpq pipeline as named prepared statements (``Parse`` once per connection) with
binary parameters the caller encoded, and the client waits once per round trip.

The connection stays a psycopg ``AsyncConnection`` for everything else (catch-up
reads, compaction): a round trip leaves libpq as psycopg expects it, out of pipeline
mode with every result collected, inside the batch's transaction or not. That
transaction is explicit (``BEGIN`` ... ``COMMIT``), so nothing commits at a pipeline's
``Sync``. psycopg forgets its own prepared statements at every ``ROLLBACK`` it runs
(``DEALLOCATE ALL``, which would drop ours too); the batch's ``ROLLBACK`` goes through
here, so psycopg does not see it.

A failure raises a :class:`psycopg.Error`: the caller drops the connection, whose
pipeline state is then unknown. A cancellation midway leaves :attr:`Wire.broken` set:
the next round trip raises instead of reading another round trip's results.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import struct
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import pq
from psycopg.pq.abc import PGresult

INT8 = 20
TEXT = 25
BYTEA_ARRAY = 1001
_BYTEA = 17

_I4 = struct.Struct(">i")
_I8 = struct.Struct(">q")
_ARRAY_HEAD = struct.Struct(">iiiii")  # dimensions, has nulls, element type, length, lower bound

_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_COMMAND_OK = pq.ExecStatus.COMMAND_OK
_SYNC = pq.ExecStatus.PIPELINE_SYNC
_BINARY = pq.Format.BINARY

Param = bytes | None
Step = tuple[str, tuple[int, ...], Sequence[Param]]
"""One statement: its text (``%s``/``%(name)s``/``%b`` placeholders, as psycopg takes
them, in order of first use), its parameters' type oids, their binary values."""


def int8(value: int) -> bytes:
    return _I8.pack(value)


def text(value: str) -> bytes:
    return value.encode()


def bytea_array(items: Sequence[bytes]) -> bytes:
    """The binary form of a one-dimensional ``bytea[]`` without nulls."""
    parts = [_ARRAY_HEAD.pack(1, 0, _BYTEA, len(items), 1)]
    for item in items:
        parts.append(_I4.pack(len(item)))
        parts.append(item)
    return b"".join(parts)


def read_int8(value: bytes | None) -> int | None:
    return None if value is None else int(_I8.unpack(value)[0])


_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%[sb]")


def numbered(statement: str) -> bytes:
    """``statement`` with psycopg's placeholders as ``$1``, ``$2``, ... (a named one
    keeps its number wherever it recurs; no ``%%`` escapes: our statements have none)."""
    names: dict[str, int] = {}
    count = 0

    def number(m: re.Match[str]) -> str:
        nonlocal count
        if m.group(1) is None:
            count += 1
            return f"${count}"
        if m.group(1) not in names:
            count += 1
            names[m.group(1)] = count
        return f"${names[m.group(1)]}"

    return _PLACEHOLDER.sub(number, statement).encode()


class Wire:
    """The libpq side of one connection: its prepared statements and round trips."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn
        self._pg = conn.pgconn
        self._names: dict[tuple[str, tuple[int, ...]], bytes] = {}
        self.pending: tuple[int, list[tuple[tuple[str, tuple[int, ...]], bytes]]] | None = None
        """Statements sent ``ahead`` whose results :meth:`finish` has yet to collect."""
        self.broken = False
        """A round trip did not finish: libpq's state is unknown, drop the connection."""

    async def round_trip(self, steps: Sequence[Step], *, end: bool,
                         ahead: Sequence[Step] = ()) -> PGresult:  # fmt: skip
        """Send ``steps`` in one pipeline and return the last one's result.

        ``end``: close the pipeline with a ``Sync`` (the server ends an implicit
        transaction there; ours are explicit) and wait for it; otherwise ask for the
        results with a flush request (the transaction goes on).

        ``ahead``: statements sent in the same write after the ``Sync`` (``end`` must
        be set), whose results are left pending: :meth:`finish` collects them, and no
        other round trip may start before it has."""
        if self.broken or self.pending is not None:
            raise psycopg.OperationalError("the connection's pipeline state is unknown")
        assert end or not ahead
        self.broken = True  # until this round trip has finished cleanly
        pg = self._pg
        try:
            pg.enter_pipeline_mode()
            new: list[tuple[tuple[str, tuple[int, ...]], bytes]] = []
            self._send(steps, new)
            if end:
                pg.pipeline_sync()
            else:
                pg.send_flush_request()
            later: list[tuple[tuple[str, tuple[int, ...]], bytes]] = []
            if ahead:
                self._send(ahead, later, new)
                pg.pipeline_sync()
            await self._flush()
            last = await self._collect(len(steps) + len(new), end)
            if not ahead:
                pg.exit_pipeline_mode()
        except OSError as exc:  # the socket went away under the event loop
            raise psycopg.OperationalError(f"connection lost: {exc}") from exc
        self._names.update(new)
        if ahead:
            self.pending = (len(ahead) + len(later), later)
        self.broken = False
        return last

    async def finish(self) -> PGresult:
        """Collect the results of the ``ahead`` statements of the last round trip;
        return the last one's."""
        assert self.pending is not None
        if self.broken:
            raise psycopg.OperationalError("the connection's pipeline state is unknown")
        (statements, new), self.pending = self.pending, None
        self.broken = True
        try:
            last = await self._collect(statements, True)
            self._pg.exit_pipeline_mode()
        except OSError as exc:
            raise psycopg.OperationalError(f"connection lost: {exc}") from exc
        self._names.update(new)
        self.broken = False
        return last

    def _send(self, steps: Sequence[Step], new: list[tuple[tuple[str, tuple[int, ...]], bytes]],
              sent: Sequence[tuple[tuple[str, tuple[int, ...]], bytes]] = ()) -> None:  # fmt: skip
        pg = self._pg
        for statement, types, values in steps:
            key = (statement, types)
            name = self._names.get(key)
            if name is None:
                name = next((n for k, n in [*sent, *new] if k == key), None)
            if name is None:
                name = b"snerd_%d" % (len(self._names) + len(sent) + len(new))
                pg.send_prepare(name, numbered(statement), types)
                new.append((key, name))
            pg.send_query_prepared(name, values, [_BINARY] * len(values), _BINARY)

    async def _flush(self) -> None:
        while self._pg.flush():
            await _ready(self._pg.socket, writing=True)

    async def _collect(self, statements: int, sync: bool) -> PGresult:
        """Every statement's result (and the ``Sync``'s when ``sync``); the last
        statement's, or raise the first error."""
        pg = self._pg
        last: PGresult | None = None
        error: psycopg.Error | None = None
        ended = 0
        while True:
            while pg.is_busy():
                await _ready(pg.socket, writing=False)
                pg.consume_input()
            result = pg.get_result()
            if result is None:  # the end of one statement's results
                ended += 1
                if ended == statements and not sync:
                    break
                continue
            status = result.status
            if status == _SYNC:
                break
            if status in (_TUPLES_OK, _COMMAND_OK):
                last = result
            elif error is None:
                error = _error(result)
        if error is not None:
            raise error
        assert last is not None
        return last


async def notifications(conn: psycopg.AsyncConnection[Any], timeout: float) -> list[bytes]:
    """The payloads of the notifications that reached a LISTENing connection, waiting up
    to ``timeout`` seconds for the first (none came: an empty list). Straight through
    libpq, like the batches: a follower hears every writer's batch, its own included,
    and psycopg's ``notifies()`` generator cost more than the reading itself."""
    pg = conn.pgconn
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        pg.consume_input()  # raises psycopg.OperationalError when the connection is gone
        payloads = []
        while (note := pg.notifies()) is not None:
            payloads.append(note.extra)
        left = deadline - loop.time()
        if payloads or left <= 0:
            return payloads
        await _ready(pg.socket, writing=False, timeout=left)


async def _ready(fd: int, *, writing: bool, timeout: float | None = None) -> None:
    """Until ``fd`` is writable (or readable), or ``timeout`` seconds have passed."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def wake() -> None:
        if not done.done():
            done.set_result(None)

    if writing:
        watch, unwatch = loop.add_writer, loop.remove_writer
    else:
        watch, unwatch = loop.add_reader, loop.remove_reader
    watch(fd, wake)
    timer = None if timeout is None else loop.call_later(timeout, wake)
    try:
        await done
    finally:
        if timer is not None:
            timer.cancel()
        unwatch(fd)


def _error(result: PGresult) -> psycopg.Error:
    """The psycopg exception a failed result stands for (its class from the SQLSTATE,
    through psycopg's public ``errors.lookup``)."""
    if result.status == pq.ExecStatus.PIPELINE_ABORTED:
        return psycopg.errors.PipelineAborted("pipeline aborted")
    message = (result.error_message or b"").decode(errors="replace").strip()
    state = result.error_field(pq.DiagnosticField.SQLSTATE)
    kind: type[psycopg.Error] = psycopg.DatabaseError
    if state:
        with contextlib.suppress(KeyError):  # a code this psycopg does not know
            kind = psycopg.errors.lookup(state.decode())
    return kind(message or "the statement failed")
