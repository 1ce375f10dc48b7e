"""rpc.output.Lines: stdin split into lines as chunks arrive, whatever the chunking."""

from __future__ import annotations

import asyncio
import fcntl
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snerd.rpc import output
from snerd.rpc.output import READ_SIZE, Lines, open_input


def _run(chunks: list[bytes], max_bytes: int = 10) -> tuple[list[bytes], int, bool]:
    async def go() -> tuple[list[bytes], int, bool]:
        seen: list[bytes] = []
        too_long: list[None] = []
        lines = Lines(seen.append, lambda: too_long.append(None), max_bytes)
        for chunk in chunks:
            lines.feed(chunk)
        lines.eof()
        lines.eof()  # a second EOF (pipe closed after eof_received) changes nothing
        return seen, len(too_long), lines.closed.done()

    return asyncio.run(go())


def test_lines_split_across_chunks_and_a_last_line_without_newline() -> None:
    seen, long, closed = _run([b'{"a":', b"1}\n{", b'"b":2}\n\n{"c"', b":3}"])
    assert seen == [b'{"a":1}', b'{"b":2}', b"", b'{"c":3}'] and long == 0 and closed


def test_a_line_past_the_bound_is_dropped_whole_and_reported_once() -> None:
    seen, long, _ = _run([b"ok\n" + b"x" * 8, b"x" * 8, b"x" * 8, b"tail\nnext\n"])
    assert seen == [b"ok", b"next"] and long == 1


def test_before_and_after_frame_each_chunk_s_lines() -> None:
    """``before`` and ``after`` (the daemon's hold and kick of the log's writer) frame
    the lines of each chunk that completed any, and the last line at EOF, ``after`` even
    when a line raised; a chunk with no whole line, or whose lines are all skipped as
    too long, calls neither."""

    async def go() -> list[object]:
        heard: list[object] = []

        def on_line(line: bytes) -> None:
            heard.append(line)
            if line == b"boom":
                raise RuntimeError("a line's bug")

        lines = Lines(on_line, lambda: heard.append("too long"), 10,
                      before=lambda: heard.append("before"),
                      after=lambda: heard.append("after"))  # fmt: skip
        for chunk in (b"a\nb", b"c\n", b"d", b"x" * 12, b"x\ne\nf"):
            lines.feed(chunk)
        with pytest.raises(RuntimeError):
            lines.feed(b"\nboom\n")
        lines.eof()
        return heard

    assert asyncio.run(go()) == [
        "before", b"a", "after", "before", b"bc", "after", "too long",
        "before", b"e", "after", "before", b"f", b"boom", "after",
    ]  # fmt: skip


@given(st.lists(st.binary(max_size=8).map(lambda b: b.replace(b"\n", b"")), max_size=12),
       st.data())  # fmt: skip
def test_any_chunking_gives_the_same_lines(body: list[bytes], data: st.DataObject) -> None:
    stream = b"\n".join(body)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    seen, long, _ = _run(chunks, max_bytes=1 << 20)
    expected = stream.split(b"\n")
    if expected and expected[-1] == b"":
        expected.pop()  # no last line after a final newline
    assert seen == expected and long == 0


class _Chunks(Lines):
    """Lines that also remember the size of every chunk the transport read."""

    def __init__(self) -> None:
        self.got: list[bytes] = []
        self.sizes: list[int] = []
        super().__init__(self.got.append, lambda: None, max_bytes=1 << 20)

    def feed(self, chunk: bytes) -> None:
        self.sizes.append(len(chunk))
        super().feed(chunk)


@pytest.mark.skipif(not hasattr(fcntl, "F_SETPIPE_SZ"), reason="Linux pipes only")
@pytest.mark.skipif(
    not (output.__file__ or "").endswith(".py"),
    reason="subclasses Lines to see each read's size, which the compiled writer's native "
    "class refuses: runs in the README's (interpreted) suite",
)
async def test_stdin_is_read_in_chunks_the_heap_serves() -> None:
    """A pipe holding more than asyncio's 256 KiB read size is still read READ_SIZE at a
    time (a larger buffer comes from mmap, three more syscalls a read)."""
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 20)
    lines = [b"x" * 99 for _ in range(5000)]  # 500 KB, written before the first read
    os.write(w, b"".join(line + b"\n" for line in lines))
    os.close(w)
    chunks = _Chunks()
    with os.fdopen(r, "rb", buffering=0) as stream:
        await open_input(stream, chunks)
        await asyncio.wait_for(chunks.closed, 10)
    assert chunks.got == lines
    assert max(chunks.sizes) == READ_SIZE < 128 << 10  # glibc's default mmap threshold
