"""``replay`` says so when the history it reads starts at a compaction whose archive
is gone: tasks that ended before it are in no figure it prints."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from click.testing import CliRunner
from seedkit import ok_and_bad

from snerd.tools.compact import compact
from snerd.tools.replay import replay


async def _run(path: Path, ids: list[str]) -> None:
    queue = ok_and_bad(path)
    async with queue:
        for task_id in ids:
            await queue.enqueue(task_id, "ok", {})
        await queue.join(timeout=10)


def _replay(path: Path) -> str:
    result = CliRunner().invoke(replay, [str(path)])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())  # (rich wraps long lines)


def _compact(store: Path) -> None:
    assert CliRunner().invoke(compact, [str(store)]).exit_code == 0


def _archives(store: Path) -> list[Path]:
    return sorted((store / "tasks" / "archive").glob("*.log"))


def test_a_pruned_history_is_named_with_the_seq_it_ends_at(tmp_path: Path) -> None:
    store = tmp_path / "q"
    asyncio.run(_run(store, ["a", "b"]))  # seqs 1-6
    assert "was compacted and" not in _replay(store)
    _compact(store)
    asyncio.run(_run(store, ["c"]))  # seqs 7-9, after the snapshot of 6
    _compact(store)
    assert "was compacted and" not in _replay(store)  # both archives: the whole history
    oldest, _newer = _archives(store)
    oldest.unlink()  # retention let the oldest go: the newer starts at the snapshot of 6
    out = _replay(store)
    assert "the history up to seq 6 was compacted and no archive of it is left" in out
    for archive in _archives(store):
        archive.unlink()
    assert "the history up to seq 9 was compacted" in _replay(store)


def test_one_compacted_file_read_alone_says_where_the_rest_is(tmp_path: Path) -> None:
    store = tmp_path / "q"
    asyncio.run(_run(store, ["a"]))
    _compact(store)
    alone = tmp_path / "copy.log"
    shutil.copy(store / "tasks" / "tasks.log", alone)
    out = _replay(alone)
    assert "the history up to seq 3 was compacted and this file starts with its snapshot" in out
    assert "was compacted and" not in _replay(_archives(store)[0])  # the archive starts at seq 1


def test_a_compaction_of_nothing_loses_nothing(tmp_path: Path) -> None:
    store = tmp_path / "q"
    asyncio.run(_run(store, []))
    _compact(store)  # a snapshot of seq 0: no history before it
    for archive in _archives(store):
        archive.unlink()
    assert "was compacted and" not in _replay(store)
