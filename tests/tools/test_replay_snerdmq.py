"""``snerdmq replay`` on SnerdMQ's own log says what it cannot tell (issue 9.5)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
from click.testing import CliRunner

from snerd.tools.replay import replay

T = "2026-01-01T00:00:00.000Z"


def _line(task_id: str, **fields: object) -> bytes:
    record = {"taskId": task_id, "taskType": "t", "taskData": "{}", "retryCount": 0,
              "maxRetries": 3, "retryAfterHours": 0, "executeAt": T, "retryAfterTime": T,
              "createdAt": T, "deletedAt": None, "urgencyScore": 0, **fields}  # fmt: skip
    return orjson.dumps(record) + b"\n"


def test_a_max_retries_0_tombstone_without_error_is_flagged(tmp_path: Path) -> None:
    log = tmp_path / "tasks.log"
    log.write_bytes(
        _line("once", maxRetries=0) + _line("once", maxRetries=0, deletedAt=T)  # ambiguous
        + _line("done") + _line("done", deletedAt=T)  # maxRetries 3, no error: completed
        + _line("dead", maxRetries=0) + _line("dead", maxRetries=0, deletedAt=T,
                                               LastJobError={"error": "x", "retry_worthy": True})
    )  # fmt: skip
    data = json.loads(CliRunner().invoke(replay, [str(log), "--json"]).output)
    assert data["ambiguous_completed"] == ["once"]
    assert data["tasks"]["once"]["state"] == "completed"
    assert data["tasks"]["dead"]["state"] == "dead_lettered"
    result = CliRunner().invoke(replay, [str(log)], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "1 task(s) ended on a SnerdMQ line with maxRetries 0 and no error" in result.output
    assert "once" in result.output
