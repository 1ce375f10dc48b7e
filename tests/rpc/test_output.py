"""rpc.output.Output: lines written in one loop turn leave in one write at its end;
``write_now`` sends at once, after what was written before it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from snerd.rpc.output import Output


async def _pipe_output() -> tuple[Output, int]:
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    out = await Output.open(os.fdopen(write_fd, "wb", buffering=0))
    return out, read_fd


def _drain(fd: int) -> bytes:
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return b""


async def test_write_waits_for_the_turn_and_write_now_does_not() -> None:
    out, fd = await _pipe_output()
    try:
        out.write(b"a\n")
        assert _drain(fd) == b""  # sent at the end of the loop's turn
        out.write_now(b"b\n")  # at once, after the line before it
        assert _drain(fd) == b"a\nb\n"
        out.write_now(b"c\n")
        assert _drain(fd) == b"c\n"
        out.write(b"d\n")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert _drain(fd) == b"d\n"
    finally:
        await out.close()
        os.close(fd)


async def test_flush_sends_what_waits_for_the_turn_in_one_write_now() -> None:
    """flush (the daemon's, after a read's lines): the lines written this turn leave at
    once, in one write, and the send that was due at the end of the turn is called off."""
    out, fd = await _pipe_output()
    writes: list[bytes] = []
    transport = out._transport
    assert transport is not None
    real_write = transport.write
    transport.write = lambda data: (writes.append(bytes(data)), real_write(data))[1]  # type: ignore[method-assign]
    try:
        out.write(b"a\n")
        out.write(b"b\n")
        due = out._sending
        out.flush()
        assert _drain(fd) == b"a\nb\n" and writes == [b"a\nb\n"]
        assert due is not None and due.cancelled()
        out.flush()  # nothing waits: nothing happens
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert _drain(fd) == b"" and writes == [b"a\nb\n"]
        out.write(b"c\n")
        out.write_now(b"d\n")
        await asyncio.sleep(0)
        assert _drain(fd) == b"c\nd\n" and writes == [b"a\nb\n", b"c\nd\n"]
        out.hold()  # lines wait for the flush: no send is scheduled meanwhile
        out.write(b"e\n")
        out.write_now(b"f\n")  # at once all the same (the ack), the hold goes on
        out.write(b"g\n")
        assert out._sending is None and writes[2:] == [b"e\nf\n"]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert writes[3:] == []
        out.flush()
        assert writes[3:] == [b"g\n"] and _drain(fd) == b"e\nf\ng\n"
        out.write(b"h\n")  # the hold ended with the flush
        await asyncio.sleep(0)
        assert writes[4:] == [b"h\n"]
    finally:
        await out.close()
        os.close(fd)


async def test_a_regular_file_gets_each_line_once_in_order(tmp_path: Path) -> None:
    """stdout redirected to a file: plain writes, every byte once (compiled, a write
    inside a slice's bound once ran twice: each line went out twice)."""
    path = tmp_path / "out.jsonl"
    with path.open("wb", buffering=0) as stream:
        out = await Output.open(stream)
        assert out._transport is None
        lines = [b'{"n":%d}\n' % i for i in range(3)] + [b"x" * (1 << 17) + b"\n"]
        for line in lines:
            out.write(line)
        out.write_now(b"last\n")
        await out.close()
    assert path.read_bytes() == b"".join(lines) + b"last\n"
