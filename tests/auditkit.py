"""The audit every test of a queue may end with: ``snerdmq replay --verify``."""

from __future__ import annotations

from pathlib import Path

from snerd.eventlog import MemoryStore


def store_problems(store: MemoryStore, directory: Path) -> list[dict]:
    """What ``snerdmq replay --verify`` says of everything ``store`` holds (its archives
    and live lines, written out under ``directory`` as a storage dir would hold them):
    audit problems, chain breaks, and links that only older writers make."""
    import json

    from click.testing import CliRunner

    from snerd.tools.replay import replay

    tasks = directory / "tasks"
    (tasks / "archive").mkdir(parents=True)
    for name, lines in store.archives:
        (tasks / "archive" / name).write_bytes(b"".join(lines))
    (tasks / "tasks.log").write_bytes(b"".join(store.lines))
    result = CliRunner().invoke(replay, [str(directory), "--verify", "--json"])
    report = json.loads(result.output)
    chain = report["chain"]
    return [*report["problems"], *(["older link"] * chain["older_links"])]
