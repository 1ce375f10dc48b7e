"""PostgreSQL append-path benchmarks: the driver choice and PostgresLog's overhead, as ratios.

    python -m benchmarks.bench_pg [--url URL] [--appends N] [--rounds R] [--quick]

(1) the append path raw, per driver: one transaction per record (``BEGIN``; the
    queue's advisory transaction lock; ``INSERT`` of one ~300-byte line; ``COMMIT``),
    ``synchronous_commit`` on, with psycopg 3 (async, its C "binary" implementation)
    and with asyncpg: the same statements, one round trip each, in both. Then the same
    with 32 records per transaction, and, to expose the drivers' own cost, one record
    per transaction with ``synchronous_commit`` off. Then PostgresLog's own transaction
    statement for statement (lock, catch-up read, INSERT, NOTIFY; psycopg pipelined as
    PostgresLog does it), 1 and 32 records. Records/s and asyncpg/psycopg; where an
    array of lines is sent, also psycopg with it as ``%b`` (binary): PostgresLog's
    ``%s`` sends a list of bytes as a hex-encoded text array.
(2) ``PostgresLog`` itself (``eventlog/postgres/``, psycopg 3): sequential durable
    ``append`` of one record, and 32 concurrent appenders (group commit), against the
    raw psycopg loop of (1) as baseline; the 32 appenders also against the baseline
    of issue 10: 32 concurrent appenders, each on its own psycopg connection, one
    ``INSERT`` + ``COMMIT`` per append.
(3) ``FileLog`` on a temp dir (fsync on), the same two figures: PostgreSQL / file.

Every figure is a ratio against a baseline measured in the same invocation; rounds are
interleaved (every variant once per round) and the median is printed. The raw loops
write to a fresh table shaped as ``snerd.log`` (dropped after); PostgresLog writes to a
fresh queue (its rows deleted after). The server is the local one of the development
machines (``postgresql://postgres@127.0.0.1:5432/test``, trust) unless ``--url`` or
``$SNERD_BENCH_PG_URL`` names another.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson
import psycopg

if TYPE_CHECKING:
    import asyncpg

from benchmarks.bench_log import _Count, _enqueued
from snerd.eventlog.base import EventLog
from snerd.eventlog.filelog import FileLog
from snerd.eventlog.postgres.log import PostgresLog
from snerd.eventlog.postgres.schema import lock_key

REPO = Path(__file__).resolve().parents[1]
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
CONCURRENCY = 32
BATCH = 32
NOTIFY_CHANNEL = "bench_pg"
WARMUP = 8
"""Untimed transactions first on every connection (psycopg prepares a statement on its
5th execution; asyncpg at once, and it looks up the ``bytea[]`` type on first use)."""
LOG_TABLES = ("archive_log", "archives", "log", "daemons", "queues")

# ------------------------------------------------------------ (1) the raw loop


def _lines(n: int) -> list[bytes]:
    """``n`` log lines of ~300 bytes, as FileLog writes them (built before any clock)."""
    return [orjson.dumps(_enqueued(i, i + 1, 1_760_000_000_000 + i)) + b"\n" for i in range(n)]


class RawTable:
    """A fresh table shaped as ``snerd.log``, and the statements of the raw loops."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = f"bench_pg_{uuid.uuid4().hex[:12]}"
        self.queue = "bench"
        self.key = lock_key("bench", self.name)
        insert = (
            f"INSERT INTO {self.name} (queue, pos, line)"
            " SELECT {q}, {p} + t.n, t.line FROM unnest({a}::bytea[]) WITH ORDINALITY AS t(line, n)"
        )  # the statement PostgresLog runs (sql.INSERT), one line or a batch alike
        self.insert_psycopg = insert.format(q="%s", p="%s", a="%s")
        self.insert_psycopg_b = insert.format(q="%s", p="%s", a="%b")
        """``%b``: the array sent in binary; ``%s`` (as PostgresLog has it) sends a list
        of bytes as a text array, hex-encoded."""
        self.insert_asyncpg = insert.format(q="$1", p="$2::bigint", a="$3")
        read = f"SELECT pos, line FROM {self.name} WHERE queue = {{q}} AND pos > {{p}} ORDER BY pos"
        self.read_psycopg = read.format(q="%s", p="%s")  # the catch-up read (none are new)
        self.read_asyncpg = read.format(q="$1", p="$2::bigint")

    def create(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(
                f"CREATE TABLE {self.name} (queue text NOT NULL, pos bigint NOT NULL,"
                " line bytea NOT NULL, PRIMARY KEY (queue, pos))"
            )

    def clear(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"TRUNCATE {self.name}")

    def drop(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {self.name}")


Txn = Callable[[str, int, list[bytes]], Awaitable[None]]
"""One transaction appending ``lines`` to ``queue`` at positions after ``pos``."""


async def _timed(txn: Txn, table: RawTable, lines: list[bytes], batch: int) -> float:
    """Records/s of ``txn`` over ``lines`` in transactions of ``batch``, after WARMUP
    untimed ones (each driver's statements prepared, its type lookups done)."""
    chunks = [lines[i : i + batch] for i in range(0, len(lines), batch)]
    for i in range(WARMUP):
        await txn("warmup", i * batch, chunks[0])
    pos = 0
    t0 = time.perf_counter()
    for chunk in chunks:
        await txn(table.queue, pos, chunk)
        pos += len(chunk)
    return len(lines) / (time.perf_counter() - t0)


async def _psycopg(table: RawTable, sync: bool) -> psycopg.AsyncConnection[tuple[Any, ...]]:
    conn = await psycopg.AsyncConnection.connect(table.url, autocommit=True)
    if not sync:
        await conn.execute("SET synchronous_commit = off")
    return conn


async def _asyncpg(table: RawTable, sync: bool) -> asyncpg.Connection:
    import asyncpg  # the bench extra's; imported late, so its helpers import without it

    conn = await asyncpg.connect(table.url)
    if not sync:
        await conn.execute("SET synchronous_commit = off")
    return conn


async def raw_psycopg(table: RawTable, lines: list[bytes], batch: int, sync: bool,
                      array_b: bool = False) -> float:  # fmt: skip
    """Records/s of the raw loop on one psycopg 3 async connection (``array_b``: the
    lines' array passed with ``%b``)."""
    conn = await _psycopg(table, sync)
    lock, key = "SELECT pg_advisory_xact_lock(%s)", table.key
    insert = table.insert_psycopg_b if array_b else table.insert_psycopg

    async def txn(queue: str, pos: int, chunk: list[bytes]) -> None:
        async with conn.transaction():  # BEGIN ... COMMIT
            await conn.execute(lock, (key,), binary=True)
            await conn.execute(insert, (queue, pos, chunk), binary=True)

    try:
        return await _timed(txn, table, lines, batch)
    finally:
        await conn.close()


async def raw_asyncpg(table: RawTable, lines: list[bytes], batch: int, sync: bool) -> float:
    """Records/s of the same loop on one asyncpg connection."""
    conn = await _asyncpg(table, sync)
    lock, insert, key = "SELECT pg_advisory_xact_lock($1)", table.insert_asyncpg, table.key

    async def txn(queue: str, pos: int, chunk: list[bytes]) -> None:
        async with conn.transaction():  # BEGIN ... COMMIT
            await conn.execute(lock, key)
            await conn.execute(insert, queue, pos, chunk)

    try:
        return await _timed(txn, table, lines, batch)
    finally:
        await conn.close()


async def shaped_psycopg(table: RawTable, lines: list[bytes], batch: int, sync: bool,
                         array_b: bool = False) -> float:  # fmt: skip
    """Records/s of PostgresLog's transaction, statement for statement, on psycopg 3: a
    pipeline of BEGIN, the lock and the catch-up read, then one of INSERT, NOTIFY and
    COMMIT (two round trips; the rest as in :func:`raw_psycopg`)."""
    conn = await _psycopg(table, sync)
    insert = table.insert_psycopg_b if array_b else table.insert_psycopg

    async def txn(queue: str, pos: int, chunk: list[bytes]) -> None:
        async with conn.pipeline():
            await conn.execute("BEGIN")
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (table.key,))
            cur = await conn.cursor(binary=True).execute(table.read_psycopg, (queue, pos))
        if await cur.fetchall():
            raise AssertionError("the catch-up read found lines: another writer?")
        async with conn.pipeline():
            await conn.execute(insert, (queue, pos, chunk), binary=True)
            await conn.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, queue))
            await conn.execute("COMMIT")

    try:
        return await _timed(txn, table, lines, batch)
    finally:
        await conn.close()


async def shaped_asyncpg(table: RawTable, lines: list[bytes], batch: int, sync: bool) -> float:
    """The same transaction on asyncpg, which has no pipeline for a mix of statements:
    one round trip per statement (BEGIN, lock, read, INSERT, NOTIFY, COMMIT)."""
    conn = await _asyncpg(table, sync)

    async def txn(queue: str, pos: int, chunk: list[bytes]) -> None:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", table.key)
            if await conn.fetch(table.read_asyncpg, queue, pos):
                raise AssertionError("the catch-up read found lines: another writer?")
            await conn.execute(table.insert_asyncpg, queue, pos, chunk)
            await conn.execute("SELECT pg_notify($1, $2)", NOTIFY_CHANNEL, queue)

    try:
        return await _timed(txn, table, lines, batch)
    finally:
        await conn.close()


async def raw_concurrent(table: RawTable, lines: list[bytes]) -> float:
    """Issue 10's baseline: CONCURRENCY appenders, each on its own psycopg connection,
    one ``INSERT`` + ``COMMIT`` per line (no lock: each appender numbers its own lines)."""
    conns = [
        await psycopg.AsyncConnection.connect(table.url, autocommit=True)
        for _ in range(CONCURRENCY)
    ]
    per = len(lines) // CONCURRENCY
    insert = table.insert_psycopg

    async def appender(w: int) -> None:
        conn = conns[w]
        for i in range(per):
            pos = w * per + i
            async with conn.transaction():
                await conn.execute(insert, (table.queue, pos, [lines[pos]]), binary=True)

    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(appender(w) for w in range(CONCURRENCY)))
        return per * CONCURRENCY / (time.perf_counter() - t0)
    finally:
        for conn in conns:
            await conn.close()


# ----------------------------------------------------- (2), (3) the logs themselves


async def log_sequential(log: EventLog, n: int) -> tuple[float, int]:
    """(appends/s, commits) of one appender awaiting each durable append."""
    await log.open(_Count())
    records = [_enqueued(i, 0, 0) for i in range(n)]
    try:
        t0 = time.perf_counter()
        for record in records:
            await log.append([record])
        return n / (time.perf_counter() - t0), getattr(log, "commits", 0)
    finally:
        await log.close()


async def log_concurrent(log: EventLog, n: int) -> tuple[float, int]:
    """(appends/s, commits) of CONCURRENCY appenders awaiting each durable append."""
    await log.open(_Count())
    per = n // CONCURRENCY
    batches = [[_enqueued(w * per + i, 0, 0) for i in range(per)] for w in range(CONCURRENCY)]

    async def appender(w: int) -> None:
        for record in batches[w]:
            await log.append([record])

    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(appender(w) for w in range(CONCURRENCY)))
        return per * CONCURRENCY / (time.perf_counter() - t0), getattr(log, "commits", 0)
    finally:
        await log.close()


def _queue_url(url: str, queue: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}queue={queue}"


def drop_queue(url: str, queue: str) -> None:
    """Delete every row of ``queue`` in our schema (the schema itself stays)."""
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute("SELECT to_regclass('snerd.queues')").fetchone()
        if found is None or found[0] is None:
            return
        for table in LOG_TABLES:
            conn.execute(f"DELETE FROM snerd.{table} WHERE queue = %s", (queue,))


# -------------------------------------------------------------------- report

Figures = dict[str, list[float]]
Loop = Callable[[RawTable, list[bytes], int, bool], Awaitable[float]]


async def _round(args: argparse.Namespace, table: RawTable, work: Path, figures: Figures,
                 r: int) -> None:  # fmt: skip
    """Every variant once, interleaved so that all see the same server and disk weather."""
    n = args.appends
    lines = _lines(n)

    async def raw(name: str, run: Callable[[], Awaitable[float]]) -> None:
        table.clear()
        figures.setdefault(name, []).append(await run())

    flip: Callable[[list[Any]], list[Any]] = (lambda xs: xs) if r % 2 == 0 else _reversed
    for batch, sync in flip([(1, True), (BATCH, True), (1, False)]):
        for driver, loop in flip(_drivers(raw_psycopg, raw_asyncpg, batch)):
            await raw(f"{driver}/{batch}/{'on' if sync else 'off'}",
                      lambda lp=loop, b=batch, s=sync: lp(table, lines, b, s))  # fmt: skip
    for batch in flip([1, BATCH]):
        for driver, loop in flip(_drivers(shaped_psycopg, shaped_asyncpg, batch)):
            run = lambda lp=loop, b=batch: lp(table, lines, b, True)  # noqa: E731
            await raw(f"{driver}/{batch}/shaped", run)
    await raw("psycopg/32 connections", lambda: raw_concurrent(table, lines))

    for mode, bench in (("sequential", log_sequential), ("concurrent", log_concurrent)):
        queue = f"bench-{uuid.uuid4().hex[:12]}"
        try:
            rate, commits = await bench(PostgresLog(_queue_url(args.url, queue), follow=False), n)
        finally:
            drop_queue(args.url, queue)
        figures.setdefault(f"PostgresLog/{mode}", []).append(rate)
        figures.setdefault(f"PostgresLog/{mode}/per-commit", []).append(n / max(commits, 1))
        storage = work / f"{mode}-{r}"
        storage.mkdir()
        rate, commits = await bench(FileLog(storage, fsync=True, follow=False), n)
        figures.setdefault(f"FileLog/{mode}", []).append(rate)
        figures.setdefault(f"FileLog/{mode}/per-commit", []).append(n / max(commits, 1))


def _drivers(psycopg_loop: Loop, asyncpg_loop: Loop, batch: int) -> list[tuple[str, Loop]]:
    """The variants of a loop: both drivers, and psycopg with ``%b`` when an array is sent."""
    loops = [("psycopg", psycopg_loop), ("asyncpg", asyncpg_loop)]
    if batch > 1:
        loops.append(("psycopg%b", partial(psycopg_loop, array_b=True)))
    return loops


def _reversed(xs: list[Any]) -> list[Any]:
    return xs[::-1]


def _report(figures: Figures, rounds: int) -> None:
    """Rates are medians over the rounds; ratios are medians of the per-round ratios
    (each round runs both sides back to back), with their spread in brackets."""
    med = {k: statistics.median(v) for k, v in figures.items()}

    def line(label: str, key: str, note: str = "") -> None:
        span = f"{min(figures[key]):,.0f}..{max(figures[key]):,.0f}"
        print(f"  {label:<52}: {med[key]:9,.0f} records/s  [{span}]  {note}")

    def ratio(num: str, den: str, what: str) -> str:
        rs = [a / b for a, b in zip(figures[num], figures[den], strict=True)]
        r = statistics.median(rs)
        spread = f" [{min(rs):.2f}..{max(rs):.2f}]" if len(rs) > 1 else ""
        return f"{r:.2f}x {what}{spread}"

    def versus(batch: int, kind: str) -> None:
        records = f"{batch} record{'s' if batch > 1 else ''}/txn"
        what = {"on": f"{records}, synchronous_commit on", "off": f"{records}, sync commit off",
                "shaped": f"{records}, PostgresLog's statements"}[kind]  # fmt: skip
        ps, ap = (f"{driver}/{batch}/{kind}" for driver in ("psycopg", "asyncpg"))
        line(f"psycopg 3, {what}", ps, "(1.00x)")
        rs = [a / b for a, b in zip(figures[ap], figures[ps], strict=True)]
        line(f"asyncpg,   {what}", ap,
             f"({ratio(ap, ps, 'psycopg')}: asyncpg {_pct(statistics.median(rs))})")  # fmt: skip
        if batch > 1:
            pb = f"psycopg%b/{batch}/{kind}"
            line("  psycopg 3, the lines' array as %b (binary)", pb,
                 f"({ratio(pb, ps, 'psycopg')}; {ratio(ap, pb, 'asyncpg / this')})")  # fmt: skip

    print(f"(1) raw append loop (BEGIN; advisory xact lock; INSERT; COMMIT), median of {rounds}")
    for batch, kind in ((1, "on"), (BATCH, "on"), (1, "off")):
        versus(batch, kind)
    print("    PostgresLog's transaction statement for statement (BEGIN; lock; catch-up read;")
    print("    INSERT; NOTIFY; COMMIT), synchronous_commit on: psycopg pipelines it in 2 round")
    print("    trips as PostgresLog does; asyncpg has no pipeline for it: 6 round trips")
    for batch in (1, BATCH):
        versus(batch, "shaped")
    conc = ratio("psycopg/32 connections", "psycopg/1/on", "the one-connection loop")
    line("psycopg 3, 32 connections, INSERT+COMMIT each", "psycopg/32 connections", f"({conc})")
    print("(2) PostgresLog (psycopg 3), durable appends of one record")
    for mode, label, shaped in (("sequential", "1 appender", 1),
                                ("concurrent", f"{CONCURRENCY} appenders", BATCH)):  # fmt: skip
        key = f"PostgresLog/{mode}"
        notes = [
            ratio(key, "psycopg/1/on", "the raw psycopg loop"),
            ratio(key, f"psycopg/{shaped}/shaped", f"its own statements bare ({shaped}/txn)"),
        ]
        if mode == "concurrent":
            notes.append(ratio(key, "psycopg/32 connections", "32 connections"))
        notes.append(f"{med[key + '/per-commit']:.1f} appends per commit")
        line(f"PostgresLog, {label}", key, "(" + "; ".join(notes) + ")")
    print("(3) FileLog on a temp dir, fsync on, for comparison")
    for mode, label in (("sequential", "1 appender"), ("concurrent", f"{CONCURRENCY} appenders")):
        key = f"FileLog/{mode}"
        pg = ratio(f"PostgresLog/{mode}", key, "= PostgresLog / FileLog")
        line(f"FileLog, {label}", key,
             f"({pg}; {med[key + '/per-commit']:.1f} appends per fsync)")  # fmt: skip


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:.0f}% faster" if ratio >= 1 else f"{(1 - ratio) * 100:.0f}% slower"


async def _main(args: argparse.Namespace) -> None:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    with psycopg.connect(args.url, autocommit=True) as conn:
        row = conn.execute("SELECT current_setting('server_version')").fetchone()
        server = row[0] if row else "?"
    print(
        f"PostgreSQL append benchmarks ({args.appends:,} records of ~{len(_lines(1)[0])} bytes "
        f"per figure; PostgreSQL {server}; psycopg {psycopg.__version__} "
        f"({psycopg.pq.__impl__}), asyncpg {_asyncpg_version()}; python "
        f"{sys.version.split()[0]}; {os.cpu_count()} CPUs, load {load})"
    )
    table = RawTable(args.url)
    base = Path(args.dir) if args.dir else REPO.parent / "tmp"
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-pg-", dir=base))
    table.create()
    figures: Figures = {}
    try:
        for r in range(args.rounds):
            await _round(args, table, work, figures, r)
    finally:
        table.drop()
        shutil.rmtree(work, ignore_errors=True)
    _report(figures, args.rounds)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--url", default=os.environ.get("SNERD_BENCH_PG_URL", DEFAULT_URL),
                   help="the server (default: $SNERD_BENCH_PG_URL or %(default)s)")  # fmt: skip
    p.add_argument("--appends", type=int, default=2000, help="records per figure")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="300 records, one round")
    p.add_argument("--dir", help="parent of FileLog's temp dir (default: <repo>/../tmp)")
    args = p.parse_args(argv)
    if args.quick:
        args.appends, args.rounds = 300, 1
    if args.appends < CONCURRENCY:
        p.error(f"--appends must be at least {CONCURRENCY} (one per concurrent appender)")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(_main(_parse(argv)))


if __name__ == "__main__":
    main()


def _asyncpg_version() -> str:
    import asyncpg

    return str(asyncpg.__version__)
