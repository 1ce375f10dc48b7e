"""The daemon's two streams: stdin read without blocking the loop, stdout for
protocol lines only (non-blocking when it is a pipe)."""

from __future__ import annotations

import asyncio
import os
import select
import stat
import threading
from collections.abc import Callable
from typing import Any

READ_SIZE = 64 << 10
"""Bytes asked of each read of a pipe: the daemon's stdin, and a client's reads of a
daemon's stdout and stderr (a pipe holds 64 KiB unless resized). asyncio's pipe
transport asks 256 KiB: glibc serves a buffer that large with ``mmap``, so each read
then costs an ``mmap``, an ``mremap`` and a ``munmap`` besides the ``read`` (16-20 us a
read on the benchmark VM, against 1.5 us for 64 KiB taken from the heap; one or two
reads a task for an SDK awaiting each enqueue)."""


def heap_sized_reads(transport: object) -> None:
    """Have asyncio's pipe transport read :data:`READ_SIZE` bytes at a time (its
    ``max_size``; a transport without one is left as it is)."""
    if hasattr(transport, "max_size"):
        setattr(transport, "max_size", READ_SIZE)  # noqa: B010  (not in typeshed)


class Output:
    """Writes protocol lines; never blocks the event loop on a pipe.

    To a pipe, lines go straight to it while the transport holds nothing back (what its
    ``write`` does first, without the two Python-level calls a line it costs compiled
    code: ~1% of a task's instructions, thirty-sixth session), else through the
    transport, which writes them once the pipe has room and closes on a write error.
    ``fd``: with a transport, a descriptor of the pipe of its own (``open`` makes it,
    ``close`` closes it: never one the transport closed and the process reused);
    without, the file's."""

    def __init__(self, transport: asyncio.WriteTransport | None, fd: int) -> None:
        self._transport = transport
        self._fd = fd
        self._direct = True  # the transport holds nothing back: write to the pipe
        self._pending: list[bytes] = []  # lines written this loop iteration, not yet sent
        self._sending: asyncio.Handle | None = None  # the send of ``_pending``, when due
        self._holding = False  # lines wait for flush, no send is scheduled (:meth:`hold`)

    @classmethod
    async def open(cls, stream: Any) -> Output:
        fd = stream.fileno()
        mode = os.fstat(fd).st_mode
        # Not a terminal: a tty's stdin and stdout share one open file, and the pipe
        # transport would make stdin non-blocking under the reading thread. A person
        # typing at a terminal needs no non-blocking writes.
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or (stat.S_ISCHR(mode) and not os.isatty(fd)):
            loop = asyncio.get_running_loop()
            transport, _ = await loop.connect_write_pipe(asyncio.Protocol, stream)
            return cls(transport, os.dup(fd))  # (non-blocking: one open file, the pipe's)
        return cls(None, fd)  # a regular file: plain writes

    def write(self, line: bytes) -> None:
        if self._transport is not None:
            # Lines written in one loop iteration (the executes of a batch's claims,
            # replies to a burst of requests) leave in one write.
            if not self._pending and not self._holding:
                self._sending = asyncio.get_running_loop().call_soon(self._send)
            self._pending.append(line)
            return
        view = memoryview(line)
        while view:
            n = os.write(self._fd, view)  # (not in the slice: compiled, it ran twice)
            view = view[n:]

    def write_now(self, line: bytes) -> None:
        """Write ``line`` at once (after the lines written before it), not at the end of
        the loop's turn: an ack written from the log's writer, which goes on with the
        batch before the loop turns."""
        if self._transport is None:
            self.write(line)
            return
        if self._pending:
            self._pending.append(line)
            self._send_now()
        else:
            self._put(line)

    def hold(self) -> None:
        """Until the next :meth:`flush`, lines written wait for it (no send is scheduled
        on the loop): for a caller that flushes in the same call."""
        self._holding = True

    def flush(self) -> None:
        """Send the lines written so far now, not at the end of the loop's turn: for a
        caller that writes no more this turn (the daemon, once a read's lines and the
        batch they started are handled: its acks and ``execute`` lines). Ends a
        :meth:`hold`."""
        self._holding = False
        self._send_now()

    def _send_now(self) -> None:
        """:meth:`_send` at once, calling off the send that was due (if any)."""
        if self._sending is not None:
            self._sending.cancel()
        self._send()

    def _send(self) -> None:
        self._sending = None
        lines, self._pending = self._pending, []
        if lines and self._transport is not None:
            self._put(b"".join(lines))

    def _put(self, data: bytes) -> None:
        """Send ``data`` down the pipe, after what the transport holds (class doc)."""
        transport = self._transport
        assert transport is not None
        if not self._direct:  # the transport holds lines back, or is closing
            if transport.is_closing():
                return
            if transport.get_write_buffer_size():
                transport.write(data)
                return
            self._direct = True
        try:
            n = os.write(self._fd, data)
        except (BlockingIOError, InterruptedError):  # the pipe is full
            n = 0
        except OSError:  # the pipe is gone: the transport meets it too, and closes
            n = 0
        if n < len(data):
            self._direct = False
            transport.write(data[n:] if n else data)

    async def drain(self) -> None:
        """Wait (briefly) until buffered lines reach the pipe."""
        self._send()
        transport = self._transport
        for _ in range(200):
            if transport is None or transport.is_closing():
                return
            if transport.get_write_buffer_size() == 0:
                return
            await asyncio.sleep(0.005)

    async def close(self) -> None:
        await self.drain()
        if self._transport is not None and self._fd >= 0:
            self._direct = False
            self._transport.close()
            os.close(self._fd)  # our own descriptor of the pipe (once)
            self._fd = -1


def _is_pipe(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _read_blocking(fd: int) -> bytes:
    """One read, waiting for input even if someone made the file non-blocking."""
    while True:
        try:
            return os.read(fd, 1 << 16)
        except BlockingIOError:
            select.select([fd], [], [])


class Lines:
    """Splits a byte stream into lines and hands each to ``on_line`` the moment its
    chunk arrives (from the transport's own callback: no task wakes up per read). For
    a chunk that completes any line, ``before`` (if given) is called first and ``after``
    (if given) once its lines are handled, whatever they raised. A line longer than
    ``max_bytes`` is dropped whole and reported to ``too_long`` once. ``closed``
    resolves at EOF, after the last line (one without its newline too)."""

    def __init__(self, on_line: Callable[[bytes], None], too_long: Callable[[], None],
                 max_bytes: int, before: Callable[[], None] | None = None,
                 after: Callable[[], None] | None = None) -> None:  # fmt: skip
        self._on_line = on_line
        self._too_long = too_long
        self._max = max_bytes
        self._before = before
        self._after = after
        self._buffer = b""
        self._skipping = False  # inside a line that is already known to be too long
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def feed(self, chunk: bytes) -> None:
        buffer = self._buffer + chunk if self._buffer else chunk
        if self._skipping:
            end = buffer.find(b"\n")
            if end < 0:
                self._buffer = b""
                return
            buffer, self._skipping = buffer[end + 1 :], False
        *lines, self._buffer = buffer.split(b"\n")
        if lines:
            self._handle(lines)
        if len(self._buffer) > self._max:
            self._too_long()
            self._buffer, self._skipping = b"", True

    def _handle(self, lines: list[bytes]) -> None:
        if self._before is not None:
            self._before()
        try:
            for line in lines:
                self._on_line(line)
        finally:
            if self._after is not None:
                self._after()

    def eof(self) -> None:
        if self.closed.done():
            return
        if self._buffer and not self._skipping:
            self._handle([self._buffer])  # a last line without its newline
        self._buffer = b""
        self.closed.set_result(None)


class _LinesProtocol(asyncio.Protocol):
    def __init__(self, lines: Lines) -> None:
        self._lines = lines

    def data_received(self, data: bytes) -> None:
        self._lines.feed(data)

    def eof_received(self) -> bool | None:
        self._lines.eof()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._lines.eof()


async def open_input(stream: Any, lines: Lines) -> None:
    """Feed ``lines`` from stdin: the loop's pipe transport for pipes and sockets, a
    reading thread for anything else (a file, /dev/null, a terminal)."""
    loop = asyncio.get_running_loop()
    fd = stream.fileno()
    if _is_pipe(fd):
        transport, _ = await loop.connect_read_pipe(lambda: _LinesProtocol(lines), stream)
        heap_sized_reads(transport)
        return

    def pump() -> None:
        while chunk := _read_blocking(fd):
            loop.call_soon_threadsafe(lines.feed, chunk)
        loop.call_soon_threadsafe(lines.eof)

    threading.Thread(target=pump, name="snerd-stdin", daemon=True).start()
