"""The sidecar daemon: ``snerdmq [STORAGE_DIR]`` speaks NDJSON on stdin/stdout.

Nothing but protocol lines goes to stdout; diagnostics go to stderr. One
:class:`Session` per process: it registers task types, turns inbound commands into
engine calls, and is the stdio executor that sends ``execute`` lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Mapping
from typing import Any

from snerd.dispatcher.clock import Clock, ManualClock, SystemClock
from snerd.dispatcher.engine import Engine
from snerd.dispatcher.executors import Outcomes, Run
from snerd.dispatcher.settings import engine_config
from snerd.errors import ProtocolError, SnerdError
from snerd.eventlog.base import Record
from snerd.eventlog.filelog import FileLog
from snerd.eventlog.liveness import Liveness
from snerd.projections import events as ev
from snerd.projections.task import Task
from snerd.rpc import protocol as p
from snerd.rpc.handlers import answer
from snerd.rpc.output import Output

log = logging.getLogger("snerd.daemon")

DEFAULT_STORAGE = ".snerdata"
CLOCK_ACTION = "_clock"  # test-only, enabled by SNERD_TEST_CLOCK


class Session:
    """The stdio SDK on the other end of the pipes: executor and notice listener."""

    def __init__(self, out: Output) -> None:
        self.out = out
        self.registered: set[str] = set()
        self.engine: Engine | None = None
        self.sent: dict[str, int] = {}  # task id -> attempt sent to the SDK

    # executor ------------------------------------------------------------------------

    def accepts(self, task: Task) -> bool:
        return task.type in self.registered and not task.webhook_url

    def start(self, run: Run, outcomes: Outcomes) -> None:
        self.sent[run.task.id] = run.attempt
        line = p.execute(
            run.task.id, run.task.type, run.task.data, attempt=run.attempt,
            max_execution_seconds=run.task.max_execution_seconds,
        )  # fmt: skip
        self.out.write(line)

    def stop(self, run: Run) -> None:
        self.sent.pop(run.task.id, None)

    # listener ------------------------------------------------------------------------

    def on_progress(self, task_id: str, task_type: str | None, data: Any, local: bool) -> None:
        if local:
            self.out.write(p.progress(task_id, data, task_type=task_type))

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


async def _read_lines(reader: asyncio.StreamReader, session: Session, engine: Engine,
                      clock: Clock) -> None:  # fmt: skip
    """Read stdin until EOF; every line is answered or acted on, none is fatal."""
    pending = b""
    while True:
        chunk = await reader.read(1 << 16)
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            _handle(line, session, engine, clock)
        if len(pending) > p.MAX_LINE_BYTES:
            session.out.write(p.error(
                f"line longer than {p.MAX_LINE_BYTES} bytes", code=p.LINE_TOO_LONG))  # fmt: skip
            pending = await _skip_line(reader)


async def _skip_line(reader: asyncio.StreamReader) -> bytes:
    while True:
        chunk = await reader.read(1 << 16)
        if not chunk:
            return b""
        if b"\n" in chunk:
            return chunk.split(b"\n", 1)[1]


def _handle(line: bytes, session: Session, engine: Engine, clock: Clock) -> None:
    if not line.strip():
        return
    if isinstance(clock, ManualClock) and CLOCK_ACTION.encode() in line:
        import orjson

        clock.advance(float(orjson.loads(line).get("advance", 0)))
        engine.wake()
        return
    try:
        command = p.parse_line(line)
    except ProtocolError as exc:
        session.out.write(p.error_from(exc))
        return
    if isinstance(command, p.Register):
        session.registered.add(command.task_type)
        engine.wake()
        return
    asyncio.get_running_loop().create_task(answer(command, engine, session.out))


async def serve(
    storage: str, *, env: Mapping[str, str] = os.environ, stdin: Any = None, stdout: Any = None
) -> int:
    """Run the daemon until stdin closes or a signal drains it; return the exit code."""
    loop = asyncio.get_running_loop()
    clock: Clock = ManualClock(float(env["SNERD_TEST_CLOCK"])) if env.get(
        "SNERD_TEST_CLOCK") else SystemClock()  # fmt: skip
    out = await Output.open(stdout or sys.stdout)
    session = Session(out)
    config = engine_config(env)
    from snerd.dispatcher.notify import Notifier
    from snerd.dispatcher.webhooks import WebhookExecutor

    webhooks = WebhookExecutor()
    engine = Engine(
        FileLog(storage), executors=[webhooks, session], clock=clock, config=config,
        liveness=Liveness(storage), notifier=Notifier([session, webhooks]),
    )  # fmt: skip
    session.engine = engine
    await engine.start()
    dashboard = await _maybe_dashboard(engine, env)
    reader = asyncio.StreamReader(limit=p.MAX_LINE_BYTES * 2)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin or sys.stdin)
    reading = loop.create_task(_read_lines(reader, session, engine, clock))
    stop = asyncio.Event()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, on_signal)
    stopping = loop.create_task(stop.wait())
    await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if reading.done():  # stdin EOF: no result can come back for what the SDK holds
        for task_id in list(session.sent):
            run = engine.runs.get(task_id)
            if run is not None:
                await engine.release(run, ev.REASON_DRAIN)
    await engine.drain(timeout=0.0 if signals > 1 else None)
    reading.cancel()
    stopping.cancel()
    if dashboard is not None:
        await dashboard.cleanup()
    await out.close()
    return 0


async def _maybe_dashboard(engine: Engine, env: Mapping[str, str]) -> Any:
    port = env.get("SNERD_DASHBOARD_PORT")
    if not port:
        return None
    try:
        from snerd.dashboard.server import start_dashboard, url_of

        host = env.get("SNERD_DASHBOARD_HOST", "127.0.0.1")
        token = env.get("SNERD_DASHBOARD_TOKEN") or None
        runner = await start_dashboard(engine, host=host, port=int(port), token=token)
        log.info("dashboard at %s", url_of(runner))
        return runner
    except Exception as exc:  # the queue runs on without a dashboard
        log.warning("dashboard not started: %s", exc)
        return None


def main(argv: list[str] | None = None) -> int:
    """Console entry: ``snerdmq [STORAGE_DIR]``."""
    args = sys.argv[1:] if argv is None else argv
    storage = args[0] if args else DEFAULT_STORAGE
    level = os.environ.get("SNERD_LOG_LEVEL", "warning").upper()
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, level, logging.WARNING),
                        format="snerdmq %(levelname)s %(name)s: %(message)s")  # fmt: skip
    try:
        return asyncio.run(serve(storage))
    except KeyboardInterrupt:
        return 0
    except (OSError, SnerdError) as exc:  # storage missing, unwritable, or locked
        print(f"snerdmq: cannot run on {storage!r}: {exc}", file=sys.stderr)
        return 1
