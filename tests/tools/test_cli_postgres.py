"""The queue subcommands and ``snerd.Queue`` on a ``postgresql://`` URL: the same
answers as on a storage dir, and the URL's password never printed."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pgkit
import pytest
from click.testing import CliRunner
from seedkit import ok_and_bad

from snerd.tools.cancel import cancel
from snerd.tools.compact import compact
from snerd.tools.dlq import dlq
from snerd.tools.enqueue import enqueue
from snerd.tools.replay import replay
from snerd.tools.stats import stats

SECRET = "s3cret-never-shown"


def with_password(url: str) -> str:
    """``url`` with a password (trust auth ignores it; it must never be printed)."""
    scheme, rest = url.split("://", 1)
    userinfo, _, hostpart = rest.partition("@")
    return f"{scheme}://{userinfo}:{SECRET}@{hostpart}"


async def _seed(url: str) -> None:
    queue = ok_and_bad(url)

    async with queue:
        await queue.enqueue("ok-1", "ok", {"n": 1})
        await queue.enqueue("bad-1", "bad", {}, max_retries=0)
        await queue.enqueue("child-1", "ok", {}, trigger_after_ids=["bad-1"])
        await queue.enqueue("wait-1", "nobody", {})
        await queue.enqueue("later-1", "nobody", {}, execute_at=time.time() + 3600)
        await queue.join(timeout=10)


@pytest.fixture
def url() -> Iterator[str]:
    pgkit.require_pg()
    name = pgkit.fresh_queue()
    try:
        yield with_password(pgkit.queue_url(name))
    finally:
        pgkit.drop_queue(name)


@pytest.fixture
def store(url: str) -> str:
    asyncio.run(_seed(url))
    return url


@pytest.fixture
def cli() -> CliRunner:
    return CliRunner()


def _invoke(cli: CliRunner, command: Any, args: list[str], code: int = 0) -> str:
    result = cli.invoke(command, args)
    assert result.exit_code == code, result.output
    assert SECRET not in result.output
    return result.output


def _json(cli: CliRunner, command: Any, args: list[str]) -> Any:
    return json.loads(_invoke(cli, command, [*args, "--json"]))


def test_stats_on_a_url(cli: CliRunner, store: str) -> None:
    data = _json(cli, stats, [store])
    assert data["counts"] == {"pending": 1, "scheduled": 1, "blocked": 0, "active": 0,
                              "dead_lettered": 2}  # fmt: skip
    assert data["totals"]["completed"] == 1 and data["totals"]["enqueued"] == 5
    assert data["log"]["bytes"] > 0 and data["log"]["archives"] == 0
    assert "postgres@" in data["storage"]
    assert "nobody" in _invoke(cli, stats, [store])


def test_storage_from_the_environment(cli: CliRunner, store: str) -> None:
    result = cli.invoke(stats, ["--json"], env={"SNERD_STORAGE": store})
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["counts"]["pending"] == 1


def test_dlq_cancel_enqueue_on_a_url(cli: CliRunner, store: str) -> None:
    rows = _json(cli, dlq, ["list", store])
    assert {r["dlqKey"] for r in rows} == {"bad-1", "child-1"}
    assert "requeued bad-1" in _invoke(cli, dlq, ["requeue", "bad-1", "-s", store])
    assert "cancelled wait-1" in _invoke(cli, cancel, ["wait-1", "-s", store])
    made = _json(cli, enqueue, ["email", '{"to": "a@b.c"}', "--id", "e-1", "-s", store])
    assert made["task_id"] == "e-1"
    counts = _json(cli, stats, [store])["counts"]
    assert counts["pending"] == 2 and counts["dead_lettered"] == 1  # bad-1 back, e-1 new


def test_missing_queue_is_a_clear_error(cli: CliRunner, url: str) -> None:
    output = _invoke(cli, stats, [url], code=1)
    assert "no queue at" in output


def test_compact_and_replay_keep_the_whole_history(cli: CliRunner, store: str) -> None:
    before = _json(cli, stats, [store])
    result = _json(cli, compact, [store])
    assert result["compacted"] is True
    assert result["after"]["records"] < result["before"]["records"]
    after = _json(cli, stats, [store])
    assert after["counts"] == before["counts"] and after["totals"] == before["totals"]
    assert after["log"]["archives"] == 1
    assert "Nothing to compact" in _invoke(cli, compact, [store])
    history = _json(cli, replay, [store, "--task", "bad-1"])
    assert history["history"], history
    assert _json(cli, replay, [store, "--verify"])["problems"] == []


def test_the_plain_replay_summary_reads_a_url(cli: CliRunner, store: str) -> None:
    """The fast summary scans files; on a URL the full one reads the rows instead."""
    import re

    shown = _invoke(cli, replay, [store])
    full = _json(cli, replay, [store])
    assert sum(full["counts"].values()) > 0
    assert re.search(r"Replayed [1-9]\d* events", shown), shown
    for state, n in full["counts"].items():
        assert re.search(rf"{state.replace('_', ' ')}\s*│\s*{n}\b", shown), (state, shown)


def test_verify_checks_the_chain_through_archive_and_live_rows(cli: CliRunner, store: str) -> None:
    from urllib.parse import parse_qs, urlsplit

    import psycopg

    assert _json(cli, compact, [store])["compacted"] is True  # an archive, then the live log
    _invoke(cli, enqueue, ["email", '{"to": "a@b.c"}', "--id", "e-1", "-s", store])
    clean = _json(cli, replay, [store, "--verify"])
    assert clean["problems"] == []
    assert clean["chain"]["chained"] > 0 and clean["chain"]["breaks"] == [], clean["chain"]
    assert clean["chain"]["older_links"] == 0  # the CLI's append went on from chainFrom
    queue = parse_qs(urlsplit(store).query)["queue"][0]
    with psycopg.connect(pgkit.PG_URL, autocommit=True) as admin:
        pos, line = admin.execute(
            "SELECT pos, line FROM snerd.log WHERE queue = %s AND position('e-1' in"
            " convert_from(line, 'UTF8')) > 0 ORDER BY pos DESC LIMIT 1", (queue,)
        ).fetchone() or (None, b"")
        assert pos is not None
        edited = bytes(line).replace(b"a@b.c", b"x@b.c")  # an edit that keeps the JSON
        admin.execute("UPDATE snerd.log SET line = %s WHERE queue = %s AND pos = %s",
                      (edited, queue, pos))  # fmt: skip
    output = _invoke(cli, replay, [store, "--verify", "--json"], code=1)
    problems = json.loads(output)["problems"]
    assert any("checksum chain broken (altered)" in p["problem"] for p in problems), problems
