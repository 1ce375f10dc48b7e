"""Census: the final state of every task id in a log, in one cheap streaming pass (pure).

What ``snerdmq replay`` prints without ``--json``: records read, unusable ones, and
task ids per final state. :class:`~snerd.projections.history.Summary` gets that from
a typed event and the bulk fold per record; a census reads only an event name and
an id per record (rows decoded with just those fields) and keeps:

- per task id ever seen, one word (its state when it left the live table);
- per live task, the positions of its records since it became live (few);
- the dead-letter keys.

At the end the live tasks' records (re-read by the caller at those positions) go
through the bulk fold, so their states (pending, scheduled, active, ...) are the
fold's own. Only the common events of a plain queue are read this way; a record the
census cannot judge exactly as :func:`~snerd.projections.events.decode` and the
fold would (a SnerdMQ state line, a DAG child, a requeue, a cron task, a purge, a
rate window, anything malformed) raises :class:`NotCensus`, and the caller falls back
to the full summary. Property tests check both agree on every log the census takes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from snerd.projections.events import Record
from snerd.projections.replay import BulkFolder
from snerd.projections.views.status import (
    CANCELLED,
    COMPLETED,
    DEAD_LETTERED,
    STATES,
    status_of,
)

LIVE: Final = "live"  # placeholder of a live task's state until the end


class Row(Protocol):
    """The fields a census reads (``eventlog.scan.Row`` has them, well typed)."""

    @property
    def event(self) -> str | None: ...
    @property
    def taskId(self) -> str | None: ...
    @property
    def task(self) -> str | None: ...
    @property
    def taskType(self) -> str | None: ...
    @property
    def dlqKey(self) -> str | None: ...
    @property
    def attempt(self) -> int | None: ...
    @property
    def daemon(self) -> str | None: ...
    @property
    def triggerAfterIds(self) -> list[Any] | None: ...


class NotCensus(Exception):
    """A record a census cannot judge exactly: use the full summary instead."""


@dataclass(frozen=True, slots=True)
class Tally:
    """What a census found: the figures ``replay`` prints."""

    events: int  # records read
    invalid: int  # records the fold could not use (always 0: the census takes none)
    states: dict[str, int]

    def counts(self) -> dict[str, int]:
        """Task ids per final state, every state present."""
        return dict(self.states)


_FULL_STATE: Final = frozenset({"enqueued", "retry_scheduled"})
_LIGHT: Final = frozenset({"claimed", "progress", "claim_released"})
_TOMBSTONE: Final = {"succeeded": COMPLETED, "cancelled": CANCELLED}


class Census:
    """Feed rows in log order with their places (:meth:`feed`), then :meth:`finish`
    with the records of the live tasks (at :meth:`live_places`)."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}
        self.live: dict[str, list[int]] = {}  # live task -> the places of its records
        self.dlq: set[str] = set()
        self.events = 0

    def feed(self, rows: Sequence[Any], places: Iterable[int]) -> None:
        """Count ``rows``; ``places`` says where each one is (any increasing numbers:
        they only come back from :meth:`live_places`)."""
        seen, live, dlq = self.seen, self.live, self.dlq
        light, full_state, tombstone = _LIGHT, _FULL_STATE, _TOMBSTONE
        for row, place in zip(rows, places, strict=True):
            event = row.event
            if event in light:
                task_id = row.task
                if task_id is None:
                    task_id = row.taskId
                if task_id is None or (event == "claimed" and (
                        row.daemon is None or row.attempt == 0)):  # fmt: skip
                    raise NotCensus(f"{event} without a usable task")
                positions = live.get(task_id)
                if positions is not None:
                    positions.append(place)
            elif event in full_state:
                task_id = row.taskId
                if task_id is None or row.taskType is None or row.triggerAfterIds:
                    raise NotCensus(f"{event} the census cannot judge")
                positions = live.get(task_id)
                if positions is None:
                    live[task_id] = [place]
                else:
                    positions.append(place)
                seen[task_id] = LIVE
            elif event in tombstone:
                task_id = row.taskId
                if task_id is None:
                    raise NotCensus(f"{event} without a taskId")
                live.pop(task_id, None)
                seen[task_id] = tombstone[event]
            elif event == "dead_lettered":
                task_id = row.taskId
                if (task_id is None or row.taskType is None
                        or (row.dlqKey is not None and row.dlqKey != task_id)):  # fmt: skip
                    raise NotCensus("dead_lettered the census cannot judge")
                live.pop(task_id, None)
                dlq.add(task_id)
                seen[task_id] = DEAD_LETTERED
            elif event != "snapshot":
                raise NotCensus(f"{event or 'SnerdMQ state'} line")
        self.events += len(rows)

    def live_places(self) -> list[int]:
        """The places of every record of the tasks live now, in log order."""
        return sorted(k for positions in self.live.values() for k in positions)

    def finish(self, live_records: Iterable[Record], now: float | None) -> Tally:
        """The tally, given the records at :meth:`live_places` (in that order)."""
        folder = BulkFolder()
        folder.feed(live_records)
        state = folder.finish()
        out = dict.fromkeys(STATES, 0)
        tasks, dlq = state.tasks, self.dlq
        for task_id, word in self.seen.items():
            if word == LIVE:
                out[status_of(tasks[task_id], now)] += 1
            elif task_id in dlq:
                out[DEAD_LETTERED] += 1
            else:
                out[word] += 1
        return Tally(self.events, state.invalid, out)


_OUTCOMES: Final = frozenset({"succeeded", "retry_scheduled", "dead_lettered"})


class CheckedCensus(Census):
    """A census that also vouches a log has none of the problems ``--verify`` names:
    it is fed rows whose fields all pass the field rules by their types (``replay
    _checks.CheckedRow``), checks the transitions and ``seq`` order itself, and raises
    :class:`NotCensus` at the first record that might have a problem (or that it
    cannot judge), so the full audit can name it. Compacted logs are left to the audit,
    and so are instants in the years 1 and 9999 (which an offset can push out of
    range): the reader declines the chunks that mention them.
    """

    def __init__(self) -> None:
        super().__init__()
        self.claims: dict[str, tuple[str, int]] = {}  # live task -> (daemon, attempt)
        self.attempts: dict[str, int] = {}  # live task -> its attempt count
        self.last_seq: int | None = None

    def feed(self, rows: Sequence[Any], places: Iterable[int]) -> None:
        claims, attempts, live, seen = self.claims, self.attempts, self.live, self.seen
        last_seq = self.last_seq
        for row, place in zip(rows, places, strict=True):
            event = row.event
            seq = row.seq
            if seq is not None:
                if last_seq is not None and seq <= last_seq:
                    raise NotCensus(f"seq {seq} after {last_seq}")
                last_seq = seq
            if event in _LIGHT:
                task_id = row.task
                if task_id is None:
                    task_id = row.taskId
                positions = live.get(task_id)
                if positions is None:
                    raise NotCensus(f"{event} of a task not live")
                claim = claims.get(task_id)
                if event == "claimed":
                    if claim is not None or row.daemon is None or row.attempt == 0:
                        raise NotCensus("a claim to check in full")
                    attempt = attempts[task_id] + 1 if row.attempt is None else row.attempt
                    claims[task_id] = (row.daemon, attempt)
                    attempts[task_id] = attempt
                elif claim is None or (row.attempt is not None and row.attempt != claim[1]):
                    raise NotCensus(f"{event} of a task not running")
                elif event == "claim_released":
                    del claims[task_id]
                positions.append(place)
                continue
            task_id = row.taskId
            if task_id is None or (event != "succeeded" and event != "cancelled"
                                   and row.taskType is None):  # fmt: skip
                raise NotCensus(f"{event or 'SnerdMQ state'} line the census cannot judge")
            if event == "enqueued" or event == "retry_scheduled":
                positions = live.get(task_id)
                if event == "enqueued":
                    if positions is not None and not row.compacted:
                        raise NotCensus("enqueued a live task")
                else:
                    claim = claims.get(task_id)
                    if claim is None or (row.daemon is not None and row.daemon != claim[0]):
                        raise NotCensus("retry_scheduled without the claim")
                if row.triggerAfterIds:
                    raise NotCensus(f"{event} of a DAG child")
                attempt = row.attempt or 0
                old = attempts.get(task_id) if positions is not None else None
                attempts[task_id] = max(attempt, old) if old is not None else attempt
                claims.pop(task_id, None)
                if positions is None:
                    live[task_id] = [place]
                else:
                    positions.append(place)
                seen[task_id] = LIVE
                continue
            claim = claims.get(task_id)
            if event == "cancelled":
                if task_id not in live or claim is not None:
                    raise NotCensus("a cancel to check in full")
                seen[task_id] = CANCELLED
            elif event == "succeeded" or event == "dead_lettered":
                if claim is None or (row.daemon is not None and row.daemon != claim[0]):
                    raise NotCensus(f"{event} without the claim")
                if event == "succeeded":
                    seen[task_id] = COMPLETED
                else:
                    if row.dlqKey is not None and row.dlqKey != task_id:
                        raise NotCensus("dead_lettered under another key")
                    self.dlq.add(task_id)
                    seen[task_id] = DEAD_LETTERED
            else:
                raise NotCensus(f"{event} line")
            live.pop(task_id, None)
            claims.pop(task_id, None)
            attempts.pop(task_id, None)
        self.last_seq = last_seq
        self.events += len(rows)
