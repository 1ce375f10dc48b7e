"""Where the log's files live inside a storage directory.

=====================================  ==========================================
``S/tasks/tasks.log``                  the live log (replaced by compaction)
``S/tasks/tasks.lock``                 the append lock (never replaced)
``S/tasks/daemons/<daemon_id>.lock``   one liveness lock per running daemon
``S/tasks/archive/tasks-<ms>-<seq>.log``  the old log of each compaction
=====================================  ==========================================

Nothing here touches file contents; :func:`resolve` accepts either a storage
directory or a log file so tools can be pointed at whatever the user has.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from snerd.errors import LogError

LOG_NAME = "tasks.log"
LOCK_NAME = "tasks.lock"
TASKS_DIR = "tasks"
DAEMONS_DIR = "daemons"
ARCHIVE_DIR = "archive"
INDEX_NAME = "tasks.idx"
"""The per-task index beside the log (``index.py`` writes and reads it)."""

_ARCHIVE_RE = re.compile(r"^tasks-(\d+)-(\d+)(?:-(\d+))?\.log$")
_DAEMON_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def index_temp_name(tag: str) -> str:
    """The name of an index being written (``*`` as ``tag``: the pattern of all)."""
    return f".{INDEX_NAME}.{tag}.tmp"


@dataclass(frozen=True, slots=True)
class Layout:
    """The paths of one storage directory (nothing is created until :meth:`ensure`)."""

    storage: Path

    @property
    def tasks_dir(self) -> Path:
        return self.storage / TASKS_DIR

    @property
    def log_path(self) -> Path:
        return self.tasks_dir / LOG_NAME

    @property
    def lock_path(self) -> Path:
        return self.tasks_dir / LOCK_NAME

    @property
    def daemons_dir(self) -> Path:
        return self.tasks_dir / DAEMONS_DIR

    @property
    def archive_dir(self) -> Path:
        return self.tasks_dir / ARCHIVE_DIR

    def daemon_lock(self, daemon_id: str) -> Path:
        """The liveness lock file of ``daemon_id``; raises LogError on an unsafe id."""
        if not _DAEMON_ID_RE.match(daemon_id):
            raise LogError(
                f"daemon_id must match {_DAEMON_ID_RE.pattern} (no path separators): {daemon_id!r}"
            )
        return self.daemons_dir / f"{daemon_id}.lock"

    def ensure(self) -> None:
        """Create every directory of the layout (idempotent)."""
        for d in (self.tasks_dir, self.daemons_dir, self.archive_dir):
            d.mkdir(parents=True, exist_ok=True)

    def temp_path(self, tag: str) -> Path:
        """A temp file in the log's own directory, so ``os.replace`` is atomic."""
        return self.tasks_dir / f".{LOG_NAME}.{tag}.{os.getpid()}.tmp"

    def archive_files(self) -> list[Path]:
        """Archived logs, oldest first (ordered by compaction time, then seq)."""
        if not self.archive_dir.is_dir():
            return []
        found: list[tuple[tuple[int, int, int], Path]] = []
        for p in self.archive_dir.iterdir():
            m = _ARCHIVE_RE.match(p.name)
            if m:
                key = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
                found.append((key, p))
        return [p for _, p in sorted(found)]

    def prune_archives(
        self, *, max_age_ms: int | None, max_bytes: int | None, now_ms: int
    ) -> list[Path]:
        """Delete the archives retention lets go (:func:`to_prune`); return them."""
        files = self.archive_files()
        known = [(int(_ARCHIVE_RE.match(p.name).group(1)), p.stat().st_size)  # type: ignore[union-attr]
                 for p in files]  # fmt: skip
        gone = files[: to_prune(known, max_age_ms=max_age_ms, max_bytes=max_bytes,
                                now_ms=now_ms)]  # fmt: skip
        for path in gone:
            path.unlink(missing_ok=True)
        return gone

    def free_archive_name(self, ts_ms: int, last_seq: int) -> str:
        """:func:`archive_name`, with a ``-<n>`` suffix if that name is taken."""
        return free_archive_name(ts_ms, last_seq, lambda name: (self.archive_dir / name).exists())


def free_archive_name(ts_ms: int, last_seq: int, taken: Callable[[str], bool]) -> str:
    """:func:`archive_name`, with the first ``-<n>`` suffix that ``taken`` says is free
    (compactions in the same millisecond at the same seq)."""
    name, n = archive_name(ts_ms, last_seq), 0
    while taken(name):
        n += 1
        name = archive_name(ts_ms, last_seq, n)
    return name


def to_prune(
    archives: Sequence[tuple[int, int]], *, max_age_ms: int | None, max_bytes: int | None,
    now_ms: int,
) -> int:  # fmt: skip
    """How many of ``archives`` ((compaction ms, size), oldest first) to delete: those
    at least ``max_age_ms`` old (so 0 deletes them all, one made this millisecond too),
    then the oldest until the rest fit in ``max_bytes``."""
    n = 0
    if max_age_ms is not None:
        while n < len(archives) and archives[n][0] <= now_ms - max_age_ms:
            n += 1
    if max_bytes is not None:
        total = sum(size for _, size in archives[n:])
        while n < len(archives) and total > max_bytes:
            total -= archives[n][1]
            n += 1
    return n


def archive_name(ts_ms: int, last_seq: int, n: int = 0) -> str:
    """The archive file name of a compaction at ``ts_ms`` that snapshotted ``last_seq``
    (``n`` > 0 tells apart compactions with the same time and seq)."""
    suffix = f"-{n}" if n else ""
    # Zero-padded, so that listing the folder (ls, sorted()) shows the archives in order.
    return f"tasks-{ts_ms:013d}-{last_seq:012d}{suffix}.log"


def resolve(path: str | os.PathLike[str]) -> Layout:
    """The layout for ``path``: a storage dir, its ``tasks/`` dir, or its ``tasks.log``."""
    p = Path(path)
    if p.name == LOG_NAME and p.parent.name == TASKS_DIR:
        return Layout(p.parent.parent)
    if p.name == TASKS_DIR and (p / LOG_NAME).exists():
        return Layout(p.parent)
    if p.is_file():
        raise LogError(f"{p} is a file but not a {TASKS_DIR}/{LOG_NAME}; pass its storage dir")
    return Layout(p)


def log_file(path: str | os.PathLike[str]) -> Path:
    """The log file ``path`` designates: a file itself, else the storage's live log."""
    p = Path(path)
    if p.is_file():
        return p
    return resolve(p).log_path
