"""Compaction thresholds and no-op compactions (issue 9.6)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result
from daemonkit import Wire
from test_compaction import compacted

from snerd.dispatcher.engine import EngineConfig
from snerd.dispatcher.housekeeping import should_compact


def cli(*args: str, **env: str) -> Result:
    """``snerdmq ARGS`` in this process, with ``env`` added to the environment (the
    command line as the console script parses it; nothing here needs its own process)."""
    from snerd.cli import build_cli

    return CliRunner().invoke(build_cli(), list(args), env=env)


def test_the_defaults_keep_a_small_queue_small() -> None:
    config = EngineConfig()
    # a long-running queue of a few live tasks: compacted after 10,000 dead records,
    # whatever the size (SnerdMQ's rule), and once past 1 MiB if half dead
    assert should_compact(config, size_bytes=3 << 20, records=10_010, live=10)
    assert should_compact(config, size_bytes=2 << 20, records=4_000, live=10)
    assert not should_compact(config, size_bytes=500_000, records=1_500, live=10)
    # mostly live: not worth it below the dead-record count
    assert not should_compact(config, size_bytes=30 << 20, records=100_000, live=95_000)
    assert not should_compact(config, size_bytes=5 << 20, records=10, live=10)


async def test_a_daemon_compacts_a_small_log_by_dead_records_and_only_once(spawn) -> None:
    wire: Wire = await spawn(register=("t",), env={"SNERD_COMPACT_DEAD_RECORDS": "20",
                                                   "SNERD_HOUSEKEEPING_SECONDS": "1"})
    for i in range(10):  # 30 records, all dead once done: far below any byte threshold
        await wire.ack(f"done-{i}")
        await wire.expect("execute", task_id=f"done-{i}")
        await wire.result(f"done-{i}")
    await wire.logged("done-9", "succeeded")
    await compacted(wire)
    archive = wire.storage / "tasks" / "archive"
    for _ in range(5):  # more housekeeping rounds, nothing appended: no more archives
        await wire.advance(1)
    assert len(list(archive.iterdir())) == 1


def test_compacting_an_unchanged_log_adds_no_archive(tmp_path: Path) -> None:
    store = tmp_path / "q"
    assert cli("enqueue", "t", "{}", "-s", str(store)).exit_code == 0
    results = [json.loads(cli("compact", str(store), "--json").stdout) for _ in range(4)]
    assert [r["compacted"] for r in results] == [True, False, False, False]
    assert len(list((store / "tasks" / "archive").iterdir())) == 1
    assert cli("enqueue", "t", "{}", "-s", str(store)).exit_code == 0
    assert json.loads(cli("compact", str(store), "--json").stdout)["compacted"] is True


def test_retention_picks_the_oldest_archives() -> None:
    from snerd.eventlog.layout import to_prune

    archives = [(1_000, 100), (2_000, 100), (3_000, 100)]  # (compaction ms, bytes)
    assert to_prune(archives, max_age_ms=None, max_bytes=None, now_ms=9_000) == 0
    assert to_prune(archives, max_age_ms=7_500, max_bytes=None, now_ms=9_000) == 1
    assert to_prune(archives, max_age_ms=None, max_bytes=250, now_ms=9_000) == 1
    assert to_prune(archives, max_age_ms=None, max_bytes=100, now_ms=9_000) == 2
    assert to_prune(archives, max_age_ms=0, max_bytes=None, now_ms=9_000) == 3
    # the boundary: an archive exactly max_age old goes, so 0 takes one made this very
    # millisecond (``snerdmq compact`` with SNERD_ARCHIVE_MAX_AGE_DAYS=0 right after it)
    assert to_prune(archives, max_age_ms=0, max_bytes=None, now_ms=3_000) == 3
    assert to_prune(archives, max_age_ms=1_000, max_bytes=None, now_ms=3_000) == 2


def test_the_daemons_read_the_retention_from_the_environment() -> None:
    from snerd.dispatcher.settings import engine_config

    assert engine_config({}).archive_max_age_seconds is None  # keep everything
    config = engine_config({"SNERD_ARCHIVE_MAX_AGE_DAYS": "30",
                            "SNERD_ARCHIVE_MAX_BYTES": "1000000"})  # fmt: skip
    assert config.archive_max_age_seconds == 30 * 86400
    assert config.archive_max_bytes == 1_000_000


async def test_the_memory_backend_honours_retention_too() -> None:
    from snerd.dispatcher.clock import ManualClock
    from snerd.dispatcher.engine import Engine
    from snerd.eventlog import MemoryLog, MemoryStore
    from snerd.projections.commands import Enqueue

    store = MemoryStore()
    clock = ManualClock(1_700_000_000.0)
    config = EngineConfig(daemon_id="d", passive=True, archive_max_bytes=1)
    engine = Engine(MemoryLog(store), executors=[], clock=clock, config=config)
    await engine.start()
    await engine.enqueue(Enqueue("a", "t"))
    assert await engine.compact()
    assert store.archives == []  # the budget holds no archive at all
    await engine.drain(0)


def test_snerdmq_compact_honours_retention(tmp_path: Path) -> None:
    store = tmp_path / "q"
    archive = store / "tasks" / "archive"
    for _ in range(3):
        assert cli("enqueue", "t", "{}", "-s", str(store)).exit_code == 0
        assert cli("compact", str(store)).exit_code == 0
    assert len(list(archive.iterdir())) == 3  # kept by default: the audit trail
    assert cli("enqueue", "t", "{}", "-s", str(store)).exit_code == 0
    assert cli("compact", str(store), SNERD_ARCHIVE_MAX_AGE_DAYS="0").exit_code == 0
    assert list(archive.iterdir()) == []
    bad = cli("compact", str(store), SNERD_ARCHIVE_MAX_BYTES="lots")
    assert bad.exit_code == 2 and "SNERD_ARCHIVE_MAX_BYTES" in bad.stderr
