"""The in-memory twin of the file log, for tests and embedded use without disk.

A :class:`MemoryStore` plays the file: a list of encoded lines, a lock and a
generation counter bumped by compaction. Each :class:`MemoryLog` on a store plays
one process: it has its own listener, read position and group-commit writer, and
goes through the same encode/decode path as the file log. Nothing is durable.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator

from snerd.errors import LogError
from snerd.eventlog.base import LogListener, LogStats, Record, SkippedLine, Snapshot, snapshot_list
from snerd.eventlog.batching import BatchingLog
from snerd.eventlog.codec import NL, decode_complete
from snerd.eventlog.compaction import snapshot_header, snapshot_lines
from snerd.eventlog.history import merge_history
from snerd.eventlog.layout import free_archive_name, to_prune


class MemoryStore:
    """The shared "file": lines, the exclusive lock, archives and a change signal."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        """Encoded lines, each ending with a newline; tests may append raw ones."""
        self.archives: list[tuple[str, list[bytes]]] = []
        """(archive name, lines) of every compaction, oldest first."""
        self.generation = 0
        """Bumped when compaction replaces :attr:`lines`."""
        self.lock = asyncio.Lock()
        self._watchers: set[asyncio.Event] = set()

    def notify(self) -> None:
        """Wake every follower (after lines were added or replaced)."""
        for event in self._watchers:
            event.set()

    def inject(self, raw: bytes) -> None:
        """Append raw bytes as lines, bypassing the log (tests: garbage, foreign lines)."""
        self.lines.extend(line + NL for line in raw.split(NL) if line)
        self.notify()


class MemoryLog(BatchingLog):
    """An :class:`EventLog` over a :class:`MemoryStore`; one instance per "process"."""

    SPLIT_FLUSH = True  # its flushes are list appends

    def __init__(
        self, store: MemoryStore, *, follow: bool = True, chain_key: bytes | None = None
    ) -> None:
        super().__init__(chain_key=chain_key)
        self.store = store
        self._follow_on = follow
        self._pos = 0  # lines read
        self._byte_pos = 0  # bytes read, for SkippedLine offsets
        self._generation = -1
        self._staged: list[bytes] = []
        self._mutex = asyncio.Lock()
        self._wake = asyncio.Event()
        self._follower: asyncio.Task[None] | None = None

    async def open(self, listener: LogListener) -> None:
        if self._listener is not None or self._closing:
            raise LogError("a MemoryLog can be opened only once")
        self._listener = listener
        async with self._mutex:
            self._sync()
        self.store._watchers.add(self._wake)
        if self._follow_on:
            self._follower = asyncio.get_running_loop().create_task(self._follow())

    async def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        await self._wait_writer()
        if self._sync_timer is not None:
            self._sync_timer.cancel()
            self._sync_timer = None
        self.store._watchers.discard(self._wake)
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower

    def history(self) -> Iterator[Record]:
        files = [lines for _, lines in self.store.archives] + [self.store.lines]
        decoded = (decode_complete(b"".join(lines), 0).records for lines in files)
        for item in merge_history(decoded):
            if not isinstance(item, SkippedLine):
                yield item

    def prune_archives(self, *, max_age_ms: int | None, max_bytes: int | None,
                       now_ms: int) -> int:  # fmt: skip
        archives = self.store.archives
        known = [(int(name.split("-")[1]), sum(map(len, lines))) for name, lines in archives]
        n = to_prune(known, max_age_ms=max_age_ms, max_bytes=max_bytes, now_ms=now_ms)
        del archives[:n]
        return n

    def stats(self) -> LogStats:
        size = sum(map(len, self.store.lines))
        return LogStats(
            f"memory:{id(self.store):x}", size, self._records, self._skipped, self._last_seq,
            commits=self.commits,
        )

    # --------------------------------------------------------------- reading

    def _sync(self) -> int:
        """Deliver lines added since the last read; reset first if the store was compacted."""
        if self._generation != self.store.generation:
            if self._generation >= 0:
                self._compacted_elsewhere()
            self._generation = self.store.generation
            self._pos = self._byte_pos = 0
        new = self.store.lines[self._pos :]
        if not new:
            self._caught_up()
            return 0
        data = b"".join(new)
        self._pos += len(new)
        offset, self._byte_pos = self._byte_pos, self._byte_pos + len(data)
        delivered = self._deliver_decoded(decode_complete(data, offset))
        self._caught_up()
        return delivered

    async def _replay_all(self) -> None:
        """After a storage fault: reset the listener and replay the store from its start
        (what the file log does from its file)."""
        async with self._mutex:
            if self._closing:
                return
            self._reset()
            self._staged = []
            self._generation = self.store.generation
            self._pos = self._byte_pos = 0
            self._sync()

    async def catch_up(self) -> int:
        self._check_usable()
        async with self._mutex:
            return self._sync()

    async def _follow(self) -> None:
        while not self._closing and self._failure is None:
            await self._wake.wait()
            self._wake.clear()
            with contextlib.suppress(LogError):
                await self.catch_up()

    # --------------------------------------------------------------- writing

    @contextlib.asynccontextmanager
    async def _exclusive(self) -> AsyncIterator[None]:
        async with self._mutex, self.store.lock:
            self._sync()
            yield

    def _stage(self, lines: list[bytes]) -> None:
        self._staged.extend(lines)

    async def _flush(self, durable: bool) -> None:
        lines, self._staged = self._staged, []
        self.store.lines.extend(lines)
        self._pos += len(lines)
        self._byte_pos += sum(map(len, lines))
        self._notify_others()

    async def _sync_only(self) -> None:
        """Nothing to make durable: memory is as durable as it gets."""

    def _notify_others(self) -> None:
        for event in self.store._watchers:
            if event is not self._wake:
                event.set()

    # ------------------------------------------------------------ compaction

    async def compact(self, snapshot: Snapshot) -> None:
        """Replace the store's lines by header + snapshot + tail; archive the old lines."""
        self._check_usable()
        self._deliver_held()  # a batch's records staged, not heard yet
        pos, last_seq, generation = self._pos + len(self._staged), self._last_seq, self._generation
        records_at, skipped_at = self._records, self._skipped
        records = snapshot_list(snapshot)  # a function is called now, at the point
        head = self._chain_head
        async with self._exclusive():
            if self._generation != generation:
                return
            ts = time.time_ns() // 1_000_000
            taken = {name for name, _ in self.store.archives}
            name = free_archive_name(ts, last_seq, taken.__contains__)
            origin = self.chain.tag.decode() + head.hex()
            header = snapshot_header(last_seq, ts, name, len(records), origin)
            lines = list(snapshot_lines(header, records, self.chain, head))
            old = self.store.lines
            self.store.archives.append((name, old))
            self.store.lines = [*lines, *old[pos:]]
            self.store.generation += 1
            self._generation = self.store.generation
            self._pos = len(self.store.lines)
            self._byte_pos = sum(map(len, self.store.lines))
            self._records = len(lines) + self._records - records_at
            self._skipped -= skipped_at
            self._snapshot_installed(header)
            self._notify_others()
