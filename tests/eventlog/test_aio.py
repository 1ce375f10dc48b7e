"""The log's fsync through kernel AIO (``eventlog.aio``): the listener hears a batch
during its sync when no acknowledgement waits for the sync first, and the writer falls
back to ``fsync`` wherever AIO has no fsync."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from logkit import Recorder

from snerd.eventlog import aio, filelog
from snerd.eventlog.aio import AioFsync
from snerd.eventlog.filelog import FileLog

HAS_AIO = sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64")
"""Where the log syncs through AIO (CI's machines: every test below runs there)."""

needs_aio = pytest.mark.skipif(not HAS_AIO, reason="kernel AIO: Linux on x86-64 or arm64 only")

Opener = Callable[..., Any]


def put(*keys: str) -> list[dict[str, Any]]:
    return [{"event": "put", "k": k} for k in keys]


@pytest.fixture
async def file_log(tmp_path: Path) -> AsyncIterator[Opener]:
    logs: list[FileLog] = []

    async def _open(listener: Any = None) -> FileLog:
        log = FileLog(tmp_path / "s", fsync=True)
        await log.open(listener or Recorder())
        logs.append(log)
        return log

    yield _open
    for log in logs:
        await log.close()


@needs_aio
def test_a_sync_through_aio_completes_and_reports_a_bad_descriptor(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    syncer = aio.open_fsync(fd)
    assert syncer is not None
    try:
        os.write(fd, b"line\n")
        syncer.submit()
        assert syncer.pending
        syncer.wait()
        assert not syncer.pending
        os.close(fd)
        with pytest.raises(OSError) as failed:  # the descriptor is gone: refused at once
            syncer.submit()
        assert failed.value.errno == errno.EBADF
        assert not isinstance(failed.value, aio.Unsupported)
    finally:
        syncer.close()
        syncer.close()  # (twice is once)


def test_a_kernel_without_aio_fsync_says_so_at_the_first_submit() -> None:
    """Before 4.18 ``io_submit`` refuses ``IOCB_CMD_FSYNC`` with EINVAL."""
    calls: list[int] = []

    def syscall(number: int, *args: Any) -> int:
        calls.append(number)
        if number == 9:  # submit: refused
            ctypes.set_errno(errno.EINVAL)
            return -1
        return 0

    syncer = AioFsync(3, syscall, (1, 2, 8, 9))
    with pytest.raises(aio.Unsupported):
        syncer.submit()
    assert not syncer.pending and calls == [1, 9]


@needs_aio
async def test_the_listener_hears_a_batch_during_its_sync(
    file_log: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Submitted, heard, then waited for: the fold is off the path to the answer."""
    steps: list[str] = []
    real_submit, real_wait = AioFsync.submit, AioFsync.wait
    monkeypatch.setattr(AioFsync, "submit", lambda s: (steps.append("submit"), real_submit(s))[1])
    monkeypatch.setattr(AioFsync, "wait", lambda s: (steps.append("wait"), real_wait(s))[1])

    class Listener(Recorder):
        def on_records(self, records: Any) -> None:
            steps.append("heard")
            super().on_records(records)

    rec = Listener()
    log = await file_log(rec)
    steps.clear()
    await log.append(put("a"))
    await log.append(put("b"))
    assert steps == ["submit", "heard", "wait"] * 2
    assert [r["k"] for r in rec.records] == ["a", "b"]


@needs_aio
async def test_a_batch_with_acks_to_send_syncs_first_and_is_heard_after_them(
    file_log: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's acks (``on_durable``) leave the moment the batch is durable; the
    listener hears it after them, with no AIO round trip on the way."""
    steps: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (steps.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(AioFsync, "submit", lambda s: pytest.fail("synced through AIO"))

    class Listener(Recorder):
        def on_records(self, records: Any) -> None:
            steps.append("heard")
            super().on_records(records)

    log = await file_log(Listener())
    steps.clear()

    def command() -> tuple[list[dict[str, Any]], str]:
        return put("a"), "ok"

    def ack(result: str) -> None:
        steps.append(f"ack {result}")

    done = log.submit(command, durable=True, on_durable=ack)
    assert await done == "ok"
    assert steps == ["fsync", "ack ok", "heard"]


@needs_aio
async def test_without_aio_fsync_the_log_syncs_with_fsync_from_then_on(
    file_log: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    submits: list[int] = []
    fsyncs: list[int] = []
    real_fsync = os.fsync

    def refused(syncer: AioFsync) -> None:
        submits.append(syncer.fd)
        raise aio.Unsupported(errno.EINVAL, "io_submit: no AIO fsync in this kernel")

    monkeypatch.setattr(AioFsync, "submit", refused)
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    rec = Recorder()
    log = await file_log(rec)
    for key in "abc":
        await log.append(put(key))
    assert len(submits) == 1 and len(fsyncs) == 3
    assert [r["k"] for r in rec.records] == ["a", "b", "c"]


@needs_aio
async def test_after_a_compaction_the_sync_is_of_the_new_file(
    file_log: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []  # inode of each file synced through AIO
    real_submit = AioFsync.submit

    def submit(syncer: AioFsync) -> None:
        synced.append(os.fstat(syncer.fd).st_ino)
        real_submit(syncer)

    monkeypatch.setattr(AioFsync, "submit", submit)
    rec = Recorder()
    log = await file_log(rec)
    await log.append(put("a"))
    before = os.stat(log.path).st_ino
    await log.compact(rec.snapshot())
    await log.append(put("b"))
    after = os.stat(log.path).st_ino
    assert before != after and synced == [before, after]


@needs_aio
async def test_the_sync_is_timed_without_the_work_it_overlapped(
    file_log: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long fold hidden under the sync does not make the disk look slow; a sync that
    keeps the thread waiting does, and the next syncs go to the pool (``filelog``'s
    INLINE_FSYNC_SECONDS), as for an ``fsync``."""
    now = [0.0]
    monkeypatch.setattr(filelog.time, "perf_counter", lambda: now[0])
    waited = [0.0001]
    submits: list[int] = []
    real_submit, real_wait = AioFsync.submit, AioFsync.wait

    def submit(syncer: AioFsync) -> None:
        submits.append(syncer.fd)
        real_submit(syncer)

    def wait(syncer: AioFsync) -> None:
        real_wait(syncer)
        now[0] += waited[0]

    monkeypatch.setattr(AioFsync, "submit", submit)
    monkeypatch.setattr(AioFsync, "wait", wait)

    class SlowFold(Recorder):
        def on_records(self, records: Any) -> None:
            now[0] += 1.0  # a second of work during each sync
            super().on_records(records)

    log = await file_log(SlowFold())
    for key in "abcde":
        await log.append(put(key))
    assert len(submits) == 5  # every sync through AIO: the disk is fast
    waited[0] = 0.05  # a slow disk: after one such wait the average passes the bound
    for key in "fghij":
        await log.append(put(key))
    assert len(submits) == 6
