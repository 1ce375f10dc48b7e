"""Event-log benchmarks, printed as ratios against baselines run in the same process tree.

    python -m benchmarks.bench_log [--appends N] [--records N] [--fold] [--dir DIR]

(a) raw baseline: one ``os.write`` + ``os.fsync`` per appended line;
(b) FileLog group commit: 32 coroutines appending concurrently, fsync on; ratio to (a);
    beside it, a floor: the least group commit that does a line's required work as
    FileLog does it (the seq stamped into a copy, ``orjson``, the checksum chain's seal
    by ``Chain.seal_all``), with nothing else: 32 coroutines each awaiting a future, one
    writer draining them all, one ``write`` and one ``fsync`` a batch, no lock, no
    listener, no fault handling (its log must verify as a FileLog's does, or the run
    stops);
(c) replay of a generated 1,000,000-record log through ``FileLog.open`` with a
    counting listener (or, with ``--fold``, the projections' bulk fold), in a child
    process so its peak RSS is its own; ratios to a naive ``json.loads`` line loop
    and to reading the raw bytes;
(d) the checksum chain's cost per record (``eventlog/chain.py``): encoding records as
    the writer did without it (``orjson.dumps`` + newline) against encoding and
    sealing them (plain and keyed BLAKE2b-128), as microseconds per record and as a
    ratio; the budget is 3 us per record. (b) and (c) run with the chain on, as
    every FileLog does. ``--chain-only`` runs just (d).

Timings use a temp dir on the same filesystem as the repo (not tmpfs), so the fsync
figures are real.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from snerd.eventlog.base import Record, SkippedLine
from snerd.eventlog.chain import GENESIS, Chain, verify
from snerd.eventlog.filelog import FileLog

REPO = Path(__file__).resolve().parents[1]
CONCURRENCY = 32


# ------------------------------------------------------------------ (a) raw


def bench_raw(storage: Path, n: int) -> float:
    """Appends/s of write + fsync per line (the baseline every durable log pays)."""
    path = storage / "raw.log"
    records = [_enqueued(i, i, 0) for i in range(n)]  # built before the clock starts
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        t0 = time.perf_counter()
        for record in records:
            os.write(fd, orjson.dumps(record) + b"\n")
            os.fsync(fd)
        return n / (time.perf_counter() - t0)
    finally:
        os.close(fd)


# ------------------------------------------------------------ (b) group commit


class _Count:
    def __init__(self) -> None:
        self.records = 0
        self.skipped = 0

    def on_records(self, records: Sequence[Record]) -> None:
        self.records += len(records)

    def on_reset(self) -> None:
        self.records = 0

    def on_skipped(self, skipped: SkippedLine) -> None:
        self.skipped += 1


async def _group_commit(storage: Path, n: int) -> tuple[float, int]:
    log = FileLog(storage, fsync=True, follow=True)
    await log.open(_Count())
    per = n // CONCURRENCY
    batches = [[_enqueued(w * per + i, 0, 0) for i in range(per)] for w in range(CONCURRENCY)]

    async def appender(worker: int) -> None:  # records built before the clock starts, as in (a)
        for record in batches[worker]:
            await log.append([record])

    t0 = time.perf_counter()
    await asyncio.gather(*(appender(w) for w in range(CONCURRENCY)))
    rate = per * CONCURRENCY / (time.perf_counter() - t0)
    commits = log.commits
    await log.close()
    return rate, commits


def bench_group_commit(storage: Path, n: int) -> tuple[float, int]:
    """(appends/s, commits) of FileLog under CONCURRENCY concurrent appenders."""
    return asyncio.run(_group_commit(storage, n))


async def _floor_group_commit(storage: Path, n: int) -> float:
    loop = asyncio.get_running_loop()
    chain = Chain()
    fd = os.open(storage / "floor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    queue: list[tuple[Record, asyncio.Future[None]]] = []
    head, seq, writing = GENESIS, 0, False

    def drain() -> None:
        nonlocal head, seq, queue, writing
        while queue:
            batch, queue = queue, []
            bodies = []
            for record, _ in batch:
                seq += 1
                bodies.append(orjson.dumps({**record, "seq": seq}))
            head, lines = chain.seal_all(head, bodies)
            os.write(fd, b"".join(lines))
            os.fsync(fd)
            for _, future in batch:
                future.set_result(None)
        writing = False

    def append(record: Record) -> asyncio.Future[None]:
        nonlocal writing
        future = loop.create_future()
        queue.append((record, future))
        if not writing:
            writing = True
            loop.call_soon(drain)
        return future

    per = n // CONCURRENCY
    batches = [[_enqueued(w * per + i, 0, 0) for i in range(per)] for w in range(CONCURRENCY)]

    async def appender(worker: int) -> None:
        for record in batches[worker]:
            await append(record)

    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(appender(w) for w in range(CONCURRENCY)))
        return per * CONCURRENCY / (time.perf_counter() - t0)
    finally:
        os.close(fd)


def bench_floor_group_commit(storage: Path, n: int) -> float:
    """Appends/s of the least group commit that seals each line as FileLog does (see
    the module's (b)), under CONCURRENCY concurrent appenders."""
    return asyncio.run(_floor_group_commit(storage, n))


# ------------------------------------------------------------------ (c) replay


def _enqueued(i: int, seq: int, ts: int) -> Record:
    return {
        "event": "enqueued",
        "seq": seq,
        "ts": ts,
        "taskId": f"task-{i:08d}",
        "taskType": ("send_email", "resize_image", "sync_crm")[i % 3],
        "taskData": json.dumps({"user": i % 9973, "template": "welcome", "n": i}),
        "retryCount": 0,
        "maxRetries": 3,
        "retryAfterHours": 0.05,
        "urgencyScore": i % 5,
        "createdAt": ts,
        "daemon": "d-bench-1",
    }


def generate_log(storage: Path, records: int, live: int = 3000) -> int:
    """Write a realistic log: each task enqueued, claimed, then succeeded, as a
    sliding window that leaves about ``live`` tasks unfinished. Returns the size."""
    path = storage / "tasks" / "tasks.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    lag = live // 2
    seq, ts, buf = 0, 1_760_000_000_000, []
    dumps = orjson.dumps
    with open(path, "wb") as f:
        i = 0
        while seq < records:
            for rec in _step(i, lag, ts):
                seq += 1
                rec["seq"] = seq
                buf.append(dumps(rec))
            i += 1
            ts += 3
            if len(buf) >= 10_000:
                f.write(b"\n".join(buf) + b"\n")
                buf.clear()
        f.write(b"\n".join(buf) + b"\n" if buf else b"")
    return path.stat().st_size


def _step(i: int, lag: int, ts: int) -> list[Record]:
    out = [_enqueued(i, 0, ts)]
    if i >= lag:
        tid = f"task-{i - lag:08d}"
        out.append(
            {
                "event": "claimed",
                "ts": ts,
                "taskId": tid,
                "daemon": "d-bench-1",
                "attempt": 1,
                "leaseUntil": ts + 300_000,
            }
        )
    if i >= 2 * lag:
        tid = f"task-{i - 2 * lag:08d}"
        out.append(
            {"event": "succeeded", "ts": ts, "taskId": tid, "daemon": "d-bench-1", "attempt": 1}
        )
    return out


def _fold_listener() -> tuple[Any, Callable[[], str]] | None:
    """A listener feeding the projections' bulk fold, if that module exists yet."""
    try:
        from snerd.projections import replay
    except ImportError:
        return None
    folder_cls = getattr(replay, "BulkFolder", None)
    if folder_cls is None:
        return None
    folder = folder_cls()

    class Fold(_Count):
        def on_records(self, records: Sequence[Record]) -> None:
            super().on_records(records)
            folder.feed(records)

    def finish() -> str:
        state = folder.finish()
        return f"fold -> {type(state).__name__}, {len(folder.live)} live tasks"

    return Fold(), finish


async def _replay(storage: Path, fold: bool) -> dict[str, Any]:
    hooked = _fold_listener() if fold else None
    listener: Any = hooked[0] if hooked else _Count()
    log = FileLog(storage, fsync=False, follow=False)
    t0 = time.perf_counter()
    await log.open(listener)
    note = hooked[1]() if hooked else ("fold unavailable" if fold else "count only")
    elapsed = time.perf_counter() - t0
    await log.close()
    return {"seconds": elapsed, "records": listener.records, "note": note, "rss_mb": _peak_rss_mb()}


def _naive_replay(path: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    n = 0
    with open(path, "rb") as f:
        for line in f:
            json.loads(line)
            n += 1
    return {"seconds": time.perf_counter() - t0, "records": n, "rss_mb": _peak_rss_mb()}


def _raw_read(path: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    size = 0
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(4 << 20):
            size += len(chunk)
    return {"seconds": time.perf_counter() - t0, "bytes": size, "rss_mb": _peak_rss_mb()}


def _peak_rss_mb() -> float:
    """This process's peak RSS: ``VmHWM`` where there is ``/proc`` (``ru_maxrss`` keeps
    the highest RSS across ``exec``: a child of the large benchmark process would report
    the parent's size, ``bench_replay.PEAK``)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


def _child(kind: str, storage: Path, fold: bool) -> dict[str, Any]:
    """Run one replay variant in a fresh interpreter; its peak RSS is its own."""
    argv = [sys.executable, "-m", "benchmarks.bench_log", "--child", kind, str(storage)]
    if fold:
        argv.append("--fold")
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    out = subprocess.run(argv, env=env, cwd=REPO, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def run_child(kind: str, storage: Path, fold: bool) -> None:
    log_path = storage / "tasks" / "tasks.log"
    if kind == "filelog":
        result = asyncio.run(_replay(storage, fold))
    elif kind == "naive":
        result = _naive_replay(log_path)
    elif kind == "raw":
        result = _raw_read(log_path)
    else:
        result = {"rss_mb": _peak_rss_mb()}  # "idle": the interpreter + imports
    print(json.dumps(result))


# -------------------------------------------------------------------- report


def main(argv: Sequence[str] | None = None) -> None:
    args = _parse(argv)
    if args.child:
        run_child(args.child, Path(args.child_storage), args.fold)
        return
    base = Path(args.dir) if args.dir else REPO.parent / "tmp"
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-log-", dir=base))
    try:
        _report(work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _report(work: Path, args: argparse.Namespace) -> None:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"event-log benchmarks (dir {work}, python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs, load {load})"
    )
    if not args.chain_only:
        _report_appends(work, args)
        _report_replay(work, args)
    _report_chain(args.chain_records, args.rounds)


# ------------------------------------------------------------ (d) the chain


def bench_chain(n: int, key: bytes | None) -> tuple[float, float]:
    """Seconds to encode ``n`` records without the chain, and with it (same records)."""
    records = [_enqueued(i, i + 1, 1_760_000_000_000 + i) for i in range(n)]
    dumps, newline = orjson.dumps, orjson.OPT_APPEND_NEWLINE
    seal_all = Chain(key).seal_all
    batches = [records[i : i + CONCURRENCY] for i in range(0, n, CONCURRENCY)]
    gc.collect()
    gc.disable()  # the timed loops allocate alike; a collection would land in one only
    try:  # as the writer does: a batch of records encoded, then (with the chain) sealed
        t0 = time.perf_counter()
        for batch in batches:
            lines = [dumps(r, option=newline) for r in batch]
        t_plain = time.perf_counter() - t0
        head = GENESIS
        t0 = time.perf_counter()
        for batch in batches:
            head, lines = seal_all(head, [dumps(r) for r in batch])
        t_chain = time.perf_counter() - t0
    finally:
        gc.enable()
    assert lines[-1].endswith(b'"}\n')
    return t_plain, t_chain


def _report_chain(n: int, rounds: int) -> None:
    for label, key in (("plain", None), ("keyed", b"a key kept outside the storage")):
        runs = [bench_chain(n, key) for _ in range(rounds)]
        plain = statistics.median(r[0] for r in runs) / n * 1e6
        chained = statistics.median(r[1] for r in runs) / n * 1e6
        print(
            f"(d) chain ({label}), {n:,} records   : encode {plain:.2f} us/record, encode+seal "
            f"{chained:.2f} us/record: the chain costs {chained - plain:.2f} us/record "
            f"({chained / plain:.2f}x writing without it; budget 3 us)"
        )


def _report_appends(work: Path, args: argparse.Namespace) -> tuple[float, float, float]:
    """Print (a), (b) and the floor, interleaved rounds; return their medians (appends/s)."""
    raws, rates, per_commit, floors = [], [], [], []
    for i in range(args.rounds):  # interleaved, so all see the same disk weather
        raws.append(bench_raw(work, args.raw_appends))
        (work / f"gc{i}").mkdir()
        rate, commits = bench_group_commit(work / f"gc{i}", args.appends)
        rates.append(rate)
        per_commit.append(args.appends / commits)
        (work / f"floor{i}").mkdir()
        floors.append(bench_floor_group_commit(work / f"floor{i}", args.appends))
    checked = verify([work / f"floor{args.rounds - 1}" / "floor.log"])
    if checked.breaks or checked.chained != args.appends // CONCURRENCY * CONCURRENCY:
        sys.exit(f"bench_log: the floor's log does not verify as FileLog's would: {checked}")
    raw, rate, floor = statistics.median(raws), statistics.median(rates), statistics.median(floors)
    print(
        f"(a) raw write+fsync per line     : {raw:10,.0f} appends/s  (1.00x)  "
        f"[median of {args.rounds}: {_span(raws)}]"
    )
    print(
        f"(b) FileLog, {CONCURRENCY} appenders, fsync : {rate:10,.0f} appends/s  "
        f"({rate / raw:.1f}x raw; {statistics.median(per_commit):.1f} appends per fsync)  "
        f"[{_span(rates)}]"
    )
    print(
        f"    the floor: the same appends, only the seq, orjson and the chain's seal: "
        f"{floor:,.0f} appends/s ({floor / raw:.1f}x raw; FileLog {rate / floor:.2f}x it)  "
        f"[{_span(floors)}]"
    )
    return raw, rate, floor


def _report_replay(work: Path, args: argparse.Namespace) -> None:
    storage = work / "replay"
    storage.mkdir()
    t0 = time.perf_counter()
    size = generate_log(storage, args.records)
    print(
        f"(c) generated {args.records:,} records, {size / 1e6:.0f} MB "
        f"in {time.perf_counter() - t0:.1f}s"
    )
    idle = _child("idle", storage, False)
    raw_read = _child("raw", storage, False)
    naive = _child("naive", storage, False)
    ours = _child("filelog", storage, args.fold)
    rps = ours["records"] / ours["seconds"]
    print(
        f"    FileLog.open replay           : {rps:10,.0f} records/s  "
        f"{ours['seconds']:.2f}s  [{ours['note']}]"
    )
    print(
        f"    vs naive json.loads line loop : {_faster(naive['seconds'], ours['seconds'])} "
        f"({naive['seconds']:.2f}s)"
    )
    print(
        f"    vs raw read of the bytes      : {_faster(raw_read['seconds'], ours['seconds'])} "
        f"({size / raw_read['seconds'] / 1e9:.2f} GB/s)"
    )
    print(
        f"    peak RSS                      : {ours['rss_mb']:.0f} MB "
        f"(idle interpreter {idle['rss_mb']:.0f} MB, naive loop {naive['rss_mb']:.0f} MB, "
        f"log file {size / 1e6:.0f} MB)"
    )


def _faster(baseline_s: float, ours_s: float) -> str:
    """'2.6x faster' / '3.1x slower': how our time compares with a baseline's."""
    if ours_s <= baseline_s:
        return f"{baseline_s / ours_s:.2f}x faster"
    return f"{ours_s / baseline_s:.1f}x slower"


def _span(values: list[float]) -> str:
    return f"{min(values):,.0f}..{max(values):,.0f}"


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--raw-appends", type=int, default=3000)
    p.add_argument("--appends", type=int, default=32_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument(
        "--fold",
        action="store_true",
        help="replay through snerd.projections.replay's bulk fold if present",
    )
    p.add_argument("--chain-records", type=int, default=200_000)
    p.add_argument("--chain-only", action="store_true", help="run only (d), the chain's cost")
    p.add_argument("--dir", help="parent of the temp dir (default: <repo>/../tmp)")
    p.add_argument("--child", choices=["filelog", "naive", "raw", "idle"], help=argparse.SUPPRESS)
    p.add_argument("child_storage", nargs="?", help=argparse.SUPPRESS)
    return p.parse_args(argv)


if __name__ == "__main__":
    main()
