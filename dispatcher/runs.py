"""One attempt this daemon has claimed and is running (:class:`Run`).

Apart from the executors (``executors.py``) so that the wheel compiles it with the
dispatcher that builds one for every attempt: a native class is built and read
natively there (a dataclass's generated ``__init__`` is interpreted code, ~3,000
instructions a build through keywords; ``benchmarks/README.md``, thirty-fifth session).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from snerd.projections.task import Task

if TYPE_CHECKING:
    from snerd.dispatcher.executors import Executor


class Run:
    """One attempt this daemon has claimed and is running: the task, its attempt and
    when it started (the engine's clock); then who runs it, its timeout's timer and
    the asyncio task running it, as the dispatcher and the executor set them."""

    __slots__ = ("attempt", "executor", "handle", "started", "task", "timer")

    def __init__(
        self, task: Task, attempt: int, started: float, executor: Executor | None = None,
        timer: Any = None, handle: asyncio.Task[None] | None = None,
    ) -> None:  # fmt: skip
        self.task = task
        self.attempt = attempt
        self.started = started
        self.executor = executor
        self.timer = timer
        self.handle = handle

    def __repr__(self) -> str:
        return (f"Run(task={self.task!r}, attempt={self.attempt!r}, started={self.started!r}, "
                f"executor={self.executor!r}, timer={self.timer!r})")  # fmt: skip
