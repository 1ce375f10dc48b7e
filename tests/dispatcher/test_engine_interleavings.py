"""The engine under arbitrary interleavings of enqueues (awaited or not, in-process or
as the daemon submits them; plain, urgent, delayed, children of earlier tasks, pooled,
rate-limited, with a hard timeout, failing for good, deduplicated, on a cron schedule,
of a type no handler here runs), attempts reporting progress and ending (in success or
a failure), dead letters requeued, cancels, compactions by either engine, a storage
fault on either engine's next batch, the second engine's liveness lock lost, its
process crashed or stopped with a drain (a new one starts), clock ticks and loop
turns, with that second
engine on the same log: every task runs, each attempt once, no more attempts at a
time than the workers or the pool allows, no more claims in a minute than the rate
limit, children after their parents, nothing started once its cancel is acked, and at
rest no slot stays reserved or counted as a claim to come; the log passes ``replay
--verify``. (Claims decided three ways meet here: with the enqueue in its own request,
behind a request with a plan, in a dispatcher pass.)"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pgkit
from auditkit import storage_problems, store_problems
from enginekit import Harness, settle
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis_budget import examples

from snerd.dispatcher.engine import Engine
from snerd.dispatcher.executors import Job
from snerd.errors import LogError
from snerd.eventlog.base import StorageUnavailable
from snerd.eventlog.storage import open_log
from snerd.projections.decide import Deduplicated
from snerd.rpc.protocol import Enqueue

KINDS = ("plain", "plain", "urgent", "delayed", "child", "pool", "group", "timeout", "dead",
         "same", "cron", "other")
steps = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue"), st.sampled_from(KINDS), st.booleans(), st.booleans(),
                  st.booleans()),
        st.tuples(st.just("end"), st.integers(1, 3)),
        st.tuples(st.just("tick"), st.sampled_from((0.5, 5.0, 61.0))),
        st.tuples(st.just("turn"), st.integers(1, 3)),
        st.tuples(st.just("cancel"), st.integers(0, 30)),
        st.tuples(st.just("compact"), st.booleans()),
        st.tuples(st.just("partition")),
        st.tuples(st.just("crash")),
        st.tuples(st.just("stop")),
        st.tuples(st.just("requeue"), st.integers(0, 30)),
        st.tuples(st.just("fault"), st.booleans()),
    ),
    max_size=30,
)


class Scenario:
    """Two engines on one store: ``main`` runs type ``t`` (3 workers, pool ``p`` capped
    at 1), ``peer`` runs ``t`` as well (1 worker) and enqueues some of the tasks. With
    ``storage``, the store is that directory's file log (no fsync), or that PostgreSQL
    queue, not memory."""

    def __init__(self, storage: Path | str | None = None) -> None:
        self.harness = Harness()
        self.storage = storage
        if storage is not None:
            self.harness.new_log = lambda: open_log(storage, fsync=False)
        self.gates: dict[tuple[str, int], asyncio.Event] = {}
        self.waiting: list[tuple[str, int]] = []  # attempts running, oldest first
        self.ran: list[tuple[str, str, int]] = []  # (engine, task, attempt)
        self.cancelled: dict[str, int] = {}  # task id -> attempts begun when its cancel was acked
        self.parents: dict[str, str] = {}
        self.busy: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.pending: list[Awaitable[Any]] = []
        self.crashed = 0
        self.made = 0  # task ids handed out
        self.dead: list[Engine] = []
        self.enqueued: list[str] = []

    def handler(self, name: str) -> Any:
        async def run(job: Job) -> None:
            key = (job.id, job.attempt)
            self.ran.append((name, job.id, job.attempt))
            slots = {name, name + "/p" if job.id.endswith("-pool") else name}
            for held in slots:
                self.busy[held] = self.busy.get(held, 0) + 1
                self.most[held] = max(self.most.get(held, 0), self.busy[held])
            gate = self.gates.setdefault(key, asyncio.Event())
            self.waiting.append(key)
            try:
                if job.id.startswith(("k1-", "k3-", "k5-")):  # some report progress first
                    await job.progress({"attempt": job.attempt})
                await gate.wait()
            finally:
                for held in slots:
                    self.busy[held] -= 1
            if job.id.endswith("-f") and job.attempt == 1:
                raise RuntimeError("fails once, then retries")
            if job.id.endswith("-dead"):
                raise RuntimeError("fails every time: dead-lettered at once")

        return run

    async def start(self) -> tuple[Engine, Engine]:
        h = self.harness
        self.main = await h.engine({"t": self.handler("main")}, max_workers=3, pools={"p": 1})
        self.peer = await h.engine({"t": self.handler("peer")}, max_workers=1)
        for engine in (self.main, self.peer):
            engine.log.monotonic = h.clock.now  # type: ignore[attr-defined]  # backoffs
        return self.main, self.peer

    def command(self, kind: str, fails: bool) -> Enqueue:
        task_id = f"k{self.made}-{kind}" + ("-f" if fails else "")  # (never reused)
        self.made += 1
        self.enqueued.append(task_id)
        fields: dict[str, Any] = {"task_data": "{}", "retry_after_hours": 0.0001}
        task_type = "t"
        if kind == "urgent":
            fields["urgency_score"] = 5.0
        elif kind == "delayed":
            fields["execute_at"] = self.harness.clock.now() + 30.0
        elif kind == "child" and len(self.enqueued) > 1:
            parent = self.enqueued[-2]
            fields["trigger_after_ids"] = (parent,)
            self.parents[task_id] = parent  # (kept if its enqueue found the parent)
        elif kind == "pool":
            fields["pool"] = "p"
        elif kind == "group":
            fields["rate_limit_group"], fields["max_per_minute"] = "g", 2
        elif kind == "timeout":  # fails (and retries) if its gate stays shut 10 s
            fields["max_execution_seconds"] = 10.0
        elif kind == "dead":
            fields["max_retries"] = 0
        elif kind == "cron":  # every minute, until cancelled at the end
            fields["cron"] = "* * * * *"
        elif kind == "same":  # deduplicated against a live one of the same data
            fields["auto_dedupe"], fields["task_data"] = True, '{"same": 1}'
        elif kind == "other":
            task_type = "other"  # no handler here: it waits (not counted as to run)
            self.enqueued.pop()
        return Enqueue(task_id, task_type, **fields)

    def _acked(self, task_id: str, done: asyncio.Future[Any]) -> None:
        """An enqueue's outcome: one that did not find its parent (gone, or not in the
        log yet: a cancel or an enqueue decided first) waits for none; one refused (its
        engine crashed first, the storage failed) or deduplicated enqueued nothing."""
        outcome = done.exception() or done.result()
        if isinstance(outcome, BaseException | Deduplicated) and task_id in self.enqueued:
            self.enqueued.remove(task_id)  # (a task of a type not run here is not in it)
        if outcome is not None:
            self.parents.pop(task_id, None)

    async def step(self, action: tuple[Any, ...]) -> None:
        """One step; a command the storage refuses (a fault, or the backoff after one)
        is refused as a whole: nothing of it was written."""
        with contextlib.suppress(LogError):
            await self._step(action)

    async def _step(self, action: tuple[Any, ...]) -> None:
        if action[0] == "enqueue":
            _, kind, awaited, by_peer, as_daemon = action
            engine = self.peer if by_peer else self.main
            command = self.command(kind, fails=kind == "plain" and awaited)
            if as_daemon:  # as the daemon submits an SDK's enqueue: acked when durable
                pending = engine.enqueue_soon(command, None, lambda _: None)
            else:
                pending = asyncio.ensure_future(engine.enqueue(command))
            pending.add_done_callback(lambda done: self._acked(command.task_id, done))
            if awaited:
                await pending
            else:
                self.pending.append(pending)
        elif action[0] == "end":
            for key in self.waiting[: action[1]]:
                self.gates[key].set()
            del self.waiting[: action[1]]
        elif action[0] == "tick":
            self.harness.clock.advance(action[1])
        elif action[0] == "cancel":
            if self.enqueued:
                task_id = self.enqueued[action[1] % len(self.enqueued)]
                if await self.main.cancel(task_id) is None:
                    self.cancelled[task_id] = len(self.ran)
        elif action[0] == "compact":
            await (self.peer if action[1] else self.main).compact()
        elif action[0] == "partition":  # the peer's liveness lock is lost (a partition)
            assert self.harness.liveness is not None
            self.harness.liveness.release(self.peer.daemon)
        elif action[0] == "stop":
            await self.stop_peer()
        elif action[0] == "crash":
            await self.crash_peer()
        elif action[0] == "fault":  # the storage refuses that engine's next batch
            self.refuse_next(self.peer if action[1] else self.main)
        elif action[0] == "requeue":  # a dead letter back to the queue: it runs again
            keys = sorted(self.main.state.dlq)
            if keys:
                key = keys[action[1] % len(keys)]
                if await self.main.requeue(key) is None:  # its parents are what is live now
                    self.parents.pop(key, None)
        else:
            for _ in range(action[1]):
                await asyncio.sleep(0)

    def refuse_next(self, engine: Engine) -> None:
        """The next batch of ``engine``'s log fails where it takes the lock, as a lost
        disk does; its callers hear it, and the log recovers by itself (replay) once its
        backoff, on the test's clock, has passed."""
        log: Any = engine.log
        real = type(log)._exclusive
        armed = [True]

        @contextlib.asynccontextmanager
        async def exclusive() -> Any:
            if armed[0]:
                armed[0] = False
                raise StorageUnavailable("the disk went away")
            async with real(log):
                yield

        log._exclusive = exclusive

    @staticmethod
    def _stop_runs(peer: Engine) -> None:
        for run in list(peer.runs.values()):
            if run.handle is not None:
                run.handle.cancel()
            if run.timer is not None:
                run.timer.cancel()

    async def stop_peer(self) -> None:
        """The peer stops as a daemon does on SIGTERM with no grace left: a drain that
        releases what runs there; a new peer (a new daemon) starts on the same log."""
        peer = self.peer
        await peer.drain(timeout=0)
        await self._next_peer(peer)

    async def _next_peer(self, gone: Engine) -> None:
        """A new peer (a new daemon, with a new id) on the same log, in ``gone``'s place
        (kept in the harness, not closed again at the end)."""
        h = self.harness
        self.dead.append(gone)
        self.crashed += 1
        self.peer = await h.engine({"t": self.handler(f"peer{self.crashed}")}, max_workers=1)
        self.peer.log.monotonic = h.clock.now  # type: ignore[attr-defined]

    async def crash_peer(self) -> None:
        """The peer's process dies: its lock goes, its attempts stop where they are, it
        writes nothing more; a new peer (a new daemon) starts on the same log."""
        peer, h = self.peer, self.harness
        assert h.liveness is not None
        h.liveness.release(peer.daemon)
        peer.stop_claiming()
        # a dead process starts nothing: not the attempts of claims the log still writes
        # (with no executor left, a claim once written is let go of, its slot freed)
        peer.executors.clear()
        peer.dispatcher.forget_executors()
        await peer.dispatcher.stop()
        self._stop_runs(peer)
        await peer.log.close()
        await self._next_peer(peer)

    async def finish(self) -> None:
        """Let everything run to its end: gates open, time passes for delays and
        retries, until no task is left."""
        await asyncio.gather(*self.pending, return_exceptions=True)
        main = self.main
        for _ in range(200):
            for key in self.waiting:
                self.gates[key].set()
            self.waiting.clear()
            for _ in range(3):  # the attempts let go end before time moves on
                await asyncio.sleep(0)
            for engine in (self.main, self.peer):  # (a file log's follower wakes later)
                with contextlib.suppress(LogError):
                    await engine.log.catch_up()
            ran = {task_id for _, task_id, _ in self.ran}
            live = [t for t in main.state.tasks.values()
                    if t.type == "t" and not (t.cron and t.id in ran)]  # fmt: skip
            if not live:
                break
            self.harness.clock.advance(31.0)
            await settle(main, self._quiet, timeout=2.0)
            await asyncio.sleep(0)
        await self._end_schedules()
        for engine in (self.main, self.peer):
            await settle(engine, lambda e=engine: not e.runs and not e.dispatcher.reserved)

    def _quiet(self) -> bool:
        """Whether the engines wait on nothing but the test: an attempt waits at its gate,
        or none runs, and no log has a write on its way (a PostgreSQL round trip takes
        real time, whatever the test's clock says)."""
        writing = any(e.log._writing for e in (self.main, self.peer))  # type: ignore[attr-defined]
        return not writing and (bool(self.waiting) or not self.main.runs)

    async def _end_schedules(self) -> None:
        """Cancel the cron tasks, in small steps of time (an occurrence that ends is
        rescheduled for the next minute, and is cancelled while it waits; a storage
        fault's backoff passes)."""
        main = self.main
        for _ in range(100):
            for key in self.waiting:
                self.gates[key].set()
            self.waiting.clear()
            scheduled = [t for t in main.state.tasks.values() if t.cron]
            if not scheduled:
                return
            for task in scheduled:
                if task.claim is None:
                    with contextlib.suppress(LogError):
                        await main.cancel(task.id)
            self.harness.clock.advance(0.5)
            await settle(main, self._quiet, timeout=2.0)
            await asyncio.sleep(0)
        raise AssertionError(f"schedules that never ended: {scheduled}")

    def problems(self, scratch: Path) -> list[Any]:
        """What ``replay --verify`` says of the store."""
        if self.storage is None:
            return store_problems(self.harness.store, scratch)
        return storage_problems(self.storage)

    async def close(self) -> None:
        for engine in self.harness.engines:
            if engine not in self.dead:
                await engine.drain(timeout=0)


def _check(s: Scenario) -> None:
    done = [t for t in s.main.state.tasks.values() if t.type == "t"]
    assert done == [], f"left over: {done}"
    ran_ids = {task_id for _, task_id, _ in s.ran}
    failed_through = set(s.main.state.dlq)
    assert set(s.enqueued) - set(s.cancelled) - failed_through <= ran_ids  # the rest ran
    for task_id, begun in s.cancelled.items():  # nothing starts once a cancel is acked
        assert task_id not in {t for _, t, _ in s.ran[begun:]}
    attempts = [(task_id, attempt) for _, task_id, attempt in s.ran]
    assert len(attempts) == len(set(attempts)), "an attempt ran twice"
    moved = {task_id for name, task_id, _ in s.ran if name != "main"} & {
        task_id for name, task_id, attempt in s.ran if name == "main" and attempt > 1}
    event(f"run again elsewhere after a crash or partition: {bool(moved)}")
    event(f"storage faults met and recovered from: {bool(s.main.log.faults)}")  # type: ignore[attr-defined]
    assert s.most.get("main", 0) <= 3
    assert all(most <= 1 for name, most in s.most.items() if name.startswith("peer"))
    assert s.most.get("main/p", 0) <= 1  # pool p is capped at 1 on main
    first_run = {}
    for i, (_, task_id, _) in enumerate(s.ran):
        first_run.setdefault(task_id, i)
    for child, parent in s.parents.items():  # a child runs once its parent has ended
        if child in first_run:  # (else cancelled, or failed through)
            assert parent in first_run and first_run[child] > first_run[parent]
    for engine in (s.main, s.peer):
        assert engine._claims_queued == 0
        assert engine.dispatcher.reserved == 0
    records = list(s.main.log.history())  # archives too: every claim ever written
    grouped = sorted(r["ts"] for r in records if r.get("event") == "claimed" and r.get("group"))
    for first, third in zip(grouped, grouped[2:], strict=False):  # at most 2 in any 60 s
        assert third - first >= 60_000, grouped


def _run(actions: list[tuple[Any, ...]], storage: Path | str | None, scratch: Path) -> None:
    async def scenario() -> Scenario:
        s = Scenario(storage)
        await s.start()
        try:
            for action in actions:
                await s.step(action)
            await s.finish()
            _check(s)
        finally:
            await s.close()
        return s

    s = asyncio.run(scenario())
    assert s.problems(scratch) == []  # the log passes replay --verify


@settings(max_examples=examples(400), deadline=None)
@given(steps)
def test_every_task_runs_each_attempt_once_whatever_the_interleaving(
    actions: list[tuple[Any, ...]],
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        _run(actions, None, Path(scratch))


@settings(max_examples=examples(100), deadline=None)
@given(steps)
def test_the_same_on_a_file_log(actions: list[tuple[Any, ...]]) -> None:
    """The same steps on a storage directory's file log (no fsync): its lock, catch-up
    by stat, compaction's file swap and replay after a fault, under both engines."""
    with tempfile.TemporaryDirectory() as scratch:
        _run(actions, Path(scratch) / "storage", Path(scratch))


@settings(max_examples=examples(60), deadline=None)
@given(steps)
def test_the_same_on_postgresql(actions: list[tuple[Any, ...]]) -> None:
    """The same steps on a PostgreSQL queue (a fresh one each example, dropped after)."""
    pgkit.require_pg()
    queue = pgkit.fresh_queue()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            _run(actions, pgkit.queue_url(queue), Path(scratch))
    finally:
        pgkit.drop_queue(queue)
