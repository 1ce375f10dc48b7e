"""``snerdmq worker app.tasks:queue``: run a module's ``snerd.Queue`` handlers.

Like ``rq worker`` or ``huey_consumer``: imports the module (the current directory is
on the import path), finds the :class:`snerd.Queue` (``module:attribute``, or the only
Queue the module holds), and runs its handlers on the storage the queue names until
SIGTERM or SIGINT. Then it drains: no new claims, the attempts in flight finish (up to
``--drain-timeout`` seconds; a second signal ends the wait, and what still runs is
released to other workers), and it exits 0. Several workers on one storage share the
work as daemons do: a claim is an event appended under the log's lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

import click

from snerd.embedded import Queue
from snerd.errors import SnerdError
from snerd.rpc import logs
from snerd.tools import kit


def load_queue(spec: str) -> Queue:
    """The Queue that ``module[:attribute]`` names; ``click.UsageError`` saying why not."""
    module_name, _, attribute = spec.partition(":")
    if not module_name:
        raise click.UsageError(f"{spec!r} is not MODULE:ATTRIBUTE (e.g. app.tasks:queue)")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module_name.startswith(exc.name):
            raise  # the module exists; something it imports does not: show the traceback
        raise click.UsageError(f"cannot import {module_name!r}: no module named {exc.name!r}"
                               ) from None  # fmt: skip
    if attribute:
        found: Any = module
        for part in attribute.split("."):
            if not hasattr(found, part):
                raise click.UsageError(f"module {module_name!r} has no attribute {attribute!r}")
            found = getattr(found, part)
        if not isinstance(found, Queue):
            raise click.UsageError(f"{spec} is a {type(found).__name__}, not a snerd.Queue")
        return found
    queues = {name: v for name, v in vars(module).items() if isinstance(v, Queue)}
    if len(queues) != 1:
        what = "no snerd.Queue" if not queues else f"several queues ({', '.join(sorted(queues))})"
        raise click.UsageError(f"module {module_name!r} holds {what}: name one as "
                               f"{module_name}:ATTRIBUTE")  # fmt: skip
    return next(iter(queues.values()))


def parse_pools(texts: tuple[str, ...]) -> dict[str, int]:
    """``NAME=N`` items (N >= 1), each text one or several separated by commas, as in
    ``SNERD_POOLS``."""
    pools: dict[str, int] = {}
    for item in (part.strip() for text in texts for part in text.split(",")):
        name, _, size = item.partition("=")
        name = name.strip()
        if not name or not size.strip().isdigit() or int(size) < 1:
            raise click.BadParameter(f"{item!r} is not NAME=N with N >= 1", param_hint="--pool")
        pools[name] = int(size)
    return pools


def banner(spec: str, queue: Queue) -> str:
    """The line that says what this worker serves."""
    config = queue.engine.config
    pools = ", ".join(f"{name}={size}" for name, size in sorted(config.pools.items()))
    types = ", ".join(queue.task_types) or "(none)"
    return (f"snerdmq worker {queue.engine.daemon}: serving {spec} on "
            f"{Path(queue.storage).resolve()}; task types: {types}; concurrency "
            f"{config.max_workers}{f'; pools {pools}' if pools else ''}")  # fmt: skip


async def serve(queue: Queue, spec: str, drain_timeout: float) -> int:
    """Run until a signal, then drain; the exit code."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal() -> None:
        if stop.is_set():
            queue.engine.hurry()  # a second signal: release what still runs, now
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    await queue.start()
    click.echo(banner(spec, queue), err=True)
    await stop.wait()
    click.echo(f"snerdmq worker: draining: no new claims; waiting for "
               f"{len(queue.engine.runs)} attempt(s) in flight", err=True)  # fmt: skip
    await queue.close(timeout=drain_timeout)
    click.echo("snerdmq worker: stopped", err=True)
    return 0


@click.command()
@click.argument("target", metavar="MODULE:QUEUE")
@click.option("-c", "--concurrency", type=click.IntRange(min=1), default=None,
              envvar="SNERD_MAX_WORKERS",
              help="Attempts in flight at most [env SNERD_MAX_WORKERS; default: the queue's "
                   "max_workers].")  # fmt: skip
@click.option("--pool", "pools", multiple=True, metavar="NAME=N", envvar="SNERD_POOLS",
              help="At most N attempts of pool NAME at once; repeatable, or comma-separated "
                   "[env SNERD_POOLS].")  # fmt: skip
@click.option("-s", "--storage", type=click.Path(path_type=Path), default=None,
              help="Run on this storage instead of the one the queue names.")  # fmt: skip
@click.option("--drain-timeout", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="On SIGTERM/SIGINT, seconds to wait for attempts in flight before "
                   "releasing them to other workers.")  # fmt: skip
def worker(target: str, concurrency: int | None, pools: tuple[str, ...],
           storage: Path | None, drain_timeout: float) -> None:  # fmt: skip
    """Run the handlers of the snerd.Queue in MODULE (e.g. app.tasks:queue) until
    SIGTERM or SIGINT, then drain and exit 0."""
    logs.configure(os.environ)  # SNERD_LOG_LEVEL, SNERD_LOG_FORMAT, as the daemon
    queue = load_queue(target)
    try:
        queue.configure(storage=None if storage is None else str(storage),
                        max_workers=concurrency, pools=parse_pools(pools))  # fmt: skip
    except SnerdError as exc:
        raise click.UsageError(str(exc)) from None
    if not queue.task_types:
        kit.fail(f"{target} registers no handlers: nothing to run", code=2)
    try:
        code = asyncio.run(serve(queue, target, drain_timeout))
    except (OSError, SnerdError) as exc:
        kit.fail(f"cannot run on {queue.storage!r}: {exc}")
        return
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    sys.exit(code)
