"""Shared pieces of the CLI subcommands: storage options, the short-lived engine, output.

Exit codes of every subcommand: 0 success, 1 the command was refused or failed
(unknown id, storage missing or unreadable), 2 bad usage or input.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson
from rich.console import Console
from rich.text import Text

from snerd.errors import SnerdError

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_STORAGE = ".snerdata"
STORAGE_ENV = "SNERD_STORAGE"

STATE_STYLES = {
    "pending": "bright_black",
    "scheduled": "magenta",
    "blocked": "yellow",
    "active": "blue",
    "dead_lettered": "red",
    "completed": "green",
    "cancelled": "bright_black",
}


class StorageType(click.ParamType):  # type: ignore[type-arg]
    """A storage dir (as a Path), or a ``postgresql://`` URL (kept as a string: a Path
    would fold its ``//``). A URL is shown without its password in every message."""

    name = "storage"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Path | str:  # fmt: skip
        from snerd.eventlog.storage import is_url

        if isinstance(value, Path):
            return value
        text = str(value)
        return text if is_url(text) else Path(text)


STORAGE = StorageType()


def shown(storage: Path | str) -> str:
    """``storage`` as it may be printed (a URL loses its password)."""
    from snerd.eventlog.storage import redact

    return redact(str(storage))


def storage_argument(function: F) -> F:
    """``[STORAGE]``: a storage dir (or its tasks.log) or a postgresql:// URL; default
    $SNERD_STORAGE or .snerdata."""
    return click.argument(
        "storage",
        required=False,
        envvar=STORAGE_ENV,
        default=DEFAULT_STORAGE,
        type=STORAGE,
    )(function)


def storage_option(function: F) -> F:
    """``-s/--storage DIR`` for commands whose arguments are task ids."""
    return click.option(
        "-s",
        "--storage",
        envvar=STORAGE_ENV,
        default=DEFAULT_STORAGE,
        show_default=True,
        type=STORAGE,
        help="Storage directory or postgresql:// URL (or $SNERD_STORAGE).",
    )(function)


def json_option(function: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(function)


def console(*, stderr: bool = False) -> Console:
    """A rich console on the current stdout/stderr; colours only on a terminal, and
    tables 120 columns wide when piped (unless $COLUMNS says otherwise)."""
    out = Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = 120
    return out


def emit_json(data: Any) -> None:
    click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2, default=str).decode())


def styled_state(state: str) -> Text:
    return Text(state.replace("_", " "), style=STATE_STYLES.get(state, ""))


def existing_storage(storage: Any) -> Any:
    """The storage dir of an existing queue (a URL as given); exit 1 with a clear
    message otherwise."""
    from snerd.eventlog.layout import resolve
    from snerd.eventlog.storage import is_url

    if is_url(str(storage)):
        from snerd.eventlog.storage import describe

        try:
            exists = describe(str(storage))["exists"]
        except SnerdError as exc:
            raise click.ClickException(str(exc)) from None
        if not exists:
            raise click.ClickException(f"no queue at {shown(storage)}")
        return str(storage)

    try:
        layout = resolve(storage)
    except SnerdError as exc:
        raise click.ClickException(str(exc)) from None
    if not layout.log_path.exists():
        raise click.ClickException(
            f"no queue at {storage}: {layout.log_path} does not exist "
            f"(pass the storage directory the daemon uses, default {DEFAULT_STORAGE})"
        )
    return layout.storage


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run the command's coroutine; package errors become exit 1 with their message."""
    try:
        return asyncio.run(coroutine)
    except SnerdError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"{exc.strerror or exc}: {exc.filename or ''}".strip()) from None


def cli_daemon_id(tool: str) -> str:
    return f"{tool}-{socket.gethostname()}-{os.getpid()}"


def retention(env: Mapping[str, str]) -> dict[str, Any]:
    """The archive retention from ``SNERD_ARCHIVE_MAX_AGE_DAYS`` / ``_MAX_BYTES`` (unset:
    keep every archive), as the daemons read it; a bad value is refused (exit 2)."""
    out: dict[str, Any] = {}
    for name, key, unit in (("SNERD_ARCHIVE_MAX_AGE_DAYS", "archive_max_age_seconds", 86400),
                            ("SNERD_ARCHIVE_MAX_BYTES", "archive_max_bytes", 1)):  # fmt: skip
        raw = env.get(name)
        if not raw:
            continue
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not (value >= 0 and value != float("inf")):
            fail(f"{name}={raw!r} is not a number >= 0", code=2)
        out[key] = int(value) if unit == 1 else value * unit
    return out


def make_engine(storage: Path | str, *, tool: str, follow: bool = False) -> Any:
    """A passive engine on ``storage``: it claims nothing and keeps no house (no
    orphan release, no compaction); it writes only what its caller asks for. The
    caller starts it and drains it."""
    from snerd.dispatcher.engine import Engine, EngineConfig
    from snerd.eventlog.storage import open_log

    config = EngineConfig(daemon_id=cli_daemon_id(tool), passive=True, **retention(os.environ))
    return Engine(open_log(storage, follow=follow), executors=[], config=config)


@contextlib.asynccontextmanager
async def open_engine(storage: Path | str, *, tool: str) -> AsyncIterator[Any]:
    """A short-lived :func:`make_engine`: replays the log, lets the command append
    through it (cancel, requeue, purge, enqueue, compact), and closes the log on exit."""
    engine = make_engine(storage, tool=tool)
    await engine.start()
    try:
        yield engine
    finally:
        await engine.drain(0)


def fail(message: str, *, code: int = 1) -> None:
    """Print ``message`` on stderr and exit with ``code``."""
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)
