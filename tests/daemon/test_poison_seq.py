"""Issue 12.3 through the real daemon: a record with seq 2**64 - 1 no longer wedges it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from daemonkit import Wire, events_of

from snerd.tools.replay import replay

Spawn = Callable[..., Awaitable[Wire]]


def write_log(storage: Path, *records: dict[str, object]) -> None:
    (storage / "tasks").mkdir(parents=True, exist_ok=True)
    data = b"".join(orjson.dumps(r) + b"\n" for r in records)
    (storage / "tasks" / "tasks.log").write_bytes(data)


@pytest.mark.damaged_log  # lines written by hand that no writer of ours would write
async def test_a_record_with_seq_2_64_minus_1_is_skipped_and_writes_go_on(
    spawn: Spawn, storage: Path
) -> None:
    write_log(
        storage,
        {"event": "enqueued", "taskId": "before", "taskType": "t", "seq": 1, "ts": 1},
        {"event": "enqueued", "taskId": "poison", "taskType": "t", "seq": 2**64 - 1, "ts": 2},
    )
    wire = await spawn(register=("t",))
    await wire.expect("execute", task_id="before")
    await wire.ack("after")  # was: storage_error "Integer exceeds 64-bit range", forever
    await wire.expect("execute", task_id="after")
    await wire.result("after")
    await wire.logged("after", "succeeded")
    [enqueued] = events_of(storage, "after", "enqueued")
    assert 2 <= enqueued["seq"] <= 4  # numbering continues after the last usable seq
    stats = await wire.stats()
    assert stats["log"]["skipped"] == 1
    reply = await wire.request("get", task_id="poison")
    assert reply["code"] == "unknown_task"
    result = CliRunner().invoke(replay, [str(storage), "--verify", "--json"])
    assert result.exit_code == 1
    problems = [p["problem"] for p in orjson.loads(result.output)["problems"]]
    assert any("seq_out_of_range" in p and "poison" in p for p in problems), problems


@pytest.mark.damaged_log  # lines written by hand that no writer of ours would write
async def test_a_record_nested_past_the_encoder_does_not_block_a_restart(
    spawn: Spawn, storage: Path
) -> None:
    """Issue 12.2 through the real daemon: an enqueued record whose taskData nests 300
    deep made the start-up replay raise (exit 1 on every start) while the incremental
    fold skipped it. Now every fold judges it unusable alike, and the daemon runs."""
    deep: object = []
    for _ in range(300):
        deep = [deep]
    (storage / "tasks").mkdir(parents=True, exist_ok=True)
    lines = [
        orjson.dumps({"event": "enqueued", "taskId": "before", "taskType": "t", "seq": 1}),
        b'{"event":"enqueued","taskId":"poison","taskType":"t","seq":2,"taskData":'
        + b"[" * 300 + b"]" * 300 + b"}",
    ]
    (storage / "tasks" / "tasks.log").write_bytes(b"\n".join(lines) + b"\n")
    wire = await spawn(register=("t",))
    await wire.expect("execute", task_id="before")
    reply = await wire.request("get", task_id="poison")
    assert reply["code"] == "unknown_task"
    await wire.ack("after")  # and it goes on writing
    await wire.expect("execute", task_id="after")
    result = CliRunner().invoke(replay, [str(storage), "--verify", "--json"])
    assert result.exit_code == 1  # the same record, reported as unusable by --verify
