"""How the daemon starts the log's writer after each read of stdin (``rpc/reader.py``):
at once, but for a read of nothing but successful results, which waits up to
``SUCCESS_WAIT_SECONDS`` for the next read and joins its batch."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from snerd.dispatcher.clock import SystemClock
from snerd.dispatcher.engine import Engine
from snerd.eventlog.base import EventLog
from snerd.rpc import handlers
from snerd.rpc import reader as d
from snerd.rpc.output import Output

pytestmark = pytest.mark.skipif(
    not (d.__file__ or "").endswith(".py") or not (handlers.__file__ or "").endswith(".py"),
    reason="stands in for the engine, the log and the stdout writer, which the compiled "
    "reader and handlers take only as themselves: runs in the README's (interpreted) "
    "suite",
)

SUCCESS = b'{"action":"result","task_id":"a","status":"success"}'
FAILURE = b'{"action":"result","task_id":"a","status":"error","error_msg":"no"}'
ENQUEUE = b'{"action":"enqueue","task_id":"b","task_type":"t","task_data":"{}"}'


class _Log:
    """The two calls the reader makes of the log."""

    def __init__(self) -> None:
        self.kicks = 0

    def hold(self) -> None:
        pass

    def kick(self) -> None:
        self.kicks += 1


class _Out:
    def __init__(self) -> None:
        self.flushes = 0
        self.lines: list[bytes] = []

    def hold(self) -> None:
        pass

    def flush(self) -> None:
        self.flushes += 1

    def write(self, line: bytes) -> None:
        self.lines.append(line)


class _Engine:
    """What the handlers submit, without a queue behind them."""

    def __init__(self) -> None:
        self.submitted: list[str] = []

    def finish_soon(self, task_id: str, **_: Any) -> None:
        self.submitted.append(f"result {task_id}")

    def enqueue_soon(self, command: Any, *_: Any) -> None:
        self.submitted.append(f"enqueue {command.task_id}")


class _Reader:
    def __init__(self) -> None:
        self.log, self.out, self.engine = _Log(), _Out(), _Engine()
        self.session = d.Session(cast(Output, self.out))

    def read(self, *lines: bytes) -> None:
        """One read of stdin, as ``serve``'s ``Lines`` hands it over."""
        log, out = cast(EventLog, self.log), cast(Output, self.out)
        d.hold(log, out, self.session)
        for line in lines:
            d.handle_line(line, self.session, cast(Engine, self.engine), SystemClock())
        d.kick(log, out, self.session)


async def _kicked(reader: _Reader, kicks: int) -> None:
    for _ in range(1000):  # the wait is 0.5 ms; this allows 10 s
        if reader.log.kicks >= kicks:
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"the writer was started {reader.log.kicks} times, not {kicks}")


async def test_a_read_of_a_success_alone_waits_then_its_batch_is_written() -> None:
    reader = _Reader()
    reader.read(SUCCESS)
    assert reader.engine.submitted == ["result a"]
    assert reader.log.kicks == 0  # held for the next read
    assert reader.out.flushes == 1  # its replies (if any) are not held
    await _kicked(reader, 1)  # nothing came: written after the wait
    assert reader.session.waiting is None


async def test_a_success_read_alone_joins_the_next_read_s_batch() -> None:
    reader = _Reader()
    reader.read(SUCCESS)
    reader.read(ENQUEUE)
    assert reader.engine.submitted == ["result a", "enqueue b"]
    assert reader.log.kicks == 1  # one start for both: one batch
    assert reader.session.waiting is None  # the wait is called off
    await asyncio.sleep(5 * d.SUCCESS_WAIT_SECONDS + 0.01)
    assert reader.log.kicks == 1


async def test_two_reads_of_successes_wait_once() -> None:
    reader = _Reader()
    reader.read(SUCCESS)
    waiting = reader.session.waiting
    reader.read(SUCCESS)
    assert reader.session.waiting is waiting  # the first wait is not pushed back
    await _kicked(reader, 1)
    await asyncio.sleep(5 * d.SUCCESS_WAIT_SECONDS + 0.01)
    assert reader.log.kicks == 1


@pytest.mark.parametrize(
    "lines",
    [(SUCCESS, ENQUEUE), (ENQUEUE,), (FAILURE,), (SUCCESS, FAILURE), (b"not json",),
     (SUCCESS, b"   ")],
    ids=["success+enqueue", "enqueue", "failure", "success+failure", "bad line",
         "success+blank"],
)  # fmt: skip
async def test_any_other_read_starts_the_writer_at_once(lines: tuple[bytes, ...]) -> None:
    reader = _Reader()
    reader.read(*lines)
    assert reader.log.kicks == 1
    assert reader.session.waiting is None
