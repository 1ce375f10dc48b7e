"""The ``enqueue`` message (:class:`Enqueue`): the core's command plus the line's
``request_id``. Part of the protocol's vocabulary (``messages.py``, which exports it
with the rest).

A plain class, in a module the wheel compiles with the core's (a native class takes
native subclasses): every task's enqueue line is parsed into one, which the decider
reads as the core's command, natively there (``benchmarks/README.md``, thirty-sixth
session). Immutable and compared field by field, as the frozen dataclass it was.
"""

from __future__ import annotations

from typing import ClassVar, Final

from snerd.projections.enqueue import DEFAULT_MAX_RETRIES
from snerd.projections.enqueue import Enqueue as Command
from snerd.projections.slots import freeze


class Enqueue(Command):
    """The ``enqueue`` message. ``request_id`` may come by position, after the task's
    type, as the dataclass took it; the core's options come by name, with its defaults."""

    action: ClassVar[str] = "enqueue"
    FIELDS: ClassVar[tuple[str, ...]] = (*Command.FIELDS, "request_id")

    __slots__ = ("request_id",)

    def __init__(
        self, task_id: str, task_type: str, request_id: str | int | None = None, *,
        task_data: str = "null", max_retries: int = DEFAULT_MAX_RETRIES,
        retry_after_hours: float = 0.0, retry_backoff: str | None = None,
        retry_max_delay: float | None = None, auto_dedupe: bool = False,
        urgency_score: float = 0.0, rate_limit_group: str | None = None,
        max_per_minute: int | None = None, execute_at: float | None = None,
        cron: str | None = None, webhook_url: str | None = None,
        max_execution_seconds: float | None = None, pool: str | None = None,
        trigger_after_ids: tuple[str, ...] = (),
    ) -> None:  # fmt: skip
        # Each option by name (not ``**options``: mypyc miscompiles that forwarding).
        super().__init__(
            task_id, task_type, task_data=task_data, max_retries=max_retries,
            retry_after_hours=retry_after_hours, retry_backoff=retry_backoff,
            retry_max_delay=retry_max_delay, auto_dedupe=auto_dedupe,
            urgency_score=urgency_score, rate_limit_group=rate_limit_group,
            max_per_minute=max_per_minute, execute_at=execute_at, cron=cron,
            webhook_url=webhook_url, max_execution_seconds=max_execution_seconds, pool=pool,
            trigger_after_ids=trigger_after_ids,
        )  # fmt: skip
        self.request_id: Final[str | int | None] = request_id  # (``messages.RequestId``)


freeze(Enqueue)
