"""Commands: what a caller asks of the queue, as core types (no wire format here).

``decide(state, command, now)`` (``projections/decide.py``) turns each into events or a
refusal. ``rpc/`` maps JSON lines to these; the embedded API, the dashboard and the
CLI build them directly. Times are epoch seconds (UTC).

:class:`Finish` and :class:`Claim`, which every task builds or reads, are plain classes
of ``attempts.py``, which the wheel compiles; the rest are frozen dataclasses.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Any, Final

import orjson

from snerd.projections.attempts import Claim as Claim  # (exported with the rest)
from snerd.projections.attempts import Finish as Finish
from snerd.projections.slots import frozen_init

DEFAULT_MAX_RETRIES: Final = 3
MAX_RESULT_BYTES: Final = 64 * 1024
"""Largest result (a handler's return value) recorded, in bytes of its JSON text."""


@frozen_init
@dataclass(frozen=True, slots=True)
class Enqueue:
    """Add a task. ``task_data`` is JSON text."""

    task_id: str
    task_type: str
    _: KW_ONLY
    task_data: str = "null"
    max_retries: int = DEFAULT_MAX_RETRIES
    retry_after_hours: float = 0.0
    retry_backoff: str | None = None
    """``"exponential"`` (``projections/backoff.py``); None: the fixed ``retry_after_hours``."""
    retry_max_delay: float | None = None
    """The exponential backoff's cap in seconds (set by ``options`` when one is asked for)."""
    auto_dedupe: bool = False
    urgency_score: float = 0.0
    rate_limit_group: str | None = None
    max_per_minute: int | None = None
    execute_at: float | None = None
    cron: str | None = None
    webhook_url: str | None = None
    max_execution_seconds: float | None = None
    pool: str | None = None
    trigger_after_ids: tuple[str, ...] = ()


def check_result(value: Any) -> Any:
    """``value`` as the JSON value the log will hold (a tuple becomes a list, a
    dataclass an object), or ``ValueError`` saying why it cannot be a result: not
    JSON-serializable, or more than :data:`MAX_RESULT_BYTES` of JSON text."""
    try:
        text = orjson.dumps(value)
    except TypeError as exc:  # orjson.JSONEncodeError: unsupported type, depth, ...
        raise ValueError(f"the result is not JSON-serializable: {exc}") from None
    if len(text) > MAX_RESULT_BYTES:
        raise ValueError(
            f"the result is {len(text)} bytes of JSON, more than MAX_RESULT_BYTES "
            f"({MAX_RESULT_BYTES}): store large outputs elsewhere and return a reference"
        )
    return orjson.loads(text)


@frozen_init
@dataclass(frozen=True, slots=True)
class ReportProgress:
    """Progress (any JSON value) of ``daemon``'s running ``attempt`` of a task."""

    task_id: str
    attempt: int
    data: Any = None


@frozen_init
@dataclass(frozen=True, slots=True)
class Cancel:
    """Drop a waiting task (pending, scheduled or blocked); a running one is refused."""

    task_id: str


@frozen_init
@dataclass(frozen=True, slots=True)
class Requeue:
    """Move a dead-lettered task (by DLQ key) back to the queue, retries restored."""

    key: str


@frozen_init
@dataclass(frozen=True, slots=True)
class Purge:
    """Delete a dead-letter entry for good."""

    key: str


@frozen_init
@dataclass(frozen=True, slots=True)
class Release:
    """End claims without an outcome: ``(task_id, attempt)`` pairs, and why."""

    attempts: tuple[tuple[str, int], ...]
    reason: str


@frozen_init
@dataclass(frozen=True, slots=True)
class FailThrough:
    """Dead-letter every task still waiting on these dead-lettered parents."""

    parents: tuple[str, ...]


Command = (
    Enqueue | Finish | ReportProgress | Cancel | Requeue | Purge | Claim | Release | FailThrough
)
