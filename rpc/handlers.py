"""Inbound commands -> engine calls -> reply lines (the daemon's request handlers)."""

from __future__ import annotations

import logging
from typing import Any

from snerd.dispatcher import info
from snerd.dispatcher.engine import Engine
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
    """Carry out one command and write its reply (if it has one). Never raises."""
    rid = command.request_id
    task_id = getattr(command, "task_id", None)
    try:
        reply = await _carry_out(command, engine)
    except LogError as exc:
        log.error("storage error on %s: %s", command.action, exc)
        reply = p.error(f"storage error: {exc}", code=p.STORAGE_ERROR, task_id=task_id,
                        request_id=rid)  # fmt: skip
    except Exception as exc:  # a bug must not kill the daemon
        log.exception("internal error on %s", command.action)
        reply = p.error(f"internal error: {exc}", code=p.INTERNAL_ERROR, task_id=task_id,
                        request_id=rid)  # fmt: skip
    if reply is not None:
        out.write(reply)


async def _carry_out(command: p.Command, engine: Engine) -> bytes | None:
    rid = command.request_id
    if isinstance(command, p.Enqueue):
        outcome = await engine.enqueue(command)
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
    if isinstance(command, p.Result):
        refusal = await engine.finish(
            command.task_id, success=command.success, error=command.error,
            attempt=command.attempt, retry=command.retry,
        )  # fmt: skip
        return None if refusal is None else _refused(refusal, command.task_id, rid)
    if isinstance(command, p.Progress):
        await engine.report_progress(command.task_id, command.data)
        return None  # progress for a task not running here is dropped (spec §3.3)
    if isinstance(command, p.Stats):
        payload, top = await engine.read(lambda: (info.stats(engine), info.sdk_stats(engine)))
        return p.stats(payload, top=top, request_id=rid)
    if isinstance(command, p.Get):
        task_id = command.task_id
        view = await engine.read(lambda: task_view(engine.state, task_id, now=engine.clock.now()))
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
