"""``snerdmq migrate``: a storage dir to PostgreSQL and back, equal by replay."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pgkit
import pytest
from auditkit import storage_problems
from click.testing import CliRunner
from seedkit import ok_and_bad

import snerd
from snerd.eventlog import iter_history
from snerd.tools.migrate import migrate
from snerd.tools.replay import replay


async def _seed(path: Path) -> None:
    """Some history with a compaction in the middle: archives and a live log."""
    queue = ok_and_bad(path)

    async with queue:
        for i in range(20):
            await queue.enqueue(f"ok-{i}", "ok", {"n": i})
        await queue.enqueue("bad-1", "bad", {}, max_retries=0)
        await queue.join(timeout=10)
        await queue.engine.compact()
        await queue.enqueue("later-1", "nobody", {}, execute_at=time.time() + 3600)
        await queue.enqueue("ok-x", "ok", {})
        await queue.join(timeout=10)


@pytest.fixture
def url() -> Iterator[str]:
    pgkit.require_pg()
    name = pgkit.fresh_queue()
    try:
        yield pgkit.queue_url(name)
    finally:
        pgkit.drop_queue(name)


def _replayed(cli: CliRunner, storage: str) -> dict[str, object]:
    result = cli.invoke(replay, [storage, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    return {k: v for k, v in data.items() if k not in ("path", "files", "source")}


def test_round_trip_dir_to_postgres_and_back_is_equal_by_replay(tmp_path: Path, url: str) -> None:
    src, back = tmp_path / "src", tmp_path / "back"
    asyncio.run(_seed(src))
    assert (src / "tasks" / "archive").is_dir() and any((src / "tasks" / "archive").iterdir())
    cli = CliRunner()
    first = cli.invoke(migrate, [str(src), url, "--json"])
    assert first.exit_code == 0, first.output
    assert json.loads(first.output)["archives"] == 1
    second = cli.invoke(migrate, [url, str(back)])
    assert second.exit_code == 0, second.output
    replayed = _replayed(cli, str(src))
    assert len(replayed["tasks"]) == 23  # type: ignore[arg-type]
    assert replayed == _replayed(cli, url) == _replayed(cli, str(back))
    assert list(iter_history(src)) == list(iter_history(back))
    assert (src / "tasks" / "tasks.log").read_bytes() == (back / "tasks" / "tasks.log").read_bytes()
    for name in ("archive",):
        assert sorted(p.name for p in (src / "tasks" / name).iterdir()) == sorted(
            p.name for p in (back / "tasks" / name).iterdir()
        )
    for where in (src, url, back):  # the chain survives both copies: replay --verify
        assert storage_problems(where) == [], where


def test_a_non_empty_destination_is_refused(tmp_path: Path, url: str) -> None:
    src = tmp_path / "src"
    asyncio.run(_seed(src))
    cli = CliRunner()
    assert cli.invoke(migrate, [str(src), url]).exit_code == 0
    again = cli.invoke(migrate, [str(src), url])
    assert again.exit_code == 1 and "already holds a queue" in again.output
    back = cli.invoke(migrate, [url, str(src)])
    assert back.exit_code == 1 and "already holds a queue" in back.output
    empty = cli.invoke(migrate, [str(tmp_path / "nothing"), str(tmp_path / "x")])
    assert empty.exit_code == 1 and "no queue at" in empty.output


def test_a_migrated_queue_runs_on_postgres(tmp_path: Path, url: str) -> None:
    src = tmp_path / "src"
    asyncio.run(_seed(src))
    assert CliRunner().invoke(migrate, [str(src), url]).exit_code == 0

    async def run() -> list[str]:
        done: list[str] = []
        queue = snerd.Queue(url, fsync=False)

        @queue.handler("nobody")
        async def nobody(job: object) -> None:
            done.append("ran")

        async with queue:
            await queue.enqueue("after-1", "nobody", {})
            await queue.join(timeout=10)
            assert "later-1" in queue.engine.state.tasks  # the history came along
        return done

    assert asyncio.run(run()) == ["ran"]


def test_a_queue_holding_only_a_dead_compactions_pending_archive_counts_as_empty(
    tmp_path: Path, url: str
) -> None:
    """A compaction that died on an otherwise empty queue leaves a pending archive: it
    holds no history (no reader lists it), so migrating into that queue is allowed and
    drops it."""
    import psycopg

    from snerd.eventlog.postgres.sql import PENDING
    from snerd.eventlog.postgres.url import parse

    queue = parse(url).queue
    src = tmp_path / "src"
    asyncio.run(_seed(src))
    cli = CliRunner()
    assert cli.invoke(migrate, [str(src), url]).exit_code == 0  # creates the tables
    pgkit.drop_queue(queue)
    with psycopg.connect(pgkit.PG_URL, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO snerd.archives (queue, name, ts_ms, bytes) VALUES (%s, 'dead', 1, %s)",
            (queue, PENDING),
        )
    result = cli.invoke(migrate, [str(src), url])
    assert result.exit_code == 0, result.output
    with psycopg.connect(pgkit.PG_URL, autocommit=True) as conn:
        names = [r[0] for r in conn.execute(
            "SELECT name FROM snerd.archives WHERE queue = %s", (queue,)).fetchall()]  # fmt: skip
    assert "dead" not in names
    assert _replayed(cli, url) == _replayed(cli, str(src))
