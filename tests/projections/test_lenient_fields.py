"""A malformed optional field falls back to its default; an unusable claim changes
nothing (log-format.md 1.6 and 6)."""

from __future__ import annotations

from typing import Any

import pytest

from snerd.projections.replay import bulk_fold
from snerd.projections.state import empty, fold
from snerd.projections.task import task_from_record

BASE = {"event": "enqueued", "taskId": "a", "taskType": "t", "ts": 1_000}


@pytest.mark.parametrize(
    ("field", "value", "attribute", "expected"),
    [
        ("autoDedupe", "false", "auto_dedupe", False),
        ("autoDedupe", 1, "auto_dedupe", False),
        ("retryCount", -4, "retry_count", 0),
        ("maxRetries", -1, "max_retries", 3),
        ("retryAfterHours", -2, "retry_after_hours", 0.0),
        ("maxExecutionSeconds", 0, "max_execution_seconds", None),
        ("maxExecutionSeconds", "x", "max_execution_seconds", None),
        ("maxExecutionSeconds", -5, "max_execution_seconds", None),
        ("maxPerMinute", "y", "max_per_minute", None),
        ("maxPerMinute", 0, "max_per_minute", None),
        ("cronExpression", 5, "cron", None),
        ("webhookUrl", ["x"], "webhook_url", None),
        ("rateLimitGroup", "", "rate_group", None),
    ],
)
def test_malformed_fields_fall_back(field: str, value: Any, attribute: str, expected: Any) -> None:
    task = task_from_record({**BASE, field: value})
    assert getattr(task, attribute) == expected


@pytest.mark.parametrize(
    "claim",
    [
        {"daemon": "", "attempt": 1},
        {"daemon": 7, "attempt": 1},
        {"daemon": "d", "attempt": 0},
        {"daemon": "d", "attempt": True},
        {"attempt": 1},
    ],
)
def test_an_unusable_claim_changes_nothing_but_the_invalid_count(claim: dict[str, Any]) -> None:
    enqueued = {**BASE, "rateLimitGroup": "g", "maxPerMinute": 1}
    record = {"event": "claimed", "taskId": "a", "ts": 2_000, "group": "g", **claim}
    before, _ = fold(empty(), [enqueued])
    after, _ = fold(before, [record])
    assert after.tasks == before.tasks and after.windows == before.windows
    assert after.invalid == before.invalid + 1
    bulk = bulk_fold([enqueued, record])
    assert bulk.windows == after.windows and bulk.invalid == after.invalid


def test_a_claim_without_ts_runs_but_does_not_fill_the_window() -> None:
    enqueued = {**BASE, "rateLimitGroup": "g", "maxPerMinute": 1}
    claim = {"event": "claimed", "taskId": "a", "daemon": "d", "attempt": 1, "group": "g"}
    state, _ = fold(empty(), [enqueued, claim])
    assert state.tasks["a"].claim is not None
    assert "g" not in state.windows
