"""The queue state's own type (:class:`QueueState`; :mod:`snerd.projections.state` says
what each of its indexes holds and folds records into it).

A plain class with ``Final`` fields rather than a frozen dataclass: a wheel build
compiles this module, so every fold builds the state with one direct call and the
compiled core reads its fields directly (``benchmarks/README.md``, twentieth session).
Interpreted, :func:`~snerd.projections.slots.freeze` keeps it frozen as the dataclass
was."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from immutables import Map

from snerd.projections import heap
from snerd.projections.counters import NO_TOTALS, CounterKey, Hist, HistKey, Totals
from snerd.projections.pmaps import IdSet
from snerd.projections.slots import field_repr, field_values, freeze, replaced
from snerd.projections.task import Lane, Task

if TYPE_CHECKING:  # (state.py imports this module: the type only)
    from snerd.projections.state import DeadLetter

_NONE: Final[Map[Any, Any]] = Map()
"""The empty map every new state starts its tables with (immutable: shared)."""

FIELDS: Final = (
    "tasks",
    "dlq",
    "lanes",
    "timers",
    "refs",
    "doomed",
    "fingerprints",
    "windows",
    "by_daemon",
    "totals",
    "n",
    "last_seq",
    "invalid",
)
"""The state's fields, in its constructor's order."""


class QueueState:
    """The whole projection. Build one with ``state.empty`` or ``state.from_tables``.
    Equal when every field is."""

    __slots__ = FIELDS

    def __init__(
        self,
        tasks: Map[str, Task] = _NONE,
        dlq: Map[str, DeadLetter] = _NONE,
        lanes: Map[Lane, heap.Heap] = _NONE,
        timers: heap.Heap = None,
        refs: Map[str, IdSet[str]] = _NONE,
        doomed: IdSet[str] = _NONE,
        fingerprints: Map[str, IdSet[str]] = _NONE,
        windows: Map[str, tuple[float, ...]] = _NONE,
        by_daemon: Map[str, IdSet[str]] = _NONE,
        totals: Totals = NO_TOTALS,
        n: int = 0,
        last_seq: int = 0,
        invalid: int = 0,
    ) -> None:
        self.tasks: Final = tasks
        self.dlq: Final = dlq
        self.lanes: Final = lanes
        self.timers: Final = timers
        self.refs: Final = refs
        self.doomed: Final = doomed
        self.fingerprints: Final = fingerprints
        self.windows: Final = windows
        self.by_daemon: Final = by_daemon
        self.totals: Final = totals  # the counters and histograms, summed when read
        self.n: Final = n  # records folded: the source of FIFO order
        self.last_seq: Final = last_seq
        self.invalid: Final = invalid  # records the fold could not use (reported)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QueueState):
            return NotImplemented
        return field_values(self, FIELDS) == field_values(other, FIELDS)

    def __hash__(self) -> int:
        return hash(field_values(self, FIELDS))

    def __repr__(self) -> str:
        return field_repr(self, FIELDS)

    def __reduce__(self) -> tuple[Any, ...]:
        return QueueState, field_values(self, FIELDS)

    @property
    def counters(self) -> Map[CounterKey, int]:
        """Counts by (metric, task type) since the log began."""
        return self.totals.counters

    @property
    def histograms(self) -> Map[HistKey, Hist]:
        """Latency and run-time histograms by (name, task type) since the log began."""
        return self.totals.histograms


freeze(QueueState, inline=True)


def with_state(state: QueueState, **changes: Any) -> QueueState:
    """The state with those fields changed (``AttributeError`` for a name it has not)."""
    return replaced(state, FIELDS, changes)
