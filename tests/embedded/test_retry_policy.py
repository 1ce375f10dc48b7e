"""Retry policy in the embedded queue, on the manual clock: exponential backoff runs
each retry exactly when the log says, a replay reads the same retry times back, and
``snerd.Fail`` dead-letters at once."""

from __future__ import annotations

from typing import Any

import pytest
from embeddedkit import T0, WAIT, MakeQueue, records

import snerd
from snerd.dispatcher.clock import ManualClock
from snerd.dispatcher.executors import Job
from snerd.eventlog import MemoryStore
from snerd.projections import events as ev


async def test_exponential_retries_run_at_the_times_the_log_states(
    make_queue: MakeQueue, clock: ManualClock, store: MemoryStore
) -> None:
    queue = await make_queue()
    draws = iter([1.0, 0.0, 1.0, 1.0, 0.5])  # one per failure
    queue.engine.jitter = lambda: next(draws)  # the shell's draws, fixed for the test
    ran: list[float] = []

    @queue.handler("flaky")
    async def flaky(job: Job) -> None:
        ran.append(clock.now() - T0)
        raise RuntimeError("down")

    await queue.enqueue("t", "flaky", max_retries=4, retry_backoff="exponential",
                        retry_after_hours=2 / 3600, retry_max_delay=10)  # fmt: skip
    expected = [0.0, 2.0, 4.0, 12.0, 22.0]  # waits 2, 2 (jitter 0), 8, 10 (the cap)
    for step, at in enumerate(expected[1:], start=1):
        await queue.join(timeout=WAIT)
        assert ran == expected[:step]
        clock.set(T0 + at - 0.001)  # just before the retry time: nothing runs
        await queue.join(timeout=WAIT)
        assert ran == expected[:step]
        clock.set(T0 + at)
        await queue.join(timeout=WAIT)
    assert ran == expected
    retries = records(store, "t", ev.RETRY_SCHEDULED)
    assert [r[ev.F_RETRY_DELAY] for r in retries] == [2.0, 2.0, 8.0, 10.0]
    [dead] = records(store, "t", ev.DEAD_LETTERED)
    assert dead[ev.F_REASON] == ev.REASON_MAX_RETRIES


async def test_a_replay_reads_back_the_same_retry_time(
    make_queue: MakeQueue, clock: ManualClock
) -> None:
    queue = await make_queue()

    @queue.handler("flaky")
    async def flaky(job: Job) -> None:
        raise RuntimeError("down")

    await queue.enqueue("t", "flaky", max_retries=9, retry_backoff="exponential",
                        retry_max_delay=600)  # fmt: skip
    for _ in range(4):  # real random draws this time
        await queue.join(timeout=WAIT)
        task = queue.engine.state.tasks["t"]
        assert task.retry_after_time is not None
        clock.set(task.retry_after_time)
    await queue.join(timeout=WAIT)
    live = queue.engine.state.tasks["t"]
    replayed = (await make_queue()).engine.state.tasks["t"]  # a fresh fold of the same log
    assert (replayed.retry_count, replayed.retry_after_time) == (5, live.retry_after_time)
    assert replayed.retry_after_time is not None and replayed.retry_after_time > clock.now()


@pytest.mark.parametrize("sync", [False, True])
async def test_fail_dead_letters_at_once_without_retries(
    make_queue: MakeQueue, store: MemoryStore, sync: bool
) -> None:
    queue = await make_queue()
    calls: list[int] = []
    dead: list[dict[str, Any]] = []
    queue.on_dead_letter(lambda record: dead.append(dict(record)))

    def reject(job: Job) -> None:
        calls.append(job.attempt)
        raise snerd.Fail("malformed address")

    async def reject_async(job: Job) -> None:
        reject(job)

    queue.handler("send")(reject if sync else reject_async)
    await queue.enqueue("t", "send", max_retries=5)
    await queue.join(timeout=WAIT)
    assert calls == [1]
    assert not records(store, "t", ev.RETRY_SCHEDULED)
    [record] = dead
    assert record[ev.F_REASON] == ev.REASON_PERMANENT == "failed_permanently"
    assert record[ev.F_LAST_ERROR_TEXT] == "Fail: malformed address"
    assert queue.get("t")["status"] == "dead_lettered"  # type: ignore[index]


async def test_fail_is_exported_and_is_a_snerd_error() -> None:
    from snerd.errors import Fail, SnerdError

    assert snerd.Fail is Fail and issubclass(Fail, SnerdError)
    assert "Fail" in snerd.__all__
