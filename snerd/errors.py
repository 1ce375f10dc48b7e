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


class Fail(SnerdError):
    """Raise from a handler to fail the task for good: it is dead-lettered at once
    (reason ``failed_permanently``), whatever retries remain. The message is its error."""
