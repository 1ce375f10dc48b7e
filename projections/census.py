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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

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
    """Feed rows in log order (:meth:`feed`), then :meth:`finish` with the records of
    the live tasks (their positions: :meth:`live_positions`)."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}
        self.live: dict[str, list[int]] = {}
        self.dlq: set[str] = set()
        self.events = 0

    def feed(self, rows: Sequence[Any], first: int | None = None) -> None:
        """Count ``rows``; ``first`` is the position of the first (default: the next)."""
        k = self.events if first is None else first
        seen, live, dlq = self.seen, self.live, self.dlq
        for row in rows:
            event = row.event
            if event in _LIGHT:
                task_id = row.task if row.task is not None else row.taskId
                if task_id is None or (event == "claimed" and (
                        row.daemon is None or row.attempt == 0)):  # fmt: skip
                    raise NotCensus(f"record {k + 1}: {event} without a usable task")
                positions = live.get(task_id)
                if positions is not None:
                    positions.append(k)
            elif event in _FULL_STATE:
                task_id = row.taskId
                if task_id is None or row.taskType is None or row.triggerAfterIds:
                    raise NotCensus(f"record {k + 1}: {event} the census cannot judge")
                positions = live.get(task_id)
                if positions is None:
                    live[task_id] = [k]
                else:
                    positions.append(k)
                seen[task_id] = LIVE
            elif event in _TOMBSTONE:
                task_id = row.taskId
                if task_id is None:
                    raise NotCensus(f"record {k + 1}: {event} without a taskId")
                live.pop(task_id, None)
                seen[task_id] = _TOMBSTONE[event]
            elif event == "dead_lettered":
                task_id = row.taskId
                if (task_id is None or row.taskType is None
                        or (row.dlqKey is not None and row.dlqKey != task_id)):  # fmt: skip
                    raise NotCensus(f"record {k + 1}: dead_lettered the census cannot judge")
                live.pop(task_id, None)
                dlq.add(task_id)
                seen[task_id] = DEAD_LETTERED
            elif event != "snapshot":
                raise NotCensus(f"record {k + 1}: {event or 'SnerdMQ state'} line")
            k += 1
        self.events = max(self.events, k)

    def live_positions(self) -> list[int]:
        """The positions of every record of the tasks live now, in log order."""
        return sorted(k for positions in self.live.values() for k in positions)

    def finish(self, live_records: Iterable[Mapping[str, Any]], now: float | None) -> Tally:
        """The tally, given the records at :meth:`live_positions` (in that order)."""
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
