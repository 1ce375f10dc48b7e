"""What one fold changed, so the dispatcher never rescans the whole table."""

from __future__ import annotations

from typing import Any, Final

from snerd.projections.slots import field_repr, field_values, freeze

_TUPLES: Final = (
    "ready",
    "delayed",
    "blocked",
    "doomed",
    "claimed",
    "released",
    "finished",
    "dead",
    "progress",
    "counted",
)
FIELDS: Final = (*_TUPLES, "reset")


class Delta:
    """Ids (or DLQ keys) by what happened to them, in log order. Immutable (``Final``
    fields: a native class in a wheel's compiled build, frozen by ``slots.freeze``
    where interpreted); equal when every field is."""

    __slots__ = FIELDS

    def __init__(
        self,
        ready: tuple[str, ...] = (),
        delayed: tuple[str, ...] = (),
        blocked: tuple[str, ...] = (),
        doomed: tuple[str, ...] = (),
        claimed: tuple[str, ...] = (),
        released: tuple[str, ...] = (),
        finished: tuple[str, ...] = (),
        dead: tuple[str, ...] = (),
        progress: tuple[tuple[str, Any], ...] = (),
        counted: tuple[tuple[str, Any], ...] = (),
        reset: bool = False,
    ) -> None:
        self.ready: Final = ready  # entered a ready heap
        self.delayed: Final = delayed  # entered the timers
        self.blocked: Final = blocked  # waiting for DAG parents
        self.doomed: Final = doomed  # blocked by a dead-lettered parent: fail them through
        self.claimed: Final = claimed
        self.released: Final = released  # a claim ended without an outcome
        self.finished: Final = finished  # left the live table (completed, cancelled, dead)
        self.dead: Final = dead  # DLQ keys added
        self.progress: Final = progress
        self.counted: Final = counted  # (metric, event): what counters to bump
        self.reset: Final = reset  # the whole state was rebuilt

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Delta):
            return NotImplemented
        return field_values(self, FIELDS) == field_values(other, FIELDS)

    def __hash__(self) -> int:
        return hash(field_values(self, FIELDS))

    def __repr__(self) -> str:
        return field_repr(self, FIELDS)

    def __bool__(self) -> bool:
        return any(field_values(self, FIELDS))

    @property
    def wakes_dispatch(self) -> bool:
        """Whether something may have become runnable (or capacity may have freed)."""
        return bool(
            self.ready or self.delayed or self.released or self.finished or self.doomed
            or self.dead
        )  # fmt: skip

    def merge(self, other: Delta) -> Delta:
        """This delta followed by ``other``."""
        merged = {n: getattr(self, n) + getattr(other, n) for n in _TUPLES}
        return Delta(**merged, reset=self.reset or other.reset)


freeze(Delta, inline=True)

NO_CHANGE: Final = Delta()
"""The delta of a fold that changed nothing (immutable, so shared)."""


class DeltaBuilder:
    """A mutable delta local to one fold call (one per fold: empty lists, no factories)."""

    __slots__ = _TUPLES

    def __init__(self) -> None:
        self.ready: list[str] = []
        self.delayed: list[str] = []
        self.blocked: list[str] = []
        self.doomed: list[str] = []
        self.claimed: list[str] = []
        self.released: list[str] = []
        self.finished: list[str] = []
        self.dead: list[str] = []
        self.progress: list[tuple[str, Any]] = []
        self.counted: list[tuple[str, Any]] = []

    def __bool__(self) -> bool:
        return any(getattr(self, n) for n in _TUPLES)

    def freeze(self) -> Delta:
        ready, delayed, blocked, doomed = self.ready, self.delayed, self.blocked, self.doomed
        claimed, released, finished, dead = self.claimed, self.released, self.finished, self.dead
        progress, counted = self.progress, self.counted
        if not (ready or delayed or blocked or doomed or claimed or released or finished or dead
                or progress or counted):  # fmt: skip
            return NO_CHANGE
        return Delta(
            tuple(ready), tuple(delayed), tuple(blocked), tuple(doomed), tuple(claimed),
            tuple(released), tuple(finished), tuple(dead), tuple(progress), tuple(counted),
        )  # fmt: skip
