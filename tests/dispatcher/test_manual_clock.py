"""The test clock keeps the system clock's rules: a timer fires once its instant is
reached, by an advance, or on the loop's next turn when armed for an instant past."""

from __future__ import annotations

import asyncio

from snerd.dispatcher.clock import ManualClock


async def test_a_timer_fires_on_the_advance_that_reaches_it() -> None:
    clock, fired = ManualClock(), []
    clock.call_at(clock.now() + 5, lambda: fired.append("later"))
    clock.advance(4.99)
    assert fired == []
    clock.advance(0.01)
    assert fired == ["later"]


async def test_a_timer_for_an_instant_past_fires_on_the_next_turn_unless_cancelled() -> None:
    """As ``SystemClock.call_at`` (``loop.call_later`` of 0): a dispatcher that arms its
    timer after the instant was reached would otherwise wait for an advance that may
    never come (a test whose last advance came first hung)."""
    clock, fired = ManualClock(), []
    clock.call_at(clock.now(), lambda: fired.append("now"))
    clock.call_at(clock.now() - 1, lambda: fired.append("past"))
    clock.call_at(clock.now() - 2, lambda: fired.append("cancelled")).cancel()
    assert fired == []  # not within the call
    await asyncio.sleep(0)
    assert fired == ["now", "past"]
    clock.advance(10)
    assert fired == ["now", "past"]  # once


def test_without_a_loop_a_past_timer_waits_for_the_next_advance() -> None:
    clock, fired = ManualClock(), []
    clock.call_at(clock.now() - 1, lambda: fired.append("past"))
    assert fired == []
    clock.advance(0)
    assert fired == ["past"]
