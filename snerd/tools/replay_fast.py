"""The fast roads of ``snerdmq replay``: a census over a scan of the files for the
plain summary and a clean ``--verify`` (:mod:`snerd.projections.census`), and a
task's history through the per-task index beside the log (``tasks/tasks.idx``,
``specs/log-storage.md`` §8.1), or by folding only the records about it and its
parents. Each declines (returns None or False) where only the full fold can judge."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Container, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from snerd.eventlog.base import Record, SkippedLine
from snerd.projections import events as ev
from snerd.projections.census import Census, CheckedCensus, NotCensus, Tally
from snerd.projections.events import record_time
from snerd.projections.history import Audit, TaskHistory
from snerd.tools import kit
from snerd.tools.replay_checks import EDGE_YEARS, CheckedRow
from snerd.tools.replay_source import PROGRESS_MIN_BYTES, Source, UsageProblem

if TYPE_CHECKING:
    from snerd.eventlog.index import Builder


def ensure_index(source: Source) -> None:
    """Build or extend the per-task index of a storage directory (the paths that do
    not scan with the census build it apart); a log it cannot read is left to the
    replay to report."""
    from snerd.errors import LogError
    from snerd.eventlog import index as idx

    if source.directory is not None:
        with contextlib.suppress(LogError):
            idx.fresh_index(source.directory, entries=False)


def fast_replay(
    source: Source, now: float, *, checked: bool = False, edges: bool = True
) -> Tally | None:
    """The census of ``source`` (see :mod:`snerd.projections.census`), or None when
    the log holds a record only the full summary judges. Builds the per-task index
    of a storage directory on the way when it has none (in a forked child on a large
    log, which scans the files on another core as this process counts them; in this
    pass on a small one, or when ``checked``: ``--verify`` checks the chain on the
    other core), or extends it after. ``checked``: a census that also vouches
    there is no problem ``--verify`` would name (None when there might be one);
    ``edges=False``: but for instants at the edge of time (:data:`EDGE_YEARS`), which
    the caller has searched for itself."""
    from snerd.eventlog import index as idx

    if isinstance(source.path, str):
        return None  # a PostgreSQL queue has no files to scan: the full summary reads it
    storage = source.directory
    build: idx.Builder | None = None
    built_aside: Callable[[], bool] | None = None
    if storage is not None:
        old = idx.read_index(storage, entries=False)
        if old is None or idx.resume_point(old, source.files) is None:
            if not checked:  # (``--verify`` checks the chain on the other core)
                built_aside = idx.index_aside(storage, source.files)
            if built_aside is None:
                build = idx.Builder()
    try:
        return _census(source, now, checked, edges, build, extend=built_aside is None)
    finally:
        if built_aside is not None:
            built_aside()  # the index is there when the replay answers, as without a fork


def _census(
    source: Source, now: float, checked: bool, edges: bool, build: Builder | None, *,
    extend: bool,
) -> Tally | None:
    """:func:`fast_replay`'s pass: the census, adding each batch to ``build`` (an index
    being built, or None), and writing it after, or (``extend``) extending the index."""
    from snerd.errors import LogError
    from snerd.eventlog import index as idx
    from snerd.eventlog.scan import Row

    storage = source.directory
    try:
        scanner = idx.Scanner(source.files, CheckedRow if checked else Row,
                              suspect=EDGE_YEARS if checked and edges else ())  # fmt: skip
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
            elif extend:
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


def _named(index: Any, task: str) -> list[tuple[int, Record]]:
    from snerd.eventlog import index as idx

    ids = {task}
    places = index.places_of(task)
    return [(p, r) for p, r in idx.read_places(index.paths, places) if _names(r, ids)]


def noting_parents(
    records: Iterable[Record], task: str, parents: set[str]
) -> Iterator[Record]:
    for record in records:
        if _names(record, {task}):
            found = record.get(ev.F_TRIGGER_AFTER_IDS)
            if isinstance(found, list):
                parents.update(p for p in found if isinstance(p, str))
        yield record


def _names(record: Record, ids: Container[str]) -> bool:
    task_id, key = ev.task_id_of(record), record.get(ev.F_DLQ_KEY)
    return (isinstance(task_id, str) and task_id in ids) or (bool(key) and str(key) in ids)


def history_of(
    records: Iterable[Record], task: str, parents: Iterable[str], now: float | None
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
