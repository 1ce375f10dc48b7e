"""Rate windows: the dispatch times of a group within 60 s of its latest dispatch.

One rule for every path that touches a window (the incremental fold, the bulk fold,
the dispatcher planning a batch of claims), so they can never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable

RATE_WINDOW_SECONDS = 60.0


def extend_window(window: Iterable[float], times: Iterable[float]) -> tuple[float, ...]:
    """``window`` plus ``times``, sorted, keeping what lies within 60 s of the newest.

    Older times can never matter again: a check happens at a ``now`` no earlier than
    the newest dispatch (one clock per host).
    """
    merged = sorted((*window, *times))
    if not merged:
        return ()
    horizon = merged[-1] - RATE_WINDOW_SECONDS
    return tuple(t for t in merged if t > horizon)


def window_slot_free_at(window: Iterable[float], max_per_minute: int, now: float) -> float | None:
    """None if fewer than ``max_per_minute`` dispatches lie in the 60 s before ``now``,
    else the instant the oldest of the last ``max_per_minute`` leaves the window."""
    recent = [t for t in window if t > now - RATE_WINDOW_SECONDS]
    if len(recent) < max_per_minute:
        return None
    return recent[-max_per_minute] + RATE_WINDOW_SECONDS
