"""The claim of a task just enqueued, told without folding the enqueue first
(``decide.claim_enqueued``), is exactly what a plan with a free slot and
``planned_claims`` make against the folded state; where it cannot tell, it says so.

The engine relies on it: an enqueue (in-process or the daemon's) and its claim are
decided in one request and folded once."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from snerd.projections import events as ev
from snerd.projections.commands import Claim, Enqueue
from snerd.projections.decide import claim_enqueued, decide, planned_claims
from snerd.projections.plan import plan
from snerd.projections.state import QueueState, empty, fold
from snerd.projections.task import Task

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


refusals = st.sets(st.sampled_from((*loggen.TYPES, *loggen.IDS, "f", "g")))
"""What this engine refuses to run: task types it has no executor for, and tasks by id
(as a webhook task is refused where an SDK runs others of its type, in the same lane)."""


def _eligible(refused: set[str]) -> Callable[[Task], bool]:
    return lambda task: task.type not in refused and task.id not in refused


def _limited(cmd: Enqueue) -> Enqueue:
    return cmd.replace(max_per_minute=2)


def _slow(state: QueueState, enqueued: dict[str, Any], now: float,
          refused: set[str]) -> tuple[list[dict[str, Any]], list[tuple[str, int]]]:  # fmt: skip
    """Fold the enqueue, plan with one free slot, decide the plan's claims."""
    folded, _ = fold(state, [enqueued])
    step = plan(folded, now, 1, accepts=_eligible(refused))
    decided = planned_claims(list(step.claims), CLAIM, now=now, daemon="d")
    return decided.records, [(task.id, attempt) for task, attempt in decided.outcome]


def _agree(state: QueueState, cmd: Enqueue, now: float, refused: set[str]) -> None:
    decision = decide(state, cmd, now=now, daemon="d")
    if len(decision.records) != 1:
        event("not one record (refused, deduplicated)")
        return
    enqueued = {**decision.records[0], ev.F_SEQ: state.last_seq + 1}
    fused = claim_enqueued(state, enqueued, CLAIM, now=now, daemon="d",
                           eligible=_eligible(refused))  # fmt: skip
    if fused is None:
        event("only the fold can tell")
        return
    beside = " beside lanes refused" if state.lanes else ""
    event(f"told: {len(fused.records)} claim(s){beside}")
    claimed = [(task.id, attempt) for task, attempt in fused.outcome]
    assert (fused.records, claimed) == _slow(state, enqueued, now, refused)


@settings(max_examples=examples(400))
@given(loggen.valid_logs, enqueues, loggen.nows, refusals)
def test_the_claim_told_is_the_claim_the_fold_and_plan_make(
    log: list[Any], cmd: Enqueue, now: float, refused: set[str]
) -> None:
    _agree(fold(empty(), log)[0], cmd, now, refused)


@settings(max_examples=examples(400))
@given(loggen.any_logs, enqueues, loggen.nows, refusals)
def test_the_claim_told_holds_on_any_log(
    log: list[Any], cmd: Enqueue, now: float, refused: set[str]
) -> None:
    _agree(fold(empty(), log)[0], cmd, now, refused)


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


@settings(max_examples=examples(400))
@given(loggen.valid_logs, enqueues.map(lambda cmd: _typed(cmd, loggen.TYPES[0])), loggen.nows,
       st.sets(st.sampled_from(loggen.IDS)))  # fmt: skip
def test_the_claim_told_beside_tasks_waiting_for_other_workers(
    log: list[Any], cmd: Enqueue, now: float, ids: set[str]
) -> None:
    """The case the refusals above reach rarely: every other type waits for workers
    elsewhere (no executor here), and some tasks of the new one's type are refused here
    by id, so most lanes' first tasks are refused and some not."""
    state = fold(empty(), log)[0]
    refused = {*loggen.TYPES[1:], *ids}
    _agree(state, cmd, now, refused)


def _typed(cmd: Enqueue, task_type: str) -> Enqueue:
    return cmd.replace(task_type=task_type)


def _waiting(task_id: str, task_type: str) -> QueueState:
    """A state with one task ready, waiting: ``task_id`` of ``task_type``."""
    records = decide(empty(), Enqueue(task_id, task_type), now=loggen.T0, daemon="d").records
    return fold(empty(), [{**records[0], ev.F_SEQ: 1}])[0]


def test_a_ready_task_no_executor_here_takes_leaves_the_claim_told() -> None:
    """A task waiting for a worker elsewhere (a type nobody here registered) is passed
    over by every plan here: the new task is still the one thing a plan could pick, told
    without the fold."""
    other, mine = loggen.TYPES
    state = _waiting("elsewhere", other)
    eligible = _eligible({other})
    enqueued = {**decide(state, Enqueue("t", mine), now=loggen.T0, daemon="d").records[0],
                ev.F_SEQ: 2}  # fmt: skip
    fused = claim_enqueued(state, enqueued, CLAIM, now=loggen.T0, daemon="d", eligible=eligible)
    assert fused is not None and [(t.id, a) for t, a in fused.outcome] == [("t", 1)]
    assert fused.records == _slow(state, enqueued, loggen.T0, {other})[0]


def test_a_refused_task_ahead_in_the_same_lane_leaves_it_to_the_plan() -> None:
    """A lane's first task refused here (a webhook task of a type an SDK runs here) hides
    the tasks behind it from a plan, the new one too: only the plan can tell."""
    mine = loggen.TYPES[0]
    state = _waiting("hook", mine)
    eligible = _eligible({"hook"})
    enqueued = {**decide(state, Enqueue("t", mine), now=loggen.T0, daemon="d").records[0],
                ev.F_SEQ: 2}  # fmt: skip
    assert claim_enqueued(state, enqueued, CLAIM, now=loggen.T0, daemon="d",
                          eligible=eligible) is None  # fmt: skip
    assert _slow(state, enqueued, loggen.T0, {"hook"}) == ([], [])


def test_the_claim_told_between_milliseconds() -> None:
    """On an idle queue (the case the engine takes), at instants with sub-millisecond
    fractions: the wait the claim records is counted from the creation the record keeps
    (milliseconds), as the plan after the fold counts it."""
    state = fold(empty(), [])[0]
    for fraction in (0.0, 0.0004, 0.0005, 0.0007, 0.0009999):
        now = loggen.T0 + fraction
        enqueued = decide(state, Enqueue("t", loggen.TYPES[0]), now=now, daemon="d").records[0]
        fused = claim_enqueued(state, enqueued, CLAIM, now=now, daemon="d",
                               eligible=lambda task: True)  # fmt: skip
        assert fused is not None
        assert fused.records == _slow(state, {**enqueued, ev.F_SEQ: 1}, now, set())[0]


def test_a_task_claimed_in_its_enqueues_fold_never_enters_its_lane() -> None:
    """The fold of an enqueue and its claim leaves no entry of the task in its lane's
    heap, even below another ready task, where cleaning the top would never reach it:
    stale entries would pile up there, one a task, under a lane whose top waits."""
    from snerd.projections import decide as cmds
    from snerd.projections import heap
    from snerd.projections.commands import Enqueue
    from snerd.projections.state import empty, fold

    now = 1_700_000_000.0
    state = empty()
    waiting, _ = cmds.enqueue(state, Enqueue("a", "mail", urgency_score=9.0), now=now, daemon="d")
    state, _ = fold(state, waiting)
    records, _ = cmds.enqueue(state, Enqueue("b", "mail"), now=now + 1, daemon="d")
    enqueued, _ = fold(state, records)  # b, to claim: a claim is decided from its task
    claim = cmds.claim(enqueued.tasks["b"], now=now + 1, daemon="d", lease_seconds=60)
    state, _ = fold(state, [*records, claim])  # both in one fold
    assert state.tasks["b"].phase == "active"
    lane = state.tasks["a"].lane
    assert [key[2] for key in heap.iter_keys(state.lanes[lane])] == ["a"]
