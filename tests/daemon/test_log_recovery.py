"""Starting on an existing log: SnerdMQ's own lines, garbage and a torn tail."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from daemonkit import events_of


def snerdmq_line(task_id: str, **fields: object) -> bytes:
    """A state line as SnerdMQ's Rust daemon writes it (no ``event`` field)."""
    record = {
        "taskId": task_id, "taskType": "t", "taskData": '{"from":"rust"}', "retryCount": 0,
        "maxRetries": 3, "retryAfterHours": 0.0, "retryAfterTime": None,
        "executeAt": "2023-01-01T00:00:00Z", "deletedAt": None, "urgencyScore": 0.0,
        **fields,
    }  # fmt: skip
    return orjson.dumps(record) + b"\n"


def write_log(storage: Path, data: bytes) -> None:
    (storage / "tasks").mkdir(parents=True, exist_ok=True)
    (storage / "tasks" / "tasks.log").write_bytes(data)


async def test_snerdmq_state_lines_replay_as_upserts(spawn, storage) -> None:
    write_log(
        storage,
        snerdmq_line("legacy", urgencyScore=1.0)
        + snerdmq_line("finished")
        + snerdmq_line("finished", deletedAt="2023-01-01T00:01:00Z")
        + snerdmq_line("updated", taskData='"v1"')
        + snerdmq_line("updated", taskData='"v2"', unknownField={"kept": 1}),
    )
    wire = await spawn(workers=1, register=("t",))
    first = await wire.expect("execute")
    assert first == {"action": "execute", "task_id": "legacy", "task_type": "t",
                     "task_data": '{"from":"rust"}', "attempt": 1}  # fmt: skip
    await wire.result("legacy")
    second = await wire.expect("execute", task_id="updated")
    assert second["task_data"] == '"v2"'
    await wire.result("updated")
    await wire.quiet("execute", task_id="finished")
    await wire.logged("updated", "succeeded")
    [done] = events_of(storage, "updated", "succeeded")
    assert done["unknownField"] == {"kept": 1}  # unknown fields are kept, not dropped


@pytest.mark.process
@pytest.mark.damaged_log  # lines written by hand that no writer of ours would write
async def test_garbage_and_a_torn_tail_are_skipped_and_reported(spawn, storage) -> None:
    write_log(
        storage,
        snerdmq_line("before")
        + b"this is not json\n"
        + b"[1,2,3]\n"
        + snerdmq_line("after")
        + b'{"taskId":"torn","taskType":"t","taskD',  # a write cut short by a crash
    )
    wire = await spawn(register=("t",))
    got = {(await wire.expect("execute"))["task_id"] for _ in range(2)}
    assert got == {"before", "after"}
    stats = await wire.stats()
    assert stats["log"]["skipped"] >= 2
    assert any("skip" in line.lower() for line in wire.client.stderr_tail)
    for task_id in got:
        await wire.result(task_id)
    await wire.ack("new-after-repair")
    await wire.expect("execute", task_id="new-after-repair")
    # the torn tail was sealed off: the new task's line is not glued to it
    assert events_of(storage, "new-after-repair", "enqueued")
