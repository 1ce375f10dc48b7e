"""The event log: the only code that touches log files.

``EventLog`` is the interface (:mod:`.base`); ``FileLog`` is the shared JSON-lines
file, ``MemoryLog`` its in-memory twin, ``PostgresLog`` (:mod:`.postgres`, psycopg
imported only when used) the log in PostgreSQL; ``Liveness`` tracks which daemons are
alive; ``iter_history`` reads the full audit history across compactions; ``open_log``
turns a storage string (a dir or a ``postgresql://`` URL) into its log.
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
from snerd.eventlog.storage import is_url, open_history, open_liveness, open_log

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
    "is_url",
    "iter_history",
    "open_history",
    "open_liveness",
    "open_log",
    "read_records",
    "resolve",
]
