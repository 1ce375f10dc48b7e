"""The audit every test of a queue may end with: ``snerdmq replay --verify``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from snerd.eventlog import MemoryStore


def verify_report(storage: Path | str) -> tuple[dict[str, Any], int]:
    """``snerdmq replay --verify --json`` of a storage dir or a PostgreSQL URL: its
    report and its exit code."""
    import json

    from click.testing import CliRunner

    from snerd.tools.replay import replay

    result = CliRunner().invoke(replay, [str(storage), "--verify", "--json"])
    return json.loads(result.output), result.exit_code


TORN = ("skipped line (incomplete", "skipped line (torn")
"""How the audit names a line a killed writer left unfinished."""


def storage_problems(storage: Path | str, *, torn_tail: bool = False) -> list[Any]:
    """What ``snerdmq replay --verify`` says of a storage dir or a PostgreSQL queue:
    audit problems, chain breaks, and links that only older writers make
    (``torn_tail``: but a line a killed writer left unfinished)."""
    report, _ = verify_report(storage)
    problems = [p for p in report["problems"] if not (torn_tail and p["problem"].startswith(TORN))]
    return [*problems, *(["older link"] * report["chain"]["older_links"])]


def store_problems(store: MemoryStore, directory: Path) -> list[Any]:
    """What ``snerdmq replay --verify`` says of everything ``store`` holds (its archives
    and live lines, written out under ``directory`` as a storage dir would hold them)."""
    tasks = directory / "tasks"
    (tasks / "archive").mkdir(parents=True)
    for name, lines in store.archives:
        (tasks / "archive" / name).write_bytes(b"".join(lines))
    (tasks / "tasks.log").write_bytes(b"".join(store.lines))
    return storage_problems(directory)
