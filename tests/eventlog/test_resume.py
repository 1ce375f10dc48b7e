"""eventlog/resume: the rest of a coroutine run by hand, as a task's coroutine."""

from __future__ import annotations

import asyncio
import collections.abc
import types
from typing import Any

import pytest

from snerd.eventlog.resume import resumed


def _started(coro: collections.abc.Coroutine[Any, Any, None]) -> Any:
    """Run ``coro`` by hand until its first wait; what it awaits."""
    return coro.send(None)


async def test_the_rest_is_a_coroutine_a_task_runs_to_its_end() -> None:
    """From Python 3.12 on, ``create_task`` takes only a coroutine (a ``types.coroutine``
    generator raised ``TypeError``: the log's writer died at its first wait there)."""
    loop = asyncio.get_running_loop()
    gate = loop.create_future()
    steps: list[str] = []

    async def work() -> None:
        steps.append("before")
        await gate
        steps.append("between")
        await asyncio.sleep(0)
        steps.append("after")

    drain = work()
    rest = resumed(drain, _started(drain))
    assert isinstance(rest, types.CoroutineType | collections.abc.Coroutine)
    task = loop.create_task(rest)
    await asyncio.sleep(0)
    assert steps == ["before"]  # waiting on the gate, as the coroutine was
    gate.set_result(None)
    await task
    assert steps == ["before", "between", "after"]


async def test_a_cancellation_reaches_the_rest() -> None:
    loop = asyncio.get_running_loop()
    cleaned: list[bool] = []

    async def work() -> None:
        try:
            await loop.create_future()  # forever
        finally:
            cleaned.append(True)

    drain = work()
    task = loop.create_task(resumed(drain, _started(drain)))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [True]
