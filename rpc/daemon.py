"""The sidecar daemon: ``snerdmq [STORAGE_DIR]`` speaks NDJSON on stdin/stdout.

Nothing but protocol lines goes to stdout; diagnostics go to stderr. One
:class:`~snerd.rpc.reader.Session` per process: it registers task types, turns inbound
commands into engine calls (:mod:`snerd.rpc.reader`, line by line), and is the stdio
executor that sends ``execute`` lines. This module assembles the daemon and runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from snerd.dispatcher.clock import Clock, ManualClock, SystemClock
from snerd.dispatcher.engine import Engine, collector_paused
from snerd.dispatcher.settings import engine_config
from snerd.errors import LogError, SnerdError
from snerd.eventlog.batching import GIVE_UP_SECONDS
from snerd.eventlog.storage import open_liveness, open_log, redact
from snerd.projections import events as ev
from snerd.rpc import logs
from snerd.rpc import protocol as p
from snerd.rpc.output import Lines, Output, open_input
from snerd.rpc.reader import Session, handle_line, hold, kick

log = logging.getLogger("snerd.daemon")

DEFAULT_STORAGE = ".snerdata"

Cleanup = Callable[[], Awaitable[object]]
Extension = Callable[[Engine, Mapping[str, str]], Awaitable[Cleanup | None]]
"""What the public face adds to a started daemon (e.g. the dashboard): called with the
engine and the environment once the engine runs; the cleanup it returns (if any) is
awaited after the drain."""


async def serve(
    storage: str, *, env: Mapping[str, str] = os.environ, stdin: Any = None, stdout: Any = None,
    extend: Extension | None = None, own_process: bool = False,
) -> int:  # fmt: skip
    """Run the daemon until stdin closes or a signal drains it; return the exit code.
    ``own_process``: the daemon is all this process runs (:func:`main`), so what it
    holds once started is frozen out of the collector's passes."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    hurried: list[Engine] = []  # the engine, once built: a second signal hurries it

    def on_signal() -> None:
        if stop.is_set():
            for engine in hurried:
                engine.hurry()  # a second signal ends the drain at once
        stop.set()

    # First of all: a signal during start-up (a long replay) drains right after it,
    # instead of killing the process half-started.
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, on_signal)
    clock: Clock = ManualClock(float(env["SNERD_TEST_CLOCK"])) if env.get(
        "SNERD_TEST_CLOCK") else SystemClock()  # fmt: skip
    out = await Output.open(stdout or sys.stdout)
    session = Session(out)
    config = engine_config(env)
    from snerd.dispatcher.notify import Notifier
    from snerd.dispatcher.webhooks import WebhookExecutor

    webhooks = WebhookExecutor()
    file_log = open_log(storage)  # a storage dir, or a postgresql:// URL
    file_log.give_up_seconds = _give_up_seconds(env)
    engine = Engine(
        file_log, executors=[webhooks, session], clock=clock, config=config,
        liveness=open_liveness(storage), notifier=Notifier([session, webhooks]),
    )  # fmt: skip
    session.engine = engine
    hurried.append(engine)
    if own_process:
        # The collector stays off from the start-up replay (which the engine runs with
        # it paused anyway) until what the process then holds, the modules and the
        # replayed state, is frozen out of every later pass. Its passes walk every
        # object of their generation: over a backlog of 50,000 live tasks replayed at
        # start, the first pass after the replay took 54 ms and each full one 58-77 ms,
        # five in 5,000 tasks (pauses between two tasks; ``benchmarks/README.md``). What
        # is frozen is still freed when nothing refers to it; only a cycle among it
        # would outlive its use. (No pass first: one over the replayed state costs
        # ~100 ms for 50,000 tasks, to free the few hundred objects the imports leave in
        # cycles.)
        with collector_paused():
            await engine.start()
            gc.freeze()
    else:
        await engine.start()
    cleanup = None if extend is None else await extend(engine, env)
    def too_long() -> None:
        message = f"line exceeds {p.MAX_LINE_BYTES} bytes"
        session.out.write(p.error(message, code=p.LINE_TOO_LONG))

    # (partials, not lambdas: each is called once or twice a task, and a partial's call
    # runs no interpreted frame)
    handle = functools.partial(handle_line, session=session, engine=engine, clock=clock)
    lines = Lines(handle, too_long, p.MAX_LINE_BYTES,
                  before=functools.partial(hold, file_log, out, session),
                  after=functools.partial(kick, file_log, out, session))  # fmt: skip
    await open_input(stdin or sys.stdin, lines)
    reading = lines.closed  # every line is answered or acted on, none is fatal; EOF ends
    fatal = loop.create_task(file_log.wait_fatal())
    stopping = loop.create_task(stop.wait())
    first: set[asyncio.Future[Any]] = {reading, stopping, fatal}
    await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
    if fatal.done():
        return await _fail_for_good(fatal.result(), out, cleanup, reading, stopping)
    engine.stop_claiming()
    log.info("draining (%s): no new claims", "stdin closed" if reading.done() else "signal")
    draining = loop.create_task(engine.drain())
    then: set[asyncio.Future[Any]] = {reading, draining}
    await asyncio.wait(then, return_when=asyncio.FIRST_COMPLETED)
    if reading.done():  # stdin EOF: no result can come back for what the SDK holds
        with contextlib.suppress(LogError):  # storage down: liveness releases them
            await _release_sent(session, engine)
    try:
        await draining
    except LogError as exc:  # releases could not be written: other daemons release
        log.warning("shutdown with the storage unavailable: %s", exc)  # our claims
    reading.cancel()
    stopping.cancel()
    fatal.cancel()
    if cleanup is not None:
        await cleanup()
    await out.close()
    return 0


async def _fail_for_good(reason: BaseException, out: Output, cleanup: Any,
                         *tasks: asyncio.Future[Any]) -> int:  # fmt: skip
    """The log cannot continue (storage gone or unreadable for too long): say why on
    stderr and exit non-zero, so that the SDK can respawn a daemon."""
    print(f"snerdmq: exiting: {reason}", file=sys.stderr, flush=True)
    for task in tasks:
        task.cancel()
    if cleanup is not None:
        with contextlib.suppress(Exception):
            await cleanup()
    with contextlib.suppress(Exception):
        await out.close()
    return 1


def _give_up_seconds(env: Mapping[str, str]) -> float:
    """``SNERD_STORAGE_GIVE_UP_SECONDS``: how long the log may stay unreadable after a
    storage fault before the daemon exits 1 (default 300)."""
    raw = env.get("SNERD_STORAGE_GIVE_UP_SECONDS", "")
    try:
        value = float(raw) if raw else GIVE_UP_SECONDS
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        log.warning("SNERD_STORAGE_GIVE_UP_SECONDS=%r is not a number >= 0; using %g",
                    raw, GIVE_UP_SECONDS)  # fmt: skip
        return GIVE_UP_SECONDS
    return value


async def _release_sent(session: Session, engine: Engine) -> None:
    """stdin closed: what the SDK was running can never report back; release it."""
    for run in list(engine.runs.values()):
        if run.executor is session:
            await engine.release(run, ev.REASON_DRAIN)


def main(argv: list[str] | None = None, *, extend: Extension | None = None) -> int:
    """Console entry: ``snerdmq [STORAGE_DIR]`` (default ``$SNERD_STORAGE``, else
    ``.snerdata``; :func:`snerd.daemon.main` passes the dashboard as ``extend``)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or (args and args[0].startswith("-")):
        print("usage: snerdmq [STORAGE_DIR]   (or: snerdmq --help for the tools)",
              file=sys.stderr)  # fmt: skip
        return 2
    storage = args[0] if args else os.environ.get("SNERD_STORAGE") or DEFAULT_STORAGE
    logs.configure(os.environ)
    try:
        return asyncio.run(serve(storage, extend=extend, own_process=True))
    except KeyboardInterrupt:
        return 0
    except (OSError, SnerdError) as exc:  # storage missing, unwritable, or locked
        print(f"snerdmq: cannot run on {redact(storage)!r}: {exc}", file=sys.stderr)
        return 1
