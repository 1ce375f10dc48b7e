"""A plan made against a state proposes exactly the claims ``decide`` would grant for
it against that same state at that instant: the dispatcher, which plans under the log
lock against the state it decides against, writes the planned claims without picking
them a second time (``decide.planned_claims``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

from snerd.projections import events as ev
from snerd.projections.commands import Claim
from snerd.projections.decide import decide, planned_claims
from snerd.projections.plan import plan
from snerd.projections.schedule import format_instant
from snerd.projections.state import empty, fold

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loggen

T0 = 1_760_000_000.0
_task = st.fixed_dictionaries({
    "type": st.sampled_from("ax"), "urgency": st.sampled_from((0, 1, 2)),
    "group": st.sampled_from((None, "g", "h")), "per_minute": st.sampled_from((1, 2)),
    "due": st.sampled_from((None, -30.0, 30.0)), "claimed": st.booleans(),
})  # fmt: skip


def _log(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each task enqueued (with its urgency, rate group and due time), then the claims
    of those marked claimed (filling their groups' rate windows)."""
    records: list[dict[str, Any]] = []
    for i, t in enumerate(tasks):
        record = {ev.F_EVENT: ev.ENQUEUED, ev.F_TASK_ID: f"t{i}", ev.F_TASK_TYPE: t["type"],
                  ev.F_TASK_DATA: "{}", ev.F_URGENCY: t["urgency"],
                  ev.F_CREATED_AT: format_instant(T0 - 60 + i)}  # fmt: skip
        if t["group"] is not None:
            record[ev.F_RATE_GROUP], record[ev.F_MAX_PER_MINUTE] = t["group"], t["per_minute"]
        if t["due"] is not None:
            record[ev.F_EXECUTE_AT] = format_instant(T0 + t["due"])
        records.append(record)
    for i, t in enumerate(tasks):
        if t["claimed"] and t["due"] != 30.0:
            claim = {ev.F_EVENT: ev.CLAIMED, ev.F_TASK: f"t{i}", ev.F_ATTEMPT: 1,
                     ev.F_DAEMON: "d0", ev.F_TS: int((T0 - 10) * 1000)}  # fmt: skip
            if t["group"] is not None:
                claim[ev.F_GROUP] = t["group"]
            records.append(claim)
    for seq, record in enumerate(records, 1):
        record[ev.F_SEQ] = seq
    return records


def _agree(state: Any, now: float, capacity: int, refused: set[str]) -> None:
    step = plan(state, now, capacity, accepts=lambda task: task.type not in refused)
    command = Claim(tuple(task.id for task in step.claims), 60.0, 1.0)
    checked = decide(state, command, now=now, daemon="d")
    planned = planned_claims(list(step.claims), command, now=now, daemon="d")
    event(f"claims: {min(len(step.claims), 3)}")
    assert planned.records == checked.records
    assert [(t.id, a) for t, a in planned.outcome] == [(t.id, a) for t, a in checked.outcome]


@given(st.lists(_task, max_size=12), st.sampled_from((T0, T0 + 45.0)), st.integers(1, 8),
       st.sets(st.sampled_from("ax")))  # fmt: skip
def test_planned_claims_are_what_decide_grants_for_the_plan(
    tasks: list[dict[str, Any]], now: float, capacity: int, refused: set[str]
) -> None:
    state, _ = fold(empty(), _log(tasks))
    _agree(state, now, capacity, refused)


@given(loggen.valid_logs, loggen.nows, st.integers(1, 6), st.sets(st.sampled_from("abcxyz")))
def test_planned_claims_agree_on_any_valid_log(
    log: list[Any], now: float, capacity: int, refused: set[str]
) -> None:
    state, _ = fold(empty(), log)
    _agree(state, now, capacity, {t for t in loggen.TYPES if t[:1] in refused})
