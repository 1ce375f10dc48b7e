"""The forms SnerdMQ's reader takes mean what ours meant (issue 9.5)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from snerd.projections.schedule import next_fire, parse_cron, snerdmq_cron
from snerd.projections.task import task_from_record, task_to_record

FIVE_FIELDS = ["13 4 * * *", "*/5 * * * *", "0 9 * * 1-5", "30 23 1 * 0", "0 0 * * 7",
               "15,45 8-18 * 1-6 *"]  # fmt: skip
SHORTHANDS = {"30s": 30, "1s": 1, "15m": 900, "2h": 7200, "1d": 86400, "60s": 60}


@settings(max_examples=200, deadline=None)
@given(after=st.integers(min_value=0, max_value=4_000_000_000), text=st.sampled_from(FIVE_FIELDS))
def test_five_fields_fire_at_the_same_instants_in_snerdmqs_form(after: int, text: str) -> None:
    readable = snerdmq_cron(text)
    assert readable is not None and len(readable.split()) == 6
    assert next_fire(parse_cron(readable), after) == next_fire(parse_cron(text), after)


@given(after=st.integers(min_value=0, max_value=4_000_000_000),
       text=st.sampled_from(sorted(SHORTHANDS)))  # fmt: skip
def test_shorthands_keep_their_period(after: int, text: str) -> None:
    readable = snerdmq_cron(text)
    assert readable is not None
    cron = parse_cron(readable)
    first = next_fire(cron, after)
    assert next_fire(cron, first) - first == SHORTHANDS[text]


def test_a_line_snerdmq_rewrote_keeps_the_schedule_and_timeout() -> None:
    """SnerdMQ drops fields it does not know (cronText, maxExecutionSecondsExact) when it
    rewrites a task: the rest still means the same schedule and a close timeout."""
    ours = task_from_record({"taskId": "a", "taskType": "t", "cronExpression": "13 4 * * *",
                             "maxExecutionSeconds": 2.5})  # fmt: skip
    record = task_to_record(ours)
    rewritten = {k: v for k, v in record.items() if k not in ("cronText",
                                                              "maxExecutionSecondsExact")}
    theirs = task_from_record(rewritten)
    assert next_fire(parse_cron(theirs.cron or ""), 1e9) == next_fire(parse_cron("13 4 * * *"), 1e9)
    assert theirs.max_execution_seconds == 3 and ours.max_execution_seconds == 2.5
    assert task_from_record(record).cron == "13 4 * * *"  # ours reads back as given
