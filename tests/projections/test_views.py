"""The read models: one status vocabulary, and metrics that count events."""

from __future__ import annotations

from typing import Any

from snerd.projections import bulk_fold
from snerd.projections.schedule import format_instant
from snerd.projections.state import empty, fold
from snerd.projections.views import stats, status
from snerd.projections.views.tasks import task_view

T = 1_700_000_000.0


def rec(event: str, task_id: str, **fields: Any) -> dict[str, Any]:
    return {"event": event, "taskId": task_id, "taskType": "t", **fields}


def test_every_live_phase_has_one_status_and_a_failed_attempt_is_none() -> None:
    state, _ = fold(
        empty(),
        [
            rec("enqueued", "now"),
            rec("enqueued", "later", executeAt=format_instant(T + 60)),
            rec("enqueued", "child", triggerAfterIds=["now"]),
            rec("enqueued", "run"),
            {"event": "claimed", "taskId": "run", "daemon": "d", "ts": round(T * 1000)},
            rec("dead_lettered", "gone", reason="retries_exhausted"),
        ],
    )
    words = {t: status.status_of(state.tasks[t], T) for t in ("now", "later", "child", "run")}
    assert words == {"now": "pending", "later": "scheduled", "child": "blocked", "run": "active"}
    assert status.status_of(state.tasks["later"], T + 61) == "pending"  # its time has come
    assert status.status_of(state.tasks["later"], None) == "scheduled"  # no clock known
    assert status.counts(state, T) == {
        "pending": 1, "scheduled": 1, "blocked": 1, "active": 1, "dead_lettered": 1,
    }  # fmt: skip
    assert set(status.STATES) == status.LIVE | status.ENDED and "failed" not in status.STATES
    view = task_view(state, "gone", now=T)
    assert view is not None and view["status"] == "dead_lettered"


def test_the_sdk_words_are_the_sdks() -> None:
    assert status.sdk_status("scheduled", "boom") == "failed"  # waits for its retry
    assert status.sdk_status("scheduled", None) == "queued"
    assert status.sdk_status("dead_lettered", "boom") == "dead_letter"
    assert status.sdk_status("cancelled", None) == "completed"
    assert stats.sdk_totals({"enqueued": 3, "completed": 1, "dead_lettered": 2}) == {
        "enqueued": 3, "processed": 1, "failed": 2,
    }  # fmt: skip


def test_metrics_count_events_and_a_cron_schedule_moving_on_is_no_completion() -> None:
    records = [
        rec("enqueued", "c", cronExpression="1s"),
        rec("retry_scheduled", "c"),  # a failed attempt
        rec("dead_lettered", "c", dlqKey="c@1"),  # another, the last allowed
        rec("rescheduled", "c"),  # the schedule moves on: not a completion
        rec("rescheduled", "c"),  # the next occurrence succeeded
        rec("dead_lettered", "kid", reason="blocked_by_failed_parent"),  # made no attempt
        {**rec("enqueued", "x"), "compacted": True},  # a snapshot restates history
        {"taskId": "sdk", "taskType": "t"},  # a SnerdMQ state line: no event
    ]
    assert stats.state_totals(bulk_fold(records)) == {
        "enqueued": 1, "started": 0, "completed": 1, "failed_attempts": 2,
        "dead_lettered": 2, "cancelled": 0, "deduplicated": 0,
    }  # fmt: skip
