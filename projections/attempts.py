"""The commands about a claimed attempt: claim it (:class:`Claim`), record its outcome
(:class:`Finish`). Commands as ``commands.py`` says (which exports them with the rest).

Plain classes, in a module the wheel compiles: every task builds a :class:`Finish` and
reads a :class:`Claim`, natively there (a frozen dataclass's ``__init__`` is interpreted
code, and compiled code reads its fields through the generic attribute machinery;
``benchmarks/README.md``, thirty-fifth session). Apart from ``commands.py``, whose
dataclasses stay Python classes: ``rpc/messages.py`` extends its :class:`Enqueue`, which
compiled code would then check as exactly its own class. Immutable and compared field by
field, as the frozen dataclasses they were.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from snerd.projections.fields import REASON_MAX_RETRIES
from snerd.projections.slots import freeze
from snerd.projections.values import Value


class Finish(Value):
    """The outcome of ``daemon``'s running ``attempt`` of a task.

    ``result``: a success's result, a JSON value (see ``commands.check_result``); None records
    none. ``retry``: False, the failure is final (``snerd.Fail``, a ``result`` with
    ``"retry": false``): dead-letter now, whatever retries remain. ``jitter``: a draw in
    [0, 1] made by the shell (the core draws nothing), the random part of an exponential
    backoff; the chosen retry time is written into the event, so a replay never draws
    again."""

    FIELDS: ClassVar[tuple[str, ...]] = ("task_id", "attempt", "success", "error", "reason",
                                         "result", "retry", "jitter")  # fmt: skip
    __slots__ = ("attempt", "error", "jitter", "reason", "result", "retry", "success", "task_id")

    def __init__(
        self, task_id: str, attempt: int, success: bool, *, error: str | None = None,
        reason: str = REASON_MAX_RETRIES, result: Any = None, retry: bool = True,
        jitter: float = 0.0,
    ) -> None:  # fmt: skip
        self.task_id: Final[str] = task_id
        self.attempt: Final[int] = attempt
        self.success: Final[bool] = success
        self.error: Final[str | None] = error
        self.reason: Final[str] = reason
        self.result: Final[Any] = result
        self.retry: Final[bool] = retry
        self.jitter: Final[float] = jitter


freeze(Finish, inline=True)


class Claim(Value):
    """Claim the next attempt of each task (a plan's proposal, checked under the lock)."""

    FIELDS: ClassVar[tuple[str, ...]] = ("task_ids", "lease_seconds", "timeout_grace")
    __slots__ = ("lease_seconds", "task_ids", "timeout_grace")

    def __init__(
        self, task_ids: tuple[str, ...], lease_seconds: float = 3600.0, timeout_grace: float = 1.0
    ) -> None:  # fmt: skip
        self.task_ids: Final[tuple[str, ...]] = task_ids
        self.lease_seconds: Final[float] = lease_seconds
        self.timeout_grace: Final[float] = timeout_grace


freeze(Claim, inline=True)
