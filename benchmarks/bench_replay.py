"""Read-path benchmark (issue 8, "Replay"): ``snerdmq replay``, the per-task index,
``replay --verify`` and ``stats``, as ratios against a ``json.loads`` loop over the
same file, all measured in this one invocation.

    python -m benchmarks.bench_replay [--tasks N | --quick] [--keep DIR]

Generates a realistic storage once into a temporary directory (``--tasks`` tasks,
default 200,000, that all run to completion or dead letter: enqueued, claimed, a
third of the attempts with a progress line, 75% succeed at once, 20% fail once and
succeed on retry, 5% fail twice and are dead-lettered; ~4 records per task, each
line sealed by the checksum chain as the writer does), then times, each as a
subprocess the way a user runs it (``python -m snerd.cli``):

- baseline: ``for line in open(path, "rb"): json.loads(line)`` (results dropped);
- ``replay`` the first time (it builds the per-task index beside the log), then again
  (the index is current), with each run's peak RSS;
- ``replay --verify``, against plain replay;
- ``replay --task ID`` (one task's history through the index), and the in-process
  lookup time alone;
- ``stats``, its stderr a terminal (a pseudo-terminal this benchmark reads), as a user
  at a shell runs it: whether its progress bar showed (the goal: whenever it runs
  past a second).

The first four are timed in ROUNDS interleaved rounds (the index deleted before each
round's first replay), and each ratio is one of medians: a VM's speed drifts within
an invocation (a baseline of 2.6 s here once read 4.5 s minutes later), and one
sample of each side, taken minutes apart, measured the drift as much as the replay.
Before each timed run the log (and the index, when there is one) is read once, so
every run starts with the file in the page cache: the VMs these figures come from
page out what was not touched for a second or two (DAMON's ``pageout`` scheme), so a
run that followed another's pause read the file from the disk and the one before it
did not.

``--quick`` is ``--tasks 20000``.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from benchmarks.bench_fold import _lifecycle
from snerd.eventlog.chain import GENESIS, Chain
from snerd.eventlog.index import index_path
from snerd.tools.replay_fast import indexed_history
from snerd.tools.replay_source import open_source
from snerd.tools.stats import BAR_LABEL


def generate(storage: Path, tasks: int, window: int = 3000) -> tuple[Path, int]:
    """Write ``tasks`` whole task lifecycles (interleaved as a sliding window of about
    ``window`` tasks) to ``storage``'s live log, chained; returns (log path, records)."""
    log = storage / "tasks" / "tasks.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    lag = max(1, window // 2)
    pending: dict[int, list[dict[str, object]]] = {}
    chain, prev = Chain(), GENESIS
    n = step = 0
    with open(log, "wb") as f:
        i = 0
        while i < tasks or pending:
            if i < tasks:
                for at, record in _lifecycle(i, lag):
                    pending.setdefault(at, []).append(record)
                i += 1
            bodies = []
            for record in pending.pop(step, ()):
                n += 1
                record["seq"] = n
                bodies.append(orjson.dumps(record))
            if bodies:
                prev, lines = chain.seal_all(prev, bodies)
                f.writelines(lines)
            step += 1
    return log, n


def json_loop(path: Path) -> float:
    t0 = time.perf_counter()
    for line in open(path, "rb"):  # noqa: SIM115 (the baseline as the issue writes it)
        json.loads(line)
    return time.perf_counter() - t0


PEAK = r"""
import atexit, os, runpy, sys
def peak():
    with open("/proc/self/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    with open(os.environ["SNERD_BENCH_PEAK"], "w") as f:
        f.write(str(kb))
atexit.register(peak)
sys.argv[0] = "snerdmq"
runpy.run_module("snerd.cli", run_name="__main__", alter_sys=True)
"""
"""``python -m snerd.cli``, noting the process's own peak RSS at exit (``VmHWM``). The
``ru_maxrss`` that ``wait4`` gives cannot say it: Linux keeps the highest RSS a
process had across ``exec``, so a child of a large benchmark process (one that just
generated the log) reports its parent's size."""


def run(*args: str, env: dict[str, str] | None = None) -> tuple[float, int, str]:
    """(wall seconds, peak RSS in MB, stdout) of ``python -m snerd.cli ARGS``; the CPU
    seconds it and its children used go to :data:`CPU`. The peak RSS is the replaying
    process's own (a helper it forks is not added; where ``/proc`` is missing, the one
    ``wait4`` gives, see :data:`PEAK`)."""
    with tempfile.NamedTemporaryFile(prefix="snerd-peak-") as noted:
        peaked = os.path.exists("/proc/self/status")
        command = ["-c", PEAK, *args] if peaked else ["-m", "snerd.cli", *args]
        env = {**(os.environ if env is None else env), "SNERD_BENCH_PEAK": noted.name}
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, *command], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env)  # fmt: skip
        with proc.stdout if proc.stdout else open(os.devnull, "rb") as pipe:
            out = pipe.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        peak = int(noted.read() or 0) // 1024 if peaked else usage.ru_maxrss // 1024
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"snerdmq {' '.join(args)} failed ({status}): {out[-500:]!r}")
    proc.returncode = os.waitstatus_to_exitcode(status)
    CPU.setdefault(" ".join(args), []).append(usage.ru_utime + usage.ru_stime)
    return wall, peak, out.decode(errors="replace")


CPU: dict[str, list[float]] = {}

ROUNDS = 3
"""Interleaved rounds of the baseline, the two replays and ``--verify`` (medians)."""


def on_terminal(argv: Sequence[str]) -> tuple[float, bytes]:
    """(wall seconds, what it wrote to stderr) of ``argv`` run with its stderr a
    terminal (a pseudo-terminal read here), its stdout dropped: what a user at a shell
    sees of it (``rich`` draws a progress bar only on a terminal)."""
    main_fd, child_fd = pty.openpty()
    seen: list[bytes] = []

    def drain() -> None:  # as it is written: a full terminal would stall the writer
        while True:
            try:
                chunk = os.read(main_fd, 1 << 16)
            except OSError:  # EIO: the last writer closed it
                return
            if not chunk:
                return
            seen.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(argv), stdout=subprocess.DEVNULL, stderr=child_fd)
        os.close(child_fd)
        child_fd = -1
        status = proc.wait()
        wall = time.perf_counter() - t0
        reader.join(10)
    finally:
        if child_fd >= 0:
            os.close(child_fd)
        os.close(main_fd)
    if status not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} failed ({status}): {b''.join(seen)[-500:]!r}")
    return wall, b"".join(seen)


STATS_BAR = BAR_LABEL.encode()
"""``stats``' progress bar's label, found in what it wrote to the terminal when the bar
showed."""


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    """Generate the log, time its read paths, print them; return the figures
    (:func:`_measure`)."""
    args = _parse(argv)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"read-path benchmark (python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"load {load})")  # fmt: skip
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="snerd-bench-"))
    storage = root / "storage"
    try:
        t0 = time.perf_counter()
        if args.keep and (storage / "tasks" / "tasks.log").exists():
            log = storage / "tasks" / "tasks.log"
            n = sum(1 for _ in open(log, "rb"))  # noqa: SIM115
        else:
            log, n = generate(storage, args.tasks)
        size = log.stat().st_size
        print(f"log: {args.tasks:,} tasks, {n:,} records, {size / 1e6:.1f} MB, "
              f"{size / n:.0f} bytes/record ({time.perf_counter() - t0:.1f}s)")  # fmt: skip
        return _measure(storage, log, args)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def _warm(*paths: Path) -> None:
    """Read ``paths`` once (those that exist), so the next timed run finds them in the
    page cache (see the module's doc)."""
    for path in paths:
        try:
            with open(path, "rb") as f:
                while f.read(1 << 22):
                    pass
        except FileNotFoundError:
            pass


def _span(seconds: list[float]) -> str:
    return f"[{min(seconds):.2f}..{max(seconds):.2f}]"


def _measure(storage: Path, log: Path, args: argparse.Namespace) -> dict[str, float]:
    """Time and print the read paths; return the ratios and times printed: ``first`` and
    ``current`` (replay against the baseline), ``verify`` (against plain replay),
    ``history_ms`` (the median lookup), ``stats_s`` and ``stats_bar`` (1.0 when its
    progress bar showed, else 0.0)."""
    bases: list[float] = []
    firsts: list[float] = []
    agains: list[float] = []
    verifies: list[float] = []
    rss1 = rss2 = 0
    index = index_path(storage)
    for _ in range(ROUNDS):  # interleaved, medians, each run warm (see the module's doc)
        _warm(log)
        bases.append(json_loop(log))
        index.unlink(missing_ok=True)  # the first replay builds it
        _warm(log)
        first, rss1, _ = run("replay", str(storage))
        firsts.append(first)
        _warm(log, index)
        again, rss2, _ = run("replay", str(storage))
        agains.append(again)
        _warm(log, index)
        verifies.append(run("replay", str(storage), "--verify")[0])
    base, first, again, verify = (statistics.median(x) for x in (bases, firsts, agains, verifies))
    print(f"{ROUNDS} interleaved rounds, medians [spans]:")
    print(f"baseline json.loads loop        : {base:7.2f} s  {_span(bases)}")
    print(f"replay, first (builds the index): {first:7.2f} s  {base / first:5.2f}x the baseline"
          f"  {_span(firsts)} (peak RSS {rss1} MB)")  # fmt: skip
    print(f"replay, index current           : {again:7.2f} s  {base / again:5.2f}x the baseline"
          f"  {_span(agains)} (peak RSS {rss2} MB)")  # fmt: skip
    cpu_plain = statistics.median(CPU[f"replay {storage}"])
    cpu_verify = statistics.median(CPU[f"replay {storage} --verify"])
    print(f"replay --verify                 : {verify:7.2f} s  {verify / again:5.2f}x plain replay"
          f"  {_span(verifies)} (CPU {cpu_verify:.2f} s, {cpu_verify / cpu_plain:.2f}x plain's "
          f"{cpu_plain:.2f} s: the chain is checked in a second process)")  # fmt: skip
    task = f"task-{args.tasks // 2:08d}"
    _warm(log, index)
    one, _, _ = run("replay", str(storage), "--task", task)
    print(f"replay --task {task}    : {one:7.2f} s (process start included; the index alone)")
    lookups = []
    for i in range(5):
        wanted = f"task-{(args.tasks * (2 * i + 1)) // 10:08d}"
        t0 = time.perf_counter()
        known, entry = indexed_history(open_source(storage), wanted, time.time())
        lookups.append(time.perf_counter() - t0)
        assert known and entry is not None, wanted
    print(f"a task's history via the index   : {statistics.median(lookups) * 1000:7.1f} ms "
          f"(median of 5 tasks, in process; max {max(lookups) * 1000:.1f} ms)")
    _warm(log, index)
    stats, shown = on_terminal([sys.executable, "-m", "snerd.cli", "stats", str(storage)])
    bar = STATS_BAR in shown
    print(f"stats (stderr a terminal)       : {stats:7.2f} s  {base / stats:5.2f}x the baseline"
          f"; its progress bar {'shown' if bar else 'not shown'}")  # fmt: skip
    return {"first": base / first, "current": base / again, "verify": verify / again,
            "history_ms": statistics.median(lookups) * 1000, "stats_s": stats,
            "stats_bar": float(bar)}  # fmt: skip


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=200_000, help="tasks in the log (default 200,000)")
    p.add_argument("--quick", action="store_true", help="20,000 tasks")
    p.add_argument("--keep", metavar="DIR", help="generate into DIR and keep it (reused if there)")
    args = p.parse_args(argv)
    if args.quick:
        args.tasks = 20_000
    return args


if __name__ == "__main__":
    main()
