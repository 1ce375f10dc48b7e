"""benchmarks/bench_hotpath's blocking stdio client ((2), (4) and the daemon's
instruction count): one task sent and answered before the timed ones, so a daemon's
start-up is not counted as an ack's time."""

from __future__ import annotations

import asyncio
import statistics
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from benchmarks import bench_hotpath

FAKE = r"""
import sys, orjson
seen = []
for line in sys.stdin.buffer:
    msg = orjson.loads(line)
    seen.append([msg["action"], msg.get("task_id") or msg.get("task_type")])
    if msg["action"] == "enqueue":
        tid = msg["task_id"]
        sys.stdout.buffer.write(
            orjson.dumps({"action": "ack", "task_id": tid}) + b"\n"
            + orjson.dumps({"action": "execute", "task_id": tid, "task_type": "bench",
                            "task_data": "{}", "attempt": 1}) + b"\n")
        sys.stdout.buffer.flush()
open(sys.argv[1], "wb").write(orjson.dumps(seen))
"""
"""A daemon that acks and runs each enqueue at once and writes down every line it read."""


def test_the_first_task_is_sent_and_answered_untimed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    timed: list[list[float]] = []
    mean = statistics.mean

    def spy(values: Any) -> float:
        timed.append(list(values))
        return mean(timed[-1])

    monkeypatch.setattr(bench_hotpath.statistics, "mean", spy)
    seen_at = tmp_path / "seen.json"
    ack, p50 = asyncio.run(bench_hotpath.stdio_blocking(
        [sys.executable, "-c", FAKE, str(seen_at)], 3, handler=True))  # fmt: skip
    seen = orjson.loads(seen_at.read_bytes())
    assert seen == [
        ["register", "bench"],
        ["enqueue", "warm"], ["result", "warm"],
        ["enqueue", "t0"], ["result", "t0"],
        ["enqueue", "t1"], ["result", "t1"],
        ["enqueue", "t2"], ["result", "t2"],
    ]  # fmt: skip
    assert len(timed) == 1 and len(timed[0]) == 3  # the acks of t0..t2 alone
    assert ack == mean(timed[0]) and p50 is not None
