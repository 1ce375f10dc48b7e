"""A third floor for issue 8's (1): our own pure core with the least glue around it.

    python -m benchmarks.bench_core_floor [--tasks N] [--rounds R] [--dir DIR] [--compiled]
    python -m benchmarks.bench_core_floor --embedded [--tasks N] [--rounds R] [--compiled]

``bench_hotpath`` (1) compares our daemon with an echo daemon (append, fsync, ack) and
with one that also runs each task (``RUNNER``): floors with no queue at all. This asks
how far the glue around our core is from what the core itself costs. It runs, driven by
the official SDK exactly as (1) drives ours (sequential awaited enqueues, a registered
no-op handler), in interleaved rounds:

- the echo daemon of (1), the baseline;
- ``CORE``: a daemon written here from the pure core alone, with the least glue a
  daemon can have: one synchronous function per read of stdin that parses each line
  (``rpc.protocol.parse_line``), decides it (``projections.decide``), stamps and seals
  its records (``eventlog.chain``, ``codec``), folds them (``projections.state``),
  writes them, ``fsync``s once, acks, then plans and decides the claim of the free
  slots (``projections.plan``, ``decide.planned_claims``) and writes the ``execute``
  lines. No engine, no batching log, no futures, no lock, no catch-up, no liveness:
  not a queue anyone should run (one process only, no recovery), a measurement;
- ``CORE, fold after the ack``: the same, with each read's records folded after the
  ack is written (the outcome's records too), as our daemon does since this tool was
  written;
- our daemon, as (1) runs it.

It prints each one's awaited-enqueue rate as a ratio to the echo's, and its CPU (user
and system) per task. With ``--compiled``, ``CORE`` and ours import this tree as
``pip install .`` builds it (``setup.py``'s ``COMPILED`` modules built with mypyc, in
a copy), as ``bench_hotpath --compiled`` does. Nothing here is a goal; the gap between
``CORE`` and ours is what any rework of the glue can win at most, the gap between the
echo and ``CORE`` what only a cheaper core can.

``--embedded`` asks the same of (5) sequential: in interleaved rounds, huey's
``SqliteHuey(fsync=True)`` as ``bench_hotpath`` (5) runs it, our embedded ``snerd.Queue``
awaiting each enqueue (the same), and ``CORE`` in-process: a plain loop that does a
task's required work with the pure core and nothing else (decide the enqueue, stamp,
seal, write, ``fsync``, fold; plan and decide the claim, write, fold; call a no-op
handler; decide the success, write, fold, left for the next ``fsync`` to make durable).
No event loop, no futures, no engine, no lock. Rates as ratios to huey's; the goal of
(5) is 2x.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import bench_hotpath as hot

CORE = r'''
import asyncio, os, sys, time
from snerd.rpc import protocol as p
from snerd.projections.state import empty, fold_events
from snerd.projections.events import decode
from snerd.projections.decide import decide, planned_claims
from snerd.projections.commands import Finish, Claim
from snerd.projections.plan import plan
from benchmarks.bench_core_floor import CoreLog

FOLD_AFTER_ACK = %(after)r
storage = sys.argv[1] if len(sys.argv) > 1 else "."
os.makedirs(storage, exist_ok=True)
core_log = CoreLog(os.path.join(storage, "core.log"))
fd = core_log.fd
OUT = sys.stdout.fileno()
state = empty()
registered, running, held = set(), {}, []
SLOTS = 8


def commit(records, fold):
    global state
    stamped = core_log.write(records)
    if fold:
        state = fold_events(state, [decode(r) for r in stamped])[0]
    else:
        held.extend(stamped)


class Reader(asyncio.Protocol):
    def __init__(self):
        self.buffer = b""

    def data_received(self, data):
        global state
        *lines, self.buffer = (self.buffer + data).split(b"\n")
        now, out, durable, outcomes = time.time(), [], False, []
        for line in lines:
            if not line.strip():
                continue
            cmd = p.parse_line(line)
            if isinstance(cmd, p.Register):
                registered.add(cmd.task_type)
            elif isinstance(cmd, p.Enqueue):
                if FOLD_AFTER_ACK and outcomes:  # in order: the outcomes before it
                    for res in outcomes:
                        self.finish(res, now)
                    outcomes = []
                commit(decide(state, cmd, now=now, daemon="core").records, not FOLD_AFTER_ACK)
                durable = True
                out.append(p.ack(cmd.task_id))
            elif isinstance(cmd, p.Result):
                outcomes.append(cmd)
                if not FOLD_AFTER_ACK:
                    self.finish(outcomes.pop(), now)
        if durable:
            os.fsync(fd)
        if out:
            os.write(OUT, b"".join(out))
            out = []
        for res in outcomes:
            self.finish(res, now)
        if held:
            state = fold_events(state, [decode(r) for r in held])[0]
            held.clear()
        if len(running) < SLOTS:
            step = plan(state, now, SLOTS - len(running), accepts=lambda t: t.type in registered)
            if step.claims:
                claim = Claim(tuple(t.id for t in step.claims), 3600.0, 1.0)
                decision = planned_claims(list(step.claims), claim, now=now, daemon="core")
                commit(decision.records, True)
                for task, attempt in decision.outcome:
                    running[task.id] = attempt
                    out.append(p.execute(task.id, task.type, task.data, attempt=attempt,
                                         max_execution_seconds=task.max_execution_seconds))
        if out:
            os.write(OUT, b"".join(out))

    def finish(self, res, now):
        attempt = running.pop(res.task_id)
        decision = decide(state, Finish(res.task_id, attempt, res.success), now=now,
                          daemon="core")
        commit(decision.records, not FOLD_AFTER_ACK)

    def eof_received(self):
        done.set_result(None)


async def main():
    global done
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    await loop.connect_read_pipe(Reader, sys.stdin)
    await done


asyncio.run(main())
'''
"""The core-only daemon; ``%(after)r`` is whether it folds after the ack."""


class CoreLog:
    """The least log the ``CORE`` floors write through: each record stamped with its
    seq into a copy, encoded and sealed by the checksum chain as ``FileLog`` does, and
    written (no lock, no fsync: the caller syncs ``fd`` when it must)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        from snerd.eventlog.chain import GENESIS, Chain
        from snerd.eventlog.codec import encode_body

        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.chain = Chain(None)
        self.encode = encode_body
        self.head = GENESIS
        self.seq = 0

    def write(self, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Write ``records``; return their stamped copies (what a listener hears)."""
        stamped = []
        for record in records:
            self.seq += 1
            stamped.append({**record, "seq": self.seq})
        encode = self.encode
        self.head, lines = self.chain.seal_all(self.head, [encode(r) for r in stamped])
        os.write(self.fd, b"".join(lines))
        return stamped


def core_embedded(storage: Path, n: int, cpu_out: list[float] | None = None) -> float:
    """Tasks/s of ``--embedded``'s ``CORE``: n tasks, one at a time, in this process (and
    its CPU a task to ``cpu_out``: ``bench_hotpath.CPU_OUT``)."""
    import time

    import orjson

    from snerd.projections.commands import Claim, Enqueue, Finish
    from snerd.projections.decide import decide, planned_claims
    from snerd.projections.events import Record, decode
    from snerd.projections.plan import plan
    from snerd.projections.state import empty, fold_events

    storage.mkdir(parents=True, exist_ok=True)
    core_log = CoreLog(storage / "core.log")
    fd = core_log.fd
    state = empty()

    def commit(records: list[Record]) -> None:
        nonlocal state
        state = fold_events(state, [decode(r) for r in core_log.write(records)])[0]

    def handler(data: str) -> None:
        return None

    def accepts(task: Any) -> bool:
        return bool(task.type == "bench")

    try:
        cpu = time.process_time()
        start = time.perf_counter()
        for i in range(n):
            now = time.time()
            cmd = Enqueue(f"t{i}", "bench", task_data=orjson.dumps({"n": i}).decode())
            records = decide(state, cmd, now=now, daemon="core").records
            commit(records)  # (folded before the fsync: no ack waits here for it)
            os.fsync(fd)  # the awaited enqueue: durable before it returns
            step = plan(state, now, 1, accepts=accepts)
            claim = Claim(tuple(t.id for t in step.claims), 3600.0, 1.0)
            decision = planned_claims(list(step.claims), claim, now=now, daemon="core")
            commit(decision.records)
            for task, attempt in decision.outcome:
                handler(task.data)
                commit(decide(state, Finish(task.id, attempt, True), now=now,
                              daemon="core").records)  # fmt: skip
        rate = n / (time.perf_counter() - start)
        if cpu_out is not None:
            cpu_out.append((time.process_time() - cpu) / n)
    finally:
        os.close(fd)
    if state.tasks:
        sys.exit(f"bench_core_floor: CORE left {len(state.tasks)} tasks unfinished")
    return rate


def _embedded(args: argparse.Namespace, tree: Path, tmp: Path) -> None:
    """``--embedded``: huey, our embedded queue and CORE, interleaved, against huey."""
    import subprocess

    code = ("import asyncio, sys; from pathlib import Path; sys.path.insert(0, sys.argv[4])\n"
            "from benchmarks.bench_core_floor import core_embedded\n"
            "from benchmarks.bench_hotpath import embedded_run\n"
            "n, where, cpu = int(sys.argv[2]), Path(sys.argv[1]), []\n"
            "print(core_embedded(where, n, cpu) if sys.argv[3] == 'core' else\n"
            "      asyncio.run(embedded_run(where, n, False, cpu)), cpu[0])\n")  # fmt: skip

    def run(kind: str, where: Path) -> tuple[float, float]:
        done = subprocess.run([sys.executable, "-c", code, str(where), str(args.tasks), kind,
                               str(tree)], cwd=hot.REPO, capture_output=True, text=True,
                              check=False)  # fmt: skip
        if done.returncode != 0:
            sys.exit(f"bench_core_floor: the {kind} run failed: {done.stderr[-2000:]}")
        rate, cpu = done.stdout.split()[-2:]
        return float(rate), float(cpu)

    names = ("huey SqliteHuey(fsync=True)", "CORE: the pure core, least glue", "ours")
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for i in range(args.rounds):
        (tmp / f"huey{i}").mkdir()
        cpu: list[float] = []
        peer = hot.huey_run(tmp / f"huey{i}", args.tasks, False, cpu)
        if peer is None:
            sys.exit("bench_core_floor: huey is not installed (pip install -e '.[bench]')")
        runs[names[0]].append((peer, cpu[0]))
        runs[names[1]].append(run("core", tmp / f"core{i}"))
        runs[names[2]].append(run("ours", tmp / f"ours{i}"))
    huey = statistics.median(rate for rate, _ in runs[names[0]])
    print(f"embedded, {args.tasks} tasks awaited one at a time, {args.rounds} interleaved "
          "rounds (medians); (5)'s goal is 2x huey")  # fmt: skip
    print(f"  {'':36} {'rate':>9}  {'':10}  {'wall a task':>11} {'CPU':>7} {'waiting':>8}")
    for name, measured in runs.items():
        rate = statistics.median(r for r, _ in measured)
        wall = statistics.median(1 / r for r, _ in measured) * 1e6
        spent = statistics.median(c for _, c in measured) * 1e6
        print(f"  {name:36} {rate:7,.0f}/s  {rate / huey:5.2f}x huey  {wall:8.0f} us "
              f"{spent:4.0f} us {wall - spent:5.0f} us  "
              f"[{min(r for r, _ in measured):,.0f}..{max(r for r, _ in measured):,.0f}]")
    print("  (CPU: the process's, every thread of it, over the timed span; huey's includes "
          "its consumer's 8 threads; waiting: wall minus CPU, the sync as a rule)")


def _split_cpu(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process and its waited-for children."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[13])) / tick, (int(fields[12]) + int(fields[14])) / tick


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the logs go (default: a temp dir)")
    parser.add_argument("--compiled", action="store_true",
                        help="this tree as a wheel builds it (mypyc), in a copy")  # fmt: skip
    parser.add_argument("--embedded", action="store_true",
                        help="(5) sequential instead: huey, our embedded queue and CORE")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="snerd-core-floor-", dir=args.dir))
    tree = hot.REPO
    if args.compiled:
        from benchmarks import trees

        tree = trees.compiled_copy(tmp / "built", "bench_core_floor")
    if args.embedded:
        try:
            _embedded(args, tree, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    path = f"import sys; sys.path.insert(0, {str(tree)!r})\n"
    binaries = {
        "echo daemon (append, fsync, ack)": hot._shim(tmp, "echo", hot.ECHO),
        "CORE: the pure core, least glue": hot._shim(tmp, "core", path + CORE % {"after": False}),
        "CORE, fold after the ack": hot._shim(tmp, "core2", path + CORE % {"after": True}),
        "ours": hot._shim(tmp, "ours", path + hot.OURS),
    }
    splits: list[tuple[float, float]] = []

    def cpu(pid: int) -> float:
        user, system = _split_cpu(pid)
        splits.append((user, system))
        return user + system

    hot._cpu_seconds = cpu  # (1)'s runner reads the daemon's CPU through it
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in binaries}
    try:
        for i in range(args.rounds):
            for name, binary in binaries.items():
                rate, _ = asyncio.run(hot.sdk_run(binary, tmp / f"s{i}-{binary.name}",
                                                  args.tasks, handler=binary.name != "echo"))
                (u0, s0), (u1, s1) = splits[-2], splits[-1]
                results[name].append((rate, (u1 - u0) / args.tasks, (s1 - s0) / args.tasks))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    echo = statistics.median(r[0] for r in results["echo daemon (append, fsync, ack)"])
    print(f"official SDK, {args.tasks} sequential awaited enqueues, {args.rounds} interleaved "
          "rounds (medians); a no-op handler but for the echo")  # fmt: skip
    for name, runs in results.items():
        rate = statistics.median(r[0] for r in runs)
        user = statistics.median(r[1] for r in runs) * 1e6
        system = statistics.median(r[2] for r in runs) * 1e6
        print(f"  {name:36} {rate:7,.0f}/s  {rate / echo:5.2f}x echo   CPU a task: "
              f"user {user:4.0f} us, system {system:4.0f} us")  # fmt: skip


if __name__ == "__main__":
    main()
