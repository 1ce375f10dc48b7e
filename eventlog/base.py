"""The log interface every backend implements (file, memory, later a networked one).

A log is a sequence of records (one JSON object per line on disk). Readers learn of
records through a listener; writers go through :meth:`EventLog.transact`, which runs
a command under the log's exclusive lock *after* catching up with every other writer,
so the command decides against the latest state. That one primitive gives plain
appends, conditional appends (claims that fail if someone else claimed first) and
group commit (many concurrent transactions, one write and one fsync).
"""

from __future__ import annotations

import abc
import asyncio
import functools
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from mypy_extensions import mypyc_attr

from snerd.errors import LogError

Record = dict[str, Any]
"""One decoded log line. The log stamps ``seq`` on records it writes."""
Snapshot = Iterable[Record] | Callable[[], Iterable[Record]]
"""What :meth:`EventLog.compact` takes: the listener's state as records, or a function
returning them (called when the compaction takes its point: the safe form)."""

T = TypeVar("T")

Command = Callable[[], tuple[Sequence[Record], T]]
"""Runs under the lock after catch-up; returns records to append and a result."""


class StorageUnavailable(LogError):
    """A write was refused because the storage failed (a full disk, an I/O error): the
    log rolled the failed batch back, still answers reads from its last good state,
    and retries by itself with backoff (``specs/log-storage.md`` §4.1)."""


@dataclass(frozen=True, slots=True)
class SkippedLine:
    """A line the reader could not use: a torn tail, invalid JSON, not an object."""

    offset: int
    raw: bytes
    reason: str


@dataclass(frozen=True, slots=True)
class LogStats:
    """What a log knows about itself, for compaction thresholds and reports."""

    path: str
    size_bytes: int
    records: int
    skipped: int
    last_seq: int
    unread_bytes: int = 0
    """Bytes of the log this instance has not read yet (0: caught up with the file)."""
    commits: int = 0
    """Batches this instance wrote (group commits: one write, at most one fsync each)."""
    fsyncs: int = 0
    """fsyncs of the log this instance made."""
    fsync_seconds: float = 0.0
    """Their total time."""


class LogListener(Protocol):
    """Receives everything a log reads or writes, in log order."""

    def on_records(self, records: Sequence[Record]) -> None:
        """New records, in order (the process's own and other processes' alike)."""

    def on_reset(self) -> None:
        """The log was replaced by compaction elsewhere; a full replay follows."""

    def on_skipped(self, skipped: SkippedLine) -> None:
        """A line was skipped; the log goes on."""


@mypyc_attr(allow_interpreted_subclasses=True)
class EventLog(abc.ABC):
    """An append-only, shared, followable sequence of records."""

    submitted: int = 0
    """Requests queued so far by :meth:`submit`, :meth:`transact` and :meth:`append`: a
    caller that notes it after queuing can tell whether anything was queued since."""

    @abc.abstractmethod
    async def open(self, listener: LogListener) -> None:
        """Replay every existing record through ``listener``, then follow new ones."""

    @abc.abstractmethod
    async def transact(self, command: Command[T], *, durable: bool = True) -> T:
        """Run ``command`` under the exclusive lock after catching up; append its records.

        The records are stamped with consecutive ``seq`` numbers, delivered to the
        listener once written (before any later command is decided, and before any
        caller hears the outcome), and the call returns only after they are written
        (and fsync'd when ``durable``). Concurrent calls share one lock hold, one write
        and one fsync (group commit). If ``command`` raises, nothing of it is written
        and the exception propagates to this caller only.
        """

    def submit(
        self, command: Command[T], *, durable: bool = True,
        on_durable: Callable[[T], None] | None = None,
        then: Callable[[asyncio.Future[T]], None] | None = None,
    ) -> asyncio.Future[T]:  # fmt: skip
        """:meth:`transact`, queued now: commands submitted in one turn of the event loop
        run in submission order in one batch (one lock hold, one write, one fsync), each
        seeing the records of those before it already delivered to the listener.
        ``on_durable`` (for a durable request) is called with the command's result once
        its records are durable, before anyone awaiting the future hears of it; a
        backend may call it earlier than the future resolves, from its writer (this
        default calls it first thing when the transaction is done). ``then`` is called
        with the future once it is done, as a done-callback would be; a backend may
        call it from its writer, at once, instead of on a later turn of the loop (it
        must not raise: what it raises is logged)."""
        self.submitted += 1
        future = asyncio.ensure_future(self.transact(command, durable=durable))
        if on_durable is not None and durable:
            future.add_done_callback(functools.partial(_call_on_durable, on_durable))
        if then is not None:
            future.add_done_callback(then)
        return future

    def make_durable(
        self, request: asyncio.Future[Any] | None,
        on_durable: Callable[[Any], None] | None = None,
    ) -> bool:  # fmt: skip
        """Make a request :meth:`submit` queued without durability durable (its batch
        is synced), with ``on_durable`` if given (as :meth:`submit` takes it), if it has
        not begun yet; False when it cannot (this default: never), and the caller
        submits what needs it on its own."""
        return False

    def hold(self) -> None:
        """What :meth:`submit` queues from now on waits for :meth:`kick`, which the caller
        promises to call before it returns to the loop, where a backend can (it then
        schedules nothing on the loop in between). This default does nothing."""
        return None

    def kick(self) -> None:
        """Run what :meth:`submit` queued now rather than on the loop's next turn, where
        a backend can (a caller that submitted all it will this turn: the daemon, after
        a read's lines); ends a :meth:`hold`. This default does nothing."""
        return None

    async def append(self, records: Sequence[Record], *, durable: bool = True) -> None:
        """Append unconditionally."""
        await self.transact(lambda: (records, None), durable=durable)

    @abc.abstractmethod
    async def catch_up(self) -> int:
        """Deliver records appended by others since the last read; return how many."""

    @abc.abstractmethod
    async def compact(self, snapshot: Snapshot) -> None:
        """Replace the log by ``snapshot`` plus whatever was appended after it.

        ``snapshot`` must describe the listener's state (the fold of every record
        delivered so far) at the moment the compaction takes its point, which is when
        the call *begins to run*. A function is called right then, so it always does
        (:func:`snapshot_list`). An iterable built earlier does only if nothing was
        delivered in between: a call handed to a task (``asyncio.gather``,
        ``create_task``) begins a loop turn later, and a write queued meanwhile would
        be in neither the snapshot nor the tail. The old file is kept in the archive so
        audit tools can still read the full history.
        """

    def prune_archives(self, *, max_age_ms: int | None, max_bytes: int | None,
                       now_ms: int) -> int:  # fmt: skip
        """Delete archived history past the retention (age, total size); return how
        many archives went. Blocking. Archives are kept unless an operator asks."""
        return 0

    def history(self) -> Iterator[Record]:
        """Every stored record, archives first, each once (what ``iter_history`` reads
        for a storage dir; skipped lines left out): the audit trail, for looking up a
        task that has left the live state. Blocking: call it in a thread. Empty for a
        log that keeps no history."""
        return iter(())

    def history_about(self, ids: Collection[str]) -> Iterable[Record]:
        """At least every stored record that names one of ``ids`` (others may come
        too: the caller filters), archives first, each once. By default the whole
        :meth:`history`; a file log reads them through its per-task index. Blocking."""
        return self.history()

    @abc.abstractmethod
    def stats(self) -> LogStats:
        """Size, record and skipped-line counts, last sequence number."""

    async def sync(self) -> None:
        """Make every record appended so far durable (those appended with
        ``durable=False`` are otherwise made durable by the next durable batch, or
        shortly after they were written)."""
        return None

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop following and release every lock and handle; idempotent."""


def snapshot_list(snapshot: Snapshot) -> list[Record]:
    """The records of a :data:`Snapshot` (calling it, when it is a function)."""
    return list(snapshot() if callable(snapshot) else snapshot)


def _call_on_durable(on_durable: Callable[[Any], None], future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is None:
        on_durable(future.result())
