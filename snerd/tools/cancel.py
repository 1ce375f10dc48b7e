"""``snerdmq cancel ID...``: cancel tasks that are not running (children fail through)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from snerd.tools import kit


async def _cancel(storage: Path, ids: tuple[str, ...]) -> list[dict[str, Any]]:
    async with kit.open_engine(storage, tool="cancel") as engine:
        results = []
        for task_id in ids:
            refusal = await engine.cancel(task_id)
            results.append(
                {
                    "task_id": task_id,
                    "ok": refusal is None,
                    "error": None if refusal is None else refusal.message,
                }
            )
        return results


@click.command("cancel")
@click.argument("ids", nargs=-1, required=True)
@kit.storage_option
@kit.json_option
def cancel(ids: tuple[str, ...], storage: Path, as_json: bool) -> None:
    """Cancel pending, scheduled or blocked tasks by id.

    A running task cannot be cancelled; children waiting on a cancelled task are
    dead-lettered with reason blocked_by_failed_parent. Exit 1 if any id was refused.
    """
    results = kit.run(_cancel(kit.existing_storage(storage), ids))
    if as_json:
        kit.emit_json(results)
    else:
        for result in results:
            if result["ok"]:
                click.echo(f"cancelled {result['task_id']}")
            else:
                click.echo(f"Error: {result['error']}", err=True)
    if not all(r["ok"] for r in results):
        raise SystemExit(1)
