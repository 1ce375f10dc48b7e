"""End-to-end benchmarks of the daemon and the embedded engine, with baselines.

    python -m benchmarks.bench_daemon [--tasks N] [--latency N]

Printed in one run, all durable (fsync on ack):
(a) raw baseline: one fsync'd append per task (what a naive durable queue pays);
(b) enqueue -> execute latency over stdio, one task at a time: p50 / p99;
(c) tasks/s through the daemon with a pipelining stdio client (enqueue N, answer
    every execute at once), and the ratio to (a);
(d) tasks/s through the embedded API (``snerd.Queue``), ratio to (a);
(e) a peer queue, huey with SQLite storage and a thread consumer, when installed:
    its tasks/s and enqueue -> start latency, and our ratios to it;
(f) the official SnerdMQ Python SDK (``snerdmq-python``) driving our daemon as its
    binary, when installed: tasks/s and enqueue -> handler latency.

SnerdMQ's own Rust daemon cannot be built here (its crates are not reachable), so it
is not measured; see README "Performance" for what its design implies.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

REPO = Path(__file__).resolve().parents[1]
DAEMON = "import sys; from snerd.rpc.daemon import main; sys.exit(main())"


def bench_raw(tmp: Path, n: int) -> float:
    path = tmp / "raw.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    line = orjson.dumps({"taskId": "x" * 12, "taskType": "bench", "taskData": "{}"}) + b"\n"
    start = time.perf_counter()
    for _ in range(n):
        os.write(fd, line)
        os.fsync(fd)
    os.close(fd)
    return n / (time.perf_counter() - start)


class Stdio:
    """A minimal raw protocol driver: enough to measure, nothing hidden."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        assert proc.stdin and proc.stdout
        self.stdin = proc.stdin
        self.stdout = proc.stdout

    @classmethod
    async def spawn(cls, storage: Path, workers: int) -> Stdio:
        return cls(await cls.launch(str(storage), workers))

    @staticmethod
    async def launch(storage: str, workers: int,
                     cwd: Path | None = None) -> asyncio.subprocess.Process:  # fmt: skip
        """Our daemon on ``storage`` (a dir or a URL) with ``workers`` attempts at most."""
        env = {**os.environ, "SNERD_MAX_WORKERS": str(workers), "PYTHONPATH": str(REPO)}
        return await asyncio.create_subprocess_exec(
            sys.executable, "-c", DAEMON, storage, cwd=cwd, env=env, limit=1 << 22,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip

    def send(self, msg: dict[str, Any]) -> None:
        self.stdin.write(orjson.dumps(msg) + b"\n")

    async def recv(self) -> dict[str, Any]:
        line = await self.stdout.readline()
        if not line:
            raise RuntimeError("daemon closed stdout")
        message: dict[str, Any] = orjson.loads(line)
        return message

    async def close(self) -> None:
        self.stdin.close()
        await asyncio.wait_for(self.proc.wait(), 30)


def _enqueue(i: int) -> dict[str, Any]:
    data = orjson.dumps({"n": i}).decode()
    return {"action": "enqueue", "task_id": f"t{i}", "task_type": "bench", "task_data": data}


async def bench_latency(tmp: Path, n: int) -> list[float]:
    """Seconds from writing an enqueue to reading its execute, one task at a time."""
    d = await Stdio.spawn(tmp / "latency", workers=8)
    d.send({"action": "register", "task_type": "bench"})
    samples = []
    for i in range(n):
        start = time.perf_counter()
        d.send(_enqueue(i))
        await d.stdin.drain()
        while True:
            msg = await d.recv()
            if msg["action"] == "execute":
                samples.append(time.perf_counter() - start)
                d.send({"action": "result", "task_id": msg["task_id"], "status": "success"})
                break
    await d.close()
    return samples


async def bench_throughput(tmp: Path, n: int) -> float:
    """Tasks/s: enqueue N pipelined, answer every execute at once, until all are done."""
    d = await Stdio.spawn(tmp / "throughput", workers=64)
    d.send({"action": "register", "task_type": "bench"})
    start = time.perf_counter()
    for i in range(n):
        d.send(_enqueue(i))
    await d.stdin.drain()
    executed = 0
    while executed < n:
        msg = await d.recv()
        if msg["action"] == "execute":
            executed += 1
            d.send({"action": "result", "task_id": msg["task_id"], "status": "success"})
    d.send({"action": "stats", "request_id": "done"})
    while True:  # the last results are applied once stats shows nothing active
        msg = await d.recv()
        if msg.get("request_id") == "done":
            if msg["stats"]["active"] == 0:
                break
            d.send({"action": "stats", "request_id": "done"})
    elapsed = time.perf_counter() - start
    await d.close()
    return n / elapsed


async def bench_embedded(tmp: Path, n: int) -> float:
    from snerd.embedded import Queue

    queue = Queue(str(tmp / "embedded"), max_workers=64)

    @queue.handler("bench")
    async def work(job: Any) -> None:
        return None

    async with queue:
        start = time.perf_counter()
        await asyncio.gather(*(queue.enqueue(f"t{i}", "bench", {"n": i}) for i in range(n)))
        await queue.join(timeout=600)
        return n / (time.perf_counter() - start)


def bench_huey(tmp: Path, n: int) -> tuple[float, float] | None:
    """(tasks/s, median enqueue->start latency) of huey's SQLite queue, or None."""
    try:
        from huey import SqliteHuey
        from huey.consumer import Consumer
    except ImportError:
        return None
    import threading

    huey = SqliteHuey(filename=str(tmp / "huey.db"))
    started: dict[int, float] = {}
    done = threading.Event()

    @huey.task()
    def work(i: int, t0: float) -> None:
        started[i] = time.perf_counter() - t0
        if len(started) == n:
            done.set()

    consumer = Consumer(huey, workers=8, worker_type="thread", periodic=False)
    consumer._set_signal_handlers = lambda: None  # it runs in a thread here, not main
    thread = threading.Thread(target=consumer.run, daemon=True)
    start = time.perf_counter()
    for i in range(n):
        work(i, time.perf_counter())
    thread.start()
    done.wait(600)
    rate = n / (time.perf_counter() - start)
    started.clear()
    done.clear()
    single = min(n, 50)
    lat = []
    for i in range(single):
        t0 = time.perf_counter()
        work(10_000_000 + i, t0)
        while (10_000_000 + i) not in started:
            time.sleep(0.0005)
        lat.append(started[10_000_000 + i])
    consumer.stop(graceful=False)
    return rate, statistics.median(lat)


def _shim(tmp: Path) -> Path:
    """An executable the SDK can spawn as its binary: our daemon under this Python."""
    path = tmp / "snerdmq"
    path.write_text(f"#!/bin/sh\nexec {sys.executable} -c '{DAEMON}' \"$@\"\n")
    path.chmod(0o755)
    return path


async def bench_sdk(tmp: Path, n: int) -> tuple[float, float] | None:
    """(tasks/s, median enqueue -> handler latency) through the official SDK, or None."""
    try:
        from snerdmq import SnerdQueue
    except ImportError:
        return None
    import contextlib
    import io

    os.environ["PYTHONPATH"] = str(REPO)
    queue = SnerdQueue(binary_path=str(_shim(tmp)), storage_path=str(tmp / "sdk"))
    started: dict[int, float] = {}
    all_done = asyncio.Event()
    sent: dict[int, float] = {}

    async def work(data: Any) -> None:
        started[data["n"]] = time.perf_counter() - sent[data["n"]]
        if len(started) == n:
            all_done.set()

    queue.register_handler("bench", work)
    with contextlib.redirect_stdout(io.StringIO()):  # the SDK prints every line it reads
        await queue.start_listening()
        start = time.perf_counter()
        for i in range(n):
            sent[i] = time.perf_counter()
        await asyncio.gather(*(queue.enqueue(f"t{i}", "bench", {"n": i}) for i in range(n)))
        await asyncio.wait_for(all_done.wait(), 600)
        rate = n / (time.perf_counter() - start)
        latencies = []
        for i in range(n, n + 100):
            sent[i] = time.perf_counter()
            await queue.enqueue(f"t{i}", "bench", {"n": i})
            while i not in started:
                await asyncio.sleep(0.0002)
            latencies.append(started[i])
        await queue.shutdown()
    return rate, statistics.median(latencies)


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--latency", type=int, default=500)
    parser.add_argument("--dir", default=str(REPO.parent))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="snerd-bench-") as raw_tmp:
        tmp = Path(raw_tmp)
        raw = bench_raw(tmp, 2000)
        print(f"(a) raw fsync'd append, one per task:     {raw:10.0f} appends/s")
        lat = asyncio.run(bench_latency(tmp, args.latency))
        p50, p99 = _pct(lat, 0.5) * 1e3, _pct(lat, 0.99) * 1e3
        print(f"(b) stdio enqueue->execute latency:        p50 {p50:.2f} ms  p99 {p99:.2f} ms")
        tput = asyncio.run(bench_throughput(tmp, args.tasks))
        print(f"(c) daemon, pipelining stdio client:       {tput:10.0f} tasks/s"
              f"  ({tput / raw:.2f}x raw)")  # fmt: skip
        emb = asyncio.run(bench_embedded(tmp, args.tasks))
        print(f"(d) embedded snerd.Queue:                  {emb:10.0f} tasks/s"
              f"  ({emb / raw:.2f}x raw)")  # fmt: skip
        peer = bench_huey(tmp, min(args.tasks, 2000))
        if peer is None:
            print("(e) peer queue: huey not installed (pip install -e '.[bench]') - skipped")
        else:
            rate, median = peer
            print(f"(e) peer: huey SqliteHuey, 8 threads:      {rate:10.0f} tasks/s"
                  f"  latency p50 {median * 1e3:.1f} ms")  # fmt: skip
            print(f"    ratios: daemon {tput / rate:.2f}x, embedded {emb / rate:.2f}x tasks/s;"
                  f" latency {median * 1e3 / p50:.1f}x lower")  # fmt: skip
        sdk = asyncio.run(bench_sdk(tmp, min(args.tasks, 2000)))
        if sdk is None:
            print("(f) official SDK: snerdmq-python not installed - skipped")
        else:
            rate, median = sdk
            print(
                f"(f) official SnerdMQ SDK -> our daemon:    {rate:10.0f} tasks/s"
                f"  ({rate / raw:.2f}x raw)  enqueue->handler p50 {median * 1e3:.2f} ms"
            )


if __name__ == "__main__":
    main()
