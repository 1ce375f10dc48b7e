from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from logkit import Backend, FileBackend, MemoryBackend, OpenLog, Recorder

from snerd.eventlog.base import EventLog


@pytest.fixture(params=["memory", "file"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "memory":
        return MemoryBackend()
    return FileBackend(tmp_path / "storage")


@pytest.fixture
async def open_log(backend: Backend) -> AsyncIterator[OpenLog]:
    """``await open_log(**kw)`` -> (log, recorder), opened; every log is closed after."""
    logs: list[EventLog] = []

    async def _open(**kwargs: Any) -> tuple[EventLog, Recorder]:
        log = backend.new(**kwargs)
        rec = Recorder()
        await log.open(rec)
        logs.append(log)
        return log, rec

    yield _open
    for log in logs:
        await log.close()
