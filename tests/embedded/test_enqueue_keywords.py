"""``Queue.enqueue``'s options are explicit typed keywords; misspellings raise (9.11)."""

from __future__ import annotations

import datetime as dt
import inspect

import pytest
from embeddedkit import MakeQueue, records

from snerd.embedded import Queue
from snerd.eventlog import MemoryStore


async def test_unknown_keywords_raise_naming_every_one(
    make_queue: MakeQueue, store: MemoryStore
) -> None:
    queue = await make_queue()
    with pytest.raises(TypeError) as caught:
        await queue.enqueue("a", "t", {}, urgency=10, max_retires=0, executeAt="+5m")
    message = str(caught.value)
    assert "'urgency' (did you mean 'urgency_score'?)" in message
    assert "'max_retires' (did you mean 'max_retries'?)" in message
    assert "'executeAt' (did you mean 'execute_at'?)" in message
    assert not records(store, "a")  # nothing was enqueued


async def test_the_options_are_explicit_keywords(make_queue: MakeQueue, store: MemoryStore) -> None:
    params = inspect.signature(Queue.enqueue).parameters
    keywords = {n for n, p in params.items() if p.kind is p.KEYWORD_ONLY}
    assert keywords == {
        "max_retries", "retry_after_hours", "retry_backoff", "retry_max_delay", "urgency_score",
        "execute_at", "cron",
        "trigger_after_ids", "rate_limit_group", "max_per_minute", "auto_dedupe",
        "webhook_url", "max_execution_seconds", "pool",
    }  # fmt: skip
    queue = await make_queue()
    at = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    await queue.enqueue("a", "t", {"n": 1}, max_retries=0, urgency_score=2.5, execute_at=at,
                        trigger_after_ids=("p",), rate_limit_group="g",
                        max_per_minute=3)  # fmt: skip
    [line] = records(store, "a", "enqueued")
    assert line["maxRetries"] == 0 and line["urgencyScore"] == 2.5
    assert line["executeAt"] == "2030-01-02T03:04:05.000Z"
    assert line["triggerAfterIds"] == ["p"] and line["maxPerMinute"] == 3


async def test_every_option_reaches_the_log_under_its_own_name(
    make_queue: MakeQueue, store: MemoryStore
) -> None:
    """The options the test above leaves out, each with a value no other takes."""
    queue = await make_queue()
    await queue.enqueue("b", "t", {}, retry_after_hours=0.5, retry_backoff="exponential",
                        retry_max_delay=9000.0, auto_dedupe=True,
                        webhook_url="https://example.com/hook", max_execution_seconds=7,
                        pool="io")  # fmt: skip
    [line] = records(store, "b", "enqueued")
    assert line["retryAfterHours"] == 0.5 and line["retryBackoff"] == "exponential"
    assert line["retryMaxDelay"] == 9000.0 and line["autoDedupe"] is True
    assert line["webhookUrl"] == "https://example.com/hook"
    assert line["maxExecutionSeconds"] == 7 and line["pool"] == "io"
    await queue.enqueue("c", "t", {}, cron="*/5 * * * *")
    [line] = records(store, "c", "enqueued")
    assert line["cronText"] == "*/5 * * * *" or line["cronExpression"] == "*/5 * * * *"
