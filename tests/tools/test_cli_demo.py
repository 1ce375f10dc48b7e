"""``snerdmq demo --fast``: the whole workflow runs and the storage tells the same story."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from snerd.tools.demo import demo
from snerd.tools.dlq import dlq
from snerd.tools.replay import replay
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
    audit = cli.invoke(replay, [str(store), "--verify", "--json"])
    report = json.loads(audit.output)  # a DAG, retries, dead letters, a rate limit: all sound
    assert report["problems"] == [] and report["chain"]["breaks"] == [], report["problems"]
    assert audit.exit_code == 0


def test_demo_serves_the_dashboard_and_refuses_a_used_storage(tmp_path: Path) -> None:
    store = tmp_path / "demo"
    cli = CliRunner()
    result = cli.invoke(demo, ["--fast", "--port", "0", "--storage", str(store)])
    assert result.exit_code == 0, result.output
    assert "Dashboard: http://127.0.0.1:" in result.output
    again = cli.invoke(demo, ["--fast", "--no-dashboard", "--storage", str(store)])
    assert again.exit_code == 1 and "already holds a queue" in again.output


def test_the_final_count_agrees_with_the_table_while_the_dashboard_lingers(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """Tasks still run while the demo waits for Enter (the throttled e-mails get their
    slot); the count line must describe the table printed above it, not a later state."""
    import asyncio
    import re

    from snerd.tools import demo as demo_module

    async def throttled_mail_runs_meanwhile() -> None:
        for row in tracker_seen[0].rows.values():
            row.state = "completed"

    tracker_seen: list = []
    real_tracker = demo_module.Tracker

    def tracking(*args, **kwargs):
        tracker_seen.append(real_tracker(*args, **kwargs))
        return tracker_seen[0]

    monkeypatch.setattr(demo_module, "Tracker", tracking)
    monkeypatch.setattr(demo_module, "_until_enter_or_signal", throttled_mail_runs_meanwhile)
    monkeypatch.setenv("COLUMNS", "200")
    asyncio.run(demo_module.run_demo(tmp_path / "demo", port=0, fast=True, linger=True))
    out = capsys.readouterr().out
    table = out[out.index("What happened"):]
    throttled = len(re.findall(r"│ throttled", table))
    assert throttled == 2
    assert "10 completed, 3 dead-lettered, 2 still waiting" in out
    assert out.index("still waiting") < out.index("press Enter")
