"""The sidecar daemon: ``snerdmq [STORAGE_DIR]`` speaks NDJSON on stdin/stdout.

Nothing but protocol lines goes to stdout; diagnostics go to stderr. One
:class:`Session` per process: it registers task types, turns inbound commands into
engine calls, and is the stdio executor that sends ``execute`` lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

import orjson

from snerd.dispatcher.clock import Clock, ManualClock, SystemClock
from snerd.dispatcher.engine import Engine
from snerd.dispatcher.executors import Outcomes, Run
from snerd.dispatcher.settings import engine_config
from snerd.errors import LogError, ProtocolError, SnerdError
from snerd.eventlog.base import EventLog, Record
from snerd.eventlog.batching import GIVE_UP_SECONDS
from snerd.eventlog.storage import open_liveness, open_log, redact
from snerd.projections import events as ev
from snerd.rpc import logs
from snerd.rpc import protocol as p
from snerd.rpc.handlers import answer, answer_enqueue, answer_progress, answer_result
from snerd.rpc.output import Lines, Output, open_input

log = logging.getLogger("snerd.daemon")

DEFAULT_STORAGE = ".snerdata"
CLOCK_ACTION = "_clock"  # test-only, enabled by SNERD_TEST_CLOCK

SUCCESS_WAIT_SECONDS = 0.0005
"""Longest a read of nothing but successful results waits for the SDK's next line
before its batch is written (:func:`_kick`)."""


class Session:
    """The stdio SDK on the other end of the pipes: executor and notice listener."""

    def __init__(self, out: Output) -> None:
        self.out = out
        self.registered: set[str] = set()
        self.engine: Engine | None = None
        self.successes = 0  # the read being handled: its successful results,
        self.others = 0  # and its other lines
        self.waiting: asyncio.TimerHandle | None = None  # a read of successes waits

    # executor ------------------------------------------------------------------------

    @property
    def task_types(self) -> Collection[str]:
        return self.registered

    def accepts(self, task_type: str, webhook_url: str | None) -> bool:
        return task_type in self.registered and not webhook_url

    def start(self, run: Run, outcomes: Outcomes) -> None:
        line = p.execute(
            run.task.id, run.task.type, run.task.data, attempt=run.attempt,
            max_execution_seconds=run.task.max_execution_seconds,
        )  # fmt: skip
        self.out.write(line)

    def stop(self, run: Run) -> None:
        return None  # the SDK has no way to stop a handler; its late result is refused

    # listener ------------------------------------------------------------------------

    def forward_progress(self, command: p.Progress) -> None:
        """Echo an SDK's progress at once (its dashboard listens for it), in order with
        its result: the record in the log follows."""
        run = self.engine.runs.get(command.task_id) if self.engine else None
        if run is not None and run.executor is self:
            self.out.write(p.progress(command.task_id, command.data, task_type=run.task.type))

    def on_progress(self, task_id: str, task_type: str | None, data: Any, local: bool) -> None:
        return None  # our own SDK's progress is echoed by forward_progress

    def on_dead_letter(self, record: Record) -> None:
        line = p.max_retries_reached(
            str(record.get(ev.F_TASK_ID)),
            str(record.get(ev.F_TASK_TYPE)),
            str(record.get(ev.F_TASK_DATA)),
            reason=str(record.get(ev.F_REASON)),
            last_error=record.get(ev.F_LAST_ERROR_TEXT),
            retry_count=int(record.get(ev.F_RETRY_COUNT) or 0),
        )
        self.out.write(line)

    async def close(self) -> None:
        await self.out.drain()


def _handle_safely(line: bytes, session: Session, engine: Engine, clock: Clock) -> None:
    """:func:`_handle`, and any exception becomes an ``internal_error`` reply: no line,
    whatever it holds, can end the reader (only EOF does)."""
    try:
        if _handle(line, session, engine, clock):
            session.successes += 1
        else:
            session.others += 1
    except Exception as exc:
        session.others += 1
        log.exception("internal error on an input line of %d bytes", len(line))
        message = f"internal error: {type(exc).__name__}"
        session.out.write(p.error(message, code=p.INTERNAL_ERROR))


def _clock_command(line: bytes) -> float | None:
    """The seconds of a test-only ``_clock`` line, else None."""
    try:
        message = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(message, dict) or message.get("action") != CLOCK_ACTION:
        return None
    seconds = message.get("advance")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        return None  # then refused as an unknown action, like any malformed line
    return float(seconds)


def _handle(line: bytes, session: Session, engine: Engine, clock: Clock) -> bool:
    """Act on one line; return whether it was a successful ``result``."""
    if not line.strip():
        return False
    if isinstance(clock, ManualClock) and (seconds := _clock_command(line)) is not None:
        clock.advance(seconds)
        engine.wake()
        return False
    try:
        command = p.parse_line(line)
    except ProtocolError as exc:
        session.out.write(p.error_from(exc))
        return False
    if isinstance(command, p.Register):
        session.registered.add(command.task_type)
        engine.wake()
        return False
    if isinstance(command, p.Enqueue):
        answer_enqueue(command, engine, session.out)
        return False
    if isinstance(command, p.Result):
        answer_result(command, engine, session.out)
        return command.success
    if isinstance(command, p.Progress):
        session.forward_progress(command)
        answer_progress(command, engine, session.out)
        return False
    asyncio.get_running_loop().create_task(answer(command, engine, session.out))
    return False


def _hold(file_log: EventLog, out: Output, session: Session) -> None:
    """A read's lines are about to be handled: what they submit and write waits for
    :func:`_kick`, which follows in the same call (nothing is scheduled in between)."""
    session.successes = session.others = 0
    file_log.hold()
    out.hold()


def _kick(file_log: EventLog, out: Output, session: Session) -> None:
    """A read's lines are handled: what they submitted runs now (its batch, the ack),
    not on the loop's next turn, and the lines it wrote (``execute`` lines, replies)
    leave now too. A failure there is the writer's, never the reader's.

    A read of nothing but successful results waits up to SUCCESS_WAIT_SECONDS for the
    next read, whose batch it then joins: an SDK awaiting each enqueue sends a task's
    result and its next enqueue apart, and the result read alone was a batch of its
    own (a lock hold, a write, a fold), with the enqueue waiting behind it (38% of the
    tasks under the official SDK; ``benchmarks/README.md``, fourteenth session). A
    success is no promise to anyone (``specs/protocol.md`` §4.1); what else is
    submitted meanwhile (a dispatcher pass) waits with it, for as long."""
    if session.successes and not session.others:
        if session.waiting is None:
            loop = asyncio.get_running_loop()
            session.waiting = loop.call_later(SUCCESS_WAIT_SECONDS, _waited, file_log, session)
        out.flush()
        return
    if session.waiting is not None:
        session.waiting.cancel()
        session.waiting = None
    _start(file_log)
    out.flush()


def _waited(file_log: EventLog, session: Session) -> None:
    """No line came after a read of successes: write them now."""
    session.waiting = None
    _start(file_log)


def _start(file_log: EventLog) -> None:
    try:
        file_log.kick()
    except Exception:
        log.exception("the log's writer failed to start")


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
    holds once started is set aside from the collector's passes (:func:`_set_aside`)."""
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
    if own_process:  # no pass until what the start holds is set aside
        gc.disable()
    try:
        await engine.start()
    finally:
        if own_process:
            _set_aside()
    cleanup = None if extend is None else await extend(engine, env)
    def too_long() -> None:
        message = f"line exceeds {p.MAX_LINE_BYTES} bytes"
        session.out.write(p.error(message, code=p.LINE_TOO_LONG))

    lines = Lines(lambda line: _handle_safely(line, session, engine, clock), too_long,
                  p.MAX_LINE_BYTES, before=lambda: _hold(file_log, out, session),
                  after=lambda: _kick(file_log, out, session))  # fmt: skip
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


def _set_aside() -> None:
    """After the start-up replay, which ran with the collector off: freeze what the
    process holds (the modules, the replayed state) out of every later pass, then turn
    the collector on. Its passes walk the objects of their generation: with a backlog
    of 50,000 live tasks replayed at start, the first pass after the replay took 54 ms
    and each full one 58-77 ms, five in 5,000 tasks (pauses between two tasks;
    ``benchmarks/README.md``). What is frozen is still freed when nothing refers to it
    (reference counting); only a cycle among it would outlive its use (no pass first:
    one over the whole replayed state costs what it saves, ~100 ms for 50,000 tasks, to
    free the few hundred objects the imports leave in cycles)."""
    gc.freeze()
    gc.enable()


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
