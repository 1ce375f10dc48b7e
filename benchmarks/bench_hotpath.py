"""The hot path against its floor: every figure is a ratio to a baseline run in the same invocation.

    python -m benchmarks.bench_hotpath [--tasks N] [--quick]

(1) floor: a minimal durable echo daemon written here (read a line, append it to a file,
    fsync, write an ack), driven by the official SnerdMQ SDK (``snerdmq-python``) with
    sequential awaited enqueues; then our daemon, same driver, with a registered no-op
    handler (every task also executes). Ratio of awaited-enqueue rates (goal >= 0.8x).
    Beside it, two more floors in the same rounds: the echo that also runs each task
    (``RUNNER``: no queue, no state) and our own pure core with the least glue around it
    (``bench_core_floor``'s ``CORE``): what any glue of ours could reach at most.
(2) raw stdio, a blocking client: enqueue -> ack time per task, echo daemon vs ours with a
    handler executing (goal <= 1.5x), and ``CORE`` beside them; enqueue -> execute p50
    over stdio (goal <= 2 ms). Each daemon first answers one task untimed, as in (1): its
    start-up is no ack's time.
(3) CPU per task: user+system CPU of our daemon process (all its threads) during (1),
    divided by tasks (goal <= 0.5 ms, SnerdMQ's Rust daemon on this machine type).
(4) durable syncs per task (fsync/fdatasync counted by ``strace -f -c`` from outside the
    process) for a smaller run of (1) (goal <= 1.0).
(5) embedded ``snerd.Queue`` vs huey ``SqliteHuey(fsync=True)`` with an 8-thread consumer
    started first, idle polling at its fastest: first enqueue to last task done, with
    sequential awaited enqueues (goal >= 2x) and concurrent ones (goal >= 5x); beside
    the sequential one, its floor (``bench_core_floor --embedded``'s ``CORE``).

With ``--all`` the same invocation also prints (6) group commit (``bench_log``'s
appends, median of 5) and (7) the read paths (``bench_replay``), each ending with its
verdict as (1)-(5) do (none for (7) with ``--quick``, whose log is a tenth of the goals'
200,000 tasks), so every figure of issue 8 comes from one command. Nothing here is a
timed test. With ``--compiled`` the same run uses this tree as ``pip install .`` builds
it (``setup.py``'s ``COMPILED`` modules built with mypyc, in a copy): what a user who
installs snerd runs; without it, the editable install's interpreted modules.

    python -m benchmarks.bench_hotpath --instructions --baseline REV

counts instead of timing, for changes too small to see through this VM's run-to-run
spread (+-8% in tasks/s): the embedded queue's per-task paths above (sequential and
concurrent enqueues) each run under ``valgrind --tool=callgrind`` (``PYTHONHASHSEED=0``)
at two sizes, in the tree at git revision REV and in this one; the difference between
the sizes over the difference in tasks is the instructions a task costs (start-up and
shutdown cancel out). One process, so the same tree gives the same figure on every run
whatever else the machine does: the sequential path to within 0.1%, the concurrent one
to about 1% (how many outcomes share a batch moves a little with timing); the kernel's
work (fsync) is not counted. The daemon's own path is counted too, under (2)'s blocking
client (the daemon under callgrind, the client outside it): that client waits for each
ack and ``execute`` before its next line, so the daemon sees the same lines in the same
reads on every run, and its count repeats to about 0.2%. (The SDK's path is not
counted: its lines interleave as the timing falls, and its count moves with the
machine's load, by up to 10% here; it is left to the timed runs.) A fourth path runs the
sequential one with a task's data the size of a real one (``big_payload``: ~4 KB, a
list of 1,000 numbers), where work that grows with the data shows. A fifth counts (6)'s
group commit (``bench_log``'s 32 appenders, each awaiting one append after another):
its figure is a line appended, not a task.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[1]
OURS = "import sys; from snerd.daemon import main; sys.exit(main())"


def _floor(name: str, body: str) -> str:
    """A floor daemon's code: its log ``<name>.log`` in the storage dir it is given,
    and ``body`` run for each line read (``line``, and ``msg`` parsed)."""
    return (
        "import os, sys, orjson\n"
        f'path = os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".", "{name}.log")\n'
        "os.makedirs(os.path.dirname(path), exist_ok=True)\n"
        "fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)\n"
        "out = sys.stdout.buffer\n"
        "for line in sys.stdin.buffer:\n"
        "    msg = orjson.loads(line)\n" + body
    )


ECHO = _floor("echo", r"""
    if msg.get("action") != "enqueue":
        continue
    os.write(fd, line if line.endswith(b"\n") else line + b"\n")
    os.fsync(fd)
    out.write(orjson.dumps({"action": "ack", "task_id": msg["task_id"]}) + b"\n")
    out.flush()
""")  # fmt: skip
"""The floor of (1) and (2): read a line, append it, fsync, write an ack."""

RUNNER = _floor("runner", r"""
    action = msg.get("action")
    line = line if line.endswith(b"\n") else line + b"\n"
    if action == "enqueue":
        os.write(fd, line)
        os.fsync(fd)
        task_id = msg["task_id"]
        out.write(orjson.dumps({"action": "ack", "task_id": task_id}) + b"\n"
                  + orjson.dumps({"action": "execute", "task_id": task_id,
                                  "task_type": msg["task_type"],
                                  "task_data": msg.get("task_data", ""), "attempt": 1})
                  + b"\n")
        out.flush()
    elif action == "result":
        os.write(fd, line)  # made durable by the next enqueue's fsync
""")  # fmt: skip
"""A second floor for (1): the echo daemon that also runs each task, as a queue with no
state would: the enqueue appended and fsynced, its ack and ``execute`` in one write, the
result appended without a sync of its own (as ours writes a success). No decision, no
projection, no claim record: what the SDK's round trip with a handler costs at least,
so the ratio against it is our engine's share alone."""


def _shim(tmp: Path, name: str, code: str, wrapper: str = "") -> Path:
    """An executable an SDK can spawn as its binary."""
    script = tmp / f"{name}.py"
    script.write_text(code)
    path = tmp / name
    path.write_text(f"#!/bin/sh\nexec {wrapper}{sys.executable} {script} \"$@\"\n")
    path.chmod(0o755)
    return path


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (all its threads) and its waited-for children."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    return ticks / os.sysconf("SC_CLK_TCK")


async def sdk_run(
    binary: Path, storage: Path, n: int, handler: bool,
    during: contextlib.AbstractContextManager[Any] | None = None,
) -> tuple[float, float]:  # fmt: skip
    """(awaited enqueues/s, daemon CPU seconds) through the official SDK; ``during`` (if
    given) is entered around the timed enqueues and the wait for their tasks."""
    from snerdmq import SnerdQueue

    queue = SnerdQueue(binary_path=str(binary), storage_path=str(storage))
    done = asyncio.Event()
    seen = 0

    async def work(data: Any) -> None:
        nonlocal seen
        seen += 1
        if seen == n:
            done.set()

    if handler:
        queue.register_handler("bench", work)

    sent = 0

    async def timed(pid: int) -> tuple[float, float]:
        nonlocal sent
        await queue.enqueue("warm", "warm", {})
        with during or contextlib.nullcontext():
            cpu0, start = _cpu_seconds(pid), time.perf_counter()
            for i in range(n):
                await queue.enqueue(f"t{i}", "bench", {"n": i})
                sent = i
            rate = n / (time.perf_counter() - start)
            if handler:
                await done.wait()
            return rate, _cpu_seconds(pid) - cpu0

    with contextlib.redirect_stdout(io.StringIO()):  # the SDK prints every line it reads
        await queue.start_listening()
        assert queue.process is not None
        rate, cpu = await _unless_stuck(timed(_daemon_pid(queue.process.pid)),
                                        lambda: (queue.process.returncode, sent, seen),
                                        queue.process.kill)  # fmt: skip
        await queue.shutdown()
    return rate, cpu


STUCK_SECONDS = 60.0
"""How long a run may go with no enqueue acked and no task handled before
:func:`_unless_stuck` ends it."""


async def _unless_stuck(
    run: Coroutine[Any, Any, T], progress: Callable[[], object], kill: Callable[[], None]
) -> T:  # fmt: skip
    """``run``'s result, unless ``progress()`` (what a daemon has done so far) stays the
    same for STUCK_SECONDS: then ``kill`` the daemon and exit saying so. (A daemon that
    dies or stops answering would otherwise leave the SDK's enqueue waiting forever, and
    the benchmark with no word of why.)"""
    work = asyncio.ensure_future(run)
    last, still = progress(), 0.0
    while not work.done():
        await asyncio.wait({work}, timeout=1.0)  # (one wake-up a second: nothing to time)
        now = progress()
        still = 0.0 if now != last else still + 1.0
        last = now
        if still >= STUCK_SECONDS and not work.done():
            work.cancel()
            with contextlib.suppress(ProcessLookupError):
                kill()
            sys.exit(f"bench_hotpath: the daemon did nothing for {STUCK_SECONDS:.0f} s "
                     f"(exit code, last enqueue acked, tasks handled: {now}); run it by "
                     "hand to see why")  # fmt: skip
    return work.result()


def _daemon_pid(shell_pid: int) -> int:
    """The shim execs the interpreter, so the SDK's child is the daemon itself."""
    return shell_pid


async def _stdio(cmd: list[str], env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env,
        limit=1 << 22,
    )  # fmt: skip


async def stdio_blocking(cmd: list[str], n: int, handler: bool) -> tuple[float, float | None]:
    """(seconds per ack, enqueue -> execute p50 seconds or None), one request at a time.

    One task is sent and answered first, untimed, as (1)'s SDK run sends one: the
    process's start-up (its imports, the log's opening) is not an ack's cost. Timed in
    the first ack it added ~90 us to our mean over 2,000 tasks and ~20 us to the echo's.
    """
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = await _stdio(cmd, env)
    assert proc.stdin and proc.stdout
    stdin, stdout = proc.stdin, proc.stdout

    async def recv() -> dict[str, Any]:
        line = await stdout.readline()
        if not line:
            raise RuntimeError("daemon closed stdout")
        message: dict[str, Any] = orjson.loads(line)
        return message

    async def task(task_id: str) -> tuple[float, float | None]:
        """Enqueue one task, wait for its ack (and its ``execute``, answered); return the
        seconds to each."""
        start = time.perf_counter()
        line = {"action": "enqueue", "task_id": task_id, "task_type": "bench", "task_data": "{}"}
        stdin.write(orjson.dumps(line) + b"\n")
        await stdin.drain()
        ack: float | None = None
        execute: float | None = None
        while ack is None or (handler and execute is None):
            msg = await recv()
            if msg["action"] == "ack":
                ack = time.perf_counter() - start
            elif msg["action"] == "execute":
                execute = time.perf_counter() - start
                reply = {"action": "result", "task_id": msg["task_id"], "status": "success"}
                stdin.write(orjson.dumps(reply) + b"\n")
        return ack, execute

    if handler:
        stdin.write(b'{"action":"register","task_type":"bench"}\n')
    await task("warm")
    acks: list[float] = []
    executes: list[float] = []
    for i in range(n):
        ack, execute = await task(f"t{i}")
        acks.append(ack)
        if execute is not None:
            executes.append(execute)
    stdin.close()
    await asyncio.wait_for(proc.wait(), 60)
    return statistics.mean(acks), statistics.median(executes) if executes else None


def count_syncs(tmp: Path, n: int) -> float | None:
    """fsync, fdatasync and kernel AIO fsync calls per task (``io_submit``: the log
    submits nothing else, ``eventlog.aio``), counted by ``strace -f -c`` from outside the
    process, for n tasks enqueued one at a time, each executed and answered (a blocking
    stdio client, as an SDK awaiting each enqueue drives it)."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    report = tmp / "strace.txt"
    cmd = [strace, "-f", "-c", "-e", "trace=fsync,fdatasync,io_submit", "-o", str(report),
           sys.executable, "-c", OURS, str(tmp / "traced")]  # fmt: skip
    asyncio.run(stdio_blocking(cmd, n, handler=True))  # (and its untimed first task)
    calls = 0
    for name in ("fsync", "fdatasync", "io_submit"):
        match = re.search(rf"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?{name}\s*$",
                          report.read_text(), re.M)  # fmt: skip
        if match:
            calls += int(match.group(1))
    return calls / (n + 1)


def huey_run(
    tmp: Path, n: int, concurrent: bool, cpu_out: list[float] | None = None
) -> float | None:
    """Tasks/s of huey's SqliteHuey(fsync=True): first enqueue to last task done (and
    its CPU a task to ``cpu_out``: :data:`CPU_OUT`)."""
    try:
        from huey import SqliteHuey
        from huey.consumer import Consumer
    except ImportError:
        return None
    huey = SqliteHuey(filename=str(tmp / f"huey-{concurrent}.db"), fsync=True)
    finished = threading.Event()
    count = [0]
    lock = threading.Lock()

    @huey.task()
    def work(i: int) -> None:
        with lock:
            count[0] += 1
            if count[0] == n:
                finished.set()

    consumer = Consumer(huey, workers=8, worker_type="thread", periodic=False,
                        initial_delay=0.001, max_delay=0.001)  # fmt: skip
    consumer._set_signal_handlers = lambda: None  # type: ignore[method-assign]
    before = set(threading.enumerate())
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    time.sleep(0.2)  # the consumer is up and polling before the clock starts
    cpu = time.process_time()
    start = time.perf_counter()
    if concurrent:
        with _pool(8) as submit:
            for i in range(n):
                submit(work, i)
    else:
        for i in range(n):
            work(i)
    finished.wait(600)
    elapsed = time.perf_counter() - start
    if cpu_out is not None:
        cpu_out.append((time.process_time() - cpu) / n)
    consumer.stop(graceful=False)
    # Its threads end at their next poll: wait for them, so that none still runs (and
    # polls SQLite every millisecond) while the next measurement, ours, is taken.
    for leftover in set(threading.enumerate()) - before:
        leftover.join(5.0)
    return n / elapsed


@contextlib.contextmanager
def _pool(workers: int) -> Any:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers) as pool:
        yield pool.submit


def big_payload(i: int) -> dict[str, Any]:
    """A task's data the size of a real one: a user and a list of 1,000 numbers (~4 KB
    of JSON), against the ``{"n": i}`` of every other path."""
    return {"user": {"id": i, "name": "x" * 40, "tags": list(range(1000))}}


async def embedded_run(
    storage: Path, n: int, concurrent: bool, cpu_out: list[float] | None = None,
    payload: Callable[[int], Any] | None = None,
) -> float:  # fmt: skip
    """Tasks/s of our embedded queue: first enqueue to last task done (and its CPU a
    task to ``cpu_out``: :data:`CPU_OUT`); each task's data is ``payload(i)``, by default
    ``{"n": i}``."""
    from snerd.embedded import Queue

    queue = Queue(str(storage))
    left = n
    done = asyncio.Event()

    @queue.handler("bench")
    async def work(job: Any) -> None:
        nonlocal left
        left -= 1
        if left == 0:
            done.set()

    async with queue:
        cpu = time.process_time()
        start = time.perf_counter()
        data = (lambda i: {"n": i}) if payload is None else payload
        if concurrent:
            await asyncio.gather(*(queue.enqueue(f"t{i}", "bench", data(i)) for i in range(n)))
        else:
            for i in range(n):
                await queue.enqueue(f"t{i}", "bench", data(i))
        await asyncio.wait_for(done.wait(), 600)
        rate = n / (time.perf_counter() - start)
        if cpu_out is not None:
            cpu_out.append((time.process_time() - cpu) / n)
        return rate


CPU_OUT = None
"""(A note, not a value.) ``cpu_out``, given to :func:`embedded_run`, :func:`huey_run` or
``bench_core_floor.core_embedded``, gets the run's CPU seconds a task: the process's,
every thread of it, over the timed span. With the rate it says how much of a task's
wall time was work and how much a wait (the fsync, as a rule)."""


def _disk(tmp: Path, n: int = 1000) -> None:
    """Print what this disk's fsync costs back to back (as the floors sync) and after
    300 us of CPU work (as a queue syncs): the ratios below depend on both
    (``bench_fsync --gaps``)."""
    from benchmarks.bench_fsync import fsyncs_after

    fd = os.open(tmp / "disk.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        close, apart = fsyncs_after(fd, 0, n), fsyncs_after(fd, 300, n)
    finally:
        os.close(fd)
    print(f"this disk: an fsync takes {statistics.fmean(close) * 1e6:.0f} us back to back, "
          f"{statistics.fmean(apart) * 1e6:.0f} us after 300 us of CPU work (means of {n}; "
          "bench_fsync --gaps)")  # fmt: skip


ROUNDS = 3
"""Interleaved runs of each rate of (1), (2) and (5), whose medians are compared."""


def _span(rates: list[float]) -> str:
    """``[lowest..highest]`` of a figure's runs."""
    return f"[{min(rates):,.0f}..{max(rates):,.0f}]"


def _ms_span(seconds: list[float]) -> str:
    return f"[{min(seconds) * 1e3:.3f}..{max(seconds) * 1e3:.3f}]"


def _line(label: str, value: str, goal: str, ok: bool | None) -> None:
    mark = "" if ok is None else ("  ok" if ok else "  BELOW GOAL")
    print(f"{label:<58} {value:<30} goal {goal}{mark}")


INSTRUCTION_PATHS = {"sequential": (200, 600), "concurrent": (1000, 3000), "daemon": (100, 400),
                     "payload": (100, 300), "appends": (3200, 9600)}  # fmt: skip
"""The paths ``--instructions`` counts, with the two task counts each runs."""

INSTRUCTION_LABELS = {
    "sequential": "embedded, sequential enqueues",
    "concurrent": "embedded, concurrent enqueues",
    "daemon": "daemon, stdio client of (2)",
    "payload": "embedded, sequential, 4 KB data",
    "appends": "(6) group commit, a line appended",
}


def _one_path(tree: Path, what: str, n: int) -> None:
    """Run one path of ``--instructions`` with ``tree``'s snerd: what runs under
    callgrind."""
    sys.path.insert(0, str(tree))  # (nothing has imported snerd in this process yet)
    with tempfile.TemporaryDirectory(dir=str(REPO.parent), prefix="snerd-instr-") as raw_tmp:
        tmp = Path(raw_tmp)
        if what == "appends":
            from benchmarks.bench_log import bench_group_commit

            bench_group_commit(tmp, n)
            return
        payload = big_payload if what == "payload" else None
        asyncio.run(embedded_run(tmp / "e", n, what == "concurrent", payload=payload))


def _callgrind(tree: Path, what: str, n: int) -> int:
    """Instructions of one run of a path, under callgrind."""
    if what == "daemon":
        return _callgrind_daemon(tree, n)
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
           sys.executable, "-m", "benchmarks.bench_hotpath",
           "--one-path", str(tree), what, str(n)]  # fmt: skip
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    run = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, check=False)
    counts = re.findall(rb"Collected : (\d+)", run.stderr)
    if run.returncode != 0 or not counts:
        sys.exit(f"bench_hotpath: callgrind failed on {what} ({tree}): "
                 f"{run.stderr.decode(errors='replace')[-2000:]}")  # fmt: skip
    return sum(int(c) for c in counts)


def _callgrind_daemon(tree: Path, n: int) -> int:
    """Instructions of ``tree``'s daemon, under callgrind, answering ``n`` enqueues of
    (2)'s blocking client, which runs each task: it waits for each ack and ``execute``
    and answers the ``execute`` before its next enqueue, so the lines reach the daemon
    the same way on every run, however slowly it runs (the count repeats to ~0.2%;
    an SDK's client does not wait so, and its lines interleave as the timing falls)."""
    with tempfile.TemporaryDirectory(dir=str(REPO.parent), prefix="snerd-instr-") as raw_tmp:
        tmp = Path(raw_tmp)
        out = tmp / "callgrind.out"
        code = f"import sys; sys.path.insert(0, {str(tree)!r}); {OURS}"
        cmd = ["env", "PYTHONHASHSEED=0", "valgrind", "-q", "--tool=callgrind",
               f"--callgrind-out-file={out}",
               sys.executable, "-c", code, str(tmp / "s")]  # fmt: skip
        asyncio.run(stdio_blocking(cmd, n, handler=True))
        found = re.search(r"^summary:\s*(\d+)", out.read_text(), re.M) if out.exists() else None
        if found is None:
            sys.exit(f"bench_hotpath: callgrind failed on the daemon ({tree})")
        return int(found.group(1))


def _instructions(rev: str | None, compiled: bool, paths: list[str]) -> None:
    """``--instructions``: per-task instructions of each of ``paths``, REV's tree and
    this one; with ``compiled``, each built as a wheel builds it (without REV: this tree
    interpreted, then compiled)."""
    from benchmarks import trees

    if shutil.which("valgrind") is None:
        sys.exit("bench_hotpath --instructions needs valgrind (apt-get install -y valgrind)")
    with tempfile.TemporaryDirectory(dir=str(REPO.parent), prefix="snerd-rev-") as raw_tmp:
        tmp = Path(raw_tmp)
        names: list[tuple[str, Path]] = [("this tree", REPO)]
        if rev is not None:
            trees.extract(rev, tmp / "rev", "bench_hotpath")
            names.insert(0, (rev, tmp / "rev"))
        if compiled:
            built = [(name, trees.compiled_copy(tmp / f"built{i}", "bench_hotpath", tree))
                     for i, (name, tree) in enumerate(names)]  # fmt: skip
            names = [("interpreted", REPO), ("compiled", built[0][1])] if rev is None else built
        print("instructions per task (callgrind; the run at the larger size minus the "
              "smaller, over the difference in tasks)")  # fmt: skip
        print(f"{'path':34}" + "".join(f"{name:>16}" for name, _ in names)
              + ("" if len(names) < 2 else f"{'ratio':>9}"))  # fmt: skip
        for what in paths:
            small, large = INSTRUCTION_PATHS[what]
            per_task = [
                (_callgrind(tree, what, large) - _callgrind(tree, what, small)) / (large - small)
                for _, tree in names
            ]
            cells = "".join(f"{value:16,.0f}" for value in per_task)
            ratio = "" if len(per_task) < 2 else f"{per_task[1] / per_task[0]:9.3f}"
            label = INSTRUCTION_LABELS[what]
            print(f"{label + f' ({small}->{large})':34}{cells}{ratio}")
        if rev is not None:
            print(f"  ratio: this tree's instructions over {rev}'s (below 1: fewer a task)")
        elif compiled:
            print("  ratio: the compiled build's instructions over the interpreted one's")


def main() -> None:
    if sys.argv[1:2] == ["--one-path"]:  # a run under callgrind (see --instructions)
        _one_path(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--quick", action="store_true", help="1000 tasks, for a smoke run")
    parser.add_argument("--dir", default=str(REPO.parent))
    parser.add_argument(
        "--all", action="store_true",
        help="also issue 8's other figures in this run: group commit (bench_log, median "
             "of 5) and the read paths (bench_replay)",
    )  # fmt: skip
    parser.add_argument(
        "--instructions", action="store_true",
        help="count instructions per task under callgrind instead of timing",
    )  # fmt: skip
    parser.add_argument("--baseline", metavar="REV",
                        help="with --instructions: also the tree at this git revision, and "
                             "the ratio")  # fmt: skip
    parser.add_argument(
        "--compiled", action="store_true",
        help="run this tree as a wheel builds it (pip install .: setup.py's COMPILED "
             "modules built with mypyc); with --instructions, count it against the "
             "interpreted tree (or against REV, compiled too)",
    )  # fmt: skip
    parser.add_argument("--paths", nargs="+", choices=list(INSTRUCTION_PATHS),
                        help="with --instructions: only these paths")  # fmt: skip
    args = parser.parse_args()
    if args.instructions:
        _instructions(args.baseline, args.compiled, args.paths or list(INSTRUCTION_PATHS))
        return
    if args.baseline:
        parser.error("--baseline needs --instructions")
    if args.compiled:
        _in_compiled_copy(args.dir)
        return
    n = 1000 if args.quick else args.tasks
    os.environ["PYTHONPATH"] = str(REPO)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="snerd-hot-") as raw_tmp:
        tmp = Path(raw_tmp)
        from benchmarks.bench_core_floor import CORE  # (here: it imports this module)

        echo_bin, ours_bin = _shim(tmp, "echo", ECHO), _shim(tmp, "ours", OURS)
        runner_bin = _shim(tmp, "runner", RUNNER)
        core_code = CORE % {"after": True}  # (it folds after the ack, as ours does)
        core_bin = _shim(tmp, "core", core_code)
        runs: list[tuple[float, float]] = []
        echo_runs: list[tuple[float, float]] = []
        runner_runs: list[tuple[float, float]] = []
        core_runs: list[tuple[float, float]] = []
        for round_ in range(ROUNDS):  # interleaved, medians: this disk's fsync is bimodal
            echo_runs.append(asyncio.run(sdk_run(echo_bin, tmp / f"e{round_}", n, False)))
            runner_runs.append(asyncio.run(sdk_run(runner_bin, tmp / f"r{round_}", n, True)))
            core_runs.append(asyncio.run(sdk_run(core_bin, tmp / f"c{round_}", n, True)))
            runs.append(asyncio.run(sdk_run(ours_bin, tmp / f"o{round_}", n, True)))
        _disk(tmp)
        echo_rate = statistics.median(r for r, _ in echo_runs)
        runner_rate = statistics.median(r for r, _ in runner_runs)
        core_rate = statistics.median(r for r, _ in core_runs)
        ours_rate = statistics.median(r for r, _ in runs)
        cpu_ms = statistics.median(c for _, c in runs) / n * 1e3
        ratio = ours_rate / echo_rate
        print(f"(1) official SDK, {n} sequential awaited enqueues, {ROUNDS} interleaved runs "
              "(medians)")
        _line("    echo daemon (append+fsync+ack), awaited enqueues/s", f"{echo_rate:.0f}",
              "", None)  # fmt: skip
        _line("    the echo daemon that also runs each task (RUNNER), no-op handler",
              f"{runner_rate:.0f} ({runner_rate / echo_rate:.2f}x echo)", "", None)  # fmt: skip
        _line("    ours, no-op handler registered, awaited enqueues/s",
              f"{ours_rate:.0f} ({ratio:.2f}x echo)", ">= 0.8x", ratio >= 0.8)  # fmt: skip
        _line("      ours against the echo that runs each task",
              f"{ours_rate / runner_rate:.2f}x", "", None)  # fmt: skip
        _line("    the pure core with the least glue (bench_core_floor's CORE)",
              f"{core_rate:.0f} ({core_rate / echo_rate:.2f}x echo; ours "
              f"{ours_rate / core_rate:.2f}x it)", "", None)  # fmt: skip
        _line("(3) our daemon's CPU per task (enqueue, claim, run, result)", f"{cpu_ms:.2f} ms",
              "<= 0.5 ms", cpu_ms <= 0.5)  # fmt: skip
        m = min(n, 2000)
        echo_acks: list[float] = []
        core_acks: list[float] = []
        ours_acks: list[float] = []
        p50s: list[float] = []
        for round_ in range(ROUNDS):  # interleaved: one run of a rate is one sample on a VM
            echo_cmd = [sys.executable, "-c", ECHO, str(tmp / f"raw-echo-{round_}")]
            core_cmd = [sys.executable, "-c", core_code, str(tmp / f"raw-core-{round_}")]
            ours_cmd = [sys.executable, "-c", OURS, str(tmp / f"raw-ours-{round_}")]
            echo_acks.append(asyncio.run(stdio_blocking(echo_cmd, m, handler=False))[0])
            core_acks.append(asyncio.run(stdio_blocking(core_cmd, m, handler=True))[0])
            ours_ack, p50 = asyncio.run(stdio_blocking(ours_cmd, m, handler=True))
            ours_acks.append(ours_ack)
            if p50 is not None:
                p50s.append(p50)
        echo_ack, ours_ack = statistics.median(echo_acks), statistics.median(ours_acks)
        _line(f"(2) blocking stdio client, {m} tasks, {ROUNDS} interleaved runs (medians): "
              "echo per ack", f"{echo_ack * 1e3:.3f} ms {_ms_span(echo_acks)}", "",
              None)  # fmt: skip
        _line("    ours per ack, handler executing",
              f"{ours_ack * 1e3:.3f} ms ({ours_ack / echo_ack:.2f}x echo) "
              f"{_ms_span(ours_acks)}", "<= 1.5x", ours_ack / echo_ack <= 1.5)  # fmt: skip
        core_ack = statistics.median(core_acks)
        _line("    the pure core with the least glue (CORE), handler executing",
              f"{core_ack * 1e3:.3f} ms ({core_ack / echo_ack:.2f}x echo) "
              f"{_ms_span(core_acks)}", "", None)  # fmt: skip
        if p50s:
            p50 = statistics.median(p50s)
            _line("    enqueue -> execute p50", f"{p50 * 1e3:.2f} ms", "<= 2 ms", p50 <= 0.002)
        syncs = count_syncs(tmp, min(n, 1000))
        if syncs is None:
            print("(4) durable syncs per task: strace not installed (apt-get install strace)")
        else:
            m4 = min(n, 1000)  # the one sync at shutdown (the last outcome) is allowed for
            _line("(4) durable syncs per task (strace -f -c)", f"{syncs:.3f}", "<= 1.0",
                  syncs <= 1.0 + 1.5 / m4)  # fmt: skip
        for concurrent in (False, True):
            how = "concurrent" if concurrent else "sequential awaited"
            peers: list[float] = []
            ourses: list[float] = []
            floors: list[float] = []
            cpus: dict[str, list[float]] = {"huey": [], "ours": [], "its floor": []}
            for round_ in range(ROUNDS):  # interleaved, medians (huey's rate swings 2x)
                (tmp / f"huey-{concurrent}-{round_}").mkdir()
                peer = huey_run(tmp / f"huey-{concurrent}-{round_}", n, concurrent, cpus["huey"])
                if peer is not None:
                    peers.append(peer)
                storage = tmp / f"emb-{concurrent}-{round_}"
                ourses.append(asyncio.run(embedded_run(storage, n, concurrent, cpus["ours"])))
                if not concurrent:  # its floor: the pure core in a plain loop
                    from benchmarks.bench_core_floor import core_embedded

                    floors.append(core_embedded(tmp / f"core-{round_}", n, cpus["its floor"]))
            ours = statistics.median(ourses)
            goal = 5.0 if concurrent else 2.0
            if not peers:
                _line(f"(5) embedded, {how}: tasks/s (huey not installed: "
                      "pip install -e '.[bench]')", f"{ours:.0f}", f">= {goal:g}x huey",
                      None)  # fmt: skip
                continue
            peer = statistics.median(peers)
            _line(f"(5) embedded vs SqliteHuey(fsync=True), {how}, {ROUNDS} interleaved runs",
                  f"{ours:.0f} vs {peer:.0f} ({ours / peer:.2f}x) {_span(ourses)} vs "
                  f"{_span(peers)}", f">= {goal:g}x", ours / peer >= goal)  # fmt: skip
            if floors:
                floor = statistics.median(floors)
                _line("    its floor: the pure core in a plain loop (bench_core_floor)",
                      f"{floor:.0f} ({floor / peer:.2f}x huey; ours {ours / floor:.2f}x it) "
                      f"{_span(floors)}", "", None)  # fmt: skip
            print("    CPU a task (every thread of the process, the timed span; medians): "
                  + ", ".join(f"{name} {statistics.median(values) * 1e6:.0f} us"
                              for name, values in cpus.items() if values))  # fmt: skip
        if args.all:
            _others(tmp, args.quick)


def _in_compiled_copy(parent: str) -> None:
    """``--compiled``: the same run (the other options as given) in a copy of this tree
    built as ``pip install .`` builds it: the SDK's daemon, the embedded queue and the
    read paths all import its compiled modules."""
    from benchmarks import trees

    trees.rerun_compiled(parent, "benchmarks.bench_hotpath")


def _others(tmp: Path, quick: bool) -> None:
    """Issue 8's remaining figures, from the benchmarks that own them, in this run."""
    from benchmarks import bench_log, bench_replay

    print("(6) group commit, 32 concurrent appenders against one writer fsyncing each "
          "append (goal >= 10x; bench_log, median of 5 interleaved rounds)")  # fmt: skip
    work = tmp / "group-commit"
    work.mkdir()
    raw, rate, _ = bench_log._report_appends(work, bench_log._parse(["--rounds", "5"]))
    _line("(6) group commit against the raw writer", f"{rate / raw:.2f}x", ">= 10x",
          rate >= 10 * raw)  # fmt: skip
    print("(7) the read paths (bench_replay): replay >= 2x a json.loads loop, a task's "
          "history < 50 ms, --verify <= 2x replay, stats' progress bar")  # fmt: skip
    read = bench_replay.main(["--quick"] if quick else [])
    first, current = read["first"], read["current"]

    def verdict(ok: bool) -> bool | None:  # (7)'s goals are for its 200,000-task log
        return None if quick else ok

    _line("(7) replay against json.loads, first / current",
          f"{first:.2f}x / {current:.2f}x", ">= 2x", verdict(min(first, current) >= 2))  # fmt: skip
    _line("(7) a task's history through the index", f"{read['history_ms']:.1f} ms", "< 50 ms",
          verdict(read["history_ms"] < 50))  # fmt: skip
    _line("(7) replay --verify against plain replay", f"{read['verify']:.2f}x", "<= 2x",
          verdict(read["verify"] <= 2))  # fmt: skip
    stats_s, bar = read["stats_s"], bool(read["stats_bar"])
    shown = f"{'shown' if bar else 'not shown'} ({stats_s:.2f} s)"
    _line("(7) stats' progress bar, when it runs past a second", shown, "shown past 1 s",
          verdict(bar or stats_s <= 1))  # fmt: skip


if __name__ == "__main__":
    main()
