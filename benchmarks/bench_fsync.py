"""Where the log's fsync runs, decided by measurement: inline, the pool, or one thread.

    python -m benchmarks.bench_fsync [--tasks N] [--rounds R]
    python -m benchmarks.bench_fsync --gaps [--rounds R]
    python -m benchmarks.bench_fsync --syncs [--rounds R]
    python -m benchmarks.bench_fsync --after [--rounds R]
    python -m benchmarks.bench_fsync --overlap [--rounds R]
    python -m benchmarks.bench_fsync --neighbour [--rounds R]
    python -m benchmarks.bench_fsync --edge [--tasks N] [--rounds R] [--compiled]
    python -m benchmarks.bench_fsync --budget [--tasks N] [--rounds R] [--compiled]

``FileLog`` runs an fsync on the event loop's thread while this disk's fsyncs take
under ``INLINE_FSYNC_SECONDS`` (5 ms), else in its fsync pool, so that a slow volume
does not stall the loop. This runs the paths that wait for one fsync a task with each
placement, in interleaved rounds (medians), and prints each against inline:

- the official SDK awaiting each enqueue, a no-op handler (as ``bench_hotpath`` (1)),
  with the daemon's CPU a task (its (3));
- the embedded ``snerd.Queue``, sequential awaited enqueues and concurrent ones (its (5)).

Placements: ``inline`` (what this disk gets by default: on the loop's thread, and for a
batch no ack waits on, the embedded queue's, submitted through kernel AIO with the fold
run during it, ``eventlog/aio.py``), ``fsync`` (on the loop's thread, every sync an
``fsync``, the fold after it: no AIO), ``pool`` (every fsync handed to the pool of 4
threads: ``INLINE_FSYNC_SECONDS = 0``), ``thread`` (the same, to one dedicated thread).
The writer awaits its batch's fsync in the last two, so the loop is free meanwhile; what
they cost is the hand-off there and back.

``--gaps`` asks what one fsync costs on this disk as a function of the CPU work done
between two of them: a loop that appends a 300-byte line and fsyncs it, with a busy
wait of 0, 50, ... us before each append, in interleaved rounds. Back to back (gap 0)
is how the echo floor of ``bench_hotpath`` (1) and (2) and its raw writer of (6) sync;
a queue does a task's work between two syncs. On the VMs of 2026-12-05 the answer was
not flat: ~55 us back to back, 100-700 us (mean) after 300 us of work, so a floor that
syncs back to back pays less for each fsync than any daemon that does work between
them (``benchmarks/README.md``, "tenth session").

``--syncs`` asks which part of such an fsync is the file's growth: back to back and
after 300 us of work, it compares the log's way (append, ``fsync``) with an append and
``fdatasync``, and with an overwrite, in place, of bytes that were already written,
zeros preallocated and synced beforehand, and ``fdatasync`` (what a database does with
its pre-zeroed write-ahead log segments: no size or extent to commit, only the data and
the disk's flush). Each against the log's way at the same gap.

``--after`` asks the converse of ``--gaps``: what the *work* after a wait costs. A
daemon waits twice a task (for its ``fsync``, and in ``epoll`` for the SDK's next line),
and a virtual CPU that sleeps may come back slower: its caches and predictors served
another guest, or it left a deep idle state. This times one task's work of the pure
core (parse an enqueue line, decode and fold the batch the daemon writes for it: the
enqueue, the last task's success, the claim) right after each kind of wait, in
interleaved rounds: none (back to back, as a micro-benchmark runs), a 200 us busy wait
(the CPU stays awake), a 200 us sleep, and an append and ``fsync`` of a 300-byte line
(as the daemon's). Each against back to back. (The echo floors of ``bench_hotpath``
do next to no work after their waits; a queue does all of its work after one.)

``--overlap`` asks whether the work after a batch's write could run *while* its
``fsync`` does, on this machine: the fold of what the batch wrote needs no durability,
only the answers (acks, futures) wait for it. A loop of tasks, each 60 us of busy work
(the decisions), an append, the sync, and 60 us more (the fold), with the sync placed
four ways: ``inline`` (the log's: the fold after ``fsync`` returns); ``thread`` (the
``fsync`` handed to a waiting thread, the fold meanwhile, then a wait for the thread);
``process`` (handed to a helper process over a pipe: no GIL to share); ``aio`` (Linux
kernel AIO, ``IOCB_CMD_FSYNC`` through ``io_submit``, the fold, then ``io_getevents``:
no thread of ours at all; x86-64 and arm64 Linux only); ``uring`` (an
``IORING_OP_FSYNC`` through io_uring, whose kernel worker thread any CPU may run, the
fold, then ``io_uring_enter`` for the completion; x86-64 Linux only). Each prints its time a task
and the CPU a task of the *whole machine* (``/proc/stat``: a kernel worker's or a
helper's CPU is no process's of ours, and a hand-off that moves CPU there is not
free), against inline's.

``--neighbour`` asks what an fsync costs while the *other* CPU is busy, as it is when
the SDK's process runs its handler and writes its ``result`` during the daemon's sync:
an fsync after 200 us of work with that CPU idle, running a spin loop in another
process, or running one 100 us on and 100 us off. (On the VM of 2026-12-06 a first
probe read 227 us beside the spin loop against 172 idle; this mode and the probe again
then read 171-172 us for both: no effect there, the first reading a passing one.)

``--edge`` asks where this disk's ``fsync`` turns slow for the embedded queue itself:
it runs ``snerd.Queue`` with sequential awaited enqueues (``bench_hotpath`` (5)), times
each sync of the log (an AIO one from its submit to the completion seen, else the
``fsync`` call) and sorts them by the time from the last sync's end to their start,
with each bin's share, median, mean and share over 200 us; then the medians of that
time, of the work run under an AIO sync (submit to wait), and the rate. On the VM of
2026-12-07 (twenty-ninth session) a sync 60-70 us after the last took 60 us (p50, 1%
over 200 us), 80-100 us after 189 us (48%): the queue's ~72 us between syncs sat on
that edge. ``--compiled`` runs it in a copy of the tree built as ``pip install .``
builds it (the interpreted queue works far longer between its syncs).

``--budget`` asks how much more work the embedded queue could hide under its sync on
this machine: the same run as ``--edge``, with a busy loop of 0, 20, 40 and 80 us added
under each AIO sync (right after its submit, before the fold), in interleaved rounds,
each rate against the run with none. Work that could move there from between two syncs
(the start of the attempt just claimed, a no-op handler, its success's submission) would
cost nothing up to the largest loop whose rate stays within the rounds' spread of none.
On the third kind of VM (thirtieth session) a probe read 20 and 40 us free and 80 us
~7% (2,756 tasks/s with none), and this mode, in a slower minute (2,141/s), all three
free; there ``io_submit`` itself keeps the loop's thread ~47 us (as read: the kernel
runs the AIO ``fsync``'s CPU part on the submitting CPU first; the thread is preempted
~1.5 times a task through AIO, ~0 with ``fsync``), so only the device's wait is left to
hide work in.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar
from unittest import mock

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_hotpath import OURS, REPO, _shim, embedded_run, sdk_run
from snerd.eventlog.aio import open_fsync

PLACEMENTS = {
    "inline": "",
    "fsync": "import snerd.eventlog.aio as a; a.open_fsync = lambda fd: None; ",
    "pool": "import snerd.eventlog.filelog as f; f.INLINE_FSYNC_SECONDS = 0.0; ",
    "thread": (
        "import snerd.eventlog.filelog as f; f.INLINE_FSYNC_SECONDS = 0.0; "
        "from concurrent.futures import ThreadPoolExecutor; "
        "f._FSYNC_POOL = ThreadPoolExecutor(max_workers=1); "
    ),
}
"""Code run before the queue starts, per placement (the daemon's and the embedded run's)."""

EMBEDDED = (
    "import asyncio, sys; from pathlib import Path; "
    "from benchmarks.bench_hotpath import embedded_run; "
    "print(asyncio.run(embedded_run(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == 'c')))"
)


def _embedded(prelude: str, storage: Path, n: int, concurrent: bool) -> float:
    """Tasks/s of one embedded run in a process of its own, with ``prelude`` run first."""
    cmd = [sys.executable, "-c", prelude + EMBEDDED, str(storage), str(n),
           "c" if concurrent else "s"]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"bench_fsync: the embedded run failed: {done.stderr[-2000:]}")
    return float(done.stdout.split()[-1])


GAPS = (0, 50, 100, 200, 300, 500)
"""Microseconds of busy CPU work before each append of ``--gaps``."""


SYNCS = ("append + fsync", "append + fdatasync", "overwrite + fdatasync")
"""The three ways of ``--syncs`` (the first is the log's)."""


def fsyncs_after(fd: int, gap_us: int, n: int) -> list[float]:
    """Seconds of each of ``n`` fsyncs, each after ``gap_us`` of busy work and a
    300-byte append to ``fd`` (the log's way of :func:`syncs_after`)."""
    return syncs_after(fd, SYNCS[0], gap_us, n)


def syncs_after(fd: int, how: str, gap_us: int, n: int) -> list[float]:
    """Seconds of each of ``n`` syncs of a 300-byte line written the way ``how`` names
    (one of SYNCS), each after ``gap_us`` of busy work. For an overwrite, ``fd`` holds
    at least ``n`` lines' worth of zeros, written and synced; it is overwritten from 0."""
    line = b"x" * 300 + b"\n"
    overwrite = how == SYNCS[2]
    sync = os.fsync if how == SYNCS[0] else os.fdatasync
    took: list[float] = []
    clock = time.perf_counter
    for i in range(n):
        until = clock() + gap_us / 1e6
        while clock() < until:
            pass
        if overwrite:
            os.pwrite(fd, line, i * len(line))
        else:
            os.write(fd, line)
        start = clock()
        sync(fd)
        took.append(clock() - start)
    return took


def sync_ways(directory: str, rounds: int, n: int = 2000) -> None:
    """Print ``--syncs``' table: each way's sync (mean, p50, p90) at gaps 0 and 300 us,
    against the log's way (append + fsync) at the same gap."""
    seen: dict[tuple[str, int], list[list[float]]] = {}
    with tempfile.TemporaryDirectory(dir=directory, prefix="snerd-fsync-") as raw_tmp:
        for round_ in range(rounds):
            for gap in (0, 300):
                for how in SYNCS:
                    path = Path(raw_tmp) / f"{round_}-{gap}-{SYNCS.index(how)}.log"
                    if how == SYNCS[2]:
                        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
                        os.write(fd, bytes(301 * n))
                        os.fsync(fd)
                    else:
                        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                    try:
                        runs = seen.setdefault((how, gap), [])
                        runs.append(sorted(syncs_after(fd, how, gap, n)))
                    finally:
                        os.close(fd)
    print(f"one sync of a 300-byte line, three ways, back to back and after 300 us of "
          f"work; {n} syncs a way, medians of {rounds} interleaved rounds, ratios against "
          f"append + fsync at the same gap")  # fmt: skip
    print(f"{'way':>24}{'work before':>13}{'mean':>18}{'p50':>18}{'p90':>18}")
    for gap in (0, 300):
        for how in SYNCS:
            cells = []
            for of in (_mean, _p50, _p90):
                value = statistics.median(of(run) for run in seen[(how, gap)]) * 1e6
                base = statistics.median(of(run) for run in seen[(SYNCS[0], gap)]) * 1e6
                cells.append(f"{value:,.0f} us ({value / base:.2f}x)")
            print(f"{how:>24}{gap:>10} us" + "".join(f"{c:>18}" for c in cells))


def _mean(run: list[float]) -> float:
    return statistics.fmean(run)


def _p50(run: list[float]) -> float:
    return run[len(run) // 2]


def _p90(run: list[float]) -> float:
    return run[len(run) * 9 // 10]


K = TypeVar("K")


def _interleaved(
    directory: str, name: str, kinds: Sequence[K], rounds: int,
    measure: Callable[[int, K], list[float]],
) -> dict[K, list[list[float]]]:  # fmt: skip
    """Each kind's sorted samples, ``rounds`` times over, the kinds interleaved: what
    ``measure(fd, kind)`` returns, ``fd`` a log file of its own in a temporary dir."""
    seen: dict[K, list[list[float]]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory(dir=directory, prefix="snerd-fsync-") as raw_tmp:
        fd = os.open(Path(raw_tmp) / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for _ in range(rounds):
                for kind in kinds:
                    seen[kind].append(sorted(measure(fd, kind)))
        finally:
            os.close(fd)
    return seen


def _table(seen: dict[K, list[list[float]]], base: K, names: dict[K, str], width: int,
           digits: int, end: str = "\n") -> None:  # fmt: skip
    """Each kind's mean, p50 and p90 (medians over the rounds), in us and against
    ``base``'s (each kind of ``names``; ``end`` ends each row)."""

    def figure(kind: K, of: Callable[[list[float]], float]) -> float:
        return statistics.median(of(run) for run in seen[kind]) * 1e6

    for kind in names:
        cells = [f"{figure(kind, f):,.{digits}f} us ({figure(kind, f) / figure(base, f):.2f}x)"
                 for f in (_mean, _p50, _p90)]  # fmt: skip
        print(f"{names[kind]:>{width}}" + "".join(f"{c:>18}" for c in cells), end=end)


def gaps(directory: str, rounds: int, n: int = 2000) -> None:
    """Print ``--gaps``' table: each gap's fsync (mean, p50, p90) against gap 0's."""
    seen = _interleaved(directory, "gaps.log", GAPS, rounds,
                        lambda fd, gap: fsyncs_after(fd, gap, n))  # fmt: skip
    print(f"one fsync after a 300-byte append, by the busy work before it; {n} fsyncs a "
          f"gap, medians of {rounds} interleaved rounds, ratios against gap 0")  # fmt: skip
    print(f"{'work before':>12}{'mean':>18}{'p50':>18}{'p90':>18}")
    _table(seen, 0, {gap: f"{gap:>9} us" for gap in GAPS}, 12, 0)


NEIGHBOURS = ("idle", "busy", "pulsing")
"""What another process does on the other CPU during ``--neighbour``'s fsyncs."""

_NEIGHBOUR_CODE = {
    "busy": "while True: pass",
    "pulsing": "import time\nwhile True:\n    t = time.perf_counter()\n"
               "    while time.perf_counter() - t < 1e-4: pass\n    time.sleep(1e-4)",
}  # fmt: skip


def neighbour(directory: str, rounds: int, n: int = 2000) -> None:
    """Print ``--neighbour``'s table: an fsync after 200 us of work, by what a process
    on the other CPU does meanwhile, against that CPU idle."""
    import subprocess

    def measure(fd: int, kind: str) -> list[float]:
        other = None
        if kind != "idle":
            other = subprocess.Popen([sys.executable, "-c", _NEIGHBOUR_CODE[kind]])
            time.sleep(0.1)  # (running before the first fsync)
        try:
            return fsyncs_after(fd, 200, n)
        finally:
            if other is not None:
                other.kill()
                other.wait()

    seen = _interleaved(directory, "neighbour.log", NEIGHBOURS, rounds, measure)
    print(f"one fsync after 200 us of work and a 300-byte append, by what another process "
          f"does on the other CPU; {n} fsyncs a kind, medians of {rounds} interleaved "
          "rounds, ratios against idle")  # fmt: skip
    print(f"{'other CPU':>22}{'mean':>18}{'p50':>18}{'p90':>18}")
    names = {"idle": "idle", "busy": "busy (a spin loop)",
             "pulsing": "100 us on, 100 off"}  # fmt: skip
    _table(seen, "idle", names, 22, 0)


PAUSE_SECONDS = 200e-6
PAUSES = ("none", "busy", "sleep", "fsync")


def task_batches(n: int) -> tuple[list[bytes], list[list[dict[str, object]]]]:
    """For ``n`` tasks: each one's enqueue line, and the batch the daemon writes for it
    (its enqueue, the previous task's success, its claim), stamped with seqs."""
    import orjson

    from snerd.projections.commands import Claim, Enqueue, Finish
    from snerd.projections.decide import decide, planned_claims
    from snerd.projections.events import decode
    from snerd.projections.state import empty, fold_events

    state, seq, now = empty(), 0, time.time()
    lines: list[bytes] = []
    batches: list[list[dict[str, object]]] = []
    running: tuple[str, int] | None = None
    for i in range(n):
        data = orjson.dumps({"n": i}).decode()
        lines.append(orjson.dumps({"action": "enqueue", "task_id": f"t{i}",
                                   "task_type": "bench", "task_data": data}))  # fmt: skip
        records = list(decide(state, Enqueue(f"t{i}", "bench", task_data=data), now=now,
                              daemon="d").records)  # fmt: skip
        if running is not None:
            records += decide(state, Finish(running[0], running[1], True), now=now,
                              daemon="d").records  # fmt: skip
        state = fold_events(state, [decode(r) for r in records])[0]
        claim = planned_claims([state.tasks[f"t{i}"]], Claim((f"t{i}",), 3600.0, 1.0),
                               now=now, daemon="d")  # fmt: skip
        records += claim.records
        state = fold_events(state, [decode(r) for r in claim.records])[0]
        running = (f"t{i}", claim.outcome[0][1])
        stamped = []
        for record in records:
            seq += 1
            stamped.append({**record, "seq": seq})
        batches.append(stamped)
    return lines, batches


def work_after(fd: int, pause: str, lines: list[bytes],
               batches: list[list[dict[str, object]]]) -> list[float]:  # fmt: skip
    """Seconds of each task's work (parse its line, fold its batch) after ``pause``."""
    from snerd.projections.events import decode
    from snerd.projections.state import empty, fold_events
    from snerd.rpc.protocol import parse_line

    clock, state, took = time.perf_counter, empty(), []
    for line, batch in zip(lines, batches, strict=True):
        if pause == "busy":
            end = clock() + PAUSE_SECONDS
            while clock() < end:
                pass
        elif pause == "sleep":
            time.sleep(PAUSE_SECONDS)
        elif pause == "fsync":
            os.write(fd, b"x" * 299 + b"\n")
            os.fsync(fd)
        start = clock()
        parse_line(line)
        state = fold_events(state, [decode(r) for r in batch])[0]
        took.append(clock() - start)
    return took


def after(directory: str, rounds: int, n: int = 2000) -> None:
    """Print ``--after``'s table: a task's work after each kind of wait."""
    lines, batches = task_batches(n)
    seen = _interleaved(directory, "after.log", PAUSES, rounds,
                        lambda fd, pause: work_after(fd, pause, lines, batches))  # fmt: skip
    print(f"one task's work of the pure core (parse its enqueue line, fold its batch of 3 "
          f"records) right after a wait; {n} tasks a kind, medians of {rounds} interleaved "
          "rounds, ratios against back to back")  # fmt: skip
    print(f"{'wait before':>22}{'mean':>18}{'p50':>18}{'p90':>18}")
    names = {"none": "none", "busy": "200 us busy", "sleep": "200 us sleep",
             "fsync": "append + fsync"}  # fmt: skip
    _table(seen, "none", names, 22, 1)


OVERLAP_WORK_US = 60
"""Busy work before each append and after it (the fold) in ``--overlap``."""

PLACES = ("inline", "thread", "process", "aio", "uring")


class _IoUring:
    """One ``IORING_OP_FSYNC`` at a time through io_uring (raw syscalls via ctypes, the
    rings through ``mmap``; x86-64 only: the ring's stores are plain, so the order of
    its head and tail updates is the machine's, which x86's total store order keeps).
    The kernel punts an fsync to a worker thread of its own (``iou-wrk``), which any
    CPU may run: unlike kernel AIO's per-CPU work item, it need not share the loop's."""

    _SETUP, _ENTER, _GETEVENTS = 425, 426, 1  # io_uring_setup, io_uring_enter, its flag

    def __init__(self, fd: int) -> None:
        import ctypes
        import mmap
        import platform
        import struct

        if platform.machine() != "x86_64":
            raise OSError(f"the io_uring probe is x86-64 only, not {platform.machine()}")
        self._ct, self._struct, self._fd = ctypes, struct, fd
        self._syscall = ctypes.CDLL(None, use_errno=True).syscall
        self._syscall.restype = ctypes.c_long
        params = ctypes.create_string_buffer(120)  # struct io_uring_params
        ring = self._syscall(self._SETUP, ctypes.c_uint(4), params)
        if ring < 0:
            raise OSError(ctypes.get_errno(), "io_uring_setup")
        self._ring_fd = ring
        sq_entries, cq_entries = struct.unpack_from("<II", params, 0)
        if not struct.unpack_from("<I", params, 20)[0] & 1:  # IORING_FEAT_SINGLE_MMAP
            os.close(ring)
            raise OSError("io_uring without one map for both rings (a kernel before 5.4)")
        # io_sqring_offsets at 40: head, tail, ring_mask, ring_entries, flags, dropped,
        # array; io_cqring_offsets at 80: head, tail, ring_mask, ring_entries, overflow, cqes
        _, sq_tail, sq_mask, _, _, _, sq_array = struct.unpack_from("<7I", params, 40)
        cq_head, cq_tail, cq_mask, _, _, cqes = struct.unpack_from("<6I", params, 80)
        size = max(sq_array + 4 * sq_entries, cqes + 16 * cq_entries)
        shared, rw = mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE
        self._rings = mmap.mmap(ring, size, shared, rw, offset=0)  # one map: SINGLE_MMAP
        self._sqes = mmap.mmap(ring, 64 * sq_entries, shared, rw, offset=0x10000000)
        self._words = words = memoryview(self._rings).cast("I")
        self._sq_tail, self._cq_head, self._cq_tail = sq_tail // 4, cq_head // 4, cq_tail // 4
        self._sq_mask, self._cq_mask, self._cqes = words[sq_mask // 4], words[cq_mask // 4], cqes
        for i in range(sq_entries):
            words[sq_array // 4 + i] = i

    def submit(self) -> None:
        tail = self._words[self._sq_tail]
        # struct io_uring_sqe: opcode 3 (FSYNC), flags, ioprio, fd, off, addr, len,
        # fsync_flags, user_data; the rest zero
        self._struct.pack_into("<BBHiQQIIQ24x", self._sqes, 64 * (tail & self._sq_mask),
                               3, 0, 0, self._fd, 0, 0, 0, 0, 1)  # fmt: skip
        self._words[self._sq_tail] = (tail + 1) & 0xFFFFFFFF
        if self._syscall(self._ENTER, self._ring_fd, 1, 0, 0, None, 0) != 1:
            raise OSError(self._ct.get_errno(), "io_uring_enter")

    def wait(self) -> None:
        words = self._words
        while (head := words[self._cq_head]) == words[self._cq_tail]:
            waited = self._syscall(self._ENTER, self._ring_fd, 0, 1, self._GETEVENTS, None, 0)
            if waited < 0 and self._ct.get_errno() != 4:  # EINTR: again
                raise OSError(self._ct.get_errno(), "io_uring_enter")
        offset = self._cqes + 16 * (head & self._cq_mask)
        result = self._struct.unpack_from("<i", self._rings, offset + 8)[0]  # cqe.res
        words[self._cq_head] = (head + 1) & 0xFFFFFFFF
        if result < 0:
            raise OSError(-result, os.strerror(-result))

    def close(self) -> None:
        self._words.release()
        self._rings.close()
        self._sqes.close()
        os.close(self._ring_fd)


def _machine_cpu() -> float:
    """Seconds of CPU the whole machine has spent (every CPU, all but idle and iowait)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def overlapped(fd: int, place: str, n: int) -> tuple[list[float], float]:
    """(seconds of each of ``n`` tasks, machine CPU seconds a task) with the sync placed
    as ``place`` says (one of PLACES; see ``--overlap``)."""
    import queue
    import threading

    clock, line = time.perf_counter, b"x" * 299 + b"\n"

    def busy() -> None:
        until = clock() + OVERLAP_WORK_US / 1e6
        while clock() < until:
            pass

    start_sync: Callable[[], None] = lambda: None  # noqa: E731
    wait_sync: Callable[[], None] = lambda: os.fsync(fd)  # noqa: E731
    stop: Callable[[], None] = lambda: None  # noqa: E731
    if place == "thread":
        asks: queue.SimpleQueue[bool] = queue.SimpleQueue()
        dones: queue.SimpleQueue[bool] = queue.SimpleQueue()

        def syncer() -> None:
            while asks.get():
                os.fsync(fd)
                dones.put(True)

        threading.Thread(target=syncer, daemon=True).start()
        start_sync, wait_sync = lambda: asks.put(True), dones.get
        stop = lambda: asks.put(False)  # noqa: E731
    elif place == "process":
        ask_r, ask_w = os.pipe()
        done_r, done_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the helper: an fsync for every byte asked, until EOF
            os.close(ask_w)
            os.close(done_r)
            while os.read(ask_r, 1):
                os.fsync(fd)
                os.write(done_w, b"k")
            os._exit(0)
        os.close(ask_r)
        os.close(done_w)
        start_sync = lambda: os.write(ask_w, b"s") and None  # noqa: E731
        wait_sync = lambda: os.read(done_r, 1) and None  # noqa: E731

        def stop() -> None:
            os.close(ask_w)
            os.waitpid(pid, 0)
            os.close(done_r)
    elif place == "aio":  # the log's own (``eventlog/aio.py``)
        syncer = open_fsync(fd)
        assert syncer is not None  # (``overlap`` left the place out where there is none)
        start_sync, wait_sync, stop = syncer.submit, syncer.wait, syncer.close
    elif place == "uring":
        uring = _IoUring(fd)
        start_sync, wait_sync, stop = uring.submit, uring.wait, uring.close
    took: list[float] = []
    cpu = _machine_cpu()
    try:
        for _ in range(n):
            begin = clock()
            busy()  # the decisions
            os.write(fd, line)
            start_sync()
            if place != "inline":
                busy()  # the fold, while the sync runs
            wait_sync()
            if place == "inline":
                busy()  # the fold, after it
            took.append(clock() - begin)
    finally:
        stop()
    return took, (_machine_cpu() - cpu) / n


def overlap(directory: str, rounds: int, n: int = 2000) -> None:
    """Print ``--overlap``'s table: a task's time and machine CPU by sync placement."""
    places = list(PLACES)
    probe = os.open(os.devnull, os.O_RDONLY)
    try:
        syncer = open_fsync(probe)
        if syncer is None:
            print("(aio is not available here: no kernel AIO; left out)")
            places.remove("aio")
        else:
            syncer.close()
        try:
            _IoUring(probe).close()
        except OSError as exc:
            print(f"(uring is not available here: {exc}; left out)")
            places.remove("uring")
    finally:
        os.close(probe)
    cpus: dict[str, list[float]] = {place: [] for place in places}

    def measure(fd: int, place: str) -> list[float]:
        took, cpu = overlapped(fd, place, n)
        cpus[place].append(cpu)
        return took

    seen = _interleaved(directory, "overlap.log", places, rounds, measure)
    print(f"a task: {OVERLAP_WORK_US} us of work, an append and its sync, {OVERLAP_WORK_US} us "
          f"of work that may overlap the sync; {n} tasks a placement, medians of {rounds} "
          "interleaved rounds, ratios against inline")  # fmt: skip
    print(f"{'sync':>10}{'mean':>18}{'p50':>18}{'p90':>18}{'machine CPU':>20}")
    base = statistics.median(cpus["inline"]) * 1e6
    for place in places:
        _table({place: seen[place], "inline": seen["inline"]}, "inline", {place: place}, 10, 0,
               end="")  # fmt: skip
        cpu = statistics.median(cpus[place]) * 1e6
        print(f"{f'{cpu:,.0f} us ({cpu / base:.2f}x)':>20}")


EDGES: tuple[tuple[int, int | None], ...] = (
    (0, 60), (60, 70), (70, 80), (80, 100), (100, 150), (150, None)
)  # fmt: skip
"""``--edge``'s bins: microseconds from the last sync's end to a sync's start."""


def gap_pairs(syncs: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Syncs given as (start, end) seconds, in order: for each after the first, (the time
    from the last one's end to its start, its own time), in us."""
    return [((b[0] - a[1]) * 1e6, (b[1] - b[0]) * 1e6) for a, b in itertools.pairwise(syncs)]


def by_gap(pairs: Sequence[tuple[float, float]]) -> list[tuple[str, int, float, float, float]]:
    """``gap_pairs``' pairs sorted by the time since the last sync into :data:`EDGES`:
    (the bin, how many, their p50 and mean in us, the share of them over 200 us), each
    bin that holds any."""
    rows = []
    for lo, hi in EDGES:
        took = [t for gap, t in pairs if gap >= lo and (hi is None or gap < hi)]
        if took:
            label = f"{lo}-{hi} us" if hi is not None else f"{lo}+ us"
            over = sum(t > 200 for t in took) / len(took)
            rows.append((label, len(took), statistics.median(took), statistics.mean(took), over))
    return rows


def _edge_run(storage: Path, n: int) -> tuple[float, list[tuple[float, float]], list[float]]:
    """One embedded run (``--edge``): its rate, each sync's (start, end), and the work run
    under each AIO sync (seconds)."""
    from snerd.eventlog.aio import AioFsync

    clock = time.perf_counter
    syncs: list[tuple[float, float]] = []
    under: list[float] = []
    submitted = [0.0, 0.0]  # the AIO sync under way: its submit's start and end
    real_submit, real_wait, real_fsync = AioFsync.submit, AioFsync.wait, os.fsync

    def submit(syncer: AioFsync) -> None:
        submitted[0] = clock()
        real_submit(syncer)
        submitted[1] = clock()

    def wait(syncer: AioFsync) -> None:
        under.append(clock() - submitted[1])
        real_wait(syncer)
        syncs.append((submitted[0], clock()))

    def fsync(fd: int) -> None:
        start = clock()
        real_fsync(fd)
        syncs.append((start, clock()))

    with (mock.patch.object(AioFsync, "submit", submit),
          mock.patch.object(AioFsync, "wait", wait), mock.patch.object(os, "fsync", fsync)):
        rate = asyncio.run(embedded_run(storage, n, False))
    return rate, syncs, under


BUDGET_SPINS = (0, 20, 40, 80)
"""``--budget``'s busy loops, microseconds of work added under each AIO sync."""


def spin(us: float, clock: Callable[[], float] = time.perf_counter) -> None:
    """Busy-wait ``us`` microseconds by ``clock``: the CPU stays busy, as work keeps it."""
    end = clock() + us * 1e-6
    while clock() < end:
        pass


def _budget_run(storage: Path, n: int, spin_us: float) -> tuple[float, int]:
    """One embedded run (``--budget``) with ``spin_us`` of busy work under each AIO sync:
    its rate, and how many syncs went through AIO (each with the work under it)."""
    from snerd.eventlog.aio import AioFsync

    real_submit = AioFsync.submit
    syncs = 0

    def submit(syncer: AioFsync) -> None:
        nonlocal syncs
        real_submit(syncer)
        syncs += 1
        if spin_us:
            spin(spin_us)

    with mock.patch.object(AioFsync, "submit", submit):
        rate = asyncio.run(embedded_run(storage, n, False))
    return rate, syncs


def budget(directory: str, rounds: int, n: int) -> None:
    """Print ``--budget``'s table: the embedded queue's rate with more work under its sync."""
    rates: dict[int, list[float]] = {us: [] for us in BUDGET_SPINS}
    with tempfile.TemporaryDirectory(dir=directory, prefix="snerd-budget-") as raw_tmp:
        for round_ in range(rounds):
            for us in BUDGET_SPINS:
                rate, syncs = _budget_run(Path(raw_tmp) / f"s{round_}-{us}", n, us)
                if not syncs:
                    print("no sync went through kernel AIO here (every one an fsync, the "
                          "fold after it): nothing runs under the sync to add to")  # fmt: skip
                    return
                rates[us].append(rate)
    print(f"the embedded queue (bench_hotpath (5): sequential awaited enqueues, {n} tasks, "
          f"{rounds} interleaved rounds, medians) with busy work added under each AIO sync")
    base = statistics.median(rates[0])
    for us, seen in rates.items():
        rate = statistics.median(seen)
        print(f"{us:>6} us more: {rate:>8,.0f} tasks/s ({rate / base:.2f}x)  period "
              f"{1e6 / rate:>4.0f} us  [{min(seen):,.0f}..{max(seen):,.0f}]")


def edge(directory: str, rounds: int, n: int) -> None:
    """Print ``--edge``'s table: the embedded queue's syncs by the time since the last."""
    pairs: list[tuple[float, float]] = []
    under: list[float] = []
    rates: list[float] = []
    with tempfile.TemporaryDirectory(dir=directory, prefix="snerd-edge-") as raw_tmp:
        for round_ in range(rounds):
            rate, seen, worked = _edge_run(Path(raw_tmp) / f"s{round_}", n)
            rates.append(rate)
            pairs.extend(gap_pairs(seen[100:]))  # (past the start-up; no pair across runs)
            under.extend(worked[100:])
    print(f"the embedded queue's syncs (bench_hotpath (5): sequential awaited enqueues, {n} "
          f"tasks, {rounds} rounds), by the time from the last sync's end to their start")
    print(f"{'time since the last':>22}{'share':>8}{'sync p50':>11}{'mean':>9}{'over 200 us':>13}")
    rows = by_gap(pairs)
    total = sum(row[1] for row in rows) or 1
    for label, count, p50, mean, over in rows:
        print(f"{label:>22}{count / total:>8.0%}{p50:>8.0f} us{mean:>6.0f} us{over:>13.0%}")
    gaps_ = [gap for gap, _ in pairs]
    print(f"time between syncs, p50: {statistics.median(gaps_):.0f} us; "
          + (f"work under an AIO sync, p50: {statistics.median(under) * 1e6:.0f} us; "
             if under else "no AIO sync (every sync an fsync); ")
          + f"rate {statistics.median(rates):,.0f} tasks/s (median of {rounds})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=str(REPO.parent))
    parser.add_argument("--gaps", action="store_true",
                        help="an fsync's cost against the work before it, alone")  # fmt: skip
    parser.add_argument(
        "--syncs",
        action="store_true",
        help="append + fsync against fdatasync and an overwrite in place",
    )
    parser.add_argument("--after", action="store_true",
                        help="a task's work of the core against the wait before it")  # fmt: skip
    parser.add_argument("--overlap", action="store_true",
                        help="the work after a write run while its sync runs, or after")
    parser.add_argument("--neighbour", action="store_true",
                        help="an fsync's cost against what the other CPU does")  # fmt: skip
    parser.add_argument("--edge", action="store_true",
                        help="the embedded queue's syncs by the time since the last")
    parser.add_argument("--budget", action="store_true",
                        help="the embedded queue's rate with 0-80 us more work under its sync")
    parser.add_argument("--compiled", action="store_true",
                        help="run in a copy of this tree built as pip install . builds it")
    args = parser.parse_args(argv)
    if args.compiled:
        from benchmarks import trees

        trees.rerun_compiled(args.dir, "benchmarks.bench_fsync")
    if args.edge:
        edge(args.dir, args.rounds, args.tasks)
        return
    if args.budget:
        budget(args.dir, args.rounds, args.tasks)
        return
    modes = {"overlap": overlap, "after": after, "gaps": gaps, "syncs": sync_ways,
             "neighbour": neighbour}  # fmt: skip
    for name, run in modes.items():
        if getattr(args, name):
            run(args.dir, args.rounds)
            return
    n = args.tasks
    os.environ["PYTHONPATH"] = str(REPO)
    figures: dict[str, dict[str, list[float]]] = {p: {} for p in PLACEMENTS}
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="snerd-fsync-") as raw_tmp:
        tmp = Path(raw_tmp)
        daemons = {p: _shim(tmp, f"ours-{p}", code + OURS) for p, code in PLACEMENTS.items()}
        for round_ in range(args.rounds):
            for placement, prelude in PLACEMENTS.items():
                rate, cpu = asyncio.run(sdk_run(daemons[placement], tmp / f"s{placement}{round_}",
                                                n, True))  # fmt: skip
                runs = figures[placement]
                runs.setdefault("sdk", []).append(rate)
                runs.setdefault("cpu", []).append(cpu / n * 1e3)
                for concurrent in (False, True):
                    key = "concurrent" if concurrent else "sequential"
                    storage = tmp / f"e{placement}{key}{round_}"
                    runs.setdefault(key, []).append(_embedded(prelude, storage, n, concurrent))
    med = {p: {k: statistics.median(v) for k, v in runs.items()} for p, runs in figures.items()}
    base = med["inline"]
    print(f"fsync placement, {n} tasks, medians of {args.rounds} interleaved rounds "
          "(ratios against inline; above 1 is better, but for CPU)")  # fmt: skip
    print(f"{'placement':10}{'SDK enqueues/s':>22}{'daemon CPU a task':>22}"
          f"{'embedded sequential':>24}{'embedded concurrent':>24}")  # fmt: skip
    for placement, got in med.items():
        cells = [
            f"{got['sdk']:,.0f} ({got['sdk'] / base['sdk']:.2f}x)",
            f"{got['cpu']:.3f} ms ({got['cpu'] / base['cpu']:.2f}x)",
            f"{got['sequential']:,.0f} ({got['sequential'] / base['sequential']:.2f}x)",
            f"{got['concurrent']:,.0f} ({got['concurrent'] / base['concurrent']:.2f}x)",
        ]
        print(f"{placement:10}" + "".join(f"{c:>22}" if i < 2 else f"{c:>24}"
                                          for i, c in enumerate(cells)))  # fmt: skip


if __name__ == "__main__":
    main()
