"""The contract every EventLog backend honours; runs against MemoryLog and FileLog.

Two log instances on one store (or storage dir) stand for two processes.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

import pytest
from logkit import Backend, OpenLog, PostgresBackend, Recorder

from snerd.errors import LogClosedError, LogError
from snerd.eventlog.aio import AioFsync
from snerd.eventlog.base import EventLog, Record


def recs(*keys: str, **extra: Any) -> list[Record]:
    return [{"event": "put", "k": k, **extra} for k in keys]


def claim(rec: Recorder, key: str) -> Any:
    """A guard: claim ``key`` unless the state already shows a claim on it."""

    def command() -> tuple[list[Record], bool]:
        if any(r.get("claim") == key for r in rec.records):
            return [], False
        return [{"event": "claimed", "claim": key}], True

    return command


async def test_append_then_replay_in_order(open_log: OpenLog) -> None:
    log, rec = await open_log()
    await log.append(recs("a", "b"))
    await log.append(recs("c"))
    assert [r["k"] for r in rec.records] == ["a", "b", "c"]
    _, fresh = await open_log()
    assert fresh.records == rec.records


async def test_seq_is_stamped_consecutively_and_continues(open_log: OpenLog) -> None:
    log, rec = await open_log()
    await log.append([{"event": "put", "k": "a", "seq": 99}])  # seq is the log's business
    await log.append(recs("b", "c"))
    assert [r["seq"] for r in rec.records] == [1, 2, 3]
    await log.close()
    log2, rec2 = await open_log()
    await log2.append(recs("d"))
    assert [r["seq"] for r in rec2.records] == [1, 2, 3, 4]
    assert log2.stats().last_seq == 4


async def test_appended_records_are_copies(open_log: OpenLog) -> None:
    log, rec = await open_log()
    mine = {"event": "put", "k": "a"}
    await log.append([mine])
    assert "seq" not in mine
    assert rec.records == [{"event": "put", "k": "a", "seq": 1}]


async def test_transact_returns_the_command_result(open_log: OpenLog) -> None:
    log, rec = await open_log()
    assert await log.transact(lambda: (recs("a"), "done")) == "done"
    assert await log.transact(lambda: ([], 42)) == 42
    assert len(rec.records) == 1


async def test_second_claim_of_a_key_is_refused_across_instances(open_log: OpenLog) -> None:
    a, rec_a = await open_log(follow=False)
    b, rec_b = await open_log(follow=False)
    results = await asyncio.gather(
        a.transact(claim(rec_a, "job-1")), b.transact(claim(rec_b, "job-1"))
    )
    assert sorted(results) == [False, True]
    _, fresh = await open_log()
    assert [r["claim"] for r in fresh.records] == ["job-1"]


async def test_commands_in_one_batch_see_each_others_records(open_log: OpenLog) -> None:
    log, rec = await open_log()
    results = await asyncio.gather(*(log.transact(claim(rec, "k")) for _ in range(10)))
    assert results.count(True) == 1
    assert len(rec.records) == 1


async def test_a_raising_command_affects_only_its_caller(open_log: OpenLog) -> None:
    log, rec = await open_log()

    def boom() -> tuple[list[Record], None]:
        raise ValueError("no")

    results = await asyncio.gather(
        log.append(recs("a")),
        log.transact(boom),
        log.append(recs("b")),
        return_exceptions=True,
    )
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], ValueError)
    assert [r["k"] for r in rec.records] == ["a", "b"]
    await log.append(recs("c"))  # the log goes on
    _, fresh = await open_log()
    assert [r["k"] for r in fresh.records] == ["a", "b", "c"]


async def test_unserializable_record_fails_only_its_caller(open_log: OpenLog) -> None:
    log, rec = await open_log()
    results = await asyncio.gather(
        log.append([{"k": "bad", "v": object()}]),
        log.append(recs("ok")),
        return_exceptions=True,
    )
    assert isinstance(results[0], LogError)
    assert [r["k"] for r in rec.records] == ["ok"]


async def test_plain_appends_in_one_batch_keep_their_order_and_their_failures(
    open_log: OpenLog,
) -> None:
    """A batch's consecutive plain appends are written together, in order, with
    consecutive seqs; a command after them sees them; one that cannot be encoded fails
    only its caller."""
    log, rec = await open_log()
    results = await asyncio.gather(
        log.append(recs("a")),
        log.append([{"k": "bad", "v": object()}]),
        log.append(recs("b", "c")),
        log.append([{"claim": "k"}]),
        log.transact(claim(rec, "k")),
        log.append(recs("d")),
        return_exceptions=True,
    )
    assert isinstance(results[1], LogError)
    assert [results[i] for i in (0, 2, 3, 5)] == [None] * 4
    assert results[4] is False  # the plain append before it claimed "k" first
    assert [r.get("k", r.get("claim")) for r in rec.records] == ["a", "b", "c", "k", "d"]
    assert [r["seq"] for r in rec.records] == [1, 2, 3, 4, 5]
    _, fresh = await open_log()
    assert fresh.records == rec.records


async def test_an_append_cancelled_before_its_batch_is_not_written(open_log: OpenLog) -> None:
    """Concurrent appends of a record each make one unit of a batch; one whose caller
    gave up before the batch ran is left out of it (and only that one)."""
    log, rec = await open_log()
    appends = [asyncio.ensure_future(log.append(recs(str(i)))) for i in range(8)]
    await asyncio.sleep(0)  # every append submitted; the writer not started yet
    appends[5].cancel()
    results = await asyncio.gather(*appends, return_exceptions=True)
    assert isinstance(results[5], asyncio.CancelledError)
    assert [r["k"] for r in rec.records] == ["0", "1", "2", "3", "4", "6", "7"]
    assert [r["seq"] for r in rec.records] == list(range(1, 8))
    _, fresh = await open_log()
    assert fresh.records == rec.records


async def test_catch_up_delivers_the_other_instances_appends(open_log: OpenLog) -> None:
    a, rec_a = await open_log(follow=False)
    b, rec_b = await open_log(follow=False)
    await a.append(recs("a1", "a2"))
    assert await b.catch_up() == 2
    assert await b.catch_up() == 0
    await b.append(recs("b1"))
    assert await a.catch_up() == 1
    assert rec_a.records == rec_b.records
    assert [r["seq"] for r in rec_a.records] == [1, 2, 3]


async def test_follow_delivers_without_being_asked(open_log: OpenLog) -> None:
    a, _ = await open_log(follow=False)
    _, rec_b = await open_log()
    await a.append(recs("x", "y"))
    await rec_b.wait_for(lambda: len(rec_b.records) == 2)
    assert [r["k"] for r in rec_b.records] == ["x", "y"]


async def test_compaction_keeps_state_and_the_other_instance_goes_on(open_log: OpenLog) -> None:
    """An instance that had read up to the compaction point keeps its state: it hears
    the new snapshot's header, not the restated records (no reset, no replay); so does
    the instance that compacted (where the snapshot is: the engine compacts again only
    once something was appended after it)."""
    a, rec_a = await open_log(follow=False)
    b, rec_b = await open_log(follow=False)
    await a.append(recs("x", "y") + recs("x", v=2) + [{"del": "y"}])
    await b.catch_up()
    before = dict(rec_a.state)
    heard, heard_a = len(rec_b.records), len(rec_a.records)
    await a.compact(rec_a.snapshot())
    assert rec_a.state == before and rec_a.resets == 0
    [header] = rec_a.records[heard_a:]
    assert header["event"] == "snapshot" and header["seq"] == 4
    await b.catch_up()
    assert rec_b.resets == 0 and rec_b.state == before
    assert rec_b.records[heard:] == [header]
    assert b.stats().records == a.stats().records
    _, fresh = await open_log(follow=False)
    assert fresh.state == before
    await b.append(recs("z"))
    await a.catch_up()
    assert rec_a.state == rec_b.state
    assert rec_a.records[-1] == {"event": "put", "k": "z", "seq": 5}
    assert a.stats().records == b.stats().records == 1 + 1 + 1  # header, snapshot, z


async def test_a_snapshot_function_is_taken_at_the_point(open_log: OpenLog) -> None:
    """A write queued before a compaction that runs as a task (a loop turn later) is in
    the snapshot or the tail when the snapshot is a function: called at the point."""
    a, rec_a = await open_log(follow=False)
    await a.append(recs(*(f"k{i}" for i in range(20))))
    queued = a.submit(lambda: (recs("queued"), "acked"))  # runs before the compaction
    assert await asyncio.gather(a.compact(rec_a.snapshot), queued) == [None, "acked"]
    _, fresh = await open_log(follow=False)
    expected = {f"k{i}" for i in range(20)} | {"queued"}
    assert set(fresh.state) == set(rec_a.state) == expected


async def test_a_compaction_during_a_write_holds_the_records_not_heard_yet(
    open_log: OpenLog,
) -> None:
    """A batch's records are heard after they are written; a compaction whose point
    falls while the write is under way (a slow disk's fsync in the pool, a database's
    round trip) has the listener hear them first, so that its snapshot holds them."""
    a, rec_a = await open_log(follow=False)
    await a.append(recs("before"))
    gate = asyncio.Event()
    writing = asyncio.Event()
    real_flush = a._flush  # type: ignore[attr-defined]

    async def slow_flush(durable: bool) -> None:
        writing.set()
        await gate.wait()
        await real_flush(durable)

    a._flush = slow_flush  # type: ignore[attr-defined]
    appended = asyncio.ensure_future(a.append(recs("mid")))
    await writing.wait()
    assert "mid" not in rec_a.state  # written (or about to be), not heard yet
    compacting = asyncio.ensure_future(a.compact(rec_a.snapshot))
    await asyncio.sleep(0)  # the compaction takes its point
    gate.set()
    await asyncio.gather(appended, compacting)
    a._flush = real_flush  # type: ignore[attr-defined]
    await a.append(recs("after"))
    _, fresh = await open_log(follow=False)
    assert set(fresh.state) == set(rec_a.state) == {"before", "mid", "after"}


async def test_compaction_with_concurrent_appends_loses_nothing(open_log: OpenLog) -> None:
    a, rec_a = await open_log(follow=False)
    b, _ = await open_log(follow=False)
    await a.append(recs(*(f"k{i}" for i in range(50))))

    async def writer() -> None:
        for i in range(30):
            await b.append(recs(f"w{i}"))

    await asyncio.gather(a.compact(rec_a.snapshot()), writer(), a.append(recs("mine")))
    await a.catch_up()
    _, fresh = await open_log(follow=False)
    expected = {f"k{i}" for i in range(50)} | {f"w{i}" for i in range(30)} | {"mine"}
    assert set(fresh.state) == set(rec_a.state) == expected
    seqs = [r["seq"] for r in fresh.data()]
    assert len(seqs) == len(set(seqs))


async def test_compacting_twice_and_reopening(open_log: OpenLog) -> None:
    a, rec_a = await open_log(follow=False)
    for round_ in range(3):
        await a.append(recs(*(f"k{round_}-{i}" for i in range(5))))
        await a.compact(rec_a.snapshot())
    b, fresh = await open_log(follow=False)
    assert fresh.state == rec_a.state and len(fresh.state) == 15
    assert a.stats().last_seq == b.stats().last_seq == 15


async def test_concurrent_transacts_are_group_committed(
    open_log: OpenLog, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsyncs = 0
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        nonlocal fsyncs
        fsyncs += 1
        real_fsync(fd)

    real_submit = AioFsync.submit

    def counting_submit(aio: AioFsync) -> None:  # an fsync through kernel AIO
        nonlocal fsyncs
        fsyncs += 1
        real_submit(aio)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    monkeypatch.setattr(AioFsync, "submit", counting_submit)
    log, rec = await open_log(fsync=True)
    n = 64
    await asyncio.gather(*(log.append(recs(f"k{i}")) for i in range(n)))
    assert len(rec.records) == n
    commits = log.commits  # type: ignore[attr-defined]
    assert 1 <= commits < n
    if backend.name == "file":
        assert 1 <= fsyncs <= commits < n


async def test_non_durable_appends(open_log: OpenLog) -> None:
    log, _ = await open_log(fsync=True)
    await asyncio.gather(log.append(recs("a"), durable=False), log.append(recs("b")))
    _, fresh = await open_log()
    assert {r["k"] for r in fresh.records} == {"a", "b"}


def _flushes(log: EventLog) -> list[bool]:
    """The ``durable`` flag of each flush ``log`` makes from now on."""
    flushes: list[bool] = []
    real_flush = log._flush  # type: ignore[attr-defined]

    async def flushing(durable: bool) -> None:
        flushes.append(durable)
        await real_flush(durable)

    log._flush = flushing  # type: ignore[attr-defined]
    return flushes


async def test_a_queued_request_made_durable_is_synced(open_log: OpenLog) -> None:
    """make_durable: a request submitted without durability and still queued is synced
    with its batch; once the writer has taken its batch, it says it cannot."""
    a, _ = await open_log(fsync=True)
    b, _ = await open_log(fsync=True)
    flushes = _flushes(a)
    await a.submit(lambda: (recs("plain"), None), durable=False)
    queued = a.submit(lambda: (recs("x"), None), durable=False)
    assert a.make_durable(queued)
    await queued
    assert flushes == [False, True]
    async with b._exclusive():  # type: ignore[attr-defined]
        taken = a.submit(lambda: (recs("y"), None), durable=False)
        for _ in range(5):  # the writer takes the batch and waits for the lock
            await asyncio.sleep(0)
        assert not a.make_durable(taken)
    await taken
    assert flushes == [False, True, False]


async def test_a_durable_request_is_answered_before_the_requests_behind_it(
    open_log: OpenLog, backend: Backend
) -> None:
    """on_durable: a durable request's hook hears its result once its lines are synced,
    before the listener hears them (the fold is not on the way to the daemon's ack),
    before the non-durable request queued behind it in the same batch is even run (the
    claim the daemon decides next, against the listener's state), and before its own
    future resolves; the rest of the batch is written after, without a sync of its own."""
    log, rec = await open_log(fsync=True)
    flushes = _flushes(log)
    order: list[Any] = []
    hear = rec.on_records

    def heard(records: Any) -> None:
        order.append(("heard", [r["k"] for r in records]))
        hear(records)

    rec.on_records = heard  # type: ignore[method-assign]

    def enqueue() -> tuple[list[Record], str]:
        order.append("enqueue decided")
        return recs("e"), "acked"

    def claim() -> tuple[list[Record], None]:
        order.append("claim decided")
        return recs("c"), None

    def durable(result: str) -> None:
        order.append((result, list(flushes), [r["k"] for r in rec.records]))

    first = log.submit(enqueue, on_durable=durable)
    first.add_done_callback(lambda _: order.append("enqueue resolved"))
    second = log.submit(claim, durable=False)
    assert await first == "acked"
    await second
    split = not isinstance(backend, PostgresBackend)  # a file's writes, a list's appends
    assert log.SPLIT_FLUSH is split  # type: ignore[attr-defined]
    if split:
        assert order == [
            "enqueue decided",
            ("acked", [True], []),  # synced; not heard yet, the claim not decided yet
            ("heard", ["e"]),
            "claim decided",
            ("heard", ["c"]),
            "enqueue resolved",
        ]
        assert flushes == [True, False]
    else:  # PostgreSQL: its flush commits, so the whole batch first
        assert order == [
            "enqueue decided", ("heard", ["e"]), "claim decided", ("acked", [True], ["e"]),
            ("heard", ["c"]), "enqueue resolved",
        ]  # fmt: skip
        assert flushes == [True]
    _, fresh = await open_log()
    assert [r["k"] for r in fresh.records] == ["e", "c"]


async def test_without_a_waiting_request_a_batch_is_one_flush(open_log: OpenLog) -> None:
    """Nobody waits to be answered early: a durable request and the one behind it share
    one write and one sync, as ever (the embedded queue's enqueue and its claim)."""
    log, _ = await open_log(fsync=True)
    flushes = _flushes(log)
    first = log.submit(lambda: (recs("e"), None))
    second = log.submit(lambda: (recs("c"), None), durable=False)
    await asyncio.gather(first, second)
    assert flushes == [True]


async def test_a_backend_that_cannot_split_its_flush_answers_at_the_batchs_end(
    open_log: OpenLog,
) -> None:
    """SPLIT_FLUSH False (a flush that ends a transaction): the hook still hears the
    result before the future resolves, once the whole batch is durable."""
    log, _ = await open_log(fsync=True)
    log.SPLIT_FLUSH = False  # type: ignore[attr-defined]
    flushes = _flushes(log)
    order: list[str] = []
    first = log.submit(lambda: (recs("e"), 1), on_durable=lambda _: order.append("acked"))
    second = log.submit(lambda: (order.append("claim decided") or recs("c"), None),
                        durable=False)  # fmt: skip
    await asyncio.gather(first, second)
    assert order == ["claim decided", "acked"]
    assert flushes == [True]


async def test_a_hook_that_raises_is_logged_and_its_request_still_succeeds(
    open_log: OpenLog, caplog: pytest.LogCaptureFixture
) -> None:
    log, rec = await open_log(fsync=True)

    def broken(_: object) -> None:
        raise RuntimeError("the hook's bug")

    first = log.submit(lambda: (recs("e"), "ok"), on_durable=broken)
    second = log.submit(lambda: (recs("c"), None), durable=False)
    assert await first == "ok"
    await second
    assert [r["k"] for r in rec.records] == ["e", "c"]
    assert "on_durable failed" in caplog.text and "the hook's bug" in caplog.text


async def test_a_queued_request_made_durable_takes_a_hook(
    open_log: OpenLog, backend: Backend
) -> None:
    """make_durable(request, on_durable): the request, still queued, is synced with its
    batch and its hook answered before what is queued behind it runs."""
    log, _ = await open_log(fsync=True)
    flushes = _flushes(log)
    heard: list[Any] = []
    queued = log.submit(lambda: (recs("x"), "x"), durable=False)
    assert log.make_durable(queued, heard.append)
    behind = log.submit(lambda: (heard.append("behind") or recs("y"), None), durable=False)
    await asyncio.gather(queued, behind)
    split = not isinstance(backend, PostgresBackend)
    assert heard == (["x", "behind"] if split else ["behind", "x"])
    assert flushes == ([True, False] if split else [True])


async def test_lines_written_without_a_sync_are_synced_soon_after_the_first(
    open_log: OpenLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line written without a sync is synced at most SYNC_SOON_SECONDS after it was
    written, unless a durable batch covers it first; then the timer waits for the lines
    written after that batch, not for its own first deadline (on the loop's clock,
    moved by hand)."""
    from snerd.eventlog.batching import SYNC_SOON_SECONDS as SOON

    log, _ = await open_log(fsync=True)
    loop = asyncio.get_running_loop()
    start = loop.time()
    clock = [start]
    monkeypatch.setattr(loop, "time", lambda: clock[0])
    syncs: list[float] = []
    real_sync = log._sync_only  # type: ignore[attr-defined]

    async def counting() -> None:
        syncs.append(round((clock[0] - start) / SOON, 3))
        await real_sync()

    log._sync_only = counting  # type: ignore[attr-defined]

    async def at(soons: float) -> None:  # move the clock; due timers and the writer run
        clock[0] = start + soons * SOON
        for _ in range(3):  # the loop's next turn runs the timers due by now
            await asyncio.sleep(0)
        await log._wait_writer()  # type: ignore[attr-defined]  # and what they submitted

    await log.append(recs("a"), durable=False)  # at 0: the timer is armed for 1
    await at(0.6)
    await log.append(recs("b"))  # durable: covers a
    await log.append(recs("c"), durable=False)  # at 0.6: due at 1.6
    await at(1.2)
    assert syncs == []  # the timer armed for a found c too young
    assert log._unsynced  # type: ignore[attr-defined]
    await log.append(recs("e"), durable=False)  # still due at 1.6: c waits since 0.6
    await at(1.7)
    assert syncs == [1.7]
    assert not log._unsynced  # type: ignore[attr-defined]
    await at(5)
    assert syncs == [1.7]  # nothing left to sync: no timer fires again
    await log.append(recs("d"), durable=False)  # at 5: due at 6
    await at(5.9)
    assert syncs == [1.7]
    await at(6.1)
    assert syncs == [1.7, 6.1]


async def test_kick_runs_a_batch_at_once_that_waits_on_nothing(
    open_log: OpenLog, backend: Backend
) -> None:
    """kick: what was submitted runs in the call, not on the loop's next turn, where
    the batch needs no I/O wait (a file's uncontended lock and inline fsync; a list);
    a database's round trip goes on as a task from its first wait. Either way every
    request is answered, in order, once. (No follower, no fsync: nothing else may hold
    the log's mutex or send the fsync to the pool, a slow disk's way.)"""
    log, rec = await open_log(follow=False)
    await log.append(recs("warm"))
    first = log.submit(lambda: (recs("a"), "a"))
    second = log.submit(lambda: (recs("b"), "b"), durable=False)
    log.kick()
    waits = isinstance(backend, PostgresBackend)
    assert (first.done(), second.done()) == (not waits, not waits)
    assert await asyncio.gather(first, second) == ["a", "b"]
    log.kick()  # nothing due: nothing happens
    assert [r["k"] for r in rec.records] == ["warm", "a", "b"]
    _, fresh = await open_log()
    assert [r["k"] for r in fresh.records] == ["warm", "a", "b"]


async def test_a_held_writer_waits_for_the_kick(open_log: OpenLog) -> None:
    """hold: what is submitted until the kick schedules nothing on the loop (the loop's
    turns pass and the writer does not start); the kick starts it, as without a hold."""
    log, rec = await open_log()
    log.hold()
    first = log.submit(lambda: (recs("a"), "a"))
    second = log.submit(lambda: (recs("b"), "b"), durable=False)
    for _ in range(3):
        await asyncio.sleep(0)
    assert not first.done() and not second.done() and rec.records == []
    log.kick()
    assert await asyncio.gather(first, second) == ["a", "b"]
    third = log.submit(lambda: (recs("c"), "c"))  # the hold ended with the kick
    assert await asyncio.wait_for(third, 10) == "c"
    assert [r["k"] for r in rec.records] == ["a", "b", "c"]


async def test_a_close_starts_a_writer_held_for_a_kick_that_never_came(
    open_log: OpenLog,
) -> None:
    """close finishes what is queued: a writer held for a kick (a caller that awaited
    between hold and kick, against hold's rule) is started by the close, not waited for
    forever; what was submitted is written."""
    log, _ = await open_log()
    log.hold()
    first = log.submit(lambda: (recs("a"), "a"))
    await asyncio.wait_for(log.close(), 10)
    assert first.done() and first.result() == "a"
    _, fresh = await open_log()
    assert [r["k"] for r in fresh.records] == ["a"]


async def test_then_hears_every_request_once_from_the_writer(
    open_log: OpenLog, backend: Backend
) -> None:
    """submit's ``then``: called once with the done future for every request (written,
    refused by its command, cancelled by its caller before its turn), in the order
    submitted, by the writer once the batch's lock is let go: with no loop turn of its
    own (where the batch waits on nothing, within the kick), after every future of the
    batch is resolved. What it submits runs in the writer's next batch."""
    log, rec = await open_log(follow=False)  # (no follower holding the mutex meanwhile)
    heard: list[tuple[str, Any, bool]] = []

    def then(name: str) -> Callable[[asyncio.Future[Any]], None]:
        def hear(future: asyncio.Future[Any]) -> None:
            outcome = ("cancelled" if future.cancelled()
                       else repr(future.exception()) if future.exception() else future.result())
            batch = futures[4:] if name == "d" else futures[:4]
            heard.append((name, outcome, all(f.done() for f in batch)))
            if name == "a":  # joins the next batch
                futures.append(log.submit(lambda: (recs("d"), "d"), then=then("d")))

        return hear

    def refuse() -> tuple[list[Record], None]:
        raise ValueError("no")

    futures = [
        log.submit(lambda: (recs("a"), "a"), then=then("a")),
        log.submit(refuse, then=then("b")),
        log.submit(lambda: (recs("c"), "c"), then=then("c")),
        log.submit(lambda: (recs("e"), "e"), then=then("e")),
    ]
    futures[2].cancel()
    log.kick()
    if not isinstance(backend, PostgresBackend):  # no I/O wait: all of it in the kick
        assert [name for name, _, _ in heard] == ["a", "b", "c", "e", "d"]
    await log._wait_writer()  # type: ignore[attr-defined]
    assert heard == [  # each with the whole of its batch resolved
        ("a", "a", True), ("b", "ValueError('no')", True), ("c", "cancelled", True),
        ("e", "e", True), ("d", "d", True),
    ]  # fmt: skip
    assert [r["k"] for r in rec.records] == ["a", "e", "d"]


async def test_a_writer_that_waits_goes_on_as_a_task_and_can_be_waited_for(
    open_log: OpenLog,
) -> None:
    """A writer started at once that then waits (a slow disk's fsync in the pool, a lock
    another holds) goes on as a task from there: its requests are answered when the
    wait ends, and the log's close waits for it."""
    log, rec = await open_log(fsync=True)
    gate = asyncio.Event()
    real_flush = log._flush  # type: ignore[attr-defined]

    async def slow_flush(durable: bool) -> None:
        await gate.wait()
        await real_flush(durable)

    log._flush = slow_flush  # type: ignore[attr-defined]
    first = log.submit(lambda: (recs("a"), "a"))
    log.kick()
    await asyncio.sleep(0)
    assert not first.done()
    second = log.submit(lambda: (recs("b"), "b"))  # queued behind the waiting batch
    gate.set()
    assert await asyncio.gather(first, second) == ["a", "b"]
    third = log.submit(lambda: (recs("c"), "c"))
    await log._wait_writer()  # type: ignore[attr-defined]
    assert third.done() and third.result() == "c"
    assert [r["k"] for r in rec.records] == ["a", "b", "c"]


async def test_a_sync_waits_for_no_other_writer(open_log: OpenLog) -> None:
    """Making one's own lines durable (an fsync, a synchronous commit) needs neither the
    lock nor a catch-up: it completes while another writer holds the lock."""
    a, _ = await open_log(fsync=True)
    b, _ = await open_log(fsync=True)
    await a.append(recs("x"), durable=False)
    async with b._exclusive():  # type: ignore[attr-defined]
        await asyncio.wait_for(a.sync(), 10)
    await a.append(recs("y"))
    _, fresh = await open_log()
    assert [r["k"] for r in fresh.records] == ["x", "y"]


async def test_garbage_lines_are_skipped_and_reported(open_log: OpenLog, backend: Backend) -> None:
    log, _ = await open_log()
    await log.append(recs("a"))
    backend.inject(b"this is not json\n[1, 2]\n")
    await log.append(recs("b"))
    _, fresh = await open_log()
    assert [r["k"] for r in fresh.records] == ["a", "b"]
    assert [(s.raw, s.reason) for s in fresh.skipped] == [
        (b"this is not json", "invalid_json"),
        (b"[1, 2]", "not_object"),
    ]
    assert fresh.skipped[1].offset == fresh.skipped[0].offset + len(b"this is not json\n")
    assert [r["seq"] for r in fresh.records] == [1, 2]


async def test_records_without_seq_are_kept(open_log: OpenLog, backend: Backend) -> None:
    backend.inject(b'{"taskId": "t1", "taskType": "email", "unknown": [1]}\n')
    log, rec = await open_log()
    await log.append(recs("a"))
    assert rec.records[0] == {"taskId": "t1", "taskType": "email", "unknown": [1]}
    assert rec.records[1]["seq"] == 1


async def test_close_is_idempotent_and_refuses_further_use(open_log: OpenLog) -> None:
    log, _ = await open_log()
    await log.append(recs("a"))
    await log.close()
    await log.close()
    with pytest.raises(LogClosedError):
        await log.append(recs("b"))
    with pytest.raises(LogClosedError):
        await log.catch_up()


async def test_close_finishes_queued_transactions(open_log: OpenLog) -> None:
    log, rec = await open_log()
    pending = [asyncio.ensure_future(log.append(recs(f"k{i}"))) for i in range(10)]
    await asyncio.sleep(0)  # let them queue
    await log.close()
    await asyncio.gather(*pending)
    assert len(rec.records) == 10


async def test_a_failing_listener_stops_the_log(open_log: OpenLog) -> None:
    log, rec = await open_log()

    def broken(records: Any) -> None:
        raise RuntimeError("projection bug")

    rec.on_records = broken  # type: ignore[method-assign]
    with pytest.raises(LogError):
        await log.append(recs("a"))
    with pytest.raises(LogError):
        await log.append(recs("b"))


async def test_open_twice_is_refused(backend: Backend) -> None:
    log: EventLog = backend.new()
    await log.open(Recorder())
    try:
        with pytest.raises(LogError):
            await log.open(Recorder())
    finally:
        await log.close()


async def test_stats(open_log: OpenLog, backend: Backend) -> None:
    log, _ = await open_log()
    await log.append(recs("a", "b"))
    backend.inject(b"junk\n")
    await log.append(recs("c"))
    stats = log.stats()
    assert (stats.records, stats.skipped, stats.last_seq) == (3, 1, 3)
    assert stats.size_bytes > 0


async def test_a_follower_goes_on_by_itself_after_compaction_elsewhere(open_log: OpenLog) -> None:
    a, rec_a = await open_log(follow=False)
    _, rec_b = await open_log()
    await a.append([*recs("x", "y"), {"del": "x"}])
    await rec_b.wait_for(lambda: len(rec_b.records) == 3)
    await a.compact(rec_a.snapshot())
    await a.append(recs("z"))
    await rec_b.wait_for(lambda: "z" in rec_b.state)
    assert rec_b.state == rec_a.state and rec_b.resets == 0
    assert [r.get("k", r.get("event")) for r in rec_b.records[3:]] == ["snapshot", "z"]


async def test_an_instance_behind_the_compaction_point_replays_the_new_log(
    open_log: OpenLog,
) -> None:
    """A snapshot that covers records this instance never read cannot be resumed from:
    it resets and replays the compacted log."""
    a, rec_a = await open_log(follow=False)
    b, rec_b = await open_log(follow=False)
    await a.append(recs("x"))
    await b.catch_up()
    await a.append([*recs("y"), {"del": "x"}])  # b has not read these
    await a.compact(rec_a.snapshot())
    await b.catch_up()
    assert rec_b.resets == 1 and rec_b.state == rec_a.state == {"y": rec_a.state["y"]}


async def test_history_holds_every_record_once_across_compactions(open_log: OpenLog) -> None:
    """``history()``: the audit trail (archives, then the live log) without the
    snapshots' restatements, as ``get`` and ``Queue.result`` read ended tasks back."""
    a, rec = await open_log(follow=False)
    await a.append(recs("x", "y"))
    await a.compact(rec.snapshot())
    await a.append(recs("z"))
    await a.compact(rec.snapshot())
    await a.append(recs("w"))
    puts = [(r["k"], r["seq"]) for r in a.history() if r.get("event") == "put"]
    assert puts == [("x", 1), ("y", 2), ("z", 3), ("w", 4)]
    b, _ = await open_log(follow=False)  # another process reads the same trail
    assert [r["k"] for r in b.history() if r.get("event") == "put"] == ["x", "y", "z", "w"]


async def test_history_about_some_ids_holds_every_record_naming_them(open_log: OpenLog) -> None:
    """``history_about(ids)``: at least the records of ``history()`` that name one of
    the ids (a file log reads them through its per-task index), across compactions,
    for another process too."""

    def about(records: Any, wanted: set[str]) -> list[tuple[Any, Any]]:
        return [(r.get("event"), r.get("seq")) for r in records
                if r.get("taskId") in wanted or r.get("task") in wanted]  # fmt: skip

    a, rec = await open_log(follow=False)
    await a.append([{"event": "enqueued", "taskId": t, "taskType": "x"} for t in "abc"])
    await a.compact(rec.snapshot())
    await a.append([{"event": "claimed", "task": "a"}, {"event": "succeeded", "taskId": "b"}])
    await a.compact(rec.snapshot())
    await a.append([{"event": "succeeded", "taskId": "a", "taskType": "x"}])
    b, _ = await open_log(follow=False)
    for log in (a, b):
        for wanted in ({"a"}, {"b", "c"}, {"nobody"}):
            expected = about(log.history(), wanted)
            assert about(log.history_about(wanted), wanted) == expected
    assert about(a.history(), {"a"}) == [("enqueued", 1), ("claimed", 4), ("succeeded", 6)]
