"""A census counted in two parts, the later one as a segment and absorbed, is the census
of the whole (``Census.absorb``): what lets ``snerdmq replay`` count a large log's two
halves on two cores. Drawn logs of a handful of ids, split anywhere, the later part
passed between processes as plain data (``Census.state``)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import msgspec
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from snerd.eventlog.scan import Row
from snerd.projections.census import Census, NotCensus

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loggen
from hypothesis_budget import examples

PLAIN = {"enqueued", "claimed", "progress", "succeeded", "retry_scheduled",
         "dead_lettered", "cancelled", "claim_released"}  # fmt: skip


def rows_of(records: list[dict[str, Any]]) -> list[Any]:
    """The scan's rows of the records that make one (it hands the census no other: a
    chunk with a record of another shape goes to the full summary)."""
    rows = []
    for record in records:
        with contextlib.suppress(msgspec.ValidationError, msgspec.DecodeError, TypeError):
            rows.append(msgspec.json.decode(orjson.dumps(record), type=Row))
    return rows


def counted(census: Census, rows: list[Any], first: int) -> Census | None:
    """``census`` fed ``rows`` (places from ``first``), or None if it cannot judge one."""
    try:
        census.feed(rows, range(first, first + len(rows)))
    except NotCensus:
        return None
    return census


def whole(census: Census | None) -> Any:
    if census is None:
        return None
    live = {task: sorted(places) for task, places in census.live.items()}
    return census.seen, live, census.dlq, census.events, census.live_places()


plain_logs = loggen.valid_logs.map(
    lambda logs: [r for r in logs if r.get("event") in PLAIN and not r.get("triggerAfterIds")]
)


def _record(event: str, task: str, attempt: int) -> dict[str, Any]:
    return {"event": event, "taskId": task, "taskType": "t", "daemon": "d", "attempt": attempt}


dense_logs = st.lists(st.builds(_record, st.sampled_from(sorted(PLAIN)),
                                st.sampled_from(("a", "b")), st.integers(1, 2)),
                      max_size=30)  # fmt: skip
"""Two ids and the plain queue's events only: a task live across the cut, ended and
enqueued again on either side of it, claimed while not live, at every turn."""


@settings(max_examples=examples(400), deadline=None)
@given(records=st.one_of(dense_logs, plain_logs, loggen.any_logs), cut=st.integers(min_value=0))
def test_a_census_counted_in_two_parts_is_the_census_of_the_whole(
    records: list[dict[str, Any]], cut: int
) -> None:
    rows = rows_of(records)
    k = cut % (len(rows) + 1)
    expected = whole(counted(Census(), rows, 0))
    first = counted(Census(), rows[:k], 0)
    later = counted(Census(segment=True), rows[k:], k)
    if first is None or later is None:
        assert expected is None  # the census judges each record by itself
        return
    passed = Census.of_state(orjson.loads(orjson.dumps(later.state())))
    first.absorb(passed)
    assert whole(first) == expected


def test_a_task_live_across_the_cut_keeps_every_place() -> None:
    """Live before the cut, its claim and a retry after it: all its places are kept,
    as one pass keeps them; a task only claimed after the cut, never enqueued, none."""
    records = [
        {"event": "enqueued", "taskId": "a", "taskType": "t"},
        {"event": "claimed", "taskId": "a", "daemon": "d", "attempt": 1},  # cut after this
        {"event": "progress", "taskId": "a", "daemon": "d", "attempt": 1},
        {"event": "claimed", "taskId": "z", "daemon": "d", "attempt": 1},
        {"event": "retry_scheduled", "taskId": "a", "taskType": "t"},
        {"event": "claimed", "taskId": "a", "daemon": "d", "attempt": 2},
    ]
    rows = rows_of(records)
    first = counted(Census(), rows[:2], 0)
    later = counted(Census(segment=True), rows[2:], 2)
    assert first is not None and later is not None
    first.absorb(later)
    assert first.live == {"a": [0, 1, 2, 4, 5]}
    assert whole(first) == whole(counted(Census(), rows, 0))


def test_a_task_ended_and_enqueued_again_after_the_cut_starts_afresh() -> None:
    records = [
        {"event": "enqueued", "taskId": "a", "taskType": "t"},
        {"event": "claimed", "taskId": "a", "daemon": "d", "attempt": 1},
        {"event": "succeeded", "taskId": "a", "taskType": "t"},  # cut before this
        {"event": "enqueued", "taskId": "a", "taskType": "t"},
    ]
    rows = rows_of(records)
    first = counted(Census(), rows[:2], 0)
    later = counted(Census(segment=True), rows[2:], 2)
    assert first is not None and later is not None
    first.absorb(later)
    assert first.live == {"a": [3]}
    assert whole(first) == whole(counted(Census(), rows, 0))
