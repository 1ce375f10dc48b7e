"""One error root for the whole package, with a subtree per layer."""

from __future__ import annotations


class SnerdError(Exception):
    """Root of every error this package raises on purpose."""


class LogError(SnerdError):
    """The event log could not be read or written (eventlog/)."""


class LogFormatError(LogError):
    """The log was written in a newer major format than this version reads."""


class LogClosedError(LogError):
    """An operation was attempted on a closed log."""


class EventError(SnerdError):
    """An event or command is malformed (projections/)."""


class ProtocolError(SnerdError):
    """An inbound protocol line is invalid (rpc/).

    ``field`` names the offending field when there is one; ``task_id`` is the
    task the line was about, when it could be read.
    """

    def __init__(self, message: str, *, field: str | None = None, task_id: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.task_id = task_id


class DispatchError(SnerdError):
    """The dispatcher refused a command (dispatcher/)."""


class ResultError(SnerdError):
    """A task has no result to hand over (``Queue.result``): it did not complete.

    ``task_id`` names it; ``state`` is how it ended (``dead_lettered``, ``cancelled``,
    or None when the log has no record of it); ``error`` its last error, if any.
    """

    def __init__(
        self, message: str, *, task_id: str, state: str | None = None, error: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.task_id = task_id
        self.state = state
        self.error = error


class TaskDeadLetteredError(ResultError):
    """The task exhausted its retries (or a parent failed): it is in the dead-letter
    queue, or was purged from it."""


class TaskCancelledError(ResultError):
    """The task was cancelled before it ran to completion."""


class UnknownTaskError(ResultError):
    """Neither the live queue nor the stored history (archives included) names the
    task: never enqueued, or its history was pruned by the archive retention."""


class Fail(SnerdError):
    """Raise from a handler to fail the task for good: it is dead-lettered at once
    (reason ``failed_permanently``), whatever retries remain. The message is its error."""
