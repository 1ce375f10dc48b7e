"""decide.Decision: a plain class (a wheel compiles it natively, where a frozen
dataclass would be built through an interpreted ``__init__``), with the dataclass's
value semantics kept."""

from __future__ import annotations

import pytest

from snerd.projections.decide import Decision, Refusal


def test_a_decision_is_its_records_and_outcome() -> None:
    refusal = Refusal("not_active", "gone")
    assert Decision([{"a": 1}], refusal) == Decision([{"a": 1}], refusal)
    assert Decision([{"a": 1}]) != Decision([{"a": 2}])
    assert Decision([], refusal) != Decision([], None)
    assert Decision([]) != ([], None)  # not a tuple of its fields
    assert repr(Decision([{"a": 1}])) == "Decision(records=[{'a': 1}], outcome=None)"


def test_each_decision_without_records_has_a_list_of_its_own() -> None:
    first, second = Decision(), Decision()
    assert first.records == [] and first.outcome is None
    first.records.append({"a": 1})
    assert second.records == []


def test_a_decision_is_not_hashable_as_its_list_of_records_is_not() -> None:
    with pytest.raises(TypeError):
        hash(Decision())
