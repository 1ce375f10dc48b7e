"""benchmarks/bench_pg_queue: its verdicts follow the figures, and its daemons'
measure really runs every task once (a tiny run against the test server)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pgkit
import pytest

from benchmarks import bench_pg_queue as bench


def _figures(log: float, peer: float) -> bench.Figures:
    return {
        "A/raw": [1000.0], "A/raw-values": [1000.0], "A/log": [log],
        "A/log/per-commit": [32.0],
        "B/1": [100.0], "B/4": [250.0], "B/1/steady": [120.0], "B/4/steady": [400.0],
        "C/peer": [peer], "C/ours": [300.0],
    }  # fmt: skip


def test_report_says_met_only_when_the_ratio_reaches_the_goal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = argparse.Namespace(appends=2000, tasks=100, peer_tasks=100, only="ABC")
    bench._report(_figures(log=10_000.0, peer=100.0), args)
    out = capsys.readouterr().out
    assert "10.00x (goal 10x: met)" in out
    assert "2.50x (goal 3x: NOT met)" in out
    assert "3.33x" in out  # the steady-state line: informative, no goal
    assert "3.00x (goal 3x: met)" in out
    bench._report(_figures(log=9_990.0, peer=101.0), args)
    out = capsys.readouterr().out
    assert "9.99x (goal 10x: NOT met)" in out
    assert "2.97x (goal 3x: NOT met)" in out


def test_only_runs_and_reports_the_figures_named(capsys: pytest.CaptureFixture[str]) -> None:
    args = bench._parse(["--only", "a"])
    assert args.only == "A"
    figures = {k: v for k, v in _figures(log=10_000.0, peer=100.0).items() if k[0] == "A"}
    bench._report(figures, args)  # no (B) or (C) figures: none asked for, none needed
    out = capsys.readouterr().out
    assert "(A) durable appends" in out
    assert "(B)" not in out and "(C)" not in out
    assert bench._parse([]).only == "ABC"


def test_quick_keeps_an_explicit_task_count() -> None:
    assert bench._parse(["--quick"]).tasks == 1000
    assert bench._parse(["--quick", "--tasks", "40"]).tasks == 40
    assert bench._parse([]).tasks == 2000


async def test_two_daemons_run_every_task_once(tmp_path: Path) -> None:
    pgkit.require_pg()  # daemons() raises unless each task was executed exactly once
    assert await bench.daemons(pgkit.PG_URL, 2, 40, tmp_path) > 0
