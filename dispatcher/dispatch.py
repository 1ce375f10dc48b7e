"""The dispatch loop: carry out plans, start attempts, time them out. No polling tick.

The loop sleeps on one event. It wakes when a fold reports a delta that can make
work runnable, when a handler is registered, when capacity frees, and on one clock
timer armed for the earliest instant something becomes due (an ``execute_at``, a
backoff, a rate-limit slot). Each pass asks the pure ``plan`` what to do and carries
it out: its claims planned again under the log lock, against the caught-up state,
and written as planned (what ``decide`` would grant for them there). The loop never
writes the engine's state.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from snerd.dispatcher.clock import Timer, sleep
from snerd.dispatcher.executors import Executor
from snerd.dispatcher.flags import Flag
from snerd.dispatcher.runs import Run
from snerd.errors import LogError
from snerd.eventlog.base import Record
from snerd.projections import heap
from snerd.projections.commands import Claim, FailThrough
from snerd.projections.decide import (
    Decision,
    claim_enqueued,
    owns,
    planned_claims,
)
from snerd.projections.delta import Delta
from snerd.projections.plan import Plan, idle, plan
from snerd.projections.state import QueueState
from snerd.projections.task import Task

if TYPE_CHECKING:
    from snerd.dispatcher.engine import Engine

log = logging.getLogger("snerd.dispatch")


__all__ = ["Claimed", "Dispatcher", "owns"]

Claimed = list[tuple[Task, int]]
"""Tasks claimed by one decision, with the attempt number each claim took."""


class Dispatcher:
    """Claims and starts attempts for one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._wake = Flag()
        self._timer: Timer | None = None
        self._timer_at: float | None = None
        self._task: asyncio.Task[None] | None = None
        self.reserved = 0  # attempts claimed but not begun yet
        self._reserved_pools: dict[str, int] = {}  # of those, the ones in each pool
        self._executors: dict[tuple[str, str | None], Executor | None] = {}  # by (type, url)
        # the executors whose threads can outlive an attempt (``lingering``: capacity)
        self._threaded: list[Any] = [ex for ex in engine.executors if hasattr(ex, "lingering")]
        self._bare: tuple[object, Claim] | None = None  # (the config, its claim of no ids)

    @property
    def started(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())
        self._wake.set()  # work may already be due in the log just replayed

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def wake(self) -> None:
        """Look again: something may have become runnable."""
        self._wake.set()

    def nudge(self, state: QueueState, delta: Delta | None = None) -> None:
        """:meth:`wake`, unless a pass would find nothing in ``state`` now (the pure
        :func:`~snerd.projections.plan.idle`) and there is no new timer to arm
        (``delta.delayed``): an idle queue finishing a task costs no pass. Then the
        clock timer is armed for the first task due later, if any: a pass made while
        every slot was taken armed none (so a task delayed then would wait for the
        next event, not its time)."""
        if self._wake.is_set():
            return
        if (delta is not None and delta.delayed) or self.may_find(state):
            self._wake.set()
        else:
            self.arm_later(state)

    def arm_later(self, state: QueueState) -> None:
        """Arm the clock timer for the first task due after now in ``state``, if any."""
        if state.timers is not None:
            self._arm(heap.top(state.timers)[0])

    def none_ready(self) -> bool:
        """Whether nothing ready waits for this engine's workers (as a rule, no lane at
        all; else :func:`~snerd.projections.plan.idle`, lanes whose first task is
        refused here passed over): then a task just enqueued may be the one thing a plan
        could pick."""
        e = self.engine
        return not e.state.lanes or idle(e.state, e.clock.now(), self._eligible)

    def may_find(self, state: QueueState) -> bool:
        """Whether a plan could claim something in ``state`` now (not :func:`idle`)."""
        return not idle(state, self.engine.clock.now(), self._accepts)

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            if not self._wake.is_set():  # settled since: a plan under the lock took it all
                continue
            self._wake.clear()
            try:
                await self._pass()
            except LogError as exc:  # storage trouble: the log recovers by itself
                log.warning("dispatch paused: %s", exc)
                await sleep(self.engine.clock, 1.0)
                self._wake.set()
            except Exception:  # keep dispatching; the log stays the truth
                log.exception("dispatch pass failed")
                await sleep(self.engine.clock, 0.1)
                self._wake.set()

    async def _pass(self) -> None:
        e = self.engine
        while not e.draining:
            if self.capacity() <= 0 and not e.state.doomed:
                return  # no slot, no fail-through: nothing to do until a slot frees (it wakes us)
            step = self.plan()
            if step.fail_through:
                await e.run_command(FailThrough(step.fail_through))
            if not step.claims:
                self._arm(step.wake_at)
                return
            reserved: Claimed = []

            def under_lock(reserved: Claimed = reserved) -> tuple[list[Record], Claimed]:
                records, claimed = self.claim_under_lock(e.state, e.clock.now())
                reserved.extend(claimed)
                return records, claimed

            try:
                claimed = await e.commit(under_lock, durable=False)
            except BaseException:
                self.unreserve(reserved)
                raise
            self.begin_claimed(claimed)
            if not claimed:
                self._wake.set()
                return

    def claim_under_lock(self, state: QueueState, now: float) -> tuple[list[Record], Claimed]:
        """Under the log lock, against the caught-up ``state``: plan, and decide the
        plan's claims. The attempts stay reserved until :meth:`begin_claimed`."""
        e = self.engine
        capacity = self.capacity()
        if capacity <= 0:  # taken by claims decided earlier in this batch: nothing to plan
            return [], []
        step = self.plan(now, state)
        if not step.fail_through and len(step.claims) < capacity:
            # This plan, made against the caught-up state, took everything that can run
            # now: a wake-up asked for before it has nothing left to find.
            self._wake.clear()
            self._arm(step.wake_at)
        if not step.claims:
            return [], []
        claim = self._claim(tuple(t.id for t in step.claims))
        # planned against this very state at this instant: nothing to check again
        return self._taken(planned_claims(list(step.claims), claim, now=now, daemon=e.daemon))

    def _claim(self, task_ids: tuple[str, ...] = ()) -> Claim:
        """The claim command, with this engine's lease and grace. Without ids (every
        enqueue claimed as it is decided: :meth:`claim_enqueued`), one command for as
        long as the engine keeps its config (a command is immutable; building one is a
        dataclass's interpreted ``__init__``)."""
        config = self.engine.config
        bare = self._bare
        if not task_ids and bare is not None and bare[0] is config:
            return bare[1]
        claim = Claim(task_ids, config.lease_seconds, config.timeout_grace)
        if not task_ids:
            self._bare = (config, claim)
        return claim

    def _taken(self, decision: Decision) -> tuple[list[Record], Claimed]:
        """A claim decision's records and attempts, reserved until begun or not."""
        claimed: Claimed = decision.outcome
        self._reserve(claimed)
        return decision.records, claimed

    def claim_enqueued(
        self, state: QueueState, enqueued: Record, now: float
    ) -> tuple[list[Record], Claimed] | None:  # fmt: skip
        """:meth:`claim_under_lock` for the task the record ``enqueued`` adds, decided
        against ``state`` (the caught-up state without it: one fold for both, the
        engine's awaited enqueue): the same claim, told without a plan
        (:func:`~snerd.projections.decide.claim_enqueued`). None when only a plan after
        its fold can tell, or the claim takes nothing (then the fold wakes the
        dispatcher, as for any enqueue)."""
        if self.capacity() <= 0:
            return None
        decision = claim_enqueued(state, enqueued, self._claim(), now=now,
                                  daemon=self.engine.daemon, eligible=self._eligible)  # fmt: skip
        if decision is None or not decision.outcome:
            return None
        return self._taken(decision)

    def _eligible(self, task: Task) -> bool:
        """Whether a plan here may claim ``task`` alone: an executor takes it, and its
        pool (if capped) has a free slot (:func:`~snerd.projections.plan.plan`'s rule)."""
        pool = task.pool
        pools = self.engine.config.pools
        if pool and pool in pools and self._busy().get(pool, 0) >= pools[pool]:
            return False
        return self._accepts(task)

    def _busy(self) -> dict[str, int]:
        """Attempts per pool this engine runs or has claimed to run (a claim decided
        earlier in this batch is not running yet, but its pool slot is taken)."""
        busy = dict(self._reserved_pools)
        for run in self.engine.runs.values():
            if run.task.pool:
                busy[run.task.pool] = busy.get(run.task.pool, 0) + 1
        return busy

    def _reserve(self, claimed: Claimed) -> None:
        """Claims decided: their slots (and pool slots) are taken until begun or not."""
        self.reserved += len(claimed)
        for task, _ in claimed:
            if task.pool:
                self._reserved_pools[task.pool] = self._reserved_pools.get(task.pool, 0) + 1

    def unreserve(self, claimed: Claimed) -> None:
        """The claims were not written (the batch failed): nothing to begin."""
        self.reserved -= len(claimed)
        for task, _ in claimed:
            if task.pool:
                left = self._reserved_pools[task.pool] - 1
                if left:
                    self._reserved_pools[task.pool] = left
                else:
                    del self._reserved_pools[task.pool]

    def begin_claimed(self, claimed: Claimed) -> None:
        """Start the attempts a claim decided (they are in the log by now)."""
        self.unreserve(claimed)
        for task, attempt in claimed:
            self._begin(Run(task=task, attempt=attempt, started=self.engine.clock.now()))

    def plan(self, now: float | None = None, state: QueueState | None = None) -> Plan:
        """What the pure planner proposes for this engine at ``now``."""
        e = self.engine
        return plan(
            e.state if state is None else state, e.clock.now() if now is None else now,
            self.capacity(), accepts=self._accepts,
            pools=e.config.pools, busy=self._busy() if e.config.pools else None,
        )  # fmt: skip

    def capacity(self) -> int:
        """Attempts this engine may still start (running and reserved ones count, and so
        does a sync handler's thread that outlived its attempt: a hard timeout cannot
        kill a thread, so it holds its slot until it returns)."""
        e = self.engine
        if e.liveness_in_doubt:
            return 0  # claims made now could be released as a dead daemon's
        free = e.config.max_workers - len(e.runs) - self.reserved
        for executor in self._threaded:  # (this runs several times a task)
            free -= executor.lingering
        return free

    def _accepts(self, task: Task) -> bool:
        return self.executor_for(task) is not None

    def executor_for(self, task: Task) -> Executor | None:
        """The first executor that accepts the task (a plan asks for every lane's top)."""
        return self._executor(task.type, task.webhook_url)

    def runs_here(self, task_type: str, webhook_url: str | None) -> bool:
        """Whether an executor here takes tasks of that type and webhook URL."""
        return self._executor(task_type, webhook_url) is not None

    def _executor(self, task_type: str, webhook_url: str | None) -> Executor | None:
        """Asked of the executors once per type and URL, until :meth:`forget_executors`."""
        kind = (task_type, webhook_url)
        try:
            return self._executors[kind]
        except KeyError:
            found = next((ex for ex in self.engine.executors
                          if ex.accepts(task_type, webhook_url)), None)  # fmt: skip
            self._executors[kind] = found
            return found

    def forget_executors(self) -> None:
        """What the executors accept changed (a handler was registered): ask them again."""
        self._executors.clear()

    def _begin(self, run: Run) -> None:
        e = self.engine
        executor = self.executor_for(run.task)
        task = e.state.tasks.get(run.task.id)
        if executor is None or task is None or not owns(task, e.daemon, run.attempt):
            return  # lost in the meantime (cancelled, released): nothing to run
        run.executor = executor
        e.adopt(run)
        limit = run.task.max_execution_seconds
        if limit:
            deadline = e.clock.now() + limit + e.config.timeout_grace
            run.timer = e.clock.call_at(deadline, lambda: self._timed_out(run))
        executor.start(run, e)

    def _timed_out(self, run: Run) -> None:
        """The hard timeout: the attempt fails; its late result will be refused."""
        e = self.engine
        if e.runs.get(run.task.id) is not run:
            return
        if run.executor is not None:
            run.executor.stop(run)
        limit = run.task.max_execution_seconds or 0.0
        error = f"timed out after {limit:g} seconds"
        e.finish_soon(run.task.id, success=False, attempt=run.attempt, error=error)

    def _arm(self, when: float | None) -> None:
        """One timer, for the earliest instant something becomes due."""
        if when is None or (self._timer_at is not None and self._timer_at <= when):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when

        def fire() -> None:
            self._timer = self._timer_at = None
            self._wake.set()

        self._timer = self.engine.clock.call_at(when, fire)
