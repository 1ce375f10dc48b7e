"""The stdio wire protocol: one JSON object per line, both ways. Pure: no I/O, no clock.

``parse_line`` turns an inbound line into a frozen command or raises
:class:`InvalidMessage` (a :class:`~snerd.errors.ProtocolError`) naming the field; the
encoders build outbound lines (bytes, ``\\n``-terminated). ``specs/protocol.md`` is the
normative description; this module implements it.

Conventions (why in the spec): unknown fields are ignored; ``null`` means absent, and so
do ``""`` for optional text fields and ``0`` for ``max_execution_seconds``; ``bool`` is
never an integer; a ``request_id`` (string or integer) is echoed in every reply.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any, Final, NoReturn, cast

import orjson

from snerd.projections.options import (
    MAX_COUNT as MAX_COUNT,
)
from snerd.projections.options import (
    MAX_EXECUTE_AT as MAX_EXECUTE_AT,
)
from snerd.projections.options import (
    MAX_EXECUTION_SECONDS as MAX_EXECUTION_SECONDS,
)
from snerd.projections.options import (
    MAX_RETRY_AFTER_HOURS as MAX_RETRY_AFTER_HOURS,
)
from snerd.projections.options import (
    MAX_SPAN_SECONDS as MAX_SPAN_SECONDS,
)
from snerd.projections.options import (
    MAX_URGENCY as MAX_URGENCY,
)
from snerd.projections.options import (
    MIN_EXECUTE_AT as MIN_EXECUTE_AT,
)
from snerd.projections.options import Fields, all_enqueue_options, common_options, opened
from snerd.projections.options import depth as depth
from snerd.projections.options import show as _show
from snerd.rpc.messages import (
    DEFAULT_MAX_RETRIES as DEFAULT_MAX_RETRIES,
)
from snerd.rpc.messages import (
    DUPLICATE_TASK as DUPLICATE_TASK,
)
from snerd.rpc.messages import (
    ERROR_CODES as ERROR_CODES,
)
from snerd.rpc.messages import (
    INTERNAL_ERROR as INTERNAL_ERROR,
)
from snerd.rpc.messages import (
    INVALID_FIELD as INVALID_FIELD,
)
from snerd.rpc.messages import (
    INVALID_JSON as INVALID_JSON,
)
from snerd.rpc.messages import (
    INVALID_STATE as INVALID_STATE,
)
from snerd.rpc.messages import (
    LINE_TOO_LONG as LINE_TOO_LONG,
)
from snerd.rpc.messages import (
    MAX_DEPTH as MAX_DEPTH,
)
from snerd.rpc.messages import (
    MAX_LINE_BYTES as MAX_LINE_BYTES,
)
from snerd.rpc.messages import (
    MISSING_FIELD as MISSING_FIELD,
)
from snerd.rpc.messages import (
    NOT_ACTIVE as NOT_ACTIVE,
)
from snerd.rpc.messages import (
    STORAGE_ERROR as STORAGE_ERROR,
)
from snerd.rpc.messages import (
    UNKNOWN_ACTION as UNKNOWN_ACTION,
)
from snerd.rpc.messages import (
    UNKNOWN_TASK as UNKNOWN_TASK,
)
from snerd.rpc.messages import (
    Cancel as Cancel,
)
from snerd.rpc.messages import (
    Command as Command,
)
from snerd.rpc.messages import (
    Enqueue as Enqueue,
)
from snerd.rpc.messages import (
    Get as Get,
)
from snerd.rpc.messages import (
    InvalidMessage as InvalidMessage,
)
from snerd.rpc.messages import (
    Progress as Progress,
)
from snerd.rpc.messages import (
    Register as Register,
)
from snerd.rpc.messages import (
    RequestId as RequestId,
)
from snerd.rpc.messages import (
    Requeue as Requeue,
)
from snerd.rpc.messages import (
    Result as Result,
)
from snerd.rpc.messages import (
    Stats as Stats,
)
from snerd.rpc.replies import (
    ack as ack,
)
from snerd.rpc.replies import (
    error as error,
)
from snerd.rpc.replies import (
    error_from as error_from,
)
from snerd.rpc.replies import (
    execute as execute,
)
from snerd.rpc.replies import (
    max_retries_reached as max_retries_reached,
)
from snerd.rpc.replies import (
    ok as ok,
)
from snerd.rpc.replies import (
    progress as progress,
)
from snerd.rpc.replies import (
    stats as stats,
)
from snerd.rpc.replies import (
    task as task,
)

# --------------------------------------------------------------------------- parsing


def parse_line(line: bytes | str) -> Command:
    """Parse one inbound line (terminator optional). Raises only :class:`InvalidMessage`.

    Callers skip blank lines before calling; a blank line is an ``invalid_json`` error.
    """
    raw = _bounded_bytes(line)
    try:
        msg = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        what = "line is empty" if not raw.strip() else f"line is not valid JSON ({exc})"
        raise InvalidMessage(what, code=INVALID_JSON, raw=raw) from None
    return parse_message(msg, raw=raw)


def parse_message(msg: Any, *, raw: bytes = b"") -> Command:
    """Validate an already decoded message (the embedded API's path to the same rules)."""
    if not isinstance(msg, dict):
        shown = _show(msg) if depth(msg, MAX_DEPTH) <= MAX_DEPTH else "a deeply nested value"
        raise InvalidMessage(f"message must be a JSON object, got {shown}", code=INVALID_JSON,
                             raw=raw[:1024])  # fmt: skip
    reader = _Reader(msg, raw)
    if not raw or opened(raw) >= MAX_DEPTH:  # else no field can nest that deep: no walk
        for name, value in msg.items():
            if isinstance(value, (dict, list)) and depth(value, MAX_DEPTH) >= MAX_DEPTH:
                reader.fail(name, f"{name} nests deeper than {MAX_DEPTH - 1} levels")
    action = msg.get("action")
    if action is None:
        reader.fail("action", "action is required", code=MISSING_FIELD)
    parse = _PARSERS.get(action) if isinstance(action, str) else None
    if parse is None:
        known = ", ".join(sorted(_PARSERS))
        reader.fail("action", f"unknown action {_show(action)} (known: {known})", UNKNOWN_ACTION)
    return parse(reader)


def _bounded_bytes(line: bytes | str) -> bytes:
    if isinstance(line, str):
        if len(line) > MAX_LINE_BYTES + 2:
            raise _too_long(line[:1024].encode("utf-8", "replace"))
        try:
            line = line.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidMessage("line is not valid UTF-8", code=INVALID_JSON) from None
    body = line.rstrip(b"\r\n")
    if len(body) > MAX_LINE_BYTES:
        raise _too_long(body[:1024])
    return body


def _too_long(head: bytes) -> InvalidMessage:
    return InvalidMessage(f"line exceeds {MAX_LINE_BYTES} bytes", code=LINE_TOO_LONG, raw=head)


class _Reader(Fields):
    """:class:`~snerd.projections.options.Fields` over one message, whose failures are
    ``error`` replies: they name the field and carry the line's ids."""

    __slots__ = ("raw", "request_id", "task_id")

    def __init__(self, msg: dict[str, Any], raw: bytes) -> None:
        super().__init__(msg)
        self.raw = raw
        tid = msg.get("task_id")
        self.task_id: str | None = tid if isinstance(tid, str) and tid else None
        self.request_id: RequestId | None = None
        rid = msg.get("request_id")
        if rid is not None and (isinstance(rid, bool) or not isinstance(rid, str | int)):
            self.fail("request_id", f"request_id must be a string or an integer, got {_show(rid)}")
        self.request_id = rid

    def fail(self, name: str, message: str, code: str = INVALID_FIELD) -> NoReturn:
        raise InvalidMessage(
            message, code=code, field=name, task_id=self.task_id,
            request_id=self.request_id, raw=self.raw,
        )  # fmt: skip


def _parse_enqueue(r: _Reader) -> Enqueue:
    rid = r.request_id
    common = common_options(r)  # (the common case: built here, a direct call compiled)
    if common is None:
        kind = Enqueue if rid is None else functools.partial(Enqueue, request_id=rid)
        return cast(Enqueue, all_enqueue_options(r, kind))
    task_id, task_type, data, retries, hours = common
    return Enqueue(task_id, task_type, rid, task_data=data, max_retries=retries,
                   retry_after_hours=hours)  # fmt: skip


def _parse_result(r: _Reader) -> Result:
    task_id = r.text("task_id")
    success = _outcome(r)
    message = r.get("error_msg")
    message = r.get("error") if message is None else message
    if message is not None and not isinstance(message, str):
        message = orjson.dumps(message).decode()
    attempt = r.integer("attempt", default=0, minimum=1) if r.get("attempt") is not None else None
    error = None if success else message
    result = r.get("result") if success else None
    retry = r.boolean("retry", default=True)
    return Result(task_id, success, error=error, attempt=attempt, retry=retry,
                  request_id=r.request_id, result=result)  # fmt: skip


def _outcome(r: _Reader) -> bool:
    """``status`` (SDK form) or ``success`` (seed form); both present must agree."""
    status, flag = r.get("status"), r.get("success")
    if flag is not None and not isinstance(flag, bool):
        r.fail("success", f"success must be true or false, got {_show(flag)}")
    if status is None:
        if flag is None:
            why = 'result needs status ("success" or "error") or success (true or false)'
            r.fail("status", why, MISSING_FIELD)
        return flag
    if not isinstance(status, str) or status.lower() not in ("success", "error"):
        r.fail("status", f'status must be "success" or "error", got {_show(status)}')
    success = status.lower() == "success"
    if flag is not None and flag != success:
        r.fail("success", f"status {_show(status)} and success {_show(flag)} disagree")
    return success


_PARSERS: Final[dict[str, Callable[[_Reader], Command]]] = {
    "register": lambda r: Register(r.text("task_type"), request_id=r.request_id),
    "enqueue": _parse_enqueue,
    "result": _parse_result,
    "progress": lambda r: Progress(r.text("task_id"), r.get("data"), request_id=r.request_id),
    "stats": lambda r: Stats(request_id=r.request_id),
    "cancel": lambda r: Cancel(r.text("task_id"), request_id=r.request_id),
    "requeue": lambda r: Requeue(r.text("task_id"), request_id=r.request_id),
    "get": lambda r: Get(r.text("task_id"), request_id=r.request_id),
}


def encode_command(command: Command) -> bytes:
    """The wire line for an inbound command (for clients and tests); parses back equal."""
    msg: dict[str, Any] = {"action": command.action}
    if isinstance(command, Result | Enqueue):  # (plain classes: their modules say why)
        names: Sequence[str] = command.FIELDS
    else:
        names = [f.name for f in fields(command)]
    for name in names:
        value = getattr(command, name)
        if (value is not None and value != ()) or name == "data":
            msg[name] = value
    return orjson.dumps(msg, option=orjson.OPT_APPEND_NEWLINE)


# --------------------------------------------------------------------------- helpers


