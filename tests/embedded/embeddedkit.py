"""Helpers for the embedded-queue tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

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


def store_problems(store: MemoryStore, directory: Path) -> list[dict]:
    """What ``snerdmq replay --verify`` says of everything ``store`` holds (its archives
    and live lines, written out under ``directory`` as a storage dir would hold them):
    audit problems, chain breaks, and links that only older writers make."""
    import json

    from click.testing import CliRunner

    from snerd.tools.replay import replay

    tasks = directory / "tasks"
    (tasks / "archive").mkdir(parents=True)
    for name, lines in store.archives:
        (tasks / "archive" / name).write_bytes(b"".join(lines))
    (tasks / "tasks.log").write_bytes(b"".join(store.lines))
    result = CliRunner().invoke(replay, [str(directory), "--verify", "--json"])
    report = json.loads(result.output)
    chain = report["chain"]
    return [*report["problems"], *(["older link"] * chain["older_links"])]
