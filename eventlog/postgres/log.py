"""The event log in a PostgreSQL table, shared by daemons on any number of machines.

Contract (normative text in ``specs/log-storage.md`` §12):

* A group-commit batch is one transaction: ``BEGIN``, the queue's advisory
  transaction lock, catch-up from the last line read, the commands, one ``INSERT``
  of their lines with consecutive ``pos``, ``NOTIFY``, ``COMMIT``. An ack means
  committed; a non-durable batch commits with ``synchronous_commit = off``. After a
  batch of several requests the next one's ``BEGIN``, lock and read go out with the
  ``COMMIT`` (ahead); the writer rolls that transaction back if no request comes.
* Reads need no lock: one statement (one snapshot) returns the queue's generation
  and the lines after the last one read. A new generation (compaction elsewhere)
  resets the listener and replays.
* Followers ``LISTEN``; a slow poll covers lost notifications and reconnections.
* A lost connection is a storage fault (``specs/log-storage.md`` §4.1): the batch in
  flight fails with :class:`StorageUnavailable` (its commit may or may not have
  happened), then the log reconnects with backoff and goes on from its last line, or
  replays the whole queue if the batch in flight proves not committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.pq.abc import PGresult

from snerd.errors import LogError
from snerd.eventlog.base import (
    LogListener,
    LogStats,
    Record,
    SkippedLine,
    Snapshot,
    StorageUnavailable,
    snapshot_list,
)
from snerd.eventlog.batching import BatchingLog
from snerd.eventlog.codec import decode_complete
from snerd.eventlog.compaction import snapshot_header, snapshot_lines
from snerd.eventlog.layout import free_archive_name, to_prune
from snerd.eventlog.postgres import sql
from snerd.eventlog.postgres.connect import (
    connect,
    connect_sync,
    ensure_schema,
    unavailable,
)
from snerd.eventlog.postgres.schema import (
    CHANNEL,
    lines_payload,
    lock_key,
    notify_payload,
    parse_lines_payload,
    parse_payload,
)
from snerd.eventlog.postgres.url import PgTarget, parse
from snerd.eventlog.postgres.wire import (
    BYTEA_ARRAY,
    INT8,
    TEXT,
    Step,
    Wire,
    bytea_array,
    int8,
    notifications,
    read_int8,
    text,
)

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
"""The fallback poll of a follower: it catches up at least this often."""

Conn = psycopg.AsyncConnection[tuple[Any, ...]]

_BEGIN: Step = ("BEGIN", (), ())
_COMMIT: Step = ("COMMIT", (), ())
_ROLLBACK: Step = ("ROLLBACK", (), ())
_LOCK_TYPES = (INT8,)
_READ_TYPES = (INT8, TEXT)  # pos, queue
_APPEND_TYPES = (TEXT, INT8, BYTEA_ARRAY, TEXT, TEXT)  # queue, pos, lines, channel, payload
_CHANNEL = text(CHANNEL)


@dataclass(frozen=True, slots=True)
class _Point:
    """Where a compaction's snapshot was taken: everything delivered up to here."""

    pos: int
    byte_pos: int
    last_seq: int
    epoch: int
    records: int
    skipped: int
    chain_head: bytes


LISTEN_BACKOFF_MIN = 0.05
LISTEN_BACKOFF_MAX = 5.0
"""Seconds before reconnecting a lost LISTEN connection (doubling, capped)."""

@dataclass(frozen=True, slots=True)
class _Archive:
    """A compaction's archive, named and pending, holding the rows up to ``upto``."""

    name: str
    ts: int
    upto: int


class _Abandoned(Exception):
    """The rows copied ahead are not the queue's any more (compacted elsewhere)."""


@dataclass(frozen=True, slots=True)
class _Doubt:
    """A batch sent with COMMIT whose reply never came: ``lines`` from ``pos`` on."""

    pos: int
    byte_pos: int
    lines: list[bytes]


class PostgresLog(BatchingLog):
    """An :class:`EventLog` over the ``snerd.log`` rows of one queue.

    ``url`` is ``postgresql://user@host:port/db?queue=name`` (see
    :mod:`snerd.eventlog.postgres.url`). ``follow=False`` disables the background
    follower (then only :meth:`catch_up` and :meth:`transact` read others' appends).
    ``fsync=False`` makes every batch non-durable (tests, benchmarks).
    """

    def __init__(
        self,
        url: str,
        *,
        fsync: bool = True,
        follow: bool = True,
        poll_interval: float = POLL_SECONDS,
        chain_key: bytes | None = None,
    ) -> None:
        super().__init__(chain_key=chain_key)
        self.url = url
        """The storage URL as given (it may hold a password: never print it; the
        printable form is ``target.display``)."""
        self.target: PgTarget = parse(url)
        self.queue = self.target.queue
        self._key = lock_key("log", self.queue)
        self._token = secrets.token_hex(6)  # tells our own notifications from others'
        self._fsync_on = fsync
        self._follow_on = follow
        self._poll = poll_interval
        self._conn: Conn | None = None
        self._listen: Conn | None = None
        self._listen_backoff = LISTEN_BACKOFF_MIN
        self._pos = 0  # lines read (the pos of the last one)
        self._byte_pos = 0  # bytes read, for SkippedLine offsets and stats
        self._generation = -1  # the queue's compaction generation, as last read
        self._epoch = 0  # bumped whenever what we read is replaced (reset, replay, compaction)
        self._background: set[asyncio.Task[None]] = set()
        self._staged: list[bytes] = []
        self._in_txn = False
        self._ahead = False  # the next batch's transaction was begun with the last COMMIT
        self._ahead_after = 0  # the line its catch-up read starts after
        self._wire_of: Wire | None = None  # the batch statements' side of ``_conn``
        self._aside: Wire | None = None  # the follower's reads on ``_listen`` (_read_aside)
        self._queue_param = text(self.queue)
        self._key_param = int8(self._key)
        self._payload = text(notify_payload(self.queue, self._token))
        self._doubt: _Doubt | None = None  # a batch whose COMMIT's fate is unknown
        self._mutex = asyncio.Lock()
        self._compact_lock = asyncio.Lock()
        self._follower: asyncio.Task[None] | None = None
        self._closed: asyncio.Future[None] | None = None

    # ------------------------------------------------------------- lifecycle

    async def open(self, listener: LogListener) -> None:
        """Create our schema if needed, replay the queue's log, then follow it."""
        if self._listener is not None or self._closing:
            raise LogError("a PostgresLog can be opened only once")
        try:
            self._conn = await connect(self.target)
            await ensure_schema(self._conn, self.queue)
        except (StorageUnavailable, psycopg.Error) as exc:
            await self._drop_connections()
            raise LogError(f"cannot open log {self.target.display}: {exc}") from exc
        self._listener = listener
        async with self._mutex:
            await self._sync()
        if self._follow_on:
            self._follower = asyncio.get_running_loop().create_task(self._follow())

    async def close(self) -> None:
        """Finish queued transactions, make them durable, stop following, disconnect."""
        if self._closed is not None:
            await asyncio.shield(self._closed)
            return
        self._closed = asyncio.get_running_loop().create_future()
        try:
            if self._unsynced and self._failure is None and self._listener is not None:
                with contextlib.suppress(LogError):  # what was committed lands before we go
                    await self.sync()
            self._closing = True
            await self._wait_writer()
            if self._sync_timer is not None:
                self._sync_timer.cancel()
                self._sync_timer = None
            if self._follower is not None:
                self._follower.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._follower
            async with self._compact_lock, self._mutex:
                await self._drop_connections()
        finally:
            self._closing = True
            self._closed.set_result(None)

    async def _drop_connections(self) -> None:
        for conn in (self._conn, self._listen):
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
        self._conn = self._listen = None

    def prune_archives(self, *, max_age_ms: int | None, max_bytes: int | None,
                       now_ms: int) -> int:  # fmt: skip
        """Blocking (the engine runs it in a thread): its own short connection."""
        try:
            with connect_sync(self.target) as conn, conn.transaction():
                rows = conn.execute(sql.ARCHIVE_SIZES, (self.queue,)).fetchall()
                known = [(int(ts), int(size)) for _, ts, size in rows]
                n = to_prune(known, max_age_ms=max_age_ms, max_bytes=max_bytes, now_ms=now_ms)
                for name, _, _ in rows[:n]:
                    conn.execute(sql.DROP_ARCHIVE, (self.queue, name))
                return n
        except psycopg.Error as exc:
            raise unavailable(self.target, exc) from exc

    def history(self) -> Iterator[Record]:
        """Every stored record (archives, then the live rows), each once; blocking."""
        from snerd.eventlog.postgres.history import iter_pg_history

        for item in iter_pg_history(self.url):
            if not isinstance(item, SkippedLine):
                yield item

    def stats(self) -> LogStats:
        return LogStats(
            self.target.display, self._byte_pos, self._records, self._skipped, self._last_seq
        )

    # --------------------------------------------------------------- reading

    def _lost(self, exc: BaseException) -> StorageUnavailable:
        """A database call failed: forget the connection (the replay reconnects)."""
        conn, self._conn = self._conn, None
        self._in_txn = self._ahead = False
        if conn is not None and not conn.closed:
            task = asyncio.get_running_loop().create_task(_close_quietly(conn))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        return unavailable(self.target, exc)

    def _connection(self) -> Conn:
        if self._conn is None or self._conn.closed:
            raise StorageUnavailable(f"PostgreSQL {self.target.display}: not connected")
        return self._conn

    async def _sync(self, rows: list[tuple[Any, ...]] | None = None, after: int = -1) -> int:
        """Catch up (holding ``_mutex``): follow a compaction, then read new lines.
        ``rows``: the first read's result when the caller already has it, read past
        line ``after`` (the follower may have delivered some of them meanwhile)."""
        delivered = 0
        while True:
            if rows is None:
                after = self._pos
                rows = await self._read()
            read, more = self._take_rows(rows, after)
            delivered += read
            if not more:
                self._caught_up()
                return delivered
            rows = None
            await asyncio.sleep(0)  # a long replay must not starve the event loop

    async def _read(self) -> list[tuple[Any, ...]]:
        """One catch-up read, straight through libpq like a batch's statements (a
        follower reads after every peer's batch: psycopg's cursor machinery was a
        quarter of a daemon's CPU in the 4-daemon benchmark)."""
        try:
            return _rows(await self._wire().round_trip([self._read_step(self._pos)], end=True))
        except psycopg.Error as exc:
            raise self._lost(exc) from exc

    def _take_rows(self, rows: list[tuple[Any, ...]], after: int) -> tuple[int, bool]:
        """Deliver one read's lines (read past line ``after``; those up to ``_pos`` were
        delivered meanwhile, by the follower); return (records delivered, whether to read
        again)."""
        generation = int(rows[0][0]) if rows else 0
        if generation != self._generation:
            if self._generation >= 0:
                self._compacted_elsewhere()
                self._epoch += 1
            self._generation = generation
            if self._pos:  # compacted elsewhere: read the new log from its start
                self._pos = self._byte_pos = 0
                return 0, True
        more = len(rows) == sql.READ_BATCH
        pos = self._pos
        lines = [bytes(r[2]) for r in rows if r[1] is not None and (after == pos or r[1] > pos)]
        if not lines:
            return 0, more
        data = b"".join(lines)
        self._pos = int(rows[-1][1])
        offset, self._byte_pos = self._byte_pos, self._byte_pos + len(data)
        return self._deliver_decoded(decode_complete(data, offset)), more

    async def _follow_catch_up(self) -> None:
        """Catch up after a peer's notification. While a batch holds the connection
        (under contention, mostly waiting for the queue's lock), read on the LISTEN
        connection instead: the peers' records are then folded while we wait for the
        lock, not while we hold it (the batch skips what was delivered meanwhile)."""
        if self._mutex.locked() or (self._ahead and not self._in_txn):  # or the lock's
            await self._read_aside()  # wait begun ahead: catch_up would wait for it
        else:
            await self.catch_up()

    async def _read_aside(self) -> None:
        """Deliver what peers committed, read on the LISTEN connection; give up (the
        batch's own catch-up, under the lock, reads it then) whenever anything but a
        follower moved meanwhile: a batch of ours in its transaction, a compaction, a
        fault. A lost LISTEN connection is dropped; the next wait reconnects."""
        listen = self._listen
        if listen is None or listen.closed:
            return
        if self._aside is None or self._aside.conn is not listen:
            self._aside = Wire(listen)
        while not self._closing:
            if self.degraded or self._fault is not None:
                return
            epoch, after = self._epoch, self._pos
            try:
                rows = _rows(await self._aside.round_trip([self._read_step(after)], end=True))
            except psycopg.Error as exc:
                log.warning("LISTEN connection lost (%s)", unavailable(self.target, exc))
                self._listen = None
                await _close_quietly(listen)
                return
            if self._epoch != epoch or not rows or not self._may_deliver_aside(int(rows[0][0])):
                return
            _, more = self._take_rows(rows, after)
            if not more:
                self._caught_up()
                return

    async def _replay_all(self) -> None:
        """After a storage fault: reconnect and go on from the last line read, when what
        this instance delivered is what the database holds: no batch was in flight, or
        the one in flight did commit (its rows are there, byte for byte). Only when it
        did not (its records were delivered, so the listener holds them) reset the
        listener and replay everything."""
        async with self._mutex:
            if self._closing:
                return
            if self._conn is None or self._conn.closed:
                self._conn = await connect(self.target)
            doubt, self._doubt = self._doubt, None
            if doubt is None or await self._committed(doubt):
                await self._sync()
                return
            self._pos = self._byte_pos = 0
            self._generation = -1
            self._epoch += 1
            self._reset()
            await self._sync()

    async def _committed(self, doubt: _Doubt) -> bool:
        """Whether the batch in ``doubt`` is in the database; if so, count it read."""
        conn = self._connection()
        try:
            args = {"pos": doubt.pos, "queue": self.queue}
            rows = await (await conn.cursor(binary=True).execute(sql.READ, args)).fetchall()
        except psycopg.Error as exc:
            raise self._lost(exc) from exc
        if not rows or int(rows[0][0]) != self._generation:
            return False  # compacted meanwhile: replay
        stored = [bytes(r[2]) for r in rows[: len(doubt.lines)] if r[1] is not None]
        if stored != doubt.lines[: sql.READ_BATCH]:
            return False
        self._pos = doubt.pos + len(doubt.lines)
        self._byte_pos = doubt.byte_pos + sum(map(len, doubt.lines))
        return True

    async def catch_up(self) -> int:
        self._check_usable()
        async with self._mutex:
            self._check_usable()
            if self._ahead and not self._in_txn:  # its read is a catch-up: use it
                return await self._take_ahead()
            return await self._sync()

    async def _follow(self) -> None:
        """Background task: wake on NOTIFY (or every ``poll_interval``) and catch up
        (``_follow_changes``)."""
        await self._follow_changes(self._notified_or_polled)

    async def _notified_or_polled(self) -> None:
        """:meth:`_wait_notified`; a lost LISTEN connection is dropped, and after a
        backoff the caller catches up by polling (the next wait reconnects)."""
        try:
            await self._wait_notified()
            self._listen_backoff = LISTEN_BACKOFF_MIN
        except (psycopg.Error, StorageUnavailable) as exc:
            await _close_quietly(self._listen)
            self._listen = None
            backoff = self._listen_backoff
            log.warning("LISTEN connection lost (%s); polling, reconnecting in %.2fs",
                        unavailable(self.target, exc), backoff)  # fmt: skip
            await asyncio.sleep(backoff)
            self._listen_backoff = min(backoff * 2, LISTEN_BACKOFF_MAX)

    async def _wait_notified(self) -> None:
        """Return when another writer notified about this queue, or after the poll."""
        if self._listen is None or self._listen.closed:
            self._listen = await connect(self.target)
            await self._listen.execute(f"LISTEN {CHANNEL}")
            return  # catch up on what was written while we were not listening
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._poll
        while (left := deadline - loop.time()) > 0:
            payloads = await notifications(self._listen, left)
            for payload in payloads:
                queue, token = parse_payload(payload.partition(b"\n")[0].decode(errors="replace"))
                ours = queue == self.queue and token != self._token
                if ours and not self._take_notified(payload):
                    return  # not carried, or not next: read
            if not payloads:
                return  # the poll's time: catch up anyway

    def _may_deliver_aside(self, generation: int) -> bool:
        """Whether lines of ``generation`` read outside the batch's transaction may be
        delivered now: nothing but followers moved (no batch of ours in its
        transaction, no compaction, no fault, not closing)."""
        return not (generation != self._generation or self._in_txn or self.degraded
                    or self._fault is not None or self._closing)  # fmt: skip

    def _take_notified(self, payload: bytes) -> bool:
        """Deliver the lines a peer's notification carries (:func:`lines_payload`), when
        they continue what was read (same generation, no gap) and nothing else moves
        (the conditions of :meth:`_read_aside`); return whether they were taken.
        Notifications come in commit order, and a transaction's notification is sent
        only when it commits, so its lines are exactly the rows it added."""
        carried = parse_lines_payload(payload)
        if carried is None:
            return False
        generation, after, lines = carried
        if after > self._pos or self._resume is not None or not self._may_deliver_aside(generation):
            return False
        rows = [(generation, after + i, line) for i, line in enumerate(lines, 1)]
        self._take_rows(rows, after)
        return True

    # --------------------------------------------------------------- writing

    @contextlib.asynccontextmanager
    async def _exclusive(self) -> AsyncIterator[None]:
        """One transaction holding the queue's lock, caught up, for the block.

        Its statements go straight through libpq (:mod:`~snerd.eventlog.postgres.wire`):
        ``BEGIN``, the lock and the read in one round trip (the read's snapshot is
        taken once the lock is granted), then :meth:`_flush`'s in a second. When the
        last batch sent them ahead, after its ``COMMIT`` (:meth:`_flush`), their
        results are collected here instead (or were already, by :meth:`_idle` or
        :meth:`catch_up`: the transaction is open and caught up)."""
        async with self._mutex:
            try:
                if self._ahead:
                    if not self._in_txn:
                        await self._take_ahead()
                    self._ahead = False
                else:
                    await self._begin()
                yield
            finally:
                if self._in_txn:  # nothing was committed: end the transaction
                    await self._rollback()

    def _read_step(self, after: int) -> Step:
        """The catch-up read of the lines past line ``after``."""
        return (sql.READ, _READ_TYPES, (int8(after), self._queue_param))

    def _lock_steps(self, after: int) -> list[Step]:
        """``BEGIN``, the queue's lock, then the catch-up read past line ``after``."""
        return [_BEGIN, (sql.LOCK, _LOCK_TYPES, (self._key_param,)), self._read_step(after)]

    async def _begin(self) -> None:
        """``BEGIN``, the lock and the catch-up read in one round trip, and deliver."""
        after = self._pos
        try:
            result = await self._wire().round_trip(self._lock_steps(after), end=False)
        except psycopg.Error as exc:
            raise self._lost(exc) from exc
        self._in_txn = True
        await self._sync(_rows(result), after)

    async def _take_ahead(self) -> int:
        """Collect the transaction begun ahead (holding ``_mutex``): it is open, holds
        the lock, and what it read is delivered; return the records delivered."""
        try:
            result = await self._wire().finish()
        except psycopg.Error as exc:
            raise self._lost(exc) from exc
        self._in_txn = True
        try:  # the follower may have delivered some of its lines meanwhile (_read_aside)
            return await self._sync(_rows(result), self._ahead_after)
        except BaseException:
            if self._in_txn:
                await self._rollback()
            raise

    async def _rollback(self) -> None:
        """End the open transaction (a failure drops the connection)."""
        self._in_txn = self._ahead = False
        try:
            await self._wire().round_trip([_ROLLBACK], end=True)
        except psycopg.Error as exc:
            self._lost(exc)
        except StorageUnavailable:
            pass  # not connected, or the wire was cut short: the connection is dropped

    async def _idle(self) -> bool:
        """The writer found no request (or the log failed): a transaction begun ahead
        is collected (its lock granted, its read delivered; the callers the last batch
        acked queue their next requests meanwhile) and kept if requests are queued by
        then, else rolled back. Return whether requests are queued (those that came
        during the roll-back too)."""
        if not self._ahead:
            return False
        async with self._mutex:
            if self._ahead and self._failure is not None:  # fail-stop: let the lock go
                self._lost(LogError("the log failed"))
            if self._ahead and not self._in_txn:
                await self._take_ahead()
            if not self._queue:  # the callers just acked run their next step first
                await asyncio.sleep(0)
            if self._ahead and not self._queue:
                await self._rollback()
        return bool(self._queue) and self._failure is None

    def _wire(self) -> Wire:
        """The current connection's libpq side (a lost or half-used one raises)."""
        conn = self._connection()
        if self._wire_of is None or self._wire_of.conn is not conn:
            self._wire_of = Wire(conn)
        elif self._wire_of.broken:  # a round trip was cut short (cancelled): drop it
            raise self._lost(psycopg.OperationalError("a batch was interrupted midway"))
        return self._wire_of

    def _stage(self, lines: list[bytes]) -> None:
        self._staged.extend(lines)

    async def _flush(self, durable: bool) -> None:
        lines, self._staged = self._staged, []
        wire = self._wire()
        # Delivered already: if the COMMIT's reply is lost, recovery asks the database.
        self._doubt = _Doubt(self._pos, self._byte_pos, lines) if lines else None
        steps: list[Step] = []
        if not (durable and self._fsync_on):
            steps.append((sql.ASYNC_COMMIT, (), ()))
        if lines:
            carried = lines_payload(self.queue, self._token, self._generation, self._pos, lines)
            values = (self._queue_param, int8(self._pos), bytea_array(lines), _CHANNEL,
                      self._payload if carried is None else carried)  # fmt: skip
            steps.append((sql.APPEND, _APPEND_TYPES, values))
        else:
            steps.append((sql.TOUCH_XID, (), ()))
        steps.append(_COMMIT)
        # Several callers in this batch: more are likely to follow at once (those it
        # acks), so the next batch's transaction begins in this write, after the
        # COMMIT: its lock and catch-up round trip overlaps the acks and the callers'
        # next requests (``_idle`` rolls it back if none come).
        ahead: list[Step] = []
        if self._batch_size > 1 and not self._closing:
            self._ahead_after = self._pos + len(lines)
            ahead = self._lock_steps(self._ahead_after)
        try:
            await wire.round_trip(steps, end=True, ahead=ahead)
        except psycopg.Error as exc:
            raise self._lost(exc) from exc
        self._doubt = None
        self._in_txn = False
        self._ahead = bool(ahead)
        self._pos += len(lines)
        self._byte_pos += sum(map(len, lines))

    async def _sync_only(self) -> None:
        """One synchronous commit of a transaction with an id (its own, in autocommit):
        it returns once the WAL is flushed past it, so past every commit before it,
        those made with ``synchronous_commit = off`` too. No queue lock, no catch-up."""
        if not self._fsync_on:
            return
        async with self._mutex:
            if self._ahead:  # never hold the lock through a sync
                if not self._in_txn:
                    await self._take_ahead()
                await self._rollback()
            try:  # no BEGIN: the pipeline's Sync commits it (an implicit transaction)
                await self._wire().round_trip([(sql.TOUCH_XID, (), ())], end=True)
            except psycopg.Error as exc:
                raise self._lost(exc) from exc

    # ------------------------------------------------------------ compaction

    async def compact(self, snapshot: Snapshot) -> None:
        """Replace the live rows by header + snapshot + the rows after the point; the old
        rows move to ``snerd.archive_log``. Most of them are copied before the queue's
        lock is taken (:meth:`_archive_ahead`), so that the lock is held only for the
        rows written since, the delete and the snapshot's insert: appends of every
        daemon wait for that, not for a copy of the whole log. Abandoned silently if the
        log was compacted elsewhere (or replayed) meanwhile, or another daemon is
        compacting this queue right now."""
        self._check_usable()
        if self.degraded or self._fault is not None:
            log.info("compaction skipped while recovering from: %s", self._fault)
            return
        # The point under ``_mutex``: a catch-up that follows another daemon's compaction
        # reads the new log from its start, and until it has, the line count is the new
        # log's while what was delivered is the old one's (a point taken then archived
        # nothing and copied the whole old log after the snapshot).
        async with self._mutex:
            self._deliver_held()  # a batch's records staged or on their way, not heard yet
            # Delivered but not read back: the lines staged, and those of a batch whose
            # COMMIT is on its way (``_doubt``; its records and chain already count).
            ahead = [*(self._doubt.lines if self._doubt is not None else ()), *self._staged]
            point = _Point(
                self._pos + len(ahead),
                self._byte_pos + sum(map(len, ahead)),
                self._last_seq, self._epoch, self._records, self._skipped,
                self._chain_head,
            )  # fmt: skip
            records = snapshot_list(snapshot)  # a function is called now, at the point
        async with self._compact_lock:
            if self._epoch != point.epoch or self._closing:
                return
            side: Conn | None = None
            archive: _Archive | None = None
            try:
                side = await connect(self.target)
                archive = await self._archive_ahead(side, point)
                if archive is None:
                    return
                header, lines = self._snapshot_lines(point, records, archive)  # (no lock yet)
                async with self._exclusive():
                    if self._epoch != point.epoch:
                        return  # someone else compacted first; our snapshot is stale
                    await self._compact_locked(point, lines, archive)
                    archive = None  # installed
                    self._snapshot_installed(header)
            except (StorageUnavailable, psycopg.Error) as exc:
                if isinstance(exc, psycopg.Error):
                    exc = unavailable(self.target, exc)
                raise LogError(f"compaction of {self.target.display} failed: {exc}") from exc
            finally:
                if side is not None:
                    if archive is not None:  # abandoned: its pending copy goes now
                        with contextlib.suppress(psycopg.Error):
                            await side.execute(sql.DROP_ARCHIVE_PENDING,
                                               (self.queue, archive.name))  # fmt: skip
                    await _close_quietly(side)  # lets COMPACT_LOCK go

    async def _archive_ahead(self, side: Conn, point: _Point) -> _Archive | None:
        """On ``side`` (a connection of the compaction's own, outside the queue's lock):
        take the queue's compaction lock for the rest of the compaction (None if
        another daemon holds it), drop what compactions that died left pending, name
        the archive and copy into it, pending, the rows read so far."""
        key = lock_key("compact", self.queue)
        row = await (await side.execute(sql.COMPACT_LOCK, (key,))).fetchone()
        if row is None or not row[0]:
            log.info("compaction skipped: another daemon is compacting %s", self.target.display)
            return None
        upto, generation = self._pos, self._generation  # committed lines of this generation
        ts = time.time_ns() // 1_000_000
        try:
            async with side.transaction():
                await side.execute(sql.DROP_PENDING, (self.queue,))
                cur = await side.execute(sql.ARCHIVE_NAMES, (self.queue, ts))
                taken = {row[0] for row in await cur.fetchall()}
                name = free_archive_name(ts, point.last_seq, taken.__contains__)
                await side.execute(sql.ARCHIVE_PENDING, (self.queue, name, ts))
                copied = await side.execute(
                    sql.ARCHIVE_UPTO, (name, self.queue, upto, self.queue, generation)
                )
                if copied.rowcount != upto:  # compacted elsewhere since: not our rows
                    raise _Abandoned
        except _Abandoned:
            return None
        return _Archive(name, ts, upto)

    def _snapshot_lines(self, point: _Point, records: list[Record],
                        archive: _Archive) -> tuple[Record, list[bytes]]:  # fmt: skip
        """The new log's header (naming ``archive``) and first lines: the header, then
        the snapshot, chained on from the head at the point."""
        origin = self.chain.tag.decode() + point.chain_head.hex()
        header = snapshot_header(point.last_seq, archive.ts, archive.name, len(records), origin)
        return header, list(snapshot_lines(header, records, self.chain, point.chain_head))

    async def _compact_locked(self, point: _Point, lines: list[bytes],
                              archive: _Archive) -> None:  # fmt: skip
        """Under the queue's lock: the rows written since the copy into the archive, which
        is then listed; the live rows replaced by ``lines`` and the tail after the point."""
        conn = self._connection()
        name = archive.name
        try:
            async with conn.pipeline():
                await conn.execute(sql.ARCHIVE_AFTER, (name, self.queue, archive.upto))
                await conn.execute(sql.ARCHIVE_DONE, (self._byte_pos, self.queue, name))
                await conn.execute(sql.CLEAR, (self.queue,))
                await conn.execute(sql.INSERT, (self.queue, 0, lines))
                await conn.execute(sql.COPY_TAIL, (point.pos, len(lines), self.queue, name,
                                                   point.pos))  # fmt: skip
                bumped = await conn.execute(sql.BUMP, (self.queue,))
                await conn.execute(sql.NOTIFY, (CHANNEL, notify_payload(self.queue, "")))
                await conn.execute("COMMIT")
            row = await bumped.fetchone()
        except psycopg.Error as exc:
            raise self._lost(exc) from exc
        self._in_txn = False
        assert row is not None
        self._adopt(point, lines, int(row[0]))

    def _adopt(self, point: _Point, lines: list[bytes], generation: int) -> None:
        """Continue on the rows we just installed, at their end, without a reset."""
        tail_lines = self._pos - point.pos
        tail_bytes = self._byte_pos - point.byte_pos
        self._generation = generation
        self._epoch += 1
        self._pos = len(lines) + tail_lines
        self._byte_pos = sum(map(len, lines)) + tail_bytes
        self._records = len(lines) + self._records - point.records
        self._skipped -= point.skipped


def _rows(result: PGresult) -> list[tuple[Any, ...]]:
    """A READ's rows as (generation, pos, line), from its binary result."""
    get = result.get_value
    return [(read_int8(get(i, 0)), read_int8(get(i, 1)), get(i, 2))
            for i in range(result.ntuples)]  # fmt: skip


async def _close_quietly(conn: Conn | None) -> None:
    if conn is not None:
        with contextlib.suppress(Exception):
            await conn.close()
