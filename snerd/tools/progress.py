"""A progress bar that appears only once a job has run past a threshold (default 1 s).

A fast ``stats`` prints nothing extra; a slow one shows how far it got. The clock
and the threshold are injected, so tests drive it without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

T = TypeVar("T")


class LateProgress:
    """Counts items through :meth:`wrap` (any number of iterables, one count) and
    shows a bar on ``console`` once ``after`` seconds of ``clock`` have passed since
    it was made. ``total()`` (e.g. a line count) is asked only when the bar appears."""

    def __init__(
        self,
        label: str,
        total: Callable[[], int],
        console: Console,
        *,
        clock: Callable[[], float] = time.monotonic,
        after: float = 1.0,
        every: int = 4096,
    ) -> None:
        self.label, self.total, self.console = label, total, console
        self.clock, self.after, self.every = clock, after, every
        self.start = clock()
        self.done = 0
        self.progress: Progress | None = None
        self.bar: Any = None

    def wrap(self, items: Iterable[T]) -> Iterator[T]:
        every = self.every
        for item in items:
            self.done += 1
            if self.done % every == 0:
                self._tick()
            yield item

    def _tick(self) -> None:
        if self.progress is None:
            if self.clock() - self.start < self.after:
                return
            columns = (TextColumn(self.label), BarColumn(), MofNCompleteColumn())
            self.progress = Progress(*columns, console=self.console, transient=True)
            self.progress.start()
            self.bar = self.progress.add_task(self.label, total=max(self.total(), self.done))
        self.progress.update(self.bar, completed=self.done)

    def grow(self, total: Callable[[], int]) -> None:
        """From now on ``total()`` is the whole count (more items to come than the first
        total said); a bar already shown takes it at once."""
        self.total = total
        if self.progress is not None:
            self.progress.update(self.bar, total=max(total(), self.done))

    @property
    def shown(self) -> bool:
        return self.progress is not None

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
