"""The CLI's rough edges (issue 9.9): exit codes, times, option names, non-logs,
rate-group limits, and bad daemon settings."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import forkserver
import pytest
from click.testing import CliRunner

import snerd
from snerd.tools.cancel import cancel
from snerd.tools.dlq import dlq
from snerd.tools.enqueue import enqueue
from snerd.tools.replay import replay
from snerd.tools.stats import stats

ROOT = Path(__file__).resolve().parents[2]


async def _seed(path: Path) -> None:
    """done-1 completed at the real time, in rate group ``api`` (limit 5)."""
    queue = snerd.Queue(str(path), fsync=False)

    @queue.handler("ok")
    async def ok(job: object) -> None:
        return None

    async with queue:
        await queue.enqueue("done-1", "ok", {}, rate_limit_group="api", max_per_minute=5)
        await queue.join(timeout=10)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "q"
    asyncio.run(_seed(path))
    return path


def test_an_unknown_task_id_exits_1_everywhere(store: Path) -> None:
    runner = CliRunner()
    for command, args in [
        (replay, [str(store), "--task", "ghost"]),
        (cancel, ["ghost", "-s", str(store)]),
        (dlq, ["requeue", "ghost", "-s", str(store)]),
        (dlq, ["purge", "ghost", "-s", str(store)]),
    ]:
        result = runner.invoke(command, args)
        assert result.exit_code == 1, (args, result.output)
        assert "ghost" in result.output


def test_replay_at_takes_epoch_seconds(store: Path) -> None:
    runner = CliRunner()
    before = runner.invoke(replay, [str(store), "--at", "1000", "--json"])
    assert before.exit_code == 0, before.output
    assert json.loads(before.output)["tasks"] == {}  # 1970: nothing yet
    now = runner.invoke(replay, [str(store), "--at", str(time.time() + 60), "--json"])
    assert json.loads(now.output)["tasks"]["done-1"]["state"] == "completed"
    bad = runner.invoke(replay, [str(store), "--at", "nan"])
    assert bad.exit_code == 2 and "--at" in bad.output


def test_replay_of_a_file_that_is_not_a_log_says_so(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello\nthis is not a log\n")
    result = CliRunner().invoke(replay, [str(text)])
    assert result.exit_code == 2
    assert "is not a task log" in result.output
    empty = tmp_path / "empty.log"
    empty.write_text("")
    assert CliRunner().invoke(replay, [str(empty)]).exit_code == 0  # an empty log is one


def test_enqueue_errors_name_the_cli_options(tmp_path: Path) -> None:
    runner = CliRunner()
    store = str(tmp_path / "q")
    result = runner.invoke(enqueue, ["t", "-s", store, "--rate-group", "g"])
    assert result.exit_code == 2
    assert "--max-per-minute is required with --rate-group" in result.output
    result = runner.invoke(enqueue, ["t", "-s", store, "--execute-at", "soon"])
    assert result.exit_code == 2 and result.output.count("--execute-at") >= 1
    assert "execute_at" not in result.output
    result = runner.invoke(enqueue, ["t", "-s", store, "--timeout", "-1"])
    assert "--timeout must be" in result.output


def test_stats_shows_a_groups_limit_after_its_tasks_ended(store: Path) -> None:
    result = CliRunner().invoke(stats, [str(store), "--json"])
    [group] = json.loads(result.output)["rate_groups"]
    assert group["group"] == "api" and group["waiting"] == 0 and group["used"] == 1
    assert group["maxPerMinute"] == 5


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"SNERD_LOG_LEVEL": "loud"}, "SNERD_LOG_LEVEL='loud' is not one of"),
        ({"SNERD_DASHBOARD_PORT": "abc"}, "SNERD_DASHBOARD_PORT='abc' is not a port number"),
        ({"SNERD_DASHBOARD_PORT": "99999"}, "SNERD_DASHBOARD_PORT='99999' is not a port"),
    ],
)
def test_bad_daemon_settings_get_one_line(tmp_path: Path, env: dict[str, str],
                                          expected: str) -> None:  # fmt: skip
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    done = forkserver.run([sys.executable, "-m", "snerd.cli", str(tmp_path / "q")],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, env=full,
                          timeout=30)  # fmt: skip
    assert done.returncode == 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], done.stderr
