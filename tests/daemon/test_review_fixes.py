"""Regressions from the final spec review: each test names the spec line it holds."""

from __future__ import annotations

from daemonkit import Wire


async def test_progress_after_the_result_is_dropped_not_echoed(daemon: Wire) -> None:
    """protocol.md 3.3: progress for a task not running here gets no reply."""
    await daemon.ack("a")
    await daemon.expect("execute", task_id="a")
    await daemon.send({"action": "progress", "task_id": "a", "data": {"pct": 50}})
    echoed = await daemon.expect("progress", task_id="a")
    assert echoed["task_type"] == "t"
    await daemon.result("a")
    await daemon.barrier()
    await daemon.send({"action": "progress", "task_id": "a", "data": {"late": 1}})
    await daemon.quiet("progress", task_id="a")


async def test_a_duplicate_enqueue_names_the_task_id_field(daemon: Wire) -> None:
    """protocol.md 5: duplicate_task carries field task_id."""
    await daemon.ack("a", execute_at="2999-01-01T00:00:00Z")
    reply = await daemon.enqueue("a", execute_at="2999-01-01T00:00:00Z")
    assert reply["code"] == "duplicate_task" and reply["field"] == "task_id"


async def test_a_dag_cycle_is_refused_naming_trigger_after_ids(daemon: Wire) -> None:
    """q names r before r exists (absent = completed, so q runs); r naming q would
    make each wait on the other once r is live."""
    await daemon.ack("q", trigger_after_ids=["r"])
    await daemon.expect("execute", task_id="q")
    refused = await daemon.enqueue("r", trigger_after_ids=["q"])
    assert refused["code"] == "invalid_field" and refused["field"] == "trigger_after_ids"
    assert "cycle" in refused["message"]


async def test_get_of_a_dead_lettered_task_reports_its_attempts(daemon: Wire) -> None:
    """protocol.md 3.5: get carries attempt."""
    await daemon.ack("a", max_retries=1)
    for _ in range(2):
        await daemon.expect("execute", task_id="a")
        await daemon.result("a", ok=False, error="boom")
    await daemon.expect("max_retries_reached", task_id="a")
    view = await daemon.get("a")
    assert view["status"] == "dead_lettered" and view["attempt"] == 2
