"""The per-task index: where each task's records are, across the live log and archives.

``S/tasks/tasks.idx`` is a derived file (``specs/log-storage.md`` §12): deleting it
loses nothing, the tools rebuild it. It maps a 32-bit hash (CRC-32 of the UTF-8 id)
of every id a record names (``taskId``, ``task``, ``dlqKey``) to the record's place
(``eventlog/scan.py``: a global offset in the history files laid end to end, and
a number of lines to skip from there). A lookup finds the entries with the id's hash,
reads those lines and keeps the ones that really name the id (a hash collision only
costs a read). The header records, per history file, its device and inode (a
compaction renames the live log into the archive: same inode), the bytes indexed and
the scan's cursor there, so an index of a log that grew is extended from where it
stopped; anything else (a file gone, replaced, shrunk, an unreadable index) means a
rebuild. Only the tools write it (``snerdmq replay``, the dashboard), never the daemon.

Layout: one JSON header line, then ``count`` little-endian uint32 hashes, then
``count`` little-endian uint64 places.
"""

from __future__ import annotations

import os
import sys
import threading
import zlib
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from itertools import compress
from operator import attrgetter, is_not
from pathlib import Path
from typing import Any

import orjson

from snerd.errors import LogError
from snerd.eventlog import aside, compaction
from snerd.eventlog.base import Record, SkippedLine
from snerd.eventlog.codec import decode_line
from snerd.eventlog.layout import INDEX_NAME, TASKS_DIR, index_temp_name
from snerd.eventlog.scan import (
    LINE_BITS,
    LINE_MASK,
    Batch,
    Cursor,
    Row,
    bases_of,
    history_paths,
    next_file,
    scan_file,
)

VERSION = 1
_ID_FIELDS = ("taskId", "task", "dlqKey")
_getters = [attrgetter(name) for name in _ID_FIELDS]
_not_none = partial(is_not, None)


def id_hash(task_id: str) -> int:
    return zlib.crc32(task_id.encode())


def index_path(storage: Path) -> Path:
    return storage / TASKS_DIR / INDEX_NAME



@dataclass(slots=True)
class FileMark:
    """One history file as indexed: which file (device, inode), how far, and where
    the scan stood there."""

    name: str
    dev: int
    ino: int
    size: int  # bytes indexed (up to the end of the last complete line)
    cursor: dict[str, Any]
    base: int  # the file's global offset (the sizes of the files before it)
    tail: str  # hex of the last bytes indexed (a log rewritten in place is noticed)


TAIL_BYTES = 32


def _tail(path: Path, size: int) -> str:
    """Hex of the ``TAIL_BYTES`` bytes of ``path`` before ``size``."""
    with open(path, "rb") as f:
        f.seek(max(0, size - TAIL_BYTES))
        return f.read(min(size, TAIL_BYTES)).hex()


def _valid(mark: FileMark) -> bool:
    """Whether a mark read back has the types it was written with."""
    ints = (mark.dev, mark.ino, mark.size, mark.base)
    cursor = Cursor(**mark.cursor)  # TypeError on unknown fields: the caller rebuilds
    counts = (cursor.last, cursor.covered)
    return (all(type(v) is int and v >= 0 for v in ints) and type(mark.tail) is str
            and all(v is None or type(v) is int for v in counts)
            and type(cursor.block) is int and type(cursor.offset) is int
            and type(cursor.skip_block) is bool and type(cursor.first) is bool)  # fmt: skip


class Builder:
    """Collects index entries from scan batches (see :func:`scan_history`)."""

    def __init__(self) -> None:
        self.keys = array("I")
        self.places = array("Q")

    def add(self, batch: Batch) -> None:
        rows, places = batch.rows, batch.places
        crc, keys, out = zlib.crc32, self.keys, self.places
        for get in _getters:
            ids = list(map(get, rows))
            absent = ids.count(None)
            if absent == len(ids):
                continue
            if absent:
                present = list(map(_not_none, ids))
                keys.extend(map(crc, map(str.encode, compress(ids, present))))
                out.extend(compress(places, present))
            else:
                keys.extend(map(crc, map(str.encode, ids)))
                out.extend(places)


@dataclass(slots=True)
class TaskIndex:
    """A loaded index (see the module doc): its header, and its entries as read (the
    hashes, then the places), searched in place."""

    files: list[FileMark]
    count: int
    raw: bytes = b""
    """The entries as stored (empty when only the header was read)."""
    paths: list[Path] = field(default_factory=list)
    """The history files the places refer to (set by :func:`fresh_index`)."""

    def places_of(self, task_id: str) -> list[int]:
        """Sorted places of the records that may name ``task_id`` (hash matches)."""
        wanted = id_hash(task_id).to_bytes(4, sys.byteorder)
        raw, end = self.raw, 4 * self.count
        found: set[int] = set()
        at = raw.find(wanted, 0, end)
        while at >= 0:
            if at % 4 == 0:
                spot = end + 2 * at  # its place: 8 bytes for each 4 of hash
                found.add(int.from_bytes(raw[spot : spot + 8], sys.byteorder))
            at = raw.find(wanted, at + 1, end)
        return sorted(found)

    def builder(self) -> Builder:
        """A :class:`Builder` holding these entries (to extend them)."""
        builder = Builder()
        builder.keys.frombytes(self.raw[: 4 * self.count])
        builder.places.frombytes(self.raw[4 * self.count :])
        return builder


def _mark(path: Path, ident: tuple[int, int], size: int, cursor: Cursor, base: int,
          tasks_dir: Path) -> FileMark:  # fmt: skip
    try:
        name = str(path.relative_to(tasks_dir))
    except ValueError:
        name = str(path)
    return FileMark(name, *ident, size, asdict(cursor), base, _tail(path, size))


def _ident(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def write_index(storage: Path, scanner: Scanner, builder: Builder) -> bool:
    """Write the index atomically; False when the directory is not writable or a file
    was replaced while it was scanned (a compaction: the next reader rebuilds)."""
    tasks_dir = storage / TASKS_DIR
    try:
        if [_ident(p) for p in scanner.files] != scanner.idents:
            return False
        marks = [_mark(p, i, s, c, b, tasks_dir) for p, i, s, c, b in zip(
            scanner.files, scanner.idents, scanner.sizes, scanner.cursors, scanner.bases,
            strict=True)]  # fmt: skip
    except OSError:
        return False
    header = {"snerdIndex": VERSION, "byteorder": sys.byteorder, "count": len(builder.keys),
              "files": [asdict(m) for m in marks]}  # fmt: skip
    target = index_path(storage)
    # (per process and thread: a daemon's dashboard and result lookups may both write)
    temp = target.with_name(index_temp_name(f"{os.getpid()}.{threading.get_ident()}"))
    try:  # locked while written: a writer killed midway leaves a file nobody holds
        with os.fdopen(compaction.open_temp(temp), "wb") as f:
            f.write(orjson.dumps(header) + b"\n")
            builder.keys.tofile(f)
            builder.places.tofile(f)
        os.replace(temp, target)
    except OSError:
        temp.unlink(missing_ok=True)
        return False
    return True


def read_index(storage: Path, *, entries: bool = True) -> TaskIndex | None:
    """The index as written (only its header unless ``entries``), or None if it is
    missing or unreadable."""
    try:
        with open(index_path(storage), "rb") as f:
            line = f.readline(1 << 24)
            size = os.fstat(f.fileno()).st_size
            raw = f.read() if entries else b""
        header = orjson.loads(line)
        count = header["count"]
        if header.get("snerdIndex") != VERSION or header.get("byteorder") != sys.byteorder:
            return None
        if type(count) is not int or size != len(line) + 12 * count or not line.endswith(b"\n"):
            return None
        if entries and len(raw) != 12 * count:
            return None
        files = [FileMark(**m) for m in header["files"]]
        if not all(_valid(m) for m in files):
            return None
    except (OSError, ValueError, KeyError, TypeError, orjson.JSONDecodeError):
        return None
    return TaskIndex(files, count, raw)


class Scanner:
    """Scans the files of a history from where an index stopped, noting each file's
    end (size and cursor) for the index header."""

    def __init__(self, files: list[Path], row_type: type[Any] = Row,
                 suspect: tuple[bytes, ...] = ()) -> None:  # fmt: skip
        self.files = files
        self.suspect = suspect
        self.row_type = row_type
        try:
            self.bases = bases_of(files)
            self.idents = [_ident(p) for p in files]  # as they were before the scan
        except OSError as exc:
            raise LogError(f"cannot read the log: {exc}") from exc
        self.sizes = [0] * len(files)
        self.cursors: list[Cursor] = [Cursor() for _ in files]

    def batches(self, start_file: int = 0, start_at: int = 0,
                cursor: Cursor | None = None) -> Iterator[Batch]:  # fmt: skip
        cursor = cursor or Cursor()
        for file_no in range(start_file, len(self.files)):
            path = self.files[file_no]
            start = start_at if file_no == start_file else 0
            if file_no != start_file:
                next_file(cursor)
            yield from scan_file(path, file_no, cursor, start=start, base=self.bases[file_no],
                                 row_type=self.row_type, suspect=self.suspect)
            self.sizes[file_no] = cursor.offset
            self.cursors[file_no] = Cursor(**asdict(cursor))


def fresh_index(storage: Path, *, entries: bool = True) -> TaskIndex:
    """The index of ``storage``, extended or rebuilt (and written) if it is stale; with
    its entries unless ``entries`` is false and it was current. Raises LogError if the
    log cannot be read."""
    try:
        return _fresh_index(storage, entries)
    except OSError as exc:
        raise LogError(f"cannot index the log: {exc}") from exc


def _fresh_index(storage: Path, entries: bool) -> TaskIndex:
    files = history_paths(storage)
    head = read_index(storage, entries=False)
    resume = resume_point(head, files) if head is not None else None
    scanner = Scanner(files)
    builder = Builder()
    start_file, start_at, cursor = 0, 0, None
    if head is not None and resume is not None:
        start_file, start_at, cursor = resume
        current = start_file == len(files) - 1 and start_at == files[-1].stat().st_size \
            and len(head.files) == len(files)  # fmt: skip
        old = head if current and not entries else read_index(storage)
        if old is not None and current:
            old.paths = files
            return old  # nothing new
        if old is None or resume_point(old, files) != resume:  # replaced meanwhile
            start_file, start_at, cursor = 0, 0, None
        else:
            builder = old.builder()
            for i, mark in enumerate(old.files[: start_file + 1]):
                scanner.sizes[i] = mark.size
                scanner.cursors[i] = Cursor(**mark.cursor)
    for batch in scanner.batches(start_file, start_at, cursor):
        builder.add(batch)
    write_index(storage, scanner, builder)
    raw = builder.keys.tobytes() + builder.places.tobytes()
    return TaskIndex([], len(builder.keys), raw, files)


def index_aside(storage: Path, files: Sequence[Path]) -> Callable[[], bool] | None:
    """Build or extend ``storage``'s index (:func:`fresh_index`, which writes it) in a
    forked child, which scans ``files`` itself while the caller reads them for its own
    ends; the function returned waits for the child (call it exactly once) and says
    whether it wrote the index. None where :func:`aside.worth_aside` says no (no
    ``fork``, a small log): the caller builds it in its own pass."""
    if not aside.worth_aside(files):
        return None

    def build() -> bytes:
        fresh_index(storage, entries=False)
        return b"built"

    wait = aside.fork_aside(build)
    return lambda: wait() is not None


def resume_point(old: TaskIndex, files: list[Path]) -> tuple[int, int, Cursor] | None:
    """(file, offset, cursor) where to go on from ``old``; None if it must be rebuilt."""
    if not old.files or len(old.files) > len(files):
        return None
    try:
        bases = bases_of(files)
        for mark, path, base in zip(old.files, files, bases, strict=False):
            st = path.stat()
            if (st.st_dev, st.st_ino, base) != (mark.dev, mark.ino, mark.base) \
                    or st.st_size < mark.size or _tail(path, mark.size) != mark.tail:  # fmt: skip
                return None
    except OSError:
        return None
    last = len(old.files) - 1
    return last, old.files[last].size, Cursor(**old.files[last].cursor)


def read_places(files: Sequence[Path], places: Iterable[int]) -> Iterator[tuple[int, Record]]:
    """(place, record) of the line at each place (lines that are no record are left out)."""
    try:
        yield from _read_places(files, places)
    except OSError as exc:
        raise LogError(f"cannot read the log: {exc}") from exc


def _read_places(files: Sequence[Path], places: Iterable[int]) -> Iterator[tuple[int, Record]]:
    bases = bases_of(files)
    handles: dict[int, int] = {}
    try:
        for place in places:
            at, skip = place >> LINE_BITS, place & LINE_MASK
            file_no = bisect_right(bases, at) - 1
            fd = handles.get(file_no)
            if fd is None:
                fd = handles[file_no] = os.open(files[file_no], os.O_RDONLY)
            offset, line = _line_at(fd, at - bases[file_no], skip)
            item = decode_line(line, offset)
            if not isinstance(item, SkippedLine):
                yield place, item
    finally:
        for fd in handles.values():
            os.close(fd)


def _line_at(fd: int, offset: int, skip: int) -> tuple[int, bytes]:
    """(offset, bytes) of the line ``skip`` lines after the one at ``offset``."""
    size = 1 << 16
    while skip:
        block = os.pread(fd, size, offset)
        if not block:
            return offset, b""
        found = block.count(b"\n")
        if found < skip:
            offset += len(block)
            skip -= found
            continue
        parts = block.split(b"\n", skip)
        offset += len(block) - len(parts[-1])
        skip = 0
    out = b""
    while True:
        block = os.pread(fd, size, offset + len(out))
        cut = block.find(b"\n")
        if cut >= 0 or not block:
            return offset, out + (block if cut < 0 else block[:cut])
        out += block
        size = min(size * 2, 1 << 22)
