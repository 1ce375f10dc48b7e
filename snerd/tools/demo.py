"""``snerdmq demo``: the whole queue at work in ~15 seconds, with no set-up.

Creates a storage directory, runs the workflow of :mod:`snerd.tools.demo_flow` on the
embedded ``snerd.Queue``, shows it live in the terminal, serves the dashboard while
it runs, and ends with a summary of what happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from snerd.tools import kit
from snerd.tools.demo_flow import SMTP_PER_MINUTE, Row, Tracker, handlers, plan

STYLES = {**kit.STATE_STYLES, "retrying": "yellow", "throttled": "magenta"}


def _shown_state(row: Row, engine: Any, now: float) -> str:
    """The row's state, refined from the projection (scheduled, blocked, throttled)."""
    from snerd.projections.views.stats import slot_free_at
    from snerd.projections.views.status import PENDING, status_of

    if row.state in ("completed", "dead_lettered", "active"):
        return row.state
    task = engine.state.tasks.get(row.step.id)
    if task is None:
        return row.state
    status = status_of(task, now)
    if status == PENDING and slot_free_at(engine.state, task, now) is not None:
        return "throttled"
    return "retrying" if row.state == "retrying" and status != "active" else status


def _state_text(state: str) -> Text:
    return Text(state.replace("_", " "), style=STYLES.get(state, ""))


def live_view(tracker: Tracker, engine: Any, header: str, started: float) -> Group:
    now = time.time()
    table = Table(show_edge=False, expand=False)
    for column in ("task", "type", "state", "progress", "attempts", "what it shows"):
        table.add_column(column, justify="right" if column == "attempts" else "left")
    for row in tracker.rows.values():
        state = _shown_state(row, engine, now)
        bar = ProgressBar(
            total=100,
            completed=row.percent,
            width=18,
            complete_style="red" if state == "dead_lettered" else "green",
        )
        table.add_row(
            row.step.id,
            row.step.type,
            _state_text(state),
            bar,
            str(row.attempts),
            Text(row.step.story, style="dim"),
        )
    return Group(Text.from_markup(f"{header}  [dim]{now - started:4.1f}s[/]"), table)


def summary(tracker: Tracker, engine: Any) -> tuple[Table, str]:
    """The table of what happened and the one-line count of that same table (both read
    at one instant: tasks still run while the dashboard lingers)."""
    now = time.time()
    table = Table(title="What happened", title_justify="left", show_edge=False)
    for column in ("task", "outcome", "attempts", "took", "details"):
        table.add_column(column, justify="right" if column in ("attempts", "took") else "left")
    shown: list[str] = []
    for row in tracker.rows.values():
        state = _shown_state(row, engine, now)
        shown.append(state)
        took = f"{row.ended - row.started:.1f}s" if row.ended and row.started else ""
        table.add_row(
            row.step.id,
            _state_text(state),
            str(row.attempts),
            took,
            _details(row, state, engine, now),
        )
    done, dead = shown.count("completed"), shown.count("dead_lettered")
    line = (f"[green]{done} completed[/], [red]{dead} dead-lettered[/], "
            f"{len(shown) - done - dead} still waiting.")  # fmt: skip
    return table, line


def _details(row: Row, state: str, engine: Any, now: float) -> str:
    from snerd.projections.views.stats import slot_free_at

    if state == "dead_lettered":
        why = (row.reason or "retries exhausted").replace("_", " ")
        return f"{why}: {row.error}" if row.error else why
    if state == "throttled":
        task = engine.state.tasks[row.step.id]
        free = slot_free_at(engine.state, task, now) or now
        return f"waiting for a smtp slot ({SMTP_PER_MINUTE}/min), in {free - now:.0f}s"
    if state == "completed" and row.failures:
        times = "once" if len(row.failures) == 1 else f"{len(row.failures)} times"
        return f"failed {times} ({row.failures[0]}), succeeded on retry"
    return row.step.story


def _settled(tracker: Tracker, engine: Any) -> bool:
    now = time.time()
    return all(_shown_state(r, engine, now) == "throttled" for r in tracker.unfinished())


async def _start_dashboard(engine: Any, port: int, out: Console) -> Any:
    from snerd.dashboard import start_dashboard

    try:
        return await start_dashboard(engine, port=port)
    except OSError:
        out.print(f"[yellow]Port {port} is busy; using a free one.[/]")
        return await start_dashboard(engine, port=0)


async def run_demo(storage: Path, *, port: int | None, fast: bool, linger: bool) -> Tracker:
    """Run the workflow; return the tracker with every task's outcome."""
    import snerd
    from snerd.dashboard import url_of

    out = kit.console()
    started = time.time()
    steps = plan(started, fast=fast)
    tracker = Tracker(steps)
    queue = snerd.Queue(str(storage), max_workers=4)
    queue.engine.observers.append(tracker.observe)
    await queue.start()
    runner = None
    try:
        if port is not None:
            runner = await _start_dashboard(queue.engine, port, out)
            out.print(f"Dashboard: [bold link]{url_of(runner)}[/]  (open it while the demo runs)")
        out.print(f"Storage:   {storage}")
        for step in steps:
            await queue.enqueue(step.id, step.type, step.data, **step.options)
        for task_type, handler in handlers(fast=fast).items():  # after enqueueing: by urgency
            queue.handler(task_type)(handler)
        await _watch(tracker, queue.engine, out, started, timeout=30.0 if fast else 60.0,
                     tick=0.02 if fast else 0.1)
        table, line = summary(tracker, queue.engine)
        out.print(table)
        out.print(
            f"{line} Explore the log:\n  snerdmq stats {storage}\n  snerdmq dlq list {storage}\n"
            f"  snerdmq replay {storage} --task import-legacy\n  snerdmq dashboard {storage}",
            soft_wrap=True,
        )
        if runner is not None and linger:
            out.print(f"Dashboard still at {url_of(runner)}; press Enter or Ctrl-C to quit.")
            await _until_enter_or_signal()
    finally:
        if runner is not None:
            await runner.cleanup()
        await queue.close(timeout=2.0)
    return tracker


async def _watch(
    tracker: Tracker, engine: Any, out: Console, started: float, timeout: float, tick: float
) -> None:
    header = "[bold]snerd demo[/]: a nightly-report workflow on the embedded queue"
    deadline = started + timeout
    seen = 0
    live = (
        Live(
            live_view(tracker, engine, header, started),
            console=out,
            refresh_per_second=8,
            transient=True,
        )
        if out.is_terminal
        else None
    )
    with live or contextlib.nullcontext():
        while not _settled(tracker, engine) and time.time() < deadline:
            await asyncio.sleep(tick)
            for news in tracker.news[seen:]:
                out.print(f"[dim]{time.time() - started:5.1f}s[/] {news}", soft_wrap=True)
            seen = len(tracker.news)
            if live is not None:
                live.update(live_view(tracker, engine, header, started))
    if not _settled(tracker, engine):
        out.print(f"[yellow]Stopped waiting after {timeout:.0f}s.[/]")


async def _until_enter_or_signal() -> None:
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, done.set)
    with contextlib.suppress(OSError, ValueError):
        loop.add_reader(sys.stdin.fileno(), done.set)
    await done.wait()
    with contextlib.suppress(OSError, ValueError):
        loop.remove_reader(sys.stdin.fileno())


def _fresh_storage(storage: Path | None) -> Path:
    if storage is None:
        return Path(tempfile.mkdtemp(prefix="snerd-demo-"))
    log = storage / "tasks" / "tasks.log"
    if log.exists() and log.stat().st_size > 0:
        raise click.ClickException(f"{storage} already holds a queue; give the demo a new dir")
    return storage


@click.command("demo", short_help="Run a small workflow and show what happens.")
@click.option(
    "--storage",
    type=click.Path(file_okay=False, path_type=Path),
    help="Storage directory (default: a fresh temporary one).",
)
@click.option(
    "--port",
    default=8080,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Dashboard port (a free one if busy).",
)
@click.option("--no-dashboard", is_flag=True, help="Do not serve the dashboard.")
@click.option("--fast", is_flag=True, help="Shorter sleeps and backoffs (for smoke tests).")
def demo(storage: Path | None, port: int, no_dashboard: bool, fast: bool) -> None:
    """Run a small realistic workflow on the embedded queue and show what happens.

    A DAG with fan-in, a task that fails and then succeeds on retry, one that
    dead-letters and fails its children through, a rate-limited group, a delayed task
    and progress updates, live in the terminal and on the dashboard.
    """
    storage = _fresh_storage(storage)
    linger = not no_dashboard and not fast and sys.stdin.isatty() and sys.stdout.isatty()
    kit.run(run_demo(storage, port=None if no_dashboard else port, fast=fast, linger=linger))
