"""The fast read paths equal the full ones: the scan, the census, the per-task index."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis_budget import examples

from snerd.eventlog import index as idx
from snerd.eventlog.base import SkippedLine
from snerd.eventlog.history import iter_history
from snerd.eventlog.scan import Odd, history_paths, scan_history
from snerd.projections.history import audit, summarize
from snerd.tools.replay_fast import fast_replay, history_of, indexed_history, noting_parents
from snerd.tools.replay_source import open_source

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "projections"))
import loggen

NOW = loggen.T0 + 300


def _lines(records: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def build_storage(root: Path, records: list[dict[str, Any]], cuts: list[int],
                  garbage: bool = False, renumber: bool = True) -> Path:  # fmt: skip
    """A storage whose history is ``records`` (given seq 1..n), compacted at ``cuts``:
    each later file starts with a snapshot header and block, then copies of the records
    just before the cut (a compaction's tail), then its own records."""
    storage = root / "s"
    tasks = storage / "tasks"
    (tasks / "archive").mkdir(parents=True)
    for i, record in enumerate(records):
        if renumber:
            record["seq"] = i + 1
    bounds = [0, *sorted(set(cuts)), len(records)]
    for k in range(len(bounds) - 1):
        lo, hi = bounds[k], bounds[k + 1]
        head: list[dict[str, Any]] = []
        if k:
            block = [dict(r, compacted=True) for r in records[max(0, lo - 2) : lo]
                     if r.get("event") == "enqueued"]  # fmt: skip
            head = [{"event": "snapshot", "seq": lo, "records": len(block)}, *block,
                    *records[max(0, lo - 3) : lo]]  # fmt: skip
        body = _lines(head + records[lo:hi])
        if garbage and k == 0:
            body += b"not json\n"
        last = k == len(bounds) - 2
        path = tasks / "tasks.log" if last else tasks / "archive" / f"tasks-{1000 + k}-{hi}.log"
        path.write_bytes(body)
    return storage


def read_history(storage: Path) -> list[Any]:
    """Every record of a storage's whole history (archives first), read once."""
    return [r for r in iter_history(storage) if not isinstance(r, SkippedLine)]


def full_history(records: list[Any], task: str) -> Any:
    """A task's history by a rescan of the whole history (``read_history``)."""
    parents: set[str] = set()
    for _ in noting_parents(records, task, parents):
        pass
    return history_of(records, task, parents, NOW)


def kept(old: idx.TaskIndex, new: idx.TaskIndex) -> bool:
    """Whether ``new`` starts with every entry of ``old`` (hashes and places)."""
    n, m = old.count, new.count
    return (new.raw[: 4 * n] == old.raw[: 4 * n]
            and new.raw[4 * m : 4 * m + 8 * n] == old.raw[4 * n :])  # fmt: skip


def ids_of(records: list[dict[str, Any]]) -> set[str]:
    return {v for r in records for v in (r.get("taskId"), r.get("task"), r.get("dlqKey"))
            if isinstance(v, str) and v}  # fmt: skip


logs_and_cuts = st.tuples(
    loggen.any_logs, st.lists(st.integers(min_value=1, max_value=40), max_size=3)
)


# --- the scan reads what iter_history reads -------------------------------------------------


@settings(max_examples=examples(200), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(data=logs_and_cuts)
def test_the_scan_yields_the_records_of_the_full_history(tmp_path_factory: Any, data: Any) -> None:
    records, cuts = data
    storage = build_storage(tmp_path_factory.mktemp("h"), records, cuts, garbage=True)
    expected = read_history(storage)
    got = [row for batch in scan_history(history_paths(storage)) for row in batch.rows]
    assert len(got) == len(expected)
    for row, record in zip(got, expected, strict=False):
        if isinstance(row, Odd):
            assert row.record == record
        else:
            assert (row.event, row.seq, row.taskId, row.task) == (
                record.get("event"), record.get("seq"), record.get("taskId"), record.get("task"))


# --- the census gives the summary's figures -----------------------------------------------


def _census_agrees(storage: Path, records: list[Any] | None = None) -> bool:
    """(``records``: the storage's history, when read already.)"""
    source = open_source(storage)
    tally = fast_replay(source, NOW)
    records = read_history(storage) if records is None else records
    full = summarize(records, NOW)
    if tally is None:
        return False
    assert (tally.counts(), tally.events, tally.invalid) == (
        full.counts(), full.events, full.invalid)
    return True


@settings(max_examples=examples(300), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(data=logs_and_cuts)
def test_the_census_agrees_with_the_summary_and_the_checked_one_vouches_only_for_clean_logs(
    tmp_path_factory: Any, data: Any
) -> None:
    """One drawn storage, both censuses: the plain one gives the summary's figures
    whenever it answers; the checked one answers only for a log the full --verify finds
    clean (``_checked_agrees``, below), with the same figures."""
    records, cuts = data
    storage = build_storage(tmp_path_factory.mktemp("c"), records, cuts)
    history = read_history(storage)
    _census_agrees(storage, history)
    _checked_agrees(storage, history)


@settings(max_examples=examples(200), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(logs=loggen.valid_logs)
def test_the_census_answers_for_a_plain_queue_and_agrees(
    tmp_path_factory: Any, logs: Any
) -> None:
    kinds = {"enqueued", "claimed", "progress", "succeeded", "retry_scheduled",
             "dead_lettered", "cancelled", "claim_released"}  # fmt: skip
    plain = [r for r in logs if r.get("event") in kinds and not r.get("triggerAfterIds")
             and r.get("dlqKey") in (None, r.get("taskId"))]  # fmt: skip
    storage = build_storage(tmp_path_factory.mktemp("p"), plain, [])
    source = open_source(storage)
    tally = fast_replay(source, NOW)
    if tally is None:  # a light line without a usable id, a claim of attempt 0...
        return
    assert _census_agrees(storage)


def test_the_census_answers_for_a_realistic_log(tmp_path: Path) -> None:
    from benchmarks.bench_replay import generate

    generate(tmp_path / "s", 300)
    assert _census_agrees(tmp_path / "s")
    assert idx.read_index(tmp_path / "s") is not None  # built on the way


# --- the index gives a rescan's history ------------------------------------------------------


def _index_agrees(storage: Path, ids: set[str]) -> None:
    source = open_source(storage)
    records = read_history(storage)
    for task in sorted(ids):
        known, entry = indexed_history(source, task, NOW)
        if known:
            assert entry == full_history(records, task), task


@settings(max_examples=examples(200), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(data=logs_and_cuts, more=loggen.any_logs)
def test_the_index_gives_a_rescans_history_also_after_the_log_grew(
    tmp_path_factory: Any, data: Any, more: list[dict[str, Any]]
) -> None:
    records, cuts = data
    storage = build_storage(tmp_path_factory.mktemp("i"), records, cuts)
    idx.fresh_index(storage)
    assert idx.read_index(storage) is not None
    _index_agrees(storage, ids_of(records))
    with open(storage / "tasks" / "tasks.log", "ab") as f:  # the log grows
        for i, record in enumerate(more):
            record["seq"] = len(records) + 10 + i
        f.write(_lines(more))
    _index_agrees(storage, ids_of(records) | ids_of(more))


def test_an_index_is_extended_not_rebuilt_when_the_log_grew(tmp_path: Path) -> None:
    from benchmarks.bench_replay import generate

    log, _n = generate(tmp_path / "s", 50)
    storage = tmp_path / "s"
    first = idx.fresh_index(storage)
    size = log.stat().st_size
    log.write_bytes(log.read_bytes() + log.read_bytes()[: log.read_bytes().index(b"\n") + 1])
    grown = idx.fresh_index(storage)
    assert grown.count == first.count + 1
    again = idx.read_index(storage)
    assert again is not None and again.files[-1].size == size + (log.stat().st_size - size)
    assert kept(first, again)  # the old entries were kept


def test_a_large_logs_index_is_built_aside_and_equals_the_one_built_in_the_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a large log the first plain replay builds the index in a forked child, which scans
    the files while the replay counts them: the replay answers as without it, and the
    index is there when it does, equal to the one the replay's own pass builds."""
    from benchmarks.bench_replay import generate
    from snerd.eventlog import aside

    generate(tmp_path / "s", 300)
    storage = tmp_path / "s"
    tally = fast_replay(open_source(storage), NOW)  # a small log: built in the pass
    inline = idx.read_index(storage)
    assert tally is not None and inline is not None and inline.count > 300
    idx.index_path(storage).unlink()
    monkeypatch.setattr(aside, "ASIDE_BYTES", 0)
    forks: list[int] = []
    real_fork = aside.os.fork
    monkeypatch.setattr(aside.os, "fork", lambda: forks.append(1) or real_fork())
    assert fast_replay(open_source(storage), NOW) == tally
    forked = idx.read_index(storage)
    assert forks == [1] and forked is not None
    assert (forked.files, forked.count, forked.raw) == (inline.files, inline.count, inline.raw)
    assert fast_replay(open_source(storage), NOW) == tally and forks == [1]  # current: none
    idx.index_path(storage).unlink()  # ``--verify``'s census: the chain's check is aside
    assert fast_replay(open_source(storage), NOW, checked=True) is not None and forks == [1]
    again = idx.read_index(storage)
    assert again is not None and (again.count, again.raw) == (inline.count, inline.raw)


@pytest.mark.parametrize("damage", ["delete", "garbage", "truncate", "other-file"])
def test_a_missing_or_damaged_index_is_rebuilt(tmp_path: Path, damage: str) -> None:
    from benchmarks.bench_replay import generate

    generate(tmp_path / "s", 40)
    storage = tmp_path / "s"
    idx.fresh_index(storage)
    path = idx.index_path(storage)
    if damage == "delete":
        path.unlink()
    elif damage == "garbage":
        path.write_bytes(b"\x00garbage\n" * 10)
    elif damage == "truncate":
        path.write_bytes(path.read_bytes()[:-5])
    else:  # the log was replaced by another file (a new inode)
        log = storage / "tasks" / "tasks.log"
        fresh = log.with_name("tasks.log.new")
        fresh.write_bytes(log.read_bytes())
        fresh.replace(log)
    _index_agrees(storage, {f"task-{i:08d}" for i in range(0, 40, 7)})
    assert idx.read_index(storage) is not None


# --- the checked census vouches only for logs the full --verify finds clean ---------------------


def _checked_agrees(storage: Path, records: list[Any] | None = None) -> bool:
    """(``records``: the storage's history, when read already.)"""
    from snerd.tools.replay_checks import Verifier

    tally = fast_replay(open_source(storage), NOW, checked=True)
    if tally is None:
        return False
    records = read_history(storage) if records is None else records
    full = audit(records, NOW, keep=lambda _: False, check=Verifier())
    assert full.problems == []
    assert (tally.counts(), tally.events, tally.invalid) == (
        full.counts(), full.events, full.invalid)
    return True


@settings(max_examples=examples(300), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(logs=loggen.valid_logs)
def test_the_checked_census_on_plain_queues(tmp_path_factory: Any, logs: Any) -> None:
    kinds = {"enqueued", "claimed", "progress", "succeeded", "retry_scheduled",
             "dead_lettered", "cancelled", "claim_released"}  # fmt: skip
    plain = [r for r in logs if r.get("event") in kinds]
    _checked_agrees(build_storage(tmp_path_factory.mktemp("w"), plain, []))


def test_the_checked_census_answers_for_a_realistic_log(tmp_path: Path) -> None:
    from benchmarks.bench_replay import generate

    generate(tmp_path / "s", 300)
    assert _checked_agrees(tmp_path / "s")


def test_checked_rows_type_every_field_the_rules_check() -> None:
    from snerd.tools.replay_checks import FIELD_RULES, CheckedRow

    assert set(FIELD_RULES) <= set(CheckedRow.__struct_fields__)


def test_the_plain_chain_check_equals_the_full_one_or_declines(tmp_path: Path) -> None:
    from benchmarks.bench_replay import generate
    from snerd.eventlog.chain import verify, verify_plain

    log, _ = generate(tmp_path / "s", 100)
    files = history_paths(tmp_path / "s")
    assert verify_plain(files) == verify(files)
    data = log.read_bytes()
    cut = data.index(b"\n", 5000) + 1
    log.write_bytes(data[:cut] + data[cut:].replace(b"send_email", b"send_emaiL", 1))
    assert verify_plain(files) is None  # a tampered line: the full check names it
    assert any(b.kind == "altered" for b in verify(files).breaks)


def writer_log(steps: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
    """What a correct writer of a plain queue writes for ``steps`` (op, task, extra):
    ``op`` picks one of the moves legal for the task's state at that point."""
    live: dict[str, tuple[str, int] | None] = {}
    attempts: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    for n, (op, who, extra) in enumerate(steps):
        tid, ts = f"t{who}", int(loggen.T0 * 1000) + n
        daemon = f"d{extra % 2}"
        fields = {"taskId": tid, "taskType": "x", "taskData": "{}", "retryCount": 0,
                  "maxRetries": 3, "ts": ts, "daemon": daemon}  # fmt: skip
        if tid not in live:
            moves = ["enqueued"]
        elif live[tid] is None:
            moves = ["claimed", "claimed", "cancelled"]
        else:
            moves = ["progress", "claim_released", "succeeded", "retry_scheduled",
                     "dead_lettered"]  # fmt: skip
        move, claim = moves[op % len(moves)], live.get(tid)
        if move == "enqueued":
            live[tid], attempts[tid] = None, 0
            out.append({**fields, "event": "enqueued"})
        elif move == "claimed":
            attempts[tid] += 1
            live[tid] = (daemon, attempts[tid])
            light = {"event": "claimed", "task": tid, "ts": ts, "daemon": daemon}
            out.append(light if extra % 3 == 0 else {**light, "attempt": attempts[tid]})
        elif move == "cancelled":
            del live[tid]
            out.append({**fields, "event": "cancelled"})
        elif move == "progress":
            assert claim is not None
            out.append({"event": "progress", "task": tid, "ts": ts, "attempt": claim[1],
                        "data": extra})  # fmt: skip
        elif move == "claim_released":
            live[tid] = None
            out.append({"event": "claim_released", "task": tid, "ts": ts})
        else:
            assert claim is not None
            out.append({**fields, "event": move, "daemon": claim[0], "attempt": claim[1]})
            if move == "retry_scheduled":
                live[tid] = None
            else:
                del live[tid]
    return out


steps = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(0, 5)),
                 max_size=60)  # fmt: skip


@settings(max_examples=examples(300), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(plan=steps, fault=st.integers(0, 6), where=st.integers(0, 59), other=st.integers(0, 59))
def test_the_checked_census_vouches_for_a_correct_writer_and_never_for_a_fault(
    tmp_path_factory: Any, plan: Any, fault: int, where: int, other: int
) -> None:
    records = writer_log(plan)
    for n, record in enumerate(records):
        record["seq"] = n + 1
    if records and fault:
        i, j = where % len(records), other % len(records)
        if fault == 1:
            del records[i]  # a lost record
        elif fault == 2:
            records[i], records[j] = records[j], records[i]  # two swapped
        elif fault == 3:
            records[i]["daemon"] = "d9"  # another daemon's outcome
        elif fault == 4:
            records.insert(j + 1, dict(records[j]))  # a record twice
        elif fault == 6:  # progress or a release naming another attempt
            light = [r for r in records if r["event"] in ("progress", "claim_released")]
            target = light[where % len(light)] if light else records[i]
            target["attempt"] = target.get("attempt", 0) + 1 + other % 2
        else:
            records[i]["seq"] = records[j]["seq"]  # seq out of order
    storage = build_storage(tmp_path_factory.mktemp("f"), records, [], renumber=fault != 5)
    event(f"fault {fault}")
    answered = _checked_agrees(storage)
    if not fault:
        assert answered


def test_verify_through_the_fast_path_reports_what_the_full_check_reports(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from benchmarks.bench_replay import generate
    from snerd.eventlog.chain import verify
    from snerd.tools.replay import replay

    log, _ = generate(tmp_path / "s", 100)
    storage = str(tmp_path / "s")
    clean = orjson.loads(CliRunner().invoke(replay, [storage, "--verify", "--json"]).output)
    plain = CliRunner().invoke(replay, [storage, "--verify"])
    assert plain.exit_code == 0 and "Verified: no problems found." in plain.output
    report = verify(history_paths(tmp_path / "s"))
    assert f"{report.chained:,} checksummed" in plain.output
    assert clean["chain"]["head"] == report.head
    data = log.read_bytes()
    cut = data.index(b"\n", 5000) + 1
    log.write_bytes(data[:cut] + data[cut:].replace(b"send_email", b"send_emaiL", 1))
    tampered = CliRunner().invoke(replay, [storage, "--verify"])
    assert tampered.exit_code == 1 and "altered" in tampered.output


def test_the_index_of_a_realistic_log_gives_a_rescans_history(tmp_path: Path) -> None:
    from benchmarks.bench_replay import generate

    generate(tmp_path / "s", 3000)  # ~4 MB: places deep into 1 MB chunks
    source = open_source(tmp_path / "s")
    records = read_history(tmp_path / "s")
    for i in [*range(0, 3000, 97), 2999]:
        task = f"task-{i:08d}"
        known, entry = indexed_history(source, task, NOW)
        assert known and entry is not None
        assert entry == full_history(records, task)


@pytest.mark.parametrize("instant", ["0001-01-01T00:30:00+01:00", "9999-12-31T23:30:00-01:00"])
def test_the_checked_census_leaves_instants_at_the_edge_of_time_to_the_audit(
    tmp_path: Path, instant: str
) -> None:
    records = writer_log([(0, 0, 0), (0, 1, 0)])
    records[1]["executeAt"] = instant  # msgspec reads it; parse_instant cannot place it
    storage = build_storage(tmp_path, records, [])
    assert not _checked_agrees(storage)
    records[1]["executeAt"] = "2024-01-01T00:30:00+01:00"
    assert _checked_agrees(build_storage(tmp_path / "ok", records, []))


def test_the_scan_reads_lines_longer_than_its_buffer_and_torn_tails(tmp_path: Path) -> None:
    records = writer_log([(0, 0, 0), (0, 1, 0), (0, 2, 0)])
    records[1]["taskData"] = "x" * (3 << 20)  # three times the scan's buffer
    for final in (False, True):
        storage = build_storage(tmp_path / str(final), [dict(r) for r in records], [])
        log = storage / "tasks" / "tasks.log"
        if final:  # the same lines as an archive, with a torn tail
            archive = storage / "tasks" / "archive" / "tasks-1-3.log"
            log.rename(archive)
            archive.write_bytes(archive.read_bytes() + b'{"taskId": "t9", "ta')
        else:
            log.write_bytes(log.read_bytes() + b'{"taskId": "t9"')
        expected = list(iter_history(storage))
        got = [item for batch in scan_history(history_paths(storage))
               for item in (*batch.rows, *batch.skipped)]  # fmt: skip
        assert len(got) == len(expected) == 4
        for item, want in zip(got, expected, strict=True):
            if isinstance(want, SkippedLine):
                assert item == want
            else:
                assert not isinstance(item, SkippedLine)
                assert (item.seq, item.taskId) == (want.get("seq"), want.get("taskId"))


def test_a_log_rewritten_in_place_is_reindexed(tmp_path: Path) -> None:
    records = writer_log([(0, i % 4, 0) for i in range(4)] + [(1, i % 4, 1) for i in range(4)])
    storage = build_storage(tmp_path, records, [])
    idx.fresh_index(storage)
    log = storage / "tasks" / "tasks.log"
    other = writer_log([(0, 3, 0), (0, 2, 0), (0, 1, 0), (0, 0, 0), (1, 0, 0), (2, 0, 0)])
    for n, record in enumerate(other):
        record["seq"] = n + 1
    with open(log, "r+b") as f:  # same inode, a longer content: no stale place may survive
        f.write(_lines(other) + b"\n" * 4096)
    _index_agrees(storage, {"t0", "t1", "t2", "t3"})
    source = open_source(storage)
    known, entry = indexed_history(source, "t0", NOW)
    assert known and entry is not None and entry.state == "completed"


def test_an_index_of_files_replaced_during_its_scan_is_not_written(tmp_path: Path) -> None:
    storage = build_storage(tmp_path, writer_log([(0, 0, 0)]), [])
    scanner = idx.Scanner(history_paths(storage))
    builder = idx.Builder()
    for batch in scanner.batches():
        builder.add(batch)
    log = storage / "tasks" / "tasks.log"
    fresh = log.with_name("tasks.log.new")
    fresh.write_bytes(log.read_bytes())
    fresh.replace(log)  # a compaction put a new live log in place meanwhile
    assert not idx.write_index(storage, scanner, builder)
    assert idx.read_index(storage) is None


@pytest.mark.parametrize("forked", [False, True])
@pytest.mark.parametrize("args", [["--json"], ["--verify"], ["--at", "2030-01-01T00:00:00Z"], []])
def test_every_replay_of_a_storage_leaves_a_current_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], forked: bool
) -> None:
    """Also when the index is built aside, as on a large log (its census declines)."""
    from click.testing import CliRunner

    from snerd.eventlog import aside
    from snerd.tools.replay import replay

    if forked:
        monkeypatch.setattr(aside, "ASIDE_BYTES", 0)
    records = writer_log([(0, 0, 0), (0, 1, 0), (1, 0, 0)])
    records.append({"taskId": "x", "taskType": "t"})  # a SnerdMQ line: the census declines
    storage = build_storage(tmp_path, records, [])
    result = CliRunner().invoke(replay, [str(storage), *args])
    assert result.exit_code in (0, 1), result.output
    index = idx.read_index(storage)
    assert index is not None
    assert idx.resume_point(index, history_paths(storage)) is not None
    _index_agrees(storage, {"t0", "t1", "x"})


@settings(max_examples=examples(150), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(first=loggen.any_logs, later=loggen.any_logs, copied=st.integers(0, 3))
def test_an_index_is_extended_across_a_compaction(
    tmp_path_factory: Any, first: list[dict[str, Any]], later: list[dict[str, Any]],
    copied: int,
) -> None:
    storage = build_storage(tmp_path_factory.mktemp("k"), first, [])
    idx.fresh_index(storage)
    tasks = storage / "tasks"
    n = len(first)
    (tasks / "tasks.log").rename(tasks / "archive" / f"tasks-1000-{n}.log")  # same inode
    block = [dict(r, compacted=True) for r in first[-2:] if r.get("event") == "enqueued"]
    for i, record in enumerate(later):
        record["seq"] = n + 1 + i
    head = [{"event": "snapshot", "seq": n, "records": len(block)}, *block]
    tail = first[n - copied :] if copied else []  # the records a compaction carries over
    (tasks / "tasks.log").write_bytes(_lines([*head, *tail, *later]))
    old = idx.read_index(storage)
    assert old is not None and idx.resume_point(old, history_paths(storage)) is not None
    _index_agrees(storage, ids_of(first) | ids_of(later))
    grown = idx.read_index(storage)
    assert grown is not None and kept(old, grown)  # extended, not rebuilt


@pytest.mark.parametrize("forked", [False, True])
@pytest.mark.parametrize("instant", ["9999-12-31T23:30:00-01:00", "2024-01-01T00:30:00+01:00"])
def test_verify_with_the_edge_of_time_searched_aside_reports_what_the_audit_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, instant: str, forked: bool
) -> None:
    """``replay --verify`` leaves the search for instants at the edge of time to the
    chain check's pass over the bytes (in a forked child for a big log): where one is,
    the replay runs again with the audit, so its summary is the audit's to the letter
    (where there is none, the census's, which agrees with the audit on a clean log)."""
    from click.testing import CliRunner

    from snerd.eventlog import aside
    from snerd.tools import replay as tool

    if forked:
        monkeypatch.setattr(aside, "ASIDE_BYTES", 0)
    records = writer_log([(0, 0, 0), (0, 1, 0), (0, 0, 0), (0, 1, 0)])
    records[1]["executeAt"] = instant
    storage = str(build_storage(tmp_path, records, []))
    censuses: list[bool] = []
    real = tool.fast_replay

    def counted(*args: Any, **kwargs: Any) -> Any:
        tally = real(*args, **kwargs)
        censuses.append(tally is not None)
        return tally

    audits: list[int] = []
    real_audit = tool.audit

    def audit(*args: Any, **kwargs: Any) -> Any:
        audits.append(1)
        return real_audit(*args, **kwargs)

    monkeypatch.setattr(tool, "fast_replay", counted)
    monkeypatch.setattr(tool, "audit", audit)
    fast = CliRunner().invoke(tool.replay, [storage, "--verify"])
    assert censuses == [True]  # the census ran without the search (and found no fault)
    assert len(audits) == (1 if instant.startswith("9999") else 0)  # the edge: audited
    monkeypatch.setattr(tool, "fast_replay", lambda *args, **kwargs: None)
    audited = CliRunner().invoke(tool.replay, [storage, "--verify"])
    assert (fast.exit_code, fast.output) == (audited.exit_code, audited.output)
