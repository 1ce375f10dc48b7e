"""Where ``snerdmq replay`` reads from: a storage directory (archives, then the live
log), a single log file, or a PostgreSQL queue; the lines it had to skip; a progress
bar for a long read."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from snerd.eventlog.base import Record, SkippedLine
from snerd.projections import events as ev
from snerd.projections.task import record_error
from snerd.tools import kit

PROGRESS_LINES = 100_000  # show a progress bar above this many lines (on a terminal)
PROGRESS_MIN_BYTES = 4 << 20  # below this, do not even count lines


class UsageProblem(Exception):
    """Bad usage or an unusable PATH: exit 2 with this message."""


@dataclass(slots=True)
class Source:
    """Where the records come from, and the lines that had to be skipped."""

    path: Path | str  # a storage dir or log file, or a postgresql:// URL
    files: list[Path]
    skipped: list[SkippedLine] = field(default_factory=list)
    read: int = 0  # records read (a file none of whose lines is one is not a log)
    ambiguous: dict[str, None] = field(default_factory=dict)
    """Tasks whose last line is a SnerdMQ tombstone that may be a dead letter (below)."""

    @property
    def directory(self) -> Path | None:
        """The storage directory read (its index may serve), or None: a log file given
        alone, or a PostgreSQL queue."""
        return self.path if isinstance(self.path, Path) and self.path.is_dir() else None

    def items(self) -> Iterator[Record | SkippedLine]:
        from snerd.eventlog.history import iter_history, read_records
        from snerd.eventlog.storage import open_history

        if isinstance(self.path, str):
            return open_history(self.path)
        if self.path.is_dir():
            return iter_history(self.path)
        return read_records(self.path)

    def records(self, *, keep_skipped: bool = True) -> Iterator[Record]:
        """Every record in order; skipped lines are kept in ``skipped``."""
        from snerd.errors import LogError

        try:
            for item in self.items():
                if not isinstance(item, SkippedLine):
                    self.read += 1
                    self._note_ambiguity(item)
                    yield item
                elif keep_skipped:
                    self.skipped.append(item)
        except LogError as exc:
            raise UsageProblem(str(exc)) from None

    def gone_before(self) -> int | None:
        """The seq up to which the history is gone: the oldest file read starts with a
        compaction's snapshot of a history no earlier file holds (its archives pruned,
        or deleted). None when the files start at the beginning (or a PostgreSQL
        queue's rows are read)."""
        from snerd.errors import LogError
        from snerd.eventlog.history import starts_after

        if not self.files:
            return None
        try:
            return starts_after(self.files[0])
        except LogError:  # (the replay itself reports an unreadable file)
            return None

    def _note_ambiguity(self, record: Record) -> None:
        """SnerdMQ writes no error on the line that dead-letters a task with
        ``maxRetries`` 0: its tombstone reads as a success (log-format §5)."""
        task_id = record.get(ev.F_TASK_ID)
        if not isinstance(task_id, str):
            return
        self.ambiguous.pop(task_id, None)
        if (ev.F_EVENT not in record and record.get(ev.F_DELETED_AT)
                and record.get(ev.F_MAX_RETRIES) == 0 and record_error(record) is None):
            self.ambiguous[task_id] = None


def open_source(path: Path | str) -> Source:
    """The log(s) at ``path``; raises UsageProblem when there is nothing to read."""
    from snerd.errors import LogError
    from snerd.eventlog.history import history_files

    if isinstance(path, str):  # a postgresql:// URL: the rows are read as they stream
        return Source(path, [])

    if not path.exists():
        raise UsageProblem(f"{path} does not exist")
    if path.is_file():
        return Source(path, [path])
    try:
        files = history_files(path)
    except LogError as exc:
        raise UsageProblem(str(exc)) from None
    if not files:
        raise UsageProblem(f"no log in {path} (expected {path / 'tasks' / 'tasks.log'})")
    return Source(path, files)


def count_lines(files: list[Path]) -> int:
    total = 0
    for path in files:
        with open(path, "rb") as f:
            while chunk := f.read(8 << 20):
                total += chunk.count(b"\n")
    return total


def with_progress(records: Iterator[Record], total: int) -> Iterator[Record]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    columns = (TextColumn("replaying"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=kit.console(stderr=True), transient=True) as progress:
        bar = progress.add_task("replay", total=total)
        for n, record in enumerate(records, 1):
            if n % 16384 == 0:
                progress.update(bar, completed=n)
            yield record


def progress_total(source: Source) -> int | None:
    """The line count for a progress bar, or None when no bar is due."""
    if not sys.stderr.isatty():
        return None
    if sum(p.stat().st_size for p in source.files) < PROGRESS_MIN_BYTES:
        return None
    lines = count_lines(source.files)
    return lines if lines > PROGRESS_LINES else None
