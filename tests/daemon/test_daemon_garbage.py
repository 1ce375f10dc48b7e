"""The daemon's hot path leaves no cyclic garbage behind (issue 8, as
``tests/embedded/test_garbage.py`` for the embedded queue): an enqueue, its ack, the
``execute`` and the result, over the daemon's real pipes, free what they allocate by
reference counting. (Measured on the daemon before the fix: ~26 objects a task in
cycles, ~20 us of a task's CPU in the collector's passes over them.) The daemon runs in
this process, so the count covers its client too."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from daemonkit import Wire

TASKS = 200
SLACK = TASKS // 10
"""Cyclic garbage allowed for the whole run (timing-dependent stragglers), against the
twenty or more a task a cycle on the path leaves."""


@pytest.fixture
def collector_off() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


async def test_enqueue_execute_result_leave_no_cyclic_garbage(
    daemon: Wire, collector_off: None
) -> None:  # fmt: skip
    async def task(task_id: str) -> None:
        await daemon.ack(task_id, data={"n": 1})
        await daemon.expect("execute", task_id=task_id)
        await daemon.result(task_id)

    for i in range(5):  # warm: what the first tasks allocate, later ones reuse
        await task(f"w{i}")
    await daemon.barrier()
    gc.collect()
    for i in range(TASKS):
        await task(f"t{i}")
    await daemon.barrier()
    found = gc.collect()
    assert found <= SLACK, (
        f"{found} objects in reference cycles after {TASKS} tasks ({found / TASKS:.1f} a "
        "task): something on the daemon's path holds itself (see gc.DEBUG_SAVEALL)"
    )
