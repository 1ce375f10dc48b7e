"""A stateful property test: a queue driven like a dispatcher drives it.

Rules append the records a correct writer appends (enqueue with parents, claim what
``pick`` offers, succeed, fail into a retry or the DLQ with fail-through, release,
cancel, requeue, purge), let time pass, compact the log to a snapshot, and restart a
reader from the file. Invariants: the live state (folded record by record, as the
daemon does) keeps its indexes consistent and equals, on everything observable, the
fold of the log as it is on disk (snapshot + tail), which equals the bulk fold.
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
from snerd.projections import queries
from snerd.projections.replay import bulk_fold
from snerd.projections.snapshot import snapshot_records
from snerd.projections.state import advance, empty, fold
from snerd.projections.task import ACTIVE, task_to_record, with_

Record = dict[str, Any]


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.log: list[Record] = []  # the log file: snapshot + tail since the last compaction
        self.checked = Checked()
        self.audit = RunningAudit()  # the log's audit, carried on as it grows
        self.disk: tuple[list[Record], Any, int] = (self.log, empty(), 0)  # see the replay check
        self.state = empty()  # the daemon's state, folded record by record
        self.ids = 0
        self.seq = 0

    # --- helpers ---------------------------------------------------------------------------

    def append(self, *records: Record) -> None:
        for record in records:
            self.seq += 1  # what the log layer stamps
            record[ev.F_SEQ] = self.seq
            record.setdefault(ev.F_TS, round(self.now * 1000))
            record.setdefault(ev.F_DAEMON, "d1")
            self.log.append(record)
            self.state, _ = fold(self.state, [record])
        self.state, _ = advance(self.state, self.now)

    def full(self, event: str, task: Any, **fields: Any) -> Record:
        return {**task_to_record(task), ev.F_EVENT: event, ev.F_ATTEMPT: task.attempt, **fields}

    def running(self) -> list[str]:
        return sorted(t.id for t in self.state.tasks.values() if t.phase == ACTIVE)

    def waiting(self) -> list[str]:
        return sorted(t.id for t in self.state.tasks.values() if t.phase != ACTIVE)

    # --- rules -----------------------------------------------------------------------------

    @rule(
        data=st.data(),
        urgency=st.sampled_from([0, 0, 1, 5]),
        delay=st.sampled_from([None, None, 0.5, 30]),
        retries=st.integers(min_value=0, max_value=2),
        limited=st.booleans(),
        dedupe=st.booleans(),
    )
    def enqueue(
        self, data: st.DataObject, urgency: int, delay: float | None, retries: int,
        limited: bool, dedupe: bool,
    ) -> None:  # fmt: skip
        self.ids += 1
        known = sorted(self.state.tasks) + sorted(self.state.dlq)
        parents = data.draw(st.lists(st.sampled_from(known), max_size=2)) if known else []
        record: Record = {
            ev.F_EVENT: ev.ENQUEUED, ev.F_TASK_ID: f"t{self.ids}", ev.F_TASK_TYPE: "job",
            ev.F_TASK_DATA: "{}", ev.F_MAX_RETRIES: retries, ev.F_URGENCY: urgency,
            ev.F_TRIGGER_AFTER_IDS: parents,
        }  # fmt: skip
        if delay is not None:
            record[ev.F_EXECUTE_AT] = _instant(self.now + delay)
        if limited:
            record.update({ev.F_RATE_GROUP: "g", ev.F_MAX_PER_MINUTE: 2})
        if dedupe:
            record.update({ev.F_AUTO_DEDUPE: True, ev.F_FINGERPRINT: f"f{self.ids % 3}"})
        self.append(record)

    @rule(seconds=st.sampled_from([0.25, 1, 20, 61]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        self.state, _ = advance(self.state, self.now)

    @rule()
    def claim(self) -> None:
        task = queries.pick(self.state, self.now, lambda t: True).task
        if task is not None:
            record: Record = {
                ev.F_EVENT: ev.CLAIMED, ev.F_TASK_ID: task.id, ev.F_ATTEMPT: task.attempt + 1,
                ev.F_LEASE_UNTIL: round((self.now + 30) * 1000),
            }  # fmt: skip
            if task.rate_group:
                record[ev.F_GROUP] = task.rate_group
            self.append(record)

    @precondition(lambda self: self.running())
    @rule(data=st.data(), progress=st.booleans())
    def succeed(self, data: st.DataObject, progress: bool) -> None:
        task = self.state.tasks[data.draw(st.sampled_from(self.running()))]
        if progress:
            self.append({ev.F_EVENT: ev.PROGRESSED, ev.F_TASK_ID: task.id, ev.F_DATA: 50})
        done = with_(task, last_error=None)
        self.append(self.full(ev.SUCCEEDED, done, **{ev.F_DELETED_AT: _instant(self.now)}))

    @precondition(lambda self: self.running())
    @rule(data=st.data(), backoff=st.sampled_from([0, 0, 1 / 3600, 10 / 3600]))
    def fail(self, data: st.DataObject, backoff: float) -> None:
        task = self.state.tasks[data.draw(st.sampled_from(self.running()))]
        if task.retry_count < task.max_retries:
            retry_at = self.now + backoff * 3600 if backoff else None
            retried = with_(task, retry_count=task.retry_count + 1, last_error="boom",
                              retry_after_hours=backoff, retry_after_time=retry_at)  # fmt: skip
            self.append(self.full(ev.RETRY_SCHEDULED, retried))
            return
        failed = with_(task, last_error="boom")
        self.append(self.full(ev.DEAD_LETTERED, failed, **{ev.F_REASON: ev.REASON_MAX_RETRIES}))
        self.fail_through()

    @rule()
    def fail_through(self) -> None:
        """What the dispatcher does with doomed children: dead-letter them, parents first."""
        for child_id in sorted(self.state.doomed):
            for task_id in [child_id, *queries.descendants(self.state, child_id)]:
                task = self.state.tasks.get(task_id)
                if task is not None and task.claim is None:
                    reason = {ev.F_REASON: ev.REASON_FAILED_PARENT}
                    self.append(self.full(ev.DEAD_LETTERED, task, **reason))

    @precondition(lambda self: self.running())
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        task = self.state.tasks[data.draw(st.sampled_from(self.running()))]
        assert task.claim is not None
        self.append({
            ev.F_EVENT: ev.CLAIM_RELEASED, ev.F_TASK_ID: task.id,
            ev.F_ATTEMPT: task.claim.attempt, ev.F_REASON: ev.REASON_OWNER_DIED,
        })  # fmt: skip

    @precondition(lambda self: self.waiting())
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        task = self.state.tasks[data.draw(st.sampled_from(self.waiting()))]
        for child in queries.descendants(self.state, task.id):
            waiting = self.state.tasks.get(child)
            if waiting is not None and waiting.claim is None:
                reason = {ev.F_REASON: ev.REASON_FAILED_PARENT}
                self.append(self.full(ev.DEAD_LETTERED, waiting, **reason))
        self.append({ev.F_EVENT: ev.CANCELLED, ev.F_TASK_ID: task.id})

    @precondition(lambda self: self.state.dlq)
    @rule(data=st.data(), purge=st.booleans())
    def requeue_or_purge(self, data: st.DataObject, purge: bool) -> None:
        key = data.draw(st.sampled_from(sorted(self.state.dlq)))
        if purge:
            self.append({ev.F_EVENT: ev.PURGED, ev.F_DLQ_KEY: key, ev.F_TASK_ID: key})
        elif key not in self.state.tasks:
            fresh = with_(self.state.dlq[key].task, retry_count=0, last_error=None)
            self.append(self.full(ev.REQUEUED, fresh, **{ev.F_DLQ_KEY: key}))

    @rule()
    def compact(self) -> None:
        """The file becomes the snapshot, after the header the log layer writes (which
        tells readers, the audit among them, how many records restate the state); the
        compacting daemon keeps its state."""
        records = snapshot_records(self.state, self.now)
        header = {ev.F_EVENT: ev.SNAPSHOT, ev.F_SEQ: self.seq, "records": len(records),
                  ev.F_TS: round(self.now * 1000)}  # fmt: skip
        self.log = [header, *records]

    @rule()
    def restart(self) -> None:
        """A daemon starts from the file (the bulk path) and carries on."""
        self.state, _ = advance(bulk_fold(self.log), self.now)

    # --- invariants ---------------------------------------------------------------------------

    @invariant()
    def indexes_are_consistent(self) -> None:
        if self.checked.due("indexes", self.state, self.now):
            check_invariants(self.state, self.now)

    @invariant()
    def the_file_replays_to_the_live_state(self) -> None:
        if not self.checked.due("replay", self.log, len(self.log), self.now, self.state):
            return
        # The file's fold from empty, never advanced, carried on as the file grows (a left
        # fold: the state of a prefix, then the rest; a compaction starts it again).
        log, folded, upto = self.disk
        if log is not self.log:
            log, folded, upto = self.log, empty(), 0
        folded = fold(folded, self.log[upto:])[0]
        self.disk = (log, folded, len(self.log))
        on_disk, _ = advance(folded, self.now)
        assert observable_view(on_disk, self.now) == observable_view(self.state, self.now)
        bulk, _ = advance(bulk_fold(self.log), self.now)
        assert state_view(bulk) == state_view(on_disk)

    @invariant()
    def the_audit_finds_a_correct_writers_log_sound(self) -> None:
        """``replay --verify``'s checks have no false alarm on what a correct writer
        appends (they now end every test of a queue)."""
        if self.checked.due("audit", self.log, len(self.log), self.now):
            assert self.audit.problems(self.log, self.now) == []

    @invariant()
    def claims_never_exceed_the_rate_limit(self) -> None:
        recent = [t for t in self.state.windows.get("g", ()) if t > self.now - 60]
        assert len(recent) <= 2


def _instant(seconds: float) -> str:
    from snerd.projections.schedule import format_instant

    return format_instant(seconds)


QueueMachine.TestCase.settings = settings(
    max_examples=examples(200),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_queue_machine = QueueMachine.TestCase
