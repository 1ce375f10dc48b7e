"""``snerdmq migrate SRC DST``: copy a queue between a storage dir and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import click

from snerd.tools import kit


@click.command("migrate", short_help="Copy a queue between a storage dir and PostgreSQL.")
@click.argument("source", type=kit.STORAGE)
@click.argument("destination", type=kit.STORAGE)
@kit.json_option
def migrate(source: Path | str, destination: Path | str, as_json: bool) -> None:
    """Copy the queue at SOURCE (live log and archived history) to DESTINATION.

    Either may be a storage directory or a postgresql://...?queue=NAME URL. The lines
    are copied byte for byte (same seqs, same checksums); DESTINATION must hold no
    queue yet. Stop the daemons on SOURCE first, and start them on DESTINATION after.
    """
    from snerd.errors import SnerdError
    from snerd.eventlog.migrate import migrate as copy

    try:
        dump = copy(str(source), str(destination))
    except SnerdError as exc:
        kit.fail(str(exc))
        return
    result = {
        "source": kit.shown(source),
        "destination": kit.shown(destination),
        "archives": len(dump.archives),
        "live_lines": len(dump.live),
        "lines": dump.lines,
    }
    if as_json:
        kit.emit_json(result)
        return
    click.echo(f"copied {result['lines']:,} lines ({result['archives']} archive(s) and the live"
               f" log) from {result['source']} to {result['destination']}")  # fmt: skip
