"""Bad input never kills the daemon: a clear error naming the problem, and it goes on."""

from __future__ import annotations

import orjson
import pytest
from daemonkit import Wire, read_log

MAX_LINE = 1 << 20


async def still_works(wire: Wire, task_id: str = "after") -> None:
    """The daemon still enqueues and executes, and every log line is a JSON object."""
    await wire.ack(task_id)
    await wire.expect("execute", task_id=task_id)
    await wire.result(task_id)
    await wire.barrier()
    raw = (wire.storage / "tasks" / "tasks.log").read_bytes()
    assert raw.endswith(b"\n")
    assert all(isinstance(orjson.loads(line), dict) for line in raw.splitlines())
    assert wire.client.returncode is None


async def error_for(wire: Wire, line: bytes) -> dict:
    await wire.raw(line)
    return await wire.expect("error")


@pytest.mark.parametrize(
    "line",
    [
        b"{not json\n",
        b'{"action": "enqueue", "task_id": "a",\n',
        b"[1, 2, 3]\n",
        b'"a string"\n',
        b"42\n",
        b"null\n",
        b'{"action":"stats","n":1e999}\n',
        b'{"action":"enqueue","task_id":"a","task_type":"t","task_data":"\xff\xfe"}\n',
    ],
)
async def test_not_json_or_not_an_object(daemon: Wire, line: bytes) -> None:
    error = await error_for(daemon, line)
    assert error["code"] == "invalid_json"
    assert error["message"]
    await still_works(daemon)


@pytest.mark.parametrize(
    ("message", "code", "field"),
    [
        ({"action": "frobnicate", "task_id": "x"}, "unknown_action", "action"),
        ({"action": "ENQUEUE", "task_id": "x"}, "unknown_action", "action"),
        ({"action": 7, "task_id": "x"}, "unknown_action", "action"),
        ({"task_id": "x"}, "missing_field", "action"),
        ({"action": "enqueue", "task_id": "x"}, "missing_field", "task_type"),
        ({"action": "enqueue", "task_type": "t"}, "missing_field", "task_id"),
        ({"action": "enqueue", "task_id": "x", "task_type": None}, "missing_field", "task_type"),
        ({"action": "enqueue", "task_id": "x", "task_type": ""}, "invalid_field", "task_type"),
        ({"action": "enqueue", "task_id": "x", "task_type": 3}, "invalid_field", "task_type"),
        ({"action": "result", "task_id": "x"}, "missing_field", "status"),
        ({"action": "result", "task_id": "x", "status": "done"}, "invalid_field", "status"),
        ({"action": "result", "task_id": "x", "success": 1}, "invalid_field", "success"),
        ({"action": "progress"}, "missing_field", "task_id"),
        ({"action": "register"}, "missing_field", "task_type"),
        ({"action": "get", "task_id": 5}, "invalid_field", "task_id"),
        ({"action": "stats", "request_id": [1]}, "invalid_field", "request_id"),
        ({"action": "stats", "request_id": True}, "invalid_field", "request_id"),
    ],
)
async def test_unknown_action_and_missing_or_wrong_fields(
    daemon: Wire, message: dict, code: str, field: str
) -> None:
    error = await error_for(daemon, orjson.dumps(message) + b"\n")
    assert error["code"] == code
    assert error["field"] == field
    assert field in error["message"]
    if message.get("task_id") == "x":
        assert error["task_id"] == "x"
    await still_works(daemon)


@pytest.mark.parametrize(
    ("fields", "field", "shows"),
    [
        ({"max_retries": True}, "max_retries", "true"),
        ({"max_retries": -1}, "max_retries", "-1"),
        ({"max_retries": 2.5}, "max_retries", "2.5"),
        ({"max_retries": "3"}, "max_retries", '"3"'),
        ({"retry_after_hours": -0.5}, "retry_after_hours", "-0.5"),
        ({"retry_after_hours": False}, "retry_after_hours", "false"),
        ({"urgency_score": "high"}, "urgency_score", "high"),
        ({"auto_dedupe": 1}, "auto_dedupe", "1"),
        ({"execute_at": "tomorrow"}, "execute_at", "tomorrow"),
        ({"execute_at": "2024-13-45T99:00:00Z"}, "execute_at", "2024-13-45"),
        ({"execute_at": True}, "execute_at", "true"),
        ({"cron": "61 * * * *"}, "cron", "61"),
        ({"cron": "* * *"}, "cron", "* * *"),
        ({"cron": "@reboot"}, "cron", "@reboot"),
        ({"cron": "0 0 31 2 *"}, "cron", "0 0 31 2 *"),
        ({"cron": "H * * * *"}, "cron", "H"),
        ({"cron": 5}, "cron", "5"),
        ({"max_per_minute": 5}, "max_per_minute", "rate_limit_group"),
        ({"rate_limit_group": "g"}, "max_per_minute", "max_per_minute"),
        ({"rate_limit_group": "g", "max_per_minute": 0}, "max_per_minute", "0"),
        ({"webhook_url": "ftp://x"}, "webhook_url", "ftp://x"),
        ({"webhook_url": "http://"}, "webhook_url", "http://"),
        ({"max_execution_seconds": -1}, "max_execution_seconds", "-1"),
        ({"trigger_after_ids": "A"}, "trigger_after_ids", '"A"'),
        ({"trigger_after_ids": [""]}, "trigger_after_ids", '""'),
        ({"trigger_after_ids": ["bad-1"]}, "trigger_after_ids", "bad-1"),
    ],
)
async def test_invalid_enqueue_fields_are_named_with_the_value(
    daemon: Wire, fields: dict, field: str, shows: str
) -> None:
    reply = await daemon.enqueue("bad-1", "t", **fields)
    assert reply["action"] == "error", reply
    assert reply["code"] in ("invalid_field", "missing_field")
    assert reply["field"] == field
    assert reply["task_id"] == "bad-1"
    assert field in reply["message"] and shows in reply["message"], reply["message"]
    assert not [r for r in read_log(daemon.storage) if r.get("taskId") == "bad-1"]
    await still_works(daemon)


async def test_the_spec_example_error(daemon: Wire) -> None:
    await daemon.raw(b'{"action":"enqueue","task_id":"x","task_type":"t","max_retries":-1,'
                     b'"request_id":7}\n')  # fmt: skip
    error = await daemon.expect("error", request_id=7)
    assert error == {
        "action": "error", "code": "invalid_field",
        "message": "max_retries must be an integer >= 0, got -1",
        "task_id": "x", "field": "max_retries", "request_id": 7,
    }  # fmt: skip


async def test_unknown_fields_are_ignored(daemon: Wire) -> None:
    await daemon.ack("a", shards=4, future_option={"x": 1})
    await daemon.expect("execute", task_id="a")


async def test_zero_values_mean_absent(daemon: Wire) -> None:
    await daemon.ack("a", rate_limit_group="", max_per_minute=0, execute_at="", cron="",
                     webhook_url="", max_execution_seconds=0, pool="")  # fmt: skip
    execute = await daemon.expect("execute", task_id="a")
    assert "max_execution_seconds" not in execute


async def test_blank_lines_are_ignored_and_crlf_is_accepted(daemon: Wire) -> None:
    await daemon.raw(b"\n   \n\t\r\n")
    await daemon.raw(b'{"action":"enqueue","task_id":"crlf","task_type":"t"}\r\n')
    await daemon.expect("ack", task_id="crlf")
    await daemon.barrier()
    assert not daemon.taken("error")


async def test_a_line_longer_than_one_mebibyte_is_refused(daemon: Wire) -> None:
    big = b'{"action":"enqueue","task_id":"big","task_type":"t","task_data":"'
    big += b"x" * MAX_LINE + b'"}\n'
    await daemon.raw(big)
    error = await daemon.expect("error")
    assert error["code"] == "line_too_long"
    assert str(MAX_LINE) in error["message"]
    assert not [r for r in read_log(daemon.storage) if r.get("taskId") == "big"]
    await still_works(daemon)


async def test_a_line_of_exactly_one_mebibyte_is_accepted(daemon: Wire) -> None:
    head = b'{"action":"enqueue","task_id":"edge","task_type":"t","task_data":"'
    line = head + b"y" * (MAX_LINE - len(head) - 2) + b'"}'
    assert len(line) == MAX_LINE
    await daemon.raw(line + b"\n")
    await daemon.expect("ack", task_id="edge")
    execute = await daemon.expect("execute", task_id="edge")
    assert len(execute["task_data"]) == MAX_LINE - len(head) - 2


async def test_one_byte_over_the_limit_is_refused(daemon: Wire) -> None:
    head = b'{"action":"enqueue","task_id":"over","task_type":"t","task_data":"'
    line = head + b"y" * (MAX_LINE - len(head) - 1) + b'"}'
    assert len(line) == MAX_LINE + 1
    await daemon.raw(line + b"\n")
    assert (await daemon.expect("error"))["code"] == "line_too_long"
    await still_works(daemon)


async def test_lines_right_after_an_oversized_line_are_not_lost(daemon: Wire) -> None:
    """The lines that follow an oversized one in the same write are still read."""
    big = b'{"action":"stats","pad":"' + b"z" * (2 * MAX_LINE) + b'"}\n'
    follow = b'{"action":"enqueue","task_id":"next","task_type":"t","request_id":"n"}\n'
    await daemon.raw(big + follow)
    assert (await daemon.expect("error"))["code"] == "line_too_long"
    await daemon.expect("ack", task_id="next", timeout=3)


async def test_a_burst_of_garbage_keeps_the_daemon_and_log_intact(daemon: Wire) -> None:
    await daemon.ack("before", "unregistered")
    garbage = [
        b"\x00\x01\x02\n", b"}{\n", b'{"action":\n', b"[]\n", b'{"action":null}\n',
        b'{"action":"enqueue","task_id":"g","task_type":"t","max_retries":true}\n',
        b'{"action":"result","task_id":"before"}\n',
    ]  # fmt: skip
    await daemon.raw(b"".join(garbage))
    errors = [await daemon.expect("error") for _ in garbage]
    assert {e["code"] for e in errors} <= {"invalid_json", "missing_field", "invalid_field",
                                           "unknown_action"}  # fmt: skip
    assert (await daemon.get("before"))["status"] == "pending"
    enqueued = [r["taskId"] for r in read_log(daemon.storage) if r.get("event") == "enqueued"]
    assert enqueued == ["before"]
    await still_works(daemon)


async def test_task_ids_mentioning_clock_are_plain_tasks(daemon: Wire) -> None:
    """The test-only ``_clock`` line must not swallow real lines that contain the word."""
    await daemon.send({"action": "enqueue", "task_id": "nightly_clock_sync", "task_type": "t",
                       "task_data": "set_clock"})  # fmt: skip
    await daemon.expect("ack", task_id="nightly_clock_sync", timeout=3)


@pytest.mark.parametrize(
    "line", [b'{"action":"_clock","advance":"soon"}\n', b'"_clock"\n', b"{_clock\n"]
)
async def test_a_malformed_clock_line_is_refused_not_fatal(daemon: Wire, line: bytes) -> None:
    """Even the test-only ``_clock`` line is input: an error reply, and the daemon goes on."""
    await daemon.raw(line)
    error = await daemon.expect("error", timeout=3)
    assert error["code"] in ("invalid_json", "invalid_field", "unknown_action")
    await still_works(daemon)


@pytest.mark.parametrize(
    ("line", "code", "field"),
    [
        # issue 12.1: these single lines used to end the daemon silently
        (b'{"action":"enqueue","task_id":"deep","task_type":"t","task_data":'
         + b"[" * 255 + b"]" * 255 + b"}\n", "invalid_field", "task_data"),
        (b"[" * 1000 + b"]" * 1000 + b"\n", "invalid_json", None),
        (b'{"action":"progress","task_id":"p","data":' + b'{"a":' * 200 + b"1"
         + b"}" * 200 + b"}\n", "invalid_field", "data"),
    ],
)  # fmt: skip
async def test_deep_nesting_is_refused_and_the_daemon_goes_on(
    daemon: Wire, line: bytes, code: str, field: str | None
) -> None:
    error = await error_for(daemon, line)
    assert error["code"] == code
    assert error.get("field") == field
    await still_works(daemon)


async def test_nesting_at_the_bound_is_accepted(daemon: Wire) -> None:
    data = [0]
    for _ in range(62):  # 63 levels inside the message object: the deepest accepted
        data = [data]
    await daemon.ack("edge", task_data=data)
    await daemon.expect("execute", task_id="edge")
