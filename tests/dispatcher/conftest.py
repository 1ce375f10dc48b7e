"""Fixtures for engine tests: see enginekit.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from enginekit import Harness


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = Harness()
    yield h
    for engine in h.engines:
        await engine.drain(timeout=0)
