"""A daemon over a backlog: its start-up replay, and Python's collector after it.

    python -m benchmarks.bench_backlog [--backlog B] [--tasks N] [--rounds R] [--dir DIR]
                                       [--compiled]

``bench_hotpath`` runs every goal of issue 8 on an empty storage. A queue in production
restarts with work waiting. This generates, once, a storage holding ``B`` live tasks
(default 50,000, delayed to 2100 so that they stay live and unclaimed: a backlog), and
then, in interleaved rounds, drives our daemon with the official SDK as ``bench_hotpath``
(1) does, on a copy of that storage and on an empty one:

- **start-up**: from spawning the daemon to the ack of its first enqueue. The backlog's
  extra time is its replay, printed as a ratio to the baseline, a ``json.loads`` loop
  over the backlog's log file (issue 8: the start-up replay "at several times a plain
  ``json.loads`` loop");
- **awaited enqueues**: ``N`` (default 5,000) sequential awaited enqueues with a no-op
  handler registered, on the backlog and on the empty storage: the rates and their
  ratio, and the passes of the daemon's cyclic collector over the run (counted with
  ``gc.callbacks`` in the daemon's process: passes, their total, the longest one). A
  full pass walks everything the process holds, a backlog's state included: the
  longest pause between two tasks.

With ``--compiled`` the daemon imports this tree as ``pip install .`` builds it, as in
``bench_hotpath --compiled``. Medians of the rounds; nothing here is a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import bench_hotpath as hot

FAR = 4102444800.0
"""2100-01-01T00:00:00Z: when the backlog's tasks are due (never, in a run)."""

PROBE_ENV = "SNERD_BENCH_COLLECTOR"
"""Where the probed daemon writes its collector's passes at exit (a JSON line)."""

PROBE = f"""\
import atexit, gc, json, os, time
_passes = []
_started = [0.0]
def _probe(phase, info):
    if phase == "start":
        _started[0] = time.perf_counter()
    else:
        _passes.append((info["generation"], time.perf_counter() - _started[0]))
gc.callbacks.append(_probe)
def _report():
    path = os.environ.get({PROBE_ENV!r})
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(_passes) + "\\n")
atexit.register(_report)
"""
"""Prepended to the daemon's code: every pass of the collector, (generation, seconds)."""


async def make_backlog(path: Path, n: int) -> None:
    """A storage holding ``n`` live tasks, none of them due before 2100."""
    from snerd.embedded import Queue

    queue = Queue(str(path))
    async with queue:
        for start in range(0, n, 5000):
            await asyncio.gather(*(
                queue.enqueue(f"later-{i}", "later", {"i": i}, execute_at=FAR)
                for i in range(start, min(n, start + 5000))
            ))  # fmt: skip


def loads_loop(log: Path) -> float:
    """Seconds of the baseline: ``json.loads`` of every line of ``log``, discarded."""
    start = time.perf_counter()
    with open(log, "rb") as lines:
        for line in lines:
            json.loads(line)
    return time.perf_counter() - start


async def first_ack(binary: Path, storage: Path) -> float:
    """Seconds from spawning the daemon (through the SDK) to its first enqueue's ack."""
    from snerdmq import SnerdQueue

    queue = SnerdQueue(binary_path=str(binary), storage_path=str(storage))
    with contextlib.redirect_stdout(io.StringIO()):  # the SDK prints every line it reads
        start = time.perf_counter()
        await queue.start_listening()
        await queue.enqueue("first", "first", {})
        took = time.perf_counter() - start
        await queue.shutdown()
    return took


def _passes(report: Path) -> list[tuple[int, float]]:
    """The collector's passes the last probed daemon wrote, and forget them."""
    if not report.exists():
        return []
    lines = report.read_text().splitlines()
    report.unlink()
    return [(int(g), float(s)) for g, s in json.loads(lines[-1])] if lines else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=int, default=50_000)
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--compiled", action="store_true")
    args = parser.parse_args()
    if args.compiled:
        _in_compiled_copy(args.dir or str(hot.REPO.parent))
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="snerd-backlog-") as raw_tmp:
        _run(Path(raw_tmp), args)


def _run(tmp: Path, args: argparse.Namespace) -> None:
    backlog = tmp / "backlog"
    start = time.perf_counter()
    asyncio.run(make_backlog(backlog, args.backlog))
    log = backlog / "tasks" / "tasks.log"
    with open(log, "rb") as lines:
        records = sum(1 for _ in lines)
    print(f"backlog: {args.backlog:,} live tasks, {records:,} records, "
          f"{log.stat().st_size / 1e6:.1f} MB (made in {time.perf_counter() - start:.1f} s)",
          flush=True)  # fmt: skip
    report = tmp / "collector.jsonl"
    os.environ[PROBE_ENV] = str(report)
    daemon = hot._shim(tmp, "probed", PROBE + hot.OURS + "\n")
    starts: dict[str, list[float]] = {"empty": [], "backlog": []}
    loops: list[float] = []
    rates: dict[str, list[float]] = {"empty": [], "backlog": []}
    passes: dict[str, list[list[tuple[int, float]]]] = {"empty": [], "backlog": []}
    for r in range(args.rounds):
        loops.append(loads_loop(log))
        for kind in ("empty", "backlog"):
            storage = tmp / f"{kind}-start-{r}"
            if kind == "backlog":
                shutil.copytree(backlog, storage)
            starts[kind].append(asyncio.run(first_ack(daemon, storage)))
            _passes(report)
            shutil.rmtree(storage, ignore_errors=True)
        for kind in ("empty", "backlog"):
            storage = tmp / f"{kind}-run-{r}"
            if kind == "backlog":
                shutil.copytree(backlog, storage)
            _passes(report)
            rate, _ = asyncio.run(hot.sdk_run(daemon, storage, args.tasks, True))
            rates[kind].append(rate)
            passes[kind].append(_passes(report))
            shutil.rmtree(storage, ignore_errors=True)
    empty_start, backlog_start = (statistics.median(starts[k]) for k in ("empty", "backlog"))
    loop = statistics.median(loops)
    replay = backlog_start - empty_start
    print(f"start-up to the first ack (medians of {args.rounds}): empty {empty_start:.2f} s, "
          f"backlog {backlog_start:.2f} s; the backlog's replay {replay:.2f} s, "
          f"{loop / replay if replay > 0 else float('inf'):.2f}x as fast as a json.loads loop "
          f"over its log ({loop:.2f} s)")  # fmt: skip
    empty_rate, backlog_rate = (statistics.median(rates[k]) for k in ("empty", "backlog"))
    print(f"{args.tasks:,} awaited enqueues through the SDK, no-op handler: empty "
          f"{empty_rate:,.0f}/s, backlog {backlog_rate:,.0f}/s "
          f"({backlog_rate / empty_rate:.2f}x)")  # fmt: skip
    for kind in ("empty", "backlog"):
        runs = passes[kind]
        counts = [len(p) for p in runs]
        fulls = [sum(1 for g, _ in p if g == 2) for p in runs]
        totals = [sum(s for _, s in p) * 1e3 for p in runs]
        longest = [max((s for _, s in p), default=0.0) * 1e3 for p in runs]
        print(f"  the daemon's collector on {kind:7s}: {statistics.median(counts):.0f} "
              f"passes ({statistics.median(fulls):.0f} full), "
              f"{statistics.median(totals):.1f} ms in all, the longest "
              f"{statistics.median(longest):.1f} ms (medians, spawn to exit)")  # fmt: skip


def _in_compiled_copy(parent: str) -> None:
    """``--compiled``: the same run in a copy of this tree built as ``pip install .``
    builds it (the daemon and the backlog's queue import its compiled modules)."""
    from benchmarks import trees

    argv = [arg for arg in sys.argv[1:] if arg != "--compiled"]
    with tempfile.TemporaryDirectory(dir=parent, prefix="snerd-built-") as raw_tmp:
        tree = trees.compiled_copy(raw_tmp, "bench_backlog")
        print("this tree as a wheel builds it (setup.py's COMPILED modules built with mypyc)",
              flush=True)  # fmt: skip
        env: dict[str, Any] = {**os.environ, "PYTHONPATH": str(tree)}
        done = subprocess.run([sys.executable, "-m", "benchmarks.bench_backlog", *argv],
                              cwd=tree, env=env, check=False)  # fmt: skip
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
