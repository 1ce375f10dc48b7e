"""The JSON-lines log file shared by every process on one storage directory.

Contract (normative text in ``specs/log-storage.md``):

* Appends happen only under an exclusive flock on ``tasks.lock``, after catching up
  to end of file, and are acknowledged only after write (and fsync when durable).
* Reads need no lock and consume only complete lines; a trailing partial line is
  left alone until a lock holder declares it torn and seals it with a newline.
* A replaced log file (another process compacted) is detected by inode: the
  listener gets ``on_reset`` and a full replay of the new file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from mypy_extensions import mypyc_attr

from snerd.errors import LogError
from snerd.eventlog import aio, compaction, locking
from snerd.eventlog.aio import AioFsync
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
from snerd.eventlog.codec import NL, decode_chained, decode_complete, split_complete
from snerd.eventlog.history import iter_history
from snerd.eventlog.layout import index_temp_name, resolve
from snerd.eventlog.watch import Watcher, watch

log = logging.getLogger(__name__)

CHUNK_SIZE = 4 << 20
"""Bytes read per ``pread`` during replay and catch-up."""

FIRST_READ = 64 << 10
"""Bytes asked of a catch-up's first ``pread`` (the next ones ask :data:`CHUNK_SIZE`
once one comes back full). A catch-up usually finds one batch of another process's
lines; glibc serves a buffer of 4 MiB with ``mmap``, so asking that much for it would
cost an ``mmap``, an ``mremap`` and a ``munmap`` each read, where 64 KiB comes from the
heap."""

_FSYNC_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="snerd-fsync")
"""Slow fsyncs run here, off the event loop (a dedicated pool costs less than to_thread)."""

INLINE_FSYNC_SECONDS = 0.005
"""An fsync that usually takes less than this runs on the loop thread: the hand-off to a
thread and back costs a loop wake-up and 0.1-0.6 ms of CPU per batch, as much as a
local disk's fsync itself (``python -m benchmarks.bench_fsync`` runs the paths that wait
for one fsync a task with each placement, side by side). Only a disk slow
enough that blocking the loop would stall other work (a network volume) goes to the
pool. The average is of the fsyncs alone, never of the hand-off."""

_LOG_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True, slots=True)
class _Point:
    """Where a compaction's snapshot was taken: everything delivered up to here."""

    offset: int
    last_seq: int
    generation: int
    records: int
    skipped: int
    chain_head: bytes


@mypyc_attr(allow_interpreted_subclasses=True)
class FileLog(BatchingLog):
    """An :class:`EventLog` over ``<storage>/tasks/tasks.log``.

    ``storage`` is a storage dir (or its ``tasks.log``). ``fsync=False`` turns fsync
    off entirely (tests, benchmarks); ``follow=False`` disables the background
    follower (then only :meth:`catch_up` and :meth:`transact` read others' appends).
    """

    SPLIT_FLUSH: ClassVar[bool] = True
    """A batch's second write and its own fsync need no new lock hold."""

    AIO_FSYNC: ClassVar[bool] = True
    """Whether a flush with work to overlap (:attr:`_overlap`) syncs through kernel
    AIO (``eventlog.aio``) where the system has it, the work run during the sync; off,
    every sync is an ``fsync`` (the test of the inline-or-pool choice turns it off)."""

    def __init__(
        self,
        storage: str | os.PathLike[str],
        *,
        fsync: bool = True,
        follow: bool = True,
        poll_interval: float = 0.05,
        chunk_size: int = CHUNK_SIZE,
        chain_key: bytes | None = None,
    ) -> None:
        super().__init__(chain_key=chain_key)
        self.layout = resolve(storage)
        self._path = self.layout.log_path
        self._path_s = os.fspath(self._path)  # stat'd on every wake-up: no Path work there
        self._fsync_on = fsync
        self._follow_on = follow
        self._poll_interval = poll_interval
        self._chunk = chunk_size
        self._fd = -1
        self._lock_fd = -1
        self._ino = -1
        self._read_pos = 0  # file offset up to which bytes were read
        self._pending = b""  # bytes read after the last newline
        self._staged: list[bytes] = []
        self._generation = 0  # bumped whenever this instance switches files
        self._mutex = asyncio.Lock()  # reading state and the write path, in-process
        self._compact_lock = asyncio.Lock()
        self._fsync_seconds = 0.0  # moving average of recent fsyncs
        self._aio: AioFsync | None = None  # the live file's, once a flush overlaps its sync
        self._aio_off = not self.AIO_FSYNC  # none to be had here (or switched off)
        self._fsyncs = 0
        self._fsync_total = 0.0
        self._watcher: Watcher | None = None
        self._own_change = False  # written under the lock held now: its events to drop
        self._follower: asyncio.Task[None] | None = None
        self._closed: asyncio.Future[None] | None = None

    @property
    def path(self) -> Path:
        """The live log file."""
        return self._path

    # ------------------------------------------------------------- lifecycle

    async def open(self, listener: LogListener) -> None:
        """Create the layout if needed, replay the log, then follow it (if enabled)."""
        if self._listener is not None or self._closing:
            raise LogError("a FileLog can be opened only once")
        try:
            self.layout.ensure()
            self._remove_stale_temps()
            self._lock_fd = os.open(self.layout.lock_path, _LOG_FLAGS & ~os.O_APPEND, 0o644)
            self._switch_file()
        except OSError as exc:
            self._close_fds()
            raise LogError(f"cannot open log {self.path}: {exc}") from exc
        self._listener = listener
        async with self._mutex:
            await self._sync()
        if self._follow_on:
            self._watcher = watch(
                self.layout.tasks_dir,
                self.path.name,
                poll_interval=self._poll_interval,
                worth_waking=self._maybe_changed,
            )
            self._follower = asyncio.get_running_loop().create_task(self._follow())

    def _remove_stale_temps(self) -> None:
        """Delete temp files of compactions and index writes killed before they finished."""
        pattern = self.layout.temp_path("*").name.replace(f".{os.getpid()}.", ".*.")
        for path in compaction.remove_stale_temps(self.layout.tasks_dir, pattern):
            log.warning("removed %s, left by a compaction that did not finish", path)
        for path in compaction.remove_stale_temps(self.layout.tasks_dir, index_temp_name("*")):
            log.warning("removed %s, left by an index write that did not finish", path)

    async def close(self) -> None:
        """Finish queued transactions, stop following, release locks and fds."""
        if self._closed is not None:
            await asyncio.shield(self._closed)
            return
        self._closed = asyncio.get_running_loop().create_future()
        self._closing = True
        try:
            await self._wait_writer()
            if self._sync_timer is not None:
                self._sync_timer.cancel()
                self._sync_timer = None
            if self._unsynced and self._fd >= 0 and self._fsync_on:
                with contextlib.suppress(OSError):  # what was written lands before we go
                    os.fsync(self._fd)
                self._unsynced = False
            if self._follower is not None:
                self._follower.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._follower
            if self._watcher is not None:
                self._watcher.close()
            async with self._compact_lock, self._mutex:
                self._close_fds()
        finally:
            self._closed.set_result(None)

    def _close_fds(self) -> None:
        self._drop_aio()
        for fd in (self._fd, self._lock_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = self._lock_fd = -1

    def history(self) -> Iterator[Record]:
        for item in iter_history(self.layout.storage):
            if not isinstance(item, SkippedLine):
                yield item

    def history_about(self, ids: Collection[str]) -> Iterable[Record]:
        """The records the per-task index places for ``ids`` (extended or rebuilt
        first: ``tasks/tasks.idx``); the whole history if the index cannot be read."""
        from snerd.eventlog import index  # (with msgspec: not on a daemon's start-up path)

        try:
            found = index.fresh_index(self.layout.storage)
            places = sorted({p for task_id in ids for p in found.places_of(task_id)})
            return [dict(record) for _, record in index.read_places(found.paths, places)]
        except LogError:  # unreadable, or a file went away under it (a compaction)
            return list(self.history())

    def prune_archives(self, *, max_age_ms: int | None, max_bytes: int | None,
                       now_ms: int) -> int:  # fmt: skip
        gone = self.layout.prune_archives(max_age_ms=max_age_ms, max_bytes=max_bytes,
                                          now_ms=now_ms)  # fmt: skip
        return len(gone)

    def stats(self) -> LogStats:
        try:
            size = os.fstat(self._fd).st_size if self._fd >= 0 else 0
        except OSError:
            size = self._read_pos
        return LogStats(
            str(self.path), size, self._records, self._skipped, self._last_seq,
            unread_bytes=max(0, size - self._read_pos), commits=self.commits,
            fsyncs=self._fsyncs, fsync_seconds=self._fsync_total,
        )  # fmt: skip

    # --------------------------------------------------------------- reading

    def _switch_file(self) -> None:
        """(Re)open the live log and read it from the start."""
        fd = os.open(self.path, _LOG_FLAGS, 0o644)
        old, self._fd = self._fd, fd
        self._ino = os.fstat(fd).st_ino
        self._read_pos = 0
        self._pending = b""
        self._generation += 1
        if old >= 0:
            self._drop_aio()
            os.close(old)

    async def _read_new(self) -> int:
        """Deliver the complete lines appended since the last read (holding ``_mutex``)."""
        delivered = 0
        size = min(FIRST_READ, self._chunk)
        while chunk := os.pread(self._fd, size, self._read_pos):
            self._read_pos += len(chunk)
            data = self._pending + chunk if self._pending else chunk
            complete, self._pending = split_complete(data)
            if complete:
                decoded = decode_complete(complete, self._read_pos - len(data))
                delivered += self._deliver_decoded(decoded)
            if len(chunk) == self._chunk:
                await asyncio.sleep(0)  # a long replay must not starve the event loop
            elif len(chunk) == size:
                size = self._chunk  # more than a batch: read on in full chunks
        return delivered

    def _replaced(self, st: os.stat_result | None) -> str | None:
        """Whether the path (``st``: its stat, None when it is gone) now names another
        file (``"compacted"``: a compaction elsewhere installed it), or ours shrank
        (``"shrank"``: lines we delivered are gone, so only a reset and a full replay
        are right), else None."""
        if st is None:
            return None
        if st.st_ino != self._ino:
            return "compacted"
        return "shrank" if st.st_size < self._read_pos else None

    def _stat(self) -> os.stat_result | None:
        """The path's stat (None when it is gone); an error is a storage fault."""
        try:
            return os.stat(self._path_s)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageUnavailable(f"cannot read log {self.path}: {exc}") from exc

    def _unchanged(self, st: os.stat_result | None) -> bool:
        """Whether ``st`` (the path's stat) is our file with nothing unread in it (the
        common answer of a catch-up, without a coroutine); if so, the catch-up is done."""
        if st is not None and st.st_ino == self._ino and st.st_size == self._read_pos:
            self._caught_up()
            return True
        return False

    async def _sync(self) -> int:
        """Catch up (holding ``_mutex``): follow a replacement, then read new lines."""
        st = self._stat()  # one stat answers the common case: the same file, nothing new
        return 0 if self._unchanged(st) else await self._catch_up_from(st)

    async def _catch_up_from(self, st: os.stat_result | None) -> int:
        """:meth:`_sync` past its first stat (``st``), when something changed.

        A read error is a storage fault: the reading position may be lost, so the
        log replays from storage once it can (:class:`StorageUnavailable`)."""
        try:
            replaced = self._replaced(st)
            if replaced == "compacted":
                self._compacted_elsewhere()
                self._switch_file()
            elif replaced == "shrank":
                self._reset()
                self._switch_file()
            delivered = await self._read_new()
            self._caught_up()
            return delivered
        except OSError as exc:
            raise StorageUnavailable(f"cannot read log {self.path}: {exc}") from exc

    async def _replay_all(self) -> None:
        """After a storage fault: reopen the live log (never creating it: a log that
        vanished is a fault, not an empty queue), reset the listener and replay."""
        async with self._mutex:
            if self._closing:
                return
            fd = os.open(self.path, _LOG_FLAGS & ~os.O_CREAT)
            try:
                ino = os.fstat(fd).st_ino
            except OSError:
                os.close(fd)
                raise
            try:  # read it all once first: a log we cannot read keeps the old state
                pos = 0
                while chunk := os.pread(fd, self._chunk, pos):
                    pos += len(chunk)
                    await asyncio.sleep(0)
            except OSError:
                os.close(fd)
                raise
            old, self._fd, self._ino = self._fd, fd, ino
            if old >= 0:
                self._drop_aio()
                with contextlib.suppress(OSError):
                    os.close(old)
            self._read_pos = 0
            self._pending = b""
            self._generation += 1
            self._reset()
            await self._read_new()

    def _maybe_changed(self) -> bool:
        """Cheap check (no lock, no read): could there be something to catch up on?"""
        try:
            st = os.stat(self._path_s)
        except FileNotFoundError:
            return False
        return st.st_ino != self._ino or st.st_size != self._read_pos

    async def catch_up(self) -> int:
        self._check_usable()
        if not self._maybe_changed():
            return 0
        async with self._mutex:
            self._check_usable()
            return await self._sync()

    async def _follow(self) -> None:
        """Background task: wake on file changes and catch up (``_follow_changes``)."""
        assert self._watcher is not None
        await self._follow_changes(self._watcher.wait)

    # --------------------------------------------------------------- writing

    def _exclusive(self) -> contextlib.AbstractAsyncContextManager[None]:
        return _Exclusive(self)

    def _seal_torn_tail(self) -> None:
        """Under the lock a partial last line is a dead writer's: end it with a newline."""
        if not self._pending:
            return
        line, offset = self._pending, self._read_pos - len(self._pending)
        try:
            compaction.write_all(self._fd, NL)
        except OSError as exc:
            raise StorageUnavailable(f"cannot seal the torn tail of {self.path}: {exc}") from exc
        self._read_pos += 1
        self._pending = b""
        item, chain = decode_chained(line, offset, torn=True)
        if isinstance(item, SkippedLine):
            self._report(item)
        else:  # the writer died after the last byte but before the newline
            self._note_chain(chain)
            self._deliver([item])

    def _stage(self, lines: list[bytes]) -> None:
        self._staged.extend(lines)

    async def _flush(self, durable: bool) -> None:
        data = b"".join(self._staged)
        self._staged.clear()
        start = self._read_pos  # caught up under the lock: the batch starts at EOF
        try:
            compaction.write_all(self._fd, data)
            self._read_pos += len(data)
            if durable and self._fsync_on:
                work = self._overlap
                syncer = None if work is None else self._aio_fsync()
                if syncer is None or work is None:
                    await self._fsync()
                else:
                    self._overlapped_fsync(syncer, work)
        except OSError as exc:
            raise self._roll_back(start, exc) from exc
        self._own_change = True  # its events are dropped when the lock is released

    def _aio_fsync(self) -> AioFsync | None:
        """The live file's :class:`AioFsync` while fsyncs are fast and AIO is to be had."""
        if self._aio_off or self._fsync_seconds >= INLINE_FSYNC_SECONDS:
            return None
        if self._aio is not None and self._aio.fd != self._fd:  # (a file switched)
            self._drop_aio()
        if self._aio is None:
            self._aio = aio.open_fsync(self._fd)
            self._aio_off = self._aio is None
        return self._aio

    def _overlapped_fsync(self, syncer: AioFsync, work: Callable[[], None]) -> None:
        """Submit the sync, run ``work``, wait for the sync. Timed, for the inline-or-pool
        average, is what the loop's thread spent on the sync beyond the work: the submit
        and the wait (a slow disk shows there; a sync the work hid costs nothing)."""
        start = time.perf_counter()
        try:
            syncer.submit()
        except aio.Unsupported:  # (a kernel before 4.18): fsync from now on
            self._drop_aio()
            self._aio_off = True
            self._count_fsync(self._timed_fsync())
            work()
            return
        submitted = time.perf_counter()
        try:
            work()
        finally:
            worked = time.perf_counter()
            syncer.wait()  # (its error, after the work's: the batch is rolled back)
        self._count_fsync(submitted - start + time.perf_counter() - worked)

    def _drop_aio(self) -> None:
        if self._aio is not None:
            self._aio.close()
            self._aio = None

    async def _sync_only(self) -> None:
        """fsync the file: it makes our lines durable whoever holds the lock (a log
        compacted elsewhere meanwhile holds them too, in a file its writer synced)."""
        if not self._fsync_on:
            return
        async with self._mutex:  # the follower does not switch files under the fsync
            try:
                await self._fsync()
            except OSError as exc:
                raise StorageUnavailable(f"cannot sync log {self.path}: {exc}") from exc

    def _roll_back(self, start: int, exc: OSError) -> StorageUnavailable:
        """A write or fsync failed (a full disk, an I/O error): cut the file back to
        where the batch began, still under the lock, so no line of it stays behind
        for anyone to read later; the callers are told it failed."""
        try:
            os.ftruncate(self._fd, start)
            self._read_pos = start
            how = "nothing of the batch was kept"
        except OSError as cut:
            how = f"and the rollback failed too ({cut}): part of the batch may remain"
        return StorageUnavailable(f"cannot write log {self.path}: {exc}; {how}")

    async def _fsync(self) -> None:
        """fsync the log, inline while fsyncs are fast, else in the pool (adaptive)."""
        if self._fsync_seconds < INLINE_FSYNC_SECONDS:
            took = self._timed_fsync()
        else:
            loop = asyncio.get_running_loop()
            took = await loop.run_in_executor(_FSYNC_POOL, self._timed_fsync)
        self._count_fsync(took)

    def _count_fsync(self, took: float) -> None:
        self._fsync_seconds = 0.8 * self._fsync_seconds + 0.2 * took
        self._fsyncs += 1
        self._fsync_total += took

    def _timed_fsync(self) -> float:
        """fsync the log (on the loop's thread or the pool's, under the lock); return the
        seconds it took."""
        start = time.perf_counter()
        os.fsync(self._fd)
        return time.perf_counter() - start

    # ------------------------------------------------------------ compaction

    async def compact(self, snapshot: Snapshot) -> None:
        """Replace the log by ``snapshot`` + what follows the current point; archive the old.

        The point (offset and last seq) is taken synchronously on entry; ``snapshot``
        is materialized right away and must not be mutated afterwards. The snapshot
        is written without holding the append lock. If the log was replaced (or this
        instance reset) meanwhile, the compaction is abandoned silently.
        """
        self._check_usable()
        if self.degraded or self._fault is not None:
            log.info("compaction skipped while recovering from: %s", self._fault)
            return  # abandoned silently, like a stale one: thresholds are checked again
        self._deliver_held()  # a batch's records written (or staged), not heard yet
        point = _Point(
            self._read_pos - len(self._pending) + sum(map(len, self._staged)),
            self._last_seq,
            self._generation,
            self._records,
            self._skipped,
            self._chain_head,
        )
        records = snapshot_list(snapshot)  # a function is called now, at the point
        async with self._compact_lock:
            if self._generation != point.generation or self._closing:
                return
            tmp = self.layout.temp_path(f"compact-{time.monotonic_ns()}")
            fd = -1
            try:
                fd = compaction.open_temp(tmp)
                await self._compact_into(tmp, fd, point, records)
            except OSError as exc:
                raise LogError(f"compaction of {self.path} failed: {exc}") from exc
            finally:
                if fd >= 0:
                    os.close(fd)
                with contextlib.suppress(OSError):
                    tmp.unlink()

    async def _compact_into(
        self, tmp: Path, fd: int, point: _Point, records: list[Record]
    ) -> None:
        ts = time.time_ns() // 1_000_000
        name = self.layout.free_archive_name(ts, point.last_seq)
        origin = self.chain.tag.decode() + point.chain_head.hex()
        header = compaction.snapshot_header(point.last_seq, ts, name, len(records), origin)
        lines = compaction.snapshot_lines(header, records, self.chain, point.chain_head)
        await asyncio.to_thread(compaction.write_snapshot, fd, lines, self._fsync_on)
        async with self._exclusive():
            if self._generation != point.generation:
                return  # someone else compacted first; our snapshot is stale
            await asyncio.to_thread(
                compaction.append_tail, fd, self._fd, point.offset, self._read_pos, self._fsync_on
            )
            archived = self.layout.archive_dir / name
            os.link(self.path, archived)
            try:
                os.replace(tmp, self.path)
            except OSError:
                archived.unlink()
                raise
            self._adopt(point, len(records))
            self._snapshot_installed(header)
            if self._fsync_on:
                await asyncio.to_thread(
                    compaction.fsync_dirs, self.layout.tasks_dir, self.layout.archive_dir
                )

    def _adopt(self, point: _Point, snapshot_records: int) -> None:
        """Continue on the file we just installed, at its end, without a reset."""
        tail_records = self._records - point.records
        tail_skipped = self._skipped - point.skipped
        self._switch_file()
        self._read_pos = os.fstat(self._fd).st_size
        self._records = 1 + snapshot_records + tail_records
        self._skipped = tail_skipped


class _Exclusive:
    """:meth:`FileLog._exclusive`: the in-process mutex, then the file lock, then the
    catch-up (a class, not a generator: one of these a batch, and most batches are one
    enqueue)."""

    __slots__ = ("log",)

    def __init__(self, log: FileLog) -> None:
        self.log = log

    async def __aenter__(self) -> None:
        log = self.log
        await log._mutex.acquire()
        try:
            if not locking.try_lock(log._lock_fd):  # (the common case, without a coroutine)
                await locking.acquire(log._lock_fd)
        except BaseException:
            log._mutex.release()
            raise
        try:
            st = log._stat()  # (the catch-up's common answer, without a coroutine)
            if not log._unchanged(st):
                await log._catch_up_from(st)
            log._seal_torn_tail()
        except BaseException:
            self._release()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._release()

    def _release(self) -> None:
        log = self.log
        if log._own_change:  # still under the lock, caught up: only our own writes, in
            log._own_change = False  # one read however many (a split batch writes twice)
            if log._watcher is not None:
                log._watcher.forget_pending()
        locking.unlock(log._lock_fd)
        log._mutex.release()
