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

import contextlib
import math
import sys
import time
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from snerd.eventlog.base import Record, SkippedLine
from snerd.eventlog.chain import Break, ChainReport, verify_plain_aside
from snerd.projections import events as ev
from snerd.projections.census import Census, CheckedCensus, NotCensus, Tally
from snerd.projections.events import record_time
from snerd.projections.history import (
    Audit,
    History,
    Problem,
    TaskHistory,
    audit,
    summarize,
    until,
)
from snerd.projections.schedule import format_instant
from snerd.projections.task import record_error
from snerd.tools import kit
from snerd.tools.replay_checks import EDGE_YEARS, CheckedRow, Verifier

PIPE_WIDTH = 160  # columns when stdout is not a terminal (no wrapping of times and ids)
PROGRESS_LINES = 100_000  # show a progress bar above this many lines (on a terminal)
PROGRESS_MIN_BYTES = 4 << 20  # below this, do not even count lines


class UsageProblem(Exception):
    """Bad usage or an unusable PATH: exit 2 with this message."""


@dataclass(slots=True)
class Source:
    """Where the records come from, and the lines that had to be skipped."""

    path: Path | str  # a storage dir or log file, or a postgresql:// URL
    files: list[Path]
    skipped: list[SkippedLine] = field(default_factory=list)
    read: int = 0  # records read (a file none of whose lines is one is not a log)
    ambiguous: dict[str, None] = field(default_factory=dict)
    """Tasks whose last line is a SnerdMQ tombstone that may be a dead letter (below)."""

    @property
    def directory(self) -> Path | None:
        """The storage directory read (its index may serve), or None: a log file given
        alone, or a PostgreSQL queue."""
        return self.path if isinstance(self.path, Path) and self.path.is_dir() else None

    def items(self) -> Iterator[Record | SkippedLine]:
        from snerd.eventlog.history import iter_history, read_records
        from snerd.eventlog.storage import open_history

        if isinstance(self.path, str):
            return open_history(self.path)
        if self.path.is_dir():
            return iter_history(self.path)
        return read_records(self.path)

    def records(self, *, keep_skipped: bool = True) -> Iterator[Record]:
        """Every record in order; skipped lines are kept in ``skipped``."""
        from snerd.errors import LogError

        try:
            for item in self.items():
                if not isinstance(item, SkippedLine):
                    self.read += 1
                    self._note_ambiguity(item)
                    yield item
                elif keep_skipped:
                    self.skipped.append(item)
        except LogError as exc:
            raise UsageProblem(str(exc)) from None


    def _note_ambiguity(self, record: Record) -> None:
        """SnerdMQ writes no error on the line that dead-letters a task with
        ``maxRetries`` 0: its tombstone reads as a success (log-format §5)."""
        task_id = record.get(ev.F_TASK_ID)
        if not isinstance(task_id, str):
            return
        self.ambiguous.pop(task_id, None)
        if (ev.F_EVENT not in record and record.get(ev.F_DELETED_AT)
                and record.get(ev.F_MAX_RETRIES) == 0 and record_error(record) is None):
            self.ambiguous[task_id] = None


def open_source(path: Path | str) -> Source:
    """The log(s) at ``path``; raises UsageProblem when there is nothing to read."""
    from snerd.errors import LogError
    from snerd.eventlog.history import history_files

    if isinstance(path, str):  # a postgresql:// URL: the rows are read as they stream
        return Source(path, [])

    if not path.exists():
        raise UsageProblem(f"{path} does not exist")
    if path.is_file():
        return Source(path, [path])
    try:
        files = history_files(path)
    except LogError as exc:
        raise UsageProblem(str(exc)) from None
    if not files:
        raise UsageProblem(f"no log in {path} (expected {path / 'tasks' / 'tasks.log'})")
    return Source(path, files)


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


def count_lines(files: list[Path]) -> int:
    total = 0
    for path in files:
        with open(path, "rb") as f:
            while chunk := f.read(8 << 20):
                total += chunk.count(b"\n")
    return total


def _with_progress(records: Iterator[Mapping[str, Any]], total: int) -> Iterator[Mapping[str, Any]]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    columns = (TextColumn("replaying"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=kit.console(stderr=True), transient=True) as progress:
        bar = progress.add_task("replay", total=total)
        for n, record in enumerate(records, 1):
            if n % 16384 == 0:
                progress.update(bar, completed=n)
            yield record


def progress_total(source: Source) -> int | None:
    """The line count for a progress bar, or None when no bar is due."""
    if not sys.stderr.isatty():
        return None
    if sum(p.stat().st_size for p in source.files) < PROGRESS_MIN_BYTES:
        return None
    lines = count_lines(source.files)
    return lines if lines > PROGRESS_LINES else None


def run_replay(
    source: Source, *, task: str | None, at: float | None, verify: bool, now: float,
    figures_only: bool = False,
) -> tuple[History | Tally, TaskHistory | None]:
    """The figures of every task, and the full history of ``task`` if given.

    With ``figures_only`` (what the plain summary prints) and no ``--at`` or
    ``--verify``, a :class:`Census` over a fast scan gives the figures (falling back
    to the full summary on a log it cannot judge), building the per-task index on
    the way when it is missing; ``task``'s transitions then come from the index.
    Otherwise the figures come from the :class:`Summary`, and a task's transitions
    from a second pass that folds only the records of that task and of its parents
    (all its state depends on); ``--verify`` needs the state before every record,
    hence the full audit fold (several times slower), unless a checked census vouches
    that there is no problem to name.
    """
    if figures_only and at is None and verify and task is None:
        tally = fast_replay(source, now, checked=True)
        if tally is not None:
            return tally, None
    if figures_only and at is None and not verify:
        tally = fast_replay(source, now)
        if tally is not None:
            if task is None:
                return tally, None
            known, entry = indexed_history(source, task, now)
            if known:
                return tally, entry
    ensure_index(source)
    now = now if at is None else at
    records: Iterator[Mapping[str, Any]] = source.records()
    total = progress_total(source)
    if total is not None:
        records = _with_progress(records, total)
    if at is not None:
        records = until(records, at)
    if verify:
        keep = (lambda task_id: task_id == task) if task is not None else (lambda _: False)
        history = audit(records, now, keep=keep, check=Verifier())
        return history, history.tasks.get(task) if task is not None else None
    parents: set[str] = set()
    if task is not None:
        records = _noting_parents(records, task, parents)
    history = summarize(records, now)
    if task is None or task not in history.tasks:
        return history, None
    again = source.records(keep_skipped=False)
    return history, history_of(again if at is None else until(again, at), task, parents, now)


def ensure_index(source: Source) -> None:
    """Build or extend the per-task index of a storage directory (the paths that do
    not scan with the census build it apart); a log it cannot read is left to the
    replay to report."""
    from snerd.errors import LogError
    from snerd.eventlog import index as idx

    if source.directory is not None:
        with contextlib.suppress(LogError):
            idx.fresh_index(source.directory, entries=False)


def fast_replay(source: Source, now: float, *, checked: bool = False) -> Tally | None:
    """The census of ``source`` (see :mod:`snerd.projections.census`), or None when
    the log holds a record only the full summary judges. Builds the per-task index
    of a storage directory on the way when it has none (or extends it after).
    ``checked``: a census that also vouches there is no problem ``--verify`` would
    name (None when there might be one)."""
    from snerd.errors import LogError
    from snerd.eventlog import index as idx
    from snerd.eventlog.scan import Row

    if isinstance(source.path, str):
        return None  # a PostgreSQL queue has no files to scan: the full summary reads it
    storage = source.directory
    build = None
    if storage is not None:
        old = idx.read_index(storage, entries=False)
        if old is None or idx.resume_point(old, source.files) is None:
            build = idx.Builder()
    try:
        scanner = idx.Scanner(source.files, CheckedRow if checked else Row,
                              suspect=EDGE_YEARS if checked else ())  # fmt: skip
        census = CheckedCensus() if checked else Census()
        skipped: list[SkippedLine] = []
        for batch in _scan_progress(scanner, source):
            skipped.extend(batch.skipped)
            if batch.odd:
                return None
            census.feed(batch.rows, batch.places)
            if build is not None:
                build.add(batch)
        live = [record for _, record in idx.read_places(source.files, census.live_places())]
    except NotCensus:
        return None
    except LogError as exc:
        raise UsageProblem(str(exc)) from None
    source.skipped.extend(skipped)
    source.read += census.events
    if storage is not None:
        with contextlib.suppress(LogError):  # the index is derived: the next reader builds it
            if build is not None:
                idx.write_index(storage, scanner, build)
            else:
                idx.fresh_index(storage, entries=False)
    return census.finish(live, now)


def _scan_progress(scanner: Any, source: Source) -> Iterator[Any]:
    """The scan's batches, with a progress bar (bytes) on a large log on a terminal."""
    batches = scanner.batches()
    sizes = [p.stat().st_size for p in source.files]
    total = sum(sizes)
    if not sys.stderr.isatty() or total < PROGRESS_MIN_BYTES * 8:
        yield from batches
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    columns = (TextColumn("replaying"), BarColumn(), DownloadColumn())
    with Progress(*columns, console=kit.console(stderr=True), transient=True) as progress:
        bar = progress.add_task("replay", total=total)
        for batch in batches:
            yield batch
            progress.update(bar, completed=sum(sizes[: batch.file]) + batch.end)


def indexed_history(source: Source, task: str, now: float) -> tuple[bool, TaskHistory | None]:
    """(True, ``task``'s history) from the per-task index; (False, None) when the index
    cannot tell (a log file given alone, or a record without ``ts``, whose clock only
    a rescan knows)."""
    from snerd.errors import LogError
    from snerd.eventlog import index as idx

    if source.directory is None:
        return False, None
    try:
        index = idx.fresh_index(source.directory)
        return _indexed_history(index, source, task, now)
    except LogError:
        return False, None  # a file went away under the lookup: rescan


def _indexed_history(
    index: Any, source: Source, task: str, now: float
) -> tuple[bool, TaskHistory | None]:
    wanted = {task}
    found = _named(index, task)
    parents: set[str] = set()
    for _, record in found:
        if _names(record, wanted):
            ids = record.get(ev.F_TRIGGER_AFTER_IDS)
            if isinstance(ids, list):
                parents.update(p for p in ids if isinstance(p, str))
    merged = dict(found)
    for parent in parents - wanted:
        merged.update(_named(index, parent))
    records = [merged[p] for p in sorted(merged)]
    if any(record_time(r) is None for r in records):
        return False, None
    if not any(_names(r, wanted) for r in records):
        return True, None
    return True, history_of(records, task, parents, now)


def _named(index: Any, task: str) -> list[tuple[int, Mapping[str, Any]]]:
    from snerd.eventlog import index as idx

    ids = {task}
    places = index.places_of(task)
    return [(p, r) for p, r in idx.read_places(index.paths, places) if _names(r, ids)]


def _noting_parents(
    records: Iterable[Mapping[str, Any]], task: str, parents: set[str]
) -> Iterator[Mapping[str, Any]]:
    for record in records:
        if _names(record, {task}):
            found = record.get(ev.F_TRIGGER_AFTER_IDS)
            if isinstance(found, list):
                parents.update(p for p in found if isinstance(p, str))
        yield record


def _names(record: Mapping[str, Any], ids: Container[str]) -> bool:
    task_id, key = ev.task_id_of(record), record.get(ev.F_DLQ_KEY)
    return (isinstance(task_id, str) and task_id in ids) or (bool(key) and str(key) in ids)


def history_of(
    records: Iterable[Mapping[str, Any]], task: str, parents: Iterable[str], now: float | None
) -> TaskHistory | None:
    """``task``'s full history, folding only the records that name it or a parent
    (every parent it ever had). Equal to :func:`audit`'s: a task's state depends on its
    own records and on whether each parent is live or dead-lettered, which depends
    only on the parent's records. Each record is judged at the full stream's clock."""
    wanted = {task, *parents}
    auditor = Audit(keep=lambda task_id: task_id == task, now=now)
    clock: float | None = None
    for record in records:
        if _names(record, wanted):
            auditor.clock = clock
            auditor.add(record)
        seen = record_time(record)
        if seen is not None:
            clock = seen
    return auditor.finish(now).tasks.get(task)


# --- output ---------------------------------------------------------------------------


def summary(history: History, source: Source) -> dict[str, Any]:
    """The ``--json`` object: one entry per task id, counts per state, totals."""
    tasks = {
        task_id: {
            "state": h.state,
            "attempts": h.attempts,
            "last_error": h.last_error,
            "type": h.type,
            "history_len": h.history_len,
        }
        for task_id, h in history.tasks.items()
    }
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


def verify_chain(
    source: Source, plain: Callable[[], ChainReport | None] | None = None
) -> ChainReport:
    """Check the checksum chain of every file: the report of ``plain`` (the fast check,
    started aside before the replay) when it vouches for the chain, else the full
    check, which names every break."""
    from snerd.eventlog.chain import verify, verify_plain

    key = chain_key()
    report = plain() if plain is not None else verify_plain(source.files, key)
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


def _opt(value: Any) -> str:
    return "" if value is None else str(value)


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
    plain: Callable[[], ChainReport | None] | None = None
    try:
        at = parse_at(at_text)
        source = open_source(path)
        plain = verify_plain_aside(source.files, chain_key()) if verify and source.files else None
        history, entry = run_replay(source, task=task_id, at=at, verify=verify, now=time.time(),
                                    figures_only=not as_json)
        if source.read == 0 and source.skipped:
            raise UsageProblem(f"{shown} is not a task log: none of its lines is a log record "
                               f"({len(source.skipped)} skipped)")  # fmt: skip
    except UsageProblem as exc:
        if plain is not None:
            plain()  # reap the check started aside
        kit.fail(str(exc), code=2)
        return
    if task_id is not None and entry is None:
        if plain is not None:
            plain()
        kit.fail(f"no task {task_id!r} in {shown}", code=1)  # as cancel and dlq say it
        return
    problems = problem_rows(history, source) if verify else []
    chained = verify_chain(source, plain) if verify and source.files else None
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
