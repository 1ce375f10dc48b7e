"""Line encoding/decoding and storage layout resolution."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from snerd.errors import LogError
from snerd.eventlog.base import SkippedLine
from snerd.eventlog.codec import MAX_SEQ, decode_complete, encode, max_seq, split_complete
from snerd.eventlog.layout import Layout, archive_name, log_file, resolve

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
records = st.dictionaries(st.text(max_size=8), json_values, max_size=4).filter(
    # reserved by the log: the checksum field is stripped by readers, so is the format
    # field (and one a reader cannot read is refused: log-format.md §1.7), and a record
    # whose integer seq is out of range is skipped (tests/eventlog/test_seq_range.py)
    lambda r: "chain" not in r and "format" not in r
    and not (type(r.get("seq")) is int and not 0 <= r["seq"] <= MAX_SEQ)
)


def _is_record(line: bytes) -> bool:
    try:
        return isinstance(orjson.loads(line), dict)
    except orjson.JSONDecodeError:
        return False


garbage = st.binary(min_size=1, max_size=30).filter(
    lambda b: b"\n" not in b and b.strip() != b"" and not _is_record(b)
)


def test_encode_is_one_terminated_line() -> None:
    line = encode({"a": "x\ny", "b": [1, 2]})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    with pytest.raises(LogError):
        encode({"a": object()})


def test_decode_reports_bad_lines_in_order() -> None:
    data = b'{"a":1}\nnope\n\n[1]\n{"b":2}\n'
    out = decode_complete(data, 100)
    assert out.records == [{"a": 1}, {"b": 2}]
    assert out.skipped == [
        (1, SkippedLine(108, b"nope", "invalid_json")),
        (1, SkippedLine(114, b"[1]", "not_object")),
    ]


def test_split_complete() -> None:
    assert split_complete(b"a\nb\nc") == (b"a\nb\n", b"c")
    assert split_complete(b"abc") == (b"", b"abc")
    assert split_complete(b"a\n") == (b"a\n", b"")


def test_max_seq_ignores_non_integers() -> None:
    assert max_seq([{"seq": 3}, {"seq": "9"}, {"seq": True}, {}, {"seq": 2}], 1) == 3


@given(st.lists(st.one_of(records.map(lambda r: ("r", r)), garbage.map(lambda g: ("g", g)))))
def test_decode_round_trips_records_and_keeps_garbage_raw(
    items: list[tuple[str, object]],
) -> None:
    data = b""
    expected_records = []
    expected_skipped = []
    for kind, value in items:
        if kind == "r":
            assert isinstance(value, dict)
            expected_records.append(value)
            data += encode(value)
        else:
            assert isinstance(value, bytes)
            expected_skipped.append((len(data), value))
            data += value + b"\n"
    out = decode_complete(data, 0)
    assert out.records == expected_records
    assert [(s.offset, s.raw) for _, s in out.skipped] == expected_skipped


def test_resolve_accepts_storage_tasks_dir_or_log(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    layout.ensure()
    layout.log_path.touch()
    assert resolve(tmp_path) == layout
    assert resolve(layout.tasks_dir) == layout
    assert resolve(layout.log_path) == layout
    assert log_file(tmp_path) == layout.log_path
    other = tmp_path / "copy.log"
    other.write_bytes(b"")
    assert log_file(other) == other
    with pytest.raises(LogError):
        resolve(other)


def test_archive_files_sort_numerically(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    layout.ensure()
    for ts, seq in [(900, 5), (1000, 7), (1000, 12), (99, 1)]:
        (layout.archive_dir / archive_name(ts, seq)).touch()
    (layout.archive_dir / "notes.txt").touch()
    assert [p.name for p in layout.archive_files()] == [
        "tasks-0000000000099-000000000001.log",
        "tasks-0000000000900-000000000005.log",
        "tasks-0000000001000-000000000007.log",
        "tasks-0000000001000-000000000012.log",
    ]
    assert layout.archive_files() == sorted(layout.archive_dir.glob("tasks-*.log"))
    (layout.archive_dir / "tasks-1000-3.log").touch()  # an unpadded name still orders
    assert layout.archive_files()[2].name == "tasks-1000-3.log"
