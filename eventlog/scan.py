"""A fast scan of a storage's full history: the few fields readers need, with positions.

:func:`iter_history` decodes every line into a full record (``orjson``), which is
what the audit and ``--verify`` need. A summary, the per-task index and a task
lookup need only a handful of fields: :func:`scan_history` reads the same records
(the same files, the same skipping of what a compaction copied) but decodes each
chunk of lines in one ``msgspec`` call into :class:`Row` s holding only those fields,
with each record's byte offset. Lines that do not fit :class:`Row` exactly (a field
of another type, a bad ``seq``, a newer format, a blank line in the chunk) are
decoded one by one: a line that is a record but no :class:`Row` becomes an
:class:`Odd` carrying the full record, a line that is no record a
:class:`~snerd.eventlog.base.SkippedLine`. A reader that can only handle rows falls
back to :func:`iter_history` when it meets anything else.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import accumulate
from operator import attrgetter, is_not
from pathlib import Path
from typing import Annotated, Any

import msgspec

from snerd.errors import LogError
from snerd.eventlog.base import SkippedLine
from snerd.eventlog.codec import MAX_SEQ, decode_line
from snerd.eventlog.history import REASON_INCOMPLETE, SNAPSHOT_EVENT, history_files
from snerd.eventlog.layout import log_file

CHUNK_SIZE = 1 << 20
LINE_BITS = 20
"""A record's place: ``global offset << LINE_BITS | line``, the global offset of a
line start in the history's files laid end to end (each file's ``base`` is the size
of the files before it), ``line`` the lines to skip from there (a whole chunk is
placed from its start, so no line is measured)."""
LINE_MASK = (1 << LINE_BITS) - 1

_Id = Annotated[str, msgspec.Meta(min_length=1)]
_Seq = Annotated[int, msgspec.Meta(ge=0, le=MAX_SEQ)]
_Count = Annotated[int, msgspec.Meta(ge=0)]
_Format = Annotated[str, msgspec.Meta(pattern=r"^1(\.|$)")]  # a newer major is an Odd


class Row(msgspec.Struct, gc=False):
    """The fields of one record that a summary or an index reads, all well typed (a
    record with any of them of another type is an :class:`Odd`). Absent is None."""

    event: str | None = None
    taskId: _Id | None = None
    task: _Id | None = None
    seq: _Seq | None = None
    taskType: str | None = None
    taskData: str | None = None
    dlqKey: _Id | None = None
    reason: str | None = None
    attempt: _Count | None = None
    daemon: _Id | None = None
    triggerAfterIds: list[Any] | None = None
    deletedAt: Any = None
    records: Any = msgspec.UNSET  # a snapshot header's record count (UNSET: absent)
    format: _Format | None = None


class Odd:
    """A record that is no :class:`Row`: its full decoded form, and its ``seq``."""

    __slots__ = ("dlqKey", "event", "record", "records", "seq", "task", "taskId")

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record
        get = record.get
        self.taskId, self.task = _id(get("taskId")), _id(get("task"))
        self.dlqKey = _id(get("dlqKey"))
        seq = record.get("seq")
        self.seq = seq if type(seq) is int else None
        self.event = record.get("event")
        self.records = record.get("records", msgspec.UNSET)



def _id(value: Any) -> str | None:
    """An id field as the index keys it (any truthy value, as text)."""
    return str(value) if value else None


Item = Row | Odd


@dataclass(slots=True)
class Batch:
    """Consecutive records of one file (the ones the full history yields), the place
    of each one's line (:data:`LINE_BITS`), and the lines skipped among them."""

    file: int  # index into the files scanned
    rows: list[Item]
    places: Sequence[int]
    skipped: list[SkippedLine] = field(default_factory=list)
    odd: bool = False  # some rows are :class:`Odd`
    end: int = 0  # the file offset after the chunk


@dataclass(slots=True)
class Cursor:
    """Where a scan of the full history stands: enough to go on from a file's offset
    (what :func:`iter_history` keeps between records)."""

    last: int | None = None  # the highest seq yielded so far
    covered: int | None = None  # ... before the current file
    block: int = 0  # snapshot records still to come in the current file
    skip_block: bool = False
    first: bool = True  # the next record is the current file's first
    offset: int = 0  # bytes of the current file read (whole lines)


_decoder = msgspec.json.Decoder(Row)
_seq = attrgetter("seq")
_not_none = partial(is_not, None)
_decoders: dict[type[Any], Any] = {}


def _decoder_of(row_type: type[Any]) -> Any:
    decoder = _decoders.get(row_type)
    if decoder is None:
        decoder = _decoders[row_type] = msgspec.json.Decoder(row_type)
    return decoder


def scan_file(
    path: Path, file_no: int, cursor: Cursor, *, start: int = 0, base: int = 0,
    final: bool | None = None, row_type: type[Any] = Row, suspect: tuple[bytes, ...] = (),
) -> Iterator[Batch]:
    """The records of one file from byte ``start`` (a line start), as the full history
    yields them given ``cursor`` (updated as the scan goes). ``base``: the file's
    global offset (for places); ``row_type``: the ``msgspec.Struct`` of the fields
    wanted (default :class:`Row`); ``suspect``: byte strings that make a chunk that
    holds one odd."""
    decoder = _decoder if row_type is Row else _decoder_of(row_type)
    if final is None:
        final = path.parent.name == "archive"
    try:
        with open(path, "rb", buffering=0) as f:
            f.seek(start)
            cursor.offset = start
            scan = _Scan(f.fileno(), file_no, base, decoder, suspect)
            yield from scan.run(cursor, start, final)
    except OSError as exc:
        raise LogError(f"cannot read log {path}: {exc}") from exc


@dataclass(slots=True)
class _Scan:
    fd: int
    file_no: int
    base: int
    decoder: Any
    suspect: tuple[bytes, ...]

    def run(self, cursor: Cursor, offset: int, final: bool) -> Iterator[Batch]:
        """Read into one reused buffer (no copy of a chunk before decoding it)."""
        file_no = self.file_no
        buf = bytearray(CHUNK_SIZE)
        view = memoryview(buf)
        size = 0  # bytes held in buf
        while True:
            if size == len(buf):  # a line longer than the buffer
                view.release()
                buf.extend(bytes(len(buf)))
                view = memoryview(buf)
            got = os.readv(self.fd, [view[size:]])
            if not got:
                break
            size += got
            cut = buf.rfind(b"\n", 0, size) + 1
            if cut == 0:
                continue
            batch = self.decode(buf, view[:cut], offset)
            if self.suspect and any(buf.find(s, 0, cut) >= 0 for s in self.suspect):
                batch.odd = True
            offset += cut
            cursor.offset = batch.end = offset
            yield _history(batch, cursor)
            buf[: size - cut] = view[cut:size]
            size -= cut
        pending = bytes(view[:size])
        view.release()
        if pending.strip():
            item = decode_line(pending, offset, torn=True) if final else None
            if item is None or isinstance(item, SkippedLine):
                skipped = item or SkippedLine(offset, pending, REASON_INCOMPLETE)
                yield Batch(file_no, [], [], [skipped], end=offset)
            else:
                cursor.offset = offset + len(pending)
                place = (self.base + offset) << LINE_BITS
                batch = Batch(file_no, [Odd(item)], [place], odd=True, end=cursor.offset)
                yield _history(batch, cursor)

    def decode(self, buf: bytearray, complete: memoryview, offset: int) -> Batch:
        """The records of the complete lines ``complete`` (a view of ``buf``)."""
        n = buf.count(b"\n", 0, len(complete))
        if n <= LINE_MASK:
            try:
                rows: list[Item] = self.decoder.decode_lines(complete)
            except (msgspec.DecodeError, msgspec.ValidationError):
                rows = []
            if len(rows) == n:  # else a bad or blank line (decode_lines skips blank ones)
                start = (self.base + offset) << LINE_BITS
                return Batch(self.file_no, rows, range(start, start + n))
        lines = bytes(complete).split(b"\n")
        lines.pop()
        return self.decode_slow(lines, offset)

    def decode_slow(self, lines: list[bytes], offset: int) -> Batch:
        """Line by line: the exact place of each record, odd rows, skipped lines."""
        places: list[int] = []
        batch = Batch(self.file_no, [], places)
        pos = self.base + offset
        for line in lines:
            if line.strip():
                item = _one(line, pos - self.base, self.decoder)
                if isinstance(item, SkippedLine):
                    batch.skipped.append(item)
                else:
                    batch.rows.append(item)
                    places.append(pos << LINE_BITS)
                    batch.odd = batch.odd or type(item) is Odd
            pos += len(line) + 1
        return batch


def _one(line: bytes, offset: int, decoder: Any) -> Item | SkippedLine:
    try:
        row: Item = decoder.decode(line)
        return row
    except (msgspec.DecodeError, msgspec.ValidationError):
        pass
    item = decode_line(line, offset)  # raises LogFormatError on a newer major format
    return item if isinstance(item, SkippedLine) else Odd(item)


def _history(batch: Batch, cursor: Cursor) -> Batch:
    """Drop what :func:`iter_history` drops: a covered snapshot block, copied records."""
    rows, places = batch.rows, batch.places
    if not rows:
        return batch
    keep_rows: list[Item] = []
    keep_places: list[int] = []
    start = 0
    if cursor.first:
        cursor.first = False
        if rows[0].event == SNAPSHOT_EVENT and _header(rows[0], cursor):
            start = 1
            if not cursor.skip_block:
                keep_rows.append(rows[0])
                keep_places.append(places[0])
    if cursor.covered is None and cursor.block == 0:  # everything is new: the fast way
        if start == 0:
            return batch_with(batch, rows, places, cursor)
        keep_rows.extend(rows[1:])
        keep_places.extend(places[1:])
        return batch_with(batch, keep_rows, keep_places, cursor)
    covered = cursor.covered
    for i in range(start, len(rows)):
        row = rows[i]
        if cursor.block > 0:
            cursor.block -= 1
            if cursor.skip_block:
                continue
        else:
            seq = row.seq
            if seq is not None:
                if covered is not None and seq <= covered:
                    continue
                cursor.last = seq if cursor.last is None else max(cursor.last, seq)
        keep_rows.append(row)
        keep_places.append(places[i])
    return Batch(batch.file, keep_rows, keep_places, batch.skipped, batch.odd, batch.end)


def batch_with(
    batch: Batch, rows: list[Item], places: Sequence[int], cursor: Cursor
) -> Batch:
    """``batch`` with these rows, noting the highest seq among them."""
    top = max(filter(_not_none, map(_seq, rows)), default=None)
    if top is not None:
        cursor.last = top if cursor.last is None else max(cursor.last, top)
    if rows is batch.rows:
        return batch
    return Batch(batch.file, rows, places, batch.skipped, batch.odd, batch.end)


def _header(row: Item, cursor: Cursor) -> bool:
    """Note a compaction's snapshot header (as ``iter_history`` reads one: an integer
    ``seq`` and ``records`` count, absent meaning 0); False if ``row`` is none."""
    seq, count = row.seq, row.records
    if count is msgspec.UNSET:
        count = 0
    if seq is None or type(count) is not int or count < 0:
        return False
    cursor.skip_block = cursor.last is not None and seq <= cursor.last
    cursor.last = seq if cursor.last is None else max(cursor.last, seq)
    cursor.block = count
    return True


def next_file(cursor: Cursor) -> None:
    """Move ``cursor`` to the start of the next file."""
    cursor.covered = cursor.last
    cursor.first = True
    cursor.block = 0
    cursor.skip_block = False
    cursor.offset = 0


def history_paths(path: str | os.PathLike[str]) -> list[Path]:
    """The files of a storage's full history, or a single log file."""
    p = Path(path)
    if p.is_file():
        return [p]
    return history_files(p) if p.is_dir() else [log_file(p)]


def bases_of(files: Sequence[Path]) -> list[int]:
    """Each file's global offset: the sizes of the files before it, laid end to end."""
    return list(accumulate((p.stat().st_size for p in files[:-1]), initial=0))


def scan_history(files: list[Path], row_type: type[Any] = Row) -> Iterator[Batch]:
    """Every record of ``files`` (as :func:`history_paths` lists them) in order, as
    :func:`iter_history` yields them, in batches."""
    cursor = Cursor()
    for file_no, (path, base) in enumerate(zip(files, bases_of(files), strict=True)):
        if file_no:
            next_file(cursor)
        yield from scan_file(path, file_no, cursor, base=base, row_type=row_type)
