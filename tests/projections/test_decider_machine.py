"""The decider as a state machine: generated commands and clock moves, no hand-written records.

Two daemons share one log. Every step is a command that the pure ``decide`` turns into
events against the current state (as the engine does under the log lock), or a pass of
the pure ``plan`` whose proposals (claims, fail-throughs, releases of a dead daemon's
claims) are themselves commands checked by ``decide``. The records land in the log and
are folded one decision at a time, as the engine's log listener folds them.

Invariants: no attempt is claimed twice; claims go out most urgent first and FIFO among
equal urgency; no rate window ever holds more claims than its limit; a DAG child never
starts before every parent it waited on completed, and a dead-lettered parent fails its
waiting descendants through, transitively; a failure said to be final dead-letters at
once, and a retry waits within [base, cap] of its backoff; replaying the written log
(incrementally and in bulk) gives the live state.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from hypothesis_budget import examples
from loggen import T0
from projcheck import Checked, RunningAudit, check_invariants, observable_view, state_view

from snerd.projections import events as ev
from snerd.projections.commands import (
    Cancel,
    Claim,
    Command,
    Enqueue,
    FailThrough,
    Finish,
    Purge,
    Release,
    ReportProgress,
    Requeue,
)
from snerd.projections.decide import Decision, Refusal, decide
from snerd.projections.plan import plan
from snerd.projections.replay import bulk_fold
from snerd.projections.state import advance, empty, fold
from snerd.projections.task import ACTIVE

LIMIT = 2  # max_per_minute of rate group "g"
DAEMONS = ("d1", "d2")


class DeciderMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.log: list[dict[str, Any]] = []
        self.checked = Checked()
        self.audit = RunningAudit()  # the log's audit, carried on as it grows
        self.state = empty()
        self.seq = 0
        self.ids = 0
        self.claimed: set[tuple[str, int]] = set()  # (task, attempt) ever claimed
        self.completed: set[str] = set()
        self.waits_on: dict[str, set[str]] = {}  # child -> parents live at its enqueue
        self.group_claims: list[float] = []  # claim times of rate group "g"
        self.dead_daemons: set[str] = set()
        self.replayed: tuple[Any, int] = (empty(), 0)  # see the replay check

    # --- carrying out -----------------------------------------------------------------

    def run(self, command: Command, daemon: str = "d1") -> Decision:
        decision = decide(self.state, command, now=self.now, daemon=daemon)
        records = decision.records
        for record in records:
            self.seq += 1
            record[ev.F_SEQ] = self.seq
            self.log.append(record)
        self.state, _ = fold(self.state, records)
        for event in decision.events:
            self._observe(event)
        return decision

    def _observe(self, event: ev.Event) -> None:
        if isinstance(event, ev.Claimed):
            assert event.attempt is not None
            key = (event.task_id, event.attempt)
            assert key not in self.claimed, f"attempt claimed twice: {key}"
            self.claimed.add(key)
            for parent in self.waits_on.get(event.task_id, ()):
                assert parent in self.completed, f"{event.task_id} ran before {parent}"
            if event.group == "g":
                self.group_claims.append(self.now)
        elif isinstance(event, ev.Succeeded):
            self.completed.add(event.task_id)

    def running(self, daemon: str | None = None) -> list[str]:
        return sorted(
            t.id for t in self.state.tasks.values()
            if t.phase == ACTIVE and t.claim is not None
            and (daemon is None or t.claim.daemon == daemon)
        )  # fmt: skip

    def waiting(self) -> list[str]:
        return sorted(t.id for t in self.state.tasks.values() if t.phase != ACTIVE)

    # --- commands ---------------------------------------------------------------------

    @rule(
        data=st.data(),
        urgency=st.sampled_from([0, 0, 1, 5]),
        delay=st.sampled_from([None, None, 0.5, 30]),
        retries=st.integers(min_value=0, max_value=2),
        limited=st.booleans(),
        dedupe=st.booleans(),
        backoff=st.sampled_from([0.0, 0.0, 10 / 3600]),
        cap=st.sampled_from([None, None, 15.0, 40.0]),  # a cap: exponential backoff
    )
    def enqueue(self, data: st.DataObject, urgency: int, delay: float | None, retries: int,
                limited: bool, dedupe: bool, backoff: float,
                cap: float | None) -> None:  # fmt: skip
        self.ids += 1
        task_id = f"t{self.ids}"
        known = sorted(self.state.tasks) + sorted(self.state.dlq) + ["ghost"]
        parents = tuple(data.draw(st.lists(st.sampled_from(known), max_size=2, unique=True)))
        command = Enqueue(
            task_id, "job", task_data=f'"{self.ids % 3}"', max_retries=retries,
            retry_after_hours=backoff, urgency_score=urgency, auto_dedupe=dedupe,
            execute_at=None if delay is None else self.now + delay,
            rate_limit_group="g" if limited else None, max_per_minute=LIMIT if limited else None,
            trigger_after_ids=parents,
            retry_backoff=None if cap is None else "exponential", retry_max_delay=cap,
        )  # fmt: skip
        live = {p for p in parents if p in self.state.tasks or p in self.state.dlq}
        decision = self.run(command)
        if decision.events:
            self.waits_on[task_id] = live
        else:
            assert decision.outcome is not None  # refused or deduplicated: says why

    @rule(seconds=st.sampled_from([0.25, 1, 20, 61]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds

    @rule(daemon=st.sampled_from(DAEMONS), capacity=st.integers(min_value=1, max_value=3))
    def dispatch(self, daemon: str, capacity: int) -> None:
        """One dispatcher pass: plan, then carry out the plan's claims."""
        if daemon in self.dead_daemons:
            return
        busy = len(self.running(daemon))
        step = plan(self.state, self.now, capacity - busy, accepts=lambda t: True)
        before = advance(self.state, self.now)[0]
        if not step.claims:
            return
        decision = self.run(Claim(tuple(t.id for t in step.claims)), daemon)
        claimed = [task for task, _ in decision.outcome]
        assert [t.id for t in claimed] == [t.id for t in step.claims]  # nobody raced us
        self._check_dispatch_order(before, claimed)

    def _check_dispatch_order(self, before: Any, claimed: list[Any]) -> None:
        """No unlimited runnable task left behind ranks ahead of one claimed."""
        picked = {t.id for t in claimed}
        worst = max(((-t.urgency, t.order) for t in claimed if not t.rate_group), default=None)
        if worst is None:
            return
        for lane, node in before.lanes.items():
            if lane[2]:  # rate-limited lanes may wait for a slot
                continue
            from snerd.projections import heap

            for key in heap.iter_keys(node):
                task = before.tasks.get(key[2])
                if task is None or task.phase != "ready" or task.order != key[1]:
                    continue
                if task.id not in picked:
                    assert (-task.urgency, task.order) > worst, f"{task.id} skipped"

    @precondition(lambda self: self.running())
    @rule(
        data=st.data(), success=st.booleans(), progress=st.booleans(),
        retry=st.booleans(), jitter=st.floats(0.0, 1.0),
    )  # fmt: skip
    def finish(self, data: st.DataObject, success: bool, progress: bool, retry: bool,
               jitter: float) -> None:  # fmt: skip
        task = self.state.tasks[data.draw(st.sampled_from(self.running()))]
        assert task.claim is not None
        daemon, attempt = task.claim.daemon, task.claim.attempt
        if progress:
            self.run(ReportProgress(task.id, attempt, {"pct": 50}), daemon)
            assert self.state.tasks[task.id].progress == {"pct": 50}
        command = Finish(task.id, attempt, success, error="boom", retry=retry, jitter=jitter)
        decision = self.run(command, daemon)
        assert decision.events
        self.check_backoff(task, decision, success=success, retry=retry)
        late = self.run(Finish(task.id, attempt, True), daemon)  # a duplicate result
        assert isinstance(late.outcome, Refusal) and not late.events

    def check_backoff(self, task: Any, decision: Decision, *, success: bool, retry: bool) -> None:
        """A failure said to be final dead-letters; a retry waits within [base, cap]."""
        first = decision.records[0]
        if success:
            return
        if not retry:
            assert first[ev.F_EVENT] == ev.DEAD_LETTERED
            assert first[ev.F_REASON] == ev.REASON_PERMANENT
        elif first[ev.F_EVENT] == ev.RETRY_SCHEDULED:
            base = task.retry_after_hours * 3600 or (1.0 if task.retry_backoff else 0.0)
            cap = task.retry_max_delay or base
            waits = self.state.tasks[task.id].retry_after_time
            delay = 0.0 if waits is None else waits - self.now
            assert base - 0.001 <= delay <= cap + 0.001, (base, delay, cap)

    @rule()
    def fail_through(self) -> None:
        """The dispatcher's fail-through, until the plan proposes none."""
        for _ in range(50):
            parents = plan(self.state, self.now, 0, accepts=lambda t: True).fail_through
            if not parents:
                return
            assert self.run(FailThrough(parents)).events
        raise AssertionError("fail-through did not converge")

    @precondition(lambda self: self.running("d2") and "d2" not in self.dead_daemons)
    @rule()
    def d2_dies(self) -> None:
        """d2 is killed; d1's housekeeping releases its claims (from the plan)."""
        self.dead_daemons.add("d2")
        releases = plan(self.state, self.now, 0, accepts=lambda t: False, gone={"d2"}).releases
        assert releases
        self.run(Release(releases, ev.REASON_OWNER_DIED))
        assert not self.running("d2")

    @precondition(lambda self: self.waiting())
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        task_id = data.draw(st.sampled_from(self.waiting()))
        assert self.run(Cancel(task_id)).outcome is None
        assert task_id not in self.state.tasks

    @precondition(lambda self: self.state.dlq)
    @rule(data=st.data(), purge=st.booleans())
    def requeue_or_purge(self, data: st.DataObject, purge: bool) -> None:
        key = data.draw(st.sampled_from(sorted(self.state.dlq)))
        parents = self.state.dlq[key].task.parents
        live = {p for p in parents if p in self.state.tasks or p in self.state.dlq}
        decision = self.run(Purge(key) if purge else Requeue(key))
        if not purge and decision.outcome is None:  # the operator's requeue: it waits only
            self.waits_on[key] = live  # on the parents still there, as an enqueue would
        if purge:
            assert key not in self.state.dlq
        elif decision.outcome is None:
            assert key in self.state.tasks and key not in self.state.dlq

    @rule()
    def restart(self) -> None:
        """A daemon starts from the file (the bulk path) and carries on."""
        self.state = bulk_fold(self.log)

    # --- invariants -------------------------------------------------------------------

    @invariant()
    def the_audit_finds_what_decide_wrote_sound(self) -> None:
        """``replay --verify``'s field and transition checks agree with ``decide``:
        whatever it decided, for two daemons, passes them."""
        if self.checked.due("audit", self.log, len(self.log), self.now):
            assert self.audit.problems(self.log, self.now) == []

    @invariant()
    def indexes_are_consistent(self) -> None:
        if self.checked.due("indexes", self.state, self.now):
            check_invariants(advance(self.state, self.now)[0], self.now)

    @invariant()
    def the_log_replays_to_the_live_state(self) -> None:
        if not self.checked.due("replay", self.log, len(self.log), self.now, self.state):
            return
        # the log's fold from empty, carried on as the log grows (a left fold: the state
        # of a prefix, then the rest); the live state is the one a restart replaced
        folded, upto = self.replayed
        replayed, _ = fold(folded, self.log[upto:])
        self.replayed = (replayed, len(self.log))
        assert observable_view(replayed, self.now) == observable_view(self.state, self.now)
        assert state_view(bulk_fold(self.log)) == state_view(replayed)

    @invariant()
    def rate_windows_are_never_exceeded(self) -> None:
        times = sorted(self.group_claims)
        for i, start in enumerate(times):
            assert len([t for t in times[i:] if t < start + 60]) <= LIMIT

    @invariant()
    def no_child_waits_on_a_dead_lettered_parent_after_fail_through(self) -> None:
        if plan(self.state, self.now, 0, accepts=lambda t: True).fail_through:
            return  # the dispatcher has not run its fail-through yet
        for task in self.state.tasks.values():
            if task.claim is None:
                assert not any(p in self.state.dlq for p in task.parents), task.id


DeciderMachine.TestCase.settings = settings(
    max_examples=examples(150),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_decider_machine = DeciderMachine.TestCase
