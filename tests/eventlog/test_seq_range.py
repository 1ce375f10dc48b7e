"""Issue 12.3: a record whose seq no writer could continue from is unusable, not a wedge.

A line with ``seq`` = 2**64 - 1 used to become the log's last seq, so every later
append failed to encode (``Integer exceeds 64-bit range``) until someone edited the
file. Now such a record is skipped and reported, the same way by every reader.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from logkit import Backend, OpenLog

from snerd.eventlog.base import SkippedLine
from snerd.eventlog.codec import MAX_SEQ, REASON_BAD_SEQ, decode_complete, decode_line
from snerd.eventlog.filelog import FileLog
from snerd.eventlog.history import iter_history

BAD_SEQS = [2**64 - 1, 2**63, MAX_SEQ + 1, -1]


def line(**record: object) -> bytes:
    return orjson.dumps(record) + b"\n"


@pytest.mark.parametrize("bad", BAD_SEQS)
async def test_an_out_of_range_seq_is_skipped_and_appends_go_on(
    backend: Backend, open_log: OpenLog, bad: int
) -> None:
    backend.inject(line(event="put", k="a", seq=1) + line(event="put", k="poison", seq=bad))
    log, rec = await open_log()
    assert [r["k"] for r in rec.records] == ["a"]
    [skipped] = rec.skipped
    assert skipped.reason == REASON_BAD_SEQ
    assert b'"poison"' in skipped.raw
    await log.append([{"event": "put", "k": "b"}])  # used to raise LogError forever
    await log.append([{"event": "put", "k": "c"}])
    assert [(r["k"], r["seq"]) for r in rec.records[1:]] == [("b", 2), ("c", 3)]
    assert log.stats().skipped == 1
    assert log.stats().last_seq == 3


async def test_a_poison_line_appended_by_another_writer_is_skipped_by_followers(
    backend: Backend, open_log: OpenLog
) -> None:
    log, rec = await open_log()
    await log.append([{"event": "put", "k": "a"}])
    backend.inject(line(event="put", k="poison", seq=2**64 - 1))
    await log.catch_up()
    await log.append([{"event": "put", "k": "b"}])
    assert [(r["k"], r["seq"]) for r in rec.records] == [("a", 1), ("b", 2)]
    assert [s.reason for s in rec.skipped] == [REASON_BAD_SEQ]


def test_decoders_agree_on_the_rule() -> None:
    good = line(k="max", seq=MAX_SEQ) + line(k="none") + line(k="text", seq="7")
    assert [r["k"] for r in decode_complete(good, 0).records] == ["max", "none", "text"]
    bad = line(k="a", seq=1) + line(k="b", seq=2**64 - 1) + line(k="c", seq=3)
    decoded = decode_complete(bad, 0)
    assert [r["k"] for r in decoded.records] == ["a", "c"]
    [(before, skipped)] = decoded.skipped
    assert (before, skipped.reason, skipped.offset) == (1, REASON_BAD_SEQ, len(line(k="a", seq=1)))
    one = decode_line(line(k="b", seq=-5).rstrip(b"\n"), 0)
    assert isinstance(one, SkippedLine) and one.reason == REASON_BAD_SEQ


async def test_the_history_reader_skips_it_and_keeps_the_records_after_it(tmp_path: Path) -> None:
    """With the huge seq counted, every later record looked like a copy already seen."""
    storage = tmp_path / "s"
    log = FileLog(storage, fsync=False, follow=False)

    class Sink:
        def on_records(self, records: object) -> None: ...
        def on_reset(self) -> None: ...
        def on_skipped(self, skipped: object) -> None: ...

    await log.open(Sink())
    await log.append([{"event": "put", "k": "a"}])
    with open(log.path, "ab") as f:
        f.write(line(event="put", k="poison", seq=2**64 - 1))
    await log.append([{"event": "put", "k": "b"}])
    await log.compact([{"event": "put", "k": "a"}, {"event": "put", "k": "b"}])
    await log.append([{"event": "put", "k": "c"}])
    await log.close()
    items = list(iter_history(storage))
    keys = [i.get("k") for i in items if not isinstance(i, SkippedLine)]
    assert keys == ["a", "b", "c"]
    assert [i.reason for i in items if isinstance(i, SkippedLine)] == [REASON_BAD_SEQ]


async def test_a_new_log_states_its_format_and_a_newer_major_is_refused(tmp_path: Path) -> None:
    """Issue 7: the log records its format version; readers refuse a newer major one
    with a clear error, and read a newer minor one (it only adds fields)."""
    from snerd.errors import LogFormatError
    from snerd.eventlog.codec import FORMAT
    from snerd.eventlog.filelog import FileLog

    class Sink:
        def __init__(self) -> None:
            self.records: list[dict[str, object]] = []

        def on_records(self, records: object) -> None:
            self.records.extend(records)  # type: ignore[arg-type]

        def on_reset(self) -> None:
            self.records.clear()

        def on_skipped(self, skipped: object) -> None:
            return None

    log = FileLog(tmp_path)
    await log.open(Sink())
    await log.append([{"event": "enqueued", "taskId": "a", "taskType": "t"}])
    await log.close()
    path = tmp_path / "tasks" / "tasks.log"
    first = orjson.loads(path.read_bytes().splitlines()[0])
    assert first["format"] == FORMAT
    sink = Sink()
    again = FileLog(tmp_path)
    await again.open(sink)
    assert "format" not in sink.records[0]  # readers strip it, as they strip the chain
    await again.close()
    for newer, refused in (("1.9", False), ("2.0", True)):
        text = path.read_bytes().replace(b'"format":"1.1"', b'"format":"' + newer.encode() + b'"')
        path.write_bytes(text)
        reader = FileLog(tmp_path)
        if refused:
            with pytest.raises(LogFormatError, match=r"format '2\.0'"):
                await reader.open(Sink())
        else:
            await reader.open(Sink())
            await reader.close()
        text = path.read_bytes().replace(b'"format":"' + newer.encode() + b'"', b'"format":"1.1"')
        path.write_bytes(text)
