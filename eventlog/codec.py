"""Records to lines and back.

A line is one JSON object encoded by orjson and terminated by ``b"\\n"``. Decoding
never raises on bad input: every line is either a record or a :class:`SkippedLine`
that keeps its raw bytes and byte offset. Blank lines are ignored silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import orjson

from snerd.errors import LogError, LogFormatError
from snerd.eventlog.base import Record, SkippedLine
from snerd.eventlog.chain import FIELD as CHAIN_FIELD

NL = b"\n"

REASON_INVALID_JSON = "invalid_json"
REASON_NOT_OBJECT = "not_object"
REASON_TORN = "torn"
REASON_BAD_SEQ = "seq_out_of_range"

MAX_SEQ = 2**53 - 1

FORMAT_FIELD = "format"
FORMAT = "1.1"
"""The log format this version writes, ``major.minor``: 1.0 is the format without the
checksum chain, 1.1 adds it. The first record our writer puts in a log (and every
compaction's header) carries it. A reader refuses a log of a newer major version (it
could misread it); a newer minor version only adds fields, which readers ignore."""
FORMAT_MAJOR = 1


def check_format(record: Record) -> None:
    """Remove the record's ``format`` field; raise :class:`LogFormatError` if it names
    a newer major version than this one reads."""
    value = record.pop(FORMAT_FIELD, None)
    if value is None:
        return
    major = str(value).split(".", 1)[0]
    if not major.isdigit() or int(major) > FORMAT_MAJOR:
        raise LogFormatError(
            f"the log is in format {value!r}; this snerd reads format {FORMAT_MAJOR}.x "
            "(written by a newer version: upgrade snerd to read it)"
        )
"""The largest ``seq`` a record may carry. A record with an integer ``seq`` above it
(or below 0) is unusable: the writer could not continue after it (a seq must stay an
integer every JSON reader holds exactly), so it is skipped and reported like a
garbage line instead of wedging every later append."""

_loads = orjson.loads
_dumps = orjson.dumps
_NEWLINE = orjson.OPT_APPEND_NEWLINE


def encode_body(record: Record) -> bytes:
    """One record as JSON without the newline (what the chain seals); raises LogError."""
    try:
        return _dumps(record)
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        raise LogError(f"record is not JSON-serializable: {exc}") from exc


def encode_bodies(records: Iterable[Record]) -> list[bytes]:
    """:func:`encode_body` of each record (a batch's, in one call); raises LogError."""
    try:
        return [_dumps(record) for record in records]
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        raise LogError(f"record is not JSON-serializable: {exc}") from exc


def encode(record: Record) -> bytes:
    """One record as one ``\\n``-terminated line; raises LogError if not serializable."""
    try:
        return _dumps(record, option=_NEWLINE)
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        raise LogError(f"record is not JSON-serializable: {exc}") from exc


@dataclass(slots=True)
class Decoded:
    """Decoded complete lines: the records in order, and each skipped line paired
    with the number of records that precede it (so delivery keeps log order)."""

    records: list[Record] = field(default_factory=list)
    skipped: list[tuple[int, SkippedLine]] = field(default_factory=list)
    chain: str | None = None
    """The ``chain`` value of the last record that had one (the chain head)."""
    chain_at: int = -1
    """The index in :attr:`records` of that record (-1: none had one)."""


def decode_line(line: bytes, offset: int, *, torn: bool = False) -> Record | SkippedLine:
    """Decode one line (without its ``\\n``); bad input becomes a SkippedLine. The
    checksum field (``chain``) is removed: the layers above never see it."""
    return decode_chained(line, offset, torn=torn)[0]


def decode_chained(
    line: bytes, offset: int, *, torn: bool = False
) -> tuple[Record | SkippedLine, str | None]:
    """:func:`decode_line`, and the ``chain`` value the record carried (if any)."""
    try:
        value = _loads(line)
    except orjson.JSONDecodeError:
        return SkippedLine(offset, bytes(line), REASON_TORN if torn else REASON_INVALID_JSON), None
    if type(value) is not dict:
        return SkippedLine(offset, bytes(line), REASON_TORN if torn else REASON_NOT_OBJECT), None
    chain = value.pop(CHAIN_FIELD, None)
    if FORMAT_FIELD in value:
        check_format(value)
    if not _seq_ok(value):
        return SkippedLine(offset, bytes(line), REASON_BAD_SEQ), None
    return value, chain if type(chain) is str else None


def _seq_ok(record: Record) -> bool:
    """Whether ``record``'s ``seq`` is usable: absent, not an integer (then ignored),
    or an integer in ``0 ..= MAX_SEQ``."""
    s = record.get("seq")
    return type(s) is not int or 0 <= s <= MAX_SEQ


def decode_complete(data: bytes, offset: int) -> Decoded:
    """Decode ``data``, which must end with ``\\n`` (or be empty), starting at ``offset``.

    Fast path: one ``orjson.loads`` per line through ``map``; only a chunk that holds
    a bad line falls back to the line-by-line path that tracks offsets.
    """
    lines = data.split(NL)
    lines.pop()  # the empty piece after the final newline
    try:
        values = list(map(_loads, lines))
    except orjson.JSONDecodeError:
        return _decode_slow(lines, offset)
    chain = None
    chain_at = -1
    for i, v in enumerate(values):
        if type(v) is not dict:
            return _decode_slow(lines, offset)
        s = v.get("seq")
        if type(s) is int and not 0 <= s <= MAX_SEQ:
            return _decode_slow(lines, offset)
        c = v.pop(CHAIN_FIELD, None)
        if c is not None:
            chain, chain_at = c, i
        if FORMAT_FIELD in v:
            check_format(v)
    if type(chain) is not str:
        return Decoded(values)
    return Decoded(values, chain=chain, chain_at=chain_at)


def _decode_slow(lines: Sequence[bytes], offset: int) -> Decoded:
    out = Decoded()
    pos = offset
    for line in lines:
        if line.strip():
            item, chain = decode_chained(line, pos)
            if isinstance(item, SkippedLine):
                out.skipped.append((len(out.records), item))
            else:
                out.records.append(item)
                if chain is not None:
                    out.chain, out.chain_at = chain, len(out.records) - 1
        pos += len(line) + 1
    return out


def split_complete(buffer: bytes) -> tuple[bytes, bytes]:
    """Split ``buffer`` into (complete lines, incomplete remainder)."""
    cut = buffer.rfind(NL) + 1
    return buffer[:cut], buffer[cut:]


def max_seq(records: Iterable[Record], current: int) -> int:
    """The larger of ``current`` and every integer ``seq`` in ``records``."""
    for r in records:
        s = r.get("seq")
        if type(s) is int and s > current:
            current = s
    return current
