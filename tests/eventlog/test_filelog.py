"""FileLog behaviour that only a real file has: torn tails, other OS processes,
locks, archives, I/O failure."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from logkit import Recorder, run_child

from snerd.errors import LogError
from snerd.eventlog import locking, watch
from snerd.eventlog.aio import AioFsync
from snerd.eventlog.filelog import CHUNK_SIZE, FIRST_READ, FileLog
from snerd.eventlog.history import iter_history, read_records
from snerd.eventlog.layout import resolve

Opener = Callable[..., Any]


@pytest.fixture
def storage(tmp_path: Path) -> Path:
    return tmp_path / "storage"


@pytest.fixture
async def file_log(storage: Path) -> AsyncIterator[Opener]:
    logs: list[FileLog] = []

    async def _open(log_class: type[FileLog] = FileLog, **kwargs: Any) -> tuple[FileLog, Recorder]:
        kwargs.setdefault("fsync", False)
        log = log_class(storage, **kwargs)
        rec = Recorder()
        await log.open(rec)
        logs.append(log)
        return log, rec

    yield _open
    for log in logs:
        await log.close()


def log_path(storage: Path) -> Path:
    return storage / "tasks" / "tasks.log"


def put(*keys: str) -> list[dict[str, Any]]:
    return [{"event": "put", "k": k, "pad": "x" * 20} for k in keys]


def test_layout_is_created(storage: Path) -> None:
    async def go() -> None:
        log = FileLog(storage)
        await log.open(Recorder())
        await log.close()

    asyncio.run(go())
    for sub in ("tasks/tasks.log", "tasks/tasks.lock", "tasks/daemons", "tasks/archive"):
        assert (storage / sub).exists(), sub


async def test_storage_may_be_given_as_the_log_file(storage: Path, file_log: Opener) -> None:
    log, _ = await file_log()
    await log.append(put("a"))
    other = FileLog(log_path(storage), fsync=False)
    rec = Recorder()
    await other.open(rec)
    await other.close()
    assert [r["k"] for r in rec.records] == ["a"]


@pytest.mark.parametrize("seed", range(8))
async def test_torn_tail_is_skipped_and_sealed(storage: Path, file_log: Opener, seed: int) -> None:
    log, _ = await file_log()
    await log.append(put("a", "b", "c"))
    await log.close()
    path = log_path(storage)
    data = path.read_bytes()
    last_start = data.rfind(b"\n", 0, len(data) - 1) + 1
    cut = random.Random(seed).randrange(last_start + 1, len(data) - 1)  # mid-line
    os.truncate(path, cut)

    log2, rec = await file_log()
    assert [r["k"] for r in rec.records] == ["a", "b"]  # the partial line is left alone
    assert rec.skipped == []
    await log2.append(put("d"))
    assert [r["k"] for r in rec.records] == ["a", "b", "d"]
    assert [(s.offset, s.raw, s.reason) for s in rec.skipped] == [
        (last_start, data[last_start:cut], "torn")
    ]
    assert rec.records[-1]["seq"] == 3  # the lost record's seq is reused

    _, fresh = await file_log()
    assert fresh.records == rec.records
    assert [s.raw for s in fresh.skipped] == [data[last_start:cut]]
    for line in log_path(storage).read_bytes().split(b"\n")[:-1]:
        if line != data[last_start:cut]:
            orjson.loads(line)  # every other line is intact


async def test_tail_missing_only_its_newline_is_recovered(storage: Path, file_log: Opener) -> None:
    log, _ = await file_log()
    await log.append(put("a", "b"))
    await log.close()
    os.truncate(log_path(storage), log_path(storage).stat().st_size - 1)
    log2, rec = await file_log()
    assert [r["k"] for r in rec.records] == ["a"]
    await log2.append(put("c"))
    assert [(r["k"], r["seq"]) for r in rec.records] == [("a", 1), ("b", 2), ("c", 3)]
    assert rec.skipped == []


async def test_readers_leave_a_partial_line_alone(storage: Path, file_log: Opener) -> None:
    log, _ = await file_log(follow=False)
    await log.append(put("a"))
    with open(log_path(storage), "ab") as f:
        f.write(b'{"event": "put", "k": "b"')  # a write in progress
    reader, rec = await file_log(follow=False)
    assert await reader.catch_up() == 0
    assert log_path(storage).read_bytes().endswith(b'"b"')
    with open(log_path(storage), "ab") as f:
        f.write(b', "seq": 2}\n')  # ... and its end
    assert await reader.catch_up() == 1
    assert [r["k"] for r in rec.records] == ["a", "b"]


async def test_garbage_keeps_raw_bytes_and_offsets(storage: Path, file_log: Opener) -> None:
    log, _ = await file_log()
    await log.append(put("a"))
    start = log_path(storage).stat().st_size
    with open(log_path(storage), "ab") as f:
        f.write(b'\xff\xfe binary\n\n   \n"just a string"\n')
    await log.append(put("b"))
    _, rec = await file_log()
    assert [(s.offset, s.raw, s.reason) for s in rec.skipped] == [
        (start, b"\xff\xfe binary", "invalid_json"),
        (start + 15, b'"just a string"', "not_object"),
    ]
    assert [r["k"] for r in rec.records] == ["a", "b"]


APPENDER = """
import asyncio, sys
from snerd.eventlog.filelog import FileLog

class Nop:
    def on_records(self, records): pass
    def on_reset(self): pass
    def on_skipped(self, skipped): pass

async def main(storage, n, tag):
    log = FileLog(storage, follow=False)
    await log.open(Nop())
    for i in range(n):
        await log.append([{"event": "put", "k": f"{tag}{i}"}])
    await log.close()

asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
"""


async def test_appends_of_another_process_are_followed(storage: Path, file_log: Opener) -> None:
    _, rec = await file_log()
    await run_child(APPENDER, str(storage), "20", "child")
    await rec.wait_for(lambda: len(rec.records) == 20)
    assert [r["seq"] for r in rec.records] == list(range(1, 21))


async def test_followed_by_polling_without_inotify(
    storage: Path, file_log: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch, "INOTIFY_AVAILABLE", False)
    _, rec = await file_log()
    writer, _ = await file_log(follow=False)
    await writer.append(put("a", "b"))
    await rec.wait_for(lambda: len(rec.records) == 2)


async def test_inotify_is_used_on_linux(file_log: Opener) -> None:
    if not watch.INOTIFY_AVAILABLE:
        pytest.skip("no inotify here")
    log, _ = await file_log()
    assert isinstance(log._watcher, watch.InotifyWatcher)


async def test_a_watcher_starts_without_a_child_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """inotify_simple's own way to its C library (``find_library``) runs ``ldconfig``
    in a child process on every start-up; the watcher hands it the loaded one."""
    if not watch.INOTIFY_AVAILABLE:
        pytest.skip("no inotify here")
    import ctypes.util

    import inotify_simple

    def no_child(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a child process was started")

    monkeypatch.setattr(inotify_simple, "_libc", None)  # as in a fresh process
    monkeypatch.setattr(ctypes.util, "find_library", no_child)
    monkeypatch.setattr(inotify_simple, "find_library", no_child)
    watcher = watch.InotifyWatcher(tmp_path, "tasks.log", safety_interval=3600)
    try:
        (tmp_path / "tasks.log").write_bytes(b"x")
        await asyncio.wait_for(watcher.wait(), 5)  # a working inotify descriptor
    finally:
        watcher.close()


async def test_a_closed_watcher_drops_its_watch_and_its_descriptor(tmp_path: Path) -> None:
    """close() removes the watch at once (no wake-up after it) and the descriptor is
    closed soon after, off the caller's path."""
    if not watch.INOTIFY_AVAILABLE:
        pytest.skip("no inotify here")
    watcher = watch.InotifyWatcher(tmp_path, "tasks.log", safety_interval=3600)
    inotify = watcher._inotify
    watcher.close()
    (tmp_path / "tasks.log").write_bytes(b"x")
    deadline = asyncio.get_running_loop().time() + 5
    while not inotify.closed:
        assert asyncio.get_running_loop().time() < deadline, "the descriptor stayed open"
        await asyncio.sleep(0.005)
    assert not watcher._event.is_set()
    watcher.close()  # a second close is a no-op


async def test_inotify_wakes_only_for_the_watched_name(tmp_path: Path) -> None:
    """Writes to other files of the directory (a lock, a temp, a longer name ending in
    ours) do not wake the follower; a write to the log does."""
    if not watch.INOTIFY_AVAILABLE:
        pytest.skip("no inotify here")
    watcher = watch.InotifyWatcher(tmp_path, "tasks.log", safety_interval=3600)
    try:
        for other in ("tasks.lock", ".tasks.log.compact-1.tmp", "old-tasks.log.bak"):
            (tmp_path / other).write_bytes(b"x")
            watcher._on_readable()  # what the loop runs when the descriptor is readable
            assert not watcher._event.is_set(), other
        (tmp_path / "tasks.log").write_bytes(b"x")
        await asyncio.wait_for(watcher.wait(), 5)  # woken by the kernel's event
    finally:
        watcher.close()


async def test_own_appends_queue_no_wake_up_and_a_peers_append_still_wakes(
    storage: Path, file_log: Opener
) -> None:
    """A writer drops the inotify events of its own append (under the lock, caught
    up): no loop wake-up for them. Another writer's append still wakes it."""
    if not watch.INOTIFY_AVAILABLE:
        pytest.skip("no inotify here")
    log, rec = await file_log()
    watcher = log._watcher
    assert isinstance(watcher, watch.InotifyWatcher)
    for i in range(3):
        await log.append(put(f"own{i}"))
        with pytest.raises(BlockingIOError):  # nothing queued on the descriptor
            os.read(watcher._fd, 1 << 16)
    peer, _ = await file_log(follow=False)
    await peer.append(put("peer"))
    await rec.wait_for(lambda: any(r["k"] == "peer" for r in rec.records))
    assert [r["k"] for r in rec.records] == ["own0", "own1", "own2", "peer"]


async def test_processes_appending_at_once_never_collide(storage: Path, file_log: Opener) -> None:
    log, rec = await file_log()

    async def mine() -> None:
        for i in range(100):
            await log.append(put(f"p{i}"))

    await asyncio.gather(
        mine(),
        run_child(APPENDER, str(storage), "100", "c"),
        run_child(APPENDER, str(storage), "100", "d"),
    )
    await rec.wait_for(lambda: len(rec.records) == 300)
    assert [r["seq"] for r in rec.records] == list(range(1, 301))
    assert rec.skipped == []
    lines = log_path(storage).read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 301


async def test_contended_lock_is_awaited_without_blocking_the_loop(
    storage: Path, file_log: Opener
) -> None:
    log, rec = await file_log()
    holder = os.open(storage / "tasks" / "tasks.lock", os.O_RDWR)
    try:
        assert locking.try_lock(holder)
        task = asyncio.ensure_future(log.append(put("a")))
        with pytest.raises(TimeoutError):  # the loop keeps running meanwhile
            await asyncio.wait_for(asyncio.shield(task), 0.1)
        assert rec.records == []
        locking.unlock(holder)
        await asyncio.wait_for(task, 10)
        assert [r["k"] for r in rec.records] == ["a"]
    finally:
        os.close(holder)


COMPACTOR = """
import asyncio, sys
from snerd.eventlog.filelog import FileLog

class State:
    def __init__(self): self.state = {}
    def on_records(self, records):
        for r in records:
            if "k" in r: self.state[r["k"]] = r
    def on_reset(self): self.state.clear()
    def on_skipped(self, skipped): pass

async def main(storage):
    s = State()
    log = FileLog(storage, follow=False)
    await log.open(s)
    await log.compact(list(s.state.values()))
    await log.append([{"event": "put", "k": "after"}])
    await log.close()

asyncio.run(main(sys.argv[1]))
"""


async def test_compaction_by_another_process_and_followers_go_on(
    storage: Path, file_log: Opener
) -> None:
    log, rec = await file_log()
    await log.append(put("a", "b") + put("a"))
    ino = log_path(storage).stat().st_ino
    await run_child(COMPACTOR, str(storage))
    await rec.wait_for(lambda: "after" in rec.state)
    assert rec.resets == 0  # it had read up to the compaction point: no replay
    assert log_path(storage).stat().st_ino != ino
    assert sorted(rec.state) == ["a", "after", "b"]
    assert [r.get("event") for r in rec.records[3:]] == ["snapshot", "put"]
    await log.append(put("c"))  # appends go to the new file
    _, fresh = await file_log()
    assert sorted(fresh.state) == ["a", "after", "b", "c"]


async def test_own_instance_continues_after_compaction(storage: Path, file_log: Opener) -> None:
    a, rec_a = await file_log()
    b, _ = await file_log(follow=False)
    await a.append(put("a", "b"))
    await a.compact(rec_a.snapshot())
    await b.append(put("c"))
    await rec_a.wait_for(lambda: "c" in rec_a.state)
    assert rec_a.resets == 0
    assert [r["k"] for r in rec_a.data()] == ["a", "b", "c"]


async def test_archive_and_full_history_without_duplicates(storage: Path, file_log: Opener) -> None:
    log, rec = await file_log()
    other, _ = await file_log(follow=False)
    written: list[str] = []
    for round_ in range(3):
        keys = [f"r{round_}-{i}" for i in range(4)]
        await log.append(put(*keys))
        await other.append(put(f"o{round_}"))
        written += [*keys, f"o{round_}"]
        await log.catch_up()
        await log.compact(rec.snapshot())
    await log.append(put("last"))
    written.append("last")
    with open(log_path(storage), "ab") as f:
        f.write(b"garbage\n")

    archives = resolve(storage).archive_files()
    assert archives == sorted((storage / "tasks" / "archive").iterdir())  # names sort too
    assert len(archives) == 3
    assert all(p.name.startswith("tasks-") and p.suffix == ".log" for p in archives)
    history = list(iter_history(storage))
    records = [h for h in history if isinstance(h, dict)]
    assert [r["k"] for r in records] == written
    assert [r["seq"] for r in records] == list(range(1, len(written) + 1))
    assert [h.raw for h in history if not isinstance(h, dict)] == [b"garbage"]
    first_archive = [r for r in read_records(archives[0]) if isinstance(r, dict)]
    assert [r["k"] for r in first_archive] == written[:5]


async def test_history_before_any_compaction_is_the_live_log(
    storage: Path, file_log: Opener
) -> None:
    log, _ = await file_log()
    await log.append(put("a", "b"))
    assert [r["k"] for r in iter_history(storage) if isinstance(r, dict)] == ["a", "b"]


def test_read_records_reports_trailing_bytes(tmp_path: Path) -> None:
    archive = tmp_path / "tasks" / "archive" / "tasks-1-1.log"
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b'{"a": 1}\n{"a": 2')
    assert [getattr(x, "reason", None) for x in read_records(archive)] == [None, "torn"]
    live = tmp_path / "tasks" / "tasks.log"
    live.write_bytes(b'{"a": 1}\n{"a": 2')
    assert [getattr(x, "reason", None) for x in read_records(tmp_path)] == [None, "incomplete"]
    with pytest.raises(LogError):
        list(read_records(tmp_path / "nope" / "tasks" / "tasks.log"))


async def test_two_compactions_at_once_leave_a_consistent_log(
    storage: Path, file_log: Opener
) -> None:
    a, rec_a = await file_log(follow=False)
    b, rec_b = await file_log(follow=False)
    await a.append(put(*(f"k{i}" for i in range(20))))
    await b.catch_up()
    await asyncio.gather(a.compact(rec_a.snapshot()), b.compact(rec_b.snapshot()))
    await a.append(put("z"))
    _, fresh = await file_log(follow=False)
    assert sorted(fresh.state) == sorted([*(f"k{i}" for i in range(20)), "z"])
    assert len(list((storage / "tasks" / "archive").iterdir())) >= 1


async def test_durable_appends_fsync_and_compaction_fsyncs_dirs(
    file_log: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []  # an fsync, or one through kernel AIO (eventlog.aio)
    real, real_submit = os.fsync, AioFsync.submit
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    monkeypatch.setattr(AioFsync, "submit", lambda self: (synced.append(self.fd),
                                                          real_submit(self))[1])  # fmt: skip
    log, rec = await file_log(fsync=True)
    await log.append(put("a"))
    assert len(synced) == 1
    await log.append(put("b"), durable=False)
    assert len(synced) == 1
    await log.compact(rec.snapshot())
    assert len(synced) >= 4  # snapshot, tail, tasks dir, archive dir


async def test_fsyncs_run_inline_unless_the_disk_is_slow(
    storage: Path, file_log: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fast fsyncs run on the loop thread (no hand-off); once fsyncs themselves take
    longer than INLINE_FSYNC_SECONDS on average they move to the pool, and come back
    when the disk is fast again. The average is of the fsync alone (the fake's figure).
    (Every sync an ``fsync``: the fake stands for it, which an AIO sync would bypass.)"""
    import threading

    from faultkit import PatchableFileLog

    monkeypatch.setattr(PatchableFileLog, "AIO_FSYNC", False)
    took = [0.0001]
    threads: list[bool] = []  # True: ran on the loop's thread

    def fake(self: PatchableFileLog) -> float:
        threads.append(threading.current_thread() is threading.main_thread())
        return took[0]

    monkeypatch.setattr(PatchableFileLog, "_timed_fsync", fake)
    log, _ = await file_log(PatchableFileLog, fsync=True)

    async def appends(n: int) -> list[bool]:
        del threads[:]
        for i in range(n):
            await log.append([{"event": "x", "i": i}])
        return list(threads)

    assert await appends(5) == [True] * 5
    took[0] = 0.05  # a slow disk: after one inline sync the average passes the bound
    ran = await appends(5)
    assert ran[0] is True and ran[1:] == [False] * 4
    took[0] = 0.0001  # fast again: the average decays below the bound, then inline
    ran = await appends(30)
    assert ran[0] is False and ran[-1] is True


async def test_history_about_reads_through_the_per_task_index(
    storage: Path, file_log: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file log answers ``history_about`` from ``tasks/tasks.idx`` (built on first
    use), not by rescanning every file."""
    log, _ = await file_log()
    await log.append([{"event": "enqueued", "taskId": f"t{i}", "taskType": "x"} for i in range(50)])

    def no_rescan() -> None:
        raise AssertionError("rescanned the whole history")

    monkeypatch.setattr(log, "history", no_rescan)
    found = [r["taskId"] for r in log.history_about({"t7"}) if r.get("taskId") == "t7"]
    assert found == ["t7"]
    assert (storage / "tasks" / "tasks.idx").exists()


async def test_a_catch_up_reads_a_batch_from_the_heap_and_a_long_tail_in_chunks(
    storage: Path, file_log: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A catch-up after another writer's batch asks FIRST_READ bytes, not CHUNK_SIZE (a
    4 MiB buffer comes from mmap: three more syscalls a read); once a read comes back
    full, the rest is read in whole chunks, every line delivered once, in order."""
    reader, rec = await file_log(follow=False)  # (no watcher reading first)
    writer, _ = await file_log(follow=False)
    asked: list[int] = []
    pread = os.pread

    def counted(fd: int, size: int, offset: int) -> bytes:
        asked.append(size)
        return pread(fd, size, offset)

    monkeypatch.setattr(os, "pread", counted)
    await writer.append(put("a", "b"))
    assert await reader.catch_up() == 2
    assert asked and set(asked) == {FIRST_READ}
    asked.clear()
    keys = [f"k{i}" for i in range(2000)]  # ~150 KB: more than one first read
    await writer.append(put(*keys))
    assert await reader.catch_up() == 2000
    assert asked[0] == FIRST_READ and asked[1:] and set(asked[1:]) == {CHUNK_SIZE}
    assert [r["k"] for r in rec.records] == ["a", "b", *keys]
