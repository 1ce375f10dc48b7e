"""Copy a queue between storages (a dir and a PostgreSQL queue, either way).

A queue is its archives (oldest first) and its live log; each is a list of lines,
copied byte for byte, so seqs, checksums and the audit history come out the same
(``specs/log-storage.md`` §12.6). The destination must hold no queue yet. Stop the
daemons on the source first: a line appended during the copy may be missed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from snerd.errors import LogError
from snerd.eventlog import compaction
from snerd.eventlog.codec import NL, split_complete
from snerd.eventlog.layout import resolve
from snerd.eventlog.postgres.url import is_url, redact


@dataclass(slots=True)
class Dump:
    """Every line of a queue: ``archives`` as (name, lines), then the ``live`` lines."""

    archives: list[tuple[str, list[bytes]]] = field(default_factory=list)
    live: list[bytes] = field(default_factory=list)

    @property
    def lines(self) -> int:
        return len(self.live) + sum(len(lines) for _, lines in self.archives)


def migrate(source: str, destination: str) -> Dump:
    """Copy the queue at ``source`` to ``destination``; return what was copied.
    LogError if the source holds no queue or the destination is not empty."""
    if os.fspath(source) == os.fspath(destination):
        raise LogError("source and destination are the same")
    dump = _read(source)
    if not dump.live and not dump.archives:
        raise LogError(f"no queue at {redact(source)}")
    _write(destination, dump)
    return dump


def _read(storage: str) -> Dump:
    if is_url(storage):
        from snerd.eventlog.postgres.dump import read_queue

        archives, live = read_queue(storage)
        return Dump(archives, live)
    layout = resolve(storage)
    dump = Dump()
    for path in layout.archive_files():
        dump.archives.append((path.name, _lines(path)))
    if layout.log_path.exists():
        dump.live = _lines(layout.log_path)
    return dump


def _lines(path: Path) -> list[bytes]:
    """The complete lines of a log file (a torn tail of a dead writer is left out)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LogError(f"cannot read {path}: {exc}") from exc
    complete, _ = split_complete(data)
    return [line + NL for line in complete.split(NL)[:-1]]


def _write(storage: str, dump: Dump) -> None:
    if is_url(storage):
        from snerd.eventlog.postgres.dump import write_queue

        write_queue(storage, dump.archives, dump.live)
        return
    layout = resolve(storage)
    if (layout.log_path.exists() and layout.log_path.stat().st_size) or layout.archive_files():
        raise LogError(f"{storage} already holds a queue; migrate only into an empty one")
    layout.ensure()
    try:
        for name, lines in dump.archives:
            _write_file(layout.archive_dir / name, lines)
        _write_file(layout.log_path, dump.live)
        compaction.fsync_dirs(layout.tasks_dir, layout.archive_dir)
    except OSError as exc:
        raise LogError(f"cannot write {storage}: {exc}") from exc


def _write_file(path: Path, lines: list[bytes]) -> None:
    with open(path, "wb") as f:
        f.write(b"".join(lines))
        f.flush()
        os.fsync(f.fileno())
