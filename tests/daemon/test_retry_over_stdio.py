"""Retry policy over stdio on the daemon's test clock: exponential backoff fields on
``enqueue``, and ``"retry": false`` on a ``result`` (specs/protocol.md §3.1, §3.2)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from daemonkit import WAIT, ForkingClient, Wire, base_env, events_of

import snerd


async def test_exponential_backoff_waits_the_delay_written_in_the_log(daemon: Wire) -> None:
    await daemon.ack("a", max_retries=3, retry_backoff="exponential",
                     retry_after_hours=10 / 3600, retry_max_delay=25)  # fmt: skip
    [enqueued] = events_of(daemon.storage, "a", "enqueued")
    assert (enqueued["retryBackoff"], enqueued["retryMaxDelay"]) == ("exponential", 25)
    waits = []
    for attempt in (1, 2, 3):
        await daemon.expect("execute", task_id="a", attempt=attempt)
        await daemon.result("a", ok=False, error="down")
        await daemon.barrier()  # the result went through the log's writer
        retry = events_of(daemon.storage, "a", "retry_scheduled")[attempt - 1]
        delay = retry["retryDelay"]
        waits.append(delay)
        await daemon.advance(delay - 0.01)
        await daemon.quiet("execute", task_id="a", attempt=attempt + 1)
        await daemon.advance(0.01)
    await daemon.expect("execute", task_id="a", attempt=4)
    assert waits[0] == 10  # the first retry waits the base: half of 10 is below it
    assert 10 <= waits[1] <= 20 and 12.5 <= waits[2] <= 25  # doubled, capped, jittered


async def test_retry_false_dead_letters_at_once(daemon: Wire) -> None:
    await daemon.ack("a", max_retries=5)
    await daemon.expect("execute", task_id="a")
    await daemon.result("a", ok=False, error="bad input", retry=False)
    dead = await daemon.expect("max_retries_reached", task_id="a")
    assert (dead["reason"], dead["retry_count"]) == ("failed_permanently", 0)
    [record] = events_of(daemon.storage, "a", "dead_lettered")
    assert record["reason"] == "failed_permanently" and record["retryCount"] == 0
    assert not events_of(daemon.storage, "a", "retry_scheduled")


async def test_the_client_sends_retry_false_for_snerd_fail(storage: Path) -> None:
    dead: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    calls: list[str] = []
    async with ForkingClient(storage, env=base_env(clock=False)) as client:  # Client, forked
        client.on_max_retries_reached(dead.put_nowait)

        async def handle(task_id: str, data: Any) -> None:
            calls.append(task_id)
            raise snerd.Fail("not a valid card")

        client.register("charge", handle)
        await client.enqueue("c1", "charge", {}, max_retries=5, retry_backoff="exponential")
        notice = await asyncio.wait_for(dead.get(), WAIT)
    assert (notice["task_id"], notice["reason"]) == ("c1", "failed_permanently")
    assert notice["last_error"] == "not a valid card" and calls == ["c1"]
