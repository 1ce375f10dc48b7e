"""``snerdmq compact [STORAGE]``: rewrite the log as a snapshot of its live state.

Safe while daemons run on the same storage: the compaction is the log's own (temp
file, fsync, atomic rename, old file archived for the replay tool). Shows a progress
bar while the log is replayed.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import click
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from snerd.tools import kit


def count_lines(path: Path) -> int:
    """Newlines in ``path`` (blocking; a fast pass for the progress bar's total)."""
    n = 0
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            n += chunk.count(b"\n")
    return n


async def _follow_replay(engine: Any, progress: Progress, bar: Any) -> None:
    while True:
        stats = engine.log.stats()
        progress.update(bar, completed=stats.records + stats.skipped)
        await asyncio.sleep(0.1)


async def _compact(storage: Path | str, progress: Progress) -> dict[str, Any]:
    if isinstance(storage, str):
        return await _compact_url(storage)
    from snerd.eventlog.layout import resolve

    layout = resolve(storage)
    before_bytes = layout.log_path.stat().st_size
    archives_before = set(layout.archive_files())
    lines = await asyncio.to_thread(count_lines, layout.log_path)
    engine = kit.make_engine(storage, tool="compact")
    bar = progress.add_task("Replaying log", total=max(lines, 1))
    watcher = asyncio.get_running_loop().create_task(_follow_replay(engine, progress, bar))
    try:
        await engine.start()
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    progress.update(bar, completed=max(lines, 1))
    try:
        before_records = engine.log.stats().records
        writing = progress.add_task("Writing snapshot", total=None)
        done = await engine.compact()
        progress.update(writing, total=1, completed=1)
        after = engine.log.stats()
        live, dead = len(engine.state.tasks), len(engine.state.dlq)
    finally:
        await engine.drain(0)
    archived = sorted(set(layout.archive_files()) - archives_before)
    return {
        "storage": str(layout.storage),
        "compacted": done and bool(archived),
        "before": {"bytes": before_bytes, "records": before_records},
        "after": {"bytes": layout.log_path.stat().st_size, "records": after.records},
        "live_tasks": live,
        "dead_lettered": dead,
        "archive": str(archived[-1]) if archived else None,
    }


async def _compact_url(url: str) -> dict[str, Any]:
    """``compact`` on a postgresql:// queue (its archive is a table: named by count)."""
    from snerd.eventlog.storage import describe

    before = describe(url)
    engine = kit.make_engine(url, tool="compact")
    await engine.start()
    try:
        before_records = engine.log.stats().records
        done = await engine.compact()
        after = engine.log.stats()
        live, dead = len(engine.state.tasks), len(engine.state.dlq)
    finally:
        await engine.drain(0)
    now = describe(url)
    return {
        "storage": kit.shown(url),
        "compacted": done and now["archives"] > before["archives"],
        "before": {"bytes": before["bytes"], "records": before_records},
        "after": {"bytes": now["bytes"], "records": after.records},
        "live_tasks": live,
        "dead_lettered": dead,
        "archive": "the snerd.archive_log table",
    }


@click.command("compact", short_help="Compact the log now (history is archived).")
@kit.storage_argument
@kit.json_option
def compact(storage: Path | str, as_json: bool) -> None:
    """Compact the log now (daemons also do this by themselves past a size threshold).

    The old log is kept under tasks/archive/ so `snerdmq replay` still sees the full
    history.
    """
    storage = kit.existing_storage(storage)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=kit.console(stderr=True),
        transient=True,
    )
    with progress:
        result = kit.run(_compact(storage, progress))
    if as_json:
        kit.emit_json(result)
        return
    before, after = result["before"], result["after"]
    if not result["compacted"]:
        click.echo("Nothing to compact: no record was appended since the last compaction "
                   "(or another process compacted the log meanwhile).")  # fmt: skip
        return
    saved = 100.0 * (1 - after["bytes"] / before["bytes"]) if before["bytes"] else 0.0
    kit.console().print(
        f"Compacted [bold]{result['storage']}[/]: {before['records']:,} records "
        f"({before['bytes']:,} bytes) -> {after['records']:,} records ({after['bytes']:,} "
        f"bytes), {saved:.0f}% smaller; {result['live_tasks']} live task(s), "
        f"{result['dead_lettered']} dead-lettered.\nHistory archived in {result['archive']}",
        soft_wrap=True,
    )
