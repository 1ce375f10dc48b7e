"""Retry backoff: how long a failed attempt waits before its retry (pure).

Two policies, chosen per task at enqueue:

* fixed (SnerdMQ's): every retry waits ``retry_after_hours``;
* ``exponential``: retry ``n`` (0 for the first) waits ``base * 2**n`` capped at
  ``retry_max_delay``, then scaled by ``(1 + jitter) / 2`` ("equal jitter": the wait
  never drops below half its exponential value, and tasks that failed together spread
  out), and never less than ``base``. ``base`` is ``retry_after_hours`` (one second when
  that is 0).

``jitter`` is a number in [0, 1] that the shell draws (``Engine``); the core never
draws.
The delay chosen is written into the ``retry_scheduled`` event (``retryAfterTime``,
``retryDelay``), so a replay reads it back and never computes it again.
"""

from __future__ import annotations

from typing import Final

from snerd.projections.task import Task

EXPONENTIAL: Final = "exponential"
FIXED: Final = "fixed"
POLICIES: Final = (FIXED, EXPONENTIAL)
DEFAULT_BASE_SECONDS: Final = 1.0
"""The base of an exponential backoff whose ``retry_after_hours`` is 0."""
DEFAULT_MAX_DELAY: Final = 3600.0
"""The cap of an exponential backoff enqueued without ``retry_max_delay`` (one hour, or
the base if that is longer)."""
_MAX_DOUBLINGS: Final = 64  # 2**64 seconds is past any cap the options accept


def base_seconds(retry_after_hours: float, policy: str | None) -> float:
    """The shortest wait of a policy: ``retry_after_hours`` in seconds (exponential: at
    least :data:`DEFAULT_BASE_SECONDS`)."""
    base = retry_after_hours * 3600.0
    if policy == EXPONENTIAL and base <= 0:
        return DEFAULT_BASE_SECONDS
    return base


def default_cap(base: float) -> float:
    """The cap of an exponential backoff when none is given."""
    return max(base, DEFAULT_MAX_DELAY)


def exponential_delay(base: float, cap: float, retry: int, jitter: float) -> float:
    """Retry number ``retry`` (0 = first) of an exponential backoff: in [base, cap]
    whenever base <= cap, for any ``jitter`` in [0, 1]."""
    grown = cap if retry >= _MAX_DOUBLINGS else min(cap, base * 2.0**retry)
    spread = grown * (1.0 + min(max(jitter, 0.0), 1.0)) / 2.0
    return min(max(spread, base), max(cap, base))


def retry_delay(task: Task, jitter: float) -> float:
    """Seconds the task waits before its next retry (``task.retry_count`` retries so far)."""
    base = base_seconds(task.retry_after_hours, task.retry_backoff)
    if task.retry_backoff != EXPONENTIAL:
        return base
    cap = task.retry_max_delay if task.retry_max_delay is not None else default_cap(base)
    return exponential_delay(base, cap, task.retry_count, jitter)
