"""Fixtures for engine tests: see enginekit.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from auditkit import store_problems
from enginekit import Harness


@pytest.fixture
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    """Engines on one memory store; at teardown what it holds passes ``replay --verify``
    unless the test is marked ``damaged_log``."""
    h = Harness()
    yield h
    for engine in h.engines:
        await engine.drain(timeout=0)
    for engine in h.engines:  # every dead letter decided had its notice sent or dropped
        assert engine._notices == 0, (engine.daemon, engine._notices)
    if h.store.lines and request.node.get_closest_marker("damaged_log") is None:
        assert store_problems(h.store, tmp_path / "audited") == []
