"""The command that adds a task (:class:`Enqueue`), as ``commands.py`` says (which
exports it with the rest).

A plain class, in a module the wheel compiles: every task builds one and the decider
reads its fields, natively there (a frozen dataclass's ``__init__`` is interpreted
code, and compiled code reads its fields through the generic attribute machinery;
``benchmarks/README.md``, thirty-sixth session), as ``attempts.py`` does for
``Finish``. The wire's ``rpc/enqueue.py`` extends it with the line's ``request_id``
(compiled with it: a native class takes native subclasses). Immutable and compared
field by field, as the frozen dataclass it was.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, TypeVar

from snerd.projections.slots import freeze, rebuilt
from snerd.projections.values import Value

DEFAULT_MAX_RETRIES: Final = 3

E = TypeVar("E", bound="Enqueue")


class Enqueue(Value):
    """Add a task. ``task_data`` is JSON text; every option after the task's type is
    passed by name.

    ``retry_backoff``: ``"exponential"`` (``backoff.py``); None, the fixed
    ``retry_after_hours``. ``retry_max_delay``: the exponential backoff's cap in
    seconds (set by ``options`` when one is asked for)."""

    FIELDS: ClassVar[tuple[str, ...]] = (
        "task_id", "task_type", "task_data", "max_retries", "retry_after_hours",
        "retry_backoff", "retry_max_delay", "auto_dedupe", "urgency_score",
        "rate_limit_group", "max_per_minute", "execute_at", "cron", "webhook_url",
        "max_execution_seconds", "pool", "trigger_after_ids",
    )  # fmt: skip
    """Its fields in the order the dataclass had them (``Value``'s equality, ``repr`` and
    pickles; ``protocol.encode_command``)."""

    __slots__ = FIELDS

    def __init__(
        self, task_id: str, task_type: str, *, task_data: str = "null",
        max_retries: int = DEFAULT_MAX_RETRIES, retry_after_hours: float = 0.0,
        retry_backoff: str | None = None, retry_max_delay: float | None = None,
        auto_dedupe: bool = False, urgency_score: float = 0.0,
        rate_limit_group: str | None = None, max_per_minute: int | None = None,
        execute_at: float | None = None, cron: str | None = None,
        webhook_url: str | None = None, max_execution_seconds: float | None = None,
        pool: str | None = None, trigger_after_ids: tuple[str, ...] = (),
    ) -> None:  # fmt: skip
        self.task_id: Final[str] = task_id
        self.task_type: Final[str] = task_type
        self.task_data: Final[str] = task_data
        self.max_retries: Final[int] = max_retries
        self.retry_after_hours: Final[float] = retry_after_hours
        self.retry_backoff: Final[str | None] = retry_backoff
        self.retry_max_delay: Final[float | None] = retry_max_delay
        self.auto_dedupe: Final[bool] = auto_dedupe
        self.urgency_score: Final[float] = urgency_score
        self.rate_limit_group: Final[str | None] = rate_limit_group
        self.max_per_minute: Final[int | None] = max_per_minute
        self.execute_at: Final[float | None] = execute_at
        self.cron: Final[str | None] = cron
        self.webhook_url: Final[str | None] = webhook_url
        self.max_execution_seconds: Final[float | None] = max_execution_seconds
        self.pool: Final[str | None] = pool
        self.trigger_after_ids: Final[tuple[str, ...]] = trigger_after_ids

    def replace(self: E, **changes: Any) -> E:
        """This command with those fields changed, of its own class (what
        ``dataclasses.replace`` did; ``TypeError`` for a name it has not)."""
        names = type(self).FIELDS
        unknown = set(changes).difference(names)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        values = tuple(changes[name] if name in changes else getattr(self, name) for name in names)
        return rebuilt(type(self), names, values)


freeze(Enqueue, inline=True)
