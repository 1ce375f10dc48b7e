"""What one fold changed, so the dispatcher never rescans the whole table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from snerd.projections.slots import fast_init


@dataclass(frozen=True, slots=True)
class Delta:
    """Ids (or DLQ keys) by what happened to them, in log order."""

    ready: tuple[str, ...] = ()  # entered a ready heap
    delayed: tuple[str, ...] = ()  # entered the timers
    blocked: tuple[str, ...] = ()  # waiting for DAG parents
    doomed: tuple[str, ...] = ()  # blocked by a dead-lettered parent: fail them through
    claimed: tuple[str, ...] = ()
    released: tuple[str, ...] = ()  # a claim ended without an outcome
    finished: tuple[str, ...] = ()  # left the live table (completed, cancelled, dead)
    dead: tuple[str, ...] = ()  # DLQ keys added
    progress: tuple[tuple[str, Any], ...] = ()
    counted: tuple[tuple[str, Any], ...] = ()  # (metric, event): what counters to bump
    reset: bool = False  # the whole state was rebuilt

    def __bool__(self) -> bool:
        return any(getattr(self, name) for name in self.__slots__)

    @property
    def wakes_dispatch(self) -> bool:
        """Whether something may have become runnable (or capacity may have freed)."""
        return bool(
            self.ready or self.delayed or self.released or self.finished or self.doomed
            or self.dead
        )  # fmt: skip

    def merge(self, other: Delta) -> Delta:
        """This delta followed by ``other``."""
        merged: dict[str, Any] = {n: getattr(self, n) + getattr(other, n) for n in _TUPLES}
        return Delta(**merged, reset=self.reset or other.reset)


NO_CHANGE = Delta()
"""The delta of a fold that changed nothing (immutable, so shared)."""

_, _build = fast_init(Delta)  # one per fold that changed something

_TUPLES = (
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
        delta: Delta = _build(
            ready=tuple(ready), delayed=tuple(delayed), blocked=tuple(blocked),
            doomed=tuple(doomed), claimed=tuple(claimed), released=tuple(released),
            finished=tuple(finished), dead=tuple(dead), progress=tuple(progress),
            counted=tuple(counted),
        )  # fmt: skip
        return delta
