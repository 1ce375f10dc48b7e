"""The engine hands the fold the task it read from its own enqueue's record to claim it
(``events.use_built``): the fold's result is the same as reading the log's copy again,
and a record that differs from the one the task was read from is read again."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from snerd.projections import events as ev
from snerd.projections.commands import Enqueue
from snerd.projections.decide import decide
from snerd.projections.state import empty, fold_events
from snerd.projections.task import task_from_record

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loggen
from hypothesis_budget import examples
from test_claim_enqueued import enqueues

instants = st.integers(min_value=0, max_value=loggen.SPAN * 1_000_000).map(
    lambda micros: loggen.T0 + micros / 1e6
)
"""Times with any microsecond in them: a record's text keeps only the milliseconds."""


@settings(max_examples=examples(300))
@given(loggen.valid_logs, enqueues, instants)
def test_the_fold_with_the_built_task_is_the_fold_of_the_record(
    log: list[Any], cmd: Enqueue, now: float
) -> None:
    state = fold_events(empty(), [ev.decode(r) for r in log])[0]
    records = decide(state, cmd, now=now, daemon="d").records
    if not records or records[0].get(ev.F_EVENT) != ev.ENQUEUED:
        return
    task = task_from_record(records[0])
    stamped = {**records[0], ev.F_SEQ: state.last_seq + 1}
    read = [ev.decode(stamped)]
    given_ = list(read)
    ev.use_built(given_, {cmd.task_id: (records[0], task)})
    assert type(given_[0]) is ev.Enqueued and given_[0].built is task
    assert fold_events(state, given_)[0] == fold_events(state, read)[0]


@given(st.sampled_from((ev.F_TASK_DATA, ev.F_URGENCY, ev.F_MAX_RETRIES, ev.F_EXECUTE_AT,
                        "carriedOver")))  # fmt: skip
def test_a_record_unlike_the_one_the_task_was_read_from_is_read_again(field: str) -> None:
    """A field changed, or one more than the ``seq`` the log adds (a field the task keeps
    as one it does not know)."""
    record = decide(empty(), Enqueue("t", loggen.TYPES[0], task_data="{}"), now=loggen.T0,
                    daemon="d").records[0]  # fmt: skip
    task = task_from_record(record)
    other = {**record, field: {ev.F_TASK_DATA: '{"n":2}', ev.F_URGENCY: 7.0,
                                            ev.F_MAX_RETRIES: 9,
                                            ev.F_EXECUTE_AT: "2030-01-01T00:00:00.000Z",
                                            "carriedOver": True}[field],
             ev.F_SEQ: 1}  # fmt: skip
    events = [ev.decode(other)]
    ev.use_built(events, {"t": (record, task)})
    assert type(events[0]) is ev.Enqueued and events[0].built is None
    assert events[0].task(1) != task
