"""Light lines name their task in ``task``, never ``taskId`` (issue 9.2); logs written
before that carried ``taskId`` on them and still read the same."""

from __future__ import annotations

from snerd.projections import events as ev
from snerd.projections.decide import claim, progress, purge, release
from snerd.projections.history import audit
from snerd.projections.state import empty, fold
from snerd.projections.task import Task


def _log(name: str) -> list[dict]:
    return [
        {"event": "enqueued", "taskId": "a", "taskType": "t", "seq": 1},
        {"event": "claimed", name: "a", "daemon": "d", "ts": 1000, "attempt": 1, "seq": 2},
        {"event": "progress", name: "a", "attempt": 1, "data": 40, "seq": 3},
        {"event": "claim_released", name: "a", "attempt": 1, "reason": "drain", "seq": 4},
        {"event": "claimed", name: "a", "daemon": "e", "ts": 2000, "attempt": 2, "seq": 5},
    ]


def test_new_and_old_light_lines_fold_alike() -> None:
    new, _ = fold(empty(), _log("task"))
    old, _ = fold(empty(), _log("taskId"))
    for state in (new, old):
        task = state.tasks["a"]
        assert task.claim is not None and (task.claim.daemon, task.attempt) == ("e", 2)
    assert [t.event for t in audit(_log("task"), 3.0).tasks["a"].transitions] == [
        t.event for t in audit(_log("taskId"), 3.0).tasks["a"].transitions
    ]


def test_our_writers_put_no_task_id_on_light_lines() -> None:
    task = Task(id="a", type="t", attempt=1)
    lines = [
        claim(task, now=1.0, daemon="d", lease_seconds=60),
        progress(task, 50, now=1.0, daemon="d"),
        release(task, reason="drain", now=1.0, daemon="d"),
    ]
    for line in lines:
        assert ev.F_TASK_ID not in line and line[ev.F_TASK] == "a"
        assert ev.task_id_of(line) == "a"
        assert ev.decode(line).task_id == "a"  # type: ignore[union-attr]


def test_a_purge_names_its_key_without_task_id() -> None:
    state, _ = fold(empty(), [
        {"event": "enqueued", "taskId": "x", "taskType": "t", "seq": 1},
        {"event": "dead_lettered", "taskId": "x", "taskType": "t", "seq": 2},
    ])  # fmt: skip
    records, refusal = purge(state, "x", now=3.0, daemon="d")
    assert refusal is None
    [line] = records
    assert ev.F_TASK_ID not in line and line[ev.F_DLQ_KEY] == "x"
    after, _ = fold(state, records)
    assert "x" not in after.dlq
