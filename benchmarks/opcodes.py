"""Python opcodes a task, by part, module and function: where the interpreter's work goes.

    python -m benchmarks.opcodes [--path sequential|concurrent|daemon] [--tasks N] [--top K]

Counts every bytecode instruction the interpreter executes (``sys.settrace`` with
``f_trace_opcodes``) over two runs of one of ``bench_hotpath``'s paths, at a third of
N tasks and at N, and prints the difference over the difference in tasks: a task's
opcodes, start-up and shutdown cancelled out. The paths:

* ``sequential``: the embedded queue, each enqueue awaited (issue 8's (5) sequential);
* ``concurrent``: the embedded queue, all enqueues gathered ((5) concurrent);
* ``daemon``: our daemon under (2)'s blocking client, which runs each task (the daemon
  traced, the client not).

The count is exact for the bytecode and blind to C (``orjson``, BLAKE2b, the state's
maps, the event loop's C parts, system calls): ``bench_hotpath --instructions`` counts
those, by callgrind, without the split. Opcodes differ in cost (a slot load is a few
nanoseconds, a call or a dict build far more), so a function's share here bounds what
rewriting it could save rather than measuring it.

The parts: **core** is the pure core (``projections/``, the log's checksum chain and
record codec: what a native core would replace); **generated** the constructors and
copies ``dataclasses`` and ``projections/slots.py`` generate (``<string>``: the core's
tasks and states, and the wire's and engine's frozen dataclasses); **glue** the rest of
snerd (the engine, the logs, the dispatcher, the executors, the daemon, the wire);
**libraries** the installed ones' Python code (``pyrsistent``, ``croniter``, ...);
**stdlib** Python's own modules (asyncio above all); **other** this benchmark's driver.

Tracing slows a run about twentyfold, so the runs push housekeeping (compaction, which
a run at full speed does not reach) out of their span: it would count as a task's work.
Not a timed test; no figure here is compared with a baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPO = Path(__file__).resolve().parents[1]
PATHS = ("sequential", "concurrent", "daemon")
PARTS = ("core", "generated", "glue", "libraries", "stdlib", "other")
HOUSEKEEPING_SECONDS = 3600.0
"""Housekeeping's period in a traced run: beyond any run's end."""

_CORE_FILES = ("eventlog/chain.py", "eventlog/codec.py")
_STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()


Counts = collections.Counter[tuple[str, str]]
"""Opcodes executed, by (module, function)."""


def module_of(filename: str) -> str:
    """A code object's file as this report names it: its path in the repo, symlinks
    resolved (``projections/apply.py``, ``snerd/daemon.py``); ``stdlib:<path>`` for
    Python's own modules; ``site:<name>`` for an installed library's; ``<string>`` and
    the like for generated or frozen code."""
    if filename.startswith("<"):
        return filename
    path = Path(filename).resolve()
    for i, part in enumerate(path.parts):  # first: a virtualenv may sit in the repo
        if part in ("site-packages", "dist-packages"):
            return "site:" + "/".join(path.parts[i + 1 :])
    for root, prefix in ((_STDLIB, "stdlib:"), (REPO, "")):
        if path.is_relative_to(root):
            return prefix + path.relative_to(root).as_posix()
    return "site:" + path.name


def part_of(module: str) -> str:
    """Which of :data:`PARTS` a module (as :func:`module_of` names it) belongs to."""
    if module.startswith("projections/") or module in _CORE_FILES:
        return "core"
    if module == "<string>":
        return "generated"
    if module.startswith(("stdlib:", "<frozen")):
        return "stdlib"
    if module.startswith("site:"):
        return "libraries"
    if module.startswith(("benchmarks/", "<")):
        return "other"
    return "glue"


class Tracer:
    """Counts opcodes by (module, function) while installed (this thread only)."""

    def __init__(self) -> None:
        self.counts: Counts = collections.Counter()
        self._modules: dict[str, str] = {}

    def _trace(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            module = self._modules.get(code.co_filename)
            if module is None:
                module = self._modules[code.co_filename] = module_of(code.co_filename)
            self.counts[(module, code.co_name)] += 1
        return self._trace

    def __enter__(self) -> Tracer:
        sys.settrace(self._trace)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(None)


def _probe_loop(k: int) -> int:
    total = 0
    for i in range(k):
        total += i
    return total


def opcodes_traced() -> bool:
    """Whether this interpreter delivers the opcode events :class:`Tracer` turns on
    (CPython 3.12.1 delivered none to a trace function that turns them on at the call:
    every count read 0)."""
    with Tracer() as tracer:
        _probe_loop(3)
    return sum(tracer.counts.values()) > 0


def per_task(small: Counts, large: Counts, tasks: int) -> dict[tuple[str, str], float]:
    """Opcodes a task by (module, function): ``large - small`` over ``tasks`` (the
    difference in tasks between the two runs); keys of either run, negatives kept (a
    function the smaller run alone ran, such as a housekeeping round)."""
    keys = set(small) | set(large)
    return {key: (large.get(key, 0) - small.get(key, 0)) / tasks for key in keys}


def totals(rows: Mapping[tuple[str, str], float], by: Callable[[str], str]) -> dict[str, float]:
    """The rows added up by ``by(module)``, largest first."""
    out: dict[str, float] = collections.defaultdict(float)
    for (module, _), value in rows.items():
        out[by(module)] += value
    return dict(sorted(out.items(), key=lambda item: -item[1]))


# ------------------------------------------------------------------------------ runs


def _embedded(n: int, concurrent: bool) -> Counts:
    import snerd.embedded as embedded
    from benchmarks.bench_hotpath import embedded_run
    from snerd.dispatcher.engine import EngineConfig

    def config(**kwargs: Any) -> EngineConfig:
        return EngineConfig(**{"housekeeping_seconds": HOUSEKEEPING_SECONDS, **kwargs})

    namespace = vars(embedded)  # the name the queue builds its config with
    built = namespace["EngineConfig"]
    namespace["EngineConfig"] = config
    try:
        with tempfile.TemporaryDirectory(prefix="snerd-opcodes-") as tmp:
            tracer = Tracer()

            async def run() -> None:
                with tracer:
                    await embedded_run(Path(tmp) / "e", n, concurrent)

            asyncio.run(run())
            return tracer.counts
    finally:
        namespace["EngineConfig"] = built


_TRACED_DAEMON = """
import json, sys
sys.path.insert(0, {repo!r})
from benchmarks.opcodes import Tracer
tracer = Tracer()
try:
    with tracer:
        from snerd.daemon import main
        main()
finally:
    with open({out!r}, "w") as f:
        json.dump([[m, fn, c] for (m, fn), c in tracer.counts.items()], f)
"""


def _daemon(n: int) -> Counts:
    from benchmarks.bench_hotpath import stdio_blocking

    with tempfile.TemporaryDirectory(prefix="snerd-opcodes-") as tmp:
        out = Path(tmp) / "counts.json"
        code = _TRACED_DAEMON.format(repo=str(REPO), out=str(out))
        before = os.environ.get("SNERD_HOUSEKEEPING_SECONDS")
        os.environ["SNERD_HOUSEKEEPING_SECONDS"] = str(HOUSEKEEPING_SECONDS)
        try:
            asyncio.run(stdio_blocking([sys.executable, "-c", code, str(Path(tmp) / "s")], n,
                                       handler=True))  # fmt: skip
        finally:
            if before is None:
                os.environ.pop("SNERD_HOUSEKEEPING_SECONDS", None)
            else:
                os.environ["SNERD_HOUSEKEEPING_SECONDS"] = before
        rows = json.loads(out.read_text())
        return collections.Counter({(m, fn): c for m, fn, c in rows})


def count(path: str, n: int) -> Counts:
    """One traced run of ``path`` with ``n`` tasks."""
    if path == "daemon":
        return _daemon(n)
    return _embedded(n, path == "concurrent")


# ---------------------------------------------------------------------------- report


def report(path: str, n: int, top: int) -> list[str]:
    small_n = max(1, n // 3)
    rows = per_task(count(path, small_n), count(path, n), n - small_n)
    total = sum(rows.values())
    lines = [f"opcodes a task, path {path} ({n:,} - {small_n:,} tasks): {total:,.0f}"]
    for part, value in totals(rows, part_of).items():
        lines.append(f"  {part:<10} {value:8,.0f}  ({value / total:5.1%})")
    lines.append("by module:")
    for module, value in list(totals(rows, lambda m: m).items())[:top]:
        lines.append(f"  {value:8,.1f}  {module}  [{part_of(module)}]")
    lines.append(f"by function (the {top} largest):")
    ranked = sorted(rows.items(), key=lambda item: -item[1])[:top]
    for (module, function), value in ranked:
        lines.append(f"  {value:8,.1f}  {module}:{function}")
    return lines


def _parse(argv: Iterable[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--path", choices=PATHS, default="sequential")
    p.add_argument("--tasks", type=int, default=900)
    p.add_argument("--top", type=int, default=30)
    return p.parse_args(None if argv is None else list(argv))


def main(argv: Iterable[str] | None = None) -> None:
    args = _parse(argv)
    if not opcodes_traced():
        sys.exit(f"opcodes: Python {sys.version.split()[0]} delivers no opcode events to "
                 "a trace function: counts would all read 0 (run it on 3.11 or 3.13)")
    print("\n".join(report(args.path, args.tasks, args.top)))


if __name__ == "__main__":
    main()
