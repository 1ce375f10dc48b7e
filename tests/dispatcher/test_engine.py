"""The engine on an in-memory log with a manual clock: Given/When/Then, no sleeps."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from enginekit import Harness, settle

from snerd.dispatcher import engine as engine_module
from snerd.dispatcher.engine import Engine
from snerd.dispatcher.executors import Job
from snerd.projections import events as ev
from snerd.rpc.protocol import Enqueue


def _enqueue(task_id: str, **fields: object) -> Enqueue:
    return Enqueue(task_id, "t", task_data="{}", **fields)  # type: ignore[arg-type]


async def _noop(job: Job) -> None:
    return None


async def _running_forever(
    harness: Harness, task: Enqueue | None = None, **config: Any
) -> tuple[Engine, asyncio.Event]:
    """A new engine whose handler of ``t`` runs until the event returned is set, and
    runs ``task`` (default: ``job``) now."""
    never = asyncio.Event()

    async def stuck(job: Job) -> None:
        await never.wait()

    engine = await harness.engine({"t": stuck}, **config)
    await engine.enqueue(task or _enqueue("job"))
    await settle(engine, lambda: bool(engine.runs))
    return engine, never


async def test_two_engines_run_every_task_exactly_once(harness: Harness) -> None:
    a = await harness.engine({"t": _noop})
    b = await harness.engine({"t": _noop})
    await asyncio.gather(*(a.enqueue(_enqueue(f"x{i}")) for i in range(100)))
    await settle(b, lambda: not b.state.tasks and not a.state.tasks)
    assert sorted(c[1] for c in harness.calls) == sorted(f"x{i}" for i in range(100))
    assert {c[2] for c in harness.calls} == {1}


async def test_pool_capacity_bounds_concurrency(harness: Harness) -> None:
    gate = asyncio.Event()

    async def slow(job: Job) -> None:
        await gate.wait()

    engine = await harness.engine({"t": slow}, pools={"slow": 1})
    for i in range(3):
        await engine.enqueue(_enqueue(f"s{i}", pool="slow"))
    await engine.enqueue(_enqueue("fast"))
    await settle(engine, lambda: len(harness.calls) == 2)
    assert sorted(c[1] for c in harness.calls) == ["fast", "s0"]
    assert sorted(engine.runs) == ["fast", "s0"]  # s1, s2 wait for the pool
    gate.set()
    await settle(engine, lambda: not engine.state.tasks)
    assert sorted(c[1] for c in harness.calls) == ["fast", "s0", "s1", "s2"]


async def test_a_burst_into_a_capped_pool_runs_one_at_a_time(harness: Harness) -> None:
    """Enqueues submitted in one turn are claimed in one batch: a claim decided there
    counts the pool slots that the claims before it took, though their attempts have not
    begun yet (two attempts of a pool capped at 1 ran at once: found by the interleaving
    test)."""
    gate = asyncio.Event()

    async def slow(job: Job) -> None:
        await gate.wait()

    engine = await harness.engine({"t": slow}, pools={"slow": 1})
    await settle(engine, lambda: True)
    await asyncio.gather(*(engine.enqueue(_enqueue(f"s{i}", pool="slow")) for i in range(3)),
                         engine.enqueue(_enqueue("fast")))  # fmt: skip
    await settle(engine, lambda: len(harness.calls) == 2)
    assert sorted(engine.runs) == ["fast", "s0"]  # s1, s2 wait for the pool
    gate.set()
    await settle(engine, lambda: not engine.state.tasks)
    assert sorted(c[1] for c in harness.calls) == ["fast", "s0", "s1", "s2"]


async def test_a_log_not_appended_to_since_its_compaction_is_not_compacted_again(
    harness: Harness,
) -> None:
    """A compaction of a log that nothing was appended to since its last one would only
    add another archive: the engine that compacted knows where its snapshot is, and
    compacts again once something was appended."""
    engine = await harness.engine({"t": _noop})
    await engine.enqueue(_enqueue("a"))
    await settle(engine, lambda: not engine.state.tasks)
    assert await engine.compact() is True
    assert await engine.compact() is False  # nothing appended since
    await engine.enqueue(_enqueue("b"))
    await settle(engine, lambda: not engine.state.tasks)
    assert await engine.compact() is True
    assert len(harness.store.archives) == 2


async def test_rate_limited_task_wakes_exactly_when_a_slot_frees(harness: Harness) -> None:
    engine = await harness.engine({"t": _noop})
    for i in range(3):
        await engine.enqueue(_enqueue(f"r{i}", rate_limit_group="api", max_per_minute=2))
    await settle(engine, lambda: len(harness.calls) == 2)
    harness.clock.advance(59.9)
    await settle(engine, lambda: not engine.runs)
    assert len(harness.calls) == 2  # the window still holds two dispatches
    harness.clock.advance(0.1)
    await settle(engine, lambda: len(harness.calls) == 3)
    assert [c[1] for c in harness.calls] == ["r0", "r1", "r2"]


async def test_claims_of_a_dead_daemon_are_released_and_run_elsewhere(harness: Harness) -> None:
    a, _ = await _running_forever(harness)
    b = await harness.engine({"t": _noop})
    harness.liveness.release("d0")  # d0 "dies"
    harness.clock.advance(1.0)  # b's housekeeping runs
    await settle(b, lambda: "job" not in b.state.tasks)
    assert [(c[0], c[2]) for c in harness.calls] == [("d0", 1), ("d1", 2)]
    refusal = await a.finish("job", success=True)
    assert refusal is not None and refusal.code in ("not_active", "unknown_task")


async def test_progress_after_the_claim_was_released_elsewhere_is_refused(
    harness: Harness,
) -> None:
    """Progress is decided under the lock, against the caught-up state: a daemon that has
    not heard yet that another released its claim (it took it for dead) is refused,
    and writes no progress for a task no longer running there (``replay --verify``
    flags such a line; the interleaving test found it)."""
    from snerd.projections.commands import Release

    a, _ = await _running_forever(harness)
    b = await harness.engine({})
    a.log._follower.cancel()  # type: ignore[attr-defined]  # a hears nothing until it writes
    await b.run_command(Release((("job", 1),), "owner_died"))
    refusal = await a.progress_soon("job", {"pct": 50})
    assert refusal is not None and refusal.code == "not_active"
    assert not any(b'"progress"' in line for line in harness.store.lines)


async def test_housekeeping_the_storage_refuses_is_a_warning_and_is_retried(
    harness: Harness, monkeypatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A storage fault in a housekeeping round (releasing a dead daemon's claims) is the
    log's to recover from: a warning, no traceback at ERROR each round, and the next
    round releases them."""
    import logging

    from faultkit import refuse_one_batch

    await _running_forever(harness)
    b = await harness.engine({"t": _noop})
    log: Any = b.log
    clock = [0.0]
    log.monotonic = lambda: clock[0]
    flag = refuse_one_batch(monkeypatch, type(log), armed=False)
    harness.liveness.release("d0")  # d0 "dies"
    flag[0] = True  # b's next batch (its housekeeping's release) finds the storage gone
    with caplog.at_level(logging.WARNING, logger="snerd.housekeeping"):
        harness.clock.advance(1.0)
        await settle(b, lambda: not flag[0] and b.housekeeping_rounds > 0)
        await settle(b, lambda: any("housekeeping paused" in r.message for r in caplog.records))
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    clock[0] += 60.0  # past the backoff
    harness.clock.advance(1.0)
    await settle(b, lambda: "job" not in b.state.tasks)  # released, then run and ended here
    assert [(c[0], c[2]) for c in harness.calls] == [("d0", 1), ("d1", 2)]


async def test_a_daemon_taken_for_dead_claims_nothing_until_its_lock_is_its_own_again(
    harness: Harness,
) -> None:
    a, never = await _running_forever(harness)
    b = await harness.engine({})  # runs nothing, only its housekeeping
    assert harness.liveness is not None
    harness.liveness.reachable.clear()  # d0's lock is lost and cannot be taken back yet
    harness.liveness.alive.discard("d0")
    harness.clock.advance(1.0)  # b's housekeeping releases d0's claim as a dead owner's
    await settle(a, lambda: a.liveness_in_doubt)
    await b.enqueue(_enqueue("next"))
    await settle(a, lambda: "next" in a.state.tasks)
    assert a.dispatcher.capacity() == 0
    calls_when_confirmed = len(harness.calls)
    harness.liveness.reachable.set()
    await settle(a, lambda: len(harness.calls) == 3)
    assert calls_when_confirmed == 1  # only attempt 1 ran before the lock was d0's again
    assert sorted(harness.calls) == [("d0", "job", 1), ("d0", "job", 2), ("d0", "next", 1)]
    assert harness.liveness.confirmed == ["d0"] and not a.liveness_in_doubt
    never.set()


async def test_without_liveness_an_expired_lease_is_released(harness: Harness) -> None:
    harness.liveness = None  # e.g. a volume whose locks cannot tell who is alive
    await _running_forever(harness, lease_seconds=10.0)
    b = await harness.engine({"t": _noop})
    harness.clock.advance(5.0)
    assert "job" in b.state.tasks and b.state.tasks["job"].claim is not None
    harness.clock.advance(6.0)
    await settle(b, lambda: "job" not in b.state.tasks)
    assert harness.calls[-1][0] == "d1"


async def test_a_live_owner_keeps_its_claim_past_its_lease(harness: Harness) -> None:
    await _running_forever(harness, lease_seconds=10.0)
    b = await harness.engine({"t": _noop})
    rounds = b.housekeeping_rounds
    harness.clock.advance(30.0)
    await settle(b, lambda: b.housekeeping_rounds > rounds)
    assert b.state.tasks["job"].claim is not None
    assert [c[0] for c in harness.calls] == ["d0"]


async def test_timeout_fails_the_attempt_and_refuses_the_late_result(harness: Harness) -> None:
    slow = _enqueue("slow", max_execution_seconds=5.0, max_retries=0)
    engine, _ = await _running_forever(harness, slow)
    harness.clock.advance(5.5)
    assert "slow" in engine.runs  # within the grace
    harness.clock.advance(1.0)
    await settle(engine, lambda: "slow" in engine.state.dlq)
    assert "timed out" in (engine.state.dlq["slow"].error or "")
    refusal = await engine.finish("slow", success=True)
    assert refusal is not None


async def test_child_enqueued_after_its_parent_died_fails_through(harness: Harness) -> None:
    async def boom(job: Job) -> None:
        raise RuntimeError("boom")

    engine = await harness.engine({"t": boom})
    dead: list[str] = []
    engine.notifier.add(_DeadRecorder(dead))
    await engine.enqueue(_enqueue("parent", max_retries=0))
    await settle(engine, lambda: "parent" in engine.state.dlq)
    await engine.enqueue(_enqueue("child", trigger_after_ids=("parent",)))
    await settle(engine, lambda: "child" in engine.state.dlq)
    assert engine.state.dlq["child"].reason == ev.REASON_FAILED_PARENT
    assert dead == ["parent", "child"]
    assert [c[1] for c in harness.calls] == ["parent"]


async def test_compaction_by_threshold_keeps_state_for_every_process(harness: Harness) -> None:
    a = await harness.engine({"t": _noop}, compact_min_bytes=0, compact_dead_ratio=0.5)
    b = await harness.engine()
    for i in range(20):
        await a.enqueue(_enqueue(f"c{i}"))
    await a.enqueue(_enqueue("later", execute_at=harness.clock.now() + 3600))
    await settle(a, lambda: len(a.state.tasks) == 1)
    harness.clock.advance(1.0)  # housekeeping notices the dead lines
    await settle(b, lambda: harness.store.generation > 0 and b.log.stats().records < 10)
    assert set(b.state.tasks) == set(a.state.tasks) == {"later"}
    harness.clock.advance(3600)
    await settle(a, lambda: not a.state.tasks)
    assert Counter(c[1] for c in harness.calls)["later"] == 1


class _DeadRecorder:
    def __init__(self, out: list[str]) -> None:
        self.out = out

    def on_progress(self, task_id: str, task_type: str | None, data: object, local: bool) -> None:
        return None

    def on_dead_letter(self, record: dict[str, object]) -> None:
        self.out.append(str(record[ev.F_TASK_ID]))

    async def close(self) -> None:
        return None


def _compiled(module: Any) -> bool:
    return not (module.__file__ or "").endswith(".py")


COMPILED = _compiled(engine_module)
"""Whether the engine (and its dispatcher) run compiled (setup.py's ``GLUE``)."""


def _count_plans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now on, the claims of every plan the dispatcher makes, in order (through
    the module's ``plan``, which the compiled dispatcher calls directly: in the compiled
    pass the test skips here, saying why)."""
    from snerd.dispatcher import dispatch

    if COMPILED:
        pytest.skip("counts plans through dispatch.plan, which the compiled dispatcher "
                    "calls directly: runs in the README's (interpreted) suite")
    plans: list[int] = []
    real = dispatch.plan

    def counting(*args: object, **kwargs: object) -> dispatch.Plan:
        plan = real(*args, **kwargs)  # type: ignore[arg-type]
        plans.append(len(plan.claims))
        return plan

    monkeypatch.setattr(dispatch, "plan", counting)
    return plans


async def _passes_run() -> None:
    """Let any dispatcher pass that was asked for run."""
    for _ in range(5):
        await asyncio.sleep(0)


async def _one_at_a_time(engine: Engine, harness: Harness, n: int) -> None:
    """Enqueue ``n`` tasks, each once the one before has run and ended."""
    for i in range(n):
        await engine.enqueue(_enqueue(f"i{i}"))
        await settle(engine, lambda i=i: len(harness.calls) == i + 1 and not engine.runs)
    await _passes_run()


interpreted_only = pytest.mark.skipif(
    COMPILED,
    reason="replaces Engine's methods, which the compiled engine's native class refuses: "
    "runs in the README's (interpreted) suite, not in the compiled pass",
)
"""For a test that can tell what it checks only from inside the engine's methods."""


def _record_folds(engine: Engine) -> list[list[str]]:
    """The events of each fold the engine makes from now on, one list a fold (heard as
    its observers hear them: a compiled engine's methods cannot be replaced)."""
    folds: list[list[str]] = []
    engine.observers.append(lambda events, _: folds.append([ev.event_name(e) for e in events]))
    return folds


def _gated() -> tuple[asyncio.Event, Callable[[Job], Awaitable[None]]]:
    """A handler that returns once the event is set."""
    gate = asyncio.Event()

    async def gated(job: Job) -> None:
        await gate.wait()

    return gate, gated


async def test_an_idle_queue_claims_each_task_without_a_plan(
    harness: Harness, monkeypatch
) -> None:
    """A task enqueued while a worker is free, with nothing else ready, is claimed in
    the enqueue's own request, told without a plan (``decide.claim_enqueued``); neither
    that fold nor the task's end wakes the dispatcher for a pass that could find nothing
    (issue 8: no work beyond the need)."""
    engine = await harness.engine({"t": _noop})
    await settle(engine, lambda: True)
    plans = _count_plans(monkeypatch)
    await _one_at_a_time(engine, harness, 20)
    assert len(harness.calls) == 20
    assert plans == []  # no plan, no pass: each enqueue claimed its own task


async def test_a_producer_awaiting_each_enqueue_costs_one_batch_per_task(
    harness: Harness,
) -> None:
    """An in-process producer awaiting each enqueue, with a handler that returns at
    once: the attempt starts before the producer resumes, so its outcome is queued
    before the next enqueue and joins that enqueue's batch (one lock hold, one write,
    one fsync a task), instead of a batch of its own right behind it."""
    engine = await harness.engine({"t": _noop})
    await settle(engine, lambda: True)
    commits = engine.log.commits  # type: ignore[attr-defined]
    for i in range(20):
        await engine.enqueue(_enqueue(f"p{i}"))
    await settle(engine, lambda: len(harness.calls) == 20 and not engine.state.tasks)
    # 20 batches (each an enqueue, its claim and the outcome before it), and the last
    # outcome's own (before the change: 40, an enqueue's and an outcome's a task)
    assert engine.log.commits - commits == 21  # type: ignore[attr-defined]
    assert [task_id for _, task_id, _ in harness.calls] == [f"p{i}" for i in range(20)]


async def test_an_enqueue_answered_early_is_acked_before_its_attempt_starts(
    harness: Harness,
) -> None:
    """enqueue_soon's ``acked`` (the daemon's ack): called once, the moment the enqueue is
    durable, before the engine has even folded it (the fold is not on the ack's way),
    so before its attempt starts (the ``execute``); its claim, told without the fold
    (``decide.claim_enqueued``), went to the log in the enqueue's own batch; the
    future's ``reply`` is then not called; the task still runs here."""
    engine = await harness.engine({"t": _noop})
    await settle(engine, lambda: True)
    heard: list[tuple[str, Any, str, bool]] = []
    commits = engine.log.commits  # type: ignore[attr-defined]
    folds = _record_folds(engine)

    def acked(outcome: Any) -> None:
        task = engine.state.tasks.get("early")
        heard.append(("acked", outcome, task.phase if task else "-", not harness.calls))

    def reply(future: asyncio.Future[Any]) -> None:
        heard.append(("reply", future.result(), "", False))

    done = engine.enqueue_soon(_enqueue("early"), reply, acked)
    await done
    await settle(engine, lambda: len(harness.calls) == 1 and not engine.runs)
    assert heard == [("acked", None, "-", True)]  # acked, then folded, run
    assert [task_id for _, task_id, _ in harness.calls] == ["early"]
    assert folds[0] == [ev.ENQUEUED, ev.CLAIMED]  # one request, one fold
    # the enqueue's sync (its claim with it), and the outcome's own batch
    assert engine.log.commits - commits == 2  # type: ignore[attr-defined]


async def test_a_result_read_after_the_next_enqueue_joins_its_request(harness: Harness) -> None:
    """An SDK awaiting each ack sends its next enqueue before the ``result`` of the task
    before (the ack comes first, the ``execute`` after): the daemon reads the two
    together. The success joins the enqueue's request, after it, and the claim is still
    told without a plan: one request, one write and one fold for the three records."""
    gate, gated = _gated()  # the attempt's own handler says nothing: the test does
    engine = await harness.engine({"t": gated})
    await engine.enqueue_soon(_enqueue("first"), None, lambda _: None)
    await settle(engine, lambda: "first" in engine.runs)
    commits = engine.log.commits  # type: ignore[attr-defined]
    folds = _record_folds(engine)
    engine.log.hold()  # as the daemon handles a read's lines: both, then the writer
    acked = engine.enqueue_soon(_enqueue("second"), None, lambda _: None)
    finished = engine.finish_soon("first", success=True, attempt=1)
    engine.log.kick()
    await acked
    assert await finished is None
    await settle(engine, lambda: "second" in engine.runs)
    assert folds[0] == [ev.ENQUEUED, ev.SUCCEEDED, ev.CLAIMED]
    assert engine.log.commits - commits == 1  # type: ignore[attr-defined]
    gate.set()


async def test_a_parent_s_success_read_after_the_next_enqueue_leaves_the_claim_to_a_plan(
    harness: Harness,
) -> None:
    """A success read with the next enqueue joins its request, after it; when a child
    waits on that task, the success makes the child ready, and a plan might pick it
    first: the claim is not told with the enqueue; a plan after the fold decides, and
    all run, the child after its parent."""
    gate, gated = _gated()
    engine = await harness.engine({"t": gated}, max_workers=2)
    await engine.enqueue_soon(_enqueue("parent"), None, lambda _: None)
    await settle(engine, lambda: "parent" in engine.runs)
    await engine.enqueue(_enqueue("child", trigger_after_ids=("parent",), urgency_score=5.0))
    folds = _record_folds(engine)
    engine.log.hold()
    acked = engine.enqueue_soon(_enqueue("second"), None, lambda _: None)
    finished = engine.finish_soon("parent", success=True, attempt=1)
    engine.log.kick()
    await acked
    assert await finished is None
    assert folds[0] == [ev.ENQUEUED, ev.SUCCEEDED]
    gate.set()
    await settle(engine, lambda: not engine.state.tasks)
    ran = [task_id for _, task_id, _ in harness.calls]
    assert sorted(ran) == ["child", "parent", "second"] and ran[0] == "parent"


async def test_an_enqueue_answered_early_claims_its_task_without_a_plan(
    harness: Harness, monkeypatch
) -> None:
    """The daemon's enqueue (answered early) of a task that is the one thing a plan
    could pick, one after another: its claim is told in the enqueue's request without a
    plan (``decide.claim_enqueued``), also beside a task that waits for a worker
    elsewhere (a type with no executor here: every plan here passes it over); with a
    task waiting that a plan here could pick, a plan decides, as before."""
    engine = await harness.engine({"t": _noop})
    await settle(engine, lambda: True)
    plans = _count_plans(monkeypatch)
    for i in range(5):
        await engine.enqueue_soon(_enqueue(f"d{i}"), None, lambda _: None)
        await settle(engine, lambda i=i: len(harness.calls) == i + 1 and not engine.runs)
    assert plans == []
    await engine.enqueue(Enqueue("elsewhere", "other", task_data="{}"))  # waits: not run here
    await engine.enqueue_soon(_enqueue("after"), None, lambda _: None)
    await settle(engine, lambda: len(harness.calls) == 6 and not engine.runs)
    assert plans == []
    limited = {"rate_limit_group": "g", "max_per_minute": 1}
    await engine.enqueue(_enqueue("first", **limited))  # runs, and fills the window
    await engine.enqueue(_enqueue("second", **limited))  # waits for the window, here
    await settle(engine, lambda: len(harness.calls) == 7 and not engine.runs)
    plans.clear()
    await engine.enqueue_soon(_enqueue("last"), None, lambda _: None)
    await settle(engine, lambda: len(harness.calls) == 8 and not engine.runs)
    assert plans[:1] == [1]  # a task here waits in another lane: only a plan can tell
    assert "second" in engine.state.tasks and "elsewhere" in engine.state.tasks


async def test_an_outcome_is_answered_by_the_log_s_writer(harness: Harness) -> None:
    """finish_soon's ``then`` (the daemon's reply to a result line) hears the outcome
    from the log's writer, with no loop turn of its own (a memory log's batch waits on
    nothing: within the kick); a refused outcome's, as its future's done-callback."""
    gate = asyncio.Event()

    async def hold(_: Any) -> None:
        await gate.wait()

    engine = await harness.engine({"t": hold})
    await engine.enqueue(_enqueue("x"))
    await settle(engine, lambda: "x" in engine.runs)
    heard: list[Any] = []
    engine.finish_soon("x", success=True, attempt=1, then=lambda f: heard.append(f.result()))
    engine.log.kick()
    assert heard == [None]
    engine.finish_soon("x", success=True, attempt=1, then=lambda f: heard.append(f.result()))
    await asyncio.sleep(0)
    assert heard[1:] and heard[1].code == "unknown_task"
    gate.set()  # the handler's own outcome comes too late: refused, nothing written
    await settle(engine, lambda: not engine.state.tasks)


async def test_an_early_answer_that_raises_leaves_it_to_the_reply(harness: Harness) -> None:
    """If ``acked`` raises (a bug), the enqueue is still answered, by its ``reply``."""
    engine = await harness.engine({"t": _noop})
    await settle(engine, lambda: True)
    heard: list[str] = []

    def acked(_: object) -> None:
        raise RuntimeError("the ack's bug")

    await engine.enqueue_soon(_enqueue("e"), lambda f: heard.append(f"reply {f.result()}"), acked)
    await settle(engine, lambda: len(harness.calls) == 1 and not engine.runs)
    assert heard == ["reply None"]


async def test_an_enqueue_that_fails_is_answered_by_its_reply(harness: Harness) -> None:
    """An enqueue the log refuses is never durable: ``acked`` is not called, ``reply``
    hears the error."""
    engine = await harness.engine({"t": _noop})
    await settle(engine, lambda: True)
    heard: list[str] = []

    def refuse() -> None:
        raise RuntimeError("no room")

    real = engine.log.submit  # every command submitted raises inside its batch

    def failing(command: Any, **kwargs: Any) -> Any:
        return real(lambda: refuse(), **kwargs)  # type: ignore[arg-type, return-value]

    engine.log.submit = failing  # type: ignore[method-assign]
    try:
        future = engine.enqueue_soon(_enqueue("refused"), lambda f: heard.append(
            f"reply {type(f.exception()).__name__}"), lambda _: heard.append("acked"))
        with pytest.raises(RuntimeError, match="no room"):
            await future
    finally:
        engine.log.submit = real  # type: ignore[method-assign]
    await asyncio.sleep(0)
    assert heard == ["reply RuntimeError"]


async def test_an_enqueue_claimed_in_its_own_batch_wakes_no_dispatcher(
    harness: Harness,
) -> None:
    """The fold of an enqueue with a claim queued behind it does not wake the dispatch
    loop (the claim's plan, made under the lock against that very fold, takes the task):
    a producer awaiting each enqueue costs the dispatcher nothing. A child enqueued after
    its parent was dead-lettered still wakes it: only a pass fails it through."""
    engine = await harness.engine({"t": _noop})
    await settle(engine, lambda: True)
    await _passes_run()
    wake = engine.dispatcher._wake
    wake.clear()  # (a wake-up is counted when a set finds it clear)
    before = wake.raised
    await _one_at_a_time(engine, harness, 20)
    assert len(harness.calls) == 20 and wake.raised == before


async def test_a_task_delayed_while_every_slot_is_taken_runs_when_due(
    harness: Harness,
) -> None:
    """A task enqueued for later while every slot is taken runs at its time, with no
    other event to wake the dispatcher: the pass its enqueue asked for found no slot and
    armed no timer, so the slot freeing arms it (it used to wait for the next event)."""
    gate, gated = _gated()
    engine = await harness.engine({"t": gated}, max_workers=1)
    await settle(engine, lambda: True)
    await engine.enqueue(_enqueue("busy"))
    await settle(engine, lambda: len(engine.runs) == 1)
    await engine.enqueue(_enqueue("later", execute_at=harness.clock.now() + 10))
    await _passes_run()
    gate.set()
    await settle(engine, lambda: len(harness.calls) == 1 and not engine.runs)
    await _passes_run()
    harness.clock.advance(9)
    await _passes_run()
    assert len(harness.calls) == 1  # not before its time
    harness.clock.advance(2)
    await settle(engine, lambda: len(harness.calls) == 2)
    assert harness.calls[-1][1] == "later"


async def test_a_backlog_drains_with_each_next_claim_in_the_outcomes_batch(
    harness: Harness, monkeypatch
) -> None:
    """With a backlog, the claim of the task that takes a freed slot is decided right
    behind the outcome that freed it, in the same batch (one lock hold, one write):
    one plan per task, no dispatcher pass (which would plan once more outside the
    lock, then claim in a batch of its own)."""
    gate, gated = _gated()
    engine = await harness.engine({"t": gated}, max_workers=1)
    for i in range(6):
        await engine.enqueue(_enqueue(f"b{i}"))
    await settle(engine, lambda: len(engine.runs) == 1 and len(engine.state.tasks) == 6)
    plans = _count_plans(monkeypatch)
    gate.set()
    await settle(engine, lambda: len(harness.calls) == 6 and not engine.state.tasks)
    await _passes_run()
    assert plans == [1] * 5  # the last outcome leaves nothing to claim: no plan


@interpreted_only
async def test_outcomes_in_one_turn_queue_one_claim_for_all_the_slots_they_free(
    harness: Harness, monkeypatch
) -> None:
    """Attempts that end in the same loop turn free their slots before any claim behind
    them is decided: the first outcome queues a claim, which counts every slot free when
    it is decided and takes them all; the others queue none (each would be a request
    under the lock, planning nothing). The backlog still runs, each task once."""
    gate, gated = _gated()
    engine = await harness.engine({"t": gated}, max_workers=4)
    await settle(engine, lambda: True)
    await asyncio.gather(*(engine.enqueue(_enqueue(f"w{i}")) for i in range(12)))
    await settle(engine, lambda: len(engine.runs) == 4)
    behind: list[int] = []
    real = Engine._claim_behind

    def counting(self: Engine, then: Any) -> Any:
        behind.append(len(self.runs))
        return real(self, then)

    monkeypatch.setattr(Engine, "_claim_behind", counting)
    gate.set()  # the 4 running end in one turn, then the next 4, then the last 4
    await settle(engine, lambda: len(harness.calls) == 12 and not engine.state.tasks)
    assert behind == [3, 3]  # one claim per round of outcomes (the last round: none left)
    assert sorted(task_id for _, task_id, _ in harness.calls) == sorted(f"w{i}" for i in range(12))


async def test_claims_behind_a_flood_of_enqueues_plan_only_for_free_slots(
    harness: Harness, monkeypatch
) -> None:
    """The enqueues made while a slot was free claim their tasks with them; once the
    first ones have taken the slots, the rest plan nothing (a plan made under the lock
    holds up every writer of the queue), nor does any pass find something to claim."""
    gate, gated = _gated()
    engine = await harness.engine({"t": gated}, max_workers=2)
    await settle(engine, lambda: True)
    plans = _count_plans(monkeypatch)
    await asyncio.gather(*(engine.enqueue(_enqueue(f"f{i}")) for i in range(20)))
    await settle(engine, lambda: len(engine.runs) == 2)
    await _passes_run()
    assert sorted(engine.runs) == ["f0", "f1"]  # the first two, claimed with them
    assert not any(plans)  # no plan claimed anything: the slots were taken already
    gate.set()
    await settle(engine, lambda: len(harness.calls) == 20 and not engine.state.tasks)


async def test_a_backlog_of_types_run_elsewhere_costs_no_pass(
    harness: Harness, monkeypatch
) -> None:
    """Tasks of a type no executor here runs wait in their lane (work for another process
    sharing the log); they do not make the queue look busy: each task of a type run here
    is still claimed in its enqueue's own request, folded with it, with no plan and no
    pass (``decide.claim_enqueued``). (Before, each cost a plan under the lock.)"""
    engine = await harness.engine({"t": _noop})
    for i in range(3):
        await engine.enqueue(Enqueue(f"elsewhere{i}", "other", task_data="{}"))
    await settle(engine, lambda: len(engine.state.tasks) == 3)
    await _passes_run()
    plans = _count_plans(monkeypatch)
    folds = _record_folds(engine)
    await _one_at_a_time(engine, harness, 20)
    assert len(harness.calls) == 20
    assert plans == []
    claims = [fold for fold in folds if ev.CLAIMED in fold]
    assert len(claims) == 20 and all(ev.ENQUEUED in fold for fold in claims)
    assert set(engine.state.tasks) == {f"elsewhere{i}" for i in range(3)}


async def test_enqueues_nothing_here_runs_or_due_later_plan_no_claim(
    harness: Harness, monkeypatch
) -> None:
    """An enqueue queues a claim behind it only when its task may run here at once: a
    producer that runs nothing itself, or a burst of delayed tasks, plans nothing under
    the lock (a claim behind each of 5,000 such enqueues made them 1.6x dearer). What
    does become runnable still runs: the delayed tasks when they come due."""
    engine = await harness.engine({"t": _noop})
    await settle(engine, lambda: True)
    plans = _count_plans(monkeypatch)
    due = harness.clock.now() + 60
    await asyncio.gather(
        *(engine.enqueue(Enqueue(f"other{i}", "other", task_data="{}")) for i in range(10)),
        *(engine.enqueue(_enqueue(f"later{i}", execute_at=due)) for i in range(5)),
        engine.enqueue(_enqueue("cron", cron="*/5 * * * *")),
    )
    await settle(engine, lambda: len(engine.state.tasks) == 16)
    await _passes_run()
    # no claim behind any of them; at most the one pass that arms the delayed ones' timer
    assert len(plans) <= 1 and not any(plans)
    harness.clock.advance(61)
    await settle(engine, lambda: len(harness.calls) == 5)
    assert sorted(task_id for _, task_id, _ in harness.calls) == [f"later{i}" for i in range(5)]
    before = len(plans)
    await engine.enqueue(_enqueue("now"))  # a task run here, due now: claimed with it
    await settle(engine, lambda: len(harness.calls) == 6)
    assert not any(plans[before:])  # in its own request: the others wait for elsewhere


@interpreted_only
async def test_a_burst_of_enqueues_queues_claims_only_for_the_free_slots(
    harness: Harness, monkeypatch
) -> None:
    """A claim queued with an enqueue takes a free slot when it is decided; the
    enqueues submitted while as many claims as free slots are queued need none of their
    own (each would be decided under the lock, to claim nothing: 6% of a burst's
    instructions). Every task still runs, each once."""
    gate, gated = _gated()
    engine = await harness.engine({"t": gated}, max_workers=2)
    await settle(engine, lambda: True)
    queued: list[str] = []
    real = Engine._claim_behind, Engine._enqueue_claiming

    def behind(self: Engine, then: Any) -> Any:
        queued.append("behind")
        return real[0](self, then)

    def claiming(self: Engine, cmd: Any, *args: Any) -> None:
        queued.append(cmd.task_id)
        real[1](self, cmd, *args)

    monkeypatch.setattr(Engine, "_claim_behind", behind)
    monkeypatch.setattr(Engine, "_enqueue_claiming", claiming)
    await asyncio.gather(*(engine.enqueue(_enqueue(f"f{i}")) for i in range(20)))
    await settle(engine, lambda: len(engine.runs) == 2)
    assert queued == ["f0", "f1"]  # one per free slot, not one per enqueue
    gate.set()
    await settle(engine, lambda: len(harness.calls) == 20 and not engine.state.tasks)
    assert sorted(task_id for _, task_id, _ in harness.calls) == sorted(f"f{i}" for i in range(20))


async def test_a_burst_of_enqueues_is_decided_as_one_run_each_with_its_own_outcome(
    harness: Harness,
) -> None:
    """Enqueues submitted one after another with nothing in between (and no claim
    behind them) go to the log as one request, decided and folded as one run; each
    caller still gets its own outcome: a duplicate id refused, a dedupe verdict, the
    parents it will not wait for."""
    from snerd.projections import decide as cmds

    engine = await harness.engine({})  # runs nothing: no claim behind any enqueue
    await settle(engine, lambda: True)
    before = engine.log.submitted
    outcomes = await asyncio.gather(
        *(engine.enqueue(_enqueue(f"r{i}")) for i in range(10)),
        engine.enqueue(_enqueue("r3")),  # a duplicate of one of the run
        engine.enqueue(Enqueue("d1", "t", task_data='{"same":1}', auto_dedupe=True)),
        engine.enqueue(Enqueue("d2", "t", task_data='{"same":1}', auto_dedupe=True)),
        engine.enqueue(_enqueue("child", trigger_after_ids=("r1", "nobody"))),
    )
    assert engine.log.submitted == before + 1  # one request for the 14 enqueues
    assert outcomes[:10] == [None] * 10
    assert isinstance(outcomes[10], cmds.Refusal) and outcomes[10].code == "duplicate_task"
    assert outcomes[11] is None
    assert outcomes[12] == cmds.Deduplicated("d1")
    assert outcomes[13] == cmds.UnknownParents(("nobody",))
    assert set(engine.state.tasks) == {*(f"r{i}" for i in range(10)), "d1", "child"}
    assert engine.state.tasks["child"].phase == "blocked"  # it waits on r1, in the run


async def test_outcomes_that_end_in_one_turn_are_written_as_one_request(
    harness: Harness,
) -> None:
    """Successes submitted one after another (here: four handlers released at once)
    go to the log as one request, decided and folded as one run, not one fold each;
    the claim queued behind the first stays behind them all and takes every slot they
    free. Every task succeeds once."""
    gate, gated = _gated()
    engine = await harness.engine({"t": gated}, max_workers=4)
    await asyncio.gather(*(engine.enqueue(_enqueue(f"o{i}")) for i in range(8)))
    await settle(engine, lambda: len(engine.runs) == 4)
    folds = _record_folds(engine)
    before = engine.log.submitted
    gate.set()  # the first four end in one turn; the next four, claimed together, too
    await settle(engine, lambda: not engine.state.tasks)
    assert sorted(task_id for _, task_id, _ in harness.calls) == sorted(f"o{i}" for i in range(8))
    assert folds == [[ev.SUCCEEDED] * 4, [ev.CLAIMED] * 4, [ev.SUCCEEDED] * 4]
    assert engine.log.submitted == before + 3


async def test_a_success_and_the_next_enqueue_are_written_as_one_durable_request(
    harness: Harness,
) -> None:
    """One task at a time (a producer awaiting each enqueue): the last attempt's success,
    the next enqueue and its task's claim, submitted in one turn, go to the log as one
    request, folded once, in a batch made durable for the enqueue's ack (issue 8: "one
    transaction, one fold")."""
    engine = await harness.engine({"t": _noop})
    await engine.enqueue(_enqueue("a"))  # its attempt ends before the waiter goes on
    folds = _record_folds(engine)
    flushes: list[bool] = []
    log = engine.log
    real_flush = log._flush  # type: ignore[attr-defined]

    async def flushing(durable: bool) -> None:
        flushes.append(durable)
        await real_flush(durable)

    log._flush = flushing  # type: ignore[attr-defined]
    before = log.submitted
    await engine.enqueue(_enqueue("b"))
    await settle(engine, lambda: not engine.state.tasks)
    assert folds == [[ev.SUCCEEDED, ev.ENQUEUED, ev.CLAIMED], [ev.SUCCEEDED]]
    assert flushes[0] is True  # the batch that acked "b" was synced
    assert log.submitted == before + 1  # b and its claim joined a's success; b's success


async def test_a_child_made_ready_by_the_success_before_an_enqueue_runs_first(
    harness: Harness,
) -> None:
    """When the success that the next enqueue joins makes a waiting child ready, only a
    plan after the fold can tell which of the two runs first: the enqueue claims
    nothing with it, and the dispatcher claims the child (older) first, then the new
    task (one worker)."""
    gate, parent = _gated()
    engine = await harness.engine({"t": _noop, "p": parent}, max_workers=1)
    await settle(engine, lambda: True)
    await engine.enqueue(Enqueue("P", "p", task_data="{}"))
    await engine.enqueue(_enqueue("C", trigger_after_ids=("P",)))
    await settle(engine, lambda: "P" in engine.runs)
    gate.set()  # P's success, submitted in the turn the next enqueue joins it
    await asyncio.sleep(0)
    await engine.enqueue(_enqueue("E"))
    await settle(engine, lambda: not engine.state.tasks)
    assert [task_id for _, task_id, _ in harness.calls] == ["P", "C", "E"]


@pytest.mark.parametrize("where", ["lock", "write"])
async def test_a_claiming_enqueue_refused_by_the_storage_holds_no_slot(
    harness: Harness, monkeypatch, where: str
) -> None:
    """An enqueue that claims its task in its own request, refused by the storage before
    it was decided (at the lock) or after (at the write): its waiter hears the fault,
    and no slot stays reserved or counted as a claim to come (a leak would stop this
    engine claiming: its one worker would look taken for good)."""
    from faultkit import refuse_one_batch

    from snerd.errors import LogError
    from snerd.eventlog.base import StorageUnavailable

    engine = await harness.engine({"t": _noop}, max_workers=1)
    await settle(engine, lambda: True)
    log: Any = engine.log
    if where == "lock":
        refuse_one_batch(monkeypatch, type(log))
    else:
        real = log._flush
        failed: list[bool] = []

        async def flush(durable: bool) -> None:
            if not failed:
                failed.append(True)
                log._staged = []
                raise StorageUnavailable("the disk went away")
            await real(durable)

        log._flush = flush
    with pytest.raises(StorageUnavailable):
        await engine.enqueue(_enqueue("lost"))
    assert (engine._claims_queued, engine.dispatcher.reserved, engine.runs) == (0, 0, {})
    assert engine.dispatcher.capacity() == 1
    with pytest.raises(LogError):  # refused while the log backs off, not left waiting
        await asyncio.wait_for(engine.enqueue(_enqueue("next")), 5)
    assert (engine._claims_queued, engine.dispatcher.reserved, harness.calls) == (0, 0, [])


async def test_enqueues_after_a_run_refused_by_a_storage_fault_are_answered(
    harness: Harness, monkeypatch
) -> None:
    """A run of enqueues whose batch the storage refused before it was decided is over:
    the enqueues after it start a run of their own and get their answers (a refusal
    while the log backs off), not a wait for ever (a deadlock found by the daemon test
    that cuts PostgreSQL connections under load)."""
    import contextlib

    from faultkit import refuse_one_batch

    from snerd.errors import LogError
    from snerd.eventlog.base import StorageUnavailable

    engine = await harness.engine({})
    log: Any = engine.log
    refuse_one_batch(monkeypatch, type(log))
    first = await asyncio.gather(*(engine.enqueue(_enqueue(f"a{i}")) for i in range(3)),
                                 return_exceptions=True)  # fmt: skip
    assert all(isinstance(r, StorageUnavailable) for r in first), first
    for i in range(3):  # each answered (refused while the log backs off), none left waiting
        with contextlib.suppress(LogError):
            await asyncio.wait_for(engine.enqueue(_enqueue(f"b{i}")), 5)


async def test_a_drain_releases_an_attempt_whose_claim_was_written_while_it_drained(
    harness: Harness,
) -> None:
    """A claim decided before a drain began but written during it (the log finishes its
    queue as it closes) starts its attempt after the drain let the others go: the drain
    stops and releases that one too, instead of leaving its claim to expire and its
    handler to end against a closed log."""
    gate, gated = _gated()
    engine = await harness.engine({"t": gated})
    await settle(engine, lambda: True)
    # the enqueue and its claim wait in the log's queue for the loop's next turn
    acked = engine.enqueue_soon(_enqueue("late"), None, lambda _: None)
    await engine.drain(0)
    assert acked.done() and acked.result() is None
    assert not engine.runs
    gate.set()
    await asyncio.sleep(0)
    other = await harness.engine({})  # a daemon started next: what the log says
    task = other.state.tasks["late"]
    assert task.claim is None  # released by the drain: another daemon may take it now


async def test_a_drain_releases_a_claim_written_with_no_attempt_begun(harness: Harness) -> None:
    """A claim of this daemon's in the log with no attempt running here (a dispatcher
    pass the drain stopped after its claim was written, before the attempt began) is
    released by the drain with the rest: not left to the lease or the next start."""
    from snerd.projections.commands import Claim

    engine = await harness.engine({"t": _noop})
    await engine.enqueue(Enqueue("orphan", "other", task_data="{}"))  # nothing here runs it
    await engine.run_command(Claim(("orphan",), 3600.0, 1.0))
    assert engine.state.tasks["orphan"].claim is not None and not engine.runs
    await engine.drain(0)
    other = await harness.engine({})
    task = other.state.tasks["orphan"]
    assert task.claim is None and task.phase == "ready"


async def test_a_drain_waits_for_a_claim_still_waiting_for_the_log_s_lock(
    harness: Harness, tmp_path: Any
) -> None:
    """A claim queued before the drain whose batch still waits for the file lock (another
    process holds it) when the drain comes to release: the drain waits for it to be
    written and begun, then releases it, rather than release nothing and leave it to the
    log's close to write and begin."""
    import fcntl

    from snerd.eventlog.storage import open_log

    harness.new_log = lambda: open_log(tmp_path / "storage", fsync=False)
    gate, gated = _gated()
    engine = await harness.engine({"t": gated})
    await settle(engine, lambda: True)
    lock_path = os.readlink(f"/proc/self/fd/{engine.log._lock_fd}")  # type: ignore[attr-defined]
    with open(lock_path, "rb") as other:  # another process's hold of the log's lock
        fcntl.flock(other, fcntl.LOCK_EX)
        acked = engine.enqueue_soon(_enqueue("late"), None, lambda _: None)
        draining = asyncio.ensure_future(engine.drain(0))
        for _ in range(20):
            await asyncio.sleep(0)
        assert engine.draining and not acked.done()  # the batch waits for the lock
        fcntl.flock(other, fcntl.LOCK_UN)
        await asyncio.wait_for(draining, 10)
    assert acked.result() is None and not engine.runs
    gate.set()
    harness.new_log = lambda: open_log(tmp_path / "storage", fsync=False)
    task = (await harness.engine({})).state.tasks["late"]
    assert task.claim is None  # released by the drain


async def test_a_drain_the_storage_refuses_still_stops_and_lets_its_liveness_go(
    harness: Harness,
) -> None:
    """A drain while the storage refuses every write: its releases cannot be written, so
    it says so and goes on (it does not raise); its log closes and its liveness lock
    goes, so the other daemons release its claims as a dead daemon's."""
    import contextlib

    from snerd.eventlog.base import StorageUnavailable

    gate, gated = _gated()
    engine = await harness.engine({"t": gated})
    await engine.enqueue(_enqueue("held"))
    await settle(engine, lambda: "held" in engine.runs)

    @contextlib.asynccontextmanager
    async def refused() -> Any:
        raise StorageUnavailable("the disk went away")
        yield  # (a generator)

    engine.log._exclusive = refused  # type: ignore[attr-defined]
    await engine.drain(0)
    assert not engine.runs
    assert harness.liveness is not None and not harness.liveness.is_alive(engine.daemon)
    gate.set()


async def test_a_task_claimed_with_its_enqueue_is_read_from_its_record_once(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim told with an enqueue (``decide.claim_enqueued``) reads the task from the
    enqueue's record; the fold of the log's copy takes that task (``events.use_built``)
    rather than reading the record a second time."""
    from snerd.projections import decide, task

    if _compiled(task):
        pytest.skip("counts reads through the modules' task_from_record, which the "
                    "compiled core calls directly: runs in the README's (interpreted) suite")
    engine = await harness.engine({"t": _noop})
    await settle(engine, lambda: True)
    heard: list[Any] = []
    engine.observers.append(
        lambda events, _: heard.extend(e for e in events if type(e) is ev.Enqueued)
    )
    reads: Counter[str] = Counter()
    for module in (decide, ev):
        real = module.task_from_record

        def counting(record: Any, *args: Any, real: Any = real, **kwargs: Any) -> Any:
            reads[record.get(ev.F_TASK_ID)] += 1
            return real(record, *args, **kwargs)

        monkeypatch.setattr(module, "task_from_record", counting)
    await _one_at_a_time(engine, harness, 10)
    assert [e.task_id for e in heard] == [f"i{i}" for i in range(10)]
    assert all(e.built is not None for e in heard)
    assert reads == Counter({f"i{i}": 1 for i in range(10)})


async def test_a_claim_told_with_its_enqueue_takes_the_lease_the_engine_has_now(
    harness: Harness,
) -> None:
    """An enqueue claimed as it is decided takes the engine's lease: its claim command is
    kept for as long as the engine keeps its config, and a new config is a new lease."""
    never = asyncio.Event()

    async def stuck(job: Job) -> None:
        await never.wait()

    engine = await harness.engine({"t": stuck}, lease_seconds=30.0)
    leases: dict[str, float | None] = {}
    for task_id, lease in (("a", 30.0), ("b", 30.0), ("c", 90.0), ("d", 90.0)):
        if lease != engine.config.lease_seconds:
            engine.config = dataclasses.replace(engine.config, lease_seconds=lease)
        now = harness.clock.now()
        await engine.enqueue(_enqueue(task_id))
        await settle(engine, lambda: task_id in engine.runs)  # noqa: B023 (awaited here)
        claim = engine.state.tasks[task_id].claim
        assert claim is not None
        leases[task_id] = None if claim.lease_until is None else claim.lease_until - now
    assert leases == {"a": 30.0, "b": 30.0, "c": 90.0, "d": 90.0}
    never.set()
