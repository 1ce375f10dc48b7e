"""Outbound lines, daemon -> SDK: one ``\\n``-terminated JSON object each (orjson).

The official SDKs read ``message`` from ``error`` and ``task_id``, ``task_type``,
``task_data``, ``max_execution_seconds`` from ``execute``; every field here is in the
tables of ``specs/protocol.md`` section 4.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from snerd.errors import ProtocolError
from snerd.rpc.messages import ERROR_CODES, INVALID_FIELD, RequestId


def _line(msg: dict[str, Any]) -> bytes:
    return orjson.dumps(msg, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS)


def _reply(msg: dict[str, Any], request_id: RequestId | None) -> bytes:
    if request_id is not None:
        msg["request_id"] = request_id
    return _line(msg)


def ack(
    task_id: str, *, deduplicated_of: str | None = None,
    unknown_parents: tuple[str, ...] = (), request_id: RequestId | None = None,
) -> bytes:  # fmt: skip
    """``ack``: the enqueue is durable (or was dropped as a duplicate of a live task);
    ``unknown_parents``: parents it will not wait for (neither live nor dead-lettered)."""
    msg: dict[str, Any] = {"action": "ack", "task_id": task_id}
    if deduplicated_of is not None:
        msg["deduplicated"] = True
        msg["duplicate_of"] = deduplicated_of
    if unknown_parents:
        msg["unknown_parents"] = list(unknown_parents)
    return _reply(msg, request_id)


def error(
    message: str, *, code: str, task_id: str | None = None, field: str | None = None,
    request_id: RequestId | None = None,
) -> bytes:  # fmt: skip
    """``error``: a refused message. SDKs read ``message``; ``code`` is for machines."""
    if code not in ERROR_CODES:
        raise ValueError(f"unknown error code {code!r}")
    msg: dict[str, Any] = {"action": "error", "code": code, "message": message}
    if task_id is not None:
        msg["task_id"] = task_id
    if field is not None:
        msg["field"] = field
    return _reply(msg, request_id)


def error_from(exc: ProtocolError) -> bytes:
    """The ``error`` reply for a rejected line (code ``invalid_field`` if unknown)."""
    code = getattr(exc, "code", INVALID_FIELD)
    rid = getattr(exc, "request_id", None)
    return error(exc.message, code=code, task_id=exc.task_id, field=exc.field, request_id=rid)


def execute(
    task_id: str, task_type: str, task_data: str, *, attempt: int,
    max_execution_seconds: float | None = None,
) -> bytes:  # fmt: skip
    """``execute``: run this claimed attempt and answer with ``result``."""
    msg: dict[str, Any] = {
        "action": "execute", "task_id": task_id, "task_type": task_type,
        "task_data": task_data, "attempt": attempt,
    }  # fmt: skip
    if max_execution_seconds is not None:
        msg["max_execution_seconds"] = max_execution_seconds
    return _line(msg)


def progress(task_id: str, data: Any, *, task_type: str | None = None) -> bytes:
    """``progress``: a handler's progress report, forwarded to SDKs and dashboards."""
    msg: dict[str, Any] = {"action": "progress", "task_id": task_id, "data": data}
    if task_type is not None:
        msg["task_type"] = task_type
    return _line(msg)


def max_retries_reached(
    task_id: str, task_type: str, task_data: str, *, reason: str, last_error: str | None,
    retry_count: int,
) -> bytes:  # fmt: skip
    """``max_retries_reached``: the task was dead-lettered."""
    return _line(
        {
            "action": "max_retries_reached", "task_id": task_id, "task_type": task_type,
            "task_data": task_data, "reason": reason, "last_error": last_error,
            "retry_count": retry_count,
        }
    )  # fmt: skip


def stats(
    payload: dict[str, Any], *, top: Mapping[str, Any] | None = None,
    request_id: RequestId | None = None,
) -> bytes:  # fmt: skip
    """Reply to ``stats``: ``{"action": "stats", "stats": payload, **top}`` (``top``:
    SnerdMQ's own keys, which its SDKs read at the top level)."""
    return _reply({"action": "stats", **(top or {}), "stats": payload}, request_id)


def task(payload: dict[str, Any], *, request_id: RequestId | None = None) -> bytes:
    """Reply to ``get``: ``{"action": "task", "task": payload}``."""
    return _reply({"action": "task", "task": payload}, request_id)


def ok(action: str, task_id: str, *, request_id: RequestId | None = None) -> bytes:
    """Confirms ``cancel`` / ``requeue``: ``{"action": "ok", "of": action, "task_id": ...}``."""
    return _reply({"action": "ok", "of": action, "task_id": task_id}, request_id)
