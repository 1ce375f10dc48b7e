"""The engine's start-up replay runs with Python's cyclic collector paused.

A replay keeps most of what it builds (the state), so the collector, which runs every
few hundred objects kept, would walk the growing state again and again for nothing:
the fold leaves no cycles. Paused, a daemon's start on 50,000 live tasks took 0.84 s
against 1.16 s (``benchmarks/README.md``). After the replay the collector is as it was.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from enginekit import Harness

from snerd.eventlog.base import LogListener
from snerd.eventlog.memory import MemoryLog


class _Observing(MemoryLog):
    """A memory log that notes whether the collector runs while it is replayed."""

    seen: list[bool]

    async def open(self, listener: LogListener) -> None:
        type(self).seen.append(gc.isenabled())
        await super().open(listener)
        type(self).seen.append(gc.isenabled())


@pytest.fixture
def observing(harness: Harness) -> Iterator[list[bool]]:
    _Observing.seen = []
    harness.new_log = lambda: _Observing(harness.store)
    was = gc.isenabled()
    try:
        yield _Observing.seen
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()


async def test_the_replay_runs_with_the_collector_paused_then_it_runs_again(
    harness: Harness, observing: list[bool]
) -> None:  # fmt: skip
    gc.enable()
    await harness.engine()
    assert observing == [False, False]
    assert gc.isenabled()


async def test_a_collector_switched_off_by_the_app_stays_off(
    harness: Harness, observing: list[bool]
) -> None:  # fmt: skip
    gc.disable()
    await harness.engine()
    assert observing == [False, False]
    assert not gc.isenabled()
