"""``snerdmq enqueue TYPE [DATA]``: add one task from a script or a smoke test."""

from __future__ import annotations

import re
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import click
import orjson

from snerd.tools import kit

_RELATIVE = re.compile(r"^\+(\d+(?:\.\d+)?)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _when(value: str | None) -> Any:
    """``--execute-at``: RFC 3339, epoch seconds, or ``+30s``/``+5m``/``+2h``/``+1d``."""
    if value is None:
        return None
    match = _RELATIVE.match(value.strip())
    if match:
        return time.time() + float(match.group(1)) * _UNIT[match.group(2)]
    try:
        return float(value)
    except ValueError:
        return value


OPTION_OF: dict[str, str] = {
    "task_id": "--id", "task_type": "TASK_TYPE", "task_data": "DATA",
    "max_retries": "--max-retries", "retry_after_hours": "--retry-after-hours",
    "urgency_score": "--urgency", "execute_at": "--execute-at", "cron": "--cron",
    "trigger_after_ids": "--after", "rate_limit_group": "--rate-group",
    "max_per_minute": "--max-per-minute", "auto_dedupe": "--dedupe",
    "webhook_url": "--webhook", "max_execution_seconds": "--timeout", "pool": "--pool",
}  # fmt: skip
"""The protocol's enqueue fields and the options (or arguments) that set them here."""
_FIELD = re.compile(r"\b(" + "|".join(OPTION_OF) + r")\b")


def in_cli_words(message: str) -> str:
    """A protocol error message naming this command's options instead of the fields."""
    return _FIELD.sub(lambda m: OPTION_OF[m.group(1)], message)


def _data(data: str | None, raw: bool) -> Any:
    if data == "-":
        data = sys.stdin.read()
    if data is None:
        return None
    if raw:
        return data
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        raise click.BadParameter(
            f"not valid JSON: {data[:60]!r} (use --raw to send text as is)", param_hint="DATA"
        ) from None


async def _enqueue(storage: Path, command: Any) -> Any:
    async with kit.open_engine(storage, tool="enqueue") as engine:
        return await engine.enqueue(command)


@click.command("enqueue", short_help="Enqueue one task (scripts, smoke tests).")
@click.argument("task_type")
@click.argument("data", required=False)
@click.option("--id", "task_id", help="Task id (default: TYPE-<random>).")
@click.option("--raw", is_flag=True, help="Send DATA as text, not JSON.")
@click.option("--max-retries", type=click.IntRange(min=0), help="Retries after the first attempt.")
@click.option("--retry-after-hours", type=float, help="Backoff before each retry (fractions ok).")
@click.option("--urgency", type=float, help="Larger runs first.")
@click.option("--execute-at", help="RFC 3339 time, epoch seconds, or +30s / +5m / +2h / +1d.")
@click.option("--cron", help="Cron expression (5 fields, 6 with seconds first) or 30s/10m/2h/1d.")
@click.option("--after", "parents", multiple=True, help="Parent task id (repeatable).")
@click.option("--rate-group", help="Rate-limit group (needs --max-per-minute).")
@click.option("--max-per-minute", type=click.IntRange(min=1), help="Dispatches per rolling 60 s.")
@click.option("--dedupe", is_flag=True, help="Drop it if a live task has the same type and data.")
@click.option("--webhook", help="POST the task to this URL instead of an SDK handler.")
@click.option("--timeout", type=float, help="Hard timeout per attempt, in seconds.")
@click.option("--pool", help="Worker pool name.")
@kit.storage_option
@kit.json_option
def enqueue(
    task_type: str,
    data: str | None,
    task_id: str | None,
    raw: bool,
    storage: Path,
    as_json: bool,
    **options: Any,
) -> None:
    """Enqueue a task of TASK_TYPE with JSON DATA ('-' reads it from stdin).

    The storage directory is created if needed. Exit 1 when the queue refuses the task
    (its id is live or dead-lettered), 2 when an option is invalid.
    """
    from snerd.projections import decide as cmds
    from snerd.projections.options import OptionError, enqueue_command

    task_id = task_id or f"{task_type}-{uuid.uuid4().hex[:12]}"
    fields = {
        "max_retries": options["max_retries"],
        "retry_after_hours": options["retry_after_hours"],
        "urgency_score": options["urgency"],
        "execute_at": _when(options["execute_at"]),
        "cron": options["cron"],
        "trigger_after_ids": list(options["parents"]) or None,
        "rate_limit_group": options["rate_group"],
        "max_per_minute": options["max_per_minute"],
        "auto_dedupe": options["dedupe"] or None,
        "webhook_url": options["webhook"],
        "max_execution_seconds": options["timeout"],
        "pool": options["pool"],
    }
    given = {k: v for k, v in fields.items() if v is not None}
    try:
        command = enqueue_command(task_id, task_type, _data(data, raw), **given)
    except OptionError as exc:
        kit.fail(in_cli_words(exc.message), code=2)
    outcome = kit.run(_enqueue(storage, command))
    if isinstance(outcome, cmds.Refusal):
        kit.fail(outcome.message)
    duplicate = outcome.duplicate_of if isinstance(outcome, cmds.Deduplicated) else None
    unknown = list(outcome.ids) if isinstance(outcome, cmds.UnknownParents) else []
    if as_json:
        reply: dict[str, Any] = {"ok": True, "task_id": task_id, "deduplicated_of": duplicate}
        if unknown:
            reply["unknown_parents"] = unknown
        kit.emit_json(reply)
    elif duplicate:
        click.echo(f"deduplicated: a live task {duplicate} has the same type and data")
    else:
        click.echo(f"enqueued {task_id}")
    if unknown and not as_json:
        click.echo(f"warning: --after {', '.join(unknown)}: no such live or dead-lettered "
                   "task; it does not wait for them", err=True)  # fmt: skip
