"""benchmarks/bench_fsync ``--edge``: each sync is binned by the time from the last
one's end to its start (not by its own start, nor by the time between starts), and the
bins say how many, how long, and how many ran over 200 us (synthetic syncs)."""

from __future__ import annotations

import pytest

from benchmarks import bench_fsync


def _syncs(steps: list[tuple[int, int]]) -> list[tuple[float, float]]:
    """(start, end) seconds of syncs, each given as (us since the last one's end, its own
    us), the first at 0 and 50 us long."""
    syncs = [(0.0, 50e-6)]
    for gap, took in steps:
        start = syncs[-1][1] + gap * 1e-6
        syncs.append((start, start + took * 1e-6))
    return syncs


def test_syncs_are_binned_by_the_time_since_the_last_ones_end() -> None:
    syncs = _syncs([(65, 60), (65, 62), (75, 300), (75, 70), (90, 250), (500, 400)])
    pairs = bench_fsync.gap_pairs(syncs)
    assert [round(gap) for gap, _ in pairs] == [65, 65, 75, 75, 90, 500]
    assert [round(took) for _, took in pairs] == [60, 62, 300, 70, 250, 400]
    rows = {label: rest for label, *rest in bench_fsync.by_gap(pairs)}
    assert list(rows) == ["60-70 us", "70-80 us", "80-100 us", "150+ us"]  # (empty bins left out)
    count, p50, mean, over = rows["60-70 us"]
    assert count == 2 and p50 == pytest.approx(61) and over == 0
    count, p50, mean, over = rows["70-80 us"]
    assert count == 2 and p50 == pytest.approx(185) and mean == pytest.approx(185)
    assert over == 0.5
    assert rows["80-100 us"][0] == 1 and rows["80-100 us"][3] == 1.0
    assert rows["150+ us"][:2] == [1, pytest.approx(400)]


def test_a_bin_edge_belongs_to_the_bin_above() -> None:
    rows = bench_fsync.by_gap([(70.0, 10.0), (69.999, 10.0)])
    assert [(label, count) for label, count, *_ in rows] == [("60-70 us", 1), ("70-80 us", 1)]
