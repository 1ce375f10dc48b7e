"""Commands: what a caller asks of the queue, as core types (no wire format here).

``decide(state, command, now)`` (``projections/decide.py``) turns each into events or a
refusal. ``rpc/`` maps JSON lines to these; the embedded API, the dashboard and the
CLI build them directly. Times are epoch seconds (UTC).

:class:`Enqueue`, :class:`Finish` and :class:`Claim`, which every task builds or
reads, are plain classes of ``enqueue.py`` and ``attempts.py``, which the wheel
compiles; the rest are frozen dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import orjson

from snerd.projections.attempts import Claim as Claim  # (exported with the rest)
from snerd.projections.attempts import Finish as Finish
from snerd.projections.enqueue import DEFAULT_MAX_RETRIES as DEFAULT_MAX_RETRIES
from snerd.projections.enqueue import Enqueue as Enqueue
from snerd.projections.slots import frozen_init

MAX_RESULT_BYTES: Final = 64 * 1024
"""Largest result (a handler's return value) recorded, in bytes of its JSON text."""


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
