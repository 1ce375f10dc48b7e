"""The basic round trip over stdio: register, enqueue, execute, result, progress, views."""

from __future__ import annotations

import orjson
import pytest
from daemonkit import T0, Wire, check_stdout, events_of, read_log


async def test_enqueue_is_acked_then_executed(daemon: Wire) -> None:
    reply = await daemon.enqueue("a", "t", task_data='{"x": 1}')
    assert reply == {"action": "ack", "task_id": "a", "request_id": reply["request_id"]}
    execute = await daemon.expect("execute", task_id="a")
    assert execute == {
        "action": "execute", "task_id": "a", "task_type": "t",
        "task_data": '{"x": 1}', "attempt": 1,
    }  # fmt: skip


async def test_ack_is_written_after_the_enqueue_is_in_the_log(daemon: Wire) -> None:
    await daemon.ack("a")
    assert events_of(daemon.storage, "a", "enqueued")


@pytest.mark.parametrize(
    "result",
    [
        {"status": "success"},
        {"status": "SUCCESS"},
        {"success": True},
        {"status": "success", "success": True},
    ],
)
async def test_both_success_forms_complete_the_task(daemon: Wire, result: dict) -> None:
    await daemon.ack("a", max_retries=0)
    await daemon.expect("execute", task_id="a")
    await daemon.send({"action": "result", "task_id": "a", **result})
    await daemon.barrier()
    [done] = events_of(daemon.storage, "a", "succeeded")
    assert done["deletedAt"] is not None
    assert (await daemon.get("a"))["status"] == "completed"  # from the stored history


@pytest.mark.parametrize(
    ("result", "message"),
    [
        ({"status": "error", "error_msg": "SMTP 451"}, "SMTP 451"),
        ({"status": "Error", "error_msg": "boom"}, "boom"),
        ({"success": False, "error": "seed form"}, "seed form"),
        ({"success": False, "error": "e", "error_msg": "wins"}, "wins"),
    ],
)
async def test_both_failure_forms_fail_the_attempt(
    daemon: Wire, result: dict, message: str
) -> None:
    await daemon.ack("a", max_retries=0)
    await daemon.expect("execute", task_id="a")
    await daemon.send({"action": "result", "task_id": "a", **result})
    dead = await daemon.expect("max_retries_reached", task_id="a")
    assert dead["last_error"] == message
    assert dead["reason"] == "retries_exhausted"


async def test_status_and_success_that_disagree_are_refused(daemon: Wire) -> None:
    await daemon.ack("a")
    await daemon.expect("execute", task_id="a")
    reply = await daemon.request("result", task_id="a", status="success", success=False)
    assert reply["action"] == "error" and reply["code"] == "invalid_field"
    assert reply["task_id"] == "a"
    await daemon.result("a")  # the attempt is still running and can end normally
    await daemon.barrier()
    assert events_of(daemon.storage, "a", "succeeded")


@pytest.mark.parametrize(
    ("task_data", "stored"),
    [
        ('{"to": "u@x.io"}', '{"to": "u@x.io"}'),  # a string is stored verbatim
        ("not json at all", "not json at all"),
        ({"to": "u@x.io", "n": [1, 2]}, '{"to":"u@x.io","n":[1,2]}'),  # object: compact
        ([1, "two"], '[1,"two"]'),
        (None, "null"),
    ],
)
async def test_task_data_string_or_object(daemon: Wire, task_data: object, stored: str) -> None:
    fields = {} if task_data is None else {"task_data": task_data}
    await daemon.ack("a", **fields)
    execute = await daemon.expect("execute", task_id="a")
    assert execute["task_data"] == stored
    assert events_of(daemon.storage, "a", "enqueued")[0]["taskData"] == stored


async def test_nothing_is_executed_for_an_unregistered_type(spawn) -> None:
    wire = await spawn(register=("t",))
    await wire.ack("a", "other")
    await wire.quiet("execute")
    await wire.register("other")
    await wire.expect("execute", task_id="a", task_type="other")


async def test_register_after_enqueue_starts_dispatch(spawn) -> None:
    wire = await spawn()
    await wire.ack("a")
    await wire.quiet("execute")
    await wire.register("t")
    await wire.expect("execute", task_id="a")


async def test_register_is_idempotent_and_silent(daemon: Wire) -> None:
    await daemon.register("t", "t")
    await daemon.barrier()
    assert not daemon.taken("error")


async def test_progress_is_forwarded_and_recorded(daemon: Wire) -> None:
    await daemon.ack("a", task_data={"n": 1})
    await daemon.expect("execute", task_id="a")
    await daemon.send({"action": "progress", "task_id": "a", "data": {"pct": 50}})
    forwarded = await daemon.expect("progress", task_id="a")
    assert forwarded == {"action": "progress", "task_id": "a", "task_type": "t",
                         "data": {"pct": 50}}  # fmt: skip
    await daemon.result("a")
    await daemon.barrier()
    records = events_of(daemon.storage, "a", "progress")
    assert records and records[-1]["data"] == {"pct": 50}
    assert records[-1]["attempt"] == 1


async def test_progress_order_is_kept(daemon: Wire) -> None:
    await daemon.ack("a")
    await daemon.expect("execute", task_id="a")
    for pct in range(10):
        await daemon.send({"action": "progress", "task_id": "a", "data": pct})
    got = [(await daemon.expect("progress", task_id="a"))["data"] for _ in range(10)]
    assert got == list(range(10))
    await daemon.result("a")
    await daemon.barrier()
    assert events_of(daemon.storage, "a", "progress")[-1]["data"] == 9


async def test_progress_for_a_task_not_running_gets_no_reply(daemon: Wire) -> None:
    await daemon.send({"action": "progress", "task_id": "ghost", "data": 1})
    await daemon.ack("queued", "nobody-runs-this")
    await daemon.send({"action": "progress", "task_id": "queued", "data": 2})
    await daemon.barrier()
    assert not daemon.taken("progress") and not daemon.taken("error")


@pytest.mark.process
async def test_stats_counts_and_daemon_block(spawn) -> None:
    wire = await spawn(register=("t",), workers=1)
    await wire.ack("run", "t")
    await wire.expect("execute", task_id="run")
    await wire.ack("waiting", "t")
    await wire.ack("later", "t", execute_at=T0 + 3600)
    await wire.ack("child", "t", trigger_after_ids=["later"])
    await wire.register("u")
    stats = await wire.stats()
    assert stats["active"] == 1
    assert stats["scheduled"] == 1
    assert stats["blocked"] == 1
    daemon_block = stats["daemon"]
    assert daemon_block["pid"] == wire.pid
    assert daemon_block["max_workers"] == 1
    assert daemon_block["in_flight"] == 1
    assert set(daemon_block["registered"]) == {"t", "u"}
    assert daemon_block["draining"] is False
    assert isinstance(daemon_block["id"], str) and daemon_block["id"]


async def test_stats_uses_the_spec_keys(daemon: Wire) -> None:
    """specs/protocol.md §4.3."""
    await daemon.ack("a", "unregistered")
    stats = await daemon.stats()
    for key in ("pending", "scheduled", "blocked", "active", "dead_lettered", "phases",
                "daemon", "log"):  # fmt: skip
        assert key in stats, f"stats lacks {key!r}: {sorted(stats)}"
    assert stats["pending"] == 1
    assert stats["phases"]["ready"] == 1
    assert stats["log"]["records"] >= 1 and stats["log"]["bytes"] > 0


async def test_get_returns_the_latest_state_in_log_field_names(daemon: Wire) -> None:
    await daemon.ack("a", "unregistered", task_data={"k": "v"}, max_retries=5,
                     retry_after_hours=0.5, urgency_score=2.5, pool="p")  # fmt: skip
    task = await daemon.get("a")
    assert task["taskId"] == "a"
    assert task["taskType"] == "unregistered"
    assert task["taskData"] == '{"k":"v"}'
    assert task["retryCount"] == 0
    assert task["maxRetries"] == 5
    assert task["retryAfterHours"] == 0.5
    assert task["urgencyScore"] == 2.5
    assert task["pool"] == "p"


async def test_get_status_values_follow_the_spec(daemon: Wire) -> None:
    """specs/protocol.md §3.5: pending, scheduled, blocked, active, dead_lettered."""
    await daemon.ack("q", "unregistered")
    await daemon.ack("s", "unregistered", execute_at=T0 + 60)
    await daemon.ack("b", "unregistered", trigger_after_ids=["q"])
    await daemon.ack("r", "t")
    await daemon.expect("execute", task_id="r")
    await daemon.ack("d", "t", max_retries=0)
    await daemon.expect("execute", task_id="d")
    await daemon.result("d", ok=False, error="x")
    await daemon.expect("max_retries_reached", task_id="d")
    got = {tid: (await daemon.get(tid))["status"] for tid in "qsbrd"}
    assert got == {"q": "pending", "s": "scheduled", "b": "blocked", "r": "active",
                   "d": "dead_lettered"}  # fmt: skip


async def test_get_of_an_unknown_task(daemon: Wire) -> None:
    reply = await daemon.request("get", task_id="nope")
    assert reply["action"] == "error"
    assert reply["code"] == "unknown_task" and reply["task_id"] == "nope"


async def test_get_right_after_a_pipelined_enqueue_sees_the_task(daemon: Wire) -> None:
    """§9.3: replies about one task_id come in the order of the messages."""
    await daemon.send({"action": "enqueue", "task_id": "p", "task_type": "x", "request_id": 1})
    await daemon.send({"action": "get", "task_id": "p", "request_id": 2})
    first = await daemon.expect(None, task_id="p")
    assert first["action"] == "ack", first
    second = await daemon.expect(None, request_id=2)
    assert second["action"] == "task", second


async def test_cancel_a_queued_task(daemon: Wire) -> None:
    await daemon.ack("a", "unregistered")
    reply = await daemon.request("cancel", task_id="a")
    assert reply["action"] == "ok" and reply["of"] == "cancel" and reply["task_id"] == "a"
    assert events_of(daemon.storage, "a", "cancelled")
    await daemon.register("unregistered")
    await daemon.quiet("execute", task_id="a")
    again = await daemon.request("cancel", task_id="a")
    assert again["action"] == "error" and again["code"] == "unknown_task"


async def test_cancel_unknown_task(daemon: Wire) -> None:
    reply = await daemon.request("cancel", task_id="nope")
    assert reply["code"] == "unknown_task" and reply["task_id"] == "nope"


async def test_cancel_of_a_running_task_is_refused(daemon: Wire) -> None:
    """§3.5: invalid_state while running (the SDKs cannot stop a handler)."""
    await daemon.ack("a")
    await daemon.expect("execute", task_id="a")
    reply = await daemon.request("cancel", task_id="a")
    assert reply["action"] == "error" and reply["code"] == "invalid_state"
    assert reply["task_id"] == "a"
    await daemon.result("a")
    await daemon.logged("a", "succeeded")


async def test_cancel_of_a_dead_lettered_task_is_refused(daemon: Wire) -> None:
    await daemon.ack("a", max_retries=0)
    await daemon.expect("execute", task_id="a")
    await daemon.result("a", ok=False, error="x")
    await daemon.expect("max_retries_reached", task_id="a")
    reply = await daemon.request("cancel", task_id="a")
    assert reply["code"] == "invalid_state"
    assert (await daemon.get("a"))["status"] == "dead_lettered"


async def test_cancelled_id_may_be_reused(daemon: Wire) -> None:
    await daemon.ack("a", "unregistered")
    await daemon.request("cancel", task_id="a")
    await daemon.ack("a", "t")
    await daemon.expect("execute", task_id="a")


async def test_completed_id_may_be_reused(daemon: Wire) -> None:
    await daemon.ack("a")
    await daemon.expect("execute", task_id="a")
    await daemon.result("a")
    await daemon.barrier()
    await daemon.ack("a")
    second = await daemon.expect("execute", task_id="a")
    assert second["attempt"] == 1


async def test_request_id_is_echoed_string_or_int(daemon: Wire) -> None:
    await daemon.send({"action": "stats", "request_id": 42})
    assert (await daemon.expect("stats"))["request_id"] == 42
    await daemon.send({"action": "get", "task_id": "x", "request_id": "abc"})
    assert (await daemon.expect("error", task_id="x"))["request_id"] == "abc"
    await daemon.send({"action": "stats"})
    assert "request_id" not in await daemon.expect("stats")


async def test_log_lines_are_json_with_snerdmq_fields(daemon: Wire) -> None:
    await daemon.ack("a", task_data={"z": 1})
    await daemon.expect("execute", task_id="a")
    await daemon.result("a", ok=False, error="first")
    await daemon.expect("execute", task_id="a")
    await daemon.result("a")
    await daemon.barrier()
    raw = (daemon.storage / "tasks" / "tasks.log").read_bytes().splitlines()
    assert all(isinstance(orjson.loads(line), dict) for line in raw)
    full = [r for r in read_log(daemon.storage) if r.get("event") in ("enqueued",
            "retry_scheduled", "succeeded")]  # fmt: skip
    assert [r["event"] for r in full] == ["enqueued", "retry_scheduled", "succeeded"]
    for record in full:
        for key in ("taskId", "taskType", "taskData", "retryCount", "maxRetries",
                    "retryAfterHours", "retryAfterTime", "executeAt", "deletedAt",
                    "urgencyScore"):  # fmt: skip
            assert key in record, (key, record)
    assert full[1]["retryCount"] == 1
    assert full[1]["LastJobError"] == {"error": "first", "retry_worthy": True}
    assert full[1]["LastErrorObj"] == "first"
    assert full[2]["deletedAt"] is not None


async def test_a_result_for_an_unknown_task(daemon: Wire) -> None:
    reply = await daemon.request("result", task_id="nope", status="success")
    assert reply["action"] == "error" and reply["code"] == "unknown_task"
    assert reply["task_id"] == "nope"


async def test_a_second_result_is_refused(daemon: Wire) -> None:
    await daemon.ack("a")
    await daemon.expect("execute", task_id="a")
    await daemon.result("a")
    reply = await daemon.request("result", task_id="a", status="success")
    assert reply["code"] in ("not_active", "unknown_task")
    await daemon.barrier()
    assert len(events_of(daemon.storage, "a", "succeeded")) == 1


async def test_a_result_pinned_to_another_attempt_is_refused(daemon: Wire) -> None:
    await daemon.ack("a")
    await daemon.expect("execute", task_id="a", attempt=1)
    reply = await daemon.request("result", task_id="a", status="success", attempt=2)
    assert reply["code"] == "not_active"
    await daemon.result("a", attempt=1)
    await daemon.barrier()
    assert events_of(daemon.storage, "a", "succeeded")


async def test_progress_sent_right_before_the_result_is_still_forwarded(daemon: Wire) -> None:
    """§3.3: progress received while the attempt runs is echoed, even if the result follows
    at once (the SDKs send the last progress and the result back to back)."""
    await daemon.ack("a")
    await daemon.expect("execute", task_id="a")
    await daemon.raw(
        b'{"action":"progress","task_id":"a","data":"last"}\n'
        b'{"action":"result","task_id":"a","status":"success"}\n'
    )
    await daemon.logged("a", "succeeded")
    assert events_of(daemon.storage, "a", "progress")[-1]["data"] == "last"
    forwarded = await daemon.expect("progress", task_id="a", timeout=3)
    assert forwarded["data"] == "last"


@pytest.mark.process
async def test_stdout_carries_only_protocol_lines(spawn) -> None:
    """Even with debug diagnostics on, stdout has nothing but JSON protocol lines."""
    wire = await spawn(register=("t",), env={"SNERD_LOG_LEVEL": "debug"})
    await wire.ack("a", task_data={"x": 1})
    await wire.expect("execute", task_id="a")
    await wire.send({"action": "progress", "task_id": "a", "data": [1, 2]})
    await wire.send({"action": "progress", "task_id": "ghost", "data": 1})
    await wire.raw(b"garbage\n{}\n")
    await wire.result("a", ok=False, error="e")
    await wire.expect("execute", task_id="a")
    await wire.result("a")
    await wire.stats()
    await wire.client.close_stdin()
    assert await wire.client.wait(timeout=10) == 0
    lines = wire.stdout_lines()
    assert len(lines) >= 6
    check_stdout(lines)
    assert {orjson.loads(line)["action"] for line in lines} <= {
        "ack", "execute", "progress", "error", "stats", "task", "ok", "max_retries_reached",
    }  # fmt: skip
    assert wire.client.stderr_tail  # the diagnostics went to stderr


async def test_unicode_ids_and_data_round_trip(daemon: Wire) -> None:
    task_id = "über-✓-😀"
    data = 'line one\nline two \u2028 \u2029 "quoted" \\ \x00 😀'
    await daemon.ack(task_id, task_data=data)
    execute = await daemon.expect("execute", task_id=task_id)
    assert execute["task_data"] == data
    await daemon.result(task_id, ok=False, error="fehlgeschlagen ✗")
    retry = await daemon.expect("execute", task_id=task_id)
    assert retry["attempt"] == 2
    assert (await daemon.get(task_id))["LastErrorObj"] == "fehlgeschlagen ✗"


async def test_get_of_a_running_task_shows_attempt_claim_and_progress(daemon: Wire) -> None:
    await daemon.ack("a")
    await daemon.expect("execute", task_id="a")
    await daemon.send({"action": "progress", "task_id": "a", "data": {"pct": 10}})
    await daemon.expect("progress", task_id="a")
    task = await daemon.get("a")
    assert task["status"] == "active" and task["attempt"] == 1
    assert task["claim"]["attempt"] == 1 and task["claim"]["daemon"]
    assert task["progress"] == {"pct": 10}
