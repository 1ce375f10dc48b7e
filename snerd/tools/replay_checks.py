"""What ``snerdmq replay --verify`` calls a problem in a record (pure policy).

Three kinds, matching ``specs/log-format.md``: a field of the wrong type or range
(the fold reads it as absent, so the task silently loses it), a required field
missing, and a transition no correct writer produces (a claim of an unknown task, an
outcome without an active claim, ``seq`` going backwards...). SnerdMQ's own state
lines (no ``event``) get only the field checks: their writer knows no claims.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Final

import msgspec

from snerd.errors import EventError
from snerd.projections import events as ev
from snerd.projections.events import MAX_MS, Record
from snerd.projections.history import Before
from snerd.projections.schedule import parse_instant
from snerd.projections.task import ACTIVE, BLOCKED

Rule = tuple[Callable[[Any], bool], str]


def _int_at_least(low: int) -> Callable[[Any], bool]:
    return lambda v: type(v) is int and v >= low


def _number(v: Any) -> bool:
    return type(v) in (int, float)


def _text(v: Any) -> bool:
    return type(v) is str


def _name(v: Any) -> bool:
    return type(v) is str and v != ""


def _ms(v: Any) -> bool:
    return type(v) is int and 0 <= v <= MAX_MS


def _instant(v: Any) -> bool:
    if type(v) is not str:
        return False
    try:
        parse_instant(v)
    except EventError:
        return False
    return True


def _last_error(v: Any) -> bool:
    return type(v) is str or (type(v) is dict and type(v.get("error")) is str)


_INSTANT: Final[Rule] = (_instant, "an RFC 3339 time")
_TEXT: Final[Rule] = (_text, "a string")
_NAME: Final[Rule] = (_name, "a non-empty string")

FIELD_RULES: Final[dict[str, Rule]] = {
    ev.F_TASK_ID: _NAME,
    ev.F_TASK: _NAME,
    ev.F_TASK_TYPE: _TEXT,
    ev.F_TASK_DATA: (_text, "a string (JSON text)"),
    ev.F_RETRY_COUNT: (_int_at_least(0), "an integer >= 0"),
    ev.F_MAX_RETRIES: (_int_at_least(0), "an integer >= 0"),
    ev.F_RETRY_AFTER_HOURS: (lambda v: _number(v) and v >= 0, "a number >= 0"),
    ev.F_URGENCY: (_number, "a number"),
    ev.F_EXECUTE_AT: _INSTANT,
    ev.F_RETRY_AFTER_TIME: _INSTANT,
    ev.F_CREATED_AT: _INSTANT,
    ev.F_DELETED_AT: _INSTANT,
    ev.F_RATE_GROUP: _TEXT,
    ev.F_MAX_PER_MINUTE: (_int_at_least(1), "an integer >= 1"),
    ev.F_AUTO_DEDUPE: (lambda v: type(v) is bool, "true or false"),
    ev.F_FINGERPRINT: _TEXT,
    ev.F_CRON: _TEXT,
    ev.F_WEBHOOK_URL: _TEXT,
    ev.F_MAX_EXECUTION_SECONDS: (lambda v: _number(v) and v > 0, "a number > 0"),
    ev.F_POOL: _TEXT,
    ev.F_TRIGGER_AFTER_IDS: (
        lambda v: type(v) is list and all(_name(p) for p in v),
        "a list of task ids",
    ),
    ev.F_LAST_ERROR: (_last_error, 'a string or {"error": string, ...}'),
    ev.F_LAST_ERROR_TEXT: _TEXT,
    ev.F_EVENT: (lambda v: v in ev.ALL_EVENTS, "a known event type"),
    ev.F_SEQ: (_int_at_least(0), "an integer >= 0"),
    ev.F_TS: (_ms, "integer milliseconds since the epoch"),
    ev.F_LEASE_UNTIL: (_ms, "integer milliseconds since the epoch"),
    ev.F_DAEMON: _NAME,
    ev.F_ATTEMPT: (_int_at_least(0), "an integer >= 0"),
    ev.F_REASON: _TEXT,
    ev.F_DLQ_KEY: _NAME,
    ev.F_COMPACTED: (lambda v: type(v) is bool, "true or false"),
    ev.F_GROUP: _NAME,
    ev.F_TIMES: (lambda v: type(v) is list and all(_ms(t) for t in v), "a list of integer ms"),
}
"""Field -> (test, what it must be). ``null`` passes for every field but ``event``'s
required ones (a SnerdMQ line writes ``null`` for what it does not set)."""

_FULL: Final = (ev.F_TASK_ID, ev.F_TASK_TYPE)
REQUIRED: Final[dict[str | None, tuple[str, ...]]] = {
    None: _FULL,  # a SnerdMQ state line
    ev.ENQUEUED: _FULL,
    ev.RETRY_SCHEDULED: _FULL,
    ev.RESCHEDULED: _FULL,
    ev.REQUEUED: _FULL,
    ev.DEAD_LETTERED: _FULL,
    ev.SUCCEEDED: (ev.F_TASK_ID,),
    ev.CANCELLED: (ev.F_TASK_ID,),
    ev.CLAIMED: (ev.F_TASK, ev.F_DAEMON),
    ev.PROGRESSED: (ev.F_TASK,),
    ev.CLAIM_RELEASED: (ev.F_TASK,),
    ev.RATE_WINDOW: (ev.F_GROUP, ev.F_TIMES),
    ev.SNAPSHOT: (ev.F_SEQ,),
}


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def field_problems(record: Record) -> list[str]:
    """Missing required fields and fields of the wrong type or range."""
    out: list[str] = []
    event = record.get(ev.F_EVENT)
    known = event is None or (isinstance(event, str) and event in ev.ALL_EVENTS)
    for name in REQUIRED.get(event, ()) if known else ():
        if name == ev.F_TASK and ev.task_id_of(record) is None:  # taskId in older logs
            out.append(f"{ev.F_TASK} is required on a {event} line")
        elif name != ev.F_TASK and record.get(name) is None:
            out.append(f"{name} is required on a {event or 'SnerdMQ state'} line")
    if event == ev.PURGED and record.get(ev.F_DLQ_KEY) is None and ev.task_id_of(record) is None:
        out.append(f"{ev.F_DLQ_KEY} (or {ev.F_TASK}) is required on a purged line")
    for name, value in record.items():
        rule = FIELD_RULES.get(name)
        if rule is not None and value is not None and not rule[0](value):
            out.append(f"{name} must be {rule[1]}, got {_show(value)}")
    return out


def transition_problems(record: Record, before: Before) -> list[str]:
    """Transitions no correct writer of our events produces, given the state before."""
    event = record.get(ev.F_EVENT)
    if before.in_snapshot or not isinstance(event, str):
        return []
    check = _TRANSITIONS.get(event)
    return [] if check is None else check(record, before)


def _gone(record: Record, before: Before, what: str) -> str:
    task_id = ev.task_id_of(record)
    if before.ended is not None:
        return f"{what} of task {task_id!r}, which had already ended ({before.ended})"
    return f"{what} of unknown task {task_id!r}"


def _claimed(record: Record, before: Before) -> list[str]:
    task = before.task
    if task is None:
        return [_gone(record, before, "claim")]
    if task.phase == ACTIVE and task.claim is not None:
        holder = f"{task.claim.daemon} (attempt {task.claim.attempt})"
        return [f"second claim of task {task.id!r}, already claimed by {holder}"]
    if task.phase == BLOCKED:
        return [f"claim of task {task.id!r} while it waits for its parents"]
    return []


def _outcome(record: Record, before: Before) -> list[str]:
    event = record.get(ev.F_EVENT)
    if event == ev.DEAD_LETTERED and record.get(ev.F_REASON) == ev.REASON_FAILED_PARENT:
        return []  # fail-through of a waiting child: never ran
    task = before.task
    if task is None:
        return [_gone(record, before, str(event))]
    claim = task.claim
    if claim is None:
        return [f"{event} of task {task.id!r} without an active claim"]
    daemon = record.get(ev.F_DAEMON)
    if isinstance(daemon, str) and daemon != claim.daemon:
        return [f"{event} of task {task.id!r} by {daemon}, but {claim.daemon} holds the claim"]
    return []


def _running_only(record: Record, before: Before) -> list[str]:
    event = record.get(ev.F_EVENT)
    task = before.task
    if task is None or task.claim is None:
        return [f"{event} for task {ev.task_id_of(record)!r}, which is not running"]
    attempt = record.get(ev.F_ATTEMPT)
    if attempt is not None and attempt != task.claim.attempt:
        return [f"{event} names attempt {attempt} but attempt {task.claim.attempt} runs"]
    return []


def _cancelled(record: Record, before: Before) -> list[str]:
    task = before.task
    if task is None:
        return [_gone(record, before, "cancel")]
    if task.claim is not None:
        return [f"cancel of task {task.id!r} while it runs"]
    return []


def _enqueued(record: Record, before: Before) -> list[str]:
    if before.task is not None and not record.get(ev.F_COMPACTED):
        return [f"enqueued task {before.task.id!r} while it is live"]
    return []


def _dlq_key(record: Record, before: Before) -> list[str]:
    key = record.get(ev.F_DLQ_KEY) or ev.task_id_of(record)
    if isinstance(key, str) and key not in before.dlq:
        return [f"{record.get(ev.F_EVENT)} of {key!r}, which is not dead-lettered"]
    return []


_TRANSITIONS: Final[dict[str, Callable[[Record, Before], list[str]]]] = {
    ev.CLAIMED: _claimed,
    ev.SUCCEEDED: _outcome,
    ev.RETRY_SCHEDULED: _outcome,
    ev.DEAD_LETTERED: _outcome,
    ev.PROGRESSED: _running_only,
    ev.CLAIM_RELEASED: _running_only,
    ev.CANCELLED: _cancelled,
    ev.ENQUEUED: _enqueued,
    ev.REQUEUED: _dlq_key,
    ev.PURGED: _dlq_key,
}


class Verifier:
    """The :data:`~snerd.projections.history.Checker` of ``--verify``: field and
    transition problems, plus ``seq`` that does not increase."""

    def __init__(self) -> None:
        self.last_seq: int | None = None

    def __call__(self, record: Record, before: Before) -> list[str]:
        out = field_problems(record)
        out.extend(transition_problems(record, before))
        seq = record.get(ev.F_SEQ)
        if type(seq) is int and not before.in_snapshot:
            if self.last_seq is not None and seq <= self.last_seq:
                out.append(f"seq {seq} after {self.last_seq}: went backwards")
            self.last_seq = seq if self.last_seq is None else max(seq, self.last_seq)
        return out


# --- the fast path: rows whose every checked field already obeys FIELD_RULES -----------------

_Name = Annotated[str, msgspec.Meta(min_length=1)]
_AtLeast0 = Annotated[int, msgspec.Meta(ge=0)]
_Ms = Annotated[int, msgspec.Meta(ge=0, le=MAX_MS)]


class _LastError(msgspec.Struct):
    error: str


EDGE_YEARS: Final = (b'"0001-', b'"9999-')
"""Text that may start an instant in the year 1 or 9999, which msgspec reads but an
offset can push out of the range :func:`parse_instant` accepts: the fast ``--verify``
leaves a chunk holding it to the full check."""


class CheckedRow(msgspec.Struct, gc=False):
    """A record every field of which passes :data:`FIELD_RULES` by its type: a line
    that decodes into it has no field problem (``null`` passes, as there). The fast
    ``--verify`` reads these; a line that does not decode is checked in full."""

    taskId: _Name | None = None
    task: _Name | None = None
    taskType: str | None = None
    taskData: str | None = None
    retryCount: _AtLeast0 | None = None
    maxRetries: _AtLeast0 | None = None
    retryAfterHours: Annotated[float, msgspec.Meta(ge=0)] | None = None
    urgencyScore: float | None = None
    executeAt: datetime | None = None
    retryAfterTime: datetime | None = None
    createdAt: datetime | None = None
    deletedAt: datetime | None = None
    rateLimitGroup: str | None = None
    maxPerMinute: Annotated[int, msgspec.Meta(ge=1)] | None = None
    autoDedupe: bool | None = None
    payloadHash: str | None = None
    cronExpression: str | None = None
    webhookUrl: str | None = None
    maxExecutionSeconds: Annotated[float, msgspec.Meta(gt=0)] | None = None
    pool: str | None = None
    triggerAfterIds: list[_Name] | None = None
    LastJobError: str | _LastError | None = None
    LastErrorObj: str | None = None
    event: str | None = None
    seq: Annotated[int, msgspec.Meta(ge=0, le=2**53 - 1)] | None = None
    ts: _Ms | None = None
    leaseUntil: _Ms | None = None
    daemon: _Name | None = None
    attempt: _AtLeast0 | None = None
    reason: str | None = None
    dlqKey: _Name | None = None
    compacted: bool | None = None
    group: _Name | None = None
    times: list[_Ms] | None = None
    records: Any = msgspec.UNSET  # a snapshot header's record count (UNSET: absent)
    format: Annotated[str, msgspec.Meta(pattern=r"^1(\.|$)")] | None = None
