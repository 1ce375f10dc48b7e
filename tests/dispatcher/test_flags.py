"""dispatcher.flags.Flag: asyncio.Event's set, clear, is_set and wait, step for step
(each script of calls ends the same way on both)."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from snerd.dispatcher.flags import Flag

_STEPS = st.lists(st.sampled_from(["set", "clear", "wait", "cancel", "turn"]), max_size=12)


async def _play(flag: Any, steps: list[str]) -> list[Any]:
    """Run ``steps`` on ``flag``; what each step saw (the flag, the waiters done)."""
    waiters: list[asyncio.Task[Any]] = []
    seen: list[Any] = []
    for step in steps:
        if step == "set":
            flag.set()
        elif step == "clear":
            flag.clear()
        elif step == "wait":
            waiters.append(asyncio.ensure_future(flag.wait()))
        elif step == "cancel" and waiters:
            waiters[0].cancel()
        else:
            await asyncio.sleep(0)
        seen.append((flag.is_set(), [w.done() and not w.cancelled() for w in waiters]))
    for _ in range(3):
        await asyncio.sleep(0)
    seen.append([w.result() if w.done() and not w.cancelled() else None for w in waiters])
    for waiter in waiters:
        waiter.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    return seen


@given(_STEPS)
def test_a_flag_does_what_an_asyncio_event_does(steps: list[str]) -> None:
    assert asyncio.run(_play(Flag(), steps)) == asyncio.run(_play(asyncio.Event(), steps))


async def test_a_cancelled_waiter_is_forgotten_and_the_rest_still_wake() -> None:
    flag = Flag()
    gone = asyncio.ensure_future(flag.wait())
    kept = asyncio.ensure_future(flag.wait())
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.sleep(0)
    assert gone.cancelled() and len(flag._waiters) == 1
    flag.set()
    assert await asyncio.wait_for(kept, 1) is True and flag._waiters == []
    assert await flag.wait() is True  # set: at once
    flag.set()
    assert flag.raised == 1  # (set twice, raised once)
    flag.clear()
    flag.set()
    assert flag.raised == 2
