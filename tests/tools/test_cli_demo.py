"""``snerdmq demo --fast``: the whole workflow runs and the storage tells the same story."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from snerd.tools.demo import demo
from snerd.tools.dlq import dlq
from snerd.tools.stats import stats


def test_demo_runs_the_workflow_and_summarises(tmp_path: Path) -> None:
    store = tmp_path / "demo"
    cli = CliRunner()
    wide = {"COLUMNS": "200"}  # no wrapping inside the summary table
    result = cli.invoke(demo, ["--fast", "--no-dashboard", "--storage", str(store)], env=wide)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "What happened" in out
    assert "10 completed, 3 dead-lettered, 2 still waiting" in out
    assert "card network timeout" in out and "succeeded on retry" in out
    assert "throttled" in out and f"snerdmq stats {store}" in out
    dead = json.loads(cli.invoke(dlq, ["list", str(store), "--json"]).output)
    assert {r["dlqKey"]: r["reason"] for r in dead} == {
        "import-legacy": "retries_exhausted",
        "reindex-legacy": "blocked_by_failed_parent",
        "notify-legacy": "blocked_by_failed_parent",
    }
    data = json.loads(cli.invoke(stats, [str(store), "--json"]).output)
    assert data["totals"]["completed"] == 10
    assert data["rate_groups"][0]["group"] == "smtp"
    assert data["counts"]["pending"] == 2  # the throttled e-mails wait for their slot


def test_demo_serves_the_dashboard_and_refuses_a_used_storage(tmp_path: Path) -> None:
    store = tmp_path / "demo"
    cli = CliRunner()
    result = cli.invoke(demo, ["--fast", "--port", "0", "--storage", str(store)])
    assert result.exit_code == 0, result.output
    assert "Dashboard: http://127.0.0.1:" in result.output
    again = cli.invoke(demo, ["--fast", "--no-dashboard", "--storage", str(store)])
    assert again.exit_code == 1 and "already holds a queue" in again.output
