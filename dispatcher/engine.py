"""The engine: one log, one projection state, the executors, and the dispatch loop.

State changes in one place only: the log listener folds every record (ours and other
processes') into :attr:`Engine.state`, and :func:`advance` moves due timers. The
dispatch loop wakes on deltas, on registrations, on freed capacity and on one timer
armed for the next instant something becomes due: there is no polling tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import random
import socket
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from snerd.dispatcher.clock import Clock, SystemClock, sleep
from snerd.dispatcher.dispatch import Claimed, Dispatcher
from snerd.dispatcher.executors import Executor
from snerd.dispatcher.flags import Flag
from snerd.dispatcher.housekeeping import Housekeeper
from snerd.dispatcher.notify import Notifier
from snerd.dispatcher.runs import Run
from snerd.errors import LogClosedError, LogError
from snerd.eventlog.base import EventLog, Record, SkippedLine
from snerd.projections import decide as cmds
from snerd.projections import events as ev
from snerd.projections import evolve
from snerd.projections.apply import Folder
from snerd.projections.commands import (
    Cancel,
    Command,
    Enqueue,
    Finish,
    Purge,
    Release,
    ReportProgress,
    Requeue,
    check_result,
)
from snerd.projections.decide import decide, decide_run, owns
from snerd.projections.delta import Delta
from snerd.projections.events import Event, decode, use_built
from snerd.projections.replay import BulkFolder
from snerd.projections.state import QueueState, empty
from snerd.projections.task import Task

EnqueueOutcome = cmds.Refusal | cmds.Deduplicated | cmds.UnknownParents | None
"""What an enqueue came to: None (acked), the parents it will not wait for (acked), a
dedupe verdict or a refusal."""

log = logging.getLogger("snerd.engine")
T = TypeVar("T")
Member = Enqueue | Finish
"""A command decided in runs (:func:`~snerd.projections.decide.decide_run`)."""



class Liveness(Protocol):
    """Which daemons are alive (``eventlog.Liveness`` on files; fakes in tests)."""

    def hold(self, daemon_id: str) -> None: ...

    def is_alive(self, daemon_id: str) -> bool: ...

    def confirm(self, daemon_id: str) -> None:
        """Make sure our own lock is held now, taking it again if it was lost (blocking)."""

    def release(self, daemon_id: str | None = None) -> None: ...


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Tunables; every one has a sane default."""

    daemon_id: str = ""
    max_workers: int = 16
    pools: dict[str, int] = field(default_factory=dict)
    lease_seconds: float = 3600.0
    timeout_grace: float = 1.0
    housekeeping_seconds: float = 1.0
    drain_seconds: float = 30.0
    compact_min_bytes: int = 1 << 20
    compact_dead_ratio: float = 0.5
    compact_dead_records: int = 10_000
    archive_max_age_seconds: float | None = None
    archive_max_bytes: int | None = None
    """Compaction thresholds (:func:`snerd.dispatcher.housekeeping.should_compact`): a
    log of ``compact_min_bytes`` or more that is ``compact_dead_ratio`` dead, or any log
    with ``compact_dead_records`` dead records (SnerdMQ compacts after 10,000 appends),
    so a long-running small queue keeps a small live log. Archives (the audit trail) are
    kept unless ``archive_max_age_seconds`` or ``archive_max_bytes`` is set: then each
    compaction deletes the oldest past that age, or beyond that total size."""
    passive: bool = False
    """Follow the log and accept operator commands only: no dispatch, no housekeeping
    (dashboards and CLI tools: they never write unless told to)."""


def new_daemon_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Engine:
    """Runs the queue on one log. ``start()``, then feed commands; ``drain()`` to stop."""

    def __init__(
        self,
        log_: EventLog,
        *,
        executors: Sequence[Executor],
        clock: Clock | None = None,
        config: EngineConfig | None = None,
        liveness: Liveness | None = None,
        notifier: Notifier | None = None,
        jitter: Callable[[], float] | None = None,
    ) -> None:
        self.log = log_
        self.jitter = jitter or random.random
        """Draws the random part of an exponential retry backoff, in [0, 1] (tests pass
        their own; the draw is written into the retry's event, never drawn on replay)."""
        self.executors = list(executors)
        self.clock = clock or SystemClock()
        self.config = config or EngineConfig()
        self.daemon = self.config.daemon_id or new_daemon_id()
        self.liveness = liveness
        self.notifier = notifier or Notifier()
        self.state: QueueState = empty()
        self.runs: dict[str, Run] = {}
        self.skipped: list[SkippedLine] = []
        self.draining = False
        self.started_at = self.clock.now()
        self.totals: dict[str, int] = dict.fromkeys(evolve.METRICS, 0)
        """Events folded since start-up (after its replay), per metric: ``stats``."""
        self._bulk: BulkFolder | None = None
        self.dispatcher = Dispatcher(self)
        self.housekeeper = Housekeeper(self)
        self._idle: asyncio.Future[None] | None = None  # a drain's wait for the last run
        self._compacting = False
        self._snapshot_seq: int | None = None  # the seq the live log's snapshot covers
        self._hurry = asyncio.Event()
        self._later: set[asyncio.Task[None]] = set()  # outcomes waiting for the storage
        self._notices = 0  # dead letters decided whose notices are not out yet
        self._claims_queued = 0  # claims behind requests, submitted, not decided yet
        self._run: _Run | None = None  # enqueues and successes, one request
        self._built: dict[str, tuple[Record, Task]] = {}  # id -> (our record, its task)
        self._confirming: asyncio.Task[None] | None = None  # our liveness lock is in doubt
        self._drained: asyncio.Future[None] | None = None
        self.changed = Flag()  # set on every state change; waiters clear it
        self.observers: list[Callable[[Sequence[Event], Delta], None]] = []
        """Called after every fold with the typed events and the delta (dashboards, stats)."""

    # --- log listener (the only writer of self.state) --------------------------------

    def on_records(self, records: Sequence[Record]) -> None:
        if records and records[0].get(ev.F_EVENT) == ev.SNAPSHOT:  # a file's first line
            seq = records[0].get(ev.F_SEQ)  # (0: a log of lines without seqs, SnerdMQ's)
            self._snapshot_seq = seq if type(seq) is int and seq > 0 else None
        if self._bulk is not None:
            self._bulk.feed(records)
            return
        events = [decode(record) for record in records]  # decoded once, for every reader
        if self._built:  # tasks read from our own records already (a claim told with them)
            built, self._built = self._built, {}
            use_built(events, built)
        folder = Folder(self.state)  # (``state.fold_events``, called natively)
        folder.feed(events)
        self.state, delta = folder.finish()
        self.changed.set()
        for metric, _ in delta.counted:
            self.totals[metric] += 1
        if delta.released and self.runs:
            self._released_as_dead(events)
        self._react(delta)
        for observer in self.observers:
            try:
                observer(events, delta)
            except Exception:
                log.exception("observer failed")

    def on_reset(self) -> None:
        self.state = empty()
        self._snapshot_seq = None
        self.dispatcher.wake()
        for observer in self.observers:
            observer((), Delta(reset=True))

    def on_skipped(self, skipped: SkippedLine) -> None:
        self.skipped.append(skipped)
        del self.skipped[:-100]
        log.warning("skipped %s log line at byte %d", skipped.reason, skipped.offset)

    def _released_as_dead(self, events: Sequence[Event]) -> None:
        """Another daemon released an attempt running here as a dead owner's: it found
        our liveness lock free (a dropped connection). Claim nothing more until the lock
        is known to be ours again, or the next claims would be released as well and run
        twice while we live."""
        for event in events:
            if type(event) is ev.ClaimReleased and event.reason == ev.REASON_OWNER_DIED:
                run = self.runs.get(event.task_id)
                if run is not None and run.attempt == event.attempt:
                    self._doubt_liveness()
                    return

    @property
    def liveness_in_doubt(self) -> bool:
        """Whether our liveness lock is being confirmed (no claims meanwhile)."""
        return self._confirming is not None

    def _doubt_liveness(self) -> None:
        if self.liveness is None or self._confirming is not None:
            return
        log.warning("a claim of ours was released as a dead daemon's; confirming our "
                    "liveness lock before claiming again")  # fmt: skip
        self._confirming = asyncio.get_running_loop().create_task(self._confirm_liveness())

    async def _confirm_liveness(self) -> None:
        assert self.liveness is not None
        delay = 0.05
        try:
            while True:
                try:
                    await asyncio.to_thread(self.liveness.confirm, self.daemon)
                    return
                except LogError as exc:
                    log.warning("liveness lock not confirmed (%s); retrying", exc)
                    await sleep(self.clock, delay)
                    delay = min(delay * 2, 5.0)
        finally:
            self._confirming = None
            self.dispatcher.wake()

    def _react(self, delta: Delta) -> None:
        if delta.progress:
            self.notifier.progress(self.state, delta.progress, self.runs)
        if delta.wakes_dispatch and (not self._claims_queued or delta.doomed):
            # (A claim queued and not decided yet plans against the state this fold made:
            # it takes what became runnable, or arms the timer; a nudge now would wake
            # the dispatcher for a pass that the claim's plan makes pointless. A fail-
            # through, though, only a pass carries out.)
            self.dispatcher.nudge(self.state, delta)

    # --- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Hold the liveness lock, replay the log, and start dispatching."""
        if self.liveness is not None:
            self.liveness.hold(self.daemon)
        self._bulk = BulkFolder()
        with collector_paused():
            await self.log.open(self)
            bulk, self._bulk = self._bulk, None
            self.state = bulk.finish()
        if self.config.passive:
            return
        self.dispatcher.start()
        self.housekeeper.start()

    def stop_claiming(self) -> None:
        """No new claims from now on (the first step of a drain)."""
        self.draining = True
        self.housekeeper.stop()

    def hurry(self) -> None:
        """End a drain in progress now: release what still runs."""
        self._hurry.set()

    async def drain(self, timeout: float | None = None) -> None:
        """Stop claiming, let running attempts finish (up to ``timeout``), release the
        rest, and close the log. Idempotent."""
        if self._drained is not None:
            await asyncio.shield(self._drained)
            return
        self._drained = asyncio.get_running_loop().create_future()
        try:
            await self._drain(self.config.drain_seconds if timeout is None else timeout)
        finally:
            self._drained.set_result(None)

    async def _drain(self, wait: float) -> None:
        self.stop_claiming()
        await self.dispatcher.stop()  # no pass is claiming from here on
        await self._claims_settled()
        if self.runs and wait > 0:
            finished = asyncio.ensure_future(self._all_finished())
            hurried = asyncio.ensure_future(self._hurry.wait())
            await asyncio.wait({finished, hurried}, timeout=wait,
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            finished.cancel()
            hurried.cancel()
        try:
            await self._release_all(ev.REASON_DRAIN)
        except LogError as exc:  # the drain goes on: once this daemon is gone, others
            log.warning("drain: claims not released (%s); other daemons release them "
                        "once this one has stopped", exc)  # fmt: skip
        if self._confirming is not None:
            self._confirming.cancel()
        await self.notifier.close()
        await self.log.close()
        if self.liveness is not None:
            self.liveness.release(self.daemon)

    async def _all_finished(self) -> None:
        while self.runs:
            self._idle = asyncio.get_running_loop().create_future()
            await self._idle

    async def _claims_settled(self) -> None:
        """Wait until the requests submitted so far are decided and answered: a claim
        queued before the drain began (behind an enqueue, or with it) has begun its
        attempt by then, or will not."""
        with contextlib.suppress(LogError):  # the drain goes on: its release says why not
            await self.log.transact(_nothing, durable=False)

    async def _release_all(self, reason: str) -> None:
        """Stop every attempt running here and release every claim this daemon holds in
        the log: those of its runs, and any written with no attempt begun (a pass the
        drain stopped between its claim's write and the attempt's start)."""
        runs = list(self.runs.values())
        for run in runs:
            self._forget(run)
            if run.executor is not None:
                run.executor.stop(run)
        tasks = self.state.tasks  # (a run's claim is in the log like any other)
        await self._release(sorted(
            (task_id, task.claim.attempt)
            for task_id in self.state.by_daemon.get(self.daemon, ())
            if (task := tasks.get(task_id)) is not None and task.claim is not None
        ), reason)  # fmt: skip

    async def _release(self, attempts: Sequence[tuple[str, int]], reason: str) -> None:
        """Release our own claims on these attempts (those we still hold)."""
        mine = tuple(
            (task_id, attempt) for task_id, attempt in attempts
            if (task := self.state.tasks.get(task_id)) is not None
            and owns(task, self.daemon, attempt)
        )  # fmt: skip
        if mine:
            await self.run_command(Release(mine, reason))

    # --- writing ----------------------------------------------------------------------

    async def commit(
        self, decide: Callable[[], tuple[list[Record], T]], *, durable: bool = True
    ) -> T:
        """Run ``decide`` under the log lock (after catching up with every other
        writer) and append what it returns; afterwards announce our dead letters, once
        they are durable (a notice is something a client may rely on after a crash)."""
        owed: list[Record] = []  # the decision's dead letters, counted from it

        def command() -> tuple[list[Record], T]:
            records, result = decide()
            owed.extend(_dead_letters(records))
            if owed:
                self._notices += 1  # (see :attr:`settling`)
            return records, result

        try:
            result = await self.log.transact(command, durable=durable)
            if owed:
                await self._announce(owed, durable)
        finally:
            if owed:
                self._noticed()
        return result

    def _noticed(self) -> None:
        """A dead letter's notice went out (or will not: its write or sync failed)."""
        self._notices -= 1
        self.changed.set()  # a waiter for :attr:`settling` (``Queue.join``) looks again

    @property
    def settling(self) -> bool:
        """Whether work already decided here is still on its way: a dead letter whose
        notice is not out yet, an outcome kept until the storage takes it, or children
        of a dead-lettered parent for the dispatcher to fail through. (What an embedded
        queue's ``join`` waits for besides the attempts: its caller reads the notices.)"""
        return bool(self._notices or self._later) or (
            len(self.state.doomed) > 0 and self.dispatcher.started and not self.draining
        )  # fmt: skip

    async def _announce(self, written: Sequence[Record], durable: bool) -> None:
        """Tell the notifier of the dead letters among ``written`` once they are durable."""
        if not durable:
            await self.log.sync()
        for record in _dead_letters(written):
            self.notifier.dead_lettered(record)

    async def run_command(self, command: Command, *, durable: bool = True) -> Any:
        """Decide ``command`` under the log lock against the caught-up state, append its
        events, and return the decision's outcome (None, a refusal, a verdict)."""

        def under_lock() -> tuple[list[Record], Any]:
            decision = decide(self.state, command, now=self.clock.now(), daemon=self.daemon)
            return decision.records, decision.outcome

        return await self.commit(under_lock, durable=durable)

    # --- commands ----------------------------------------------------------------------

    async def enqueue(self, cmd: Enqueue) -> EnqueueOutcome:
        """Durably enqueue; None (or the parents it will not wait for) means acked, a
        refusal or a dedupe verdict says why not (:meth:`enqueue_soon`, awaited)."""
        return await self.enqueue_soon(cmd)

    def enqueue_soon(
        self, cmd: Enqueue, reply: Callable[[asyncio.Future[EnqueueOutcome]], None] | None = None,
        acked: Callable[[EnqueueOutcome], None] | None = None,
    ) -> asyncio.Future[EnqueueOutcome]:
        """Submit an enqueue now; the future resolves with its outcome once durable.

        When the task can run at once here, its claim is decided in the same batch (one
        lock hold), right after the enqueue's records were folded (in-process, in the
        enqueue's own request where it can be told without that fold: below). No
        coroutine, no task: the daemon answers each line from a callback. Once
        submitted, the enqueue is written whether or not anyone still waits for it.
        ``reply`` (if given) is called with the resolved future first thing, then the
        attempt starts in the same callback (one loop iteration for the ack and the
        ``execute``, the ack first). Without one (the embedded queue), the attempt starts
        first: an in-process handler that ends at once then submits its outcome before
        the waiter's next enqueue, and both go in one batch.

        ``acked`` (the daemon's) answers earlier: the log calls it with the outcome from
        its writer the moment the enqueue is durable (``on_durable``), before the fold
        and before the attempt starts (its claim, where told with the enqueue, went in
        the same write; else it is decided behind, and the log writes it after the ack:
        ``SPLIT_FLUSH``); ``reply`` is then not called for this enqueue. A producer
        awaiting each ack gets it a fold's work sooner, and the ``execute`` follows in a
        write of its own. (Not in one write with the ack: given both at once, the
        official SDK runs the handler and sends its result before its next enqueue, and
        awaited enqueues ran 0.77x as fast; ``benchmarks/README.md``, thirteenth session.)

        An enqueue joins the enqueues and successes submitted right before it, if
        nothing else was submitted since and they have not run yet: a burst, or the last
        attempt's success and the next enqueue, are decided as one run
        (:func:`~snerd.projections.decide.decide_run`) and folded once, not once each.
        A plain task that nothing ready here waits before, with a worker free, is
        claimed in that same run (:meth:`_enqueue_claiming`): one request, one write and
        one fold for the successes, the enqueue and its claim (the daemon's too, with
        the success an SDK sends after its next enqueue). (The daemon's ack then waits
        for the claim's decision, under the lock; measured on a VM whose fsync is 0.22
        ms, 5% less CPU a task and a blocking client's ack 4% sooner: the claim's own
        request, write and fold cost more than its decision.)"""
        # (``asyncio.Future``, not ``loop.create_future()``: the same future, without a
        # Python-level call from compiled code; two a task, with the outcome's below)
        enqueued: asyncio.Future[EnqueueOutcome] = asyncio.Future(loop=asyncio.get_running_loop())
        early = None if acked is None else _Early(acked)
        if reply is not None and early is not None:
            reply = early.unless_answered(reply)
        if (reply is None or early is not None) and _alone(cmd) and (
            self.dispatcher.none_ready() and self._may_claim() and self._may_run_at_once(cmd)
        ):  # fmt: skip
            self._enqueue_claiming(cmd, enqueued, reply, early)
            return enqueued
        self._joined(cmd, functools.partial(_member, enqueued), durable=True, on_durable=early)
        if not self._may_claim() or not self._may_run_at_once(cmd):
            if reply is not None:
                enqueued.add_done_callback(reply)
            return enqueued
        loop = asyncio.get_running_loop()
        done: asyncio.Future[EnqueueOutcome] = loop.create_future()

        def settle(_: object) -> None:  # the claim resolves after the enqueue (one batch)
            if not enqueued.done():
                enqueued.add_done_callback(settle)
                return
            if not _written(claiming):
                self._unclaim(reserved)
            if reply is None:
                try:
                    if reserved:  # its first step runs before the waiter's next one
                        self.dispatcher.begin_claimed(reserved)
                finally:  # the waiter learns the outcome whatever happened
                    if not done.done():
                        _copy(enqueued, done)
                return
            if not done.done():
                _copy(enqueued, done)
            try:
                reply(done)
            finally:  # the claims are written: their attempts start whatever happened
                if reserved:
                    self.dispatcher.begin_claimed(reserved)

        claiming, reserved = self._claim_behind(settle)
        return done

    def _enqueue_claiming(
        self, cmd: Enqueue, enqueued: asyncio.Future[EnqueueOutcome],
        reply: Callable[[asyncio.Future[EnqueueOutcome]], None] | None = None,
        early: _Early | None = None,
    ) -> None:  # fmt: skip
        """:meth:`enqueue_soon` when a worker is free and nothing ready here waits: the
        enqueue closes its run to all but successes, and the run's request decides the
        claim of the new task last, told without a fold in between
        (:meth:`Dispatcher.claim_enqueued`); the one fold of the run takes them all.
        Where only a plan after the fold can tell, the run claims nothing and the fold
        wakes the dispatcher, as for any enqueue. ``early`` (the daemon's ``acked``) hears
        the outcome once durable, before the fold; ``reply`` then skips it. Once
        written, the attempt starts, then the waiter hears the outcome (an in-process
        handler that ends at once submits its success before the waiter's next enqueue,
        which then joins it)."""
        run: _Run | None = None

        def answer(written: asyncio.Future[list[Any]], i: int) -> None:
            assert run is not None
            if run.claiming:  # never decided (the batch failed first)
                run.claiming = False
                self._claims_queued -= 1
            claimed, run.claimed = run.claimed, []
            try:
                if claimed and _written(written):
                    self.dispatcher.begin_claimed(claimed)
                elif claimed:
                    self._unclaim(claimed)
            finally:  # the waiter learns the outcome whatever happened
                _member(enqueued, written, i)
                if reply is not None:
                    reply(enqueued)

        self._joined(cmd, answer, durable=True, on_durable=early)
        run = self._run
        assert run is not None
        run.claiming = True  # decided at the end of the run's request; only successes join
        run.enqueue_at = len(run.commands) - 1
        self._claims_queued += 1

    def _claim_last(
        self, run: _Run, decisions: Sequence[cmds.Decision], now: float
    ) -> list[Record]:  # fmt: skip
        """Under the lock, after the run's decisions: the claim of the task the run's
        enqueue adds, if it can be told against the state the run was decided against.
        It can when the rest of the run is successes that make nothing ready (no child
        waits on them; a cron task's next occurrence is not a success), before the
        enqueue or after it (an SDK's result read with the next enqueue), so that the
        state it was decided against holds what a plan after the run's fold would see."""
        run.claiming = False
        self._claims_queued -= 1
        at = run.enqueue_at
        enqueued = decisions[at]
        if len(enqueued.records) != 1 or enqueued.outcome is not None:
            return []
        refs = self.state.refs
        for i, (cmd, decision) in enumerate(zip(run.commands, decisions, strict=True)):
            if i != at and (type(cmd) is not Finish or cmd.task_id in refs
                            or len(decision.records) != 1
                            or decision.records[0].get(ev.F_EVENT) != ev.SUCCEEDED):  # fmt: skip
                return []
        record = enqueued.records[0]
        found = self.dispatcher.claim_enqueued(self.state, record, now)
        if found is None:
            return []
        records, run.claimed = found
        task = run.claimed[0][0]  # read from ``record``: the fold takes it (on_records)
        self._built[task.id] = (record, task)
        return records

    def _joined(
        self, cmd: Member, reply: Callable[[asyncio.Future[list[Any]], int], None], *,
        durable: bool, on_durable: Callable[[Any], None] | None = None,
    ) -> None:  # fmt: skip
        """Queue ``cmd`` in the current run if it may take more members (not decided
        yet, nothing submitted since, and durable if ``cmd`` must be), else in a new
        run: one request, decided under the lock as a whole by
        :func:`~snerd.projections.decide.decide_run`; ``reply`` hears the request's
        outcome and the member's index in it, ``on_durable`` (a durable member's) its
        own outcome as soon as the run is durable (the log's ``on_durable``)."""
        run = self._run
        if run is None or not self._may_join(run, cmd, durable, on_durable):
            new = run = self._run = _Run()

            def decided() -> tuple[list[Record], Any]:
                new.started = True
                now = self.clock.now()
                decisions = decide_run(self.state, new.commands, now=now, daemon=self.daemon)
                if new.claiming:
                    claims = self._claim_last(new, decisions, now)
                    records = [r for d in decisions for r in d.records]
                    return records + claims, [d.outcome for d in decisions]
                if len(decisions) == 1:  # (the common run: a waiter's, one at a time)
                    return decisions[0].records, [decisions[0].outcome]
                return [r for d in decisions for r in d.records], [d.outcome for d in decisions]

            early = None if on_durable is None else new.answer_durable  # (only if waited for)
            new.request = self.log.submit(decided, durable=durable, on_durable=early,
                                          then=new.settle)  # fmt: skip
            new.submitted = self.log.submitted
        run.durable = run.durable or durable
        run.commands.append(cmd)
        run.replies.append(reply)
        if on_durable is not None:
            run.early.append((len(run.commands) - 1, on_durable))

    def _may_join(
        self, run: _Run, cmd: Member, durable: bool, on_durable: Callable[[Any], None] | None
    ) -> bool:  # fmt: skip
        """Whether a member may join ``run``: it takes more members (a run that claims
        its enqueue's task takes outcomes only), nothing was submitted since, and it is
        durable (answering early) if the member must be, or the log can still make it so
        (:meth:`EventLog.make_durable`, once)."""
        if not run.open or run.submitted != self.log.submitted:
            return False
        if run.claiming and (durable or type(cmd) is not Finish):
            return False
        if (durable and not run.durable) or (on_durable is not None and not run.early):
            early = None if on_durable is None else run.answer_durable
            return self.log.make_durable(run.request, early)
        return True

    def _claim_behind(
        self, then: Callable[[asyncio.Future[Claimed]], None]
    ) -> tuple[asyncio.Future[Claimed], Claimed]:
        """Submit the claims the plan makes for this engine's free slots, right behind
        what was just submitted (the same batch: one lock hold, one write), decided
        against the state that includes it. Returns the claim's future and the list of
        attempts it reserves (filled under the lock): :meth:`Dispatcher.begin_claimed`
        once written, else :meth:`_unclaim`; ``then`` is the future's callback, called
        once it resolves (the only one: a callback is a loop step). A claim decided when
        earlier ones took every slot plans nothing (:meth:`Dispatcher.claim_under_lock`)."""
        behind = _ClaimBehind(self, then)
        future: asyncio.Future[Claimed] = self.log.submit(
            behind.claim, durable=False, then=behind.resolved
        )  # fmt: skip
        self._claims_queued += 1
        return future, behind.reserved

    def _unclaim(self, reserved: Claimed) -> None:
        """The claims behind a request were not written: nothing to begin; the
        dispatcher looks again."""
        self.dispatcher.unreserve(reserved)
        reserved.clear()
        self.dispatcher.wake()

    def _may_run_at_once(self, cmd: Enqueue) -> bool:
        """Whether the task ``cmd`` enqueues may be claimable here as soon as it is in:
        an executor here takes it, and it is not scheduled for later. (Else a claim
        behind it would plan in vain, under the lock, once per enqueue: a producer that
        runs nothing itself, or a burst of delayed tasks. Work it does make runnable
        still wakes the dispatcher through its fold.)"""
        if cmd.cron or (cmd.execute_at is not None and cmd.execute_at > self.clock.now()):
            return False
        return self.dispatcher.runs_here(cmd.task_type, cmd.webhook_url)

    def _may_claim(self) -> bool:
        """Whether a claim behind the request just submitted may find a free slot: one
        beyond those the claims queued before it (not decided yet) will take. (A burst
        of 5,000 enqueues queued 5,000 claims behind them, of which 8 claimed: each of
        the others a request run under the lock, to plan nothing.)"""
        return (
            not self.draining and not self.config.passive and self.dispatcher.started
            and self.dispatcher.capacity() > self._claims_queued
        )  # fmt: skip

    async def read(self, query: Callable[[], T]) -> T:
        """Answer ``query`` after every command accepted before it has been applied
        (read-your-writes for a client that pipelines an enqueue and a get)."""
        return await self.log.transact(lambda: ((), query()), durable=False)

    async def cancel(self, task_id: str) -> cmds.Refusal | None:
        outcome: cmds.Refusal | None = await self.run_command(Cancel(task_id))
        return outcome

    async def requeue(self, key: str) -> cmds.Refusal | None:
        outcome: cmds.Refusal | None = await self.run_command(Requeue(key))
        return outcome

    async def purge(self, key: str) -> cmds.Refusal | None:
        outcome: cmds.Refusal | None = await self.run_command(Purge(key))
        return outcome

    async def report_progress(self, task_id: str, data: Any) -> cmds.Refusal | None:
        """Record progress of an attempt this daemon runs (others are refused)."""
        return await self.progress_soon(task_id, data)

    def progress_soon(self, task_id: str, data: Any) -> asyncio.Future[cmds.Refusal | None]:
        """:meth:`report_progress`, submitted now (in order with an outcome that follows)
        and decided under the lock, against the caught-up state: another daemon may have
        released the claim meanwhile (it took this one for dead), and then the progress
        is refused, not written for a task that is no longer running here."""
        run = self.runs.get(task_id)
        if run is None:
            refused = asyncio.get_running_loop().create_future()
            refused.set_result(cmds.Refusal("not_active", f"task {task_id!r} is not running here"))
            return refused
        command = ReportProgress(task_id, run.attempt, data)

        def under_lock() -> tuple[list[Record], cmds.Refusal | None]:
            decision = decide(self.state, command, now=self.clock.now(), daemon=self.daemon)
            outcome: cmds.Refusal | None = decision.outcome
            return decision.records, outcome

        return self.log.submit(under_lock, durable=False)

    async def finish(
        self, task_id: str, *, success: bool, error: str | None = None,
        attempt: int | None = None, reason: str = ev.REASON_MAX_RETRIES, result: Any = None,
        retry: bool = True,
    ) -> cmds.Refusal | None:  # fmt: skip
        """Record the outcome of an attempt this daemon runs (:meth:`finish_soon`)."""
        return await self.finish_soon(task_id, success=success, error=error, attempt=attempt,
                                      reason=reason, result=result, retry=retry)  # fmt: skip

    def finish_soon(
        self, task_id: str, *, success: bool, error: str | None = None,
        attempt: int | None = None, reason: str = ev.REASON_MAX_RETRIES, result: Any = None,
        retry: bool = True,
        then: Callable[[asyncio.Future[cmds.Refusal | None]], None] | None = None,
    ) -> asyncio.Future[cmds.Refusal | None]:  # fmt: skip
        """Submit the outcome of an attempt this daemon runs; the future resolves with
        None once written, or with the refusal. If the storage refuses the write, the
        outcome is kept and written later (the future still resolves with None). A
        success's ``result`` that cannot be one
        (:func:`~snerd.projections.commands.check_result`) fails the attempt with the
        reason as its error. ``retry=False``: a failure that dead-letters at once.
        ``then`` hears the future once it is done, from the log's writer where it can
        (the log's ``then``: no loop turn), else as its done-callback."""
        loop = asyncio.get_running_loop()
        if success and result is not None:
            try:
                result = check_result(result)
            except ValueError as exc:
                success, error, result = False, str(exc), None
        run = self.runs.get(task_id)
        if run is None or (attempt is not None and attempt != run.attempt):
            refused: asyncio.Future[cmds.Refusal | None] = loop.create_future()
            if task_id not in self.state.tasks and task_id not in self.state.dlq:
                refused.set_result(cmds.Refusal("unknown_task", f"no live task {task_id!r}"))
            else:
                message = f"task {task_id!r} has no attempt running here"
                refused.set_result(cmds.Refusal("not_active", message))
            if then is not None:
                refused.add_done_callback(then)
            return refused
        self._forget(run, nudge=False)  # the slot's next claim is decided below
        command = Finish(task_id, run.attempt, success, error=error, reason=reason, result=result,
                         retry=retry, jitter=0.0 if success else self.jitter())  # fmt: skip
        done: asyncio.Future[cmds.Refusal | None] = asyncio.Future(loop=loop)  # (as above)
        written: list[Record] = []  # a failure's records: a dead letter is announced
        durable = False

        def settle(future: asyncio.Future[Any], i: int | None = None) -> None:
            """The request's outcome (the ``i``th of a run's) to ``done``."""
            exc = None if future.cancelled() else future.exception()
            if _dead_letters(written) and (exc is not None or future.cancelled()):
                self._noticed()  # not written: no notice (a later write counts again)
            if isinstance(exc, LogError):  # storage trouble: the outcome is known; later
                log.warning("outcome of %r kept until the log is writable: %s", task_id, exc)
                self._later.add(later := loop.create_task(self._write_later(command)))
                later.add_done_callback(self._written_later)
                done.set_result(None)
            elif exc is not None or future.cancelled():
                _copy(future, done)
            elif _dead_letters(written):  # rare here: a notice waits until durable
                announcing = loop.create_task(self._announce(written, durable))
                announcing.add_done_callback(lambda t: self._announced(t, future, done))
            else:
                done.set_result(future.result() if i is None else future.result()[i])
            if then is not None:
                if done.done():
                    then(done)
                else:
                    done.add_done_callback(then)

        if success:  # never a dead letter: one request with the successes right before it
            self._joined(command, settle, durable=False)
        else:
            # An outcome is no promise to anyone (a crash re-runs the attempt), except a
            # dead letter: its notice goes out, so it is durable first.
            task = self.state.tasks.get(task_id)
            durable = not retry or task is None or task.retry_count >= task.max_retries

            def under_lock() -> tuple[list[Record], Any]:
                decision = decide(self.state, command, now=self.clock.now(), daemon=self.daemon)
                written.extend(decision.records)
                if _dead_letters(decision.records):
                    self._notices += 1  # (counted from the decision: see :attr:`settling`)
                return decision.records, decision.outcome

            self.log.submit(under_lock, durable=durable, then=settle)
        if self._claims_queued:
            # A claim queued before this outcome and not decided yet takes the slot it
            # frees: it counts the free slots when it is decided. (Outcomes that end in
            # one loop turn queued one claim each, and all but the first planned nothing.)
            return done
        if not self._may_claim():
            self.dispatcher.nudge(self.state)
        elif not self.dispatcher.may_find(self.state):
            self.dispatcher.arm_later(self.state)  # nothing to claim now: a task due later?
        else:
            # the freed slot's next attempt, claimed in the outcome's batch

            def begin(claiming: asyncio.Future[Claimed]) -> None:
                if _written(claiming):
                    self.dispatcher.begin_claimed(reserved)
                else:
                    self._unclaim(reserved)

            _, reserved = self._claim_behind(begin)
            joined = self._run
            if success and joined is not None and joined.submitted == self.log.submitted - 1:
                # what follows (successes, the next enqueue) still joins the run, ahead of
                # this claim, which counts their slots as well (free when it is decided)
                joined.submitted = self.log.submitted
        return done

    def _written_later(self, later: asyncio.Task[None]) -> None:
        self._later.discard(later)
        self.changed.set()  # a waiter for :attr:`settling` looks again

    def _announced(self, announcing: asyncio.Task[None], finished: asyncio.Future[T],
                   done: asyncio.Future[T]) -> None:  # fmt: skip
        self._noticed()
        _announced(announcing, finished, done)

    async def _write_later(self, command: Command) -> None:
        """Retry an outcome with backoff until written (``decide`` refuses it once the
        claim is gone). If the process ends first, the attempt runs again elsewhere
        (at-least-once)."""
        delay = 0.05
        while True:
            await sleep(self.clock, delay)
            try:
                await self.run_command(command)
                return
            except LogClosedError:
                return
            except LogError:
                delay = min(delay * 2, 5.0)

    async def release(self, run: Run, reason: str) -> None:
        """Give an attempt back to the queue without an outcome (no retry counted)."""
        self._forget(run)
        if run.executor is not None:
            run.executor.stop(run)
        await self._release([(run.task.id, run.attempt)], reason)

    def _forget(self, run: Run, *, nudge: bool = True) -> None:
        self.runs.pop(run.task.id, None)
        if run.timer is not None:
            run.timer.cancel()
        if not self.runs and self._idle is not None:  # (no call a task: nobody waits)
            if not self._idle.done():
                self._idle.set_result(None)
            self._idle = None
        if nudge:
            self.dispatcher.nudge(self.state)  # a slot freed: useful if something waits
        self.changed.set()

    def adopt(self, run: Run) -> None:
        """A claimed attempt starts running here."""
        self.runs[run.task.id] = run

    def wake(self) -> None:
        """Something outside the log changed (a handler was registered): look again."""
        self.dispatcher.forget_executors()
        self.dispatcher.wake()

    @property
    def housekeeping_rounds(self) -> int:
        """Housekeeping rounds completed (tests wait on it)."""
        return self.housekeeper.rounds

    @property
    def appended_since_snapshot(self) -> bool:
        """Whether the live log holds records after its compaction snapshot (or has none):
        compacting a log nothing was appended to would only add another archive."""
        return self._snapshot_seq is None or self.state.last_seq > self._snapshot_seq

    async def compact(self) -> bool:
        """Rewrite the log as a snapshot of the current state (others may keep going).
        False when there was nothing to compact (or a compaction is under way)."""
        if self._compacting or not self.appended_since_snapshot:
            return False
        from snerd.projections.snapshot import snapshot_records

        self._compacting = True
        try:
            # a function: the log calls it when it takes its point (the state then)
            await self.log.compact(lambda: snapshot_records(self.state, self.clock.now()))
            await self.prune_archives()
        finally:
            self._compacting = False
        return True

    async def prune_archives(self) -> int:
        """Apply the archive retention, if one is configured; return archives deleted."""
        age, size = self.config.archive_max_age_seconds, self.config.archive_max_bytes
        if age is None and size is None:
            return 0
        return await asyncio.to_thread(
            self.log.prune_archives, max_age_ms=None if age is None else int(age * 1000),
            max_bytes=size, now_ms=int(self.clock.now() * 1000),
        )  # fmt: skip



@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic collector off for the block (a start-up replay), then as it was.

    A replay builds the state a record at a time: every few hundred objects it keeps,
    the collector runs, and now and then walks everything kept so far, none of it
    garbage (the fold leaves no cycles). Paused, a daemon's start on a log of 50,000
    live tasks took 0.84 s against 1.16 s (``benchmarks/README.md``). What the block
    leaves in cycles is collected after it as usual."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class _Run:
    """Enqueues and successes submitted one after another with nothing in between (but
    a claim behind the first): one request, decided as a whole; each member hears its
    own outcome (its index in the request's list) from ``replies``."""

    __slots__ = ("claimed", "claiming", "commands", "durable", "early", "enqueue_at", "replies",
                 "request", "started", "submitted")  # fmt: skip

    def __init__(self) -> None:
        self.commands: list[Member] = []
        self.replies: list[Callable[[asyncio.Future[list[Any]], int], None]] = []
        self.early: list[tuple[int, Callable[[Any], None]]] = []  # (member, on_durable)
        self.request: asyncio.Future[list[Any]] | None = None
        self.durable = False  # an enqueue is in it: its batch is made durable
        self.started = False  # decided (under the lock): it takes no more members
        self.submitted = -1  # the log's request count when it last could take members
        self.claiming = False  # its enqueue's claim is decided with it (not yet)
        self.enqueue_at = -1  # that enqueue's member index
        self.claimed: Claimed = []  # what that claim reserved, begun once written

    @property
    def open(self) -> bool:
        """Whether it may take more members: not decided yet, and not ended either (a
        batch refused before its commands ran, after a storage fault, ends it too)."""
        return not self.started and self.request is not None and not self.request.done()

    def settle(self, written: asyncio.Future[list[Any]]) -> None:
        """Each member hears the request's outcome, in order. The run lets go of the
        replies first: a reply may hold the run (the claiming enqueue's does), and a
        cycle left behind would be garbage for the collector, not freed at once."""
        replies, self.replies = self.replies, []
        for i, reply in enumerate(replies):
            reply(written, i)

    def answer_durable(self, outcomes: list[Any]) -> None:
        """The run is durable (the log's ``on_durable``): the members that answer early
        hear their own outcomes, in order (let go of, as in :meth:`settle`)."""
        early, self.early = self.early, []
        for i, on_durable in early:
            on_durable(outcomes[i])


class _ClaimBehind:
    """The claim :meth:`Engine._claim_behind` submits: decided under the lock
    (:meth:`claim`), counted in the engine's queued claims until then, or until its
    future resolves undecided (:meth:`resolved`). (An object, not closures that call each
    other: compiled, those hold each other in a cycle, left to the collector.)"""

    __slots__ = ("engine", "queued", "reserved", "then")

    def __init__(
        self, engine: Engine, then: Callable[[asyncio.Future[Claimed]], None]
    ) -> None:  # fmt: skip
        self.engine = engine
        self.then = then
        self.reserved: Claimed = []  # what the claim reserves, filled under the lock
        self.queued = True  # counted in the engine's _claims_queued until decided

    def decided(self) -> None:
        if self.queued:
            self.queued = False
            self.engine._claims_queued -= 1

    def claim(self) -> tuple[list[Record], Claimed]:
        self.decided()
        engine = self.engine
        records, claimed = engine.dispatcher.claim_under_lock(engine.state, engine.clock.now())
        self.reserved.extend(claimed)
        return records, claimed

    def resolved(self, future: asyncio.Future[Claimed]) -> None:
        self.decided()  # (never decided: the batch failed, or was never run)
        self.then(future)


class _Early:
    """An enqueue answered the moment it is durable (:meth:`Engine.enqueue_soon`'s
    ``acked``), and then not again by its future's ``reply``."""

    __slots__ = ("acked", "answered")

    def __init__(self, acked: Callable[[EnqueueOutcome], None]) -> None:
        self.acked = acked
        self.answered = False

    def __call__(self, outcome: EnqueueOutcome) -> None:
        self.acked(outcome)
        self.answered = True  # (if it raised, ``reply`` answers: the log logged it)

    def unless_answered(
        self, reply: Callable[[asyncio.Future[EnqueueOutcome]], None]
    ) -> Callable[[asyncio.Future[EnqueueOutcome]], None]:
        """``reply``, skipped once :meth:`__call__` answered."""

        def late(future: asyncio.Future[EnqueueOutcome]) -> None:
            if not self.answered:
                reply(future)

        return late


def _member(future: asyncio.Future[Any], written: asyncio.Future[list[Any]], i: int) -> None:
    """Resolve a run member's ``future`` with its outcome (or the batch's error)."""
    if future.done():
        return
    if written.cancelled():
        future.cancel()
    elif (failed := written.exception()) is not None:
        future.set_exception(failed)
    else:
        future.set_result(written.result()[i])


def _copy(source: asyncio.Future[T], target: asyncio.Future[T]) -> None:
    """Resolve ``target`` as ``source`` was."""
    if source.cancelled():
        target.cancel()
    elif (exc := source.exception()) is not None:
        target.set_exception(exc)
    else:
        target.set_result(source.result())


def _alone(cmd: Enqueue) -> bool:
    """Whether ``cmd``'s task may be claimed as soon as it is in without a plan: no
    parents, no rate group, no delay, no schedule (``decide.claim_enqueued``'s task)."""
    return (not cmd.trigger_after_ids and cmd.rate_limit_group is None
            and cmd.execute_at is None and not cmd.cron)  # fmt: skip


def _nothing() -> tuple[list[Record], None]:
    """A request that writes nothing: it is answered once those before it are."""
    return [], None


def _written(future: asyncio.Future[Any]) -> bool:
    return not future.cancelled() and future.exception() is None


def _dead_letters(records: Sequence[Record]) -> list[Record]:
    return [r for r in records if r.get(ev.F_EVENT) == ev.DEAD_LETTERED]


def _announced(announcing: asyncio.Task[None], finished: asyncio.Future[T],
               done: asyncio.Future[T]) -> None:  # fmt: skip
    """A finish whose dead letters were announced resolves as its write did (if the
    sync before the notice failed, the write stands: the notice waits for a restart)."""
    if not announcing.cancelled() and (exc := announcing.exception()) is not None:
        log.warning("dead-letter notice not sent: %s", exc)
    _copy(finished, done)
