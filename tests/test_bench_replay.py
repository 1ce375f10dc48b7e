"""benchmarks/bench_replay: the peak RSS it prints is the replaying process's own."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchmarks import bench_replay

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
