"""Inbound commands -> engine calls -> reply lines (the daemon's request handlers)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from snerd.dispatcher import info, results
from snerd.dispatcher.engine import Engine, EnqueueOutcome
from snerd.errors import LogError
from snerd.projections import decide as cmds
from snerd.projections.views.tasks import task_view
from snerd.rpc import protocol as p
from snerd.rpc.output import Output

log = logging.getLogger("snerd.rpc")


def _refused(refusal: cmds.Refusal, task_id: str | None, rid: Any) -> bytes:
    return p.error(
        refusal.message, code=refusal.code, task_id=task_id, field=refusal.field, request_id=rid
    )


async def answer(command: p.Command, engine: Engine, out: Output) -> None:
    """Carry out one command and write its reply (if it has one). Never raises.
    (Enqueue, result and progress lines go to :func:`answer_enqueue`,
    :func:`answer_result` and :func:`answer_progress`: no task of their own.)"""
    try:
        reply = await _carry_out(command, engine)
    except Exception as exc:
        reply = _failed(command, exc)
    if reply is not None:
        out.write(reply)


def answer_enqueue(command: p.Enqueue, engine: Engine, out: Output) -> None:
    """:func:`answer` for the hot path, with no task of its own: the ack is written by
    the log's writer the moment the enqueue is durable (``acked``), or, if the enqueue
    fails, from its future."""

    def reply(future: asyncio.Future[EnqueueOutcome]) -> None:
        if future.cancelled():  # the daemon is shutting down: nobody to answer
            return
        try:
            out.write(_enqueue_reply(command, future.result()))
        except Exception as exc:
            out.write(_failed(command, exc))

    def acked(outcome: EnqueueOutcome) -> None:  # durable: answered before its claim runs
        out.write_now(_enqueue_reply(command, outcome))

    engine.enqueue_soon(command, reply, acked)


def answer_result(command: p.Result, engine: Engine, out: Output) -> None:
    """:func:`answer` for an attempt's outcome, when its future is done (no task; from
    the log's writer, with no loop turn of its own)."""

    def reply(future: asyncio.Future[cmds.Refusal | None]) -> None:
        if future.cancelled():  # the daemon is shutting down: nobody to answer
            return
        try:
            refusal = future.result()
        except Exception as exc:
            out.write(_failed(command, exc))
            return
        if refusal is not None:
            out.write(_refused(refusal, command.task_id, command.request_id))

    engine.finish_soon(
        command.task_id, success=command.success, error=command.error, attempt=command.attempt,
        result=command.result, retry=command.retry, then=reply,
    )  # fmt: skip


def answer_progress(command: p.Progress, engine: Engine, out: Output) -> None:
    """Record an attempt's progress now, in order with its outcome if that follows at
    once; progress for a task not running here is dropped (spec §3.3)."""

    def reply(future: asyncio.Future[cmds.Refusal | None]) -> None:
        if not future.cancelled() and (exc := future.exception()) is not None:
            out.write(_failed(command, exc))

    engine.progress_soon(command.task_id, command.data).add_done_callback(reply)


def _failed(command: p.Command, exc: BaseException) -> bytes:
    """The error reply for a command that raised (storage trouble, or a bug, which
    must not kill the daemon)."""
    rid = command.request_id
    task_id = getattr(command, "task_id", None)
    if isinstance(exc, LogError):
        log.error("storage error on %s: %s", command.action, exc)
        return p.error(f"storage error: {exc}", code=p.STORAGE_ERROR, task_id=task_id,
                       request_id=rid)  # fmt: skip
    log.error("internal error on %s", command.action, exc_info=exc)
    return p.error(f"internal error: {exc}", code=p.INTERNAL_ERROR, task_id=task_id,
                   request_id=rid)  # fmt: skip


def _enqueue_reply(command: p.Enqueue, outcome: EnqueueOutcome) -> bytes:
    rid = command.request_id
    if isinstance(outcome, cmds.Refusal):
        return _refused(outcome, command.task_id, rid)
    dup = outcome.duplicate_of if isinstance(outcome, cmds.Deduplicated) else None
    unknown = outcome.ids if isinstance(outcome, cmds.UnknownParents) else ()
    if unknown:
        log.warning(
            "task %r: trigger_after_ids %s: neither live nor dead-lettered, so it does "
            "not wait for them (a mistyped id?)", command.task_id, ", ".join(unknown)
        )  # fmt: skip
    return p.ack(command.task_id, deduplicated_of=dup, unknown_parents=unknown,
                 request_id=rid)  # fmt: skip


async def _carry_out(command: p.Command, engine: Engine) -> bytes | None:
    rid = command.request_id
    if isinstance(command, p.Stats):
        payload, top = await engine.read(lambda: (info.stats(engine), info.sdk_stats(engine)))
        return p.stats(payload, top=top, request_id=rid)
    if isinstance(command, p.Get):
        task_id = command.task_id
        view = await engine.read(lambda: task_view(engine.state, task_id, now=engine.clock.now()))
        if view is None:  # ended (or enqueued elsewhere): from the stored history
            view = await results.lookup(engine, task_id)
        if view is None:
            return p.error(f"no task {command.task_id!r}", code=p.UNKNOWN_TASK,
                           task_id=command.task_id, request_id=rid)  # fmt: skip
        return p.task(view, request_id=rid)
    if isinstance(command, p.Cancel | p.Requeue):
        op = engine.cancel if isinstance(command, p.Cancel) else engine.requeue
        refusal = await op(command.task_id)
        if refusal is not None:
            return _refused(refusal, command.task_id, rid)
        return p.ok(command.action, command.task_id, request_id=rid)
    return None
