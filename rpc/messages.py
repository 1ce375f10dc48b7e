"""The protocol's vocabulary: limits, error codes, and the inbound commands.

Frozen dataclasses, one per action (but ``enqueue``'s and ``result``'s, plain classes
of ``rpc/enqueue.py`` and ``rpc/result.py`` that the wheel compiles: one of each a
task); ``rpc/protocol.py`` parses lines into them and ``rpc/replies.py`` encodes what
goes back. ``specs/protocol.md`` is normative.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar, Final, TypeAlias

from snerd.errors import ProtocolError
from snerd.projections import commands as core
from snerd.projections import options
from snerd.projections.slots import frozen_init
from snerd.rpc.enqueue import Enqueue as Enqueue  # (plain classes: their modules say why)
from snerd.rpc.result import Result as Result

MAX_LINE_BYTES: Final = 1 << 20
"""Longest accepted inbound line in bytes, not counting the line terminator."""

MAX_DEPTH: Final = options.MAX_DEPTH
"""Deepest accepted nesting of arrays and objects inside a message (the message object
itself is level 1); see ``projections/options.py``."""

DEFAULT_MAX_RETRIES: Final = core.DEFAULT_MAX_RETRIES

RequestId: TypeAlias = str | int

# Error codes carried in ``error`` replies (the table is in specs/protocol.md).
INVALID_JSON: Final = "invalid_json"
LINE_TOO_LONG: Final = "line_too_long"
UNKNOWN_ACTION: Final = "unknown_action"
MISSING_FIELD: Final = "missing_field"
INVALID_FIELD: Final = "invalid_field"
DUPLICATE_TASK: Final = "duplicate_task"
UNKNOWN_TASK: Final = "unknown_task"
NOT_ACTIVE: Final = "not_active"
INVALID_STATE: Final = "invalid_state"
STORAGE_ERROR: Final = "storage_error"
INTERNAL_ERROR: Final = "internal_error"
ERROR_CODES: Final = frozenset(
    {
        INVALID_JSON, LINE_TOO_LONG, UNKNOWN_ACTION, MISSING_FIELD, INVALID_FIELD,
        DUPLICATE_TASK, UNKNOWN_TASK, NOT_ACTIVE, INVALID_STATE, STORAGE_ERROR,
        INTERNAL_ERROR,
    }
)  # fmt: skip


class InvalidMessage(ProtocolError):
    """An inbound line was rejected. Carries everything the ``error`` reply needs.

    ``raw`` is the offending line (its first 1 KiB when it was too long).
    """

    def __init__(
        self, message: str, *, code: str, field: str | None = None, task_id: str | None = None,
        request_id: RequestId | None = None, raw: bytes = b"",
    ) -> None:  # fmt: skip
        super().__init__(message, field=field, task_id=task_id)
        self.code = code
        self.request_id = request_id
        self.raw = raw


# --------------------------------------------------------------------------- commands


@frozen_init
@dataclass(frozen=True, slots=True)
class Register:
    """This process runs handlers for ``task_type``; the daemon may send it ``execute``."""

    action: ClassVar[str] = "register"
    task_type: str
    _: KW_ONLY
    request_id: RequestId | None = None


@frozen_init
@dataclass(frozen=True, slots=True)
class Progress:
    """A progress report (any JSON value) from the handler running ``task_id``."""

    action: ClassVar[str] = "progress"
    task_id: str
    data: Any = None
    _: KW_ONLY
    request_id: RequestId | None = None


@frozen_init
@dataclass(frozen=True, slots=True)
class Stats:
    """Ask for queue counters."""

    action: ClassVar[str] = "stats"
    _: KW_ONLY
    request_id: RequestId | None = None


@frozen_init
@dataclass(frozen=True, slots=True)
class Cancel:
    """Drop a waiting task (pending, scheduled or blocked); a running one is refused."""

    action: ClassVar[str] = "cancel"
    task_id: str
    _: KW_ONLY
    request_id: RequestId | None = None


@frozen_init
@dataclass(frozen=True, slots=True)
class Requeue:
    """Move a dead-lettered task back to the queue with its retry count reset."""

    action: ClassVar[str] = "requeue"
    task_id: str
    _: KW_ONLY
    request_id: RequestId | None = None


@frozen_init
@dataclass(frozen=True, slots=True)
class Get:
    """Ask for one task's current state."""

    action: ClassVar[str] = "get"
    task_id: str
    _: KW_ONLY
    request_id: RequestId | None = None


Command: TypeAlias = Register | Enqueue | Result | Progress | Stats | Cancel | Requeue | Get
