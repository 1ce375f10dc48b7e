"""``stats`` after a compaction: the totals are the projection's counters (restated at
the head of the compacted log), so retention pruning the archives moves none of them;
the archives are read only for a rate group's limit that the live log has lost."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from seedkit import ok_and_bad

from snerd.tools import stats as stats_tool
from snerd.tools.compact import compact
from snerd.tools.stats import stats


async def _seed(path: Path, n: int, group: str | None = None) -> None:
    """``n`` tasks run to completion (in rate group ``group``, limit 7, if given), and
    one that fails once and dead-letters (no retries)."""
    queue = ok_and_bad(path)

    limits: dict[str, Any] = {} if group is None else {"rate_limit_group": group,
                                                        "max_per_minute": 7}  # fmt: skip
    async with queue:
        for i in range(n):
            await queue.enqueue(f"t{i}", "ok", {}, **limits)
        await queue.enqueue("doomed", "bad", {}, max_retries=0)
        await queue.join(timeout=10)


def _stats(store: Path) -> dict[str, Any]:
    result = CliRunner().invoke(stats, [str(store), "--json"])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.output)
    return data


def _compact(store: Path) -> None:
    result = CliRunner().invoke(compact, [str(store)])
    assert result.exit_code == 0, result.output


def test_the_totals_survive_compaction_and_pruned_archives(tmp_path: Path) -> None:
    store = tmp_path / "q"
    asyncio.run(_seed(store, 12))
    before = _stats(store)["totals"]
    assert before["enqueued"] == 13 and before["completed"] == 12
    assert before["dead_lettered"] == 1 and before["failed_attempts"] == 1
    _compact(store)
    after = _stats(store)
    assert after["log"]["archives"] == 1 and after["totals"] == before
    shutil.rmtree(store / "tasks" / "archive")  # what retention does, in the end
    pruned = _stats(store)
    assert pruned["log"]["archives"] == 0 and pruned["totals"] == before
    assert pruned["counts"]["dead_lettered"] == 1  # the state is the same too


def test_no_archive_is_read_when_the_live_log_tells_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    store = tmp_path / "q"
    asyncio.run(_seed(store, 5))
    _compact(store)

    def unread(storage: Any) -> Any:
        raise AssertionError("the history was read")

    monkeypatch.setattr("snerd.eventlog.storage.open_history", unread)
    assert _stats(store)["totals"]["completed"] == 5


def test_a_groups_limit_comes_from_the_archives_once_compacted_away(tmp_path: Path) -> None:
    store = tmp_path / "q"
    asyncio.run(_seed(store, 3, group="api"))
    _compact(store)  # the group's tasks are gone from the live log; its window is not
    snap = stats_tool.load(store)
    assert snap.history and stats_tool.unknown_limits(snap.state, snap.limits) == {"api"}
    [group] = _stats(store)["rate_groups"]
    assert group["group"] == "api" and group["used"] == 3 and group["maxPerMinute"] == 7
    shutil.rmtree(store / "tasks" / "archive")  # pruned: nowhere left to learn it from
    [group] = _stats(store)["rate_groups"]
    assert group["used"] == 3 and group["maxPerMinute"] is None
