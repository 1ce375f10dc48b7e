"""The event log: the only code that touches log files.

``EventLog`` is the interface (:mod:`.base`); ``FileLog`` is the shared JSON-lines
file, ``MemoryLog`` its in-memory twin; ``Liveness`` tracks which daemons are alive;
``iter_history`` reads the full audit history across compactions.
"""

from __future__ import annotations

if __name__ != "snerd.eventlog":  # one import name per module (README, "Repository layout")
    raise ImportError(
        f"import snerd.eventlog, not {__name__}: one module under two names would be two "
        "modules, with two different copies of every class in it"
    )

from snerd.eventlog.base import (
    Command,
    EventLog,
    LogListener,
    LogStats,
    Record,
    SkippedLine,
)
from snerd.eventlog.filelog import FileLog
from snerd.eventlog.history import iter_history, read_records
from snerd.eventlog.layout import Layout, resolve
from snerd.eventlog.liveness import Liveness
from snerd.eventlog.memory import MemoryLog, MemoryStore

__all__ = [
    "Command",
    "EventLog",
    "FileLog",
    "Layout",
    "Liveness",
    "LogListener",
    "LogStats",
    "MemoryLog",
    "MemoryStore",
    "Record",
    "SkippedLine",
    "iter_history",
    "read_records",
    "resolve",
]
