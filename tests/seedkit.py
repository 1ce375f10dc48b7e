"""Queues the CLI tools' tests seed their storage with."""

from __future__ import annotations

from pathlib import Path

import snerd


def ok_and_bad(path: Path | str) -> snerd.Queue:
    """An embedded queue on ``path`` (a directory or a PostgreSQL URL; no fsync) whose
    ``ok`` handler succeeds and whose ``bad`` one raises ``RuntimeError("boom")``."""
    queue = snerd.Queue(str(path), fsync=False)

    @queue.handler("ok")
    async def ok(job: object) -> None:
        return None

    @queue.handler("bad")
    async def bad(job: object) -> None:
        raise RuntimeError("boom")

    return queue
