"""The claim of a task just enqueued, told without folding the enqueue first
(``decide.claim_enqueued``), or after the fold without a plan (``decide.claim_alone``),
is exactly what a plan with free slots and ``planned_claims`` make against the folded
state; where it cannot tell, it says so.

The engine relies on them: in-process, an awaited enqueue and its claim are decided in
one request and folded once; the daemon's claim behind an enqueue needs no plan."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from snerd.projections import events as ev
from snerd.projections.commands import Claim, Enqueue
from snerd.projections.decide import claim_alone, claim_enqueued, decide, planned_claims
from snerd.projections.plan import plan
from snerd.projections.state import QueueState, empty, fold

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loggen
from hypothesis_budget import examples

CLAIM = Claim((), 3600.0, 1.0)

enqueues = st.builds(
    Enqueue,
    st.sampled_from(("a", "b", "c", "f", "g")),  # a..e collide with the log's ids
    st.sampled_from(loggen.TYPES),
    task_data=st.sampled_from(("{}", '{"n": 1}')),
    urgency_score=st.sampled_from((0.0, 0.0, 5.0, -5.0)),
    execute_at=st.sampled_from((None, None, None, loggen.T0 - 10, loggen.T0 + 60)),
    trigger_after_ids=st.sampled_from(((), (), (), ("a",), ("f",))),
    rate_limit_group=st.sampled_from((None, None, None, "g1")),
    max_execution_seconds=st.sampled_from((None, None, 2.5)),
    pool=st.sampled_from((None, None, "p")),
    auto_dedupe=st.booleans(),
).map(lambda cmd: cmd if cmd.rate_limit_group is None else _limited(cmd))


def _limited(cmd: Enqueue) -> Enqueue:
    from dataclasses import replace

    return replace(cmd, max_per_minute=2)


def _slow(state: QueueState, enqueued: dict[str, Any], now: float,
          refused: set[str]) -> tuple[list[dict[str, Any]], list[tuple[str, int]]]:  # fmt: skip
    """Fold the enqueue, plan with one free slot, decide the plan's claims."""
    folded, _ = fold(state, [enqueued])
    step = plan(folded, now, 1, accepts=lambda task: task.type not in refused)
    decided = planned_claims(list(step.claims), CLAIM, now=now, daemon="d")
    return decided.records, [(task.id, attempt) for task, attempt in decided.outcome]


def _agree(state: QueueState, cmd: Enqueue, now: float, refused: set[str]) -> None:
    decision = decide(state, cmd, now=now, daemon="d")
    if len(decision.records) != 1:
        event("not one record (refused, deduplicated)")
        return
    enqueued = {**decision.records[0], ev.F_SEQ: state.last_seq + 1}
    fused = claim_enqueued(state, enqueued, CLAIM, now=now, daemon="d",
                           eligible=lambda task: task.type not in refused)  # fmt: skip
    if fused is None:
        event("only the fold can tell")
        return
    event(f"told: {len(fused.records)} claim(s)")
    claimed = [(task.id, attempt) for task, attempt in fused.outcome]
    assert (fused.records, claimed) == _slow(state, enqueued, now, refused)


@settings(max_examples=examples(400))
@given(loggen.valid_logs, enqueues, loggen.nows, st.sets(st.sampled_from(loggen.TYPES)))
def test_the_claim_told_is_the_claim_the_fold_and_plan_make(
    log: list[Any], cmd: Enqueue, now: float, refused: set[str]
) -> None:
    _agree(fold(empty(), log)[0], cmd, now, refused)


@settings(max_examples=examples(400))
@given(loggen.any_logs, enqueues, loggen.nows)
def test_the_claim_told_holds_on_any_log(log: list[Any], cmd: Enqueue, now: float) -> None:
    _agree(fold(empty(), log)[0], cmd, now, set())


def test_an_idle_queue_is_told_without_the_fold() -> None:
    """The case it is for: nothing else ready, a plain task, a free slot."""
    state, _ = fold(empty(), [])
    cmd = Enqueue("t", loggen.TYPES[0], task_data="{}")
    enqueued = decide(state, cmd, now=loggen.T0, daemon="d").records[0]
    fused = claim_enqueued(state, enqueued, CLAIM, now=loggen.T0, daemon="d",
                           eligible=lambda task: True)  # fmt: skip
    assert fused is not None
    assert [(task.id, attempt) for task, attempt in fused.outcome] == [("t", 1)]
    assert fused.records == _slow(state, enqueued, loggen.T0, set())[0]


def test_a_ready_task_waiting_already_leaves_it_to_the_plan() -> None:
    """A task ready before it may go first (more urgent, or older): only a plan knows."""
    now = loggen.T0
    state, _ = fold(empty(), [])
    first = decide(state, Enqueue("old", loggen.TYPES[0], urgency_score=9.0), now=now,
                   daemon="d").records  # fmt: skip
    state, _ = fold(state, [{**first[0], ev.F_SEQ: 1}])
    enqueued = decide(state, Enqueue("new", loggen.TYPES[0]), now=now, daemon="d").records[0]
    assert claim_enqueued(state, enqueued, CLAIM, now=now, daemon="d",
                          eligible=lambda task: True) is None  # fmt: skip
    assert _slow(state, enqueued, now, set())[1] == [("old", 1)]


def _alone(state: QueueState, cmd: Enqueue, now: float, capacity: int, refused: set[str]) -> None:
    decision = decide(state, cmd, now=now, daemon="d")
    if len(decision.records) != 1:
        return
    folded, _ = fold(state, [{**decision.records[0], ev.F_SEQ: state.last_seq + 1}])
    eligible = lambda task: task.type not in refused  # noqa: E731
    told = claim_alone(folded, cmd.task_id, CLAIM, now=now, daemon="d", eligible=eligible)
    if told is None:
        event("alone: only a plan can tell")
        return
    event(f"alone: told, capacity {capacity}")
    step = plan(folded, now, capacity, accepts=eligible)
    planned = planned_claims(list(step.claims), CLAIM, now=now, daemon="d")
    assert told.records == planned.records
    assert [(t.id, a) for t, a in told.outcome] == [(t.id, a) for t, a in planned.outcome]


@settings(max_examples=examples(400))
@given(loggen.valid_logs, enqueues, loggen.nows, st.integers(1, 3),
       st.sets(st.sampled_from(loggen.TYPES)))  # fmt: skip
def test_the_claim_told_after_the_fold_is_the_plans(
    log: list[Any], cmd: Enqueue, now: float, capacity: int, refused: set[str]
) -> None:
    _alone(fold(empty(), log)[0], cmd, now, capacity, refused)


@settings(max_examples=examples(400))
@given(loggen.any_logs, enqueues, loggen.nows, st.integers(1, 3))
def test_the_claim_told_after_the_fold_holds_on_any_log(
    log: list[Any], cmd: Enqueue, now: float, capacity: int
) -> None:
    _alone(fold(empty(), log)[0], cmd, now, capacity, set())


def test_an_idle_queue_is_told_after_the_fold_without_a_plan() -> None:
    state, _ = fold(empty(), [])
    enqueued = decide(state, Enqueue("t", loggen.TYPES[0]), now=loggen.T0, daemon="d").records
    folded, _ = fold(state, [{**enqueued[0], ev.F_SEQ: 1}])
    told = claim_alone(folded, "t", CLAIM, now=loggen.T0, daemon="d", eligible=lambda t: True)
    assert told is not None and [(t.id, a) for t, a in told.outcome] == [("t", 1)]
