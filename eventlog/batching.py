"""Machinery every backend shares: listener delivery, counters and group commit.

A backend subclasses :class:`BatchingLog` and supplies three hooks:

* ``_exclusive()``: hold the log's exclusive lock, caught up with every other
  writer (and with any torn tail repaired) for the duration of the block;
* ``_stage(lines)``: remember encoded lines to write at the end of the batch;
* ``_flush(durable)``: write the staged lines in one go (and fsync if asked).

:meth:`BatchingLog.transact` queues the request; one writer task takes every queued
request at once, runs their commands in order under one lock hold, and writes all
their records with one write (and at most one fsync).

Storage faults are survived (``specs/log-storage.md`` §4.1): when a backend's write
or read fails (it raises :class:`StorageUnavailable` after rolling the failed batch
back), every caller of that batch gets the error, the listener is reset and replayed
from storage (it had already seen records that never reached the disk), and for a
backoff window (doubling up to :data:`BACKOFF_MAX`) batches run without I/O: reads
are answered from the last good state and writes are refused. Then writes are tried
again. If the log cannot even be read back for :attr:`BatchingLog.give_up_seconds`,
the instance gives up for good (:meth:`BatchingLog.wait_fatal`). Any other failure
(a listener's bug) is fatal at once (fail-stop), as before.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, ClassVar, TypeVar, cast

from mypy_extensions import mypyc_attr

from snerd.errors import LogClosedError, LogError
from snerd.eventlog.base import (
    Command,
    EventLog,
    LogListener,
    Record,
    SkippedLine,
    StorageUnavailable,
)
from snerd.eventlog.batch import (
    DELIVERY_BATCH,
    Request,
    call_hooks,
    decide,
    fail_all,
    resolve,
    settle,
    stamp,
    units,
)
from snerd.eventlog.chain import FROM_FIELD as CHAIN_FROM
from snerd.eventlog.chain import GENESIS, Chain, key_from_env, parse_value
from snerd.eventlog.codec import FORMAT_FIELD, Decoded, max_seq
from snerd.eventlog.history import SNAPSHOT_EVENT
from snerd.eventlog.resume import resumed

T = TypeVar("T")

log = logging.getLogger(__name__)

BACKOFF_MIN = 0.05
BACKOFF_MAX = 5.0
"""Seconds writes are refused after a storage fault: the first window, and the cap."""

SYNC_SOON_SECONDS = 0.05
"""Longest a line written without a sync (a claim, a success, progress) waits before
a sync of its own, when no durable batch comes first to cover it."""

GIVE_UP_SECONDS = 300.0
"""How long the log may stay unreadable after a fault before the instance gives up."""


@dataclass(slots=True)
class _Resume:
    """Reading a log compacted elsewhere without a reset (:meth:`_compacted_elsewhere`)."""

    after: int  # the last seq the listener holds
    held: list[Record] = field(default_factory=list)  # read, not delivered (header first)
    snapshot: int = 0  # snapshot records still to come after the header


@mypyc_attr(allow_interpreted_subclasses=True)
class BatchingLog(EventLog):
    """Base of the concrete logs: delivery, counters, fail-stop, group commit."""

    SPLIT_FLUSH: ClassVar[bool] = False
    """Whether :meth:`_flush` may run twice under one :meth:`_exclusive` hold: a batch
    then makes its durable requests that wait to be answered durable, and answers them,
    before it runs the requests behind them (:meth:`submit`'s ``on_durable``). A backend
    whose flush ends its transaction (:class:`PostgresLog`) leaves it False: it answers
    them when the whole batch is durable."""

    def __init__(self, *, chain_key: bytes | None = None) -> None:
        self.chain = Chain(key_from_env() if chain_key is None else chain_key)
        """Seals every line written with its checksum (``eventlog/chain.py``)."""
        self._chain_head = GENESIS  # the checksum of the last chained line read or written
        # A compacted log's snapshot block (its header and the records it restates):
        # the records of it not read yet, and the archived head the lines after it
        # continue from (chain.py; ``chainFrom``).
        self._block_left = 0
        self._block_origin: bytes | None = None
        self._listener: LogListener | None = None
        self._queue: list[Request] = []
        self._writing = False  # a writer is due to start, or running (:meth:`_drain`)
        self._writer: asyncio.Task[None] | None = None  # the writer, once it waits on I/O
        self._start: asyncio.Handle | None = None  # the writer's start, when due
        self._holding = False  # the writer due to start waits for a kick (:meth:`hold`)
        self._thens = 0  # queued requests that have a ``then``
        self._start_due = False  # a start held back for the kick
        self._failure: BaseException | None = None
        self._closing = False
        self._last_seq = 0
        self._records = 0
        self._skipped = 0
        self._resume: _Resume | None = None  # reading a log compacted elsewhere
        self.commits = 0
        """Batches written by this instance (each is one write and at most one fsync)."""
        self.faults = 0
        """Storage faults this instance met (each refused one batch, then recovered)."""
        self.give_up_seconds = GIVE_UP_SECONDS
        self.monotonic: Callable[[], float] = time.monotonic
        """The clock of backoff and give-up (tests inject a manual one)."""
        self._fault: BaseException | None = None  # the storage fault not yet written past
        self._stale = False  # the listener may hold records that are not on disk
        self._blocked_until = 0.0  # writes are refused until then (monotonic)
        self._backoff = BACKOFF_MIN
        self._next_replay = 0.0
        self._unreadable_since: float | None = None
        self._recovery = asyncio.Lock()
        self._faulted = asyncio.Event()  # set by a fault: the follower's wait ends at once
        self._fatal: asyncio.Future[BaseException] | None = None
        self._unsynced = False  # lines were written since the last fsync
        self._unsynced_at = 0.0  # when the first of them was (the loop's clock)
        self._batch_size = 0
        """Requests in the batch being run (a backend's :meth:`_flush` may read it)."""
        self._held: list[Record] = []
        """Records stamped and staged by the batch being run that the listener has not
        heard yet (:meth:`_deliver_held`)."""
        self._overlap: Callable[[], None] | None = None
        """What the flush under way may run while its sync does (the listener hearing
        the batch: :meth:`_commit`), for a backend whose sync can run while the thread
        works (FileLog, through kernel AIO); one that cannot leaves it be, and the
        records are heard after the flush (:meth:`_answer`)."""
        self._sync_timer: asyncio.TimerHandle | None = None
        self._idle_hook = type(self)._idle is not BatchingLog._idle
        """Whether the backend does anything in :meth:`_idle` (else the writer does not
        call it: once a batch, for a producer awaiting each enqueue)."""

    # ----------------------------------------------------------------- hooks

    @abc.abstractmethod
    def _exclusive(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Hold the exclusive lock, caught up and with a clean tail, for the block."""

    @abc.abstractmethod
    def _stage(self, lines: list[bytes]) -> None:
        """Remember encoded lines for the next :meth:`_flush`."""

    @abc.abstractmethod
    async def _flush(self, durable: bool) -> None:
        """Write the staged lines (one write; fsync when ``durable``); raise on I/O error.

        A backend that can survive the failure rolls the batch back and raises
        :class:`StorageUnavailable`; anything else is fatal for the instance."""

    async def _sync_only(self) -> None:
        """Make every line this instance wrote durable, for a batch of nothing but syncs.

        This default takes the lock like any batch; a backend whose sync needs neither
        the lock nor a catch-up (an fsync of the file, a synchronous commit) overrides
        it, so that a sync never holds up the other writers."""
        async with self._exclusive():
            await self._flush(True)

    async def _idle(self) -> bool:
        """The writer is about to stop: the queue is empty, or the log failed. A backend
        that got ready for a next batch (:class:`PostgresLog` begins its transaction
        ahead) ends that here, or keeps it and returns True when requests were queued
        meanwhile (it may wait for the callers the last batch woke) and the log has
        not failed. Default: nothing to end, return False."""
        return False

    async def _replay_all(self) -> None:
        """Reset the listener and replay the whole log from storage (after a fault).
        Backends that never raise :class:`StorageUnavailable` need not implement it."""
        raise LogError("this log cannot replay after a storage fault")

    # ----------------------------------------------------------------- state

    def _check_usable(self) -> LogListener:
        """The listener, or raise why the log cannot be used right now."""
        if self._closing:
            raise LogClosedError("the log is closed")
        if self._failure is not None:
            raise LogError("the log failed earlier and must be reopened") from self._failure
        if self._listener is None:
            raise LogError("the log is not open")
        return self._listener

    def _fail(self, exc: BaseException) -> None:
        """Enter the fail-stop state (first failure wins)."""
        if self._failure is None:
            self._failure = exc
        if self._fatal is not None and not self._fatal.done():
            self._fatal.set_result(self._failure)

    async def wait_fatal(self) -> BaseException:
        """Return (with the reason) once the instance has failed for good: a listener
        bug, or storage that stayed unreadable for :attr:`give_up_seconds`."""
        if self._fatal is None:
            self._fatal = asyncio.get_running_loop().create_future()
            if self._failure is not None:
                self._fatal.set_result(self._failure)
        return await asyncio.shield(self._fatal)

    @property
    def degraded(self) -> bool:
        """Whether writes are being refused after a storage fault (reads go on)."""
        return self._stale or (
            self._fault is not None and self.monotonic() < self._blocked_until
        )

    # ---------------------------------------------------------- storage faults

    def _enter_fault(self, exc: BaseException) -> None:
        """A read or write failed: replay at once, refuse writes for a backoff window."""
        now = self.monotonic()
        self.faults += 1
        self._fault = exc
        self._stale = True
        self._next_replay = now
        self._blocked_until = now + self._backoff
        self._faulted.set()
        log.warning(
            "storage fault: %s; answering reads from the last good state, writes are"
            " retried in %.2fs", exc, self._backoff,
        )  # fmt: skip
        self._backoff = min(self._backoff * 2, BACKOFF_MAX)

    async def _recover_if_due(self) -> None:
        """After a fault, replay the log from storage (when due); give up for good if
        it stays unreadable for :attr:`give_up_seconds`."""
        if not self._stale:  # (every batch asks: no lock taken for the common answer)
            return
        async with self._recovery:  # one replay at a time; a second caller waits for it
            await self._recover_locked()

    async def _recover_locked(self) -> None:
        if not self._stale or self._failure is not None:
            return
        now = self.monotonic()
        if now < self._next_replay:
            return
        try:
            await self._replay_all()
        except (OSError, LogError) as exc:
            if self._failure is not None:
                return  # the listener failed during the replay: fail-stop already
            since = self._unreadable_since = self._unreadable_since or now
            if now - since >= self.give_up_seconds:
                log.error("giving up: the log stayed unreadable for %.0fs: %s", now - since, exc)
                self._fail(LogError(f"storage failed for good: {exc}"))
                return
            self._next_replay = now + self._backoff
            self._blocked_until = max(self._blocked_until, self._next_replay)
            self._backoff = min(self._backoff * 2, BACKOFF_MAX)
            log.warning("cannot replay the log yet (%s); next try in %.2fs", exc,
                        self._next_replay - now)  # fmt: skip
            return
        self._stale = False
        self._unreadable_since = None
        log.warning("log replayed from storage after the fault; state is the last good one")

    async def _follow_changes(self, changed: Callable[[], Awaitable[None]]) -> None:
        """The follower of a backend that can fault: await ``changed`` (a hint that
        others wrote, or a timeout) and catch up, until closed or failed; after a storage
        fault, replay when due (even when no request comes)."""
        while not self._closing and self._failure is None:
            if self._stale:
                await asyncio.sleep(max(0.0, self._next_replay - self.monotonic()))
                await self._recover_if_due()
                continue
            await self._changed_or_faulted(changed)
            if self._stale:
                continue
            try:
                await self._follow_catch_up()
            except StorageUnavailable as exc:
                if not self._closing and not self._stale:
                    self._enter_fault(exc)
            except LogError as error:
                if not self._closing:
                    log.error("log follower stopped: %s", error)
                return

    async def _changed_or_faulted(self, changed: Callable[[], Awaitable[None]]) -> None:
        """Await ``changed``, cut short by a storage fault that a write (or anything
        but this follower) entered meanwhile: the replay's retries are then due on the
        backoff's clock, not when the watcher next wakes (up to its safety interval)."""
        self._faulted.clear()
        waiting = asyncio.ensure_future(changed())
        faulted = asyncio.ensure_future(self._faulted.wait())
        try:
            await asyncio.wait((waiting, faulted), return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
            faulted.cancel()
        if waiting.done() and not waiting.cancelled():
            waiting.result()  # what ``changed`` raised is the follower's to see

    async def _follow_catch_up(self) -> None:
        """The follower's catch-up after ``changed`` (a backend may read aside)."""
        await self.catch_up()

    def _written_past_fault(self) -> None:
        """A batch reached the storage: the fault is over."""
        if self._fault is not None:
            log.warning("storage writable again after: %s", self._fault)
        self._fault = None
        self._backoff = BACKOFF_MIN

    def _run_degraded(self, batch: list[Request]) -> None:
        """Run a batch with no I/O while writes are refused: a command that appends
        nothing (a read) gets its result from the current state; one that would
        append is refused with :class:`StorageUnavailable`."""
        wait = max(0.0, self._blocked_until - self.monotonic())
        why = StorageUnavailable(
            f"storage unavailable ({self._fault}); the log retries by itself"
            f" (next write attempt in {wait:.2f}s)"
        )
        for req in batch:
            decided = decide(req)
            if decided is not None:
                records, result = decided
                if records:
                    req.future.set_exception(why)
                else:
                    req.future.set_result(result)
            settle(req)

    # -------------------------------------------------------------- delivery

    def _notify(self, method: str, *args: Any) -> None:
        """Call the listener; a listener error is fatal for the log (fail-stop)."""
        assert self._listener is not None
        try:
            getattr(self._listener, method)(*args)
        except Exception as exc:
            self._fail(exc)
            raise LogError(f"listener failed in {method}: {exc!r}") from exc

    def _deliver(self, records: Sequence[Record]) -> None:
        """Hand records to the listener; a listener error is fatal for the log."""
        if self._resume is not None:
            records = self._resuming(records)
        if not records:
            return
        self._last_seq = max_seq(records, self._last_seq)
        self._records += len(records)
        self._notify("on_records", records)

    def _report(self, skipped: SkippedLine) -> None:
        """Hand a skipped line to the listener (not again while resuming: a compaction
        copies the tail's lines, garbage included, that the listener already heard of)."""
        self._skipped += 1
        if self._resume is None:
            self._notify("on_skipped", skipped)

    def _note_chain(self, value: str | None) -> None:
        """A line read carried ``value``: the chain continues from it."""
        digest = parse_value(value)
        if digest is not None:
            self._chain_head = digest

    def _deliver_decoded(self, decoded: Decoded) -> int:
        """Deliver decoded lines in log order, in slices of DELIVERY_BATCH; return records."""
        records = decoded.records
        if records and records[0].get("event") == SNAPSHOT_EVENT:  # a compacted log's start
            self._enter_block(records[0])
        self._note_chain(decoded.chain)
        if self._block_left:
            if 0 <= decoded.chain_at < self._block_left and self._block_origin is not None:
                # the last chained line read is the header or a restated record: a line
                # appended next goes on from the archived head, as the tail does
                self._chain_head = self._block_origin
            self._block_left = max(0, self._block_left - len(records))
        start = 0
        for before, skipped in decoded.skipped:
            self._deliver_slices(records, start, before)
            start = before
            self._report(skipped)
        self._deliver_slices(records, start, len(records))
        return len(records)

    def _enter_block(self, header: Record) -> None:
        """A snapshot header was read: its block is itself and its ``records``."""
        count = header.get("records")
        self._block_left = 1 + (count if type(count) is int and count > 0 else 0)
        self._block_origin = parse_value(header.get(CHAIN_FROM))

    def _deliver_slices(self, records: list[Record], start: int, stop: int) -> None:
        if start == 0 and stop == len(records) and stop <= DELIVERY_BATCH:
            self._deliver(records)
            return
        for i in range(start, stop, DELIVERY_BATCH):
            end = min(i + DELIVERY_BATCH, stop)
            self._deliver(records[i:end])

    def _compacted_elsewhere(self) -> None:
        """Another writer compacted the log; the new one is read from its start.

        A compacted log is a snapshot of the state at a point (its header's ``seq``)
        plus, byte for byte, every record after it. When this instance already delivered
        that point (a follower that kept up, the usual case), its listener holds that
        very state: it keeps it and hears the header, then only the records past its
        last seq, so that no follower replays the whole queue on each compaction. Any
        doubt (a header past our last seq, a record without a seq after the snapshot)
        falls back to a reset and a full replay of the new log, as before."""
        self._records = 0
        self._skipped = 0
        self._chain_head = GENESIS
        self._block_left = 0
        if self._last_seq > 0:
            self._resume = _Resume(self._last_seq)
        else:
            self._reset()

    def _resuming(self, records: Sequence[Record]) -> Sequence[Record]:
        """While resuming: hold back what the listener has; return what it is to hear
        (all of it after a reset, if resuming turns out not to be possible)."""
        resume = self._resume
        assert resume is not None
        held = resume.held
        for i, record in enumerate(records):
            seq = record.get("seq")
            if not held:  # the new log's first record: the snapshot's header
                count = record.get("records")
                if (record.get("event") != SNAPSHOT_EVENT or type(seq) is not int
                        or seq > resume.after or type(count) is not int or count < 0):  # fmt: skip
                    return self._replay_instead(records)
                resume.snapshot = count
            elif resume.snapshot > 0:  # a restated live task: the listener has it
                resume.snapshot -= 1
            elif type(seq) is not int:
                return self._replay_instead(records)
            elif seq > resume.after:  # the first record the listener has not seen
                self._end_resume()
                return records[i:]
            held.append(record)
        return ()

    def _caught_up(self) -> None:
        """Everything the storage holds was read (backends call this after each catch-up):
        a resume that found nothing past our last seq yet ends here."""
        if self._resume is not None and self._resume.held:
            self._end_resume()

    def _end_resume(self) -> None:
        resume, self._resume = self._resume, None
        assert resume is not None and resume.held
        self._records += len(resume.held)
        self._notify("on_records", resume.held[:1])  # the header: where the snapshot is

    def _replay_instead(self, records: Sequence[Record]) -> list[Record]:
        resume, self._resume = self._resume, None
        assert resume is not None
        self._last_seq = 0
        self._notify("on_reset")
        return [*resume.held, *records]

    def _snapshot_installed(self, header: Record) -> None:
        """This instance installed a compaction (its backend counted the new log's lines
        already): its listener hears the new log's header, as a follower that resumes on
        the compacted log does (:meth:`_end_resume`), and so knows where the snapshot
        is (the engine compacts again only once something was appended after it). It
        hears it as a reader does: without the log's ``format`` field."""
        self._notify("on_records", [{k: v for k, v in header.items() if k != FORMAT_FIELD}])

    def _reset(self) -> None:
        """Forget everything read so far and tell the listener a full replay follows."""
        self._last_seq = 0
        self._records = 0
        self._skipped = 0
        self._chain_head = GENESIS
        self._block_left = 0
        self._resume = None
        self._notify("on_reset")

    # ---------------------------------------------------------- group commit

    async def transact(self, command: Command[T], *, durable: bool = True) -> T:
        return cast(T, await self._submit(command, (), durable))

    def submit(
        self, command: Command[T], *, durable: bool = True,
        on_durable: Callable[[T], None] | None = None,
        then: Callable[[asyncio.Future[T]], None] | None = None,
    ) -> asyncio.Future[T]:  # fmt: skip
        """:meth:`EventLog.submit`. ``on_durable`` (a durable request's) is called with the
        command's result as soon as its records are durable, from the writer itself,
        before the future resolves and, where the backend can (:attr:`SPLIT_FLUSH`),
        before the non-durable requests queued behind it are even run: a caller that
        answers someone there (the daemon's ack) answers at the earliest, and the work
        behind it (the claim of the task just enqueued) follows. It must not raise
        (what it raises is logged) nor await. ``then`` is called by the writer with the
        future the moment it is done (resolved, failed, or found cancelled), once,
        after the batch's lock is let go: what a done-callback does, without a loop
        turn (what it submits joins the writer's next batch). A future cancelled by
        its caller before the writer reaches it hears ``then`` when the writer does."""
        return cast("asyncio.Future[T]",
                    self._submit(command, (), durable, on_durable, then))  # fmt: skip

    def make_durable(
        self, request: asyncio.Future[Any] | None,
        on_durable: Callable[[Any], None] | None = None,
    ) -> bool:  # fmt: skip
        """:meth:`EventLog.make_durable`: a request still in the queue (the writer has
        not taken it into a batch) becomes durable (with ``on_durable``, if given)."""
        for req in reversed(self._queue):  # (the caller's is the last, as a rule)
            if req.future is request:
                req.durable = True
                if on_durable is not None:
                    req.on_durable = on_durable
                return True
        return False

    async def append(self, records: Sequence[Record], *, durable: bool = True) -> None:
        """Append unconditionally (same as a transaction returning ``records``)."""
        await self._submit(None, records, durable)

    def _submit(
        self, command: Command[Any] | None, records: Sequence[Record], durable: bool,
        on_durable: Callable[[Any], None] | None = None,
        then: Callable[[asyncio.Future[Any]], None] | None = None,
    ) -> asyncio.Future[Any]:  # fmt: skip
        """Queue a request for the writer; the future resolves when it is written."""
        if self._closing or self._failure is not None or self._listener is None:
            self._check_usable()
        loop = asyncio.get_running_loop()
        # (not ``loop.create_future()``: the same future without a Python-level call)
        future: asyncio.Future[Any] = asyncio.Future(loop=loop)
        self._queue.append(Request(command, records, durable, future, on_durable, then))
        self.submitted += 1
        if then is not None:
            self._thens += 1
        if not self._writing:
            self._writing = True
            if self._holding:
                self._start_due = True
            else:
                self._start = loop.call_soon(self._start_writer)
        return future

    def hold(self) -> None:
        """Until the next :meth:`kick`, a writer due to start waits for it rather than
        for the loop's next turn (no start is scheduled, none is called off): for a
        caller that kicks in the same call, once it has submitted all it will."""
        self._holding = True

    def kick(self) -> None:
        """Start the writer now if it is due to start, instead of on the loop's next
        turn: for a caller that has submitted everything it will this turn (the daemon,
        once it has handled a read's lines). Ends a :meth:`hold`."""
        self._holding = False
        if self._start_due:
            self._start_due = False
            self._start_writer()
        elif self._start is not None:
            self._start.cancel()
            self._start_writer()

    def _start_writer(self) -> None:
        """Run the writer at once, in this call, for as long as it needs no I/O wait (an
        uncontended lock, an inline fsync: as a rule, the whole of it); it goes on as a
        task from the first wait. No task, no loop turn for a batch that never waits."""
        self._start = None
        drain = self._drain()
        try:
            awaited = drain.send(None)
        except StopIteration:
            return
        self._writer = asyncio.get_running_loop().create_task(resumed(drain, awaited))

    async def _drain(self) -> None:
        """The writer: run queued requests batch after batch until the queue is empty."""
        try:
            while (self._queue and self._failure is None) or (
                self._idle_hook and await self._idle_safely()
            ):
                batch, self._queue = self._queue, []
                thens, self._thens = self._thens, 0
                if self._stale:
                    await self._recover_if_due()
                try:
                    if self._failure is not None:
                        raise self._failure
                    if self.degraded:
                        self._run_degraded(batch)
                    elif await self._run_batch(batch, thens > 0):
                        self._written_past_fault()
                except StorageUnavailable as exc:
                    self._enter_fault(exc)
                    try:  # drop what never reached the storage before anyone reads on
                        await self._recover_if_due()
                    finally:
                        fail_all(batch, exc)
                except BaseException as error:
                    self._fail(error)
                    fail_all(batch, error)
                    if not isinstance(error, Exception):
                        raise
            if self._queue:
                assert self._failure is not None
                fail_all(self._queue, self._failure)
                self._queue, self._thens = [], 0
        finally:
            self._writing = False
            self._writer = None

    async def _idle_safely(self) -> bool:
        """:meth:`_idle`; a storage fault there is entered (no request was in it)."""
        try:
            return await self._idle()
        except StorageUnavailable as exc:
            if not self._closing and not self._stale:
                self._enter_fault(exc)
            return bool(self._queue) and self._failure is None
        except Exception as error:
            self._fail(error)
            return False

    async def _run_batch(self, batch: list[Request], thens: bool) -> bool:
        """Run the batch under the lock; return whether it wrote anything.

        A batch is made durable (fsync) when any request in it asks for durability and
        something written since the last sync is not durable yet: its own lines, or
        earlier lines written without a sync (which this sync makes durable too).

        When durable requests that wait to be answered (``on_durable``) are followed by
        requests that need no durability, the backend permitting (:attr:`SPLIT_FLUSH`),
        the lines so far are written and synced and those requests answered first; the
        rest is run and written after, in the same lock hold, and made durable by the
        next sync like any line written without one.

        The listener hears a request's records before the next request is decided (it
        decides against the listener's state) and before its future resolves, but after
        they are written and the ``on_durable`` hooks of a durable write have run: the
        fold of what a durable write carries is not on the way to its ack. A batch with no
        such hook (the embedded queue's, whose answers are the futures) is heard during
        its sync where the backend can overlap the two (:attr:`_overlap`). When a write
        fails, the listener hears its records all the same, as before the write, and the
        fault's recovery reads back what the storage holds. ``thens``: whether any
        request has a ``then`` to call (none: no pass over the batch for them)."""
        if all(req.command is None and not req.records for req in batch):
            await self._run_syncs(batch)
            return False
        done: list[tuple[Request, Any]] = []
        durable = staged = wrote = waiting = hooked = False
        self._batch_size = len(batch)
        async with self._exclusive():
            for group, records, wants_sync, has_hook in units(batch):
                if waiting and self.SPLIT_FLUSH and not wants_sync:
                    await self._commit(True)
                    self._answer(done, hooked)
                    done.clear()
                    wrote, staged, durable, waiting = True, False, False, False
                self._deliver_held()
                s, d = self._run_appends(group, records, wants_sync, done)
                staged, durable = staged or s, durable or d
                hooked = hooked or has_hook
                waiting = waiting or (d and has_hook)
            durable = durable and (staged or self._unsynced)
            if staged or durable:  # (no acks to send first: heard during the sync)
                await self._commit(durable, hear=not hooked)
            self._answer(done, hooked)  # under the lock: heard before anything another writer adds
        if thens:
            for req in batch:  # every one is done by now: its ``then``, the lock let go
                settle(req)
        return staged or wrote

    async def _commit(self, durable: bool, *, hear: bool = False) -> None:
        """Flush what is staged (synced if ``durable``) and count it; with ``hear``, the
        listener hears the records held once they are written, during the sync where
        the backend can (:attr:`_overlap`), rather than after it."""
        self._overlap = self._deliver_held if hear and self._held else None
        try:
            await self._flush(durable)
        except StorageUnavailable:
            self._deliver_held()  # heard as if before the write: the recovery reads back
            raise
        except BaseException:
            self._held.clear()  # the instance stops (fail-stop): nothing more is heard
            raise
        finally:
            self._overlap = None
        self.commits += 1
        self._synced(durable)

    def _answer(self, done: list[tuple[Request, Any]], hooked: bool) -> None:
        """After a flush: the ``on_durable`` hooks first (the daemon's acks; ``hooked``:
        whether any request of the batch has one), then the listener hears the records
        it carried, then the futures resolve."""
        if hooked:
            call_hooks(done)
        self._deliver_held()
        resolve(done)

    def _run_one(self, req: Request, done: list[tuple[Request, Any]]) -> tuple[bool, bool]:
        """Run one request under the lock: decide, stamp, hold and stage its records;
        return (whether it staged lines, whether it asks for a sync)."""
        decided = decide(req)
        if decided is None:
            return False, False
        records, result = decided
        try:
            stamped, lines = self._stamp(records)
        except Exception as exc:  # records that cannot be encoded: this caller's
            req.future.set_exception(exc)
            return False, False
        if lines:
            self._hold(stamped)
            self._stage(lines)
        done.append((req, result))
        return bool(lines), req.durable and (bool(lines) or req.command is None)

    def _run_appends(self, group: list[Request], records: list[Record] | None, durable: bool,
                     done: list[tuple[Request, Any]]) -> tuple[bool, bool]:  # fmt: skip
        """:meth:`_run_one` for a unit of :func:`units`: one request (``records``
        None), or consecutive plain appends (their ``records``, and whether any is
        ``durable``) stamped and delivered as one (the same records, seqs and lines;
        one listener call); when any of them cannot be encoded, each on its own, so
        that only its caller gets the error."""
        if records is None:
            return self._run_one(group[0], done)
        try:
            stamped, lines = self._stamp(records)
        except Exception:
            staged = durable = False
            for req in group:
                s, d = self._run_one(req, done)
                staged, durable = staged or s, durable or d
            return staged, durable
        self._hold(stamped)
        self._stage(lines)
        done.extend(zip(group, repeat(None)))
        return True, durable

    async def _run_syncs(self, batch: list[Request]) -> None:
        """A batch of syncs only (:meth:`sync`, the timer of :meth:`_synced`): one sync
        of what is written, without the lock (:meth:`_sync_only`)."""
        waiting = [req for req in batch if not req.future.done()]
        if waiting and self._unsynced:
            await self._sync_only()
            self.commits += 1
            self._synced(True)
        for req in waiting:
            if not req.future.done():
                req.future.set_result(None)
        for req in batch:
            settle(req)

    def _synced(self, durable: bool) -> None:
        """After a flush: a durable one covers every line written before it; lines
        written without a sync are made durable by the next durable batch, or by a sync
        of their own at most SYNC_SOON_SECONDS after the first of them was written.

        The timer is armed once and left armed across durable batches (a producer
        awaiting each enqueue writes a claim without a sync after every one: cancelling
        and arming it again each time cost more than the rest of this method); when it
        fires, :meth:`_sync_soon` syncs only lines that have waited their time."""
        if durable:
            self._unsynced = False
            return
        if self._unsynced and self._sync_timer is not None:
            return
        loop = asyncio.get_running_loop()
        if not self._unsynced:
            self._unsynced = True
            self._unsynced_at = loop.time()
        if self._sync_timer is None:  # (also after a timer's sync that failed)
            self._sync_timer = loop.call_at(self._unsynced_at + SYNC_SOON_SECONDS,
                                            self._sync_soon)  # fmt: skip

    def _sync_soon(self) -> None:
        """The timer of :meth:`_synced`: sync the lines written without one if the first
        of them has waited SYNC_SOON_SECONDS; if a durable batch covered the lines it
        was armed for, and younger ones wait, wait for them."""
        self._sync_timer = None
        if not self._unsynced or self._closing or self._failure is not None:
            return
        loop = asyncio.get_running_loop()
        due = self._unsynced_at + SYNC_SOON_SECONDS
        if due > loop.time():
            self._sync_timer = loop.call_at(due, self._sync_soon)
            return
        future = self._submit(None, (), True)  # no records: a sync of what is written
        future.add_done_callback(lambda f: f.cancelled() or f.exception())

    async def sync(self) -> None:
        """Make every line written so far durable (a no-op when it already is)."""
        if self._unsynced:
            await self._submit(None, (), True)

    def _stamp(self, records: Sequence[Record]) -> tuple[list[Record], list[bytes]]:
        """Copies of ``records`` with consecutive seq numbers, and their lines, each
        sealed with its checksum (the chain head moves only if all of them encode)."""
        fresh = self._last_seq == 0 and self._records == 0  # a new log says its format
        stamped, lines, self._chain_head = stamp(
            records, self._last_seq, fresh, self.chain, self._chain_head
        )
        return stamped, lines

    def _hold(self, stamped: list[Record]) -> None:
        """Freshly stamped records (their seqs are the new maximum), counted now and
        heard by the listener at the next :meth:`_deliver_held`."""
        self._last_seq = stamped[-1]["seq"]
        self._records += len(stamped)
        self._held.extend(stamped)

    def _deliver_held(self) -> None:
        """Hand the listener the records the batch holds (:meth:`_hold`). A compaction
        calls it too, before it takes its point: the snapshot then holds them."""
        if self._held:
            held, self._held = self._held, []
            self._notify("on_records", held)

    async def _wait_writer(self) -> None:
        """Wait until every transaction queued so far has finished (a writer held for a
        kick that never came is started: :meth:`hold`'s caller awaited before its kick)."""
        while self._writing:
            if self._holding:
                self.kick()
            elif self._writer is None:  # due to start on the loop's next turn
                await asyncio.sleep(0)
            else:
                await asyncio.wait({self._writer})
