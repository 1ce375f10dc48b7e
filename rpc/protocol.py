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

import math
from collections.abc import Callable
from dataclasses import fields
from typing import Any, Final, NoReturn
from urllib.parse import urlsplit

import orjson

from snerd.errors import EventError
from snerd.projections.schedule import parse_cron, parse_instant
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

# --------------------------------------------------------------------------- bounds
# Every number that becomes a time or a count is bounded here, at the edge, so that no
# enqueue that is acked can fail later (when a retry time, a lease or a timeout is
# computed and written) or read back differently (readers take numbers beyond 2**53 as
# malformed). The table is in specs/protocol.md §3.1.

MAX_COUNT: Final = 2**31 - 1
"""Largest ``max_retries``, ``max_per_minute`` and result ``attempt`` (a 32-bit int)."""
MAX_SPAN_SECONDS: Final = 10 * 365 * 86_400
"""Longest duration (10 years): a retry backoff, a timeout, a cron shorthand interval."""
MAX_RETRY_AFTER_HOURS: Final = MAX_SPAN_SECONDS / 3600  # 87,600 hours
MAX_EXECUTION_SECONDS: Final = float(MAX_SPAN_SECONDS)
MAX_URGENCY: Final = float(2**53 - 1)
"""Largest ``urgency_score`` magnitude: every JSON reader holds it exactly."""
MIN_EXECUTE_AT: Final = -62_135_596_800.0  # 0001-01-01T00:00:00Z
MAX_EXECUTE_AT: Final = 250_246_627_200.0  # 9900-01-01T00:00:00Z
"""``execute_at`` must be before this, so that a retry or the lease of an attempt that
starts then still fits the log's instants (which end with year 9999)."""

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
    for name, value in msg.items():
        if isinstance(value, dict | list) and depth(value, MAX_DEPTH) >= MAX_DEPTH:
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


class _Reader:
    """Typed access to one message's fields; every failure names the field."""

    __slots__ = ("msg", "raw", "request_id", "task_id")

    def __init__(self, msg: dict[str, Any], raw: bytes) -> None:
        self.msg, self.raw = msg, raw
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

    def get(self, name: str) -> Any:
        return self.msg.get(name)

    def text(self, name: str) -> str:
        value = self.msg.get(name)
        if value is None:
            self.fail(name, f"{name} is required", code=MISSING_FIELD)
        if not isinstance(value, str) or not value:
            self.fail(name, f"{name} must be a non-empty string, got {_show(value)}")
        return value

    def opt_text(self, name: str) -> str | None:
        value = self.msg.get(name)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            self.fail(name, f"{name} must be a string, got {_show(value)}")
        return value

    def integer(self, name: str, *, default: int, minimum: int, maximum: int = MAX_COUNT) -> int:
        value = self.msg.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.fail(name, f"{name} must be an integer >= {minimum}, got {_show(value)}")
        if value > maximum:
            self.fail(name, f"{name} must be at most {maximum}, got {_show(value)}")
        return value

    def number(
        self, name: str, *, default: float, minimum: float | None, maximum: float,
        exclusive: bool = False,
    ) -> float:  # fmt: skip
        """A finite number in range; ``minimum`` None means ``-maximum``."""
        value = self.msg.get(name)
        if value is None:
            return default
        ok = not isinstance(value, bool) and isinstance(value, int | float)
        if ok and minimum is not None:
            ok = value > minimum if exclusive else value >= minimum
        if not ok or not math.isfinite(value):
            bound = "" if minimum is None else f" {'>' if exclusive else '>='} {minimum:g}"
            self.fail(name, f"{name} must be a finite number{bound}, got {_show(value)}")
        if abs(value) > maximum if minimum is None else value > maximum:
            what = f"between {_num(-maximum)} and {_num(maximum)}" if minimum is None else (
                f"at most {_num(maximum)}")  # fmt: skip
            self.fail(name, f"{name} must be {what}, got {_show(value)}")
        return float(value)

    def boolean(self, name: str, *, default: bool) -> bool:
        value = self.msg.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(name, f"{name} must be true or false, got {_show(value)}")
        return value


def _parse_enqueue(r: _Reader) -> Enqueue:
    task_id = r.text("task_id")
    group, per_minute = _rate_limit(r)
    cron = r.opt_text("cron")
    if cron is not None:
        cron = _cron(r, cron)
    return Enqueue(
        task_id,
        r.text("task_type"),
        task_data=_task_data(r.get("task_data")),
        max_retries=r.integer("max_retries", default=DEFAULT_MAX_RETRIES, minimum=0),
        retry_after_hours=r.number(
            "retry_after_hours", default=0.0, minimum=0.0, maximum=MAX_RETRY_AFTER_HOURS
        ),
        auto_dedupe=r.boolean("auto_dedupe", default=False),
        urgency_score=r.number("urgency_score", default=0.0, minimum=None, maximum=MAX_URGENCY),
        rate_limit_group=group,
        max_per_minute=per_minute,
        execute_at=_execute_at(r),
        cron=cron,
        webhook_url=_webhook_url(r),
        max_execution_seconds=_max_execution_seconds(r),
        pool=r.opt_text("pool"),
        trigger_after_ids=_parents(r, task_id),
        request_id=r.request_id,
    )


def _task_data(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def _rate_limit(r: _Reader) -> tuple[str | None, int | None]:
    group = r.opt_text("rate_limit_group")
    if group is None:
        if not _is_zero(r.get("max_per_minute")):
            r.fail("max_per_minute", "max_per_minute needs a rate_limit_group")
        return None, None
    if r.get("max_per_minute") is None:
        r.fail("max_per_minute", "max_per_minute is required with rate_limit_group", MISSING_FIELD)
    return group, r.integer("max_per_minute", default=0, minimum=1)


def _cron(r: _Reader, text: str) -> str:
    try:
        cron = parse_cron(text)
    except EventError as exc:
        r.fail("cron", str(exc))
    if cron.interval is not None and cron.interval > MAX_SPAN_SECONDS:
        r.fail("cron", f"cron interval {_show(text)} is longer than {MAX_SPAN_SECONDS} seconds"
                       " (10 years)")  # fmt: skip
    return cron.text


def _execute_at(r: _Reader) -> float | None:
    value = r.get("execute_at")
    if value is None or value == "":
        return None
    instant: float | None = None
    try:
        if isinstance(value, str):
            instant = parse_instant(value)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            instant = float(value)
    except EventError as exc:
        r.fail("execute_at", f"execute_at must be an RFC 3339 timestamp or epoch seconds: {exc}")
    if instant is None:
        why = f"execute_at must be an RFC 3339 string or a number, got {_show(value)}"
        r.fail("execute_at", why)
    if not (math.isfinite(instant) and MIN_EXECUTE_AT <= instant < MAX_EXECUTE_AT):
        r.fail("execute_at", "execute_at is out of range: from 0001-01-01T00:00:00Z (epoch"
               f" {_num(MIN_EXECUTE_AT)}) to before 9900-01-01T00:00:00Z (epoch"
               f" {_num(MAX_EXECUTE_AT)}), got {_show(value)}")  # fmt: skip
    return instant


def _webhook_url(r: _Reader) -> str | None:
    url = r.opt_text("webhook_url")
    if url is None:
        return None
    try:
        parts = urlsplit(url)
        valid = parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
        _ = parts.port  # raises ValueError on a bad port
    except ValueError:
        valid = False
    if not valid or any(ch.isspace() for ch in url):
        r.fail("webhook_url", f"webhook_url must be an http:// or https:// URL, got {_show(url)}")
    return url


def _max_execution_seconds(r: _Reader) -> float | None:
    if _is_zero(r.get("max_execution_seconds")):
        return None
    return r.number(
        "max_execution_seconds", default=0.0, minimum=0.0, maximum=MAX_EXECUTION_SECONDS,
        exclusive=True,
    ) or None  # fmt: skip


def _parents(r: _Reader, task_id: str) -> tuple[str, ...]:
    value = r.get("trigger_after_ids")
    if value is None:
        return ()
    name = "trigger_after_ids"
    if not isinstance(value, list):
        r.fail(name, f"{name} must be a list of task ids, got {_show(value)}")
    for item in value:
        if not isinstance(item, str) or not item:
            r.fail(name, f"{name} items must be non-empty strings, got {_show(item)}")
        if item == task_id:
            r.fail(name, f"{name} cannot contain the task's own id {_show(task_id)}")
    return tuple(dict.fromkeys(value))


def _parse_result(r: _Reader) -> Result:
    task_id = r.text("task_id")
    success = _outcome(r)
    message = r.get("error_msg")
    message = r.get("error") if message is None else message
    if message is not None and not isinstance(message, str):
        message = orjson.dumps(message).decode()
    attempt = r.integer("attempt", default=0, minimum=1) if r.get("attempt") is not None else None
    error = None if success else message
    return Result(task_id, success, error=error, attempt=attempt, request_id=r.request_id)


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
    for f in fields(command):
        value = getattr(command, f.name)
        if (value is not None and value != ()) or f.name == "data":
            msg[f.name] = value
    return orjson.dumps(msg, option=orjson.OPT_APPEND_NEWLINE)


# --------------------------------------------------------------------------- helpers


def _is_zero(value: Any) -> bool:
    """Absent, null or a numeric zero (the "unset" value of SDKs with zero values)."""
    if value is None:
        return True
    return not isinstance(value, bool) and isinstance(value, int | float) and value == 0


def depth(value: Any, limit: int) -> int:
    """How deeply arrays and objects nest in ``value`` (a scalar is 0), counted up to
    ``limit + 1`` at most. Iterative: no input can exhaust the interpreter's stack."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        level += 1
        if level > limit:
            return level
        deepest = max(deepest, level)
        stack.extend((child, level) for child in item)
    return deepest


def _num(value: float) -> str:
    """A bound for a message: whole numbers without a fraction or an exponent."""
    return str(int(value)) if float(value).is_integer() else repr(value)


def _show(value: Any) -> str:
    """A value as JSON text, for error messages (shortened)."""
    try:
        text = orjson.dumps(value).decode()
    except (TypeError, RecursionError):
        text = f"a value of type {type(value).__name__}"
    return text if len(text) <= 60 else text[:57] + "..."
