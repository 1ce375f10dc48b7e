"""Hypothesis strategies for arbitrary logs.

Logs are drawn over a tiny id alphabet so that events collide on the same tasks:
parents and children, claims of missing tasks, releases with the wrong attempt,
requeues of absent DLQ keys, cron DLQ keys like ``a@t``. Besides valid events of
every type, a log may hold SnerdMQ state lines (no ``event``), records with a field
of the wrong type, unknown events and arbitrary objects. Every record is
JSON-representable (what a decoded log line can be).

Why bytes: each record is decoded from one drawn byte string by :class:`Bytes`.
Drawing field by field costs Hypothesis ~50 µs per choice, about 25x the fold
itself; one ``st.binary`` per record keeps hundreds of examples within seconds.
Hypothesis still shrinks: the decoder maps zero bytes to the simplest choice
(first event kind, first id, no optional field), so shrunk logs stay readable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from hypothesis import strategies as st

from snerd.projections import events as ev
from snerd.projections.schedule import format_instant

Record = dict[str, Any]
T = TypeVar("T")

T0 = 1_700_000_000.0  # epoch seconds; every generated time sits within minutes of it
SPAN = 600  # seconds

IDS = ("a", "b", "c", "d", "e")
DLQ_KEYS = ("a", "b", "c", "a@t", "b@t")
TYPES = ("t1", "t2")
DAEMONS = ("d1", "d2")
GROUPS = ("g1", "g2")
ODD_VALUES: tuple[Any, ...] = (
    None, True, False, 0, -1, 7, 1.5, -0.0, 1e308, 2**63 - 1, -(2**63), "", "x", "a",
    "2023-11-14T22:13:20Z", "not a time", "NaN", [], [1], ["a", 2], {}, {"k": "v"},
)  # fmt: skip
"""Values of the wrong type (or range) for some field, for broken records."""

RECORD_BYTES = 48


class Bytes:
    """A cursor over drawn bytes; every choice reads one or two bytes (0 past the end)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        value = self.data[self.pos] if self.pos < len(self.data) else 0
        self.pos += 1
        return value

    def pick(self, options: Sequence[T]) -> T:
        return options[self.byte() % len(options)]

    def flag(self, one_in: int = 2) -> bool:
        """True with probability ~1/one_in (False on a zero byte)."""
        return self.byte() % one_in == one_in - 1

    def small(self, top: int = 4) -> int:
        return self.byte() % (top + 1)

    def ms(self) -> int:
        """An instant in ms on a 1 s grid, sometimes with a millisecond part."""
        seconds = (self.byte() << 8 | self.byte()) % (SPAN + 1)
        extra = self.byte()
        return int(T0 * 1000) + seconds * 1000 + (extra * 7 % 1000 if extra >= 192 else 0)

    def instant(self) -> str:
        return format_instant(self.ms() / 1000.0)


# --- full-state fields -------------------------------------------------------------------

_OPTIONAL: tuple[tuple[str, Callable[[Bytes], Any]], ...] = (
    (ev.F_TRIGGER_AFTER_IDS, lambda b: [b.pick(IDS) for _ in range(b.small(2) + 1)]),
    (ev.F_EXECUTE_AT, Bytes.instant),
    (ev.F_RETRY_AFTER_TIME, Bytes.instant),
    (ev.F_AUTO_DEDUPE, lambda b: b.pick((True, False))),
    (ev.F_FINGERPRINT, lambda b: b.pick(("f1", "f2"))),
    (ev.F_RATE_GROUP, lambda b: b.pick(GROUPS)),
    (ev.F_MAX_PER_MINUTE, lambda b: b.small(2) + 1),
    (ev.F_LAST_ERROR, lambda b: b.pick(("boom", "timeout"))),
    (ev.F_CREATED_AT, Bytes.instant),
    (ev.F_POOL, lambda b: b.pick(("p1", ""))),
    (ev.F_CRON, lambda b: b.pick(("*/5 * * * *", "30s"))),
    (ev.F_WEBHOOK_URL, lambda b: "http://127.0.0.1:1/hook"),
    (ev.F_MAX_EXECUTION_SECONDS, lambda b: b.pick((1, 2.5))),
    ("customField", lambda b: b.pick((1, "x", None, [1, {"k": "v"}], {"nested": True}))),
)


def task_fields(b: Bytes) -> Record:
    """SnerdMQ's task fields, all valid; each optional one present with p ~ 1/3."""
    record: Record = {
        ev.F_TASK_ID: b.pick(IDS),
        ev.F_TASK_TYPE: b.pick(TYPES),
        ev.F_TASK_DATA: b.pick(('{"x":1}', "null", '"s"')),
        ev.F_RETRY_COUNT: b.small(),
        ev.F_MAX_RETRIES: b.small(3),
        ev.F_RETRY_AFTER_HOURS: b.pick((0, 0.5, 1)),
        ev.F_URGENCY: b.pick((0, 0.0, 1, 2.5, -1)),
    }
    for name, make in _OPTIONAL:
        if b.flag(3):
            record[name] = make(b)
    return record


def ours(b: Bytes, record: Record) -> Record:
    """Our optional bookkeeping fields (seq, ts, daemon, attempt)."""
    if b.flag():
        record[ev.F_SEQ] = b.byte() % 50
    if b.flag():
        record[ev.F_TS] = b.ms()
    if b.flag(3):
        record[ev.F_DAEMON] = b.pick(DAEMONS)
    if b.flag(3):
        record[ev.F_ATTEMPT] = b.small()
    return record


# --- one record per event type ----------------------------------------------------------------


def upsert(b: Bytes) -> Record:
    event = b.pick((ev.ENQUEUED, ev.RETRY_SCHEDULED, ev.RESCHEDULED, ev.REQUEUED))
    record = task_fields(b)
    record[ev.F_EVENT] = event
    if event == ev.REQUEUED and b.flag():
        record[ev.F_DLQ_KEY] = b.pick(DLQ_KEYS)
    if b.flag(4):
        record[ev.F_COMPACTED] = True
    return ours(b, record)


def light_name(b: Bytes) -> str:
    """The task field of a light line: ``task``, or ``taskId`` as older logs wrote it."""
    return ev.F_TASK if b.flag() else ev.F_TASK_ID


def claim(b: Bytes) -> Record:
    record: Record = {
        ev.F_EVENT: ev.CLAIMED,
        light_name(b): b.pick(IDS),
        ev.F_DAEMON: b.pick(DAEMONS),
        ev.F_TS: b.ms(),
    }
    if b.flag():
        record[ev.F_ATTEMPT] = b.small(3) + 1
    if b.flag():
        record[ev.F_LEASE_UNTIL] = b.ms() if b.byte() < 240 else b.pick(ODD_VALUES)
    if b.flag():
        record[ev.F_GROUP] = b.pick(GROUPS)
    if b.flag():
        record[ev.F_SEQ] = b.byte() % 50
    return record


def dead_letter(b: Bytes) -> Record:
    record = task_fields(b)
    record[ev.F_EVENT] = ev.DEAD_LETTERED
    record[ev.F_DELETED_AT] = b.instant()
    if b.flag(3):
        record[ev.F_DLQ_KEY] = b.pick(DLQ_KEYS)
    if b.flag():
        record[ev.F_REASON] = b.pick((ev.REASON_MAX_RETRIES, ev.REASON_FAILED_PARENT))
    return ours(b, record)


def tombstone(b: Bytes) -> Record:
    event = b.pick((ev.SUCCEEDED, ev.CANCELLED))
    if b.flag():
        record = task_fields(b)
        record[ev.F_DELETED_AT] = b.instant()
    else:
        record = {ev.F_TASK_ID: b.pick(IDS)}
    record[ev.F_EVENT] = event
    return ours(b, record)


def light(b: Bytes) -> Record:
    """progress, claim_released, purged or rate_window."""
    kind = b.pick((ev.PROGRESSED, ev.CLAIM_RELEASED, ev.PURGED, ev.RATE_WINDOW))
    record: Record = {ev.F_EVENT: kind}
    if kind == ev.RATE_WINDOW:
        record[ev.F_GROUP] = b.pick(GROUPS)
        record[ev.F_TIMES] = [b.ms() for _ in range(b.small(3))]
        if b.flag(8):
            record[ev.F_TIMES].append(b.pick(ODD_VALUES))
    elif kind == ev.PURGED:
        key = ev.F_DLQ_KEY if b.flag() else light_name(b)
        record[key] = b.pick(DLQ_KEYS)
    else:
        record[light_name(b)] = b.pick(IDS)
        if b.flag():
            record[ev.F_ATTEMPT] = b.small()
        if kind == ev.PROGRESSED:
            record[ev.F_DATA] = b.pick((50, "half", {"pct": 10}, None))
        elif b.flag():
            record[ev.F_REASON] = b.pick((ev.REASON_OWNER_DIED, ev.REASON_DRAIN))
    return ours(b, record)


def snerdmq_line(b: Bytes) -> Record:
    """A SnerdMQ state line: task fields, no ``event``; deletedAt makes it final."""
    record = task_fields(b)
    if b.flag():
        record[ev.F_DELETED_AT] = b.instant()
    return record


VALID_MAKERS = (upsert, claim, upsert, claim, dead_letter, tombstone, light, snerdmq_line)


def valid_record(b: Bytes) -> Record:
    return b.pick(VALID_MAKERS)(b)


def broken_record(b: Bytes) -> Record:
    """A valid record with one field replaced by a value of the wrong type."""
    record = valid_record(b)
    names = [*sorted(record), ev.F_TASK_ID, ev.F_TS, ev.F_ATTEMPT, ev.F_SEQ]
    record[b.pick(names)] = b.pick(ODD_VALUES)
    return record


def odd_record(b: Bytes) -> Record:
    """An unknown event, a snapshot header, or an object with no known shape."""
    choice = b.small(3)
    if choice == 0:
        return {ev.F_EVENT: b.pick(("frobnicated", "", "Enqueued", 5, True)), "taskId": "a"}
    if choice == 1:
        return {ev.F_EVENT: ev.SNAPSHOT, ev.F_SEQ: b.byte() % 50, "records": 0}
    if choice == 2:
        return {b.pick(("taskId", "event", "x")): b.pick(ODD_VALUES)}
    return {}


def any_record(b: Bytes) -> Record:
    """Mostly valid records (7 in 10), else broken or odd ones."""
    roll = b.byte() % 10
    if roll < 7:
        return valid_record(b)
    return broken_record(b) if roll < 9 else odd_record(b)


# --- strategies -------------------------------------------------------------------------------


def records_of(make: Callable[[Bytes], Record]) -> st.SearchStrategy[Record]:
    """Records decoded from one drawn byte string each."""
    return st.binary(min_size=RECORD_BYTES, max_size=RECORD_BYTES).map(lambda d: make(Bytes(d)))


def logs_of(make: Callable[[Bytes], Record], max_size: int = 40) -> st.SearchStrategy[list[Record]]:
    """Logs of up to ``max_size`` records, drawn as runs so long logs are common
    (a flat ``st.lists`` favours short ones) and still shrink record by record."""
    runs = st.lists(st.lists(records_of(make), max_size=10), max_size=max_size // 8)
    return runs.map(lambda parts: [r for part in parts for r in part])


any_records = records_of(any_record)
valid_logs = logs_of(valid_record)
any_logs = logs_of(any_record)
nows = st.integers(min_value=0, max_value=SPAN * 4).map(lambda quarter: T0 + quarter / 4)
"""Instants within the span, on a 250 ms grid so they often meet generated times."""

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
"""Arbitrary JSON values (slower to draw; for the fuzz test only)."""
