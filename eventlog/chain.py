"""The tamper-evident checksum chain over the exact bytes of the log's lines.

Every line this layer writes ends with one more field, ``"chain":"<t><32 hex>"``: the
BLAKE2b-128 digest (``hashlib.blake2b``, keyed when a key is configured) of the
previous chained line's digest followed by the line's own bytes without that field
(``{...}``, the closing brace kept). ``<t>`` is ``b`` (plain) or ``k`` (keyed). The
first chained line of a log links to 16 zero bytes; a compacted log's header names
the archived log's chain head at the compaction point (``chainFrom``): the header
links to it, the snapshot records to the header, and the copied tail goes on from
it, so the chain runs unbroken through archives. Readers strip the field (the
layers above never see it); :func:`verify` checks it. Threat model and format:
``specs/log-format.md`` §11, ``specs/log-storage.md`` §11.
"""

from __future__ import annotations

import binascii
import hashlib
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from snerd.eventlog import aside

FIELD = "chain"
"""The record field that carries the checksum (always the last field of a line)."""
FROM_FIELD = "chainFrom"
"""On a compaction's snapshot header: the archived log's chain head at the point."""
DIGEST_SIZE = 16
GENESIS = bytes(DIGEST_SIZE)
KEY_ENV = "SNERD_LOG_KEY"
KEY_FILE_ENV = "SNERD_LOG_KEY_FILE"

_SUFFIX = re.compile(rb',?"chain":"([bk])([0-9a-f]{32})"\}\s*$')
_HEAD = b',"chain":"'
_hexlify = binascii.hexlify


def key_from_env(env: Mapping[str, str] = os.environ) -> bytes | None:
    """The chain key: ``SNERD_LOG_KEY`` (text), else the bytes of the file named by
    ``SNERD_LOG_KEY_FILE`` (one trailing newline dropped); None when neither is set.
    Keep it outside the storage: whoever holds it can rewrite the chain."""
    text = env.get(KEY_ENV)
    if text:
        return normalize_key(text.encode())
    path = env.get(KEY_FILE_ENV)
    if path:
        data = Path(path).read_bytes()
        return normalize_key(data[:-1] if data.endswith(b"\n") else data)
    return None


def normalize_key(key: bytes) -> bytes:
    """BLAKE2b takes keys of at most 64 bytes; a longer one is hashed down first."""
    return key if len(key) <= 64 else hashlib.blake2b(key, digest_size=64).digest()


class Chain:
    """Seals lines for one writer (one key). Not thread-safe; cheap to keep."""

    __slots__ = ("_base", "tag")

    def __init__(self, key: bytes | None = None) -> None:
        key = normalize_key(key) if key else b""
        self._base = hashlib.blake2b(digest_size=DIGEST_SIZE, key=key)
        self.tag = b"k" if key else b"b"

    def digest(self, prev: bytes, body: bytes) -> bytes:
        h = self._base.copy()
        h.update(prev)
        h.update(body)
        return h.digest()

    def seal(self, prev: bytes, body: bytes) -> tuple[bytes, bytes]:
        """(digest, the line to write) for ``body`` (one JSON object, no newline)."""
        h = self._base.copy()
        h.update(prev)
        h.update(body)
        digest = h.digest()
        head = body[:-1] + _HEAD if len(body) > 2 else b'{"chain":"'
        return digest, head + self.tag + _hexlify(digest) + b'"}\n'


    def seal_all(self, prev: bytes, bodies: Sequence[bytes]) -> tuple[bytes, list[bytes]]:
        """:meth:`seal` for consecutive lines (what a writer's batch does); returns the
        new head and the lines."""
        copy, tag, hexlify = self._base.copy, self.tag, _hexlify
        out: list[bytes] = []
        append = out.append
        for body in bodies:
            h = copy()
            h.update(prev)
            h.update(body)
            prev = h.digest()
            if len(body) > 2:
                append(b'%b,"chain":"%b%b"}\n' % (body[:-1], tag, hexlify(prev)))
            else:
                append(b'{"chain":"%b%b"}\n' % (tag, hexlify(prev)))
        return prev, out


def parse_value(value: Any) -> bytes | None:
    """The digest in a ``chain`` field value (``"b<hex>"``/``"k<hex>"``), else None."""
    if type(value) is str and len(value) == 2 * DIGEST_SIZE + 1 and value[0] in "bk":
        try:
            return bytes.fromhex(value[1:])
        except ValueError:
            return None
    return None


def split_line(line: bytes) -> tuple[bytes, bytes, bytes] | None:
    """(body as hashed, tag, claimed digest) of a chained raw line, else None."""
    m = _SUFFIX.search(line)
    if m is None:
        return None
    body = line[: m.start()] + b"}"
    if body == b"}":  # the field was the only one: the object was empty
        body = b"{}"
    return body, m.group(1), bytes.fromhex(m.group(2).decode())


# ------------------------------------------------------------------------ verification


@dataclass(frozen=True, slots=True)
class Break:
    """A broken link: where, what kind, and a sentence for people."""

    file: str
    offset: int
    seq: int | None
    task_id: str | None
    kind: str  # altered | missing | inserted | reordered | unchained | foreign_key | origin
    message: str


@dataclass(slots=True)
class ChainReport:
    chained: int = 0
    """Lines whose checksum was verified (or, keyed without a key, seen)."""
    unchained: int = 0
    """Lines without a checksum: SnerdMQ's own state lines (no ``event``), or lines of
    ours written before the chain existed (before the first chained line)."""
    unverifiable: int = 0
    """Keyed lines checked without the key (their links are unknown)."""
    older_links: int = 0
    """First lines after a snapshot block that link to the block's last line, as
    writers other than the compacting one did before 2026-12 (accepted: the chain is
    unbroken); today's writers link them to ``chainFrom``."""
    breaks: list[Break] = field(default_factory=list)
    head: str | None = None
    """The last chained line's checksum value (what the next line links to)."""


@dataclass(slots=True)
class _Entry:
    file: str
    offset: int
    raw: bytes
    body: bytes | None
    tag: bytes
    claimed: bytes | None
    in_block: bool = False


def _lines(path: Path) -> list[tuple[int, bytes]]:
    return lines_of(path.read_bytes())


def _json(raw: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


Lines = list[tuple[int, bytes]]
"""A log's non-blank lines, each with its byte offset in the log, without its newline."""


def lines_of(data: bytes) -> Lines:
    """The :data:`Lines` of a log's bytes."""
    out: Lines = []
    pos = 0
    for line in data.split(b"\n"):
        if line.strip():
            out.append((pos, line))
        pos += len(line) + 1
    return out


def verify(files: Sequence[Path], key: bytes | None = None, *, limit: int = 20) -> ChainReport:
    """:func:`verify_logs` over ``files`` (archives oldest first, then the live log)."""
    return verify_logs(((path.name, _lines(path)) for path in files), key, limit=limit)


def verify_logs(logs: Iterable[tuple[str, Lines]], key: bytes | None = None, *,
                limit: int = 20) -> ChainReport:  # fmt: skip
    """Check the chain through ``logs`` (name, lines), archives oldest first, then the
    live log: the files of a storage dir, or the rows of a PostgreSQL queue.

    Names every broken link (up to ``limit``) with its kind: ``altered`` (a bit flip
    or an edit), ``missing`` (a deletion), ``inserted``, ``reordered``, ``unchained``
    (a record of ours without a checksum after the chain began), ``foreign_key`` (an
    unkeyed link in a keyed chain) or ``origin`` (a compacted log whose chain does not
    continue from its archive). Lines without a checksum and without ``event`` are
    SnerdMQ's own: counted apart, never a break.
    """
    chains = {b"b": Chain(None), b"k": Chain(key) if key else None}
    report = ChainReport()
    entries: list[_Entry] = []
    per_file: list[tuple[str, list[_Entry], dict[str, Any] | None]] = []
    for log_name, lines in logs:
        mine: list[_Entry] = []
        header: dict[str, Any] | None = None
        for n, (offset, raw) in enumerate(lines):
            split = split_line(raw)
            if split is None:
                entry = _Entry(log_name, offset, raw, None, b"", None)
            else:
                body, tag, claimed = split
                entry = _Entry(log_name, offset, raw, body, tag, claimed)
            if n == 0:
                first = _json(raw)
                if first is not None and first.get("event") == "snapshot":
                    header = first
            mine.append(entry)
        if header is not None:
            count = header.get("records")
            block = count if type(count) is int and count > 0 else 0
            for e in mine[1 : 1 + block]:
                e.in_block = True
        per_file.append((log_name, mine, header))
        entries.extend(mine)
    index = {e.claimed: i for i, e in enumerate(entries) if e.claimed is not None}
    position = {id(e): i for i, e in enumerate(entries)}
    seen_keyed = False
    started = False
    previous_file: list[_Entry] = []
    previous_start = GENESIS  # the head the previous file started from

    def add(entry: _Entry, kind: str, message: str) -> None:
        if len(report.breaks) < limit:
            rec = _json(entry.raw) or {}
            seq, tid = rec.get("seq"), rec.get("taskId")
            report.breaks.append(Break(
                entry.file, entry.offset, seq if type(seq) is int else None,
                tid if isinstance(tid, str) else None, kind, message,
            ))  # fmt: skip

    for name, mine, header in per_file:
        prev = GENESIS
        prev_entry: _Entry | None = None
        origin: bytes | None = None
        if header is not None:
            origin = parse_value(header.get(FROM_FIELD))
            if origin is not None:
                prev = origin
                # a head the chain passed through in the archive: one of its lines, or
                # the head it started from (a point before its first chained line, or
                # compacted again with nothing written after its own snapshot)
                if (previous_file and origin != previous_start
                        and not any(e.claimed == origin for e in previous_file)):  # fmt: skip
                    add(mine[0], "origin", f"{name} says its chain continues from"
                        f" {origin.hex()}, which no line of the archive before it carries"
                        " (the archive was edited, or a file is missing)")  # fmt: skip
        block_done = header is None
        # Writers before 2026-12 that appended right after a snapshot block with no tail
        # (another process than the compacting one) linked to the block's last line:
        # an unbroken chain too, accepted for that one line.
        block_last: bytes | None = None
        for e in mine:
            if not block_done and not e.in_block and e is not mine[0]:
                block_done = True  # the copied tail goes on from the archived head
                if origin is not None:
                    block_last = prev
                    prev, prev_entry = origin, None
            if e.claimed is None or e.body is None:
                rec = _json(e.raw)
                if rec is not None and "event" in rec and started:
                    add(e, "unchained", f"record at byte {e.offset} has no checksum in a"
                        " chained log: inserted, or written by a writer without the chain")
                elif rec is not None:  # fmt: skip
                    report.unchained += 1
                continue  # a damaged line: reported as a skipped line by the replay
            started = True
            report.chained += 1
            chain = chains.get(e.tag)
            if e.tag == b"k":
                seen_keyed = True
            elif seen_keyed or key is not None:
                add(e, "foreign_key", f"record at byte {e.offset} has an unkeyed checksum"
                    " in a keyed chain: it was rewritten by someone without the key")
            if chain is None:
                report.unverifiable += 1
            elif chain.digest(prev, e.body) != e.claimed:
                if block_last is not None and chain.digest(block_last, e.body) == e.claimed:
                    report.older_links += 1
                else:
                    kind, message = _diagnose(e, prev, prev_entry, entries, index, position,
                                              chains)  # fmt: skip
                    add(e, kind, message)
            prev, prev_entry = e.claimed, e
            block_last = None
        previous_file, previous_start = mine, origin if origin is not None else GENESIS
        if prev_entry is not None:
            report.head = prev_entry.tag.decode() + prev.hex()
    if report.unverifiable:
        report.breaks.append(Break(
            "", 0, None, None, "unverifiable",
            f"{report.unverifiable} keyed checksum(s) cannot be checked without the key"
            f" (set {KEY_ENV} or {KEY_FILE_ENV})",
        ))  # fmt: skip
    return report


def _seq(entry: _Entry | None) -> int | None:
    rec = _json(entry.raw) if entry is not None else None
    seq = rec.get("seq") if rec is not None else None
    return seq if type(seq) is int else None


def _diagnose(
    e: _Entry, prev: bytes, prev_entry: _Entry | None, entries: list[_Entry],
    index: dict[bytes, int], position: dict[int, int], chains: dict[bytes, Chain | None],
) -> tuple[str, str]:  # fmt: skip
    """Why ``e`` does not link to ``prev``: which record it does link to, if any."""
    chain = chains[e.tag]
    assert chain is not None and e.body is not None and e.claimed is not None
    here = position[id(e)]
    where = f"record at byte {e.offset} of {e.file}"
    seq = _seq(e)
    if seq is not None:
        where += f" (seq {seq})"
    for claimed, j in index.items():  # which record does it really follow?
        if j != here and chain.digest(claimed, e.body) == e.claimed:
            other = entries[j]
            other_seq = _seq(other)
            named = f"seq {other_seq}" if other_seq is not None else f"byte {other.offset}"
            if j > here:
                return "reordered", (f"{where} is out of order: it belongs after {named}"
                                     f" (byte {other.offset} of {other.file})")  # fmt: skip
            between = here - j - 1
            return "inserted", (f"{where} follows {named} directly: the {between} record(s)"
                                " between them were inserted there, or moved (reordered)")
    nxt = next((x for x in entries[here + 1 :] if x.claimed is not None), None)
    prev_seq = _seq(prev_entry)
    keyed = " (or the key is wrong)" if e.tag == b"k" else ""
    if nxt is not None and nxt.body is not None and chains.get(nxt.tag) is not None:
        nxt_chain = chains[nxt.tag]
        assert nxt_chain is not None
        if nxt_chain.digest(prev, nxt.body) == nxt.claimed:
            return "inserted", f"{where} was inserted: the next record links past it"
    if seq is not None and prev_seq is not None and seq > prev_seq + 1:
        gone = f"seq {prev_seq + 1}" + (f"..{seq - 1}" if seq - 1 > prev_seq + 1 else "")
        return "missing", (f"{where} does not link to seq {prev_seq}: {gone} missing"
                           f" (deleted), or this record was altered{keyed}")  # fmt: skip
    return "altered", (f"{where} was altered (a bit flip or an edit): its bytes no longer"
                       f" match its checksum{keyed}")  # fmt: skip


# ------------------------------------------------------------------ the fast path


class PlainChain:
    """:func:`verify`'s report for the common case, fed the raw lines of each file in
    order (:meth:`feed`): every non-blank line chained with the expected tag (``k``
    with a key, else ``b``), each file's chain starting from the genesis (no
    compaction header) and every link intact. Anything else (a break, an unchained
    line, a compacted file, a keyed line without the key...) makes :meth:`report`
    None: only the full :func:`verify` names and diagnoses it."""

    def __init__(self, key: bytes | None = None) -> None:
        self.key = key
        self.copy = Chain(key)._base.copy
        self.mark = b',"chain":"' + (b"k" if key else b"b")
        self.file: int | None = None
        self.prev = GENESIS
        self.first = True
        self.declined = False
        self.chained = 0
        self.head: bytes | None = None
        self.done = False  # set by the reader once every line of every file was fed

    def feed(self, file_no: int, lines: Sequence[bytes]) -> None:
        if self.declined:
            return
        if file_no != self.file:
            self.file, self.prev, self.first = file_no, GENESIS, True
        prev, copy, mark, hexlify = self.prev, self.copy, self.mark, _hexlify
        chained = 0
        for line in lines:
            if not line:
                continue
            if self.first:
                self.first = False
                head = _json(line)
                if head is not None and head.get("event") == "snapshot":
                    self.declined = True  # a compacted file: its origin needs the full check
                    return
            if line[-45:-34] != mark or line[-2:] != b'"}':
                self.declined = True
                return
            h = copy()
            h.update(prev)
            h.update(line[:-45])
            h.update(b"}")
            prev = h.digest()
            if hexlify(prev) != line[-34:-2]:
                self.declined = True
                return
            chained += 1
        self.prev = prev
        self.chained += chained
        if chained:
            self.head = prev

    def report(self) -> ChainReport | None:
        if self.declined or not self.done:
            return None
        report = ChainReport(chained=self.chained)
        if self.head is not None:
            report.head = self.mark[-1:].decode() + self.head.hex()
        return report


@dataclass(slots=True)
class PlainCheck:
    """What :func:`verify_plain_aside` gives: the plain check's report, and whether a
    line held one of the byte strings it was asked to watch for."""

    report: ChainReport | None
    watched: bool = False


def verify_plain(files: Sequence[Path], key: bytes | None = None) -> ChainReport | None:
    """:class:`PlainChain` over ``files`` (None: use :func:`verify`)."""
    return _plain_check(files, key, ()).report


def _plain_check(files: Sequence[Path], key: bytes | None, watch: Sequence[bytes]) -> PlainCheck:
    """:func:`verify_plain`, and in the same pass over the bytes, whether any line holds
    one of ``watch`` (the reader that asked needs not search them itself)."""
    plain = PlainChain(key)
    watched = False
    try:
        for file_no, path in enumerate(files):
            with open(path, "rb") as f:
                pending = b""
                while chunk := f.read(4 << 20):
                    data = pending + chunk if pending else chunk
                    cut = data.rfind(b"\n") + 1
                    plain.feed(file_no, data[:cut].split(b"\n")[:-1])
                    if watch and not watched:  # (cut at a line's end: no string spans it)
                        watched = any(data.find(w, 0, cut) >= 0 for w in watch)
                    pending = data[cut:]
                if pending.strip():
                    plain.feed(file_no, [pending])
                    watched = watched or any(w in pending for w in watch)
    except OSError:
        return PlainCheck(None, watched=bool(watch))  # unread bytes may hold one
    plain.done = True
    return PlainCheck(plain.report(), watched)


def verify_plain_aside(
    files: Sequence[Path], key: bytes | None = None, *, watch: Sequence[bytes] = ()
) -> Callable[[], PlainCheck]:
    """Start :func:`verify_plain` in a forked child (it reads the files itself, on
    another core if there is one, while the caller folds the log); the function
    returned waits for the child and gives its report, and whether a line holds one of
    ``watch`` (searched in the same pass). Where :func:`aside.worth_aside` says no (no
    ``fork``, a small log), it runs the check when called."""
    if not aside.worth_aside(files):
        return lambda: _plain_check(files, key, watch)

    def check() -> bytes:
        done = _plain_check(files, key, watch)
        report = None if done.report is None else asdict(done.report)
        return orjson.dumps({"report": report, "watched": done.watched})

    wait = aside.fork_aside(check)

    def result() -> PlainCheck:
        data = wait()
        if not data:
            return PlainCheck(None, watched=bool(watch))  # (no answer: assume the worst)
        value = orjson.loads(data)
        report = value["report"]
        if report is not None:
            report["breaks"] = [Break(**b) for b in report["breaks"]]
            report = ChainReport(**report)
        return PlainCheck(report, watched=value["watched"])

    return result
