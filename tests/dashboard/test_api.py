"""The JSON API on a seeded storage: every endpoint, good and bad input."""

from __future__ import annotations

import asyncio

from dashkit import COMPLETED, EXPECTED_COUNTS

SDK_TASK_KEYS = {
    "id", "type", "status", "progress", "retryCount", "maxRetries", "retryAfterTime",
    "cronExpression", "webhookUrl", "maxExecutionSeconds",
}  # fmt: skip


async def _json(resp, status=200):
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/json"
    return await resp.json()


# --- reading ------------------------------------------------------------------------------


async def test_stats_has_sdk_keys_counts_rate_groups_and_throughput(client):
    stats = await _json(await client.get("/api/stats"))
    # the SnerdMQ SDK dashboards read these three
    assert (stats["enqueued"], stats["processed"], stats["failed"]) == (11, 3, 2)
    assert stats["counts"] == EXPECTED_COUNTS
    assert stats["totals"]["failed_attempts"] == 2  # flaky's attempt and doomed's
    assert stats["historyComplete"] is True
    [smtp] = stats["rateGroups"]
    assert smtp["group"] == "smtp"
    assert (smtp["maxPerMinute"], smtp["used"], smtp["waiting"]) == (2, 2, 1)
    assert smtp["nextSlotAt"] is not None
    assert len(stats["throughput"]) == 15
    assert stats["throughput"][-1]["completed"] == 3
    assert "email" in stats["types"]


async def test_tasks_lists_sdk_compatible_rows(client):
    resp = await client.get("/api/tasks")
    rows = await _json(resp)
    assert resp.headers["X-Total-Count"] == str(len(rows)) == "11"
    for row in rows:
        assert row.keys() >= SDK_TASK_KEYS
    by_id = {row["id"]: row for row in rows}
    assert by_id["fetch-b"]["status"] == "active" and by_id["fetch-b"]["progress"] == 40
    assert by_id["flaky"]["status"] == "failed" and by_id["flaky"]["state"] == "scheduled"
    assert by_id["doomed"]["status"] == "dead_letter"
    assert by_id["pending-1"]["status"] == "queued"
    assert {t for t, r in by_id.items() if r["state"] == "completed"} == set(COMPLETED)


async def test_tasks_filters_by_state_type_and_id(client):
    pending = await _json(await client.get("/api/tasks", params={"state": "pending"}))
    assert {r["id"] for r in pending} == {"email-3", "pending-1"}
    emails = await _json(await client.get("/api/tasks", params={"type": "email"}))
    assert {r["id"] for r in emails} == {"email-1", "email-2", "email-3", "later", "pending-1"}
    found = await _json(await client.get("/api/tasks", params={"q": "FETCH"}))
    assert {r["id"] for r in found} == {"fetch-a", "fetch-b"}
    resp = await client.get("/api/tasks", params={"limit": "2", "offset": "1"})
    assert len(await _json(resp)) == 2 and resp.headers["X-Total-Count"] == "11"


async def test_tasks_refuses_bad_query(client):
    error = await _json(await client.get("/api/tasks?state=bogus"), 400)
    assert "state must be one of" in error["error"]
    error = await _json(await client.get("/api/tasks?limit=-3"), 400)
    assert "limit" in error["error"]


async def test_task_detail_with_parents_children_and_progress(client):
    agg = await _json(await client.get("/api/tasks/aggregate"))
    assert agg["state"] == "blocked"
    assert agg["parentStates"] == [
        {"id": "fetch-a", "state": "completed"},
        {"id": "fetch-b", "state": "active"},
    ]
    fetch_b = await _json(await client.get("/api/tasks/fetch-b"))
    assert fetch_b["progressData"] == {"pct": 40}
    assert fetch_b["claim"]["daemon"] == "worker-1"
    assert fetch_b["children"] == [{"id": "aggregate", "state": "blocked"}]
    doomed = await _json(await client.get("/api/tasks/doomed"))
    assert doomed["lastError"] == "import exploded"
    assert doomed["children"] == [{"id": "report", "state": "dead_lettered"}]


async def test_unknown_task_is_404_everywhere(client):
    for path in ("/api/tasks/nope", "/api/tasks/nope/history", "/api/dag/nope"):
        error = await _json(await client.get(path), 404)
        assert "nope" in error["error"]
    error = await _json(await client.get("/api/no-such-endpoint"), 404)
    assert error["status"] == 404


async def test_history_is_the_audit_trail(client):
    history = await _json(await client.get("/api/tasks/flaky/history"))
    events = [e["event"] for e in history["entries"]]
    assert events == ["enqueued", "claimed", "retry_scheduled"]
    failed = history["entries"][-1]
    assert failed["error"] == "card declined" and failed["daemon"] == "worker-1"
    assert failed["retryAfterTime"]
    agg = await _json(await client.get("/api/tasks/aggregate/history"))
    assert [(e["event"], e["state"]) for e in agg["entries"]] == [("enqueued", "blocked")]
    report = await _json(await client.get("/api/tasks/report/history"))
    assert [(e["event"], e["state"]) for e in report["entries"]] == [
        ("enqueued", "blocked"), ("dead_lettered", "dead_lettered"),
    ]  # fmt: skip
    assert report["entries"][-1]["reason"] == "blocked_by_failed_parent"
    # a completed task has left the projection but keeps its history
    done = await _json(await client.get("/api/tasks/fetch-a/history"))
    assert [e["event"] for e in done["entries"]] == ["enqueued", "claimed", "succeeded"]


async def test_a_completed_tasks_page_shows_its_result_and_attempts(client):
    task = await _json(await client.get("/api/tasks/fetch-a"))
    assert task["state"] == "completed" and task["result"] == {"rows": 3}
    [attempt] = task["attempts"]
    assert attempt["attempt"] == 1 and attempt["outcome"] == "succeeded"
    assert attempt["daemon"] == "worker-1" and attempt["startedAt"] and attempt["endedAt"]
    assert task["parents"] == [] and task["children"][0]["id"] == "aggregate"
    email = await _json(await client.get("/api/tasks/email-1"))
    assert email["state"] == "completed" and email["result"] is None  # none recorded


async def test_dag_shows_parents_children_and_fan_in(client):
    dag = await _json(await client.get("/api/dag/fetch-b"))
    nodes = {n["id"]: n for n in dag["nodes"]}
    assert nodes["fetch-b"]["level"] == 0 and nodes["aggregate"]["level"] == 1
    assert nodes["fetch-a"]["state"] == "completed"  # the other parent of the fan-in
    assert sorted(map(tuple, dag["edges"])) == [("fetch-a", "aggregate"), ("fetch-b", "aggregate")]
    doomed = await _json(await client.get("/api/dag/report"))
    assert {n["id"]: n["state"] for n in doomed["nodes"]} == {
        "doomed": "dead_lettered", "report": "dead_lettered",
    }  # fmt: skip


async def test_dlq_lists_dead_letters(client):
    rows = await _json(await client.get("/api/dlq"))
    by_key = {r["dlqKey"]: r for r in rows}
    assert set(by_key) == {"doomed", "report"}
    assert by_key["report"]["reason"] == "blocked_by_failed_parent"
    assert by_key["doomed"]["lastError"] == "import exploded"


# --- changing -------------------------------------------------------------------------------


async def _until(predicate, timeout=3.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


async def test_cancel_a_pending_task(client, engine):
    result = await _json(await client.post("/api/tasks/pending-1/cancel"))
    assert result == {"ok": True, "action": "cancel", "task_id": "pending-1"}
    assert "pending-1" not in engine.state.tasks
    row = await _json(await client.get("/api/tasks/pending-1"))
    assert row["state"] == "cancelled"


async def test_cancel_refusals(client):
    error = await _json(await client.post("/api/tasks/fetch-b/cancel"), 409)
    assert "running" in error["error"]
    await _json(await client.post("/api/tasks/ghost/cancel"), 404)
    error = await _json(await client.post("/api/tasks/later/cancel", data=b"{not json"), 400)
    assert "malformed JSON" in error["error"]
    await _json(await client.post("/api/tasks/later/cancel", data=b"[1, 2]"), 400)


async def test_requeue_and_delete_dead_letters(client, engine):
    await _json(await client.post("/api/dlq/doomed/requeue"))
    assert engine.state.tasks["doomed"].retry_count == 0
    assert "doomed" not in engine.state.dlq
    await _json(await client.post("/api/dlq/doomed/requeue"), 409)  # live again
    await _json(await client.post("/api/dlq/never-was/requeue"), 404)
    await _json(await client.delete("/api/dlq/report"))
    assert not engine.state.dlq
    error = await _json(await client.delete("/api/dlq/report"), 404)
    assert "report" in error["error"]


async def test_enqueue_through_the_api(client, engine):
    body = {"task_id": "new-1", "task_type": "email", "task_data": {"to": "a@b.c"}}
    created = await _json(await client.post("/api/tasks", json=body), 201)
    assert created == {"ok": True, "task_id": "new-1"}
    assert engine.state.tasks["new-1"].data == '{"to":"a@b.c"}'
    await _json(await client.post("/api/tasks", json=body), 409)  # a live id
    error = await _json(await client.post("/api/tasks", json={"task_id": "x"}), 400)
    assert "task_type" in error["error"]
    bad = {"task_id": "y", "task_type": "t", "max_retries": -1}
    error = await _json(await client.post("/api/tasks", json=bad), 400)
    assert "max_retries" in error["error"]
    await _json(await client.post("/api/tasks", data=b'{"task_id": '), 400)


async def test_enqueue_with_unknown_parents_says_which(client):
    body = {"task_id": "child-x", "task_type": "nobody",
            "trigger_after_ids": ["fetch-b", "no-such-parent"]}  # fmt: skip
    created = await _json(await client.post("/api/tasks", json=body), 201)
    assert created["unknown_parents"] == ["no-such-parent"]
    row = await _json(await client.get("/api/tasks/child-x"))
    assert row["unknownParents"] == ["no-such-parent"]
    rows = await _json(await client.get("/api/tasks", params={"q": "child-x"}))
    assert [r["unknownParents"] for r in rows] == [["no-such-parent"]]
    known = await _json(await client.get("/api/tasks/aggregate"))
    assert known["unknownParents"] == []
