"""The dispatch loop: claim runnable work, start it, time it out. No polling tick.

The loop sleeps on one event. It wakes when a fold reports a delta that can make
work runnable, when a handler is registered, when capacity frees, and on one clock
timer armed for the earliest instant something becomes due (an ``execute_at``, a
backoff, a rate-limit slot). Each pass claims as many tasks as capacity allows in
one conditional append under the log lock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from snerd.dispatcher import commands as cmds
from snerd.dispatcher.clock import Timer
from snerd.dispatcher.executors import Executor, Run
from snerd.errors import LogError
from snerd.eventlog.base import Record
from snerd.projections import events as ev
from snerd.projections import queries
from snerd.projections.state import advance
from snerd.projections.task import Task

if TYPE_CHECKING:
    from snerd.dispatcher.engine import Engine

log = logging.getLogger("snerd.dispatch")


def owns(task: Task, daemon: str, attempt: int) -> bool:
    """Whether ``daemon`` holds the claim on the task's ``attempt``."""
    claim = task.claim
    return claim is not None and claim.daemon == daemon and claim.attempt == attempt


class Dispatcher:
    """Claims and starts attempts for one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._wake = asyncio.Event()
        self._timer: Timer | None = None
        self._timer_at: float | None = None
        self._task: asyncio.Task[None] | None = None

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

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._pass()
            except LogError as exc:  # storage trouble: the log recovers by itself
                log.warning("dispatch paused: %s", exc)
                await asyncio.sleep(1.0)
                self._wake.set()
            except Exception:  # keep dispatching; the log stays the truth
                log.exception("dispatch pass failed")
                await asyncio.sleep(0.1)
                self._wake.set()

    async def _pass(self) -> None:
        e = self.engine
        if e.draining:
            return
        now = e.clock.now()
        e.state, delta = advance(e.state, now)
        if delta:
            e.changed.set()
        if e.state.doomed:
            await e.commit(self._fail_through_doomed)
        while self._capacity() > 0:
            pick = queries.pick(e.state, now, self.eligible)
            if pick.task is None:
                self._arm(pick.wake_at)
                return
            runs = await e.commit(self._claim_batch, durable=False)
            for run in runs:
                self._begin(run)
            if not runs:
                self._wake.set()
                return
            now = e.clock.now()

    def _fail_through_doomed(self) -> tuple[list[Record], None]:
        """Children blocked by a dead-lettered parent (e.g. enqueued after it died)."""
        state = self.engine.state
        doomed = [t for t in state.doomed if t in state.tasks]
        parents = sorted({p for t in doomed for p in state.tasks[t].parents})
        failed = [p for p in parents if p in state.dlq]
        now = self.engine.clock.now()
        return cmds.fail_through(state, failed, now=now, daemon=self.engine.daemon), None

    def _capacity(self) -> int:
        return self.engine.config.max_workers - len(self.engine.runs)

    def eligible(self, task: Task, planned: Sequence[Task] = ()) -> bool:
        """Some executor here runs the task, and its pool has room."""
        pools = self.engine.config.pools
        if task.pool and task.pool in pools:
            busy = sum(1 for r in self.engine.runs.values() if r.task.pool == task.pool)
            busy += sum(1 for t in planned if t.pool == task.pool)
            if busy >= pools[task.pool]:
                return False
        return self.executor_for(task) is not None

    def executor_for(self, task: Task) -> Executor | None:
        for executor in self.engine.executors:
            if executor.accepts(task):
                return executor
        return None

    def _claim_batch(self) -> tuple[list[Record], list[Run]]:
        """Under the lock: claim as many runnable tasks as capacity allows."""
        e = self.engine
        now = e.clock.now()
        e.state, _ = advance(e.state, now)
        tasks: list[Task] = []
        limit = max(0, self._capacity())
        queries.pick_many(e.state, now, lambda t: self.eligible(t, tasks), limit, tasks)
        records: list[Record] = []
        runs: list[Run] = []
        for task in tasks:
            record = cmds.claim(task, now=now, daemon=e.daemon, lease_seconds=self._lease(task))
            records.append(record)
            runs.append(Run(task=task, attempt=record[ev.F_ATTEMPT], started=now))
        return records, runs

    def _lease(self, task: Task) -> float:
        config = self.engine.config
        if task.max_execution_seconds:
            return task.max_execution_seconds + config.timeout_grace + 5.0
        return config.lease_seconds

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
        asyncio.get_running_loop().create_task(
            e.finish(run.task.id, success=False, attempt=run.attempt, error=error)
        )

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
