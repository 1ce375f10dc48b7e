"""decide_run: a run of enqueues decided together is what deciding them one at a
time, folding each, gives: the same records and the same outcomes (duplicates, dedupe
verdicts, unknown parents, cycles), whatever the run and the state before it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_budget import examples
from projcheck import decided_one_at_a_time, folds_in_decide

from snerd.projections.commands import Enqueue
from snerd.projections.decide import decide, decide_run
from snerd.projections.state import empty, fold

NOW = 1_760_000_000.0
IDS = [f"t{i}" for i in range(6)]

enqueues = st.builds(
    lambda task_id, kind, data, dedupe, parents: Enqueue(
        task_id, kind, task_data=data, auto_dedupe=dedupe, trigger_after_ids=tuple(parents)
    ),
    st.sampled_from(IDS),
    st.sampled_from(["a", "b"]),
    st.sampled_from(['{"x":1}', '{"x":2}']),
    st.booleans(),
    st.lists(st.sampled_from(IDS), max_size=2),
)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(enqueues, max_size=6), st.lists(enqueues, min_size=1, max_size=10))
def test_a_run_decided_together_is_the_run_decided_one_at_a_time(
    before: list[Enqueue], run: list[Enqueue]
) -> None:
    state = empty()
    for cmd in before:  # a state with live tasks, fingerprints and parents in it
        state = fold(state, decide(state, cmd, now=NOW - 10, daemon="d0").records)[0]
    together = decide_run(state, run, now=NOW, daemon="d1")
    alone = decided_one_at_a_time(state, run, now=NOW, daemon="d1")
    assert [(d.outcome, d.records) for d in together] == alone


def test_members_that_cannot_meet_are_decided_against_the_state_before_the_run() -> None:
    """The run's records come out as one list to fold once: no fold in between for
    members with other ids, no shared dedupe digest and no parents."""
    run = [Enqueue(f"n{i}", "a", task_data=f'{{"i":{i}}}', auto_dedupe=True) for i in range(5)]
    with folds_in_decide() as calls:
        decisions = decide_run(empty(), run, now=NOW, daemon="d1")
        assert calls == []
        assert [d.records[0]["taskId"] for d in decisions] == [f"n{i}" for i in range(5)]
        again = decide_run(empty(), [*run, run[0]], now=NOW, daemon="d1")
        assert len(calls) == 1  # the repeated id: the run so far folded, then decided
        assert again[-1].outcome is not None and again[-1].records == []
