"""``snerdmq dlq list|requeue|purge``: inspect and act on the dead-letter queue."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from snerd.tools import kit


@click.group("dlq")
def dlq() -> None:
    """Inspect, requeue or delete dead-lettered tasks."""


@dlq.command("list")
@kit.storage_argument
@kit.json_option
def list_(storage: Path, as_json: bool) -> None:
    """The dead-letter queue, most recent first."""
    from snerd.projections.views.tasks import dlq_rows
    from snerd.tools.stats import load

    rows = dlq_rows(load(storage).state)
    if as_json:
        kit.emit_json(rows)
        return
    out = kit.console()
    if not rows:
        out.print("The dead-letter queue is empty.")
        return
    table = Table(show_edge=False)
    for column in ("key", "type", "reason", "last error", "retries", "dead-lettered at"):
        table.add_column(column, justify="right" if column == "retries" else "left")
    for row in rows:
        table.add_row(
            row["dlqKey"],
            row["type"],
            row["reason"].replace("_", " "),
            row["lastError"] or "",
            f"{row['retryCount']}/{row['maxRetries']}",
            row["deadLetteredAt"] or "",
        )
    out.print(table)
    out.print(f"[dim]{len(rows)} dead-lettered task(s)[/]")


async def _apply(storage: Path, keys: Sequence[str], every: bool, action: str) -> list[Any]:
    async with kit.open_engine(storage, tool=f"dlq-{action}") as engine:
        targets = sorted(engine.state.dlq) if every else list(keys)
        op = engine.requeue if action == "requeue" else engine.purge
        results = []
        for key in targets:
            refusal = await op(key)
            results.append(
                {
                    "key": key,
                    "ok": refusal is None,
                    "error": None if refusal is None else refusal.message,
                }
            )
        return results


def _act(storage: Path, keys: Sequence[str], every: bool, action: str, as_json: bool) -> None:
    if not keys and not every:
        raise click.UsageError(f"name the task ids to {action}, or pass --all")
    if keys and every:
        raise click.UsageError("pass task ids or --all, not both")
    storage = kit.existing_storage(storage)
    results = kit.run(_apply(storage, keys, every, action))
    if as_json:
        kit.emit_json(results)
    else:
        done = "requeued" if action == "requeue" else "deleted"
        for result in results:
            if result["ok"]:
                click.echo(f"{done} {result['key']}")
            else:
                click.echo(f"Error: {result['error']}", err=True)
        if every and not results:
            click.echo("The dead-letter queue is empty.")
    if not all(r["ok"] for r in results):
        raise SystemExit(1)


@dlq.command("requeue")
@click.argument("keys", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Requeue every dead-lettered task.")
@kit.storage_option
@kit.json_option
def requeue(keys: tuple[str, ...], every: bool, storage: Path, as_json: bool) -> None:
    """Put dead-lettered tasks back in the queue with their retries restored."""
    _act(storage, keys, every, "requeue", as_json)


@dlq.command("purge")
@click.argument("keys", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Delete every dead-lettered task.")
@click.option("--yes", is_flag=True, help="Do not ask before deleting with --all.")
@kit.storage_option
@kit.json_option
def purge(keys: tuple[str, ...], every: bool, yes: bool, storage: Path, as_json: bool) -> None:
    """Delete dead-lettered tasks for good (they stay in the audit history)."""
    if every and not yes:
        click.confirm("Delete every dead-lettered task for good?", abort=True)
    _act(storage, keys, every, "purge", as_json)
