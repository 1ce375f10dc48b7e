from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import pgkit
from logkit import Backend, FileBackend, MemoryBackend, OpenLog, PostgresBackend, Recorder

from snerd.eventlog.base import EventLog


@pytest.fixture(params=["memory", "file", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "memory":
        yield MemoryBackend()
    elif request.param == "file":
        yield FileBackend(tmp_path / "storage")
    else:
        pgkit.require_pg()
        pg = PostgresBackend()
        try:
            yield pg
        finally:
            pg.drop()


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
