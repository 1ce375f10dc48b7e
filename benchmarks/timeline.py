"""Where a task's time goes on the SDK's path: one run's timeline, as medians per task.

    python -m benchmarks.timeline [--tasks N] [--dir DIR]

``bench_hotpath`` (1) says how fast the official SDK's awaited enqueues run on our
daemon against a floor; this says where each task's period goes, to direct the work on
it. It drives our daemon (a registered no-op handler, as in (1)) with the SDK, and in
both processes wraps ``os.read``, ``os.write`` and ``os.fsync`` (which the daemon, the
SDK and asyncio's pipe transports call) to record each call's start and end on the
monotonic clock the two processes share, and the calling thread's CPU time. Each task's
cycle runs from one ack to the next, in segments:

- the SDK: from the end of our ack's write to our read of its next enqueue (it wakes,
  handles the ack and the ``execute``, runs the handler, writes the result and the next
  enqueue; two pipe hops);
- ours before the write: from that read to the log write the ``fsync`` follows (reading
  the lines, deciding, folding, claiming, stamping);
- the write and the ``fsync``;
- ours after the ``fsync``: to the start of the ack's write (the batch's futures and
  callbacks; encoding the ack and the ``execute``);
- the ack's write.

and how often the SDK read our ``execute`` before it wrote its next enqueue: it then
parses it and starts the handler first (it dispatches each line it reads as a task, in
order), which lengthens its turn, the SDK's work, against the cycles in which it read
the ``execute`` only after.

It prints each segment's median (us) and its share of the median period, our daemon's
CPU in its segments, and the SDK's split. Our CPU in the SDK's segment (the last
task's fold after its ack, its ``execute``, its ``result``) tells who waits: as long as
the segment, and the daemon never waited for the SDK, whose turn ran inside our work
(the period is then our CPU a task plus the ``fsync``); shorter, and it did. Nothing
here is a goal: the probes cost about a microsecond a call, so the period is a little
longer than in ``bench_hotpath``.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import bisect
import contextlib
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPO = Path(__file__).resolve().parents[1]
ENV = "SNERD_TIMELINE"
"""Where the probed daemon writes its calls at exit."""


class Call(NamedTuple):
    start: int  # ns, CLOCK_MONOTONIC (perf_counter_ns): the same clock in both processes
    end: int
    cpu: int  # ns of the calling thread's CPU time, at the start
    cpu_end: int
    op: str  # "R" read, "W" write, "F" fsync
    fd: int
    tag: str  # "ack", "ack+execute", "execute", "enqueue" or "" (what the bytes hold)


def _tag(data: bytes) -> str:
    execute = b'"action":"execute"' in data
    if b'"action":"ack"' in data:
        return "ack+execute" if execute else "ack"
    if execute:
        return "execute"
    if b'"enqueue"' in data:
        return "enqueue"
    return ""


def probe_os(calls: list[Call]) -> Callable[[], None]:
    """Record every ``os.read``, ``os.write`` and ``os.fsync`` of this process in
    ``calls``; return the function that takes the probes out."""
    read, write, fsync = os.read, os.write, os.fsync
    now, cpu = time.perf_counter_ns, time.thread_time_ns

    def probed_read(fd: int, n: int) -> bytes:
        start, c = now(), cpu()
        data = read(fd, n)
        calls.append(Call(start, now(), c, cpu(), "R", fd, _tag(data)))
        return data

    def probed_write(fd: int, data: Any) -> int:
        start, c = now(), cpu()
        written = write(fd, data)
        calls.append(Call(start, now(), c, cpu(), "W", fd, _tag(bytes(data))))
        return written

    def probed_fsync(fd: Any) -> None:
        start, c = now(), cpu()
        fsync(fd)
        calls.append(Call(start, now(), c, cpu(), "F", fd, ""))

    os.read, os.write, os.fsync = probed_read, probed_write, probed_fsync

    def undo() -> None:
        os.read, os.write, os.fsync = read, write, fsync

    return undo


def dump(calls: list[Call], path: str) -> None:
    Path(path).write_text(repr([tuple(c) for c in calls]))


DAEMON = (
    "import atexit, os\n"
    "from benchmarks.timeline import dump, probe_os\n"
    "calls = []\n"
    "probe_os(calls)\n"
    f"atexit.register(dump, calls, os.environ['{ENV}'])\n"
    "import sys; from snerd.daemon import main; sys.exit(main())\n"
)


class Cycle(NamedTuple):
    sdk: float  # us: our ack written -> our read of the next enqueue
    before: float  # that read -> the log write
    durable: float  # the write and the fsync
    after: float  # the fsync's end -> the ack's write
    ack: float  # the ack's write
    period: float  # ack to ack
    cpu_before: float  # our CPU in ``before``
    cpu_after: float  # and in ``after``
    cpu_durable: float  # and in ``durable``: the kernel's work in the write and the fsync
    cpu_sdk: float  # and in ``sdk``: as long as ``sdk`` when we never wait for the SDK
    sdk_wake: float  # our ack written -> the SDK's read of it
    sdk_work: float  # the SDK's read of the ack -> its write of the next enqueue
    sdk_back: float  # that write -> our read of it
    sdk_execute: bool  # the SDK read our ``execute`` before it wrote the next enqueue


def cycles(daemon: list[Call], sdk: list[Call]) -> list[Cycle]:
    """Each task's cycle, from one ack to the next; a cycle that does not match the
    usual shape (one read of the enqueue, one fsync, its ack) is left out."""
    acks = [i for i, c in enumerate(daemon) if c.op == "W" and c.tag.startswith("ack")]
    sdk_acks = [c for c in sdk if c.op == "R" and c.tag.startswith("ack")]
    sdk_enqueues = [c for c in sdk if c.op == "W" and c.tag == "enqueue"]
    sdk_executes = [c.start for c in sdk if c.op == "R" and c.tag.endswith("execute")]
    out = []
    for a, b in itertools.pairwise(acks):
        first, last = daemon[a], daemon[b]
        between = daemon[a + 1 : b]
        reads = [c for c in between if c.op == "R" and c.fd == 0 and c.tag == "enqueue"]
        syncs = [c for c in between if c.op == "F"]
        if len(reads) != 1 or len(syncs) != 1:
            continue
        got, sync = reads[0], syncs[0]
        log_writes = [c for c in between if c.op == "W" and c.fd > 2]  # (0-2: the stdio)
        writes = [c for c in log_writes if got.end <= c.start <= sync.start]
        woke = next((c for c in sdk_acks if c.start >= first.end), None)
        sent = next((c for c in sdk_enqueues if woke is not None and c.start >= woke.end), None)
        if not writes or woke is None or sent is None or sent.end > got.start:
            continue
        log_write = writes[-1]
        out.append(Cycle(
            sdk=(got.start - first.end) / 1e3,
            before=(log_write.start - got.end) / 1e3,
            durable=(sync.end - log_write.start) / 1e3,
            after=(last.start - sync.end) / 1e3,
            ack=(last.end - last.start) / 1e3,
            period=(last.start - first.start) / 1e3,
            cpu_before=(log_write.cpu - got.cpu_end) / 1e3,
            cpu_after=(last.cpu - sync.cpu_end) / 1e3,
            cpu_durable=(sync.cpu_end - log_write.cpu) / 1e3,
            cpu_sdk=(got.cpu - first.cpu_end) / 1e3,
            sdk_wake=(woke.start - first.end) / 1e3,
            sdk_work=(sent.start - woke.end) / 1e3,
            sdk_back=(got.start - sent.end) / 1e3,
            sdk_execute=_any_within(sdk_executes, woke.start, sent.start),
        ))  # fmt: skip
    return out


def _any_within(starts: list[int], low: int, high: int) -> bool:
    """Whether any of ``starts`` (sorted) lies in [low, high)."""
    at = bisect.bisect_left(starts, low)
    return at < len(starts) and starts[at] < high


@contextlib.contextmanager
def probed(calls: list[Call]) -> Iterator[None]:
    """:func:`probe_os` for the duration of the block."""
    undo = probe_os(calls)
    try:
        yield
    finally:
        undo()


def run(tmp: Path, n: int) -> tuple[list[Call], list[Call]]:
    """Our daemon, probed, under the SDK (``bench_hotpath``'s run of (1)): its calls and
    the SDK's (during the tasks)."""
    from benchmarks.bench_hotpath import _shim, sdk_run

    os.environ[ENV] = str(tmp / "daemon-calls.txt")
    os.environ["PYTHONPATH"] = str(REPO)
    sdk: list[Call] = []
    binary = _shim(tmp, "probed", DAEMON)
    asyncio.run(sdk_run(binary, tmp / "storage", n, True, during=probed(sdk)))
    daemon = [Call(*c) for c in ast.literal_eval((tmp / "daemon-calls.txt").read_text())]
    return daemon, sdk


def report(found: list[Cycle], n: int) -> None:
    def med(field: str) -> float:
        return float(statistics.median(getattr(c, field) for c in found))

    period = med("period")
    print(f"{len(found)} of {n} tasks in the usual shape; median period {period:.0f} us "
          f"({1e6 / period:,.0f} tasks/s)")  # fmt: skip
    rows = [
        ("the SDK: our ack -> our read of its next enqueue", "sdk", "cpu_sdk"),
        ("  of which: the ack reaches the SDK", "sdk_wake", None),
        ("  of which: the SDK's work (ack, execute, handler, result, enqueue)", "sdk_work", None),
        ("  of which: the enqueue reaches us", "sdk_back", None),
        ("ours: the read -> the log write", "before", "cpu_before"),
        ("the log write and its fsync", "durable", "cpu_durable"),
        ("ours: the fsync's end -> the ack's write", "after", "cpu_after"),
        ("the ack's write", "ack", None),
    ]
    for label, field, cpu in rows:
        value = med(field)
        extra = f"  (our CPU {med(cpu):.0f} us)" if cpu else ""
        print(f"  {label:<70} {value:6.0f} us {value / period:5.0%}{extra}")
    first = [c.sdk_work for c in found if c.sdk_execute]
    later = [c.sdk_work for c in found if not c.sdk_execute]
    print(
        f"the SDK read our execute before writing its next enqueue in {len(first) / len(found):.0%}"
        f" of the cycles: its work {_median(first)} there, {_median(later)} in the others"
    )


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} us" if values else "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--dir", default=str(REPO.parent))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="snerd-timeline-") as raw:
        daemon, sdk = run(Path(raw), args.tasks)
    found = cycles(daemon, sdk)
    if not found:
        sys.exit("timeline: no task cycle in the usual shape (one enqueue read, one fsync)")
    report(found, args.tasks)


if __name__ == "__main__":
    main()
