"""One place where a storage string becomes a log: a directory, or a PostgreSQL URL.

``postgresql://`` and ``postgres://`` URLs open :class:`~snerd.eventlog.postgres.log.
PostgresLog` (psycopg is imported only then); anything else is a storage directory
for :class:`~snerd.eventlog.filelog.FileLog`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from snerd.errors import LogError
from snerd.eventlog.base import Record, SkippedLine
from snerd.eventlog.batching import BatchingLog
from snerd.eventlog.chain import Lines
from snerd.eventlog.postgres.url import is_url, redact

__all__ = [
    "describe", "is_url", "open_history", "open_live", "open_liveness", "open_log", "redact",
]

Storage = str | os.PathLike[str]


def _url(storage: Storage) -> str | None:
    text = os.fspath(storage)
    return text if is_url(text) else None


def _postgres() -> Any:
    try:
        import snerd.eventlog.postgres.log as pg_log
    except ImportError as exc:  # psycopg is an optional dependency
        raise LogError(
            "a postgresql:// storage needs psycopg 3: pip install 'snerd-py[postgres]'"
            f" ({exc})"
        ) from exc
    return pg_log


def open_log(storage: Storage, *, fsync: bool = True, follow: bool = True) -> BatchingLog:
    """The log ``storage`` names (not opened yet: call ``open(listener)``)."""
    url = _url(storage)
    if url is not None:
        log: BatchingLog = _postgres().PostgresLog(url, fsync=fsync, follow=follow)
        return log
    from snerd.eventlog.filelog import FileLog

    return FileLog(storage, fsync=fsync, follow=follow)


def open_liveness(storage: Storage) -> Any:
    """The liveness facility of ``storage``: lock files, or session advisory locks."""
    url = _url(storage)
    if url is not None:
        _postgres()
        from snerd.eventlog.postgres.liveness import PgLiveness

        return PgLiveness(url)
    from snerd.eventlog.liveness import Liveness

    return Liveness(storage)


def open_history(storage: Storage) -> Iterator[Record | SkippedLine]:
    """The full history (archives, then the live log) of ``storage``, each record once."""
    url = _url(storage)
    if url is not None:
        _postgres()
        from snerd.eventlog.postgres.history import iter_pg_history

        return iter_pg_history(url)
    from snerd.eventlog.history import iter_history

    return iter_history(storage)


def chain_logs(url: str) -> list[tuple[str, Lines]]:
    """A PostgreSQL queue's logs as ``chain.verify_logs`` reads them (a storage dir's
    are its files: ``chain.verify``)."""
    _postgres()
    from snerd.eventlog.postgres.history import raw_logs

    return raw_logs(url)


def open_live(storage: Storage) -> Iterator[Record | SkippedLine]:
    """The live log of ``storage`` (no archives), as ``read_records`` reads a dir."""
    url = _url(storage)
    if url is not None:
        _postgres()
        from snerd.eventlog.postgres.history import live_records

        return live_records(url)
    from snerd.eventlog.history import read_records

    return read_records(storage)


def describe(storage: Storage) -> dict[str, Any]:
    """Where the live log is (printable), its size in bytes, how many archives it has;
    ``exists`` says whether there is a queue there at all."""
    url = _url(storage)
    if url is not None:
        _postgres()
        from snerd.eventlog.postgres.history import describe as pg_describe

        exists, size, archives = pg_describe(url)
        return {"exists": exists, "path": redact(url), "bytes": size, "archives": archives}
    from snerd.eventlog.layout import resolve

    layout = resolve(storage)
    exists = layout.log_path.exists()
    return {
        "exists": exists,
        "path": str(layout.log_path),
        "bytes": layout.log_path.stat().st_size if exists else 0,
        "archives": len(layout.archive_files()),
    }
