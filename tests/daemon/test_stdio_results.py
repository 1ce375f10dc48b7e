"""Results over stdio (issue 11.2): a ``result`` line's ``result`` field is recorded with
the success, and ``get`` returns an ended task from the stored history (result,
attempts, timings), through the raw protocol and through ``snerd.Client``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from daemonkit import WAIT, ForkingClient, base_env, events_of

from snerd.projections.commands import MAX_RESULT_BYTES
from snerd.rpc.client import Client


async def test_a_result_field_is_recorded_and_get_returns_the_completed_task(
    spawn: Any, storage: Path
) -> None:
    wire = await spawn(register=("t",))
    await wire.ack("a", max_retries=1)
    await wire.expect("execute", task_id="a", attempt=1)
    await wire.result("a", ok=False, error="flaky")
    await wire.expect("execute", task_id="a", attempt=2)
    await wire.result("a", result={"rows": [1, 2, 3]})
    [done] = await wire.logged("a", "succeeded")
    assert done["result"] == {"rows": [1, 2, 3]}
    task = await wire.get("a")
    assert task["status"] == "completed" and task["result"] == {"rows": [1, 2, 3]}
    assert task["attempt"] == 2 and task["taskId"] == "a" and task["taskType"] == "t"
    assert [a["outcome"] for a in task["attempts"]] == ["retry_scheduled", "succeeded"]
    assert task["attempts"][0]["error"] == "flaky"
    assert task["enqueuedAt"] and task["finishedAt"]


async def test_a_result_past_the_bound_fails_the_attempt(spawn: Any, storage: Path) -> None:
    wire = await spawn(register=("t",))
    await wire.ack("big", max_retries=0)
    await wire.expect("execute", task_id="big")
    await wire.result("big", result="x" * MAX_RESULT_BYTES)
    notice = await wire.expect("max_retries_reached", task_id="big")
    assert "MAX_RESULT_BYTES" in str(notice), notice
    assert not events_of(storage, "big", "succeeded")
    task = await wire.get("big")
    assert task["status"] == "dead_lettered"


async def test_an_sdk_result_without_the_field_records_none(spawn: Any, storage: Path) -> None:
    wire = await spawn(register=("t",))
    await wire.ack("a")
    await wire.expect("execute", task_id="a")
    await wire.result("a")
    [done] = await wire.logged("a", "succeeded")
    assert "result" not in done
    assert (await wire.get("a"))["result"] is None


async def test_the_client_sends_a_handlers_return_value(storage: Path) -> None:
    client = ForkingClient(storage, env=base_env(clock=False))  # Client, forked
    await client.start()
    try:

        async def double(task_id: str, data: Any) -> Any:
            return {"double": data["n"] * 2}

        async def unserializable(task_id: str, data: Any) -> Any:
            return {1, 2}

        client.register("double", double)
        client.register("bad", unserializable)
        await client.enqueue("d", "double", {"n": 21})
        await client.enqueue("b", "bad", {}, max_retries=0)
        task = await _ended(client, "d")
        assert task["status"] == "completed" and task["result"] == {"double": 42}
        task = await _ended(client, "b")
        assert task["status"] == "dead_lettered"
        assert "not JSON-serializable" in str(task["LastJobError"])
    finally:
        assert await client.close(timeout=15) == 0


async def _ended(client: Client, task_id: str) -> dict[str, Any]:
    """Ask ``get`` round trip by round trip until the task has ended."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while (task := await client.get(task_id))["status"] not in ("completed", "dead_lettered"):
        assert loop.time() < deadline, task
        await asyncio.sleep(0.01)
    return task
