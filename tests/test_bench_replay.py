"""benchmarks/bench_replay: the peak RSS it prints is the replaying process's own."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from benchmarks import bench_replay
from snerd.tools import stats

BIG = 256 << 20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_the_peak_rss_is_the_replays_own_not_its_parents(tmp_path: Path) -> None:
    """Linux keeps a process's highest RSS across ``exec``, so ``wait4``'s ``ru_maxrss``
    of a command started by a large process is at least that process's size: a
    benchmark that had just generated its log printed its own size as the replay's."""
    bench_replay.generate(tmp_path / "s", 50)
    held = bytearray(BIG)
    held[:: 1 << 12] = b"x" * len(range(0, BIG, 1 << 12))  # resident, every page
    wall, peak_mb, out = bench_replay.run("replay", str(tmp_path / "s"))
    assert "completed" in out and wall > 0
    assert 10 < peak_mb < (BIG >> 20) // 2, peak_mb  # a small replay: tens of MB
    assert held[0] == ord("x")


def test_a_command_run_on_a_terminal_has_one_and_what_it_draws_is_read() -> None:
    """``stats``' bar is judged from what it draws: ``rich`` draws a progress bar only
    on a terminal, so the benchmark gives the command one (a pseudo-terminal) and reads
    it; through a pipe the bar would never show, and the verdict would be wrong."""
    _, said = bench_replay.on_terminal(
        [sys.executable, "-c", "import sys; print(sys.stderr.isatty(), file=sys.stderr)"])
    assert said.strip() == b"True"
    draw = (
        "from snerd.tools import kit\n"
        "from snerd.tools.progress import LateProgress\n"
        f"bar = LateProgress({stats.BAR_LABEL!r}, lambda: 3, kit.console(stderr=True),\n"
        "                   after=0.0, every=1)\n"
        "for _ in bar.wrap(range(3)): pass\n"
        "bar.close()\n"
    )
    _, drawn = bench_replay.on_terminal([sys.executable, "-c", draw])
    assert bench_replay.STATS_BAR in drawn
    _, quiet = bench_replay.on_terminal([sys.executable, "-c", draw.replace("0.0", "60.0")])
    assert bench_replay.STATS_BAR not in quiet


def test_the_bar_looked_for_is_the_one_stats_draws(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    labels: list[str] = []

    class Seen(stats.LateProgress):
        def __init__(self, label: str, *args: Any, **kwargs: Any) -> None:
            labels.append(label)
            super().__init__(label, *args, **kwargs)

    bench_replay.generate(tmp_path / "s", 5)
    monkeypatch.setattr(stats, "LateProgress", Seen)
    stats.gather(tmp_path / "s", Console(file=io.StringIO()))
    assert [label.encode() for label in labels] == [bench_replay.STATS_BAR]
