"""Projection-fold benchmark: folded events per second, as ratios against JSON decoding.

    python -m benchmarks.bench_fold [--records N] [--max-batch K] [--rounds R]
    python -m benchmarks.bench_fold --baseline REV   # before/after, as ratios

Generates a realistic log in memory (tasks enqueued, claimed, some with progress,
most succeed; some fail, retry and succeed; some fail until dead-lettered; a sliding
window leaves about ``--live`` tasks unfinished; ~300-byte lines), then measures, in
this one process:

- baselines: a plain ``json.loads`` loop and a plain ``orjson.loads`` loop over the
  same lines;
- (a) the incremental fold as the engine uses it: ``fold(state, batch)`` from
  ``empty()``, on batches of 1..K records (cycling 1, 2, ..., K) as records arrive;
- (b) the bulk replay used at start-up: ``bulk_fold(records)``;
- (c) the start-up replay end to end, as a daemon opens its storage: the lines
  written to a storage directory's log, then ``FileLog.open`` with a listener that
  feeds a ``BulkFolder`` (the log's own reading and decoding included), and the same
  open with a listener that only counts (the read path alone).

Decoding (orjson, the same decoder the log uses) is timed apart from folding in (a)
and (b), so the figures say where the time goes: each line is decoded in chunks
whose decode time is measured and subtracted. Only public entry points are used
(``empty``, ``fold``, ``bulk_fold``), so the benchmark keeps working when the core
changes shape. Each figure is the median of ``--rounds`` runs, except the
incremental fold's (``--incremental-rounds``, default 1: it is the slow one, and one
pass over 200,000 records already folds in thousands of batches).

``--baseline REV`` answers "is the fold cheaper than it was?" in one command: the tree
at git revision REV (``git archive``, into a temporary directory) and this tree each
run the measurements above in a process of their own, on the same generated log,
alternating (REV, now, REV, now, ...) ``--rounds`` times; it prints each tree's
medians and the ratio now/REV. REV must have ``empty``, ``fold`` and ``bulk_fold``
(every tree since the projections had a bulk replay).

``--instructions`` (with or without ``--baseline``) counts instead of timing: each
fold runs under ``valgrind --tool=callgrind`` with ``PYTHONHASHSEED=0``, and the
instructions of a run that only builds the log and decodes it are subtracted, so the
figure is the fold's own instructions per record, the same on every run of the same
tree and interpreter, whatever else the machine is doing (a 2-core VM shared with
other jobs moves wall-clock figures by 20% and more between runs). Default 40,000
records; a few minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo (or that tree) importable
    sys.path.insert(0, os.environ.get("SNERD_BENCH_FOLD_TREE") or str(Path(__file__).parents[1]))

import orjson

from snerd.eventlog.filelog import FileLog
from snerd.projections.replay import BulkFolder, bulk_fold
from snerd.projections.state import empty, fold

REPO = Path(__file__).resolve().parents[1]
TREE_ENV = "SNERD_BENCH_FOLD_TREE"  # set for a --baseline child: the tree it measures
Record = dict[str, Any]
CHUNK = 2048  # lines decoded per timed chunk
T0_MS = 1_760_000_000_000
DAEMON = "d-bench-7f3a21"
TYPES = ("send_email", "resize_image", "sync_crm", "charge_card")

# ------------------------------------------------------------------ the log


def _iso(ms: int) -> str:
    seconds, milli = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{milli:03d}Z"


def _task(i: int, ts: int) -> Record:
    """SnerdMQ's task fields, as the engine writes them on a full-state line."""
    at = _iso(ts)
    return {
        "taskId": f"task-{i:08d}",
        "taskType": TYPES[i % len(TYPES)],
        "taskData": json.dumps({"user": i % 9973, "template": "welcome", "n": i}),
        "retryCount": 0,
        "maxRetries": 1 if i % 20 == 19 else 3,
        "retryAfterHours": 0.0,
        "retryAfterTime": at,
        "executeAt": at,
        "deletedAt": None,
        "urgencyScore": float(i % 5),
        "createdAt": at,
    }


def _full(task: Record, event: str, ts: int, **ours: Any) -> Record:
    return {**task, "event": event, "ts": ts, "daemon": DAEMON, **ours}


def _light(event: str, task_id: str, ts: int, **fields: Any) -> Record:
    return {"event": event, "ts": ts, "daemon": DAEMON, "taskId": task_id, **fields}


def _lifecycle(i: int, lag: int) -> Iterator[tuple[int, Record]]:
    """(step, record) of task ``i``'s whole life. Outcome by ``i % 20``: 0..14 succeed
    first time, 15..18 fail once then succeed, 19 fails twice with one retry allowed
    and is dead-lettered. Every third attempt reports progress."""
    step = i
    ts = T0_MS + 3 * step
    task = _task(i, ts)
    tid = task["taskId"]
    yield step, _full(task, "enqueued", ts)
    fails = 0 if i % 20 < 15 else (1 if i % 20 < 19 else 2)
    step += lag
    for attempt in range(1, fails + 2):
        ts = T0_MS + 3 * step
        yield step, _light("claimed", tid, ts, attempt=attempt, leaseUntil=ts + 3_600_000)
        if (i + attempt) % 3 == 0:
            yield step + 1, _light("progress", tid, ts + 3, attempt=attempt, data={"pct": 50})
        step += 2
        ts = T0_MS + 3 * step
        if attempt > fails:
            done = dict(task, deletedAt=_iso(ts))
            yield step, _full(done, "succeeded", ts, attempt=attempt)
            return
        error = f"RuntimeError: upstream timed out (attempt {attempt})"
        task = dict(
            task,
            retryCount=task["retryCount"] + (1 if task["retryCount"] < task["maxRetries"] else 0),
            LastJobError={"error": error, "retry_worthy": True},
            LastErrorObj=error,
        )
        if attempt <= task["maxRetries"]:
            yield step, _full(task, "retry_scheduled", ts, attempt=attempt)
            step += 3
        else:
            dead = dict(task, deletedAt=_iso(ts))
            reason = "retries_exhausted"
            yield step, _full(dead, "dead_lettered", ts, attempt=attempt, reason=reason)
            return


def generate(records: int, live: int) -> list[bytes]:
    """``records`` log lines (with ``seq``), tasks interleaved as a sliding window."""
    lag = max(1, live // 2)
    pending: dict[int, list[Record]] = {}
    lines: list[bytes] = []
    dumps = orjson.dumps
    i = step = 0
    while len(lines) < records:
        for at, record in _lifecycle(i, lag):
            pending.setdefault(at, []).append(record)
        i += 1
        for record in pending.pop(step, ()):
            record["seq"] = len(lines) + 1
            lines.append(dumps(record))
            if len(lines) == records:
                break
        step += 1
    return lines


# ------------------------------------------------------------------ timings


def _loads_loop(loads: Callable[[bytes], Any], lines: Sequence[bytes]) -> float:
    """Seconds a plain ``loads`` loop over the lines takes (results dropped)."""
    t0 = time.perf_counter()
    for line in lines:
        loads(line)
    return time.perf_counter() - t0


def _json_loop(lines: Sequence[bytes]) -> float:
    return _loads_loop(json.loads, lines)


def _orjson_loop(lines: Sequence[bytes]) -> float:
    return _loads_loop(orjson.loads, lines)


class _Decoder:
    """Decodes lines chunk by chunk with orjson, adding up the time it spends."""

    def __init__(self, lines: Sequence[bytes]) -> None:
        self.lines = lines
        self.seconds = 0.0

    def chunks(self) -> Iterator[list[Record]]:
        loads, lines = orjson.loads, self.lines
        for start in range(0, len(lines), CHUNK):
            t0 = time.perf_counter()
            chunk = [loads(line) for line in lines[start : start + CHUNK]]
            self.seconds += time.perf_counter() - t0
            yield chunk

    def records(self) -> Iterator[Record]:
        for chunk in self.chunks():
            yield from chunk


def _incremental(lines: Sequence[bytes], max_batch: int) -> tuple[float, float, int]:
    """(decode s, fold s, live tasks) of the engine's fold on batches of 1..max_batch."""
    decoder = _Decoder(lines)
    state = empty()
    folding = 0.0
    size = 0
    for chunk in decoder.chunks():
        t0 = time.perf_counter()
        start = 0
        while start < len(chunk):
            size = size % max_batch + 1
            state, _ = fold(state, chunk[start : start + size])
            start += size
        folding += time.perf_counter() - t0
    return decoder.seconds, folding, len(state.tasks)


def _bulk(lines: Sequence[bytes]) -> tuple[float, float, int]:
    """(decode s, fold s, live tasks) of the start-up replay."""
    decoder = _Decoder(lines)
    t0 = time.perf_counter()
    state = bulk_fold(decoder.records())
    total = time.perf_counter() - t0
    return decoder.seconds, total - decoder.seconds, len(state.tasks)


class _Listener:
    """What ``FileLog.open`` delivers to: counts records and, given a folder, feeds it."""

    def __init__(self, folder: Any = None) -> None:
        self.folder = folder
        self.records = 0

    def on_records(self, records: Sequence[Record]) -> None:
        self.records += len(records)
        if self.folder is not None:
            self.folder.feed(records)

    def on_reset(self) -> None:
        raise AssertionError("a replay of a quiet log never resets")

    def on_skipped(self, skipped: Any) -> None:
        raise AssertionError(f"a generated line was skipped: {skipped}")


def _startup(lines: Sequence[bytes]) -> tuple[float, float, int]:
    """(read s, read + fold s, live tasks) of ``FileLog.open`` over the lines."""
    with tempfile.TemporaryDirectory(prefix="snerd-fold-startup-", dir=REPO.parent) as raw:
        storage = Path(raw)
        (storage / "tasks").mkdir()
        (storage / "tasks" / "tasks.log").write_bytes(b"\n".join(lines) + b"\n")

        async def open_with(listener: _Listener) -> tuple[float, int]:
            log = FileLog(storage, fsync=False, follow=False)
            gc.collect()
            t0 = time.perf_counter()
            await log.open(listener)
            live = len(listener.folder.finish().tasks) if listener.folder is not None else 0
            seconds = time.perf_counter() - t0
            await log.close()
            assert listener.records == len(lines), listener.records
            return seconds, live

        read, _ = asyncio.run(open_with(_Listener()))
        total, live = asyncio.run(open_with(_Listener(BulkFolder())))
        return read, total - read, live


def _median(run: Callable[[], Any], rounds: int) -> list[Any]:
    results = []
    for _ in range(rounds):
        gc.collect()
        results.append(run())
    return results


# ------------------------------------------------------------------ report


def main(argv: Sequence[str] | None = None) -> None:
    args = _parse(argv)
    if args.child:
        _child(args)
        return
    if args.instr_child:
        _instr_child(args)
        return
    if args.instructions:
        _instructions(args)
        return
    if args.baseline:
        _against(args)
        return
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"projection-fold benchmark (python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"load {load}; median of {args.rounds}, incremental {args.incremental_rounds})"
    )
    t0 = time.perf_counter()
    lines = generate(args.records, args.live)
    n = len(lines)
    size = sum(len(line) + 1 for line in lines)
    print(
        f"log: {n:,} records, {size / 1e6:.1f} MB, {size / n:.0f} bytes/record "
        f"(generated in {time.perf_counter() - t0:.1f}s)"
    )
    json_s = statistics.median(_median(lambda: _json_loop(lines), args.rounds))
    orjson_s = statistics.median(_median(lambda: _orjson_loop(lines), args.rounds))
    print(f"baseline json.loads loop      : {n / json_s:12,.0f} records/s")
    print(
        f"baseline orjson.loads loop    : {n / orjson_s:12,.0f} records/s  "
        f"({json_s / orjson_s:.2f}x json)"
    )
    _line("(a) incremental fold", args, n, json_s, orjson_s,
          _median(lambda: _incremental(lines, args.max_batch), args.incremental_rounds),
          f"batches of 1..{args.max_batch}")  # fmt: skip
    _line("(b) bulk replay", args, n, json_s, orjson_s,
          _median(lambda: _bulk(lines), args.rounds), "bulk_fold")  # fmt: skip
    _line("(c) start-up replay", args, n, json_s, orjson_s,
          _median(lambda: _startup(lines), args.rounds),
          "FileLog.open feeding a BulkFolder; 'decode': the open with a counting listener",
          )  # fmt: skip


def _line(
    name: str,
    args: argparse.Namespace,
    n: int,
    json_s: float,
    orjson_s: float,
    runs: list[tuple[float, float, int]],
    note: str,
) -> None:
    decode = statistics.median(r[0] for r in runs)
    folding = statistics.median(r[1] for r in runs)
    total = statistics.median(r[0] + r[1] for r in runs)
    live = runs[-1][2]
    print(f"{name} [{note}; {live:,} live tasks at the end]")
    print(
        f"    fold only                 : {n / folding:12,.0f} events/s  "
        f"({folding / total:.0%} of decode+fold)"
    )
    print(
        f"    decode (orjson) + fold    : {n / total:12,.0f} events/s  "
        f"{_ratio(json_s, total)} json.loads loop, {_ratio(orjson_s, total)} orjson.loads loop"
    )
    print(f"    of which decode           : {n / decode:12,.0f} records/s")


def _ratio(baseline_s: float, ours_s: float) -> str:
    """'2.60x faster than' / '3.1x slower than': our time against a baseline's."""
    if ours_s <= baseline_s:
        return f"{baseline_s / ours_s:.2f}x faster than"
    return f"{ours_s / baseline_s:.2f}x slower than"


# ------------------------------------------------------------------ --baseline REV


def _child(args: argparse.Namespace) -> None:
    """One round of every figure, as JSON on stdout (for :func:`_against`)."""
    lines = generate(args.records, args.live)
    gc.collect()
    figures = {
        "json": _json_loop(lines),
        "orjson": _orjson_loop(lines),
        "a": _incremental(lines, args.max_batch),
        "b": _bulk(lines),
        "c": _startup(lines),
    }
    print(json.dumps(figures))


def _against(args: argparse.Namespace) -> None:
    """This tree against the tree at ``args.baseline``, alternating child processes."""
    with (tempfile.TemporaryDirectory(prefix="snerd-fold-base-") as base,
          tempfile.TemporaryDirectory(prefix="snerd-fold-now-") as built):  # fmt: skip
        from benchmarks.trees import compiled_copy, extract  # (the parent only: a child
        # may run an old tree)

        extract(args.baseline, base, "bench_fold")
        now = str(compiled_copy(built, "bench_fold")) if args.compiled else str(REPO)
        trees = {args.baseline: base, "now": now}
        child = [sys.executable, str(Path(__file__).resolve()), "--child",
                 "--records", str(args.records), "--live", str(args.live),
                 "--max-batch", str(args.max_batch)]  # fmt: skip
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        built_note = ", this tree compiled as a wheel builds it" if args.compiled else ""
        print(f"projection fold, {args.baseline} against this tree{built_note} "
              f"({args.records:,} records, "
              f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {load}; "
              f"{args.rounds} alternating rounds, each tree in its own process; "
              "medians)")  # fmt: skip
        for _ in range(args.rounds):
            for name, tree in trees.items():
                env = {**os.environ, TREE_ENV: tree}
                out = subprocess.run(child, env=env, capture_output=True, check=True)
                runs[name].append(json.loads(out.stdout.decode().splitlines()[-1]))
    n = args.records
    print(f"{'':34}{args.baseline:>14}{'now':>14}{'now/' + args.baseline:>18}")
    for label, key, fold_only in (
        ("(a) incremental, fold only", "a", True),
        ("(a) incremental, decode + fold", "a", False),
        ("(b) bulk replay, fold only", "b", True),
        ("(b) bulk replay, decode + fold", "b", False),
        ("(c) start-up, FileLog.open + fold", "c", False),
        ("(c) start-up, of which the fold", "c", True),
    ):
        rate = {name: n / statistics.median(_seconds(r[key], fold_only) for r in rs)
                for name, rs in runs.items()}  # fmt: skip
        before, now = rate[args.baseline], rate["now"]
        print(f"{label:34}{before:14,.0f}{now:14,.0f}{now / before:17.2f}x  events/s")
    for name, rs in runs.items():
        print(
            f"  {name}: json.loads loop {n / statistics.median(r['json'] for r in rs):,.0f} "
            f"records/s, orjson.loads loop {n / statistics.median(r['orjson'] for r in rs):,.0f}"
            " records/s (the same work in both: a check that the rounds are alike)"
        )


# ------------------------------------------------------------ instruction counts

_PARTS = ("setup", "incremental", "bulk")


def _instr_child(args: argparse.Namespace) -> None:
    """Build and decode the log, then run one fold (or none: ``setup``)."""
    records = [orjson.loads(line) for line in generate(args.records, args.live)]
    if args.instr_child == "incremental":
        state, size, start = empty(), 0, 0
        while start < len(records):
            size = size % args.max_batch + 1
            state, _ = fold(state, records[start : start + size])
            start += size
    elif args.instr_child == "bulk":
        bulk_fold(records)


def _count(tree: str, part: str, args: argparse.Namespace) -> int:
    """Instructions of one ``_instr_child`` run of ``part`` on ``tree``."""
    with tempfile.NamedTemporaryFile(prefix="snerd-fold-cg-") as out:
        run = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out.name}",
             sys.executable, str(Path(__file__).resolve()), "--instr-child", part,
             "--records", str(args.records), "--live", str(args.live),
             "--max-batch", str(args.max_batch)],
            env={**os.environ, TREE_ENV: tree, "PYTHONHASHSEED": "0"},
            capture_output=True, check=False,
        )  # fmt: skip
        for line in Path(out.name).read_text().splitlines():
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    sys.exit(f"bench_fold: callgrind failed on {part}: {run.stderr.decode(errors='replace')}")


def _instructions(args: argparse.Namespace) -> None:
    """Instructions per record of each fold, for this tree (and ``--baseline``)."""
    if shutil.which("valgrind") is None:
        sys.exit("bench_fold --instructions needs valgrind (apt-get install -y valgrind)")
    with tempfile.TemporaryDirectory(prefix="snerd-fold-base-") as base:
        trees = {"now": str(REPO)}
        if args.baseline:
            from benchmarks.trees import extract

            extract(args.baseline, base, "bench_fold")
            trees = {args.baseline: base, **trees}
        print(f"projection fold, instructions per record (callgrind, {args.records:,} "
              f"records, batches of 1..{args.max_batch}, python {sys.version.split()[0]}; "
              "a run that only builds and decodes the log subtracted)")  # fmt: skip
        jobs = [(name, tree, part) for name, tree in trees.items() for part in _PARTS]
        with ThreadPoolExecutor(os.cpu_count() or 1) as pool:  # one valgrind per CPU
            done = pool.map(lambda job: _count(job[1], job[2], args), jobs)
            counts: dict[str, dict[str, int]] = {name: {} for name in trees}
            for (name, _, part), n in zip(jobs, done, strict=True):
                counts[name][part] = n
    names = list(trees)
    head = "".join(f"{name:>14}" for name in names)
    ratio = f"{names[0]}/now" if len(names) > 1 else ""
    print(f"{'':34}{head}{ratio:>18}")
    for label, part in (("(a) incremental, fold only", "incremental"),
                        ("(b) bulk replay, fold only", "bulk")):  # fmt: skip
        per = {n: (counts[n][part] - counts[n]["setup"]) / args.records for n in names}
        cells = "".join(f"{per[n]:14,.0f}" for n in names)
        tail = f"{per[names[0]] / per['now']:17.2f}x" if len(names) > 1 else ""
        print(f"{label:34}{cells}{tail}  instructions/record")
    if len(names) > 1:
        print(f"  {ratio} above 1: this tree folds a record in fewer instructions than {names[0]}")


def _seconds(run: list[float], fold_only: bool) -> float:
    """Fold seconds, or decode + fold seconds, of one (a)/(b) run (decode, fold, live)."""
    return run[1] if fold_only else run[0] + run[1]


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--records", type=int,
                   help="log records (default 200,000; 40,000 with --instructions)")  # fmt: skip
    p.add_argument("--live", type=int, default=3000, help="tasks unfinished at the end (about)")
    p.add_argument("--max-batch", type=int, default=3, help="incremental batch sizes 1..K")
    p.add_argument("--rounds", type=int, default=3, help="runs per figure (median)")
    p.add_argument("--incremental-rounds", type=int, default=1, help="runs of (a) (median)")
    p.add_argument(
        "--baseline",
        metavar="REV",
        help="also measure the tree at git revision REV; print ratios now/REV",
    )
    p.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per record under callgrind instead of timing",
    )
    p.add_argument(
        "--compiled",
        action="store_true",
        help="with --baseline: measure this tree with the modules a wheel compiles "
        "(setup.py, mypyc) built, in a copy of the tree",
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--instr-child", choices=_PARTS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.records is None:
        args.records = 40_000 if args.instructions else 200_000
    return args


if __name__ == "__main__":
    main()
