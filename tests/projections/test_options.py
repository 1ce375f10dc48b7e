"""The enqueue options' common path (no option beyond id, type, data, retry count and
retry delay) answers exactly as reading every option does, for any message."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from snerd.projections.commands import Enqueue
from snerd.projections.options import (
    _RARE_OPTIONS,
    Fields,
    OptionError,
    all_enqueue_options,
    enqueue_options,
)

_values = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 2**32), st.floats(allow_nan=True),
    st.text(max_size=6), st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.just(""), st.just(0), st.just("fixed"), st.just("exponential"),
    st.just("2026-01-01T00:00:00Z"), st.just(["a", "b"]),
)  # fmt: skip
_common = ("action", "task_data", "max_retries", "retry_after_hours")
_ids = st.one_of(st.text(min_size=1, max_size=3), _values)  # mostly valid, sometimes not
_messages = st.fixed_dictionaries(
    {"task_id": _ids, "task_type": _ids},
    optional={name: _values for name in sorted({*_common, *_RARE_OPTIONS, "other"})},
).flatmap(  # the rare options absent as often as not, so the common path is taken
    lambda msg: st.sampled_from([msg, {k: v for k, v in msg.items() if k not in _RARE_OPTIONS}])
)


def _answer(read: Any, msg: dict[str, Any]) -> Enqueue | tuple[str, str, str]:
    try:
        command: Enqueue = read(Fields(msg))
    except OptionError as exc:
        return exc.field, exc.message, exc.code
    return command


@given(_messages)
def test_the_common_path_answers_as_every_option_read(msg: dict[str, Any]) -> None:
    assert _answer(enqueue_options, msg) == _answer(all_enqueue_options, msg)


@given(st.fixed_dictionaries(
    {"task_id": st.text(min_size=1, max_size=4), "task_type": st.text(min_size=1, max_size=4)},
    optional={"task_data": _values, "max_retries": st.integers(0, 9),
              "retry_after_hours": st.floats(0, 10), "action": st.just("enqueue")},
))  # fmt: skip
def test_common_enqueues_take_every_other_option_at_its_default(msg: dict[str, Any]) -> None:
    answer = _answer(enqueue_options, msg)
    if isinstance(answer, Enqueue):
        plain = Enqueue(answer.task_id, answer.task_type, task_data=answer.task_data,
                        max_retries=answer.max_retries,
                        retry_after_hours=answer.retry_after_hours)  # fmt: skip
        assert answer == plain


def test_task_data_that_json_cannot_hold_is_refused_by_name() -> None:
    """An in-process caller's task_data with an integer past 64 bits (JSON lines cannot
    carry it) is an invalid task_data, not an error from the encoder."""
    answer = _answer(enqueue_options, {"task_id": "a", "task_type": "t",
                                       "task_data": {"n": 2**64}})  # fmt: skip
    assert isinstance(answer, tuple)
    assert answer[0] == "task_data" and "cannot be encoded as JSON" in answer[1]
