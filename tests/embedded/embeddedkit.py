"""Helpers for the embedded-queue tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import orjson

from snerd.embedded import Queue
from snerd.eventlog import MemoryStore

T0 = 1_700_000_000.0
WAIT = 5.0

MakeQueue = Callable[..., Awaitable[Queue]]


def records(store: MemoryStore, task_id: str | None = None, event: str | None = None) -> list[dict]:
    """The store's records (about ``task_id``, of ``event``)."""
    out = []
    for line in store.lines:
        record = orjson.loads(line)
        if task_id is not None and record.get("taskId", record.get("task")) != task_id:
            continue
        if event is not None and record.get("event") != event:
            continue
        out.append(record)
    return out

