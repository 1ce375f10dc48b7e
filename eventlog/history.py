"""Reading whole log files, and the full history across compactions.

For the replay/audit tool: :func:`read_records` streams one file, :func:`iter_history`
streams every archived log in order and then the live log, without repeating what a
later file copied from an earlier one (the snapshot block and the copied tail).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from snerd.errors import LogError
from snerd.eventlog.base import Record, SkippedLine
from snerd.eventlog.codec import Decoded, decode_complete, decode_line, split_complete
from snerd.eventlog.layout import log_file, resolve

CHUNK_SIZE = 4 << 20
SNAPSHOT_EVENT = "snapshot"
REASON_INCOMPLETE = "incomplete"

Item = Record | SkippedLine


def read_records(path: str | os.PathLike[str], *, final: bool | None = None) -> Iterator[Item]:
    """Every record and skipped line of one log file, in file order.

    ``path`` is a log file or a storage dir (meaning its live log). Trailing bytes
    without a newline are reported as a SkippedLine: reason ``torn`` when ``final``
    (a file nobody writes any more, e.g. an archive), else ``incomplete`` (a live log
    whose last write may still be in progress). ``final`` defaults to whether the
    file is an archive. Raises LogError if the file cannot be read.
    """
    p = log_file(path)
    if final is None:
        final = p.parent.name == "archive"
    try:
        with open(p, "rb", buffering=0) as f:
            yield from _scan(f.fileno(), final)
    except OSError as exc:
        raise LogError(f"cannot read log {p}: {exc}") from exc


def _scan(fd: int, final: bool) -> Iterator[Item]:
    offset = 0
    pending = b""
    while chunk := os.read(fd, CHUNK_SIZE):
        data = pending + chunk if pending else chunk
        complete, pending = split_complete(data)
        yield from in_order(decode_complete(complete, offset))
        offset += len(complete)
    if pending.strip():
        if final:
            yield decode_line(pending, offset, torn=True)
        else:
            yield SkippedLine(offset, pending, REASON_INCOMPLETE)


def in_order(decoded: Decoded) -> Iterator[Item]:
    """The records and skipped lines of ``decoded``, in the order of their lines."""
    start = 0
    for before, skipped in decoded.skipped:
        yield from decoded.records[start:before]
        start = before
        yield skipped
    yield from decoded.records[start:]


def history_files(storage: str | os.PathLike[str]) -> list[Path]:
    """The archived logs oldest first, then the live log if it exists."""
    layout = resolve(storage)
    files = layout.archive_files()
    if layout.log_path.exists():
        files.append(layout.log_path)
    return files


def iter_history(storage: str | os.PathLike[str]) -> Iterator[Item]:
    """The full history of a storage: each record once, plus every skipped line.

    Files are read oldest first. A file that starts with a snapshot header whose
    ``seq`` is already covered by earlier files has its header and snapshot block
    skipped (it only restates that history); an uncovered one (archives pruned) is
    yielded whole. Any other record whose integer ``seq`` is covered by the files
    before it is a copy (the tail a compaction carried over) and is skipped; within one
    file every record is yielded, so a ``seq`` going backwards stays visible to
    ``replay --verify``. Records without ``seq`` (foreign state lines) are always
    yielded.
    """
    return merge_history(read_records(path) for path in history_files(storage))


def merge_history(files: Iterable[Iterable[Item]]) -> Iterator[Item]:
    """:func:`iter_history` over logs given as item streams, oldest first (any backend)."""
    last: int | None = None
    for items in files:
        covered = last  # what earlier files already yielded
        first = True
        block, skip_block = 0, False  # snapshot records still to come, and their fate
        for item in items:
            if isinstance(item, SkippedLine):
                yield item
                continue
            header = _snapshot_header(item) if first else None
            first = False
            if header is not None:
                seq, block = header
                skip_block = last is not None and seq <= last
                last = seq if last is None else max(last, seq)
                if not skip_block:
                    yield item
            elif block > 0:
                block -= 1
                if not skip_block:
                    yield item
            elif _is_new(item, covered):
                last = _max_seq(item, last)
                yield item


def _is_new(record: Record, covered: int | None) -> bool:
    seq = record.get("seq")
    return type(seq) is not int or covered is None or seq > covered


def _max_seq(record: Record, last: int | None) -> int | None:
    seq = record.get("seq")
    if type(seq) is not int:
        return last
    return seq if last is None else max(last, seq)


def starts_after(path: str | os.PathLike[str]) -> int | None:
    """The seq a log file's history starts after: its first line is a compaction's
    snapshot header of a seq past 0 (what came before is in older files, or gone).
    None when it starts at the beginning. Raises LogError if the file cannot be read."""
    for first in read_records(path, final=True):  # (the first line only)
        header = None if isinstance(first, SkippedLine) else _snapshot_header(first)
        return header[0] if header is not None and header[0] > 0 else None
    return None


def _snapshot_header(record: Record) -> tuple[int, int] | None:
    """(seq, snapshot record count) if ``record`` is a compaction's snapshot header."""
    if record.get("event") != SNAPSHOT_EVENT:
        return None
    seq = record.get("seq")
    count = record.get("records", 0)
    if type(seq) is not int or type(count) is not int or count < 0:
        return None
    return seq, count
