"""What only the PostgreSQL log has: archive rows and their retention, a cut
connection survived, the schema version, the rows as log lines."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pgkit
import pytest
from logkit import PostgresBackend, Recorder

from snerd.errors import LogError
from snerd.eventlog.base import EventLog, StorageUnavailable


@pytest.fixture
def backend() -> Iterator[PostgresBackend]:
    pgkit.require_pg()
    pg = PostgresBackend()
    try:
        yield pg
    finally:
        pg.drop()


@pytest.fixture
async def logs(backend: PostgresBackend) -> AsyncIterator[list[EventLog]]:
    opened: list[EventLog] = []
    yield opened
    for log in opened:
        await log.close()


async def _open(backend: PostgresBackend, logs: list[EventLog], **kw: Any) -> tuple[Any, Recorder]:
    log = backend.new(**kw)
    rec = Recorder()
    await log.open(rec)
    logs.append(log)
    return log, rec


def recs(*keys: str) -> list[dict[str, Any]]:
    return [{"event": "put", "k": k} for k in keys]


async def test_archives_keep_the_history_and_retention_prunes_them(
    backend: PostgresBackend, logs: list[EventLog]
) -> None:
    from snerd.eventlog.base import SkippedLine
    from snerd.eventlog.postgres.history import iter_pg_history

    log, rec = await _open(backend, logs, follow=False)
    for round_ in range(3):
        await log.append(recs(f"a{round_}", f"b{round_}"))
        await log.compact(rec.snapshot())
    history = [r for r in iter_pg_history(backend.url) if not isinstance(r, SkippedLine)]
    puts = [r["k"] for r in history if r.get("event") == "put"]
    assert puts == ["a0", "b0", "a1", "b1", "a2", "b2"]  # each once, across 3 archives
    assert await asyncio.to_thread(log.prune_archives, max_age_ms=None, max_bytes=None,
                                   now_ms=0) == 0  # fmt: skip
    pruned = await asyncio.to_thread(log.prune_archives, max_age_ms=None, max_bytes=0, now_ms=0)
    assert pruned == 3
    _, fresh = await _open(backend, logs, follow=False)
    assert fresh.state == rec.state  # the live log (snapshot + tail) still folds alike


async def test_a_cut_connection_fails_the_batch_then_the_log_recovers(
    backend: PostgresBackend, logs: list[EventLog]
) -> None:
    import psycopg

    log, rec = await _open(backend, logs, follow=False)
    await log.append(recs("before"))
    pid = log._conn.info.backend_pid
    with psycopg.connect(pgkit.PG_URL, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(StorageUnavailable):
        await log.append(recs("lost"))
    for _ in range(200):  # the backoff window; then writes go through again
        try:
            await log.append(recs("after"))
            break
        except StorageUnavailable:
            await asyncio.sleep(0.05)
    assert log._conn.info.backend_pid != pid
    assert set(rec.state) == {"before", "after"}
    assert rec.resets == 0  # nothing was in flight: it went on from its last line
    _, fresh = await _open(backend, logs, follow=False)
    assert set(fresh.state) == {"before", "after"}
    assert log.faults == 1


async def _recovered(log: Any) -> None:
    for _ in range(200):  # the backoff window; then writes go through again
        try:
            await log.append(recs("after"))
            return
        except StorageUnavailable:
            await asyncio.sleep(0.05)
    raise AssertionError("the log never recovered")


async def test_a_batch_whose_commit_reply_was_lost_is_found_committed(
    backend: PostgresBackend, logs: list[EventLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The COMMIT went through but its reply never came: recovery finds the batch's rows
    (byte for byte) and goes on without a reset; nothing is delivered twice."""
    import psycopg

    from snerd.eventlog.postgres.log import PostgresLog, _Doubt

    log, rec = await _open(backend, logs, follow=False)
    await log.append(recs("before"))
    real = PostgresLog._flush

    async def commit_then_cut(self: PostgresLog, durable: bool) -> None:
        doubt = _Doubt(self._pos, self._byte_pos, list(self._staged))
        await real(self, durable)  # committed...
        self._pos, self._byte_pos, self._doubt = doubt.pos, doubt.byte_pos, doubt  # no reply
        monkeypatch.setattr(PostgresLog, "_flush", real)
        raise self._lost(psycopg.OperationalError("connection lost after COMMIT"))

    monkeypatch.setattr(PostgresLog, "_flush", commit_then_cut)
    with pytest.raises(StorageUnavailable):
        await log.append(recs("in-doubt"))
    await _recovered(log)
    assert [r["k"] for r in rec.records] == ["before", "in-doubt", "after"]
    assert rec.resets == 0
    _, fresh = await _open(backend, logs, follow=False)
    assert [r["k"] for r in fresh.records] == ["before", "in-doubt", "after"]


async def test_a_batch_that_did_not_commit_is_undone_by_a_replay(
    backend: PostgresBackend, logs: list[EventLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch never reached the table, but its records were delivered: recovery
    sees its rows missing, resets the listener and replays (no phantom remains)."""
    from snerd.eventlog.postgres import sql

    log, rec = await _open(backend, logs, follow=False)
    await log.append(recs("before"))
    good = sql.APPEND
    monkeypatch.setattr(sql, "APPEND", good.replace("INSERT INTO", "INSERT INTO no_such_"))
    with pytest.raises(StorageUnavailable):
        await log.append(recs("phantom"))
    monkeypatch.setattr(sql, "APPEND", good)
    await _recovered(log)
    assert [r["k"] for r in rec.records] == ["before", "after"]
    assert rec.resets == 1


async def test_rows_hold_the_bytes_of_log_lines(
    backend: PostgresBackend, logs: list[EventLog]
) -> None:
    import psycopg

    log, _ = await _open(backend, logs, follow=False)
    await log.append(recs("a", "b"))
    with psycopg.connect(pgkit.PG_URL) as conn:
        rows = conn.execute("SELECT line FROM snerd.log WHERE queue = %s ORDER BY pos",
                            (backend.queue,)).fetchall()  # fmt: skip
    lines = [bytes(r[0]) for r in rows]
    assert all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in lines)
    assert lines[0].startswith(b'{"event":"put","k":"a","seq":1,"format":"1.1"')
    assert b'"chain":' in lines[1]


def test_a_newer_schema_is_refused() -> None:
    # (checked on the function: the shared test database's schema is left alone)
    from snerd.eventlog.postgres.schema import VERSION, check_version

    check_version(None)
    check_version(VERSION)
    with pytest.raises(LogError, match=f"version {VERSION + 1}"):
        check_version(VERSION + 1)


def test_the_schema_check_tells_current_from_missing_and_refuses_newer() -> None:
    from snerd.eventlog.postgres.schema import TABLES, VERSION, is_current

    assert TABLES == ("version", "queues", "log", "archives", "archive_log", "daemons")
    assert is_current(VERSION, len(TABLES))
    assert not is_current(None, len(TABLES))  # the version row never written
    assert not is_current(VERSION, len(TABLES) - 1)  # a table missing
    assert not is_current(VERSION - 1, len(TABLES))  # an older schema: the setup runs
    with pytest.raises(LogError, match=f"version {VERSION + 1}"):
        is_current(VERSION + 1, len(TABLES))


class _Recording:
    """A blocking connection that records its statements; ``answer`` replaces the
    schema check's reply (a row, or an exception to raise)."""

    def __init__(self, conn: Any, answer: Any = None) -> None:
        self.conn, self.answer, self.statements = conn, answer, []

    def execute(self, query: str, params: Any = None) -> Any:
        from snerd.eventlog.postgres.schema import SELECT_CURRENT

        self.statements.append(query)
        if query == SELECT_CURRENT and self.answer is not None:
            if isinstance(self.answer, BaseException):
                raise self.answer
            return _Row(self.answer)
        return self.conn.execute(query, params)

    def transaction(self) -> Any:
        return self.conn.transaction()


class _Row:
    def __init__(self, row: tuple[Any, ...]) -> None:
        self.row = row

    def fetchone(self) -> tuple[Any, ...]:
        return self.row


def test_opening_on_a_current_schema_runs_only_the_check_and_the_queue_row() -> None:
    import psycopg

    from snerd.eventlog.postgres.connect import ensure_schema_sync
    from snerd.eventlog.postgres.schema import ADD_QUEUE, SELECT_CURRENT, TABLES, VERSION

    pgkit.require_pg()
    queue = pgkit.fresh_queue()
    try:
        with psycopg.connect(pgkit.PG_URL, autocommit=True) as conn:
            rec = _Recording(conn)
            ensure_schema_sync(rec, queue)  # type: ignore[arg-type]
            assert rec.statements == [SELECT_CURRENT, ADD_QUEUE]  # no lock, no DDL
            row = conn.execute("SELECT queue FROM snerd.queues WHERE queue = %s", (queue,))
            assert row.fetchone() == (queue,)
            # a table missing, the schema never made, an older version: the setup runs
            for answer in [(VERSION, len(TABLES) - 1), psycopg.errors.UndefinedTable("x"),
                           (VERSION - 1, len(TABLES))]:  # fmt: skip
                rec = _Recording(conn, answer)
                ensure_schema_sync(rec, queue)  # type: ignore[arg-type]
                creates = [s for s in rec.statements if s.startswith("CREATE TABLE")]
                assert len(creates) == len(TABLES), answer
                assert rec.statements[-1] == ADD_QUEUE
    finally:
        pgkit.drop_queue(queue)


async def test_the_async_open_skips_the_setup_on_a_current_schema(
    backend: PostgresBackend, logs: list[EventLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    from snerd.eventlog.postgres import connect

    ran: list[str] = []
    real = connect.create_schema

    async def counting(conn: Any) -> None:
        ran.append("setup")
        await real(conn)

    monkeypatch.setattr(connect, "create_schema", counting)
    await _open(backend, logs, follow=False)  # the backend made the schema already
    assert ran == []
    monkeypatch.setattr(connect.schema, "is_current", lambda found, tables: False)
    log, _ = await _open(backend, logs, follow=False)
    assert ran == ["setup"]
    await log.append(recs("a"))  # and the log it opened works


def test_placeholders_are_numbered_as_the_server_takes_them() -> None:
    from snerd.eventlog.postgres import sql
    from snerd.eventlog.postgres.wire import numbered

    assert numbered("SELECT %s, %b, %s") == b"SELECT $1, $2, $3"
    assert numbered("a = %(x)s AND b = %(y)s OR c = %(x)s") == b"a = $1 AND b = $2 OR c = $1"
    assert b"pos > $1" in numbered(sql.READ) and b"q.queue = $2" in numbered(sql.READ)
    appended = numbered(sql.APPEND)
    assert b"SELECT $1, $2 + t.n" in appended and b"unnest($3::bytea[])" in appended
    assert appended.endswith(b"pg_notify($4, $5)")


async def test_the_binary_lines_array_reaches_the_table_byte_for_byte(
    backend: PostgresBackend, logs: list[EventLog]
) -> None:
    import psycopg

    from snerd.eventlog.postgres.wire import BYTEA_ARRAY, Wire, bytea_array

    items = [b"", b"\x00\xff\n", "é".encode() * 300, b"x"]
    async with await psycopg.AsyncConnection.connect(pgkit.PG_URL, autocommit=True) as conn:
        result = await Wire(conn).round_trip(
            [("SELECT unnest(%b::bytea[])", (BYTEA_ARRAY,), (bytea_array(items),))], end=True
        )
        assert [result.get_value(i, 0) for i in range(result.ntuples)] == items


async def test_prepared_statements_dropped_under_the_log_cost_one_batch(
    backend: PostgresBackend, logs: list[EventLog]
) -> None:
    """Someone DEALLOCATEs the batch statements: that batch fails (a storage fault),
    the log reconnects, prepares them again and goes on."""
    log, rec = await _open(backend, logs, follow=False)
    await log.append(recs("before"))
    await log._conn.execute("DEALLOCATE ALL")
    with pytest.raises(StorageUnavailable):
        await log.append(recs("refused"))
    await _recovered(log)
    assert [r["k"] for r in rec.records] == ["before", "after"]


async def test_a_batch_cut_short_midway_drops_the_connection(
    backend: PostgresBackend, logs: list[EventLog]
) -> None:
    """A round trip that never finished (cancelled while waiting for the server)
    leaves libpq mid-pipeline: the next batch gives the connection up and the log
    recovers on a new one (the interrupted transaction never committed)."""
    log, rec = await _open(backend, logs, follow=False)
    await log.append(recs("before"))
    pid = log._conn.info.backend_pid
    log._wire().broken = True  # what a cancellation between send and reply leaves
    with pytest.raises(StorageUnavailable):
        await log.append(recs("refused"))
    await _recovered(log)
    assert log._conn.info.backend_pid != pid
    assert [r["k"] for r in rec.records] == ["before", "after"]


async def test_a_follower_is_woken_by_the_writers_notification(
    backend: PostgresBackend, logs: list[EventLog]
) -> None:
    """With the fallback poll an hour away, only the writer's NOTIFY can wake the
    follower; its own notifications (and another queue's) do not make it read."""
    follower, rec = await _open(backend, logs, poll_interval=3600.0)
    writer, _ = await _open(backend, logs, follow=False)
    await follower.append([{"k": "own"}])
    await asyncio.sleep(0)  # the follower is listening by now or catches up at once
    await writer.append([{"k": "theirs"}])
    await rec.wait_for(lambda: "theirs" in rec.state, timeout=10)
    assert sorted(rec.state) == ["own", "theirs"]


async def test_peers_records_are_folded_while_a_batch_waits_for_the_lock(
    backend: PostgresBackend, logs: list[EventLog]
) -> None:
    """While our batch waits for the queue's lock, the follower goes on reading (on its
    LISTEN connection), so a peer's records are folded during the wait instead of
    under the lock once it is granted; the batch then skips what was delivered."""
    import orjson
    import psycopg

    from snerd.eventlog.postgres.schema import lock_key

    follower, rec = await _open(backend, logs, poll_interval=3600.0)
    await follower.append([{"k": "own"}])
    key = lock_key("log", backend.queue)
    with psycopg.connect(pgkit.PG_URL, autocommit=True) as peer:
        peer.execute("SELECT pg_advisory_lock(%s)", (key,))  # the peer holds the lock
        try:
            mine = asyncio.ensure_future(follower.append([{"k": "mine"}]))
            waiting = ("SELECT count(*) FROM pg_locks"
                       " WHERE locktype = 'advisory' AND NOT granted AND pid = %s")  # fmt: skip
            async with asyncio.timeout(10):  # until our batch waits for the lock
                while peer.execute(waiting, (follower._conn.info.backend_pid,)).fetchone() != (1,):
                    await asyncio.sleep(0.005)
            with peer.transaction():  # the peer writes and notifies, keeping the lock
                line = orjson.dumps({"k": "theirs", "seq": 2}) + b"\n"
                peer.execute("INSERT INTO snerd.log (queue, pos, line) VALUES (%s, 2, %s)",
                             (backend.queue, line))  # fmt: skip
                peer.execute("SELECT pg_notify('snerd_log', %s)", (f"{backend.queue} peer",))
            await rec.wait_for(lambda: "theirs" in rec.state, timeout=10)
            assert not mine.done()  # folded while the batch still waits
        finally:
            peer.execute("SELECT pg_advisory_unlock(%s)", (key,))
    await mine
    assert [(r["k"], r["seq"]) for r in rec.records] == [("own", 1), ("theirs", 2), ("mine", 3)]


async def _lock_is_free(log: Any) -> bool:
    """Whether another session can take the queue's lock once the writer is idle."""
    import psycopg

    await log._wait_writer()
    with psycopg.connect(pgkit.PG_URL) as conn:  # a transaction: the lock ends with it
        row = conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (log._key,)).fetchone()
    return bool(row and row[0])


async def _appenders(log: EventLog, writers: int, each: int, tag: str = "") -> None:
    async def appender(w: int) -> None:
        for i in range(each):
            await log.append(recs(f"{tag}{w}.{i}"))

    await asyncio.gather(*(appender(w) for w in range(writers)))


async def test_a_busy_batch_begins_the_next_one_with_its_commit(
    backend: PostgresBackend, logs: list[EventLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a batch of several callers, the next transaction (BEGIN, lock, catch-up
    read) goes out with the COMMIT: the callers it acked find it ready; once no request
    comes, it is rolled back and the queue's lock is free."""
    from snerd.eventlog.postgres.wire import Wire

    log, rec = await _open(backend, logs, follow=False)
    sent: list[tuple[str, bool]] = []  # (statement, sent ahead)
    real = Wire.round_trip

    async def counting(self: Wire, steps: Any, *, end: bool, ahead: Any = ()) -> Any:
        sent.extend((s, False) for s, _, _ in steps)
        sent.extend((s, True) for s, _, _ in ahead)
        return await real(self, steps, end=end, ahead=ahead)

    monkeypatch.setattr(Wire, "round_trip", counting)
    await _appenders(log, writers=3, each=4)
    assert log.commits == 4  # each round of the 3 callers is one batch
    assert sent.count(("BEGIN", False)) == 1  # the first batch's
    assert sent.count(("BEGIN", True)) == 4  # with each COMMIT; the last one unused:
    assert await _lock_is_free(log)
    assert sent.count(("ROLLBACK", False)) == 1
    assert not log._ahead and not log._in_txn
    assert [r["seq"] for r in rec.records] == list(range(1, 13))


async def test_writers_that_begin_ahead_still_take_turns_gap_free(
    backend: PostgresBackend, logs: list[EventLog]
) -> None:
    """Two logs on one queue, each with busy callers: every line lands once, with
    consecutive seqs, and each log reads the other's lines before writing its own."""
    a, rec_a = await _open(backend, logs, follow=False)
    b, rec_b = await _open(backend, logs, follow=False)
    await asyncio.gather(_appenders(a, 4, 6, "a"), _appenders(b, 4, 6, "b"))
    await a.catch_up()
    await b.catch_up()
    assert [r["seq"] for r in rec_a.records] == list(range(1, 49))
    assert rec_a.records == rec_b.records
    assert await _lock_is_free(a)
    _, fresh = await _open(backend, logs, follow=False)
    assert fresh.records == rec_a.records


async def test_a_catch_up_takes_over_the_transaction_begun_ahead(
    backend: PostgresBackend, logs: list[EventLog]
) -> None:
    """A catch-up that gets the connection while the next batch's transaction is still
    in flight reads its results (they are a catch-up read); the writer goes on."""
    log, rec = await _open(backend, logs, follow=False)
    catch_ups: list[asyncio.Task[int]] = []
    real = rec.on_records

    def on_records(records: Any) -> None:
        real(records)
        if not catch_ups:  # it waits for the connection until the batch is written
            catch_ups.append(asyncio.get_running_loop().create_task(log.catch_up()))

    rec.on_records = on_records  # type: ignore[method-assign]
    await asyncio.gather(log.append(recs("x")), log.append(recs("y")))
    assert await catch_ups[0] == 0
    await _appenders(log, writers=2, each=2)
    assert log.faults == 0
    assert sorted(rec.state) == ["0.0", "0.1", "1.0", "1.1", "x", "y"]
    assert await _lock_is_free(log)


async def test_a_sync_after_a_busy_batch_does_not_hold_the_lock(
    backend: PostgresBackend, logs: list[EventLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Callers that sync right after their non-durable appends: the sync batch ends the
    transaction begun ahead first (a sync holds no lock) and makes the lines durable."""
    from snerd.eventlog.postgres import sql
    from snerd.eventlog.postgres.wire import Wire

    log, rec = await _open(backend, logs, follow=False, fsync=True)
    syncs: list[bool] = []  # whether each sync went out inside a transaction
    real = Wire.round_trip

    async def spying(self: Wire, steps: Any, *, end: bool, ahead: Any = ()) -> Any:
        if steps[0][0] == sql.TOUCH_XID:
            syncs.append(log._in_txn)
        return await real(self, steps, end=end, ahead=ahead)

    monkeypatch.setattr(Wire, "round_trip", spying)

    async def caller(k: str) -> None:
        await log.append(recs(k), durable=False)
        await log.sync()

    await asyncio.gather(caller("a"), caller("b"))
    assert not log._unsynced
    assert syncs == [False]  # one sync, in autocommit: it commits, holding no lock
    assert await _lock_is_free(log)
    await log.append(recs("c"))
    assert sorted(rec.state) == ["a", "b", "c"]


async def test_a_request_queued_while_the_unused_transaction_rolls_back_is_written(
    backend: PostgresBackend, logs: list[EventLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    from snerd.eventlog.postgres.log import PostgresLog

    log, rec = await _open(backend, logs, follow=False)
    late: list[asyncio.Future[None]] = []
    real = PostgresLog._rollback

    async def rollback_meanwhile(self: PostgresLog) -> None:
        if not late:  # a caller comes while the ROLLBACK is on its way
            late.append(self.submit(lambda: (recs("late"), None)))
        await real(self)

    monkeypatch.setattr(PostgresLog, "_rollback", rollback_meanwhile)
    await asyncio.gather(log.append(recs("a")), log.append(recs("b")))
    await asyncio.wait_for(log._wait_writer(), 10)
    assert late[0].done()
    assert [r["k"] for r in rec.records] == ["a", "b", "late"]
    assert await _lock_is_free(log)


def test_a_notification_carries_a_small_batchs_lines_and_only_those() -> None:
    from snerd.eventlog.postgres.schema import (
        PAYLOAD_MAX,
        lines_payload,
        parse_lines_payload,
        parse_payload,
    )

    lines = [b'{"k":"a","seq":3}\n', b'{"k":"b","seq":4}\n']
    payload = lines_payload("q1", "tok", 7, 2, lines)
    assert payload is not None
    assert parse_lines_payload(payload) == (7, 2, lines)
    assert parse_payload(payload.partition(b"\n")[0].decode())[0] == "q1"
    assert lines_payload("q1", "tok", 7, 2, [b"x" * PAYLOAD_MAX + b"\n"]) is None  # too big
    assert parse_lines_payload(b"q1 tok") is None  # a plain payload: read instead
    assert parse_lines_payload(b"q1 tok 7 x\n{}\n") is None


async def test_a_follower_takes_a_peers_small_batches_from_their_notifications(
    backend: PostgresBackend, logs: list[EventLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A peer's batch small enough to ride in its notification is delivered from it:
    the follower reads nothing. A batch too big for it (or after a gap) is read."""
    follower, rec = await _open(backend, logs, poll_interval=3600.0)
    writer, _ = await _open(backend, logs, follow=False)
    await writer.append([{"k": "first"}])  # read: the follower may not listen yet
    await rec.wait_for(lambda: "first" in rec.state, timeout=10)
    reads: list[int] = []
    real = follower._follow_catch_up

    async def counting() -> None:
        reads.append(1)
        await real()

    monkeypatch.setattr(follower, "_follow_catch_up", counting)
    for i in range(3):
        await writer.append([{"k": f"small{i}"}, {"k": f"more{i}"}])
    await rec.wait_for(lambda: "more2" in rec.state, timeout=10)
    assert reads == []  # every line came with its notification
    await writer.append([{"k": "big", "pad": "x" * 9000}])
    await rec.wait_for(lambda: "big" in rec.state, timeout=10)
    assert reads  # too big to carry: read
    assert [r["k"] for r in rec.records] == [
        "first", "small0", "more0", "small1", "more1", "small2", "more2", "big"]
    assert [r["seq"] for r in rec.records] == list(range(1, 9))


async def test_a_compaction_begun_while_a_batch_commits_counts_the_batchs_lines(
    backend: PostgresBackend, logs: list[EventLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch's records are delivered (and its chain moved) before its COMMIT's
    round trip; a compaction that takes its point meanwhile must count the batch's
    lines too, or the tail it copies repeats them (found by three daemons compacting
    every 4 KB: a duplicate line, and a chain break at it)."""
    from snerd.eventlog.chain import verify_logs
    from snerd.eventlog.postgres import sql
    from snerd.eventlog.postgres.history import iter_pg_history
    from snerd.eventlog.postgres.wire import Wire
    from snerd.eventlog.storage import chain_logs

    log, rec = await _open(backend, logs, follow=False)
    await log.append(recs("a", "b"))
    committing, go = asyncio.Event(), asyncio.Event()
    real = Wire.round_trip

    async def held(self: Wire, steps: Any, *, end: bool, ahead: Any = ()) -> Any:
        if any(step[0] == sql.APPEND for step in steps) and not go.is_set():
            committing.set()
            await go.wait()
        return await real(self, steps, end=end, ahead=ahead)

    monkeypatch.setattr(Wire, "round_trip", held)
    appending = asyncio.ensure_future(log.append(recs("c")))
    await committing.wait()  # "c" is delivered, its COMMIT not sent yet
    compacting = asyncio.ensure_future(log.compact(rec.snapshot()))
    await asyncio.sleep(0)  # one loop turn: the compaction takes its point
    go.set()
    await appending
    await compacting
    await log.append(recs("d"))
    puts = [r["k"] for r in iter_pg_history(backend.url) if r.get("event") == "put"]
    assert puts == ["a", "b", "c", "d"]  # each once: no line repeated by the tail copy
    report = verify_logs(chain_logs(backend.url))
    assert report.breaks == [] and report.older_links == 0


# --- compaction copies the archive before it takes the queue's lock ----------------------


def _archives(queue: str) -> list[tuple[str, int, int]]:
    """(name, bytes, rows) of every archive head of ``queue``, pending ones too."""
    import psycopg

    with psycopg.connect(pgkit.PG_URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT a.name, a.bytes, (SELECT count(*) FROM snerd.archive_log l"
            " WHERE l.queue = a.queue AND l.name = a.name)"
            " FROM snerd.archives a WHERE a.queue = %s ORDER BY a.name",
            (queue,),
        ).fetchall()
    return [(str(n), int(b), int(c)) for n, b, c in rows]


def _puts(url: str) -> list[str]:
    from snerd.eventlog.postgres.history import iter_pg_history

    return [r["k"] for r in iter_pg_history(url) if r.get("event") == "put"]


async def test_a_compaction_copies_the_old_rows_before_it_takes_the_queues_lock(
    backend: PostgresBackend, logs: list[EventLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy of the whole log into its archive (the bulk of a compaction: ~200 ms
    for 10,000 rows) is made outside the queue's lock, so appends of every daemon go on
    meanwhile; under the lock only the rows written since are copied. While it is
    pending, no reader lists the archive (each record is read once)."""
    from snerd.eventlog.chain import verify_logs
    from snerd.eventlog.postgres.log import PostgresLog
    from snerd.eventlog.postgres.sql import PENDING
    from snerd.eventlog.storage import chain_logs

    log, rec = await _open(backend, logs, follow=False)
    peer, _ = await _open(backend, logs, follow=False)
    await log.append(recs("a", "b", "c"))
    copied, go = asyncio.Event(), asyncio.Event()
    real = PostgresLog._archive_ahead

    async def paused(self: PostgresLog, side: Any, point: Any) -> Any:
        archive = await real(self, side, point)
        copied.set()
        await go.wait()
        return archive

    monkeypatch.setattr(PostgresLog, "_archive_ahead", paused)
    compacting = asyncio.ensure_future(log.compact(rec.snapshot()))
    await copied.wait()
    [(name, size, rows)] = _archives(backend.queue)
    assert (size, rows) == (PENDING, 3)  # the rows read so far, copied, not listed
    assert await _lock_is_free(log)  # the queue's lock is not held meanwhile
    await asyncio.wait_for(peer.append(recs("d")), 10)  # another writer appends
    assert _puts(backend.url) == ["a", "b", "c", "d"]  # each once: the copy is not read
    go.set()
    await compacting
    [(name2, size, rows)] = _archives(backend.queue)
    assert name2 == name and size > 0 and rows == 4  # "d" copied under the lock
    await log.append(recs("e"))
    assert _puts(backend.url) == ["a", "b", "c", "d", "e"]
    assert rec.snapshot() and [r["k"] for r in rec.data()][-1] == "e"
    report = verify_logs(chain_logs(backend.url))
    assert report.breaks == [] and report.older_links == 0


async def test_a_pending_archive_left_by_a_dead_compaction_is_unread_then_dropped(
    backend: PostgresBackend, logs: list[EventLog]
) -> None:
    """A compaction that died after its copy leaves a pending archive: readers skip it
    (history, describe, retention), and the next compaction drops it."""
    import psycopg

    from snerd.eventlog.postgres.history import describe
    from snerd.eventlog.postgres.sql import PENDING

    log, rec = await _open(backend, logs, follow=False)
    await log.append(recs("a", "b"))
    with psycopg.connect(pgkit.PG_URL, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO snerd.archives (queue, name, ts_ms, bytes) VALUES (%s, 'dead', 1, %s)",
            (backend.queue, PENDING),
        )
        conn.execute(
            "INSERT INTO snerd.archive_log (queue, name, pos, line)"
            " SELECT queue, 'dead', pos, line FROM snerd.log WHERE queue = %s",
            (backend.queue,),
        )
    assert _puts(backend.url) == ["a", "b"]
    assert describe(backend.url)[2] == 0  # no archive listed
    assert log.prune_archives(max_age_ms=0, max_bytes=0, now_ms=10**13) == 0
    await log.compact(rec.snapshot())
    [(name, size, rows)] = _archives(backend.queue)  # the dead one's copy is gone
    assert name != "dead" and size > 0 and rows == 2
    assert _puts(backend.url) == ["a", "b"]


async def test_a_compaction_skips_while_another_daemon_compacts_the_queue(
    backend: PostgresBackend, logs: list[EventLog]
) -> None:
    """Compactions of one queue take turns (a lock of their own, not the queue's): one
    that finds another in progress is skipped; the thresholds ask again later."""
    import psycopg

    from snerd.eventlog.postgres.schema import lock_key

    log, rec = await _open(backend, logs, follow=False)
    await log.append(recs("a", "b"))
    with psycopg.connect(pgkit.PG_URL, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", (lock_key("compact", backend.queue),))
        await log.compact(rec.snapshot())
        assert _archives(backend.queue) == []  # skipped: nothing archived or replaced
        await asyncio.wait_for(log.append(recs("c")), 10)  # appends are not held up
    await log.compact(rec.snapshot())  # the other session ended: its lock went with it
    assert len(_archives(backend.queue)) == 1
    assert _puts(backend.url) == ["a", "b", "c"]


async def test_a_copy_made_for_another_generation_abandons_the_compaction(
    backend: PostgresBackend, logs: list[EventLog]
) -> None:
    """The copy ahead holds only rows of the generation the compaction read: if the
    queue was replaced since (an older daemon's compaction, a migrate), the compaction
    is abandoned and leaves no archive behind, pending or listed."""
    import psycopg

    log, rec = await _open(backend, logs, follow=False)
    await log.append(recs("a", "b"))
    with psycopg.connect(pgkit.PG_URL, autocommit=True) as conn:
        conn.execute(
            "UPDATE snerd.queues SET generation = generation + 1 WHERE queue = %s",
            (backend.queue,),
        )
    await log.compact(rec.snapshot())
    assert _archives(backend.queue) == []
    assert _puts(backend.url) == ["a", "b"]


async def test_two_writers_compacting_while_they_append_keep_every_record_once(
    backend: PostgresBackend, logs: list[EventLog]
) -> None:
    """Two writers append and compact at once, over and over: compactions take turns
    (or are skipped), copies made ahead of the lock are either installed or dropped,
    and the history holds every record once, its chain unbroken; both writers fold
    the same live state."""
    from snerd.eventlog.chain import verify_logs
    from snerd.eventlog.storage import chain_logs

    a, rec_a = await _open(backend, logs)
    b, rec_b = await _open(backend, logs)

    async def writer(log: Any, rec: Recorder, tag: str) -> None:
        for i in range(60):
            await log.append([{"event": "put", "k": f"{tag}{i}", "v": i}])
            if i % 3 == 0:
                await log.append([{"event": "del", "del": f"{tag}{i}"}])
            if i % 7 == 6:
                await log.compact(rec.snapshot())

    await asyncio.gather(writer(a, rec_a, "a"), writer(b, rec_b, "b"))
    await a.catch_up()
    await b.catch_up()
    puts = _puts(backend.url)
    assert sorted(puts) == sorted([f"a{i}" for i in range(60)] + [f"b{i}" for i in range(60)])
    report = verify_logs(chain_logs(backend.url))
    assert report.breaks == [] and report.older_links == 0
    assert all(size > 0 for _, size, _ in _archives(backend.queue))  # none left pending
    expected = {f"{t}{i}" for t in "ab" for i in range(60) if i % 3}
    assert set(rec_a.state) == set(rec_b.state) == expected


async def test_a_compaction_asked_for_while_following_another_s_compaction_waits_for_it(
    backend: PostgresBackend, logs: list[EventLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A catch-up that meets another daemon's compaction reads the new log from its
    start: until it has, the line count is the new log's and what was delivered the old
    one's. A compaction asked for then takes its point once the catch-up is done; before,
    its point counted no line read, so it archived nothing and copied the whole old log
    after its snapshot (a header, then the old log again: a chain break; found by the
    engine interleavings on PostgreSQL)."""
    from snerd.eventlog.chain import verify_logs
    from snerd.eventlog.postgres import log as pglog
    from snerd.eventlog.storage import chain_logs

    a, rec_a = await _open(backend, logs, follow=False)
    b, rec_b = await _open(backend, logs, follow=False)
    await a.append(recs("a", "b"))
    await b.catch_up()
    await b.compact(rec_b.snapshot())  # a new generation: a follows it on its next read
    await b.append(recs("c"))
    rereading, go = asyncio.Event(), asyncio.Event()
    real = pglog.PostgresLog._read

    async def held(self: Any) -> Any:
        if self is a and self._pos == 0 and not go.is_set():  # the new log, from its start
            rereading.set()
            await go.wait()
        return await real(self)

    monkeypatch.setattr(pglog.PostgresLog, "_read", held)
    following = asyncio.ensure_future(a.catch_up())
    await rereading.wait()
    compacting = asyncio.ensure_future(a.compact(rec_a.snapshot()))
    for _ in range(3):
        await asyncio.sleep(0)  # the compaction would take its point here
    go.set()
    await following
    await compacting
    await a.append(recs("d"))
    assert _puts(backend.url) == ["a", "b", "c", "d"]  # each once
    report = verify_logs(chain_logs(backend.url))
    assert report.breaks == [] and report.older_links == 0
    assert set(rec_a.state) == {"a", "b", "c", "d"}
