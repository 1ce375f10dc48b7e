"""The ``snerdmq`` console script: the daemon, or a subcommand.

A person who mistypes a subcommand at a terminal (``snerdmq stat``) is asked whether
they meant it (:func:`near_miss`) instead of getting a daemon on a new ``./stat/``.

``snerdmq [STORAGE_DIR]`` runs the daemon, exactly as the SnerdMQ SDKs spawn it, so
anything that is not a known subcommand (no argument, or a storage path) goes to
:func:`snerd.daemon.main` (the stdio daemon of :mod:`snerd.rpc.daemon`, with the
dashboard when ``SNERD_DASHBOARD_PORT`` is set). That path imports neither click nor rich: the SDKs
wait for the daemon, and every millisecond of start-up is theirs.

Subcommands live one per module under ``snerd/tools/``, each exposing a click
command; :data:`SUBCOMMANDS` registers them by name and they are imported only when
run (or listed by ``--help``). To add one: write the module, add a line here.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from typing import Any, Final, NoReturn

SUBCOMMANDS: Final[dict[str, str]] = {
    "replay": "snerd.tools.replay:replay",
    "stats": "snerd.tools.stats:stats",
    "dlq": "snerd.tools.dlq:dlq",
    "cancel": "snerd.tools.cancel:cancel",
    "compact": "snerd.tools.compact:compact",
    "enqueue": "snerd.tools.enqueue:enqueue",
    "dashboard": "snerd.tools.dashboard:dashboard",
    "demo": "snerd.tools.demo:demo",
    "migrate": "snerd.tools.migrate:migrate",
    "worker": "snerd.tools.worker:worker",
}
"""Subcommand name -> ``module:attribute`` of its click command."""

CLI_FLAGS: Final = frozenset({"--help", "-h", "--version"})


def available(name: str) -> bool:
    """Whether subcommand ``name`` is registered and its module exists (not imported)."""
    target = SUBCOMMANDS.get(name)
    if target is None:
        return False
    return importlib.util.find_spec(target.partition(":")[0]) is not None


def is_subcommand(argv: Sequence[str]) -> bool:
    """Whether ``argv`` (without the program name) asks for the CLI, not the daemon."""
    return bool(argv) and (argv[0] in CLI_FLAGS or available(argv[0]))


def load(name: str) -> Any:
    """The click command registered as ``name``."""
    module, _, attribute = SUBCOMMANDS[name].partition(":")
    return getattr(importlib.import_module(module), attribute)


def build_cli() -> Any:
    """The click group over every available subcommand (imports click)."""
    import click

    from snerd import __version__

    class LazyGroup(click.Group):
        def list_commands(self, ctx: click.Context) -> list[str]:
            return sorted(name for name in SUBCOMMANDS if available(name))

        def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
            return load(cmd_name) if available(cmd_name) else None

    @click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(__version__, prog_name="snerdmq")
    def cli() -> None:
        """snerdmq: an embedded, event-sourced background-job queue.

        Without a subcommand, `snerdmq [STORAGE_DIR]` runs the daemon that the
        SnerdMQ SDKs spawn (NDJSON over stdin/stdout). STORAGE_DIR may be a
        postgresql:// URL; it defaults to $SNERD_STORAGE, else .snerdata.
        """

    return cli


def near_miss(argv: Sequence[str]) -> str | None:
    """The subcommand a lone daemon argument looks like a typo of, if it names no
    existing path and has no path form (``stat`` -> ``stats``; ``./stat`` is a path)."""
    if len(argv) != 1:
        return None
    word = argv[0]
    if not word or word.startswith((".", "~")) or "/" in word or os.sep in word:
        return None
    if os.path.lexists(word):
        return None
    close = difflib.get_close_matches(word.lower(), list(SUBCOMMANDS), n=1, cutoff=0.6)
    return close[0] if close else None


def _typed_by_a_person() -> bool:
    """stdin is a terminal: a person typed the command (an SDK spawns us on pipes, and
    its ``BINARY [STORAGE_DIR]`` contract stays exactly as it is)."""
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (OSError, ValueError):
        return False


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point: dispatch to a subcommand, else run the daemon."""
    args = list(sys.argv[1:] if argv is None else argv)
    if _typed_by_a_person() and (guess := near_miss(args)) is not None:
        print(
            f"snerdmq: {args[0]!r} is not a command; did you mean `snerdmq {guess}`? To run "
            f"the daemon on a new storage directory of that name, write ./{args[0]}",
            file=sys.stderr,
        )
        sys.exit(2)
    if not is_subcommand(args):
        from snerd.daemon import main as daemon_main

        exit_now(daemon_main(args))
    build_cli().main(args=args, prog_name="snerdmq")


def exit_now(code: int) -> NoReturn:
    """End the daemon without tearing the interpreter down.

    When the daemon's ``main`` returns, its log is closed and synced, its event loop
    closed, no thread of its own runs (handlers run in the SDK's process, webhooks on
    the loop), and only stdio and logging may hold buffered text: those are flushed
    here. What the interpreter's teardown would add is a full garbage collection and
    the freeing of every module, ~27 ms of each exit that an SDK's ``shutdown`` waits
    for. A coverage tool measuring the daemon needs its ``patch = _exit`` option."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            with contextlib.suppress(Exception):  # (a closed or broken pipe: nothing to do)
                stream.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
