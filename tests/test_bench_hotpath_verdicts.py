"""benchmarks/bench_hotpath ``--all``: (6) and (7) end with a verdict against issue 8's
goals, as (1)-(5) do (figures stood in for: the benchmarks that own them are not run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks import bench_hotpath, bench_log, bench_replay


def _verdicts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    appends: tuple[float, float, float], read: dict[str, float], quick: bool = False,
) -> dict[str, str]:  # fmt: skip
    """Each verdict line's label -> what follows its goal ('' when none is given)."""

    def report_appends(work: Path, args: Any) -> tuple[float, float, float]:
        return appends

    def replay_main(argv: Any = None) -> dict[str, float]:
        return read

    monkeypatch.setattr(bench_log, "_report_appends", report_appends)
    monkeypatch.setattr(bench_replay, "main", replay_main)
    work = tmp_path / str(len(list(tmp_path.iterdir())))
    work.mkdir()
    bench_hotpath._others(work, quick)
    lines = [line for line in capsys.readouterr().out.splitlines() if " goal " in line]
    return {line.split("  ", 1)[0]: line.split(" goal ", 1)[1] for line in lines}


READ_OK = {"first": 2.4, "current": 2.7, "verify": 1.7, "history_ms": 5.0, "stats_s": 6.0,
           "stats_bar": 1.0}


def test_group_commit_is_judged_against_ten_times_the_raw_writer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    below = _verdicts(monkeypatch, capsys, tmp_path, (5_600, 51_600, 67_800), READ_OK)
    assert below["(6) group commit against the raw writer"] == ">= 10x  BELOW GOAL"
    met = _verdicts(monkeypatch, capsys, tmp_path, (5_600, 56_000, 76_700), READ_OK)
    assert met["(6) group commit against the raw writer"] == ">= 10x  ok"


def test_the_read_paths_are_judged_each_against_its_goal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    seen = _verdicts(monkeypatch, capsys, tmp_path, (1, 20, 30), READ_OK)
    assert seen["(7) replay against json.loads, first / current"] == ">= 2x  ok"
    assert seen["(7) a task's history through the index"] == "< 50 ms  ok"
    assert seen["(7) replay --verify against plain replay"] == "<= 2x  ok"
    slow = {**READ_OK, "first": 1.9, "history_ms": 50.0, "verify": 2.1}
    seen = _verdicts(monkeypatch, capsys, tmp_path, (1, 20, 30), slow)
    assert seen["(7) replay against json.loads, first / current"].endswith(
        "BELOW GOAL")
    assert seen["(7) a task's history through the index"].endswith("BELOW GOAL")
    assert seen["(7) replay --verify against plain replay"].endswith("BELOW GOAL")
    slow_current = {**READ_OK, "current": 1.99}
    seen = _verdicts(monkeypatch, capsys, tmp_path, (1, 20, 30), slow_current)
    assert seen["(7) replay against json.loads, first / current"].endswith(
        "BELOW GOAL")


def test_stats_past_a_second_is_judged_by_whether_its_bar_showed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    label = "(7) stats' progress bar, when it runs past a second"
    seen = _verdicts(monkeypatch, capsys, tmp_path, (1, 20, 30), READ_OK)
    assert seen[label] == "shown past 1 s  ok"
    hidden = {**READ_OK, "stats_bar": 0.0}
    seen = _verdicts(monkeypatch, capsys, tmp_path, (1, 20, 30), hidden)
    assert seen[label] == "shown past 1 s  BELOW GOAL"
    fast = {**hidden, "stats_s": 0.8}  # no bar owed: it did not run past a second
    seen = _verdicts(monkeypatch, capsys, tmp_path, (1, 20, 30), fast)
    assert seen[label] == "shown past 1 s  ok"


def test_a_quick_run_gives_the_read_paths_no_verdict(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--quick's log is a tenth of the goals' 200,000 tasks: its figures are shown, not judged."""
    slow = {**READ_OK, "first": 0.8, "current": 1.0}
    seen = _verdicts(monkeypatch, capsys, tmp_path, (1, 20, 30), slow, quick=True)
    assert seen["(7) replay against json.loads, first / current"] == ">= 2x"
    assert seen["(6) group commit against the raw writer"] == ">= 10x  ok"
