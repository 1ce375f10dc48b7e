"""The task decorator (issue 11.3): ``@queue.task(...)`` on async and sync functions,
``enqueue``/``delay`` with generated time-ordered ids, per-call ``options``, results
through the handle. In-process, on a memory log and a manual clock."""

from __future__ import annotations

import re
import threading

import pytest
from embeddedkit import WAIT, MakeQueue, records

from snerd.dispatcher.clock import ManualClock
from snerd.errors import ProtocolError, TaskDeadLetteredError
from snerd.eventlog import MemoryStore
from snerd.tasks import TaskIds


async def test_an_async_task_runs_with_its_arguments_and_returns_its_result(
    make_queue: MakeQueue, store: MemoryStore
) -> None:
    queue = await make_queue()

    @queue.task(max_retries=5)
    async def add(a: int, b: int = 0, *, scale: int = 1) -> int:
        return (a + b) * scale

    assert add.name.startswith(f"{__name__}.test_an_async") and add.name.endswith("<locals>.add")
    handle = await add.enqueue(2, b=3, scale=10)
    assert await handle.result(timeout=WAIT) == 50
    [enqueued] = records(store, handle.id, "enqueued")
    assert enqueued["taskType"] == add.name and enqueued["maxRetries"] == 5
    assert enqueued["taskData"] == '{"args":[2],"kwargs":{"b":3,"scale":10}}'
    assert await add.fn(1, 1) == 2  # the function itself stays callable


async def test_a_sync_task_runs_in_a_worker_thread(make_queue: MakeQueue) -> None:
    queue = await make_queue()
    loop_thread = threading.get_ident()

    @queue.task(name="where")
    def where(tag: str) -> list[str | bool]:
        return [tag, threading.get_ident() != loop_thread]

    handle = await where.delay("x")  # the alias
    assert await handle.result(timeout=WAIT) == ["x", True]


async def test_options_set_the_id_and_override_the_decorators_defaults(
    make_queue: MakeQueue, store: MemoryStore, clock: ManualClock
) -> None:
    queue = await make_queue()

    @queue.task(name="t", urgency_score=1, max_retries=2)
    async def t(n: int) -> int:
        return n

    later = t.options(id="mine", urgency_score=9, execute_at=clock.now() + 60)
    handle = await later.enqueue(1)
    assert handle.id == "mine"
    [enqueued] = records(store, "mine", "enqueued")
    assert enqueued["urgencyScore"] == 9 and enqueued["maxRetries"] == 2
    assert t.defaults.urgency_score == 1  # the task itself is unchanged
    clock.advance(60)
    assert await handle.result(timeout=WAIT) == 1
    with pytest.raises(TypeError, match="'urgency' \\(did you mean 'urgency_score'\\?\\)"):
        queue.task(urgency=3)  # type: ignore[call-arg]


async def test_generated_ids_are_time_ordered_and_unique(
    make_queue: MakeQueue, clock: ManualClock
) -> None:
    queue = await make_queue()

    @queue.task(name="t")
    async def t() -> None:
        return None

    same_instant = [(await t.enqueue()).id for _ in range(50)]
    clock.advance(0.001)
    after = (await t.enqueue()).id
    assert same_instant == sorted(same_instant) and len(set(same_instant)) == 50
    assert after > same_instant[-1] and len(after) == 26


def test_ids_stay_increasing_when_the_clock_goes_back() -> None:
    ids = TaskIds()
    first = ids(1_700_000_000.5)
    assert ids(1_600_000_000.0) > first
    assert ids(1_800_000_000.0)[:10] > first[:10]  # the time prefix moved on


async def test_bad_arguments_and_options_are_refused_at_enqueue(make_queue: MakeQueue) -> None:
    queue = await make_queue()

    @queue.task(name="t")
    async def t(value: object) -> None:
        return None

    with pytest.raises(TypeError, match="arguments of task 't' are not JSON-serializable"):
        await t.enqueue({1, 2})
    with pytest.raises(ProtocolError, match="max_retries"):
        await t.options(max_retries=-1).enqueue(1)


async def test_data_not_written_by_enqueue_fails_the_attempt(make_queue: MakeQueue) -> None:
    queue = await make_queue()

    @queue.task(name="t")
    async def t(value: int) -> int:
        return value

    await queue.enqueue("raw", "t", [1, 2], max_retries=0)  # plain enqueue: not args/kwargs
    with pytest.raises(TaskDeadLetteredError, match=re.escape('its data must be {"args"')):
        await queue.result("raw", timeout=WAIT)


async def test_a_failing_task_raises_from_its_handle(make_queue: MakeQueue) -> None:
    queue = await make_queue()

    @queue.task(name="t", max_retries=0)
    def boom(n: int) -> int:
        raise RuntimeError(f"boom {n}")

    handle = await boom.enqueue(7)
    with pytest.raises(TaskDeadLetteredError, match="RuntimeError: boom 7"):
        await handle.result(timeout=WAIT)


async def test_a_task_takes_the_retry_policy_as_its_default_and_per_call(
    make_queue: MakeQueue, store: MemoryStore
) -> None:
    queue = await make_queue()

    @queue.task(name="policy", retry_backoff="exponential", retry_max_delay=30)
    async def policy() -> None:
        return None

    first = await policy.enqueue()
    second = await policy.options(retry_max_delay=90).enqueue()
    [a] = records(store, first.id, "enqueued")
    [b] = records(store, second.id, "enqueued")
    assert (a["retryBackoff"], a["retryMaxDelay"]) == ("exponential", 30)
    assert (b["retryBackoff"], b["retryMaxDelay"]) == ("exponential", 90)
