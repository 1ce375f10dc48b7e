"""The demo's workflow: what it enqueues, the handlers that run it, and a tracker.

A nightly-report job on the embedded queue: three fetches fan in to a report; a
card charge fails once and succeeds on retry; a legacy import dead-letters and fails
its child and grandchild through; five welcome e-mails share a rate-limited group
(3 per minute, so two visibly wait for a slot); a digest is delayed a few seconds; an
urgent refund jumps the queue. Handlers sleep to look like work and report progress.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from snerd.projections import events as ev

EMAILS = 5
SMTP_PER_MINUTE = 3


@dataclass(frozen=True, slots=True)
class Step:
    """One task of the workflow."""

    id: str
    type: str
    data: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)
    story: str = ""


def plan(now: float, *, fast: bool) -> list[Step]:
    """The tasks to enqueue, in enqueue order."""
    backoff = 0.00001 if fast else 0.001  # hours: 0.036 s or 3.6 s
    fetches = ["fetch-orders", "fetch-customers", "fetch-inventory"]
    steps = [
        Step(f, "fetch", {"source": f.split("-", 1)[1]}, story="fan-in parent") for f in fetches
    ]
    steps += [
        Step(
            "build-report",
            "report",
            {"week": 48},
            {"trigger_after_ids": fetches},
            "waits for all three fetches (fan-in)",
        ),
        Step(
            "charge-card",
            "charge",
            {"amount": 42},
            {"max_retries": 2, "retry_after_hours": backoff},
            "fails once, succeeds on retry",
        ),
        Step(
            "import-legacy",
            "import",
            {"file": "legacy.csv"},
            {"max_retries": 2, "retry_after_hours": backoff},
            "fails every time: dead-lettered",
        ),
        Step(
            "reindex-legacy",
            "reindex",
            {},
            {"trigger_after_ids": ["import-legacy"]},
            "child of a dead letter: failed through",
        ),
        Step(
            "notify-legacy",
            "notify",
            {},
            {"trigger_after_ids": ["reindex-legacy"]},
            "grandchild: failed through too",
        ),
        Step(
            "send-digest",
            "digest",
            {"to": "team"},
            {"execute_at": now + (0.1 if fast else 6)},
            "delayed: runs a few seconds after start",
        ),
    ]
    steps += [
        Step(
            f"welcome-email-{n}",
            "email",
            {"to": f"user{n}@example.com"},
            {"rate_limit_group": "smtp", "max_per_minute": SMTP_PER_MINUTE},
            f"rate group smtp: {SMTP_PER_MINUTE} per minute",
        )
        for n in range(1, EMAILS + 1)
    ]
    steps.append(
        Step(
            "urgent-refund",
            "charge",
            {"amount": -7},
            {"urgency_score": 10},
            "enqueued last, runs first (urgency 10)",
        )
    )
    return steps


async def _work(job: Any, seconds: float, steps: int = 5) -> None:
    for n in range(1, steps + 1):
        await asyncio.sleep(seconds / steps)
        await job.progress({"pct": round(100 * n / steps), "step": f"{n}/{steps}"})


def handlers(*, fast: bool) -> dict[str, Any]:
    """Task type -> async handler."""
    scale = 0.02 if fast else 1.0

    async def fetch(job: Any) -> None:
        await _work(job, scale * {"orders": 4.0, "customers": 2.5}.get(job.data["source"], 3.2))

    async def report(job: Any) -> None:
        await _work(job, scale * 4.0, steps=8)

    async def charge(job: Any) -> None:
        await _work(job, scale * 1.0, steps=2)
        if job.id == "charge-card" and job.attempt == 1:
            raise ConnectionError("card network timeout")

    async def import_(job: Any) -> None:
        await _work(job, scale * 1.5, steps=3)
        raise ValueError("legacy.csv is malformed at line 42")

    async def quick(job: Any) -> None:
        await _work(job, scale * 1.0, steps=2)

    return {
        "fetch": fetch,
        "report": report,
        "charge": charge,
        "import": import_,
        "reindex": quick,
        "notify": quick,
        "digest": quick,
        "email": quick,
    }


@dataclass(slots=True)
class Row:
    """What the demo shows for one task."""

    step: Step
    state: str = "pending"
    attempts: int = 0
    percent: float = 0.0
    error: str | None = None
    reason: str | None = None
    started: float | None = None
    ended: float | None = None
    failures: list[str] = field(default_factory=list)


class Tracker:
    """An engine observer that keeps one :class:`Row` per task and a list of news."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self.rows = {step.id: Row(step) for step in steps}
        self.news: list[str] = []

    def observe(self, events: Sequence[Any], delta: Any) -> None:
        for event in events:
            record = event.record
            row = self.rows.get(str(ev.task_id_of(record)))
            if row is not None:
                self._apply(row, record)

    def _apply(self, row: Row, record: dict[str, Any]) -> None:
        from snerd.projections.task import record_error
        from snerd.projections.views.tasks import percent

        event, now, name = record.get(ev.F_EVENT), time.time(), row.step.id
        if event == ev.CLAIMED:
            row.state, row.percent = "active", 0.0
            row.attempts = int(record.get(ev.F_ATTEMPT) or row.attempts + 1)
            row.started = row.started or now
            self.news.append(f"{name} started (attempt {row.attempts})")
        elif event == ev.PROGRESSED:
            row.percent = percent(record.get(ev.F_DATA))
        elif event == ev.SUCCEEDED:
            row.state, row.percent, row.ended = "completed", 100.0, now
            self.news.append(f"{name} completed")
        elif event == ev.RETRY_SCHEDULED:
            row.state, row.error = "retrying", record_error(record)
            row.failures.append(row.error or "failed")
            self.news.append(f"{name} failed ({row.error}); retry scheduled")
        elif event == ev.DEAD_LETTERED:
            row.state, row.ended = "dead_lettered", now
            row.error, row.reason = record_error(record), str(record.get(ev.F_REASON) or "")
            self.news.append(f"{name} dead-lettered: {row.reason.replace('_', ' ')}")

    def unfinished(self) -> list[Row]:
        return [r for r in self.rows.values() if r.state not in ("completed", "dead_lettered")]
