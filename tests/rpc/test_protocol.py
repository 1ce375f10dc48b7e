"""rpc/protocol.py: inbound parsing, outbound encoders, SDK compatibility, fuzzing."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_budget import examples

from snerd.errors import ProtocolError
from snerd.rpc import protocol as p
from snerd.rpc.protocol import (
    MAX_LINE_BYTES,
    Cancel,
    Command,
    Enqueue,
    Get,
    InvalidMessage,
    Progress,
    Register,
    Requeue,
    Result,
    Stats,
    encode_command,
    parse_line,
)

JAN1 = datetime(2024, 1, 1, tzinfo=UTC).timestamp()


def line(**msg: Any) -> bytes:
    """A line exactly as the official Python SDK writes it (stdlib json + newline)."""
    return (json.dumps(msg) + "\n").encode()


def rejected(raw: bytes | str) -> InvalidMessage:
    with pytest.raises(InvalidMessage) as info:
        parse_line(raw)
    return info.value


def enqueue_error(**fields: Any) -> InvalidMessage:
    msg = {"action": "enqueue", "task_id": "t1", "task_type": "email", **fields}
    return rejected(json.dumps(msg))


# ------------------------------------------------------------------ round trips

COMMANDS: list[Command] = [
    Register("email"),
    Register("email", request_id=1),
    Enqueue("t1", "email"),
    Enqueue(
        "t2",
        "email",
        task_data='{"to": "a@b.c"}',
        max_retries=0,
        retry_after_hours=0.25,
        auto_dedupe=True,
        urgency_score=-3.5,
        rate_limit_group="api",
        max_per_minute=100,
        execute_at=JAN1 + 0.125,
        cron="0 */5 * * * *",
        webhook_url="https://hooks.example.com/x?y=1",
        max_execution_seconds=2.5,
        pool="gpu",
        trigger_after_ids=("a", "b"),
        request_id="r-1",
    ),
    Result("t1", True),
    Result("t1", False, error="boom", attempt=2, request_id=9),
    Result("t1", False),
    Progress("t1", {"pct": 50, "stage": ["a", 1.5, None]}),
    Progress("t1", None, request_id="x"),
    Stats(),
    Stats(request_id=0),
    Cancel("t1"),
    Requeue("t1", request_id="q"),
    Get("t1"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: type(c).__name__)
def test_every_command_round_trips(command: Command) -> None:
    wire = encode_command(command)
    assert wire.endswith(b"\n") and wire.count(b"\n") == 1
    assert parse_line(wire) == command
    assert parse_line(wire.decode()) == command
    assert parse_line(wire.rstrip(b"\n")) == command


def test_commands_are_frozen() -> None:
    with pytest.raises(AttributeError):
        Cancel("t1").task_id = "t2"  # type: ignore[misc]


def test_enqueue_defaults() -> None:
    cmd = parse_line(line(action="enqueue", task_id="t1", task_type="email"))
    assert cmd == Enqueue(
        "t1",
        "email",
        task_data="null",
        max_retries=3,
        retry_after_hours=0.0,
        auto_dedupe=False,
        urgency_score=0.0,
        rate_limit_group=None,
        max_per_minute=None,
        execute_at=None,
        cron=None,
        webhook_url=None,
        max_execution_seconds=None,
        pool=None,
        trigger_after_ids=(),
        request_id=None,
    )


def test_unknown_fields_are_ignored() -> None:
    cmd = parse_line(line(action="get", task_id="t1", future_field={"x": 1}))
    assert cmd == Get("t1")


def test_crlf_and_surrounding_whitespace_are_fine() -> None:
    assert parse_line(b'  {"action":"stats"} \r\n') == Stats()


# ------------------------------------------------------------------ official SDK shapes


def sdk_enqueue(task_id: str, task_type: str, data: Any, **options: Any) -> bytes:
    """Mirror of ``SnerdQueue.enqueue`` in snerdmq-python (payload construction)."""
    payload: dict[str, Any] = {
        "action": "enqueue",
        "task_id": task_id,
        "task_type": task_type,
        "task_data": json.dumps(data),
        "max_retries": options.pop("max_retries", 3),
        "retry_after_hours": options.pop("retry_after_hours", 0.0),
    }
    for key, value in options.items():
        if value is not None:
            if key == "execute_at" and hasattr(value, "isoformat"):
                value = value.isoformat()
            payload[key] = value
    return line(**payload)


def test_sdk_minimal_enqueue() -> None:
    cmd = parse_line(sdk_enqueue("email-123", "send_email", {"to": "user@example.com"}))
    assert isinstance(cmd, Enqueue)
    assert cmd.task_data == '{"to": "user@example.com"}'  # kept verbatim
    assert (cmd.max_retries, cmd.retry_after_hours) == (3, 0.0)


def test_sdk_enqueue_with_every_option() -> None:
    raw = sdk_enqueue(
        "job-1",
        "render",
        [1, 2, 3],
        max_retries=5,
        retry_after_hours=0.5,
        rate_limit_group="openai",
        max_per_minute=60,
        auto_dedupe=True,
        urgency_score=9.5,
        execute_at=datetime(2024, 1, 1, 0, 0, 0),  # naive: the SDK sends isoformat()
        cron="*/10 * * * * *",
        webhook_url="http://localhost:8080/hook",
        max_execution_seconds=30,
        pool="default",
        trigger_after_ids=["parent-a", "parent-b"],
    )
    cmd = parse_line(raw)
    assert cmd == Enqueue(
        "job-1",
        "render",
        task_data="[1, 2, 3]",
        max_retries=5,
        retry_after_hours=0.5,
        auto_dedupe=True,
        urgency_score=9.5,
        rate_limit_group="openai",
        max_per_minute=60,
        execute_at=JAN1,
        cron="*/10 * * * * *",
        webhook_url="http://localhost:8080/hook",
        max_execution_seconds=30.0,
        pool="default",
        trigger_after_ids=("parent-a", "parent-b"),
    )


def test_sdk_enqueue_with_aware_datetime_and_string_execute_at() -> None:
    aware = datetime(2024, 1, 1, 2, 0, tzinfo=UTC)
    cmd = parse_line(sdk_enqueue("a", "t", None, execute_at=aware))
    assert isinstance(cmd, Enqueue) and cmd.execute_at == aware.timestamp()
    cmd = parse_line(sdk_enqueue("a", "t", None, execute_at="2024-01-01T00:00:00Z"))
    assert isinstance(cmd, Enqueue) and cmd.execute_at == JAN1


@pytest.mark.parametrize(
    ("msg", "expected"),
    [
        ({"status": "success"}, Result("t1", True)),
        ({"status": "error", "error_msg": "boom"}, Result("t1", False, error="boom")),
        (
            {"status": "error", "error_msg": "No handler registered."},
            Result("t1", False, error="No handler registered."),
        ),
        (
            {"status": "error", "error_msg": "Task execution timed out after 5 seconds"},
            Result("t1", False, error="Task execution timed out after 5 seconds"),
        ),
        ({"success": True}, Result("t1", True)),  # seed form
        ({"success": False, "error": "boom"}, Result("t1", False, error="boom")),
        ({"success": False}, Result("t1", False)),
        ({"status": "SUCCESS", "success": True}, Result("t1", True)),
        ({"status": "success", "error_msg": "ignored"}, Result("t1", True)),
        ({"status": "error", "error_msg": {"code": 7}}, Result("t1", False, error='{"code":7}')),
        ({"status": "error", "attempt": 3}, Result("t1", False, attempt=3)),
        ({"status": "success", "result": {"rows": [1]}}, Result("t1", True, result={"rows": [1]})),
        ({"success": True, "result": "text"}, Result("t1", True, result="text")),
        ({"status": "error", "result": 5}, Result("t1", False)),  # read only on success
        ({"status": "error", "retry": False}, Result("t1", False, retry=False)),
        ({"success": False, "retry": True}, Result("t1", False)),
        ({"status": "success", "retry": False}, Result("t1", True, retry=False)),
    ],
)
def test_result_forms(msg: dict[str, Any], expected: Result) -> None:
    assert parse_line(line(action="result", task_id="t1", **msg)) == expected


def test_a_result_with_a_result_field_round_trips() -> None:
    command = Result("t1", True, attempt=2, result=[1, {"a": None}])
    assert parse_line(p.encode_command(command)) == command


def test_sdk_progress_and_register() -> None:
    assert parse_line(line(action="progress", task_id="t1", data={"pct": 10})) == Progress(
        "t1", {"pct": 10}
    )
    assert parse_line(line(action="progress", task_id="t1")) == Progress("t1", None)
    assert parse_line(line(action="register", task_type="send_email")) == Register("send_email")


def test_seed_enqueue_example() -> None:
    seed = (
        '{"action": "enqueue", "task_id": "email-123", "task_type": "send_email",'
        ' "task_data": "{\\"to\\": \\"user@example.com\\"}", "max_retries": 3,'
        ' "retry_after_hours": 0.5, "auto_dedupe": true, "urgency_score": 0.0,'
        ' "rate_limit_group": "email_api", "max_per_minute": 100}'
    )
    cmd = parse_line(seed)
    assert isinstance(cmd, Enqueue)
    assert (cmd.rate_limit_group, cmd.max_per_minute, cmd.auto_dedupe) == ("email_api", 100, True)


# ------------------------------------------------------------------ enqueue field semantics


@pytest.mark.parametrize(
    ("value", "stored"),
    [("plain text", "plain text"), ({"b": 1, "a": [True]}, '{"b":1,"a":[true]}'), (5, "5"),
     (None, "null"), ("", "")],
)  # fmt: skip
def test_task_data_is_stored_as_json_text(value: Any, stored: str) -> None:
    cmd = parse_line(orjson.dumps({"action": "enqueue", "task_id": "a", "task_type": "t",
                                   "task_data": value}))  # fmt: skip
    assert isinstance(cmd, Enqueue) and cmd.task_data == stored


def test_trigger_after_ids_are_deduplicated_in_order() -> None:
    cmd = parse_line(line(action="enqueue", task_id="c", task_type="t",
                          trigger_after_ids=["b", "a", "b", "a"]))  # fmt: skip
    assert isinstance(cmd, Enqueue) and cmd.trigger_after_ids == ("b", "a")


@pytest.mark.parametrize(
    "fields",
    [
        {"rate_limit_group": "", "max_per_minute": 0},
        {"max_per_minute": 0},
        {"max_per_minute": None},
        {"pool": "", "cron": "", "execute_at": "", "webhook_url": ""},
        {"pool": None, "cron": None, "execute_at": None, "webhook_url": None},
        {"max_execution_seconds": 0},
        {"max_retries": None, "urgency_score": None, "auto_dedupe": None},
    ],
)
def test_zero_values_mean_absent(fields: dict[str, Any]) -> None:
    cmd = parse_line(
        orjson.dumps({"action": "enqueue", "task_id": "a", "task_type": "t", **fields})
    )
    assert cmd == Enqueue("a", "t")


def test_execute_at_accepts_epoch_numbers() -> None:
    for value in (JAN1, int(JAN1), 0):
        cmd = parse_line(line(action="enqueue", task_id="a", task_type="t", execute_at=value))
        assert isinstance(cmd, Enqueue) and cmd.execute_at == float(value)


def test_cron_text_is_kept_trimmed() -> None:
    cmd = parse_line(line(action="enqueue", task_id="a", task_type="t", cron=" @hourly "))
    assert isinstance(cmd, Enqueue) and cmd.cron == "@hourly"


# ------------------------------------------------------------------ errors name the field


@pytest.mark.parametrize(
    ("fields", "field", "code", "fragment"),
    [
        ({"task_id": None}, "task_id", "missing_field", "task_id is required"),
        ({"task_id": ""}, "task_id", "invalid_field", 'non-empty string, got ""'),
        ({"task_id": 5}, "task_id", "invalid_field", "got 5"),
        ({"task_type": None}, "task_type", "missing_field", "task_type is required"),
        ({"task_type": ["x"]}, "task_type", "invalid_field", 'got ["x"]'),
        ({"max_retries": -1}, "max_retries", "invalid_field",
         "max_retries must be an integer >= 0, got -1"),
        ({"max_retries": True}, "max_retries", "invalid_field", "got true"),
        ({"max_retries": 2.5}, "max_retries", "invalid_field", "got 2.5"),
        ({"max_retries": 3.0}, "max_retries", "invalid_field", "got 3.0"),
        ({"max_retries": "3"}, "max_retries", "invalid_field", 'got "3"'),
        ({"max_retries": 2**70}, "max_retries", "invalid_field", "integer"),
        ({"retry_after_hours": -0.5}, "retry_after_hours", "invalid_field", ">= 0"),
        ({"retry_after_hours": False}, "retry_after_hours", "invalid_field", "got false"),
        ({"urgency_score": "high"}, "urgency_score", "invalid_field", "finite number"),
        ({"auto_dedupe": 1}, "auto_dedupe", "invalid_field", "true or false, got 1"),
        ({"auto_dedupe": "yes"}, "auto_dedupe", "invalid_field", "true or false"),
        ({"rate_limit_group": "api"}, "max_per_minute", "missing_field", "required with"),
        ({"rate_limit_group": "api", "max_per_minute": 0}, "max_per_minute", "invalid_field",
         "integer >= 1, got 0"),
        ({"rate_limit_group": "api", "max_per_minute": True}, "max_per_minute",
         "invalid_field", "got true"),
        ({"max_per_minute": 10}, "max_per_minute", "invalid_field", "needs a rate_limit_group"),
        ({"max_per_minute": False}, "max_per_minute", "invalid_field", "rate_limit_group"),
        ({"rate_limit_group": 7, "max_per_minute": 1}, "rate_limit_group", "invalid_field",
         "must be a string"),
        ({"execute_at": "next tuesday"}, "execute_at", "invalid_field", "'next tuesday'"),
        ({"execute_at": "2024-02-30T00:00:00Z"}, "execute_at", "invalid_field", "RFC 3339"),
        ({"execute_at": True}, "execute_at", "invalid_field", "got true"),
        ({"execute_at": [2024]}, "execute_at", "invalid_field", "got [2024]"),
        ({"execute_at": 1e20}, "execute_at", "invalid_field", "out of range"),
        ({"cron": "61 * * * *"}, "cron", "invalid_field", "'61 * * * *'"),
        ({"cron": "every day"}, "cron", "invalid_field", "'every day'"),
        ({"cron": 5}, "cron", "invalid_field", "must be a string"),
        ({"webhook_url": "ftp://x.org/a"}, "webhook_url", "invalid_field", "http:// or https://"),
        ({"webhook_url": "not a url"}, "webhook_url", "invalid_field", '"not a url"'),
        ({"webhook_url": "http://"}, "webhook_url", "invalid_field", "URL"),
        ({"webhook_url": "http://host:99999/"}, "webhook_url", "invalid_field", "URL"),
        ({"webhook_url": "https://a b.com/"}, "webhook_url", "invalid_field", "URL"),
        ({"max_execution_seconds": -1}, "max_execution_seconds", "invalid_field", "> 0"),
        ({"max_execution_seconds": "10"}, "max_execution_seconds", "invalid_field", '"10"'),
        ({"max_execution_seconds": False}, "max_execution_seconds", "invalid_field", "false"),
        ({"pool": {}}, "pool", "invalid_field", "must be a string"),
        ({"trigger_after_ids": "a"}, "trigger_after_ids", "invalid_field", "must be a list"),
        ({"trigger_after_ids": ["a", 1]}, "trigger_after_ids", "invalid_field", "got 1"),
        ({"trigger_after_ids": [""]}, "trigger_after_ids", "invalid_field", "non-empty"),
        ({"trigger_after_ids": ["a", "t1"]}, "trigger_after_ids", "invalid_field",
         'own id "t1"'),
    ],
)  # fmt: skip
def test_enqueue_errors_name_the_field(
    fields: dict[str, Any], field: str, code: str, fragment: str
) -> None:
    exc = enqueue_error(**fields)
    assert isinstance(exc, ProtocolError)
    assert (exc.field, exc.code) == (field, code)
    assert fragment in exc.message
    assert field in exc.message


def test_enqueue_error_carries_task_id_so_the_sdk_can_reject_its_pending_enqueue() -> None:
    exc = enqueue_error(max_retries=-1, request_id="r7")
    assert exc.task_id == "t1" and exc.request_id == "r7"
    reply = json.loads(p.error_from(exc))
    assert reply["task_id"] == "t1" and reply["request_id"] == "r7"
    assert reply["message"] == "max_retries must be an integer >= 0, got -1"


@pytest.mark.parametrize(
    ("msg", "field", "code"),
    [
        ({"action": "result", "task_id": "t1"}, "status", "missing_field"),
        ({"action": "result", "task_id": "t1", "status": "ok"}, "status", "invalid_field"),
        ({"action": "result", "task_id": "t1", "status": True}, "status", "invalid_field"),
        ({"action": "result", "task_id": "t1", "success": "true"}, "success", "invalid_field"),
        ({"action": "result", "task_id": "t1", "success": 1}, "success", "invalid_field"),
        ({"action": "result", "task_id": "t1", "status": "error", "success": True}, "success",
         "invalid_field"),
        ({"action": "result", "task_id": "t1", "success": True, "attempt": 0}, "attempt",
         "invalid_field"),
        ({"action": "result", "status": "success"}, "task_id", "missing_field"),
        ({"action": "result", "task_id": "t1", "success": False, "retry": "no"}, "retry",
         "invalid_field"),
        ({"action": "enqueue", "task_id": "a", "task_type": "t", "retry_backoff": "linear"},
         "retry_backoff", "invalid_field"),
        ({"action": "enqueue", "task_id": "a", "task_type": "t", "retry_max_delay": 5},
         "retry_max_delay", "invalid_field"),
        ({"action": "progress", "data": 1}, "task_id", "missing_field"),
        ({"action": "register"}, "task_type", "missing_field"),
        ({"action": "register", "task_type": ""}, "task_type", "invalid_field"),
        ({"action": "cancel", "task_id": 3}, "task_id", "invalid_field"),
        ({"action": "requeue"}, "task_id", "missing_field"),
        ({"action": "get", "task_id": None}, "task_id", "missing_field"),
        ({"task_id": "t1"}, "action", "missing_field"),
        ({"action": "explode"}, "action", "unknown_action"),
        ({"action": "ENQUEUE"}, "action", "unknown_action"),
        ({"action": 1}, "action", "unknown_action"),
        ({"action": "stats", "request_id": 1.5}, "request_id", "invalid_field"),
        ({"action": "stats", "request_id": True}, "request_id", "invalid_field"),
        ({"action": "stats", "request_id": {"a": 1}}, "request_id", "invalid_field"),
    ],
)  # fmt: skip
def test_other_errors_name_the_field(msg: dict[str, Any], field: str, code: str) -> None:
    exc = rejected(orjson.dumps(msg))
    assert (exc.field, exc.code) == (field, code)
    assert field in exc.message


@pytest.mark.parametrize(
    "raw",
    [b"", b"   \n", b"not json", b"{", b'{"action": NaN}', b'{"urgency_score": Infinity}',
     b'{"action":"enqueue","task_id":"a","task_type":"t","urgency_score":1e999}',
     b"\xff\xfe{}", b'"\\ud800"'],
)  # fmt: skip
def test_not_json(raw: bytes) -> None:
    exc = rejected(raw)
    assert exc.code == "invalid_json" and exc.field is None


@pytest.mark.parametrize("raw", [b"[]", b"42", b'"enqueue"', b"null", b"true"])
def test_not_an_object(raw: bytes) -> None:
    exc = rejected(raw)
    assert exc.code == "invalid_json" and "JSON object" in exc.message


def test_lone_surrogate_in_a_str_line() -> None:
    assert rejected('{"action":"get","task_id":"\ud800"}').code == "invalid_json"


def test_unknown_action_lists_the_known_ones() -> None:
    exc = rejected(b'{"action":"explode"}')
    assert '"explode"' in exc.message and "enqueue" in exc.message


def test_request_id_is_kept_for_errors_after_it_was_read() -> None:
    assert rejected(b'{"action":"explode","request_id":42}').request_id == 42


# ------------------------------------------------------------------ line size


def padded(size: int) -> bytes:
    head = b'{"action":"stats","pad":"'
    return head + b"x" * (size - len(head) - 2) + b'"}'


def test_a_line_of_exactly_max_bytes_is_accepted() -> None:
    assert len(padded(MAX_LINE_BYTES)) == MAX_LINE_BYTES
    assert parse_line(padded(MAX_LINE_BYTES) + b"\r\n") == Stats()
    assert parse_line(padded(MAX_LINE_BYTES).decode() + "\n") == Stats()


def test_an_oversized_line_is_refused_before_parsing() -> None:
    for raw in (padded(MAX_LINE_BYTES + 1), b"\x00" * (MAX_LINE_BYTES + 1)):
        exc = rejected(raw)
        assert exc.code == "line_too_long" and len(exc.raw) <= 1024
    assert rejected("é" * (MAX_LINE_BYTES // 2 + 1)).code == "line_too_long"
    assert rejected("x" * (MAX_LINE_BYTES + 3)).code == "line_too_long"


# ------------------------------------------------------------------ outbound encoders


def decode(wire: bytes) -> dict[str, Any]:
    """Decode as the official SDK does (``line.decode().strip()`` then ``json.loads``)."""
    assert wire.endswith(b"\n") and wire.count(b"\n") == 1
    result = json.loads(wire.decode().strip())
    assert isinstance(result, dict)
    return result


def test_ack() -> None:
    assert decode(p.ack("t1")) == {"action": "ack", "task_id": "t1"}
    assert decode(p.ack("t2", deduplicated_of="t1", request_id=3)) == {
        "action": "ack", "task_id": "t2", "deduplicated": True, "duplicate_of": "t1",
        "request_id": 3,
    }  # fmt: skip


def test_error() -> None:
    assert decode(p.error("boom", code="internal_error")) == {
        "action": "error", "code": "internal_error", "message": "boom",
    }  # fmt: skip
    assert decode(
        p.error("task t1 exists", code="duplicate_task", task_id="t1", field="task_id",
                request_id="r")
    ) == {
        "action": "error", "code": "duplicate_task", "message": "task t1 exists",
        "task_id": "t1", "field": "task_id", "request_id": "r",
    }  # fmt: skip
    with pytest.raises(ValueError, match="unknown error code"):
        p.error("x", code="nope")


def test_error_from_a_plain_protocol_error() -> None:
    reply = decode(p.error_from(ProtocolError("bad", field="f", task_id="t")))
    assert reply == {"action": "error", "code": "invalid_field", "message": "bad",
                     "task_id": "t", "field": "f"}  # fmt: skip


def test_error_codes_are_all_known() -> None:
    assert {
        "invalid_json", "line_too_long", "unknown_action", "missing_field", "invalid_field",
        "duplicate_task", "unknown_task", "not_active", "invalid_state", "storage_error",
        "internal_error",
    } == p.ERROR_CODES  # fmt: skip


def test_execute() -> None:
    assert decode(p.execute("t1", "email", '{"a":1}', attempt=1)) == {
        "action": "execute", "task_id": "t1", "task_type": "email", "task_data": '{"a":1}',
        "attempt": 1,
    }  # fmt: skip
    msg = decode(p.execute("t1", "email", "null", attempt=2, max_execution_seconds=2.5))
    assert msg["max_execution_seconds"] == 2.5
    assert json.loads(msg["task_data"]) is None  # the SDK json.loads the string


def test_progress() -> None:
    assert decode(p.progress("t1", {"pct": 5})) == {
        "action": "progress", "task_id": "t1", "data": {"pct": 5},
    }  # fmt: skip
    assert decode(p.progress("t1", 5, task_type="email"))["task_type"] == "email"


def test_max_retries_reached() -> None:
    assert decode(
        p.max_retries_reached("t1", "email", "{}", reason="retries_exhausted",
                              last_error="boom", retry_count=3)
    ) == {
        "action": "max_retries_reached", "task_id": "t1", "task_type": "email",
        "task_data": "{}", "reason": "retries_exhausted", "last_error": "boom",
        "retry_count": 3,
    }  # fmt: skip
    nothing = p.max_retries_reached(
        "c", "t", "{}", reason="blocked_by_failed_parent", last_error=None, retry_count=0
    )
    assert decode(nothing)["last_error"] is None


def test_stats_task_ok() -> None:
    assert decode(p.stats({"queued": 1}, request_id=1)) == {
        "action": "stats", "stats": {"queued": 1}, "request_id": 1,
    }  # fmt: skip
    assert decode(p.task({"taskId": "t1"})) == {"action": "task", "task": {"taskId": "t1"}}
    assert decode(p.ok("cancel", "t1", request_id="z")) == {
        "action": "ok", "of": "cancel", "task_id": "t1", "request_id": "z",
    }  # fmt: skip


def test_newlines_inside_values_stay_escaped() -> None:
    wire = p.error("line one\nline two", code="internal_error", task_id="a\nb")
    assert decode(wire)["message"] == "line one\nline two"


# ------------------------------------------------------------------ fuzzing

FIELDS = [
    "action", "task_id", "task_type", "task_data", "max_retries", "retry_after_hours",
    "auto_dedupe", "urgency_score", "rate_limit_group", "max_per_minute", "execute_at",
    "cron", "webhook_url", "max_execution_seconds", "pool", "trigger_after_ids", "status",
    "success", "error", "error_msg", "data", "attempt", "request_id",
]  # fmt: skip
ACTIONS = ["register", "enqueue", "result", "progress", "stats", "cancel", "requeue", "get"]
PLAUSIBLE: st.SearchStrategy[Any] = st.sampled_from(
    [0, 1, -1, 3, 0.5, -0.0, 1e300, 2**63 - 1, True, False, "", "a", "t1", "success", "error",
     "SUCCESS", "2024-01-01T00:00:00Z", "2016-12-31T23:59:60+01:00", "*/5 * * * *",
     "0 0 0 1 1 * 2030", "10m", "@hourly", "0 0 31 2 *", "http://x", "https://h:1/p",
     "http://h:0/", ["a"], ["a", "a"], [""], {}, None]
)  # fmt: skip
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip
MESSAGES = st.dictionaries(st.sampled_from(FIELDS), PLAUSIBLE | JSON, max_size=10).flatmap(
    lambda d: st.sampled_from(ACTIONS).map(lambda a: {**d, "action": a}) | st.just(d)
)


def check(raw: bytes | str) -> None:
    """Either a command that survives a round trip, or an InvalidMessage: nothing else."""
    try:
        command = parse_line(raw)
    except InvalidMessage as exc:
        assert exc.code in p.ERROR_CODES
        assert exc.field is None or exc.field in FIELDS
        decode(p.error_from(exc))
        return
    assert parse_line(encode_command(command)) == command


NEAR_VALID = st.tuples(
    st.sampled_from(ACTIONS), st.dictionaries(st.sampled_from(FIELDS[1:]), PLAUSIBLE, max_size=5)
).map(lambda pair: {"task_id": "t1", "task_type": "t", "status": "error", **pair[1],
                    "action": pair[0]})  # fmt: skip
"""Valid skeletons with a few fields overridden: reaches every field validator."""


@settings(max_examples=examples(500), suppress_health_check=[HealthCheck.too_slow])
@given(MESSAGES)
def test_fuzz_messages(msg: dict[str, Any]) -> None:
    check(orjson.dumps(msg))


@settings(max_examples=examples(1000))
@given(NEAR_VALID)
def test_fuzz_near_valid_messages(msg: dict[str, Any]) -> None:
    check(orjson.dumps(msg))


@settings(max_examples=examples(300))
@given(JSON)
def test_fuzz_json_values(value: Any) -> None:
    check(orjson.dumps(value))


@settings(max_examples=examples(300))
@given(st.binary(max_size=200))
def test_fuzz_bytes(raw: bytes) -> None:
    check(raw)


@settings(max_examples=examples(300))
@given(st.text(max_size=200))
def test_fuzz_text(raw: str) -> None:
    check(raw)
