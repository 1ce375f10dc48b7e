"""The ``result`` message (:class:`Result`): the outcome of a running attempt, as an SDK
reports it. Part of the protocol's vocabulary (``messages.py``, which exports it with
the rest).

A plain class, in a module the wheel compiles: every task's outcome line is parsed
into one and answered from it, natively there (a frozen dataclass's ``__init__`` is
interpreted code, and compiled code reads its fields through the generic attribute
machinery; ``benchmarks/README.md``, thirty-fifth session), as ``projections/
attempts.py`` does for the core's ``Finish``. Immutable and compared field by field,
as the frozen dataclass it was.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from snerd.projections.slots import freeze
from snerd.projections.values import Value


class Result(Value):
    """Outcome of the running attempt of ``task_id`` (``attempt`` pins which one).

    ``retry``: False (``"retry": false`` on the line), a failure that dead-letters at
    once. ``result``: a success's return value (any JSON value; ours, the SDKs never
    send it)."""

    action: ClassVar[str] = "result"
    FIELDS: ClassVar[tuple[str, ...]] = ("task_id", "success", "error", "attempt", "retry",
                                         "request_id", "result")  # fmt: skip
    """Its fields in the order the dataclass had them (``protocol.encode_command``)."""

    __slots__ = ("attempt", "error", "request_id", "result", "retry", "success", "task_id")

    def __init__(
        self, task_id: str, success: bool, *, error: str | None = None,
        attempt: int | None = None, retry: bool = True, request_id: str | int | None = None,
        result: Any = None,
    ) -> None:  # fmt: skip
        self.task_id: Final[str] = task_id
        self.success: Final[bool] = success
        self.error: Final[str | None] = error
        self.attempt: Final[int | None] = attempt
        self.retry: Final[bool] = retry
        self.request_id: Final[str | int | None] = request_id  # (``messages.RequestId``)
        self.result: Final[Any] = result


freeze(Result, inline=True)
