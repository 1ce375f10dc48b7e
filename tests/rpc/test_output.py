"""rpc.output.Output: lines written in one loop turn leave in one write at its end;
``write_now`` sends at once, after what was written before it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

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


async def test_flush_sends_what_waits_for_the_turn_in_one_write_now(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """flush (the daemon's, after a read's lines): the lines written this turn leave at
    once, in one write, and the send that was due at the end of the turn is called off."""
    out, fd = await _pipe_output()
    writes: list[bytes] = []
    real_write = os.write

    def write(to: int, data: Any) -> int:
        writes.append(bytes(data))
        return real_write(to, data)

    monkeypatch.setattr(os, "write", write)  # (the pipe's writes, ours or the transport's)
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


async def test_a_full_pipe_keeps_the_order_through_the_transport() -> None:
    """Lines go straight to the pipe while the transport holds nothing back; a line the
    pipe cannot take whole leaves the rest with the transport, and the lines after it
    queue behind it there until it has written all, then go straight again."""
    out, fd = await _pipe_output()
    transport = out._transport
    assert transport is not None
    try:
        big = b"x" * (300 << 10) + b"\n"  # more than the pipe holds
        out.write_now(b"a\n")
        out.write_now(big)
        assert transport.get_write_buffer_size() > 0 and not out._direct
        got = _drain(fd)  # room in the pipe, before the transport's turn to fill it
        out.write_now(b"b\n")  # behind the rest of the big line all the same
        out.write(b"c\n")
        while len(got) < len(big) + 6:
            got += _drain(fd)
            await asyncio.sleep(0)  # the transport writes as the pipe empties
        assert got == b"a\n" + big + b"b\nc\n"
        assert transport.get_write_buffer_size() == 0
        out.write_now(b"d\n")
        assert out._direct and _drain(fd) == b"d\n"  # straight again, at once
    finally:
        await out.close()
        os.close(fd)


async def test_lines_to_a_closed_pipe_are_dropped_and_close_closes_once() -> None:
    out, fd = await _pipe_output()
    os.close(fd)  # the reader is gone
    out.write_now(b"a\n")  # no error: the transport hears of it and closes
    await asyncio.sleep(0)
    out.write(b"b\n")
    out.write_now(b"c\n")
    await asyncio.sleep(0)
    transport = out._transport
    assert transport is not None and transport.is_closing()
    await out.close()
    reused = os.open(os.devnull, os.O_RDONLY)  # (takes the number closed, as a rule)
    try:
        await out.close()  # closes its own descriptor once: never one reusing it
        os.fstat(reused)
    finally:
        os.close(reused)
