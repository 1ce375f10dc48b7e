"""benchmarks/bench_fsync ``--budget``: the busy loop it adds under each AIO sync runs
for as long as asked by the clock, once for each sync that went through AIO, and the
log's own ``AioFsync.submit`` is back in place after the run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks import bench_fsync
from snerd.eventlog import aio


def test_spin_keeps_busy_until_the_clock_has_passed_the_time_asked() -> None:
    now = [100.0]
    reads = []

    def clock() -> float:
        reads.append(now[0])
        now[0] += 10e-6
        return reads[-1]

    bench_fsync.spin(35, clock)
    assert len(reads) == 5  # the start, then 10, 20, 30 us (not yet), 40 us (past)
    assert reads[-1] - reads[0] == pytest.approx(40e-6)
    bench_fsync.spin(0, clock)
    assert len(reads) == 7  # the start, and one look: already past


def _aio_here(tmp_path: Path) -> bool:
    fd = os.open(tmp_path / "probe", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        syncer = aio.open_fsync(fd)
        if syncer is not None:
            syncer.close()
        return syncer is not None
    finally:
        os.close(fd)


@pytest.mark.parametrize("spin_us", [0.0, 25.0])
def test_the_work_is_added_under_each_aio_sync_of_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spin_us: float
) -> None:
    if not _aio_here(tmp_path):
        pytest.skip("NO KERNEL AIO HERE: the queue syncs with fsync; --budget adds to nothing")
    spun: list[float] = []
    monkeypatch.setattr(bench_fsync, "spin", spun.append)
    submit = aio.AioFsync.submit
    rate, syncs = bench_fsync._budget_run(tmp_path / "s", 40, spin_us)
    assert rate > 0
    assert syncs >= 1  # (the first syncs go through AIO; a slow disk's later ones may not)
    assert spun == ([spin_us] * syncs if spin_us else [])
    assert aio.AioFsync.submit is submit
