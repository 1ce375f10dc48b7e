"""``snerdmq replay PATH``: the audit trail of a queue, read from its log.

PATH is a storage directory (its archives oldest first, then the live log, each
record once: :func:`snerd.eventlog.iter_history`) or a single log file. The records
go through :mod:`snerd.projections.history`, the same fold the daemon runs, so the
states shown are the ones the dispatcher saw; the plain summary and a clean
``--verify`` take a faster road to the same figures (:func:`fast_replay`). No lock,
no engine; the only file it writes is the derived per-task index beside the log
(``tasks/tasks.idx``, ``specs/log-storage.md`` §8.1), which ``--task`` reads.

``--verify`` also checks the checksum chain of every file (``eventlog/chain.py``) and
names each broken link: a bit flip or an edit, a deletion, an insertion, a reorder.

Exit codes: 0 ok, 1 ``--verify`` found problems, 2 bad usage, a path that does not
exist or holds no log, or an unknown ``--task``.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from snerd.errors import LogError
from snerd.eventlog.base import Record, SkippedLine
from snerd.eventlog.chain import Break, ChainReport, PlainCheck, verify_plain_aside
from snerd.projections.census import Tally
from snerd.projections.history import (
    History,
    Problem,
    TaskHistory,
    audit,
    summarize,
    until,
)
from snerd.projections.schedule import format_instant
from snerd.tools import kit
from snerd.tools.replay_checks import EDGE_YEARS, Verifier
from snerd.tools.replay_fast import (
    ensure_index,
    fast_replay,
    history_of,
    indexed_history,
    noting_parents,
)
from snerd.tools.replay_source import (
    Source,
    UsageProblem,
    open_source,
    progress_total,
    with_progress,
)

__all__ = ["history_of", "replay"]

PIPE_WIDTH = 160  # columns when stdout is not a terminal (no wrapping of times and ids)


def parse_at(text: str | None) -> float | None:
    from snerd.errors import EventError
    from snerd.projections.schedule import parse_instant

    if text is None:
        return None
    try:
        seconds = float(text)  # epoch seconds, as --execute-at takes them
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise UsageProblem(f"--at: {text!r} is not a time")
        return seconds
    try:
        return parse_instant(text)
    except EventError as exc:
        raise UsageProblem(f"--at: {exc}") from None


# --- the replay -----------------------------------------------------------------------


def run_replay(
    source: Source, *, task: str | None, at: float | None, verify: bool, now: float,
    figures_only: bool = False, edges_aside: bool = False,
) -> tuple[History | Tally, TaskHistory | None]:
    """The figures of every task, and the full history of ``task`` if given.

    With ``figures_only`` (what the plain summary prints), no ``task`` and no ``--at``
    or ``--verify``, a :class:`Census` over a fast scan gives the figures (falling back
    to the full summary on a log it cannot judge), building the per-task index on the
    way when it is missing. (A task alone the command reads through the index without
    a replay; it comes here only where the index cannot tell.) Otherwise the figures
    come from the :class:`Summary`, and a task's transitions
    from a second pass that folds only the records of that task and of its parents
    (all its state depends on); ``--verify`` needs the state before every record,
    hence the full audit fold (several times slower), unless a checked census vouches
    that there is no problem to name. ``edges_aside``: the caller searches the log for
    instants at the edge of time itself (the chain check's pass over the bytes does) and
    runs the replay again with the audit if it finds one.
    """
    if figures_only and at is None and verify and task is None:
        tally = fast_replay(source, now, checked=True, edges=not edges_aside)
        if tally is not None:
            return tally, None
    if figures_only and at is None and not verify and task is None:
        tally = fast_replay(source, now)
        if tally is not None:
            return tally, None
    ensure_index(source)
    now = now if at is None else at
    records: Iterator[Record] = source.records()
    total = progress_total(source)
    if total is not None:
        records = with_progress(records, total)
    if at is not None:
        records = until(records, at)
    if verify:
        keep = (lambda task_id: task_id == task) if task is not None else (lambda _: False)
        history = audit(records, now, keep=keep, check=Verifier())
        return history, history.tasks.get(task) if task is not None else None
    parents: set[str] = set()
    if task is not None:
        records = noting_parents(records, task, parents)
    history = summarize(records, now)
    if task is None or task not in history.tasks:
        return history, None
    again = source.records(keep_skipped=False)
    return history, history_of(again if at is None else until(again, at), task, parents, now)


def summary(history: History, source: Source) -> dict[str, Any]:
    """The ``--json`` object: one entry per task id, counts per state, totals."""
    tasks = {task_id: task_row(h) for task_id, h in history.tasks.items()}
    return {
        "tasks": tasks,
        "counts": history.counts(),
        "skipped_lines": len(source.skipped),
        "events": history.events,
        "ambiguous_completed": sorted(source.ambiguous),
    }


def transition_rows(entry: TaskHistory) -> list[dict[str, Any]]:
    return [
        {
            "event": t.event,
            "seq": t.seq,
            "time": None if t.ts is None else format_instant(t.ts),
            "daemon": t.daemon,
            "attempt": t.attempt,
            "reason": t.reason,
            "error": t.error,
            "state": t.state,
            "derived": t.derived,
        }
        for t in entry.transitions
    ]


def problem_rows(history: History | Tally, source: Source) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"where": f"byte {s.offset}", "task": None, "problem": _skipped_text(s)}
        for s in source.skipped
    ]
    if isinstance(history, History):
        rows.extend(_problem_row(p) for p in history.problems)
    return rows


def _skipped_text(line: SkippedLine) -> str:
    raw = line.raw[:60].decode("utf-8", "replace")
    why = {"incomplete": "incomplete last line (torn, or a write in progress)"}
    return f"skipped line ({why.get(line.reason, line.reason)}): {raw!r}"


def _problem_row(problem: Problem) -> dict[str, Any]:
    where = f"record {problem.index}" + ("" if problem.seq is None else f" (seq {problem.seq})")
    return {"where": where, "task": problem.task_id, "problem": problem.message}


def _console() -> Console:
    out = kit.console()
    if not out.is_terminal:
        out.width = max(out.width, PIPE_WIDTH)
    return out


def render_summary(history: History | Tally, source: Source, at: float | None) -> None:
    out = _console()
    when = f" as of {format_instant(at)}" if at is not None else ""
    files = f" ({len(source.files)} files)" if len(source.files) > 1 else ""
    out.print(
        f"[bold]Replayed[/] {history.events:,} events from {kit.shown(source.path)}{files}{when}: "
        f"{len(source.skipped)} skipped line(s), {history.invalid} unusable record(s)",
        soft_wrap=True,
    )
    table = Table(show_edge=False)
    table.add_column("state")
    table.add_column("tasks", justify="right")
    for state, n in history.counts().items():
        table.add_row(kit.styled_state(state), str(n))
    out.print(table)
    gone = source.gone_before()
    if gone is not None:
        where = ("no archive of it is left (retention pruned it, or it was deleted)"
                 if source.directory is not None else
                 "this file starts with its snapshot (the archives hold the rest)")  # fmt: skip
        out.print(
            f"[yellow]Note:[/] the history up to seq {gone:,} was compacted and {where}: "
            "tasks that ended before are not in these figures. `snerdmq stats` keeps the "
            "totals since the log began.",
            soft_wrap=True,
        )
    if source.ambiguous:
        names = ", ".join(sorted(source.ambiguous)[:10]) + (
            ", ..." if len(source.ambiguous) > 10 else "")  # fmt: skip
        out.print(
            f"[yellow]Note:[/] {len(source.ambiguous)} task(s) ended on a SnerdMQ line with "
            "maxRetries 0 and no error, which SnerdMQ also writes for a dead letter; "
            f"counted as completed: {names}",
            soft_wrap=True,
        )


def render_task(entry: TaskHistory) -> None:
    out = _console()
    error = f"; last error: {entry.last_error}" if entry.last_error else ""
    out.print(
        f"[bold]Task {entry.id}[/] ({entry.type or '?'}): {entry.state}, "
        f"{entry.attempts} attempt(s){error}",
        soft_wrap=True,
    )
    table = Table(show_edge=False)
    for column in ("time", "seq", "event", "state", "daemon", "attempt", "reason / error"):
        table.add_column(column)
    for row in transition_rows(entry):
        detail = " / ".join(x for x in (row["reason"], row["error"]) if x)
        table.add_row(
            row["time"] or "", _opt(row["seq"]), row["event"], kit.styled_state(row["state"]),
            row["daemon"] or "", _opt(row["attempt"]), detail,
        )  # fmt: skip
    out.print(table)


def render_problems(rows: list[dict[str, Any]]) -> None:
    out = _console()
    if not rows:
        out.print("[green]Verified:[/] no problems found.")
        return
    out.print(f"[red]{len(rows)} problem(s):[/]")
    table = Table(show_edge=False)
    for column in ("where", "task", "problem"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row["where"], row["task"] or "", row["problem"])
    out.print(table)


# --- the checksum chain ---------------------------------------------------------------


def chain_key() -> bytes | None:
    """The chain key from ``SNERD_LOG_KEY[_FILE]``."""
    from snerd.eventlog.chain import key_from_env

    try:
        return key_from_env()
    except OSError as exc:
        raise UsageProblem(f"cannot read the chain key: {exc}") from None


def verify_chain(source: Source, plain: PlainCheck | None = None) -> ChainReport:
    """Check the checksum chain of every file: the report of ``plain`` (the fast check,
    run aside during the replay) when it vouches for the chain, else the full check,
    which names every break. A PostgreSQL queue's rows (its archives, then its
    live log) take the full check."""
    from snerd.eventlog.chain import verify, verify_logs, verify_plain
    from snerd.eventlog.storage import chain_logs

    key = chain_key()
    if isinstance(source.path, str):
        try:
            return verify_logs(chain_logs(source.path), key)
        except LogError as exc:
            raise UsageProblem(str(exc)) from None
    report = plain.report if plain is not None else verify_plain(source.files, key)
    return report or verify(source.files, key)


def chain_rows(report: ChainReport) -> list[dict[str, Any]]:
    rows = []
    for b in report.breaks:
        where = f"{b.file} byte {b.offset}" if b.file else "chain"
        if b.seq is not None:
            where += f" (seq {b.seq})"
        rows.append({"where": where, "task": b.task_id,
                     "problem": f"checksum chain broken ({b.kind}): {b.message}"})  # fmt: skip
    return rows


def chain_summary(report: ChainReport | None) -> dict[str, Any] | None:
    if report is None:
        return None
    return {
        "chained": report.chained,
        "unchained": report.unchained,
        "unverifiable": report.unverifiable,
        "older_links": report.older_links,
        "head": report.head,
        "breaks": [_break(b) for b in report.breaks],
    }


def _break(b: Break) -> dict[str, Any]:
    return {"file": b.file, "offset": b.offset, "seq": b.seq, "task": b.task_id,
            "kind": b.kind, "message": b.message}  # fmt: skip


def render_chain(report: ChainReport | None) -> None:
    if report is None:
        return
    out = _console()
    broken = sum(1 for b in report.breaks if b.kind != "unverifiable")
    state = "[red]broken[/]" if broken else "[green]intact[/]"
    out.print(
        f"Checksum chain {state}: {report.chained:,} checksummed line(s), "
        f"{report.unchained:,} line(s) without a checksum (SnerdMQ's own format, or"
        " written before the chain)", soft_wrap=True,
    )  # fmt: skip
    if report.older_links:
        out.print(
            f"{report.older_links:,} line(s) after a compaction's snapshot link to its last"
            " line, as writers before 2026-12 did (accepted: the chain is unbroken)",
            soft_wrap=True,
        )  # fmt: skip


def _opt(value: Any) -> str:
    return "" if value is None else str(value)


def task_row(entry: TaskHistory) -> dict[str, Any]:
    """A task's line of the ``--json`` summary."""
    return {
        "state": entry.state,
        "attempts": entry.attempts,
        "last_error": entry.last_error,
        "type": entry.type,
        "history_len": entry.history_len,
    }


def _no_task(task_id: str, shown: str) -> None:
    kit.fail(f"no task {task_id!r} in {shown}", code=1)  # as cancel and dlq say it


def _task_alone(task_id: str, entry: TaskHistory | None, shown: str, as_json: bool) -> None:
    """``--task`` read through the per-task index: that task's history, and not the
    figures of every task, which would take a pass over the whole log. (A task a
    compaction restated has a record without ``ts`` and is not read this way: its
    replay says where its history starts.)"""
    if entry is None:
        _no_task(task_id, shown)
        return
    if as_json:
        kit.emit_json({"task": {"id": task_id, **task_row(entry)},
                       "history": transition_rows(entry)})  # fmt: skip
        return
    render_task(entry)


# --- the command ------------------------------------------------------------------------


@click.command("replay")
@click.argument("path", type=kit.STORAGE)
@click.option("--task", "task_id", metavar="ID", help="Show this task's full history.")
@click.option("--at", "at_text", metavar="TIME",
              help="The state as of this instant (RFC 3339 or epoch seconds).")  # fmt: skip
@click.option("--verify", is_flag=True, help="Check integrity; exit 1 if problems are found.")
@kit.json_option
def replay(
    path: Path | str, task_id: str | None, at_text: str | None, verify: bool, as_json: bool
) -> None:
    """Replay the log at PATH (a storage directory, a log file or a postgresql:// URL)
    and report."""
    shown = kit.shown(path)
    aside: Callable[[], PlainCheck] | None = None
    check: PlainCheck | None = None
    try:
        at = parse_at(at_text)
        source = open_source(path)
        if task_id is not None and at is None and not verify:
            known, entry = indexed_history(source, task_id, time.time())
            if known:  # the task's records through the index: no pass over the log
                _task_alone(task_id, entry, shown, as_json)
                return
        if verify and source.files:  # the chain, checked on another core as the replay runs
            aside = verify_plain_aside(source.files, chain_key(), watch=EDGE_YEARS)
        now = time.time()
        history, entry = run_replay(source, task=task_id, at=at, verify=verify, now=now,
                                    figures_only=not as_json, edges_aside=aside is not None)
        if aside is not None:
            check, aside = aside(), None
            if check.watched and isinstance(history, Tally):  # an instant at the edge of
                source = open_source(path)  # time, which only the audit judges: again
                history, entry = run_replay(source, task=task_id, at=at, verify=verify, now=now)
        if source.read == 0 and source.skipped:
            raise UsageProblem(f"{shown} is not a task log: none of its lines is a log record "
                               f"({len(source.skipped)} skipped)")  # fmt: skip
    except UsageProblem as exc:
        if aside is not None:
            aside()  # reap the check started aside
        kit.fail(str(exc), code=2)
        return
    if task_id is not None and entry is None:
        _no_task(task_id, shown)
        return
    problems = problem_rows(history, source) if verify else []
    try:
        chained = verify_chain(source, check) if verify else None
    except UsageProblem as exc:
        kit.fail(str(exc), code=2)
        return
    if chained is not None:
        problems.extend(chain_rows(chained))
    if as_json:
        assert isinstance(history, History)  # the census serves the plain summary only
        data = summary(history, source)
        if entry is not None:
            data["history"] = transition_rows(entry)
        if verify:
            data["problems"] = problems
            data["chain"] = chain_summary(chained)
        kit.emit_json(data)
    else:
        render_summary(history, source, at)
        if entry is not None:
            render_task(entry)
        if verify:
            render_chain(chained)
            render_problems(problems)
    if problems:
        sys.exit(1)
