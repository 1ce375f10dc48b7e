"""Issue 12.5: storage faults are survived by the log instance, not frozen in.

A failed write is rolled back and refused; the listener is reset and replayed from
the storage (its last good state); for a backoff window writes are refused without
I/O while reads go on; then writes are tried again. Only a log that stays unreadable
for ``give_up_seconds`` ends the instance (``wait_fatal``). Time is a manual clock.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from faultkit import PatchableFileLog
from logkit import FileBackend, Recorder

from snerd.errors import LogError
from snerd.eventlog import batching, compaction, filelog
from snerd.eventlog.aio import AioFsync
from snerd.eventlog.base import StorageUnavailable
from snerd.eventlog.filelog import FileLog


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def put(*keys: str) -> list[dict[str, Any]]:
    return [{"event": "put", "k": k} for k in keys]


def read(log: FileLog, rec: Recorder) -> Any:
    """A read-only transaction (what the engine's ``read`` is)."""
    return log.transact(lambda: ((), sorted(rec.state)), durable=False)


@pytest.fixture
async def opened(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    logs: list[FileLog] = []

    async def _open(
        log_class: type[FileLog] = FileLog, **kwargs: Any
    ) -> tuple[FileLog, Recorder, Clock]:  # fmt: skip
        kwargs.setdefault("fsync", True)
        log = log_class(tmp_path / "s", **kwargs)
        clock = Clock()
        log.monotonic = clock
        rec = Recorder()
        await log.open(rec)
        logs.append(log)
        return log, rec, clock

    yield _open
    for log in logs:
        await log.close()


class Disk:
    """Makes the log's writes (or fsyncs, or reads) fail like a full or broken disk."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch
        self.full = False
        self.fsync_fails = False
        self.writes = 0
        real_write = compaction.write_all
        real_fsync = os.fsync

        def write_all(fd: int, data: bytes) -> None:
            self.writes += 1
            if self.full:  # half of it lands, then the disk is full
                real_write(fd, data[: len(data) // 2])
                raise OSError(errno.ENOSPC, "No space left on device")
            real_write(fd, data)

        def fsync(fd: int) -> None:
            if self.fsync_fails:
                raise OSError(errno.EIO, "Input/output error")
            real_fsync(fd)

        real_wait = AioFsync.wait

        def wait(aio: AioFsync) -> None:  # an fsync through kernel AIO fails as it returns
            real_wait(aio)
            if self.fsync_fails:
                raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(compaction, "write_all", write_all)
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(AioFsync, "wait", wait)


async def test_a_failed_write_is_rolled_back_and_reads_go_on(opened, monkeypatch, tmp_path):
    log, rec, clock = await opened()
    disk = Disk(monkeypatch)
    await log.append(put("a"))
    path = tmp_path / "s" / "tasks" / "tasks.log"
    before = path.read_bytes()
    disk.full = True
    results = await asyncio.gather(
        log.append(put("b")), log.append(put("c")), return_exceptions=True
    )
    assert all(isinstance(r, StorageUnavailable) for r in results), results
    assert "No space left" in str(results[0])
    assert path.read_bytes() == before  # the half-written batch was cut away
    assert rec.resets == 1 and sorted(rec.state) == ["a"]  # replayed: b, c never were
    assert log.degraded and log.faults == 1
    assert await read(log, rec) == ["a"]  # reads are answered meanwhile
    writes = disk.writes
    with pytest.raises(StorageUnavailable, match="retries by itself"):
        await log.append(put("d"))
    assert disk.writes == writes  # refused without touching the disk
    clock.now += batching.BACKOFF_MIN + 1e-6
    with pytest.raises(StorageUnavailable):  # still full: refused, window doubles
        await log.append(put("d"))
    assert rec.resets == 2 and sorted(rec.state) == ["a"]
    disk.full = False
    clock.now += batching.BACKOFF_MIN + 1e-6  # not yet: the window is now twice as long
    with pytest.raises(StorageUnavailable):
        await log.append(put("d"))
    clock.now += batching.BACKOFF_MIN + 1e-6
    await log.append(put("d"))  # the disk has room again: served
    assert not log.degraded
    assert sorted(rec.state) == ["a", "d"]
    assert path.read_bytes().count(b"\n") == 2
    disk.full = True  # the backoff starts small again after a good write
    with pytest.raises(StorageUnavailable):
        await log.append(put("e"))
    disk.full = False
    clock.now += batching.BACKOFF_MIN + 1e-6
    await log.append(put("e"))
    fresh = FileLog(tmp_path / "s", fsync=False, follow=False)
    again = Recorder()
    await fresh.open(again)
    await fresh.close()
    assert sorted(again.state) == ["a", "d", "e"] and again.skipped == []
    assert FileBackend(tmp_path / "s").chain_breaks() == []  # no link left by rolled-back lines


async def test_a_failed_fsync_is_rolled_back_too(opened, monkeypatch, tmp_path):
    log, rec, clock = await opened()
    disk = Disk(monkeypatch)
    await log.append(put("a"))
    disk.fsync_fails = True
    with pytest.raises(StorageUnavailable, match="Input/output error"):
        await log.append(put("b"))
    assert (tmp_path / "s" / "tasks" / "tasks.log").read_bytes().count(b"\n") == 1
    assert sorted(rec.state) == ["a"]
    disk.fsync_fails = False
    clock.now += batching.BACKOFF_MIN + 1e-6
    await log.append(put("b"))
    assert sorted(rec.state) == ["a", "b"]
    assert FileBackend(tmp_path / "s").chain_breaks() == []


async def test_a_log_that_stays_unreadable_ends_the_instance(opened, monkeypatch, tmp_path):
    log, rec, clock = await opened(follow=False)
    log.give_up_seconds = 30.0
    disk = Disk(monkeypatch)
    await log.append(put("a"))
    fatal = asyncio.ensure_future(log.wait_fatal())
    path = tmp_path / "s" / "tasks" / "tasks.log"
    disk.full = True
    path.rename(path.with_name("moved-away.log"))  # the replay cannot reopen it
    with pytest.raises(StorageUnavailable):
        await log.append(put("b"))
    assert sorted(rec.state) == ["a", "b"] or sorted(rec.state) == ["a"]
    assert not path.exists()  # recovery never creates an empty log in its place
    while not fatal.done():
        clock.now += 5.0
        assert clock.now < 1100, "never gave up"
        with pytest.raises(LogError):
            await log.append(put("c"))
        await asyncio.sleep(0)  # let the waiter see it
    reason = fatal.result()
    assert "storage failed for good" in str(reason) and "No such file" in str(reason)
    with pytest.raises(LogError):
        await read(log, rec)


async def test_a_read_error_while_following_is_survived(opened, monkeypatch, tmp_path):
    log, rec, clock = await opened(follow=False)
    await log.append(put("a"))
    real_pread = os.pread
    broken = {"on": True}

    def pread(fd: int, n: int, offset: int) -> bytes:
        if broken["on"]:
            raise OSError(errno.EIO, "Input/output error")
        return real_pread(fd, n, offset)

    other = FileLog(tmp_path / "s", fsync=False, follow=False)
    await other.open(Recorder())
    await other.append(put("b"))
    await other.close()
    monkeypatch.setattr(os, "pread", pread)
    with pytest.raises(StorageUnavailable):
        await log.append(put("c"))
    broken["on"] = False
    assert await read(log, rec) == ["a"]  # answered from the last good state
    clock.now += batching.BACKOFF_MAX
    await log.append(put("c"))
    assert sorted(rec.state) == ["a", "b", "c"]


async def test_the_follower_retries_a_failed_replay_when_due_without_a_request(
    opened, monkeypatch, tmp_path
):
    """A write's fault whose replay fails too: the follower retries on the backoff's
    clock and gives up in time, with no request to drive it, however long the watcher
    would sleep (here an hour: without its wake-up the test meets its deadline)."""
    real_watch = filelog.watch

    def sleepy_watch(*args: Any, **kwargs: Any) -> Any:
        return real_watch(*args, **{**kwargs, "safety_interval": 3600.0})

    monkeypatch.setattr(filelog, "watch", sleepy_watch)
    log, _rec, clock = await opened(follow=True, poll_interval=3600.0)
    log.give_up_seconds = 30.0
    await log.append(put("a"))
    await asyncio.sleep(0)  # the follower is in its wait
    fatal = asyncio.ensure_future(log.wait_fatal())
    path = tmp_path / "s" / "tasks" / "tasks.log"
    Disk(monkeypatch).full = True
    path.rename(path.with_name("moved-away.log"))  # the replay cannot reopen it
    with pytest.raises(StorageUnavailable):
        await log.append(put("b"))
    assert not fatal.done()
    clock.now += 31.0  # past give_up_seconds: the follower's next retry gives up
    reason = await asyncio.wait_for(fatal, timeout=30.0)
    assert "storage failed for good" in str(reason) and "No such file" in str(reason)


async def test_a_split_batch_whose_second_write_fails_keeps_its_answered_part(
    opened, monkeypatch, tmp_path
):
    """A batch split after a durable request that is answered early (``on_durable``,
    the daemon's ack): when the write of what follows fails, only that part is cut
    away and refused; the first part stays written, synced and answered."""
    log, rec, clock = await opened()
    disk = Disk(monkeypatch)
    await log.append(put("a"))
    heard: list[str] = []

    def behind() -> tuple[list[dict[str, Any]], None]:  # run once "b" is synced
        disk.full = True
        return put("c"), None

    first = log.submit(lambda: (put("b"), "b"), on_durable=heard.append)
    second = log.submit(behind, durable=False)
    assert await first == "b"
    with pytest.raises(StorageUnavailable, match="No space left"):
        await second
    assert heard == ["b"]
    assert (tmp_path / "s" / "tasks" / "tasks.log").read_bytes().count(b"\n") == 2
    assert rec.resets == 1 and sorted(rec.state) == ["a", "b"]  # replayed: c never was
    disk.full = False
    clock.now += batching.BACKOFF_MIN + 1e-6
    await log.append(put("d"))
    assert sorted(rec.state) == ["a", "b", "d"]
    assert FileBackend(tmp_path / "s").chain_breaks() == []


async def test_a_failed_sync_soon_is_tried_again_for_the_next_line(opened, monkeypatch):
    """The sync-soon timer's sync fails (a storage fault): the lines stay unsynced, and
    the next line written without a sync arms the timer again (on the loop's clock,
    moved by hand), so they are synced once writes are accepted again."""
    log, _, clock = await opened(PatchableFileLog)  # its ``_sync_only`` is stood in for
    loop = asyncio.get_running_loop()
    start = loop.time()
    now = [start]
    monkeypatch.setattr(loop, "time", lambda: now[0])
    attempts: list[str] = []
    real_sync = log._sync_only

    async def failing_once() -> None:
        attempts.append("sync")
        if len(attempts) == 1:
            raise StorageUnavailable("injected: the disk went away")
        await real_sync()

    monkeypatch.setattr(log, "_sync_only", failing_once)

    async def at(soons: float) -> None:
        now[0] = start + soons * batching.SYNC_SOON_SECONDS
        for _ in range(3):
            await asyncio.sleep(0)
        await log._wait_writer()

    await log.append(put("a"), durable=False)
    await at(1.1)
    assert attempts == ["sync"] and log.faults == 1
    clock.now += 60  # past the backoff window: writes are accepted again
    await log.append(put("b"), durable=False)
    await at(2.2)
    assert attempts == ["sync", "sync"]
    assert not log._unsynced
