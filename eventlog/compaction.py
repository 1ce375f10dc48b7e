"""The file steps of a compaction; blocking, meant to run in a worker thread.

The orchestration (which lock is held when, what the instance does afterwards) is in
:meth:`snerd.eventlog.filelog.FileLog.compact`; the procedure is specified in
``specs/log-storage.md``.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from snerd.eventlog import locking
from snerd.eventlog.base import Record
from snerd.eventlog.chain import FROM_FIELD as CHAIN_FROM
from snerd.eventlog.chain import Chain
from snerd.eventlog.codec import FORMAT, FORMAT_FIELD, encode_body
from snerd.eventlog.history import SNAPSHOT_EVENT

COPY_CHUNK = 1 << 20
_DIR_FSYNC_UNSUPPORTED = (errno.EINVAL, errno.ENOTSUP, errno.EBADF, errno.EISDIR)


def snapshot_header(
    last_seq: int, ts_ms: int, archived: str, count: int, chain_from: str | None = None
) -> Record:
    """The first record of a compacted log.

    ``seq`` is the last seq the snapshot covers, ``archived`` names the archive file
    that holds the history before it, ``records`` is how many snapshot records follow,
    ``chainFrom`` is the archived log's chain head at the compaction point (the header
    links to it, and so does the copied tail).
    """
    header: Record = {
        "event": SNAPSHOT_EVENT,
        FORMAT_FIELD: FORMAT,
        "seq": last_seq,
        "ts": ts_ms,
        "archived": archived,
        "records": count,
    }
    if chain_from is not None:
        header[CHAIN_FROM] = chain_from
    return header


def snapshot_lines(
    header: Record, records: Iterable[Record], chain: Chain, start: bytes
) -> Iterator[bytes]:
    """The header and the snapshot records as sealed lines: the header links to
    ``start`` (the archived head), each record to the line before it."""
    head, line = chain.seal(start, encode_body(header))
    yield line
    for r in records:
        head, line = chain.seal(head, encode_body(r))
        yield line


def open_temp(tmp: Path) -> int:
    """Create ``tmp`` for a compaction and hold an exclusive flock on it until the fd is
    closed: the lock tells a live compaction's file from a dead one's
    (:func:`remove_stale_temps`)."""
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o644)
    if not locking.try_lock(fd):  # pragma: no cover - a file we just created
        os.close(fd)
        raise OSError(f"cannot lock new temp file {tmp}")
    return fd


def remove_stale_temps(directory: Path, pattern: str) -> list[Path]:
    """Delete the temp files matching ``pattern`` that no live process holds locked
    (left by a compaction killed before it finished); return them. A temp file whose
    creator is still writing it stays (its flock is held)."""
    removed: list[Path] = []
    for path in sorted(directory.glob(pattern)):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue  # gone meanwhile (its compaction finished), or unreadable
        try:
            if not locking.try_lock(fd):
                continue  # a compaction in progress
            with contextlib.suppress(FileNotFoundError):
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    path.unlink()
                    removed.append(path)
        finally:
            os.close(fd)  # releases our lock
    return removed


def write_snapshot(fd: int, lines: Iterable[bytes], fsync: bool) -> None:
    """Write the header and the snapshot records (sealed lines) to the temp file ``fd``."""
    buf: list[bytes] = []
    size = 0
    for line in lines:
        buf.append(line)
        size += len(line)
        if size >= COPY_CHUNK:
            write_all(fd, b"".join(buf))
            buf, size = [], 0
    write_all(fd, b"".join(buf))
    if fsync:
        os.fsync(fd)


def append_tail(fd: int, src_fd: int, start: int, end: int, fsync: bool) -> None:
    """Append bytes ``[start, end)`` of ``src_fd`` to the temp file ``fd``, then fsync it."""
    pos = start
    while pos < end:
        chunk = os.pread(src_fd, min(COPY_CHUNK, end - pos), pos)
        if not chunk:
            raise OSError(f"log shorter than expected: EOF at {pos}, wanted {end}")
        write_all(fd, chunk)
        pos += len(chunk)
    if fsync:
        os.fsync(fd)


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
