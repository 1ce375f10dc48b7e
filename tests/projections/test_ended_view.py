"""projections/views/ended.py: an ended task read back from its own stored records."""

from __future__ import annotations

from hypothesis import given, note, settings
from hypothesis_budget import examples
from loggen import IDS, any_logs, valid_logs

from snerd.projections.history import audit
from snerd.projections.views.ended import ended_view
from snerd.projections.views.status import ENDED

T = 1_700_000_000_000  # ms


def test_a_completed_task_with_its_result_attempts_and_times() -> None:
    log = [
        {"event": "enqueued", "taskId": "a", "taskType": "t", "ts": T, "seq": 1},
        {"event": "claimed", "task": "a", "daemon": "d1", "attempt": 1, "ts": T + 10, "seq": 2},
        {"event": "enqueued", "taskId": "b", "taskType": "t", "ts": T + 15, "seq": 3},
        {"event": "retry_scheduled", "taskId": "a", "taskType": "t", "attempt": 1, "ts": T + 20,
         "retryCount": 1, "LastJobError": {"error": "down", "retry_worthy": True}, "seq": 4},
        {"event": "claimed", "task": "a", "daemon": "d2", "attempt": 2, "ts": T + 30, "seq": 5},
        {"event": "succeeded", "taskId": "a", "taskType": "t", "attempt": 2, "ts": T + 40,
         "deletedAt": "2023-11-14T22:13:20.040Z", "result": [1, {"x": None}], "seq": 6},
    ]  # fmt: skip
    view = ended_view(log, "a")
    assert view is not None
    assert view["status"] == "completed" and view["result"] == [1, {"x": None}]
    assert view["attempt"] == 2 and view["taskType"] == "t" and "result" not in log[3]
    assert view["enqueuedAt"] == "2023-11-14T22:13:20.000Z"
    assert view["finishedAt"] == "2023-11-14T22:13:20.040Z"
    assert view["attempts"] == [
        {"attempt": 1, "daemon": "d1", "startedAt": "2023-11-14T22:13:20.010Z",
         "endedAt": "2023-11-14T22:13:20.020Z", "outcome": "retry_scheduled", "error": "down"},
        {"attempt": 2, "daemon": "d2", "startedAt": "2023-11-14T22:13:20.030Z",
         "endedAt": "2023-11-14T22:13:20.040Z", "outcome": "succeeded", "error": None},
    ]  # fmt: skip
    live = ended_view(log, "b")
    assert live is not None and live["finishedAt"] is None and "result" not in live
    assert ended_view(log, "nope") is None


@settings(max_examples=examples(300), deadline=None)
@given(log=valid_logs | any_logs)
def test_the_view_ends_a_task_as_the_whole_logs_audit_does(log: list[dict]) -> None:
    whole = audit(log).tasks
    for task_id in IDS:
        view = ended_view(log, task_id)
        history = whole.get(task_id)
        note(f"{task_id}: {view and view['status']} vs {history and history.state}")
        if history is None or history.state not in ENDED:
            continue
        assert view is not None and view["status"] == history.state
        assert view["attempt"] == history.attempts
