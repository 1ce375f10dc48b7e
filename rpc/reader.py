"""The daemon's reader: what it does with each read of stdin, line by line.

:func:`hold` before a read's lines, :func:`handle_line` for each, :func:`kick` after
them; :class:`Session` is the SDK on the other end of the pipes (the executor that sends
``execute`` lines, and the listener of notices). Every line of every task passes through
here, so the module is compiled with the engine in a wheel (``setup.py``'s ``GLUE``);
:mod:`snerd.rpc.daemon` assembles it with the rest.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from typing import Any

import orjson

from snerd.dispatcher.clock import Clock, ManualClock
from snerd.dispatcher.engine import Engine
from snerd.dispatcher.executors import Outcomes
from snerd.dispatcher.runs import Run
from snerd.errors import ProtocolError
from snerd.eventlog.base import EventLog, Record
from snerd.projections import events as ev
from snerd.rpc import protocol as p
from snerd.rpc.handlers import answer, answer_enqueue, answer_progress, answer_result
from snerd.rpc.output import Output

log = logging.getLogger("snerd.daemon")

CLOCK_ACTION = "_clock"  # test-only, enabled by SNERD_TEST_CLOCK

SUCCESS_WAIT_SECONDS = 0.0005
"""Longest a read of nothing but successful results waits for the SDK's next line
before its batch is written (:func:`kick`)."""


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


def handle_line(line: bytes, session: Session, engine: Engine, clock: Clock) -> None:
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


def hold(file_log: EventLog, out: Output, session: Session) -> None:
    """A read's lines are about to be handled: what they submit and write waits for
    :func:`kick`, which follows in the same call (nothing is scheduled in between)."""
    session.successes = session.others = 0
    file_log.hold()
    out.hold()


def kick(file_log: EventLog, out: Output, session: Session) -> None:
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
