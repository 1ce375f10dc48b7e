"""``snerdmq stats [STORAGE]``: what is in the queue now, and what it has done.

Read-only: folds the live log (no lock, no engine). The totals since the log began are
the projection's counters, which a compaction restates at the head of the new log: the
figures the dashboard and ``/metrics`` show, whatever retention pruned from the
archives. The archives are read only for the one figure the live log may lack: the
limit of a rate group none of whose tasks is in it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from snerd.projections import fields
from snerd.tools import kit
from snerd.tools.progress import LateProgress


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The queue as read from disk at one instant."""

    storage: Path | str
    state: Any  # QueueState
    skipped: int
    now: float
    limits: dict[str, int] = field(default_factory=dict)  # each rate group's last
    # maxPerMinute in the live log
    history: bool = False  # whether the older history is to be read: it may be stored
    # (archives, or a PostgreSQL queue's) and a rate group's limit must come from it


def load(storage: Path | str, progress: LateProgress | None = None) -> Snapshot:
    """Fold the live log of an existing storage (exit 1 when there is none), noting each
    rate group's last limit on the way."""
    from snerd.eventlog.base import SkippedLine
    from snerd.eventlog.layout import resolve
    from snerd.eventlog.storage import is_url, open_live
    from snerd.projections import bulk_fold

    storage = kit.existing_storage(storage)
    skipped = 0

    def records() -> Any:
        nonlocal skipped
        for item in open_live(storage):
            if isinstance(item, SkippedLine):
                skipped += item.reason != "incomplete"
            else:
                yield item

    items = records() if progress is None else progress.wrap(records())
    limits: dict[str, int] = {}
    state = bulk_fold(_noting_limits(items, limits))
    stored = is_url(str(storage)) or bool(resolve(storage).archive_files())
    history = stored and bool(unknown_limits(state, limits))
    return Snapshot(storage, state, skipped, time.time(), limits, history)


def collect(snap: Snapshot, progress: LateProgress | None = None) -> dict[str, Any]:
    """Everything ``stats`` reports, JSON-ready: counts per status now, and the totals
    of every metric (events, e.g. ``failed_attempts``) since the log began."""
    from snerd.eventlog.base import SkippedLine
    from snerd.eventlog.storage import describe, open_history
    from snerd.projections.views.stats import rate_groups, state_totals
    from snerd.projections.views.status import DEAD_LETTERED, counts, status_of

    state, now = snap.state, snap.now
    by_type: dict[str, Counter[str]] = {}
    for task in state.tasks.values():
        by_type.setdefault(task.type, Counter())[status_of(task, now)] += 1
    for entry in state.dlq.values():
        by_type.setdefault(entry.task.type, Counter())[DEAD_LETTERED] += 1
    limits = snap.limits
    if snap.history:
        limits = {}  # each group's last limit in the whole history, the live log's last
        records = (r for r in open_history(snap.storage) if not isinstance(r, SkippedLine))
        for _ in _noting_limits(records if progress is None else progress.wrap(records),
                                limits):  # fmt: skip
            pass
    where = describe(snap.storage)
    return {
        "storage": kit.shown(snap.storage),
        "counts": counts(state, now),
        "totals": state_totals(state),
        "types": {t: dict(c) for t, c in sorted(by_type.items())},
        "rate_groups": rate_groups(state, now, limits),
        "log": {
            "path": where["path"],
            "bytes": where["bytes"],
            "skipped_lines": snap.skipped,
            "archives": where["archives"],
            "last_seq": state.last_seq,
        },
    }


def unknown_limits(state: Any, limits: dict[str, int]) -> set[str]:
    """The rate groups :func:`rate_groups` shows whose limit neither a live task of
    theirs nor a record of the live log (``limits``) gives: only the history can."""
    from snerd.projections.views.stats import group_limits

    return {group for group, limit in group_limits(state, limits).items() if limit is None}


BAR_LABEL = "reading the log"
"""The label of the progress bar :func:`gather` shows past its threshold."""


def gather(storage: Path | str, console: Console, *,
           clock: Callable[[], float] = time.monotonic, after: float = 1.0,
           every: int = 4096) -> dict[str, Any]:  # fmt: skip
    """:func:`collect` of :func:`load`, with a progress bar on ``console`` (records read
    of the live log, and of the whole history when a limit must come from it) once it
    runs past ``after`` seconds (of a storage dir: a PostgreSQL queue is read without
    one)."""
    from snerd.eventlog.history import history_files
    from snerd.eventlog.layout import resolve
    from snerd.eventlog.storage import is_url
    from snerd.tools.replay_source import count_lines

    if is_url(str(storage)):
        return collect(load(storage))
    where = kit.existing_storage(storage)
    layout = resolve(where)
    progress = LateProgress(BAR_LABEL, lambda: count_lines([layout.log_path]),
                            console, clock=clock, after=after, every=every)  # fmt: skip
    try:
        snap = load(storage, progress)
        if snap.history:
            live = progress.done
            progress.grow(lambda: live + count_lines(history_files(where)))
        return collect(snap, progress)
    finally:
        progress.close()


def _noting_limits(records: Iterator[Any], limits: dict[str, int]) -> Iterator[Any]:
    """``records``, noting each rate group's last ``maxPerMinute`` on the way."""
    for record in records:
        group, limit = record.get(fields.F_RATE_GROUP), record.get(fields.F_MAX_PER_MINUTE)
        if isinstance(group, str) and type(limit) is int and limit > 0:
            limits[group] = limit
        yield record


def render(data: dict[str, Any]) -> None:
    out = kit.console()
    out.print(f"[bold]Queue[/] {data['storage']}")
    states = Table(title="Now", title_justify="left", show_edge=False)
    states.add_column("state")
    states.add_column("tasks", justify="right")
    for state, n in data["counts"].items():
        states.add_row(kit.styled_state(state), str(n))
    out.print(states)
    totals = Table(title="Since the log began", title_justify="left", show_edge=False)
    for name in data["totals"]:
        totals.add_column(name.replace("_", " "), justify="right")
    totals.add_row(*(str(v) for v in data["totals"].values()))
    out.print(totals)
    if data["types"]:
        columns = list(data["counts"])
        types = Table(title="By type", title_justify="left", show_edge=False)
        types.add_column("type")
        for state in columns:
            types.add_column(kit.styled_state(state), justify="right")
        for name, per_state in data["types"].items():
            types.add_row(name, *(str(per_state.get(s, 0) or "") for s in columns))
        out.print(types)
    if data["rate_groups"]:
        groups = Table(
            title="Rate-limit groups (rolling 60 s)", title_justify="left", show_edge=False
        )
        for column in ("group", "used", "limit", "waiting"):
            groups.add_column(column, justify="left" if column == "group" else "right")
        for g in data["rate_groups"]:
            limit = "?" if g["maxPerMinute"] is None else str(g["maxPerMinute"])
            groups.add_row(g["group"], str(g["used"]), limit, str(g["waiting"]))
        out.print(groups)
    log = data["log"]
    out.print(
        f"[dim]log {log['path']}: {log['bytes']:,} bytes, last seq {log['last_seq']}, "
        f"{log['archives']} archive(s), {log['skipped_lines']} skipped line(s)[/]",
        soft_wrap=True,
    )


@click.command("stats", short_help="Counts per state, totals, rate-limit use.")
@kit.storage_argument
@kit.json_option
def stats(storage: Path, as_json: bool) -> None:
    """Counts per state, totals, per-type breakdown and rate-limit use of a queue."""
    data = gather(storage, kit.console(stderr=True))
    if as_json:
        kit.emit_json(data)
    else:
        render(data)
