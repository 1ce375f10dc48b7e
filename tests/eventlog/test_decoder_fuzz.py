"""Issue 12 "done when": the log decoder on hostile bytes (hypothesis).

Whatever a log file holds (deep nesting, huge and non-finite numbers, wrong types,
invalid UTF-8, NULs, huge and torn lines, forged checksums), decoding never raises:
every non-blank line is a record or a skipped line, in order, a FileLog opens on it
and appends after it, and the history reader and the chain verifier read it through.
Bounded by ``SNERD_FUZZ_EXAMPLES`` (default 60).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from logkit import Recorder

from snerd.eventlog.base import SkippedLine
from snerd.eventlog.chain import verify
from snerd.eventlog.codec import decode_complete
from snerd.eventlog.filelog import FileLog
from snerd.eventlog.history import history_files, iter_history

EXAMPLES = int(os.environ.get("SNERD_FUZZ_EXAMPLES", "60"))

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=20),
    st.floats(allow_nan=False, allow_infinity=False),
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda v: st.lists(v, max_size=3) | st.dictionaries(st.text(max_size=4), v, max_size=3),
    max_leaves=8,
)
KEYS = ["event", "seq", "taskId", "taskType", "taskData", "chain", "chainFrom", "records",
        "ts", "attempt", "daemon", "retryCount", "maxRetries"]  # fmt: skip


@st.composite
def records(draw: st.DrawFn) -> bytes:
    record = {k: draw(values) for k in draw(st.lists(st.sampled_from(KEYS), max_size=6))}
    if draw(st.booleans()):
        record["seq"] = draw(st.sampled_from([1, 2**53, 2**64 - 1, -5, 2**70, 1.5, "7"]))
    if draw(st.booleans()):
        record["chain"] = draw(st.sampled_from(["b" + "0" * 32, "k" + "f" * 32, "bzz", 5]))
    return json.dumps(record).encode()


lines = st.one_of(
    records(),
    st.binary(max_size=100).map(lambda b: b.replace(b"\n", b"")),
    st.integers(1, 2000).map(lambda d: b"[" * d + b"]" * d),
    st.integers(1, 2000).map(lambda d: b'{"a":' * d + b"1" + b"}" * d),
    st.sampled_from([b"1e999", b'{"x":1e999}', b'{"seq":18446744073709551615}', b"\x00" * 9,
                     b'{"a":"\xff"}', b'"\\ud800"', b"{}", b"[]", b" ", b"x" * 300_000]),
)  # fmt: skip


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])  # fmt: skip
@given(body=st.lists(lines, max_size=12), tail=st.binary(max_size=40))
def test_hostile_log_bytes_are_decoded_without_raising(
    tmp_path_factory: Any, body: list[bytes], tail: bytes
) -> None:
    data = b"".join(line + b"\n" for line in body)
    decoded = decode_complete(data, 0)
    non_blank = [line for line in body if line.strip()]
    assert len(decoded.records) + len(decoded.skipped) == len(non_blank)
    assert all(type(r) is dict and "chain" not in r for r in decoded.records)

    storage: Path = tmp_path_factory.mktemp("hostile")
    path = storage / "tasks" / "tasks.log"
    path.parent.mkdir(parents=True)
    path.write_bytes(data + tail.replace(b"\n", b""))

    async def run() -> Recorder:
        log = FileLog(storage, fsync=False, follow=False)
        rec = Recorder()
        await log.open(rec)
        await log.append([{"event": "put", "k": "after"}])  # appends go on after anything
        await log.close()
        return rec

    rec = asyncio.run(run())
    assert rec.records[-1]["k"] == "after"
    assert len(rec.records) + len(rec.skipped) >= len(non_blank) + 1
    items = list(iter_history(storage))
    assert sum(1 for i in items if not isinstance(i, SkippedLine)) >= 1
    report = verify(history_files(storage))  # never raises; reports what it finds
    assert report.chained >= 1
