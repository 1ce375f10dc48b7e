"""Outbound notices: progress updates and dead letters, fanned out to whoever listens.

The stdio daemon turns them into ``progress`` / ``max_retries_reached`` lines, the
webhook module into a ``MaxRetriesReached`` POST, the embedded queue into callbacks.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from snerd.eventlog.base import Record
from snerd.projections.state import QueueState

log = logging.getLogger("snerd.notify")


class Listener(Protocol):
    def on_progress(self, task_id: str, task_type: str | None, data: Any, local: bool) -> None:
        """Progress was recorded; ``local`` when this daemon runs the attempt."""

    def on_dead_letter(self, record: Record) -> None:
        """This daemon wrote a dead_lettered event (the full-state record)."""

    async def close(self) -> None:
        """Flush and release resources."""


class Notifier:
    """Fans notices out to listeners; a failing listener is logged, never fatal."""

    def __init__(self, listeners: Sequence[Listener] = ()) -> None:
        self.listeners = list(listeners)

    def add(self, listener: Listener) -> None:
        self.listeners.append(listener)

    def progress(
        self, state: QueueState, items: Sequence[tuple[str, Any]], runs: Mapping[str, Any]
    ) -> None:
        for task_id, data in items:
            task = state.tasks.get(task_id)
            task_type = task.type if task is not None else None
            for listener in self.listeners:
                try:
                    listener.on_progress(task_id, task_type, data, task_id in runs)
                except Exception:
                    log.exception("progress listener failed")

    def dead_lettered(self, record: Record) -> None:
        for listener in self.listeners:
            try:
                listener.on_dead_letter(record)
            except Exception:
                log.exception("dead-letter listener failed")

    async def close(self) -> None:
        for listener in self.listeners:
            try:
                await listener.close()
            except Exception:
                log.exception("listener close failed")
