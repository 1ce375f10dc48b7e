"""Retry backoff (pure): delays stay within [base, cap], the options that choose a
policy are checked at the edge, and the decider writes the delay it chose."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_budget import examples

from snerd.projections import backoff
from snerd.projections import events as ev
from snerd.projections.commands import Claim, Enqueue, Finish
from snerd.projections.decide import decide
from snerd.projections.options import OptionError, enqueue_command
from snerd.projections.state import QueueState, empty, fold_events
from snerd.projections.task import Task, task_from_record, task_to_record

NOW = 1_700_000_000.0

seconds = st.floats(min_value=0.001, max_value=315_360_000.0, allow_nan=False)


@settings(max_examples=examples(500), deadline=None)
@given(
    base=seconds, cap=seconds, retry=st.integers(min_value=0, max_value=2**31 - 1),
    jitter=st.floats(min_value=0.0, max_value=1.0),
)  # fmt: skip
def test_an_exponential_delay_stays_within_base_and_cap(
    base: float, cap: float, retry: int, jitter: float
) -> None:
    base, cap = min(base, cap), max(base, cap)
    delay = backoff.exponential_delay(base, cap, retry, jitter)
    assert base <= delay <= cap


@settings(max_examples=examples(300), deadline=None)
@given(
    hours=st.floats(min_value=0.0, max_value=10.0), cap=st.none() | seconds,
    retries=st.integers(min_value=0, max_value=200), jitter=st.floats(0.0, 1.0),
)  # fmt: skip
def test_the_options_policy_keeps_every_retry_within_base_and_cap(
    hours: float, cap: float | None, retries: int, jitter: float
) -> None:
    options: dict[str, Any] = {"retry_backoff": "exponential", "retry_after_hours": hours}
    base = backoff.base_seconds(hours, backoff.EXPONENTIAL)
    if cap is not None:
        options["retry_max_delay"] = cap = max(cap, base)
    cmd = enqueue_command("t", "x", **options)
    assert cmd.retry_max_delay is not None and cmd.retry_max_delay >= base
    task = Task("t", "x", retry_after_hours=hours, retry_count=retries,
                retry_backoff=cmd.retry_backoff, retry_max_delay=cmd.retry_max_delay)  # fmt: skip
    assert base <= backoff.retry_delay(task, jitter) <= cmd.retry_max_delay


def test_delays_double_until_the_cap_and_jitter_spreads_them() -> None:
    low = [backoff.exponential_delay(2.0, 60.0, n, 0.0) for n in range(8)]
    high = [backoff.exponential_delay(2.0, 60.0, n, 1.0) for n in range(8)]
    assert high == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    assert low == [2.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]  # never below half, nor base


def test_fixed_policy_ignores_jitter() -> None:
    task = Task("t", "x", retry_after_hours=0.5, retry_count=7)
    assert backoff.retry_delay(task, 0.0) == backoff.retry_delay(task, 1.0) == 1800.0


def test_exponential_defaults_base_one_second_and_cap_one_hour() -> None:
    cmd = enqueue_command("t", "x", retry_backoff="exponential")
    assert (cmd.retry_backoff, cmd.retry_max_delay) == ("exponential", 3600.0)
    assert enqueue_command("t", "x", retry_backoff="fixed").retry_backoff is None
    long = enqueue_command("t", "x", retry_backoff="exponential", retry_after_hours=2)
    assert long.retry_max_delay == 7200.0  # the base, when it is longer than an hour


@pytest.mark.parametrize(
    ("options", "field", "words"),
    [
        ({"retry_backoff": "linear"}, "retry_backoff", '"fixed" or "exponential"'),
        ({"retry_backoff": 2}, "retry_backoff", "string"),
        ({"retry_max_delay": 10}, "retry_max_delay", 'needs retry_backoff "exponential"'),
        ({"retry_backoff": "exponential", "retry_max_delay": 0}, "retry_max_delay", "> 0"),
        ({"retry_backoff": "exponential", "retry_max_delay": -1}, "retry_max_delay", "> 0"),
        ({"retry_backoff": "exponential", "retry_max_delay": 1e12}, "retry_max_delay", "at most"),
        ({"retry_backoff": "exponential", "retry_max_delay": 10, "retry_after_hours": 1},
         "retry_max_delay", "at least the base delay (3600 s"),
    ],
)  # fmt: skip
def test_bad_policies_are_refused_naming_the_field(
    options: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(OptionError) as caught:
        enqueue_command("t", "x", **options)
    assert caught.value.field == field
    assert words in caught.value.message


def test_the_policy_survives_a_log_line_round_trip() -> None:
    task = Task("t", "x", retry_backoff="exponential", retry_max_delay=90.5, created_at=NOW)
    record = task_to_record(task)
    assert (record[ev.F_RETRY_BACKOFF], record[ev.F_RETRY_MAX_DELAY]) == ("exponential", 90.5)
    back = task_from_record(record)
    assert (back.retry_backoff, back.retry_max_delay) == ("exponential", 90.5)
    assert not back.extra  # read into the task, not kept as unknown fields
    plain = task_to_record(Task("t", "x", created_at=NOW))
    assert ev.F_RETRY_BACKOFF not in plain and ev.F_RETRY_MAX_DELAY not in plain


def _run(state: QueueState, command: Any, now: float) -> tuple[QueueState, list[dict[str, Any]]]:
    decision = decide(state, command, now=now, daemon="d")
    state, _ = fold_events(state, decision.events)
    return state, decision.records


def _fail_once(state: QueueState, now: float, **finish: Any) -> tuple[QueueState, dict[str, Any]]:
    state, claims = _run(state, Claim(("t",)), now)
    attempt = claims[0][ev.F_ATTEMPT]
    state, records = _run(state, Finish("t", attempt, False, error="boom", **finish), now)
    return state, records[0]


def test_the_retry_event_carries_the_chosen_delay_and_time() -> None:
    cmd = enqueue_command("t", "x", retry_backoff="exponential", retry_after_hours=10 / 3600,
                          retry_max_delay=100, max_retries=5)  # fmt: skip
    state, _ = _run(empty(), cmd, NOW)
    now, delays = NOW, []
    for jitter in (1.0, 0.0, 0.5, 1.0, 1.0):
        state, record = _fail_once(state, now, jitter=jitter)
        assert record[ev.F_EVENT] == ev.RETRY_SCHEDULED
        delays.append(record[ev.F_RETRY_DELAY])
        now = state.tasks["t"].retry_after_time or math.nan
        assert now == pytest.approx(record[ev.F_TS] / 1000 + record[ev.F_RETRY_DELAY], abs=1e-3)
    assert delays == [10.0, 10.0, 30.0, 80.0, 100.0]


def test_retry_false_dead_letters_at_once_with_retries_left() -> None:
    state, _ = _run(empty(), Enqueue("t", "x", max_retries=5), NOW)
    state, record = _fail_once(state, NOW, retry=False)
    assert record[ev.F_EVENT] == ev.DEAD_LETTERED
    assert record[ev.F_REASON] == ev.REASON_PERMANENT
    assert "t" in state.dlq and "t" not in state.tasks
    assert state.dlq["t"].reason == ev.REASON_PERMANENT
