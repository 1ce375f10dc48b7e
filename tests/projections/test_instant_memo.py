"""The task record's remembered instants (``task._parse_cached``, ``task._format_cached``):
the same answers as :func:`parse_instant` and :func:`format_instant`, bounded, and
nothing kept for a text that is no instant."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snerd.errors import EventError
from snerd.projections import task
from snerd.projections.schedule import format_instant, parse_instant

_INSTANTS = st.one_of(
    st.floats(min_value=0.0, max_value=253_402_300_799.0, allow_nan=False),
    st.integers(min_value=0, max_value=253_402_300_799),
    st.sampled_from([0.0, -0.0, 1, 1.0, 0.0005, 0.0015, 1_700_000_000.9995]),
)
_TEXTS = st.one_of(
    _INSTANTS.map(format_instant),
    st.sampled_from(["2024-01-01", "2024-01-01T00:00:00+02:00", "2016-12-31T23:59:60Z",
                     "2024-02-29 12:30:00.123456z", "2024-01-01T00:00:00.1Z"]),
)  # fmt: skip


@given(st.lists(_INSTANTS, max_size=8))
def test_a_remembered_text_is_format_instants(instants: list[float]) -> None:
    for instant in [*instants, *instants]:  # (the second time, from the memo)
        assert task._format_cached(instant) == format_instant(instant)
        assert task._FORMATTED.get(instant) == format_instant(instant)


@given(st.lists(_TEXTS, max_size=8))
def test_a_remembered_instant_is_parse_instants(texts: list[str]) -> None:
    for text in [*texts, *texts]:
        assert task._parse_cached(text) == parse_instant(text)
        assert task._PARSED.get(text) == parse_instant(text)


@pytest.mark.parametrize("text", ["", "soon", "2024-13-01T00:00:00Z", "2024-01-01T00:00:00.00xZ"])
def test_no_instant_is_remembered_for_a_bad_text(text: str) -> None:
    with pytest.raises(EventError):
        task._parse_cached(text)
    assert text not in task._PARSED


def test_the_instants_kept_are_bounded_and_the_latest_read_back() -> None:
    kept = task._INSTANTS_KEPT
    for second in range(1_700_000_000, 1_700_000_000 + kept + kept // 2):
        text = task._format_cached(float(second) + 0.25)
        assert task._FORMATTED.get(float(second) + 0.25) == text
        assert task._parse_cached(text) == float(second) + 0.25
        assert task._PARSED.get(text) == float(second) + 0.25
        assert len(task._FORMATTED) <= kept and len(task._PARSED) <= kept
