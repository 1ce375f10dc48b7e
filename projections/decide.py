"""Decide: ``decide(state, command, now, daemon) -> Decision`` (events, or a refusal).

Pure. The engine runs it under the log lock against the caught-up state (see
``EventLog.transact``), so what it checks (a live id, a free fingerprint, an
unclaimed task) still holds when its events land. Commands are imperative
(``projections/commands.py``); events are past-tense facts (``projections/events.py``,
which also holds the one encoder of each event's record).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import xxhash
from pyrsistent import pmap

from snerd.errors import EventError
from snerd.projections import events as ev
from snerd.projections import queries
from snerd.projections.backoff import retry_delay
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
from snerd.projections.events import Event, decode, ms
from snerd.projections.plan import idle
from snerd.projections.pmaps import has
from snerd.projections.queries import descendants
from snerd.projections.schedule import Cron, format_instant, next_fire, parse_cron, reschedule
from snerd.projections.state import QueueState, advance, fold
from snerd.projections.task import Task, task_from_record, task_to_record, with_

Record = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Refusal:
    """A command that appends nothing: why, as a protocol error code and message,
    and the field at fault when there is one."""

    code: str
    message: str
    field: str | None = None


@dataclass(frozen=True, slots=True)
class Deduplicated:
    """An enqueue dropped because a live task carries the same fingerprint."""

    duplicate_of: str


@dataclass(frozen=True, slots=True)
class UnknownParents:
    """An enqueue accepted although some of its parents are neither live nor
    dead-lettered (completed, cancelled, purged, or never enqueued: a mistyped id?).
    The task does not wait for them (an absent parent counts as completed)."""

    ids: tuple[str, ...]


def _event(event: str, now: float, daemon: str, fields: Record | None = None) -> Record:
    return _with_event({}, event, now, daemon, fields)


def _with_event(record: Record, event: str, now: float, daemon: str,
                fields: Record | None) -> Record:  # fmt: skip
    """``record`` with our event fields after its own (in place; ``fields`` a dict, not
    ``**fields``: compiled, a call with ``**`` goes through the interpreter's generic
    call and argument parsing, a few thousand instructions)."""
    record[ev.F_EVENT] = event
    record[ev.F_TS] = ms(now)
    record[ev.F_DAEMON] = daemon
    if fields:
        record.update(fields)
    return record


def full_state(event: str, task: Task, now: float, daemon: str,
               fields: Record | None = None) -> Record:  # fmt: skip
    """A full-state line: the task's latest state plus our event fields."""
    deleted = now if event in (ev.SUCCEEDED, ev.CANCELLED, ev.DEAD_LETTERED) else None
    record = _with_event(task_to_record(task, deleted_at=deleted), event, now, daemon, fields)
    if task.attempt:
        record.setdefault(ev.F_ATTEMPT, task.attempt)
    return record


def fingerprint(task_type: str, task_data: str) -> str:
    """xxHash64 of type + data, hex, exactly as SnerdMQ computes ``payloadHash``, so
    dedupe holds across our daemons and SnerdMQ's on one log."""
    return format(xxhash.xxh64_intdigest(f"{task_type}{task_data}".encode()), "x")


# --- enqueue ---------------------------------------------------------------------------


def enqueue(
    state: QueueState, cmd: Enqueue, *, now: float, daemon: str
) -> tuple[list[Record], Refusal | Deduplicated | UnknownParents | None]:
    """The enqueued event, or a refusal (live id) or a dedupe verdict; the parents it
    will not wait for, when some are unknown."""
    if has(state.tasks, cmd.task_id) or has(state.dlq, cmd.task_id):
        where = "in the dead-letter queue" if cmd.task_id in state.dlq else "live"
        message = f"task {cmd.task_id!r} already exists ({where})"
        return [], Refusal("duplicate_task", message, "task_id")
    cycle = _cycle(state, cmd.task_id, cmd.trigger_after_ids)
    if cycle:
        message = f"trigger_after_ids would create a cycle via {cycle!r}"
        return [], Refusal("invalid_field", message, "trigger_after_ids")
    digest = fingerprint(cmd.task_type, cmd.task_data) if cmd.auto_dedupe else None
    holders = state.fingerprints.get(digest) if digest else None
    if holders:
        holder = min(holders)
        dropped = _event(ev.DEDUPLICATED, now, daemon, {
            ev.F_TASK: cmd.task_id, ev.F_TYPE: cmd.task_type, ev.F_DUPLICATE_OF: holder})
        return [dropped], Deduplicated(holder)
    execute_at = cmd.execute_at
    if cmd.cron and execute_at is None:
        execute_at = next_fire(parse_cron(cmd.cron), now)
    task = Task(
        id=cmd.task_id,
        type=cmd.task_type,
        data=cmd.task_data,
        max_retries=cmd.max_retries,
        retry_after_hours=cmd.retry_after_hours,
        urgency=cmd.urgency_score,
        execute_at=execute_at,
        cron=cmd.cron,
        webhook_url=cmd.webhook_url,
        max_execution_seconds=cmd.max_execution_seconds,
        pool=cmd.pool,
        retry_backoff=cmd.retry_backoff,
        retry_max_delay=cmd.retry_max_delay,
        rate_group=cmd.rate_limit_group,
        max_per_minute=cmd.max_per_minute,
        auto_dedupe=cmd.auto_dedupe,
        fingerprint=digest,
        parents=cmd.trigger_after_ids,
        created_at=now,
    )
    unknown = tuple(dict.fromkeys(
        p for p in cmd.trigger_after_ids if not has(state.tasks, p) and not has(state.dlq, p)
    )) if cmd.trigger_after_ids else ()  # fmt: skip
    if not unknown:
        return [full_state(ev.ENQUEUED, task, now, daemon)], None
    task = with_(task, extra=pmap({ev.F_UNKNOWN_PARENTS: list(unknown)}))
    return [full_state(ev.ENQUEUED, task, now, daemon)], UnknownParents(unknown)


def _cycle(state: QueueState, task_id: str, parents: tuple[str, ...]) -> str | None:
    """A live ancestor that already waits on ``task_id`` (the DAG would deadlock)."""
    seen: set[str] = set()
    frontier = list(parents)
    while frontier:
        current = frontier.pop()
        task = state.tasks.get(current)
        if current in seen or task is None:
            continue
        seen.add(current)
        if task_id in task.parents:
            return current
        frontier.extend(task.parents)
    return None


# --- running -----------------------------------------------------------------------------


def claim(task: Task, *, now: float, daemon: str, lease_seconds: float) -> Record:
    """The claim of the task's next attempt by ``daemon``."""
    record = _event(
        ev.CLAIMED, now, daemon,
        {ev.F_TASK: task.id, ev.F_ATTEMPT: task.attempt + 1,
         ev.F_LEASE_UNTIL: ms(now + lease_seconds)},
    )  # fmt: skip
    if task.rate_group:
        record[ev.F_GROUP] = task.rate_group
    due, not_before = task.created_at, task.not_before  # waited since the later of the two
    if not_before is not None and (due is None or not_before > due):
        due = not_before
    if due is not None:
        record[ev.F_WAITED] = ms(now - due) if now > due else 0
    return record


def _schedule(task: Task) -> Cron | None:
    """The task's cron schedule; None for one-off tasks (and for a cron text a log
    line carried that no longer parses: the task then ends like a one-off)."""
    if not task.cron:
        return None
    try:
        return parse_cron(task.cron)
    except EventError:
        return None


def _upcoming(task: Task, now: float) -> Cron | None:
    """:func:`_schedule` if the schedule has an occurrence after this one; a schedule
    that has none left (a 7-field cron whose year has passed) ends like a one-off."""
    cron = _schedule(task)
    if cron is not None:
        try:
            format_instant(reschedule(cron, scheduled_at=task.execute_at or now, now=now))
        except EventError:
            return None
    return cron


def succeed(task: Task, *, now: float, daemon: str, result: Any = None) -> list[Record]:
    """Completion: a tombstone, or for a cron task its next occurrence; either carries
    the attempt's ``result`` when there is one."""
    extra = None if result is None else {ev.F_RESULT: result}
    cron = _upcoming(task, now)
    if cron is not None:
        return [_next_occurrence(task, cron, now, daemon, extra)]
    # SnerdMQ's readers count a tombstone that still carries an error as a failure.
    ended = task if task.last_error is None else with_(task, last_error=None)
    return [full_state(ev.SUCCEEDED, ended, now, daemon, extra)]


def _next_occurrence(task: Task, cron: Cron, now: float, daemon: str,
                     extra: Record | None = None) -> Record:  # fmt: skip
    at = reschedule(cron, scheduled_at=task.execute_at or now, now=now)
    fresh = with_(task, execute_at=at, retry_count=0, retry_after_time=None, last_error=None)
    return full_state(ev.RESCHEDULED, fresh, now, daemon, extra)


def fail(
    state: QueueState, task: Task, error: str, *, now: float, daemon: str,
    reason: str = ev.REASON_MAX_RETRIES, retry: bool = True, jitter: float = 0.0,
) -> tuple[list[Record], bool]:  # fmt: skip
    """A retry after backoff (``projections/backoff.py``, with the shell's ``jitter``)
    while retries remain and ``retry``; else dead letter (and fail-through).

    Returns the records and whether the task was dead-lettered.
    """
    if not retry:
        reason = ev.REASON_PERMANENT
    elif task.retry_count < task.max_retries:
        delay = retry_delay(task, jitter)
        retried = with_(
            task,
            retry_count=task.retry_count + 1,
            retry_after_time=now + delay if delay > 0 else None,
            last_error=error,
        )
        fields = {ev.F_RETRY_DELAY: delay} if task.retry_backoff else None
        return [full_state(ev.RETRY_SCHEDULED, retried, now, daemon, fields)], False
    return dead_letter(state, with_(task, last_error=error), now=now, daemon=daemon,
                       reason=reason), True  # fmt: skip


def dead_letter(
    state: QueueState, task: Task, *, now: float, daemon: str, reason: str
) -> list[Record]:
    """The task into the DLQ, its waiting descendants failed through in the same batch.

    A cron task's occurrence is dead-lettered under ``id@occurrence`` and the
    schedule goes on with the next occurrence.
    """
    records = []
    cron = _upcoming(task, now)
    if cron is not None:
        key = f"{task.id}@{format_instant(task.execute_at or now)}"
        records.append(full_state(ev.DEAD_LETTERED, task, now, daemon,
                                  {ev.F_REASON: reason, ev.F_DLQ_KEY: key}))  # fmt: skip
        records.append(_next_occurrence(task, cron, now, daemon))
        return records
    records.append(full_state(ev.DEAD_LETTERED, task, now, daemon, {ev.F_REASON: reason}))
    records.extend(fail_through(state, [task.id], now=now, daemon=daemon))
    return records


def fail_through(state: QueueState, parents: list[str], *, now: float, daemon: str) -> list[Record]:
    """Dead-letter every live task waiting on ``parents``, transitively, parents first."""
    out: list[Record] = []
    seen: set[str] = set(parents)
    for parent in parents:
        for child_id in descendants(state, parent):
            child = state.tasks.get(child_id)
            if child_id in seen or child is None or child.claim is not None:
                continue
            seen.add(child_id)
            failed = with_(child, last_error=f"parent task failed: {parent}")
            out.append(full_state(ev.DEAD_LETTERED, failed, now, daemon,
                                  {ev.F_REASON: ev.REASON_FAILED_PARENT}))  # fmt: skip
    return out


def release(task: Task, *, reason: str, now: float, daemon: str) -> Record:
    """End a claim without an outcome (owner died, lease expired, drain)."""
    attempt = task.claim.attempt if task.claim else task.attempt
    return _event(
        ev.CLAIM_RELEASED, now, daemon,
        {ev.F_TASK: task.id, ev.F_ATTEMPT: attempt, ev.F_REASON: reason},
    )  # fmt: skip


def progress(task: Task, data: Any, *, now: float, daemon: str) -> Record:
    attempt = task.claim.attempt if task.claim else task.attempt
    return _event(
        ev.PROGRESSED, now, daemon,
        {ev.F_TASK: task.id, ev.F_ATTEMPT: attempt, ev.F_DATA: data},
    )  # fmt: skip


# --- operator actions -------------------------------------------------------------------


def cancel(
    state: QueueState, task_id: str, *, now: float, daemon: str
) -> tuple[list[Record], Refusal | None]:
    """Cancel a task that is not running; its waiting descendants fail through."""
    task = state.tasks.get(task_id)
    if task is None:
        if task_id in state.dlq:
            return [], Refusal("invalid_state", f"task {task_id!r} is dead-lettered; purge it")
        return [], Refusal("unknown_task", f"no live task {task_id!r}")
    if task.claim is not None:
        return [], Refusal("invalid_state", f"task {task_id!r} is running")
    records = fail_through(state, [task_id], now=now, daemon=daemon)
    records.append(full_state(ev.CANCELLED, task, now, daemon))
    return records, None


def requeue(
    state: QueueState, key: str, *, now: float, daemon: str
) -> tuple[list[Record], Refusal | None]:
    """Move a dead-lettered task back to the queue with its retries restored.

    A cron occurrence (key ``id@time``) comes back as a one-off task of that id.
    """
    entry = state.dlq.get(key)
    if entry is None:
        if key in state.tasks:
            return [], Refusal("invalid_state", f"task {key!r} is live, not dead-lettered")
        return [], Refusal("unknown_task", f"no dead-lettered task {key!r}")
    task = entry.task
    if key != task.id:
        task = with_(task, id=key, cron=None)
    if task.id in state.tasks:
        return [], Refusal("invalid_state", f"task {task.id!r} is live")
    fresh = with_(task, retry_count=0, retry_after_time=None, last_error=None)
    return [full_state(ev.REQUEUED, fresh, now, daemon, {ev.F_DLQ_KEY: key})], None


def purge(
    state: QueueState, key: str, *, now: float, daemon: str
) -> tuple[list[Record], Refusal | None]:
    """Delete a dead-letter entry for good. Tasks still waiting on it fail through first:
    a purged parent must not read as an absent (so completed) one to its children."""
    if key not in state.dlq:
        return [], Refusal("unknown_task", f"no dead-lettered task {key!r}")
    records = fail_through(state, [key], now=now, daemon=daemon)
    records.append(_event(ev.PURGED, now, daemon, {ev.F_DLQ_KEY: key, ev.F_TASK: key}))
    return records, None


# --- the decider ---------------------------------------------------------------------


class Decision:
    """What a command decided: the records to append (the dicts the encoders built; the
    log stamps copies) and the outcome for the caller (None, a refusal, a dedupe verdict,
    or for a claim the claimed tasks with their attempt numbers).

    A plain class with its own ``__init__``, not a frozen dataclass: a wheel build
    compiles this module, and mypyc builds a native frozen dataclass through the
    ``dataclasses`` module's generated ``__init__`` (interpreted, each field set with
    ``object.__setattr__``), about 3,500 instructions a decision where this one takes
    about 200; every task is decided about three times (``benchmarks/README.md``,
    nineteenth session). Nothing sets its fields after it is built."""

    __slots__ = ("outcome", "records")

    def __init__(self, records: list[Record] | None = None, outcome: Any = None) -> None:
        self.records: list[Record] = [] if records is None else records
        self.outcome: Any = outcome

    def __eq__(self, other: object) -> bool:
        if type(other) is not Decision:
            return NotImplemented
        return self.records == other.records and self.outcome == other.outcome

    __hash__ = None  # type: ignore[assignment]  # (holds a list, as the dataclass did)

    def __repr__(self) -> str:
        return f"Decision(records={self.records!r}, outcome={self.outcome!r})"

    @property
    def events(self) -> tuple[Event, ...]:
        """The records as typed events (decoded on each call: the engine folds the
        log's stamped copies instead, so the hot path never decodes them twice)."""
        return tuple(decode(r) for r in self.records)


def _decided(records: list[Record], outcome: Any = None) -> Decision:
    return Decision(records, outcome)


def owns(task: Task, daemon: str, attempt: int) -> bool:
    """Whether ``daemon`` holds the claim on the task's ``attempt``."""
    claim = task.claim
    return claim is not None and claim.daemon == daemon and claim.attempt == attempt


def decide(state: QueueState, command: Command, *, now: float, daemon: str) -> Decision:
    """The events ``command`` appends to a log whose state is ``state``, or why none."""
    if isinstance(command, Enqueue):
        try:
            records, outcome = enqueue(state, command, now=now, daemon=daemon)
        except EventError as exc:  # e.g. a cron with no fire time after now
            field = "cron" if command.cron else None
            return Decision([], Refusal("invalid_field", str(exc), field))
        return _decided(records, outcome)
    if isinstance(command, Finish):
        return _finish(state, command, now=now, daemon=daemon)
    if isinstance(command, ReportProgress):
        task = state.tasks.get(command.task_id)
        if task is None or not owns(task, daemon, command.attempt):
            message = f"task {command.task_id!r} is not running here"
            return Decision([], Refusal("not_active", message))
        record = progress(task, command.data, now=now, daemon=daemon)
        return _decided([record])
    if isinstance(command, Claim):
        return _claim(state, command, now=now, daemon=daemon)
    if isinstance(command, Release):
        out = []
        for task_id, attempt in command.attempts:
            task = state.tasks.get(task_id)
            if task is not None and task.claim is not None and task.claim.attempt == attempt:
                out.append(release(task, reason=command.reason, now=now, daemon=daemon))
        return _decided(out)
    if isinstance(command, FailThrough):
        failed = [p for p in command.parents if p in state.dlq]
        return _decided(fail_through(state, failed, now=now, daemon=daemon))
    if isinstance(command, Cancel):
        return _decided(*cancel(state, command.task_id, now=now, daemon=daemon))
    if isinstance(command, Requeue):
        return _decided(*requeue(state, command.key, now=now, daemon=daemon))
    if isinstance(command, Purge):
        return _decided(*purge(state, command.key, now=now, daemon=daemon))
    raise TypeError(f"not a command: {command!r}")


def _finish(state: QueueState, command: Finish, *, now: float, daemon: str) -> Decision:
    task = state.tasks.get(command.task_id)
    if task is None or not owns(task, daemon, command.attempt):
        return Decision([], Refusal("not_active", f"the claim on {command.task_id!r} was lost"))
    if command.success:
        return _decided(succeed(task, now=now, daemon=daemon, result=command.result))
    records, _ = fail(state, task, command.error or "task failed", now=now, daemon=daemon,
                      reason=command.reason, retry=command.retry,
                      jitter=command.jitter)  # fmt: skip
    return _decided(records)


def decide_run(
    state: QueueState, commands: Sequence[Enqueue | Finish], *, now: float, daemon: str
) -> list[Decision]:
    """Each command's :func:`decide`, in order, each against the state after the records
    of the ones before it: what deciding them one at a time and folding each gives, with
    one fold for the whole run where it can (the engine's runs: a burst of enqueues,
    outcomes that end in one turn, an attempt's success and the next enqueue).

    A member that cannot meet the ones before it is decided against the state they were;
    the first that might meet one gets the state with the run's records so far folded
    in. An enqueue reads the task and dead letter of its own id, and with dedupe the
    fingerprints, with parents their tasks; a success reads only its own task, and
    changes only it (a running task waits for no parent). So these meet an earlier
    member: an id the run named already, an enqueue with parents, an enqueue with dedupe
    after a success (whose task's fingerprint goes) or sharing a digest, and a failure
    (a retry, a dead letter and its fail-through read more): it also folds its own
    records at once."""
    if len(commands) == 1:  # (the common run: one command at a time)
        return [decide(state, commands[0], now=now, daemon=daemon)]
    decisions: list[Decision] = []
    base = state
    pending: list[Record] = []  # decided since ``base``
    ids: set[str] = set()
    digests: set[str] = set()
    succeeded = False  # a success is in ``pending``
    for cmd in commands:
        digest = None
        if type(cmd) is Finish:
            meets = not cmd.success or cmd.task_id in ids
        else:
            assert isinstance(cmd, Enqueue)
            digest = fingerprint(cmd.task_type, cmd.task_data) if cmd.auto_dedupe else None
            meets = (cmd.task_id in ids or bool(cmd.trigger_after_ids)
                     or (digest is not None and (succeeded or digest in digests)))  # fmt: skip
        if pending and meets:
            base = fold(base, pending)[0]
            pending, ids, digests, succeeded = [], set(), set(), False
        decision = decide(base, cmd, now=now, daemon=daemon)
        decisions.append(decision)
        if type(cmd) is Finish and not cmd.success:  # what follows sees it folded
            base = fold(base, decision.records)[0] if decision.records else base
            continue
        if decision.records:
            pending.extend(decision.records)
            ids.add(cmd.task_id)
            if digest is not None:
                digests.add(digest)
            succeeded = succeeded or type(cmd) is Finish
    return decisions


def _claim(state: QueueState, command: Claim, *, now: float, daemon: str) -> Decision:
    """Claims of the proposed tasks that are still runnable in the caught-up state, in
    dispatch order, with every rate window still respected (other daemons may have
    claimed since the plan was made)."""
    proposed = set(command.task_ids)
    runnable = queries.pick_many(advance(state, now)[0], now, lambda t: t.id in proposed,
                                 len(proposed))  # fmt: skip
    return planned_claims(runnable, command, now=now, daemon=daemon)


def claim_enqueued(
    state: QueueState, enqueued: Record, command: Claim, *, now: float, daemon: str,
    eligible: Callable[[Task], bool],
) -> Decision | None:  # fmt: skip
    """The claim that a plan with a free slot makes, at ``now``, of the task that
    ``enqueued`` (one enqueue's record, decided against ``state``) adds, told without
    folding it in first: what :func:`~snerd.projections.plan.plan` and
    :func:`planned_claims` make against ``fold(state, [enqueued])``, with
    ``command``'s lease and grace. That holds when the new task is the one thing in
    the folded state a plan could pick: it is ready now (no parents, no delay, no rate
    group), and ``state`` holds no task due by ``now``, no doomed child (a child
    waiting on the new task's id was ready, or stays not ready) and no ready task a
    plan would look at: only lanes whose first task ``eligible`` refuses (a plan passes
    over such a lane whole: work for other workers), none of them the new task's own
    lane. None when only the fold can tell (then plan after it); a decision with no
    claim when ``eligible`` refuses the task. (The engine's enqueue, in-process or the
    daemon's, when a worker is free: one fold for the enqueue and its claim.)"""
    if enqueued.get(ev.F_EVENT) != ev.ENQUEUED or not idle(state, now, eligible):
        return None
    task = task_from_record(enqueued)
    if task.parents or task.rate_group or task.not_before is not None:
        return None
    if state.lanes and task.lane in state.lanes:  # behind a head the plan passes over
        return None
    if not eligible(task):
        return _decided([], [])
    return planned_claims([task], command, now=now, daemon=daemon)


def planned_claims(
    runnable: list[Task], command: Claim, *, now: float, daemon: str
) -> Decision:
    """The claims of ``runnable``: what ``decide`` makes of a :class:`Claim` once it has
    picked them, and what a plan made under the lock against the very state a claim is
    decided against proposes (:func:`~snerd.projections.plan.plan` picks as
    ``decide`` would, by the same :func:`~snerd.projections.queries.pick_many`)."""
    records = []
    claimed: list[tuple[Task, int]] = []
    for task in runnable:
        if task.max_execution_seconds:
            lease = task.max_execution_seconds + command.timeout_grace + 5.0
        else:
            lease = command.lease_seconds
        record = claim(task, now=now, daemon=daemon, lease_seconds=lease)
        records.append(record)
        claimed.append((task, record[ev.F_ATTEMPT]))
    return _decided(records, claimed)
