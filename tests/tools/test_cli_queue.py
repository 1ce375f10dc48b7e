"""The queue subcommands through click's runner: stats, dlq, cancel, enqueue, compact."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from auditkit import storage_problems
from click.testing import CliRunner
from seedkit import ok_and_bad

from snerd.tools.cancel import cancel
from snerd.tools.compact import compact
from snerd.tools.dlq import dlq
from snerd.tools.enqueue import enqueue
from snerd.tools.stats import stats


async def _seed(path: Path) -> None:
    """ok-1 completed; bad-1 dead (boom) and its child-1 failed through; wait-1 pending
    (nobody handles its type); later-1 scheduled an hour ahead."""
    queue = ok_and_bad(path)

    async with queue:
        await queue.enqueue("ok-1", "ok", {"n": 1})
        await queue.enqueue("bad-1", "bad", {}, max_retries=0)
        await queue.enqueue("child-1", "ok", {}, trigger_after_ids=["bad-1"])
        await queue.enqueue("wait-1", "nobody", {})
        await queue.enqueue("later-1", "nobody", {}, execute_at=time.time() + 3600)
        await queue.join(timeout=10)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Path]:
    """A seeded storage dir; whatever the commands wrote to it must pass replay --verify."""
    path = tmp_path / "q"
    asyncio.run(_seed(path))
    yield path
    assert storage_problems(path) == []


@pytest.fixture
def cli() -> CliRunner:
    return CliRunner()


def _json(cli: CliRunner, command, args: list[str]):
    result = cli.invoke(command, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_stats_counts_and_totals(cli, store):
    data = _json(cli, stats, [str(store)])
    assert data["counts"] == {"pending": 1, "scheduled": 1, "blocked": 0, "active": 0,
                              "dead_lettered": 2}  # fmt: skip
    assert data["totals"]["completed"] == 1 and data["totals"]["enqueued"] == 5
    assert data["types"]["nobody"] == {"pending": 1, "scheduled": 1}
    human = cli.invoke(stats, [str(store)])
    assert human.exit_code == 0
    assert "dead lettered" in human.output and "nobody" in human.output
    assert "\x1b[" not in human.output  # no colours when not a terminal


def test_missing_storage_is_a_clear_error(cli, tmp_path):
    for command, args in ((stats, []), (dlq, ["list"]), (compact, [])):
        result = cli.invoke(command, [*args, str(tmp_path / "nothing")])
        assert result.exit_code == 1
        assert "no queue at" in result.output
    result = cli.invoke(cancel, ["x", "-s", str(tmp_path / "nothing")])
    assert result.exit_code == 1 and "no queue at" in result.output


def test_dlq_list_requeue_and_purge(cli, store):
    rows = _json(cli, dlq, ["list", str(store)])
    assert {r["dlqKey"]: r["reason"] for r in rows} == {
        "bad-1": "retries_exhausted", "child-1": "blocked_by_failed_parent",
    }  # fmt: skip
    human = cli.invoke(dlq, ["list", str(store)])
    assert "boom" in human.output and "2 dead-lettered" in human.output
    result = cli.invoke(dlq, ["requeue", "bad-1", "-s", str(store)])
    assert result.exit_code == 0 and "requeued bad-1" in result.output
    assert [r["dlqKey"] for r in _json(cli, dlq, ["list", str(store)])] == ["child-1"]
    result = cli.invoke(dlq, ["requeue", "nope", "-s", str(store)])
    assert result.exit_code == 1 and "no dead-lettered task 'nope'" in result.output
    assert cli.invoke(dlq, ["requeue", "-s", str(store)]).exit_code == 2
    result = cli.invoke(dlq, ["purge", "--all", "--yes", "-s", str(store)])
    assert result.exit_code == 0 and "deleted child-1" in result.output
    assert "empty" in cli.invoke(dlq, ["list", str(store)]).output


def test_cancel(cli, store):
    result = cli.invoke(cancel, ["wait-1", "-s", str(store)])
    assert result.exit_code == 0 and "cancelled wait-1" in result.output
    result = cli.invoke(cancel, ["wait-1", "later-1", "-s", str(store), "--json"])
    assert result.exit_code == 1  # one of them was refused
    outcome = {r["task_id"]: r["ok"] for r in json.loads(result.output)}
    assert outcome == {"wait-1": False, "later-1": True}
    counts = _json(cli, stats, [str(store)])["counts"]
    assert counts["pending"] == counts["scheduled"] == 0


def test_enqueue(cli, tmp_path):
    store = tmp_path / "fresh"
    made = _json(cli, enqueue, ["email", '{"to": "a@b.c"}', "--id", "e-1", "-s", str(store),
                                "--max-retries", "1", "--urgency", "5"])  # fmt: skip
    assert made == {"ok": True, "task_id": "e-1", "deduplicated_of": None}
    result = cli.invoke(enqueue, ["email", "-", "-s", str(store), "--after", "e-1",
                                  "--execute-at", "+1h"], input='{"n": 2}')  # fmt: skip
    assert result.exit_code == 0 and result.output.startswith("enqueued email-")
    counts = _json(cli, stats, [str(store)])["counts"]
    assert counts["pending"] == 1 and counts["blocked"] == 1
    again = cli.invoke(enqueue, ["email", "{}", "--id", "e-1", "-s", str(store)])
    assert again.exit_code == 1 and "already exists" in again.output
    bad = cli.invoke(enqueue, ["email", "{oops", "-s", str(store)])
    assert bad.exit_code == 2 and "not valid JSON" in bad.output
    bad = cli.invoke(enqueue, ["email", "-s", str(store), "--rate-group", "g"])
    assert bad.exit_code == 2 and "--max-per-minute" in bad.output
    raw = cli.invoke(enqueue, ["note", "plain text", "--raw", "-s", str(store)])
    assert raw.exit_code == 0


def test_enqueue_dedupe(cli, tmp_path):
    store = str(tmp_path / "d")
    first = _json(cli, enqueue, ["sync", '{"k": 1}', "--id", "s-1", "--dedupe", "-s", store])
    assert first["deduplicated_of"] is None
    second = _json(cli, enqueue, ["sync", '{"k": 1}', "--id", "s-2", "--dedupe", "-s", store])
    assert second["deduplicated_of"] == "s-1"


def test_compact_keeps_state_and_archives_history(cli, store):
    before = _json(cli, stats, [str(store)])
    result = _json(cli, compact, [str(store)])
    assert result["compacted"] is True
    assert result["after"]["records"] < result["before"]["records"]
    assert Path(result["archive"]).exists()
    after = _json(cli, stats, [str(store)])
    assert after["counts"] == before["counts"]
    assert after["totals"] == before["totals"]  # the archive keeps the history countable
    human = cli.invoke(compact, [str(store)])  # nothing appended since: no new archive
    assert human.exit_code == 0 and "Nothing to compact" in human.output


def test_subcommands_are_registered_on_snerdmq(cli, store):
    from snerd.cli import build_cli

    listing = cli.invoke(build_cli(), ["--help"])
    for name in ("demo", "dashboard", "stats", "dlq", "cancel", "compact", "enqueue"):
        assert f"  {name} " in listing.output
    result = cli.invoke(build_cli(), ["stats", str(store), "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["counts"]["pending"] == 1


def test_console_entry_point_exit_codes(store, tmp_path):
    import os
    import subprocess
    import sys

    import forkserver

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "NO_COLOR": "1"}

    def snerdmq(*args: str) -> subprocess.CompletedProcess[str]:
        return forkserver.run([sys.executable, "-m", "snerd.cli", *args], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    ok = snerdmq("dlq", "list", str(store), "--json")
    assert ok.returncode == 0 and len(json.loads(ok.stdout)) == 2
    assert snerdmq("cancel", "nope", "-s", str(store)).returncode == 1
    usage = snerdmq("dlq", "requeue", "-s", str(store))
    assert usage.returncode == 2 and "--all" in usage.stderr


def test_enqueue_warns_about_unknown_parents(cli, tmp_path):
    store = tmp_path / "fresh"
    result = cli.invoke(enqueue, ["email", "{}", "--id", "c", "--after", "nope", "-s",
                                  str(store)])  # fmt: skip
    assert result.exit_code == 0
    assert "enqueued c" in result.stdout
    assert "--after nope" in result.stderr and "does not wait" in result.stderr
    made = _json(cli, enqueue, ["email", "{}", "--id", "d", "--after", "ghost", "-s", str(store)])
    assert made["unknown_parents"] == ["ghost"]
