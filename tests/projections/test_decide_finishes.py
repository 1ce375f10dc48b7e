"""decide_run: a run of outcomes, or of outcomes and enqueues, decided together is what
deciding them one at a time, folding each, gives: the same records and the same
outcomes (refusals for an attempt not running here, retries, dead letters and the
fail-through of their children; duplicates, dedupe verdicts, unknown parents),
whatever the run and the state before it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_budget import examples
from projcheck import decided_one_at_a_time, folds_in_decide

from snerd.projections.commands import Claim, Enqueue, Finish
from snerd.projections.decide import decide, decide_run
from snerd.projections.state import QueueState, empty, fold

NOW = 1_760_000_000.0
IDS = [f"t{i}" for i in range(5)]

DATA = ['{"x":1}', '{"x":2}']

tasks = st.fixed_dictionaries({
    "retries": st.sampled_from((0, 1)),
    "parent": st.sampled_from((None, *IDS)),
    "claimed_by": st.sampled_from((None, "d1", "d1", "d0")),
    "dedupe": st.booleans(),
    "data": st.sampled_from(DATA),
})  # fmt: skip

finishes = st.builds(
    lambda task_id, attempt, success, retry, result: Finish(
        task_id, attempt, success, error=None if success else "boom", retry=retry,
        result=result if success else None,
    ),
    st.sampled_from(IDS),
    st.sampled_from((1, 1, 2)),
    st.booleans(),
    st.booleans(),
    st.sampled_from((None, {"ok": 1})),
)  # fmt: skip

enqueues = st.builds(
    lambda task_id, data, dedupe, parents: Enqueue(
        task_id, "a", task_data=data, auto_dedupe=dedupe, trigger_after_ids=tuple(parents)
    ),
    st.sampled_from([*IDS, "n0", "n1"]),  # live ids, and new ones
    st.sampled_from(DATA),
    st.booleans(),
    st.lists(st.sampled_from([*IDS, "n0"]), max_size=2),
)  # fmt: skip


def _state(specs: list[dict[str, object]]) -> QueueState:
    """Tasks t0.. enqueued (some children of others), then claimed by d1 (ours), by
    d0 (another daemon), or left waiting."""
    state = empty()
    for i, spec in enumerate(specs):
        parent = spec["parent"]
        parents = (parent,) if isinstance(parent, str) and parent != IDS[i] else ()
        cmd = Enqueue(IDS[i], "a", max_retries=int(spec["retries"]),  # type: ignore[call-overload]
                      trigger_after_ids=parents, task_data=str(spec.get("data", DATA[0])),
                      auto_dedupe=bool(spec.get("dedupe")))  # fmt: skip
        state = fold(state, decide(state, cmd, now=NOW - 30, daemon="d0").records)[0]
    for daemon in ("d1", "d0"):
        ids = tuple(IDS[i] for i, spec in enumerate(specs) if spec["claimed_by"] == daemon)
        if ids:
            records = decide(state, Claim(ids), now=NOW - 20, daemon=daemon).records
            state = fold(state, records)[0]
    return state


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(tasks, min_size=1, max_size=5), st.lists(finishes, min_size=1, max_size=8))
def test_a_run_decided_together_is_the_run_decided_one_at_a_time(
    specs: list[dict[str, object]], run: list[Finish]
) -> None:
    state = _state(specs)
    together = decide_run(state, run, now=NOW, daemon="d1")
    alone = decided_one_at_a_time(state, run, now=NOW, daemon="d1")
    assert [(d.outcome, d.records) for d in together] == alone


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(tasks, min_size=1, max_size=5),
       st.lists(st.one_of(finishes, enqueues), min_size=1, max_size=8))  # fmt: skip
def test_a_run_of_outcomes_and_enqueues_decided_together_is_the_run_decided_one_at_a_time(
    specs: list[dict[str, object]], run: list[Finish | Enqueue]
) -> None:
    state = _state(specs)
    together = decide_run(state, run, now=NOW, daemon="d1")
    alone = decided_one_at_a_time(state, run, now=NOW, daemon="d1")
    assert [(d.outcome, d.records) for d in together] == alone


def test_a_success_and_the_next_enqueue_are_decided_against_one_state() -> None:
    """An attempt's success and the enqueue that follows it (the SDK's sequential
    path) fold once; an enqueue that could meet the success folds it first."""
    state = _state([{"retries": 1, "parent": None, "claimed_by": "d1", "dedupe": True,
                     "data": DATA[0]} for _ in IDS])  # fmt: skip
    with folds_in_decide() as calls:
        decisions = decide_run(state, [Finish(IDS[0], 1, True), Enqueue("n0", "a")],
                               now=NOW, daemon="d1")  # fmt: skip
        assert calls == []
        assert [d.records[0]["taskId"] for d in decisions] == [IDS[0], "n0"]
        for meets in (Enqueue(IDS[0], "a"), Enqueue("n0", "a", trigger_after_ids=(IDS[1],)),
                      Enqueue("n0", "a", task_data=DATA[1], auto_dedupe=True)):  # fmt: skip
            calls.clear()
            decide_run(state, [Finish(IDS[0], 1, True), meets], now=NOW, daemon="d1")
            assert len(calls) == 1, meets


def test_successes_of_different_tasks_are_decided_against_the_state_before_the_run() -> None:
    """The run's records come out as one list to fold once: no fold in between for
    successes of different tasks; a failure, or a task named again, folds first."""
    state = _state([{"retries": 1, "parent": None, "claimed_by": "d1"} for _ in IDS])
    run = [Finish(task_id, 1, True) for task_id in IDS[:4]]
    with folds_in_decide() as calls:
        decisions = decide_run(state, run, now=NOW, daemon="d1")
        assert calls == []
        assert [d.records[0]["taskId"] for d in decisions] == IDS[:4]
        again = decide_run(state, [*run, run[0]], now=NOW, daemon="d1")
        assert len(calls) == 1  # the repeated id: the run so far folded, then decided
        assert again[-1].outcome is not None and again[-1].records == []
        calls.clear()
        decide_run(state, [run[0], Finish(IDS[4], 1, False, error="boom"), run[1]],
                        now=NOW, daemon="d1")  # fmt: skip
        assert len(calls) == 2  # before the failure, and the failure's own records
