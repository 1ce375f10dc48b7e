"""The file steps of a compaction; blocking, meant to run in a worker thread.

The orchestration (which lock is held when, what the instance does afterwards) is in
:meth:`snerd.eventlog.filelog.FileLog.compact`; the procedure is specified in
``specs/log-storage.md``.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from pathlib import Path

from snerd.eventlog.base import Record
from snerd.eventlog.codec import encode
from snerd.eventlog.history import SNAPSHOT_EVENT

COPY_CHUNK = 1 << 20
_DIR_FSYNC_UNSUPPORTED = (errno.EINVAL, errno.ENOTSUP, errno.EBADF, errno.EISDIR)


def snapshot_header(last_seq: int, ts_ms: int, archived: str, count: int) -> Record:
    """The first record of a compacted log.

    ``seq`` is the last seq the snapshot covers, ``archived`` names the archive file
    that holds the history before it, ``records`` is how many snapshot records follow.
    """
    return {
        "event": SNAPSHOT_EVENT,
        "seq": last_seq,
        "ts": ts_ms,
        "archived": archived,
        "records": count,
    }


def write_snapshot(tmp: Path, header: Record, records: Sequence[Record], fsync: bool) -> None:
    """Create ``tmp`` with the header and the snapshot records (fsync'd when asked)."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        buf = [encode(header)]
        size = 0
        for r in records:
            line = encode(r)
            buf.append(line)
            size += len(line)
            if size >= COPY_CHUNK:
                write_all(fd, b"".join(buf))
                buf, size = [], 0
        write_all(fd, b"".join(buf))
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def append_tail(tmp: Path, src_fd: int, start: int, end: int, fsync: bool) -> None:
    """Append bytes ``[start, end)`` of ``src_fd`` to ``tmp``, then fsync ``tmp``."""
    fd = os.open(tmp, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    try:
        pos = start
        while pos < end:
            chunk = os.pread(src_fd, min(COPY_CHUNK, end - pos), pos)
            if not chunk:
                raise OSError(f"log shorter than expected: EOF at {pos}, wanted {end}")
            write_all(fd, chunk)
            pos += len(chunk)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dirs(*dirs: Path) -> None:
    """Make renames and links inside ``dirs`` durable (best effort where unsupported)."""
    for d in dirs:
        try:
            fd = os.open(d, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # pragma: no cover - platforms without directory fds
            continue
        try:
            os.fsync(fd)
        except OSError as exc:
            if exc.errno not in _DIR_FSYNC_UNSUPPORTED:
                raise
        finally:
            os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
