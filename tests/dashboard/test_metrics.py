"""``GET /metrics`` and ``GET /healthz`` over HTTP, parsed with prometheus_client's parser."""

from __future__ import annotations

import asyncio
import shutil

from aiohttp.test_utils import TestClient, TestServer
from dashkit import EXPECTED_COUNTS, fake_peer, reader_engine
from prometheus_client.parser import text_string_to_metric_families

from snerd.dashboard.server import create_app
from snerd.dispatcher.engine import Engine, EngineConfig
from snerd.eventlog.filelog import FileLog
from snerd.eventlog.history import iter_history
from snerd.projections.commands import Enqueue


async def scrape(client):
    """{(sample name, frozen labels): value} of one scrape, and the raw response."""
    resp = await client.get("/metrics")
    assert resp.status == 200, await resp.text()
    text = await resp.text()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples, resp


def by_label(samples, name, label):
    return {dict(labels)[label]: value for (n, labels), value in samples.items()
            if n == name}  # fmt: skip


# --- the seeded storage (tests/dashboard/dashkit.py) ----------------------------------------


async def test_metrics_count_the_whole_history_by_type(client):
    samples, resp = await scrape(client)
    assert resp.content_type == "text/plain"
    assert by_label(samples, "snerd_tasks_enqueued_total", "type") == {
        "fetch": 2,
        "aggregate": 1,
        "charge": 1,
        "email": 5,
        "import": 1,
        "report": 1,
    }
    assert by_label(samples, "snerd_attempts_started_total", "type") == {
        "fetch": 2,
        "charge": 1,
        "import": 1,
        "email": 2,
    }
    assert by_label(samples, "snerd_tasks_succeeded_total", "type") == {"fetch": 1, "email": 2}
    assert by_label(samples, "snerd_attempts_failed_total", "type") == {"charge": 1, "import": 1}
    assert by_label(samples, "snerd_tasks_dead_lettered_total", "type") == {
        "import": 1,
        "report": 1,
    }  # report failed through: no attempt of its own
    assert by_label(samples, "snerd_tasks_deduplicated_total", "type") == {}
    assert by_label(samples, "snerd_tasks", "state") == EXPECTED_COUNTS


async def test_metrics_show_rate_windows_histograms_log_and_daemons(client):
    samples, _ = await scrape(client)
    assert samples[("snerd_rate_limit_window_used", frozenset({("group", "smtp")}))] == 2
    assert samples[("snerd_rate_limit_max_per_minute", frozenset({("group", "smtp")}))] == 2
    assert samples[("snerd_rate_limit_waiting", frozenset({("group", "smtp")}))] == 1
    # every started attempt waited; every finished attempt was timed (claim -> outcome)
    latency = by_label(samples, "snerd_task_latency_seconds_count", "type")
    assert latency == {"fetch": 2, "charge": 1, "import": 1, "email": 2}
    run = by_label(samples, "snerd_task_run_seconds_count", "type")
    assert run == {"fetch": 1, "charge": 1, "import": 1, "email": 2}
    inf = frozenset({("type", "email"), ("le", "+Inf")})
    assert samples[("snerd_task_run_seconds_bucket", inf)] == 2
    assert samples[("snerd_log_records", frozenset())] > 20
    assert samples[("snerd_log_bytes", frozenset())] > 1000
    assert ("snerd_log_group_commits_total", frozenset()) in samples
    assert ("snerd_log_fsync_seconds_total", frozenset()) in samples
    assert samples[("snerd_daemons_live", frozenset())] == 0  # the reader holds no lock


async def test_metrics_follow_the_same_auth_rules(make_client):
    client = await make_client(token="s3cret")
    assert (await client.get("/metrics")).status == 401
    assert (await client.get("/healthz")).status == 401
    resp = await client.get("/metrics", headers={"Authorization": "Bearer s3cret"})
    assert resp.status == 200
    foreign = await client.get("/metrics", headers={"Host": "evil.example"})
    assert foreign.status == 401


async def test_healthz_says_the_log_is_open_and_caught_up(client):
    resp = await client.get("/healthz")
    assert resp.status == 200
    body = await resp.json()
    assert body["status"] == "ok" and body["log"] == "open" and body["caughtUp"] is True
    assert body["seq"] == body["logSeq"] > 0


# --- dedupe, compaction, restart ------------------------------------------------------------


async def _client(engine):
    app = create_app(engine)
    app.middlewares.insert(0, fake_peer)
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    return client


def _totals(samples):
    return {
        (n, dict(labels).get("type")): v for (n, labels), v in samples.items()
        if n.endswith("_total") and n.startswith(("snerd_tasks_", "snerd_attempts_"))
    }  # fmt: skip


async def test_a_dedupe_counts_and_compaction_or_a_restart_never_resets(tmp_path):
    storage = tmp_path / "store"
    engine = reader_engine(storage)
    await engine.start()
    try:
        data = '{"to": "a@example.com"}'
        assert await engine.enqueue(Enqueue("m1", "mail", task_data=data, auto_dedupe=True)) is None
        verdict = await engine.enqueue(Enqueue("m2", "mail", task_data=data, auto_dedupe=True))
        assert verdict is not None and verdict.duplicate_of == "m1"
        await engine.cancel("m1")
        client = await _client(engine)
        try:
            before, _ = await scrape(client)
            assert by_label(before, "snerd_tasks_deduplicated_total", "type") == {"mail": 1}
            assert by_label(before, "snerd_tasks_enqueued_total", "type") == {"mail": 1}
            assert by_label(before, "snerd_tasks_cancelled_total", "type") == {"mail": 1}
            assert await engine.compact()
            after, _ = await scrape(client)
        finally:
            await client.close()
    finally:
        await engine.drain(0)
    assert _totals(after) == _totals(before)
    assert any(r.get("event") == "deduplicated" and r.get("task") == "m2"
               for r in iter_history(storage))  # fmt: skip
    shutil.rmtree(storage / "tasks" / "archive")  # retention pruned the old history
    restarted = reader_engine(storage)
    await restarted.start()
    try:
        client = await _client(restarted)
        try:
            again, _ = await scrape(client)
        finally:
            await client.close()
    finally:
        await restarted.drain(0)
    assert _totals(again) == _totals(before)


async def test_healthz_is_unavailable_while_the_log_has_unread_records(tmp_path):
    storage = tmp_path / "store"
    config = EngineConfig(daemon_id="not-following", compact_min_bytes=1 << 62)
    engine = Engine(FileLog(storage, fsync=False, follow=False), executors=[], config=config)
    await engine.start()
    other = reader_engine(storage)  # another process's writer, as far as the log goes
    await other.start()
    try:
        client = await _client(engine)
        try:
            assert (await client.get("/healthz")).status == 200
            await other.enqueue(Enqueue("elsewhere", "mail"))
            resp = await client.get("/healthz")
            body = await resp.json()
            assert resp.status == 503, body
            assert body["caughtUp"] is False and body["unreadBytes"] > 0
        finally:
            await client.close()
    finally:
        await other.drain(0)
        await engine.drain(0)


async def test_a_follower_keeps_its_totals_when_another_process_compacts(tmp_path):
    storage = tmp_path / "store"
    writer, follower = reader_engine(storage), reader_engine(storage)
    await writer.start()
    await follower.start()
    try:
        for n in range(3):
            await writer.enqueue(Enqueue(f"t{n}", "mail"))
        await writer.cancel("t0")
        client = await _client(follower)
        try:
            for _ in range(200):  # the follower reads the writer's appends (it polls)
                before, _ = await scrape(client)
                if before.get(("snerd_tasks_cancelled_total", frozenset({("type", "mail")}))):
                    break
                await asyncio.sleep(0.01)
            assert await writer.compact()
            await writer.enqueue(Enqueue("t9", "mail"))
            for _ in range(200):  # the follower switches to the compacted file, from its start
                after, _ = await scrape(client)
                enqueued = after.get(("snerd_tasks_enqueued_total", frozenset({("type", "mail")})))
                if enqueued == 4:
                    break
                await asyncio.sleep(0.01)
        finally:
            await client.close()
    finally:
        await follower.drain(0)
        await writer.drain(0)
    assert by_label(before, "snerd_tasks_enqueued_total", "type") == {"mail": 3}
    assert by_label(after, "snerd_tasks_enqueued_total", "type") == {"mail": 4}
    assert by_label(after, "snerd_tasks_cancelled_total", "type") == {"mail": 1}
