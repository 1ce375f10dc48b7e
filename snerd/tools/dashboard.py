"""``snerdmq dashboard [STORAGE]``: serve the web dashboard for a storage directory.

The server runs on its own read-only engine: it follows the log that every daemon
and embedded queue on the storage writes, never claims work, and appends only the
operator's actions (cancel, requeue, delete).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import click

from snerd.rpc import logs
from snerd.tools import kit


async def _serve(storage: Path | str, host: str, port: int, token: str | None) -> None:
    from snerd.dashboard import is_loopback, start_dashboard, url_of

    engine = kit.make_engine(storage, tool="dashboard", follow=True)
    await engine.start()
    try:
        try:
            runner = await start_dashboard(engine, host=host, port=port, token=token)
        except OSError as exc:
            raise click.ClickException(
                f"cannot listen on {host}:{port} ({exc.strerror or exc}); try --port"
            ) from None
        out = kit.console()
        where = kit.shown(storage)
        out.print(f"Dashboard for [bold]{where}[/] at [link]{url_of(runner, token=token)}[/]")
        if not is_loopback(host) and not token:
            out.print(
                "[yellow]Listening beyond this machine without a token: anyone who can reach "
                "it can read the queue (changes from other machines are refused). Use "
                "--token or SNERD_DASHBOARD_TOKEN.[/]"
            )
        out.print("[dim]Ctrl-C to stop.[/]")
        await _until_signalled()
        await runner.cleanup()
    finally:
        await engine.drain(0)


async def _until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()


@click.command("dashboard", short_help="Serve the web dashboard for a storage dir.")
@kit.storage_argument
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port",
    default=8080,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port (0 picks a free one).",
)
@click.option(
    "--token",
    envvar="SNERD_DASHBOARD_TOKEN",
    help="Require this token on every request ($SNERD_DASHBOARD_TOKEN).",
)
def dashboard(storage: Path | str, host: str, port: int, token: str | None) -> None:
    """Serve the web dashboard for the queue in STORAGE (default .snerdata).

    Works beside running daemons: it reads the shared log. Binds 127.0.0.1 unless
    --host says otherwise; a token, when set, is needed for every request (open the
    printed URL, which carries it once).
    """
    storage = kit.existing_storage(storage)
    logs.configure(os.environ)  # SNERD_LOG_LEVEL, SNERD_LOG_FORMAT, as the daemon
    kit.run(_serve(storage, host, port, token or None))
