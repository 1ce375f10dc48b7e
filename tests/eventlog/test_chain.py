"""Issue 12.7: a tamper-evident checksum chain over the exact bytes of every line.

Each record we write ends with ``"chain":"<b|k><32 hex>"``: BLAKE2b-128 over the
previous checksum and the line's own bytes. Readers strip it; ``verify`` (and
``snerdmq replay --verify``) names the first broken link: a bit flip, an edit, a
deletion, an insertion, a reorder; SnerdMQ's own unchained lines are told apart.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from logkit import Recorder

from snerd.eventlog import aside, chain
from snerd.eventlog.chain import (
    GENESIS,
    Chain,
    PlainCheck,
    split_line,
    verify,
    verify_plain,
    verify_plain_aside,
)
from snerd.eventlog.filelog import FileLog
from snerd.eventlog.history import history_files, iter_history
from snerd.tools.replay import replay

KEY = b"kept-outside-the-storage"


async def write_storage(storage: Path, *, key: bytes | None = None, compact: bool = True) -> None:
    """10 records, a compaction (archive + snapshot + tail), then 5 more."""
    log = FileLog(storage, fsync=False, follow=False, chain_key=key or b"")
    rec = Recorder()
    await log.open(rec)
    for i in range(10):
        await log.append([{"event": "put", "k": f"k{i % 4}", "taskId": f"t{i}", "n": i}])
    if compact:
        await log.compact(rec.snapshot())
    for i in range(10, 15):
        await log.append([{"event": "put", "k": f"k{i % 4}", "taskId": f"t{i}", "n": i}])
    await log.close()


def live(storage: Path) -> Path:
    return storage / "tasks" / "tasks.log"


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def breaks(storage: Path, key: bytes | None = None) -> list[Any]:
    """What verify finds wrong; our own writers never need its tolerance of the link
    older writers made after a snapshot block (``older_links``)."""
    report = verify(history_files(storage), key)
    return [*report.breaks, *(["an older writer's link"] * report.older_links)]


@pytest.fixture
async def storage(tmp_path: Path) -> Path:
    path = tmp_path / "s"
    await write_storage(path)
    return path


async def test_every_line_is_chained_and_readers_never_see_the_field(storage: Path) -> None:
    for path in history_files(storage):
        for line in lines_of(path):
            split = split_line(line.rstrip(b"\n"))
            assert split is not None, line
            assert orjson.loads(line)["chain"][0] == "b"  # plain JSON readers just see a field
    report = verify(history_files(storage))
    assert report.breaks == [] and report.unchained == 0
    assert report.chained == sum(len(lines_of(p)) for p in history_files(storage))
    items = list(iter_history(storage))
    assert items and all("chain" not in r for r in items)
    log = FileLog(storage, fsync=False, follow=False)
    rec = Recorder()
    await log.open(rec)
    await log.close()
    assert rec.records and all("chain" not in r for r in rec.records)


def test_the_chain_is_the_hash_of_the_previous_checksum_and_the_line_bytes() -> None:
    chain = Chain()
    body = orjson.dumps({"event": "put", "seq": 1})
    digest, line = chain.seal(GENESIS, body)
    assert line.startswith(body[:-1] + b',"chain":"b') and line.endswith(b'"}\n')
    import hashlib

    assert digest == hashlib.blake2b(GENESIS + body, digest_size=16).digest()
    assert split_line(line.rstrip(b"\n")) == (body, b"b", digest)


async def test_the_compacted_log_continues_the_archives_chain(storage: Path) -> None:
    archive, current = history_files(storage)
    header = orjson.loads(lines_of(current)[0])
    assert header["event"] == "snapshot" and header["chainFrom"][0] == "b"
    archived = [orjson.loads(x)["chain"] for x in lines_of(archive)]
    assert header["chainFrom"] in archived  # the archived log's head at the point


@pytest.mark.parametrize("following", [False, True], ids=["new-process", "follower"])
async def test_a_writer_after_a_compaction_elsewhere_continues_the_chain(
    tmp_path: Path, following: bool
) -> None:
    """Whoever appends right after a compaction with no tail (a process started
    later, or one that kept up and resumes) links its line to the archived head, as
    the compacting writer would: no false break."""
    path = tmp_path / "s"
    compactor, rec = FileLog(path, fsync=False, follow=False), Recorder()
    await compactor.open(rec)
    for i in range(6):
        await compactor.append([{"event": "put", "k": f"k{i % 2}", "taskId": f"t{i}", "n": i}])
    other = FileLog(path, fsync=False, follow=False)
    if following:
        await other.open(Recorder())
    await compactor.compact(rec.snapshot())
    await compactor.close()
    if not following:
        await other.open(Recorder())
    await other.append([{"event": "put", "k": "k9", "taskId": "t9", "n": 9}])
    await other.close()
    assert breaks(path) == []
    assert len(history_files(path)) == 2


async def test_a_line_an_older_writer_linked_to_the_snapshot_block_is_accepted(
    tmp_path: Path,
) -> None:
    """Before the fix above, such a writer linked to the block's last line: an unbroken
    chain as well, so verify accepts it (and only it) for the first line after the block."""
    path = tmp_path / "s"
    log, rec = FileLog(path, fsync=False, follow=False), Recorder()
    await log.open(rec)
    for i in range(4):
        await log.append([{"event": "put", "k": f"k{i % 2}", "taskId": f"t{i}", "n": i}])
    await log.compact(rec.snapshot())
    await log.close()
    lines = lines_of(live(path))
    split = split_line(lines[-1].rstrip(b"\n"))
    assert split is not None
    body = orjson.dumps({"event": "put", "k": "k9", "taskId": "t9", "n": 9, "seq": 99})
    for prev, accepted in ((split[2], True), (GENESIS, False)):
        _, line = Chain().seal(prev, body)
        live(path).write_bytes(b"".join(lines) + line)
        report = verify(history_files(path))
        assert (report.breaks == []) is accepted, prev
        assert report.older_links == (1 if accepted else 0)
    _, line = Chain().seal(split[2], body)  # what replay --verify says of the older link
    live(path).write_bytes(b"".join(lines) + line)
    shown = CliRunner().invoke(replay, [str(path), "--verify"])
    assert "Checksum chain intact" in shown.output, shown.output
    assert "as writers before 2026-12 did" in shown.output


async def test_a_compaction_at_the_archives_start_or_right_after_another_is_no_break(
    tmp_path: Path,
) -> None:
    """A compaction's ``chainFrom`` may be the head its archive started from: a writer
    that had read nothing compacts behind one that appended (found by the stateful
    tests), or a log is compacted twice with nothing written in between."""
    path = tmp_path / "s"
    ahead, behind, rec = FileLog(path, fsync=False, follow=False), FileLog(
        path, fsync=False, follow=False), Recorder()  # fmt: skip
    await ahead.open(Recorder())
    await behind.open(rec)
    await ahead.append([{"event": "put", "k": "a", "taskId": "t1", "n": 1}])
    await behind.compact(rec.snapshot())  # its point: before the archive's first line
    assert breaks(path) == []
    await behind.compact(rec.snapshot())  # nothing written since its own snapshot
    assert breaks(path) == [] and len(history_files(path)) == 3
    await ahead.append([{"event": "put", "k": "b", "taskId": "t2", "n": 2}])
    await ahead.close()
    await behind.close()
    assert breaks(path) == []


def tamper(storage: Path, tmp_path: Path, edit: Any) -> Path:
    copy = tmp_path / f"copy-{len(list(tmp_path.iterdir()))}"
    shutil.copytree(storage, copy)
    lines = lines_of(live(copy))
    live(copy).write_bytes(b"".join(edit(lines)))
    return copy


def first(storage: Path, key: bytes | None = None) -> Any:
    found = breaks(storage, key)
    assert found, "tampering went unnoticed"
    return found[0]


def seq_of(line: bytes) -> int:
    return int(orjson.loads(line)["seq"])


async def test_a_bit_flip_is_named(storage: Path, tmp_path: Path) -> None:
    def flip(lines: list[bytes]) -> list[bytes]:
        target = lines[-3]
        i = target.index(b'"n":') + 4
        lines[-3] = target[:i] + bytes([target[i] ^ 0x01]) + target[i + 1 :]  # 1 bit
        return lines

    copy = tamper(storage, tmp_path, flip)
    b = first(copy)
    assert b.kind == "altered" and b.offset == sum(map(len, lines_of(live(copy))[:-3]))


async def test_an_edit_is_named(storage: Path, tmp_path: Path) -> None:
    def edit(lines: list[bytes]) -> list[bytes]:
        lines[-2] = lines[-2].replace(b'"taskId":"t13"', b'"taskId":"t99"')
        return lines

    b = first(tamper(storage, tmp_path, edit))
    assert (b.kind, b.task_id) == ("altered", "t99")


async def test_a_deletion_is_named(storage: Path, tmp_path: Path) -> None:
    original = lines_of(live(storage))
    gone = seq_of(original[-3])
    b = first(tamper(storage, tmp_path, lambda lines: lines[:-3] + lines[-2:]))
    assert b.kind == "missing" and b.seq == gone + 1
    assert f"seq {gone} missing" in b.message


async def test_an_insertion_is_named_even_when_the_forger_chains_it(
    storage: Path, tmp_path: Path
) -> None:
    def insert(lines: list[bytes]) -> list[bytes]:
        before = split_line(lines[-3].rstrip(b"\n"))
        assert before is not None
        forged = orjson.dumps({"event": "put", "k": "evil", "taskId": "evil", "seq": 999})
        _, line = Chain().seal(before[2], forged)  # without a key anyone can do this
        return [*lines[:-2], line, *lines[-2:]]

    copy = tamper(storage, tmp_path, insert)
    b = first(copy)
    assert b.kind == "inserted", b
    assert b.seq == seq_of(lines_of(live(storage))[-2])  # the record after the insertion


async def test_an_unchained_insertion_is_named(storage: Path, tmp_path: Path) -> None:
    line = orjson.dumps({"event": "put", "k": "evil", "seq": 999}) + b"\n"
    b = first(tamper(storage, tmp_path, lambda lines: [*lines[:-1], line, *lines[-1:]]))
    assert b.kind == "unchained" and b.seq == 999


async def test_a_reorder_is_named(storage: Path, tmp_path: Path) -> None:
    def swap(lines: list[bytes]) -> list[bytes]:
        lines[-3], lines[-2] = lines[-2], lines[-3]
        return lines

    copy = tamper(storage, tmp_path, swap)
    b = first(copy)
    assert b.kind == "reordered", b
    assert b.seq == seq_of(lines_of(live(storage))[-2])


async def test_an_edited_archive_is_named(storage: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(storage, copy)
    archive = history_files(copy)[0]
    lines = lines_of(archive)
    archive.write_bytes(b"".join(lines[:2] + lines[3:]))  # one record of history deleted
    assert first(copy).kind == "missing"
    archive.write_bytes(b"".join(lines[:-5]))  # its end cut off: the head is gone
    kinds = [b.kind for b in breaks(copy)]
    assert "origin" in kinds


async def test_snerdmqs_own_lines_are_told_apart(storage: Path, tmp_path: Path) -> None:
    snerdmq = orjson.dumps({"taskId": "rust", "taskType": "t", "retryCount": 0}) + b"\n"
    copy = tamper(storage, tmp_path, lambda lines: [*lines[:-1], snerdmq, *lines[-1:]])
    report = verify(history_files(copy))
    assert report.breaks == [] and report.unchained == 1


async def test_appending_to_a_snerdmq_log_starts_the_chain(tmp_path: Path) -> None:
    storage = tmp_path / "s"
    live(storage).parent.mkdir(parents=True)
    rust = [orjson.dumps({"taskId": f"r{i}", "taskType": "t"}) + b"\n" for i in range(3)]
    live(storage).write_bytes(b"".join(rust))
    await write_storage(storage, compact=False)
    report = verify(history_files(storage))
    assert report.breaks == [] and report.unchained == 3 and report.chained == 15


async def test_a_keyed_chain_cannot_be_rewritten_without_the_key(tmp_path: Path) -> None:
    storage = tmp_path / "s"
    await write_storage(storage, key=KEY)
    assert verify(history_files(storage), KEY).breaks == []
    without = verify(history_files(storage))
    assert [b.kind for b in without.breaks] == ["unverifiable"]
    wrong = first(storage, b"not-the-key")
    assert "key is wrong" in wrong.message

    def rewrite(lines: list[bytes]) -> list[bytes]:  # edit, then re-chain without the key
        out, head = [], None
        for line in lines:
            split = split_line(line.rstrip(b"\n"))
            assert split is not None
            body = split[0].replace(b'"taskId":"t13"', b'"taskId":"t99"')
            prev = head if head is not None else orjson.loads(line).get("chainFrom")
            prev_bytes = prev if isinstance(prev, bytes) else bytes.fromhex(prev[1:])
            head, new = Chain().seal(prev_bytes, body)
            out.append(new)
        return out

    copy = tamper(storage, tmp_path, rewrite)
    assert first(copy, KEY).kind == "foreign_key"


async def test_replay_verify_names_the_broken_link(storage: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(replay, [str(storage), "--verify", "--json"])  # "put" is no event
    data = orjson.loads(ok.output)  # of ours: the fold's problems are not the point here
    assert data["chain"]["breaks"] == [] and data["chain"]["chained"] > 0

    def swap(lines: list[bytes]) -> list[bytes]:
        lines[-3], lines[-2] = lines[-2], lines[-3]
        return lines

    copy = tamper(storage, tmp_path, swap)
    bad = runner.invoke(replay, [str(copy), "--verify"])
    assert bad.exit_code == 1
    assert "checksum chain broken (reordered)" in bad.output


def test_sealing_a_batch_equals_sealing_line_by_line() -> None:
    bodies = [orjson.dumps({"seq": i, "x": "y" * i}) for i in range(5)] + [b"{}"]
    for key in (None, KEY):
        chain = Chain(key)
        head, lines = chain.seal_all(GENESIS, bodies)
        prev, one_by_one = GENESIS, []
        for body in bodies:
            prev, line = chain.seal(prev, body)
            one_by_one.append(line)
        assert (head, lines) == (prev, one_by_one)
        assert orjson.loads(lines[-1]) == {"chain": lines[-1][10:43].decode()}


@pytest.mark.parametrize("tampered", [False, True])
async def test_the_check_aside_reports_as_the_check_inline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tampered: bool
) -> None:
    """``replay --verify`` checks the chain in a forked child for a big log and in the
    caller for a small one (a fork of a big process costs more than the check): both
    give verify_plain's report, a broken link included."""
    storage = tmp_path / "plain"
    await write_storage(storage, compact=False)
    if tampered:
        storage = tamper(storage, tmp_path, lambda lines: [*lines[:-3], *lines[-2:]])
    files = history_files(storage)
    inline = verify_plain(files)
    assert (inline is None) == tampered  # the plain check leaves a broken link to verify

    def no_fork() -> int:
        raise AssertionError("a small log is checked without a fork")

    there, absent = (b'"seq":',), (b'"event":"nothing"', b"\x00")
    with monkeypatch.context() as patch:
        patch.setattr(chain.os, "fork", no_fork)
        assert verify_plain_aside(files)() == PlainCheck(inline, watched=False)
        assert verify_plain_aside(files, watch=there)() == PlainCheck(inline, watched=True)
        assert verify_plain_aside(files, watch=absent)() == PlainCheck(inline, watched=False)
    monkeypatch.setattr(aside, "ASIDE_BYTES", 0)
    forks: list[int] = []
    real_fork = chain.os.fork
    monkeypatch.setattr(chain.os, "fork", lambda: forks.append(1) or real_fork())
    assert verify_plain_aside(files)() == PlainCheck(inline, watched=False) and forks == [1]
    assert verify_plain_aside(files, watch=there)() == PlainCheck(inline, watched=True)
    assert verify_plain_aside(files, watch=absent)() == PlainCheck(inline, watched=False)
    assert forks == [1, 1, 1]
