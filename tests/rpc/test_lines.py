"""rpc.output.Lines: stdin split into lines as chunks arrive, whatever the chunking."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from snerd.rpc.output import Lines


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
