"""``benchmarks/bench_suite.py`` reads pytest's own figure off its last summary line."""

from __future__ import annotations

from benchmarks.bench_suite import summary


def test_the_summary_line_gives_the_counts_and_pytests_seconds() -> None:
    quiet = "....s\n1270 passed, 1 skipped in 75.82s (0:01:15)\n"
    assert summary(quiet) == ("1270 passed, 1 skipped", 75.82)
    framed = "== short test summary info ==\n===== 753 passed in 132.12s (0:02:12) =====\n"
    assert summary(framed) == ("753 passed", 132.12)
    failed = "F.\n1 failed, 1 passed in 0.50s\n"  # a run with failures still has its time
    assert summary(failed) == ("1 failed, 1 passed", 0.5)


def test_no_summary_line_is_none() -> None:
    assert summary("ImportError while loading conftest\n") is None
    assert summary("") is None
