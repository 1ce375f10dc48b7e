"""``stats`` shows a progress bar once it runs past a threshold (an injected clock)."""

from __future__ import annotations

import io
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis_budget import examples
from rich.console import Console

from benchmarks.bench_replay import generate
from snerd.tools.progress import LateProgress
from snerd.tools.stats import collect, gather, load

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "projections"))
import loggen


class StepClock:
    """A clock that moves ``step`` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=100), out


def test_stats_past_the_threshold_shows_a_bar(tmp_path: Path) -> None:
    generate(tmp_path / "s", 200)
    console, out = terminal()
    data = gather(tmp_path / "s", console, clock=StepClock(0.5), after=1.0, every=64)
    assert "reading the log" in out.getvalue()
    assert data["totals"]["completed"] == 190  # the figures are unchanged by the bar


def test_stats_under_the_threshold_shows_none(tmp_path: Path) -> None:
    generate(tmp_path / "s", 200)
    console, out = terminal()
    gather(tmp_path / "s", console, clock=StepClock(0.0), after=1.0, every=64)
    assert out.getvalue() == ""


def test_the_bar_counts_every_item_and_asks_the_total_only_when_shown() -> None:
    console, _out = terminal()
    asked: list[int] = []

    def total() -> int:
        asked.append(1)
        return 1000

    late = LateProgress("x", total, console, clock=StepClock(0.4), after=1.0, every=10)
    assert list(late.wrap(range(25))) + list(late.wrap(range(5))) == [*range(25), *range(5)]
    late.close()
    assert late.done == 30 and late.shown and asked == [1]
    quiet = LateProgress("x", total, console, clock=StepClock(0.0), after=1.0, every=10)
    assert list(quiet.wrap(range(100))) == list(range(100))
    assert not quiet.shown and asked == [1]


def test_a_grown_total_reaches_a_bar_already_shown() -> None:
    console, _out = terminal()
    late = LateProgress("x", lambda: 40, console, clock=StepClock(1.0), after=1.0, every=10)
    assert list(late.wrap(range(30))) == list(range(30))
    assert late.shown and late.progress is not None
    assert late.progress.tasks[0].total == 40
    late.grow(lambda: 90)  # more to read than the first total said
    assert late.progress.tasks[0].total == 90 and late.total() == 90
    late.close()
    quiet = LateProgress("x", lambda: 40, console, clock=StepClock(0.0), after=1.0, every=10)
    quiet.grow(lambda: 90)  # no bar yet: the new total is asked when one appears
    assert not quiet.shown and quiet.total() == 90


@settings(max_examples=examples(150), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(logs=loggen.any_logs)
def test_the_totals_are_the_events_counted_one_by_one(tmp_path_factory: Any, logs: Any) -> None:
    """Without a restated ``counters`` record, the totals ``stats`` reports (the fold's
    counters) are the counters evolve bumps, record by record; and the limits noted in
    the live log's one pass are what a read of the history gives."""
    storage = tmp_path_factory.mktemp("s")
    log = storage / "tasks" / "tasks.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in logs))
    snap = load(storage)
    assert not snap.history  # no archives: the live log is all of it
    one = collect(snap)
    two = collect(replace(snap, history=True, limits={}))  # the history read for limits
    assert one == two
    from snerd.projections.views.stats import METRICS, counted

    heard = dict.fromkeys(METRICS, 0)  # the counters evolve bumps, record by record
    for metric, _ in counted(logs):
        heard[metric] += 1
    assert one["totals"] == heard
