"""Issue 10's "Done when" figures on PostgreSQL, each a ratio against a baseline run in
the same invocation:

    python -m benchmarks.bench_pg_queue [--url URL] [--appends N] [--tasks N]
                                        [--peer-tasks N] [--rounds R] [--quick]
                                        [--only A|B|C|AB|...]

(A) durable appends/s of 32 concurrent appenders on ``PostgresLog`` (group commit)
    against 32 concurrent appenders each on its own psycopg connection doing one
    ``INSERT`` + ``COMMIT`` per append (goal: at least 10x);
(B) tasks/s end to end through 4 ``snerdmq URL`` daemons on one queue, 8 workers each,
    against one such daemon, handlers of 20 ms (``asyncio.sleep(0.02)`` in the stdio
    client answering ``execute``); tasks enqueued round robin over the daemons, all
    pipelined at once (goal: 4 daemons at least 3x one);
(C) the same no-op tasks through procrastinate (its worker started first, concurrency
    8, in this process) against our embedded ``snerd.Queue(URL, max_workers=8)``, both
    enqueued concurrently (``asyncio.gather``) after the worker runs (goal: ours at
    least 3x). procrastinate gets a database of its own, created and dropped here.

(D) (only with ``--only D``; no goal in the issue) a compaction's stall: the longest
    durable append of a second writer while a ``PostgresLog`` compacts a queue of
    ``--compact-rows`` rows, against the same writer's longest append just before; and
    that stall as a share of the compaction's own time (what a queue lock held for the
    whole compaction would cost every writer). The BRIEF: compaction "never stalls
    dispatch for long".

Both sides of every ratio run back to back in each round, in alternating order; rates
are medians, ratios medians of the per-round ratios. Every queue is fresh (rows deleted
after). The server and both sides share the machine (say so when quoting figures).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson
import psycopg
from psycopg.conninfo import make_conninfo

from benchmarks.bench_daemon import Stdio
from benchmarks.bench_log import _Count, _enqueued
from benchmarks.bench_pg import (
    CONCURRENCY,
    DEFAULT_URL,
    RawTable,
    _lines,
    _queue_url,
    drop_queue,
    log_concurrent,
    raw_concurrent,
)
from snerd.eventlog.postgres.log import PostgresLog

REPO = Path(__file__).resolve().parents[1]
WORKERS = 8
HANDLER_SECONDS = 0.02
PEER_DB = "bench_procrastinate"

Figures = dict[str, list[float]]

# ------------------------------------------------------------------ (A) appends


async def raw_appends(url: str, n: int) -> float:
    """The baseline: 32 connections, one ``INSERT`` + ``COMMIT`` per append (the
    ``unnest`` statement PostgresLog runs, one line; as in ``bench_pg``)."""
    table = RawTable(url)
    table.create()
    try:
        return await raw_concurrent(table, _lines(n))
    finally:
        table.drop()


async def raw_values(url: str, n: int) -> float:
    """The baseline read literally: 32 connections, each append a plain
    ``INSERT ... VALUES`` (the line as a binary parameter) and ``COMMIT``."""
    table = RawTable(url)
    table.create()
    lines = _lines(n)
    per = n // CONCURRENCY
    insert = f"INSERT INTO {table.name} (queue, pos, line) VALUES (%s, %s, %b)"
    conns = [await psycopg.AsyncConnection.connect(url, autocommit=True)
             for _ in range(CONCURRENCY)]  # fmt: skip

    async def appender(w: int) -> None:
        for i in range(per):
            pos = w * per + i
            async with conns[w].transaction():
                await conns[w].execute(insert, (table.queue, pos, lines[pos]))

    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(appender(w) for w in range(CONCURRENCY)))
        return per * CONCURRENCY / (time.perf_counter() - t0)
    finally:
        for conn in conns:
            await conn.close()
        table.drop()


async def log_appends(url: str, n: int) -> tuple[float, float]:
    """(appends/s, appends per commit) of 32 appenders on PostgresLog."""
    queue = f"bench-{uuid.uuid4().hex[:12]}"
    try:
        rate, commits = await log_concurrent(PostgresLog(_queue_url(url, queue), follow=False), n)
    finally:
        drop_queue(url, queue)
    return rate, n / max(commits, 1)


# ------------------------------------------------------------------ (B) daemons


class Daemon(Stdio):
    """One ``snerdmq URL`` process driven over stdio (``bench_daemon.Stdio``); its client
    answers every ``execute`` after HANDLER_SECONDS (many at once: the daemon's 8
    workers bound it)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        super().__init__(proc)
        self.executed = 0
        self.pending: set[asyncio.Task[None]] = set()
        self.idle: asyncio.Future[bool] | None = None

    @classmethod
    async def start(cls, url: str, workdir: Path) -> Daemon:
        workdir.mkdir(parents=True, exist_ok=True)
        return cls(await cls.launch(url, WORKERS, cwd=workdir))

    async def ready(self) -> None:
        """Registered and answering (its log replayed)."""
        self.send({"action": "register", "task_type": "bench"})
        self.send({"action": "stats", "request_id": "ready"})
        while (await self.recv()).get("request_id") != "ready":
            pass

    async def _answer(self, task_id: str) -> None:
        await asyncio.sleep(HANDLER_SECONDS)
        self.send({"action": "result", "task_id": task_id, "status": "success"})

    async def serve(self, done: Callable[[], None]) -> None:
        """Answer executes until cancelled; call ``done`` after each result sent."""
        while True:
            msg = await self.recv()
            if msg.get("action") == "execute":
                task = asyncio.get_running_loop().create_task(self._answer(msg["task_id"]))
                self.pending.add(task)
                task.add_done_callback(self.pending.discard)
                task.add_done_callback(lambda _t: done())
            elif msg.get("request_id") == "idle" and self.idle is not None:
                self.idle.set_result(msg["stats"]["active"] == 0)

    async def wait_idle(self) -> None:
        """Until the daemon has applied every result it was sent."""
        while True:
            idle = self.idle = asyncio.get_running_loop().create_future()
            self.send({"action": "stats", "request_id": "idle"})
            if await idle:
                return
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        try:
            await super().close()
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


async def daemons(url: str, count: int, n: int, work: Path,
                  steady: list[float] | None = None) -> float:  # fmt: skip
    """Tasks/s through ``count`` daemons on one fresh queue, ``n`` tasks of 20 ms.
    ``steady`` (if given) gets the rate between the 10% and the 90% results: the run
    without its start (every enqueue at once) and its tail."""
    queue = f"bench-{uuid.uuid4().hex[:12]}"
    qurl = _queue_url(url, queue)
    procs: list[Daemon] = []
    serving: list[asyncio.Task[None]] = []
    try:
        for i in range(count):
            procs.append(await Daemon.start(qurl, work / f"{queue}-{i}"))
        await asyncio.gather(*(d.ready() for d in procs))
        finished = asyncio.get_running_loop().create_future()
        count_done = [0]

        stamps: list[float] = []

        def one_done() -> None:
            count_done[0] += 1
            stamps.append(time.perf_counter())
            if count_done[0] >= n and not finished.done():
                finished.set_result(None)

        t0 = time.perf_counter()
        serving = [asyncio.get_running_loop().create_task(d.serve(one_done)) for d in procs]
        for i in range(n):
            data = orjson.dumps({"n": i}).decode()
            procs[i % count].send({"action": "enqueue", "task_id": f"t{i}",
                                   "task_type": "bench", "task_data": data})  # fmt: skip
        await asyncio.gather(*(d.stdin.drain() for d in procs))
        await asyncio.wait_for(finished, 600)
        await asyncio.gather(*(d.wait_idle() for d in procs))
        elapsed = time.perf_counter() - t0
        if count_done[0] != n:
            raise AssertionError(f"{count_done[0]} executions of {n} tasks")
        first, last = n // 10, n - n // 10 - 1
        if steady is not None and last > first:
            steady.append((last - first) / (stamps[last] - stamps[first]))
        return n / elapsed
    finally:
        for task in serving:
            task.cancel()
        await asyncio.gather(*(d.close() for d in procs), return_exceptions=True)
        drop_queue(url, queue)


# ------------------------------------------------------------ (C) procrastinate


def _db_url(url: str, dbname: str) -> str:
    return make_conninfo(url, dbname=dbname)


def _admin(url: str, statement: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)


async def peer(url: str, n: int) -> float:
    """Tasks/s of procrastinate: worker first (concurrency 8), then ``n`` defers at once."""
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))
    done = [0]
    all_done = asyncio.get_running_loop().create_future()

    @app.task(name="bench")
    async def bench(n: int) -> None:
        done[0] += 1
        if done[0] >= total and not all_done.done():
            all_done.set_result(None)

    total = n
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        worker = asyncio.get_running_loop().create_task(app.run_worker_async(
            concurrency=WORKERS, install_signal_handlers=False, wait=True,
            fetch_job_polling_interval=1.0, update_heartbeat_interval=10.0,
        ))  # fmt: skip
        await asyncio.sleep(0.5)  # the worker is up and listening before the first defer
        if worker.done():
            worker.result()
        t0 = time.perf_counter()
        await asyncio.gather(*(bench.defer_async(n=i) for i in range(n)))
        await asyncio.wait_for(all_done, 600)
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            while True:  # the last jobs' "succeeded" status is written after they return
                cur = await conn.execute(
                    "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
                )
                row = await cur.fetchone()
                if row is not None and row[0] >= n:
                    break
                await asyncio.sleep(0.005)
        elapsed = time.perf_counter() - t0
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(worker, 30)
    return n / elapsed


async def peer_fresh(url: str, n: int) -> float:
    _admin(url, f"DROP DATABASE IF EXISTS {PEER_DB}")
    _admin(url, f"CREATE DATABASE {PEER_DB}")
    try:
        return await peer(_db_url(url, PEER_DB), n)
    finally:
        _admin(url, f"DROP DATABASE IF EXISTS {PEER_DB} WITH (FORCE)")


async def ours(url: str, n: int) -> float:
    """Tasks/s of the embedded ``snerd.Queue`` on a fresh queue: ``n`` enqueues at once."""
    from snerd.embedded import Queue

    queue = f"bench-{uuid.uuid4().hex[:12]}"
    try:
        q = Queue(_queue_url(url, queue), max_workers=WORKERS)

        @q.handler("bench")
        async def work(job: Any) -> None:
            return None

        async with q:
            t0 = time.perf_counter()
            await asyncio.gather(*(q.enqueue(f"t{i}", "bench", {"n": i}) for i in range(n)))
            await q.join(timeout=600)
            return n / (time.perf_counter() - t0)
    finally:
        drop_queue(url, queue)


# ------------------------------------------------------- (D) compaction's stall


async def compaction_stall(url: str, rows: int) -> tuple[float, float, float]:
    """(seconds the compaction took, the other writer's longest durable append while
    it ran, that writer's longest append in as long a time just before)."""
    queue = f"bench-{uuid.uuid4().hex[:12]}"
    qurl = _queue_url(url, queue)
    compactor, writer = PostgresLog(qurl, follow=False), PostgresLog(qurl, follow=False)
    await compactor.open(_Count())
    await writer.open(_Count())
    try:
        records = [_enqueued(i, 0, 0) for i in range(rows)]
        for i in range(0, rows, 500):
            await compactor.append(records[i : i + 500])
        await writer.catch_up()
        took: list[float] = []
        running = True

        async def append_on() -> None:
            k = 0
            while running:
                t0 = time.perf_counter()
                await writer.append([_enqueued(rows + k, 0, 0)])
                took.append(time.perf_counter() - t0)
                k += 1

        appending = asyncio.get_running_loop().create_task(append_on())
        t0 = time.perf_counter()
        await asyncio.sleep(0.05)
        while time.perf_counter() - t0 < 0.5 and len(took) < 20:
            await asyncio.sleep(0.01)
        quiet_for, seen = time.perf_counter() - t0, len(took)
        t1 = time.perf_counter()
        await compactor.compact(lambda: records[-300:])
        compaction = time.perf_counter() - t1
        if (left := quiet_for - compaction) > 0:
            await asyncio.sleep(left)  # as long a window after it began as before
        running = False
        await appending
        return compaction, max(took[seen:]), max(took[:seen])
    finally:
        await compactor.close()
        await writer.close()
        drop_queue(url, queue)


# ------------------------------------------------------------------- report


async def _round(args: argparse.Namespace, work: Path, figures: Figures, r: int) -> None:
    def put(key: str, value: float) -> None:
        figures.setdefault(key, []).append(value)

    def order(xs: list[Any]) -> list[Any]:
        return xs if r % 2 == 0 else xs[::-1]

    if "A" in args.only:
        for key in order(["A/raw", "A/raw-values", "A/log"]):
            if key.startswith("A/raw"):
                run = raw_appends if key == "A/raw" else raw_values
                put(key, await run(args.url, args.appends))
                continue
            rate, per_commit = await log_appends(args.url, args.appends)
            put(key, rate)
            put(f"{key}/per-commit", per_commit)
    if "B" in args.only:
        for count in order([1, 4]):
            steady: list[float] = []
            put(f"B/{count}", await daemons(args.url, count, args.tasks, work, steady))
            put(f"B/{count}/steady", steady[0])
    if "C" in args.only:
        runs: list[tuple[str, Callable[[], Awaitable[float]]]] = [
            ("C/peer", lambda: peer_fresh(args.url, args.peer_tasks)),
            ("C/ours", lambda: ours(args.url, args.peer_tasks)),
        ]
        for key, run in order(runs):
            put(key, await run())
    if "D" in args.only:
        compaction, during, quiet = await compaction_stall(args.url, args.compact_rows)
        put("D/compaction", compaction)
        put("D/during", during)
        put("D/quiet", quiet)


def _report(figures: Figures, args: argparse.Namespace) -> None:
    med = {k: statistics.median(v) for k, v in figures.items()}

    def ratio(num: str, den: str, goal: float | None = None) -> str:
        rs = [a / b for a, b in zip(figures[num], figures[den], strict=True)]
        r = statistics.median(rs)
        spread = f" [{min(rs):.2f}..{max(rs):.2f}]" if len(rs) > 1 else ""
        if goal is None:
            return f"{r:.2f}x{spread}"
        return f"{r:.2f}x{spread} (goal {goal:g}x: {'met' if r >= goal else 'NOT met'})"

    def line(label: str, key: str, unit: str, note: str = "") -> None:
        print(f"  {label:<50}: {med[key]:9,.0f} {unit}  {note}")

    if "A" in args.only:
        _report_a(line, ratio, med, args)
    if "B" in args.only:
        print(f"(B) {args.tasks:,} tasks of {HANDLER_SECONDS * 1000:.0f} ms end to end, snerdmq "
              f"daemons on one URL, {WORKERS} workers each")  # fmt: skip
        line("1 daemon", "B/1", "tasks/s", "(1.00x)")
        line("4 daemons", "B/4", "tasks/s", ratio("B/4", "B/1", 3))
        if "B/4/steady" in figures:  # the same runs, between their 10% and 90% results
            line("1 daemon, steady (results 10%..90%)", "B/1/steady", "tasks/s", "(1.00x)")
            line("4 daemons, steady (results 10%..90%)", "B/4/steady", "tasks/s",
                 ratio("B/4/steady", "B/1/steady"))  # fmt: skip
    if "C" in args.only:
        print(f"(C) {args.peer_tasks:,} no-op tasks, enqueued concurrently, {WORKERS} workers")
        line("procrastinate (worker first, concurrency 8)", "C/peer", "tasks/s", "(1.00x)")
        line("snerd.Queue(URL, max_workers=8)", "C/ours", "tasks/s", ratio("C/ours", "C/peer", 3))
    if "D" in args.only:
        print(f"(D) a compaction of {args.compact_rows:,} rows while another writer appends")
        ms = {k: 1000 * v for k, v in med.items() if k.startswith("D/")}
        print(f"  {'the compaction':<50}: {ms['D/compaction']:9,.1f} ms")
        print(f"  {'the longest append of the writer, before it':<50}: {ms['D/quiet']:9,.1f} ms")
        print(f"  {'the longest append of the writer, while it ran':<50}: {ms['D/during']:9,.1f} ms"
              f"  ({ratio('D/during', 'D/quiet')} before; "
              f"{ratio('D/during', 'D/compaction')} of the compaction)")  # fmt: skip


def _report_a(line: Callable[..., None], ratio: Callable[..., str], med: dict[str, float],
              args: argparse.Namespace) -> None:  # fmt: skip
    print(f"(A) durable appends, {CONCURRENCY} concurrent appenders, {args.appends:,} appends")
    line(f"{CONCURRENCY} psycopg connections, INSERT+COMMIT each", "A/raw", "appends/s", "(1.00x)")
    line("  the same, a plain INSERT ... VALUES", "A/raw-values", "appends/s",
         f"({ratio('A/raw-values', 'A/raw')}; PostgresLog / this: "
         f"{ratio('A/log', 'A/raw-values')})")  # fmt: skip
    per_commit = f"{med['A/log/per-commit']:.1f} appends/commit"
    line(f"PostgresLog, {CONCURRENCY} appenders (group commit)", "A/log", "appends/s",
         f"{ratio('A/log', 'A/raw', 10)}; {per_commit}")  # fmt: skip


async def _main(args: argparse.Namespace) -> None:
    import procrastinate

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    with psycopg.connect(args.url, autocommit=True) as conn:
        row = conn.execute("SELECT current_setting('server_version')").fetchone()
        server = row[0] if row else "?"
    version = getattr(procrastinate, "__version__", "?")
    print(f"PostgreSQL queue benchmarks (PostgreSQL {server} on this machine; psycopg "
          f"{psycopg.__version__} ({psycopg.pq.__impl__}); procrastinate {version}; python "
          f"{sys.version.split()[0]}; {os.cpu_count()} CPUs shared with the server, "
          f"load {load}; median of {args.rounds})")  # fmt: skip
    base = Path(args.dir) if args.dir else REPO.parent / "tmp"
    work = base / f"bench-pg-queue-{uuid.uuid4().hex[:8]}"
    work.mkdir(parents=True)
    figures: Figures = {}
    try:
        for r in range(args.rounds):
            await _round(args, work, figures, r)
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    _report(figures, args)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--url", default=os.environ.get("SNERD_BENCH_PG_URL", DEFAULT_URL),
                   help="the server (default: $SNERD_BENCH_PG_URL or %(default)s)")  # fmt: skip
    p.add_argument("--appends", type=int, default=10_000,
                   help="(A) appends per figure (default %(default)s: at 50,000/s, 2,000 "
                        "appends were 60 batches, mostly warm-up)")  # fmt: skip
    p.add_argument("--tasks", type=int, help="(B) tasks per figure (default 2,000; --quick 1,000)")
    p.add_argument("--peer-tasks", type=int, default=5000, help="(C) tasks per figure")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="one round, 1,000 tasks in (B)")
    p.add_argument("--only", default="ABC", type=str.upper,
                   help="the figures to run, e.g. A or BC (default: %(default)s)")  # fmt: skip
    p.add_argument("--compact-rows", type=int, default=30_000,
                   help="(D) rows of the log compacted (default %(default)s)")  # fmt: skip
    p.add_argument("--dir", help="parent of the daemons' working dirs (default: <repo>/../tmp)")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds = 1
    if args.tasks is None:
        args.tasks = 1000 if args.quick else 2000
    if args.appends < CONCURRENCY:
        p.error(f"--appends must be at least {CONCURRENCY} (one per concurrent appender)")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(_main(_parse(argv)))


if __name__ == "__main__":
    main()
