"""The dashboard's JSON API under ``/api/``.

========================================  ===============================================
``GET /api/stats``                        SDK keys ``enqueued``/``processed``/``failed``,
                                          counts per state, throughput, rate groups, log
``GET /api/tasks``                        list of task rows (SDK-compatible keys); query
                                          ``state``, ``type``, ``q`` (id substring),
                                          ``limit`` (default 1000), ``offset``; the total
                                          is in the ``X-Total-Count`` header
``POST /api/tasks``                       enqueue (body: the protocol's enqueue fields)
``GET /api/tasks/{id}``                   one task, with its parents and children (an
                                          ended one from the log, with ``result`` and
                                          ``attempts``)
``GET /api/tasks/{id}/history``           its timeline from the stored audit trail
``POST /api/tasks/{id}/cancel``           cancel a task that is not running
``GET /api/dag/{id}``                     the DAG around a task
``GET /api/dlq``                          the dead-letter queue
``POST /api/dlq/{key}/requeue``           back into the queue with its retries restored
``DELETE /api/dlq/{key}``                 delete the entry for good (purge)
========================================  ===============================================

Errors are ``{"error": message, "status": code}``: 400 bad input (any malformed body:
not UTF-8, not JSON, nested too deep, not an object, a bad field or query value), 404
unknown task or key, 409 a refused state change, 503 storage unavailable, 500 a bug
(logged with its traceback; the reply never shows internals).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from snerd.dashboard.monitor import Monitor
from snerd.dispatcher import info, results
from snerd.dispatcher.engine import Engine
from snerd.errors import SnerdError
from snerd.eventlog import FileLog, SkippedLine
from snerd.eventlog.storage import open_history, redact
from snerd.projections import decide as cmds
from snerd.projections import events as ev
from snerd.projections.options import Fields, OptionError, enqueue_options
from snerd.projections.views import dag as dags
from snerd.projections.views import ended
from snerd.projections.views import stats as figures
from snerd.projections.views import status as st
from snerd.projections.views import tasks as views
from snerd.projections.views import timeline as tl

log = logging.getLogger("snerd.dashboard")

MAX_LIMIT = 10_000
MAX_PASSES = 4  # filtering passes over the stored history for a timeline
_REFUSAL_STATUS = {"unknown_task": 404, "invalid_state": 409, "duplicate_task": 409}


class ApiError(Exception):
    """An API request that cannot be served; becomes a JSON error reply."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def json(data: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    body = orjson.dumps(data, default=str)
    return web.Response(body=body, status=status, headers=headers, content_type="application/json")


def storage_of(engine: Engine) -> Path | str | None:
    """The storage behind the engine's log: its dir for a file log, its URL for
    PostgreSQL (the audit history is read from there); None for other logs."""
    if isinstance(engine.log, FileLog):
        return engine.log.layout.storage
    url = getattr(engine.log, "url", None)
    return url if isinstance(url, str) else None


def stored_records(storage: Path | str, task_id: str, known: set[str]) -> list[dict[str, Any]]:
    """Every stored record about ``task_id`` and its ancestors (``known`` ones first; a
    parent only the log still names costs another pass). Blocking: call in a thread."""
    from snerd.errors import LogError

    ids = {task_id, *known}
    records: list[dict[str, Any]] = []
    index = _task_index(storage)
    for _ in range(MAX_PASSES):
        try:
            records = index(ids) if index is not None else _rescan(storage, ids)
        except LogError:  # a file went away under the index (a compaction): rescan
            index = None
            records = _rescan(storage, ids)
        more = tl.parents_named(records, ids) - ids
        if not more:
            break
        ids |= more
    return records


def _rescan(storage: Path | str, ids: set[str]) -> list[dict[str, Any]]:
    return [
        item for item in open_history(storage)
        if not isinstance(item, SkippedLine) and tl.concerns(item, ids)
    ]  # fmt: skip


def _task_index(storage: Path | str) -> Any:
    """The records about some ids through the per-task index (extended first), or
    None when it cannot be read, or for a PostgreSQL queue (then the history is
    rescanned)."""
    from snerd.errors import LogError
    from snerd.eventlog.index import fresh_index, read_places
    from snerd.eventlog.storage import is_url

    if isinstance(storage, str) and is_url(storage):
        return None
    try:
        index = fresh_index(Path(storage))
    except (OSError, LogError):
        return None

    def records(ids: set[str]) -> list[dict[str, Any]]:
        places = sorted({p for i in ids for p in index.places_of(i)})
        return [dict(r) for _, r in read_places(index.paths, places) if tl.concerns(r, ids)]

    return records


async def read_json(request: web.Request) -> dict[str, Any]:
    """The request's JSON object body; ``{}`` when there is none. 400 when malformed."""
    raw = await request.read() if request.can_read_body else b""
    if not raw.strip():
        return {}
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"malformed JSON body: {exc}") from None
    if not isinstance(value, dict):
        raise ApiError(400, "the JSON body must be an object")
    return value


def _int_query(request: web.Request, name: str, default: int, maximum: int) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or int(raw) > maximum:
        raise ApiError(400, f"{name} must be an integer between 0 and {maximum}, got {raw!r}")
    return int(raw)


class Api:
    """Route handlers over one engine and its monitor."""

    def __init__(self, engine: Engine, monitor: Monitor) -> None:
        self.engine = engine
        self.monitor = monitor
        self.storage = storage_of(engine)

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/stats", self.stats),
            web.get("/api/tasks", self.tasks),
            web.post("/api/tasks", self.enqueue),
            web.get("/api/tasks/{id}", self.task),
            web.get("/api/tasks/{id}/history", self.history),
            web.post("/api/tasks/{id}/cancel", self.cancel),
            web.get("/api/dag/{id}", self.dag),
            web.get("/api/dlq", self.dlq),
            web.post("/api/dlq/{key}/requeue", self.requeue),
            web.delete("/api/dlq/{key}", self.purge),
        ]

    def _now(self) -> float:
        return self.engine.clock.now()

    # --- reading ----------------------------------------------------------------------

    async def stats(self, request: web.Request) -> web.Response:
        state, now = self.engine.state, self._now()
        totals = figures.state_totals(state)  # the same totals as /metrics
        out: dict[str, Any] = figures.sdk_totals(totals)
        out.update(info.stats(self.engine))
        out["counts"] = st.counts(state, now)
        out["totals"] = totals
        out["historyComplete"] = self.monitor.history_ready
        out["throughput"] = self.monitor.throughput()
        out["rateGroups"] = figures.rate_groups(state, now)
        out["types"] = views.task_types(state, self.monitor.finished_rows())
        out["storage"] = None if self.storage is None else redact(str(self.storage))
        out["seq"] = state.last_seq
        return json(out)

    async def tasks(self, request: web.Request) -> web.Response:
        query = request.query
        state = query.get("state") or None
        if state is not None and state not in st.STATES:
            raise ApiError(400, f"state must be one of {', '.join(st.STATES)}; got {state!r}")
        flt = views.Filter(
            state=state, type=query.get("type") or None, search=query.get("q") or None
        )
        limit = _int_query(request, "limit", 1000, MAX_LIMIT)
        offset = _int_query(request, "offset", 0, 1 << 40)
        rows, total = views.task_rows(
            self.engine.state,
            self.monitor.finished_rows(),
            flt,
            now=self._now(),
            limit=limit,
            offset=offset,
        )
        return json(rows, headers={"X-Total-Count": str(total)})

    async def task(self, request: web.Request) -> web.Response:
        task_id = request.match_info["id"]
        state, now = self.engine.state, self._now()
        row = views.find_row(state, self.monitor.finished(task_id), task_id, now)
        if row is None or row["state"] in st.FINISHED:  # its result, attempts: from the log
            view = await results.lookup(self.engine, task_id)
            if view is not None and view["status"] in st.ENDED:
                row = ended.ended_row(view)
        if row is None:
            raise ApiError(404, f"no task {task_id!r} (unknown, or its history was pruned)")
        lookup = self.monitor.finished
        row["parentStates"] = [
            {"id": p, "state": st.state_of(state, p, now, lookup(p))} for p in row["parents"]
        ]
        row["children"] = [
            {"id": c, "state": st.state_of(state, c, now, lookup(c))}
            for c in dags.children_of(state, task_id)
        ]
        return json(row)

    async def history(self, request: web.Request) -> web.Response:
        task_id = request.match_info["id"]
        family = dags.ancestors(self.engine.state, self.monitor.finished, task_id) | {task_id}
        records = await self._records(task_id, family)
        entries = await asyncio.to_thread(tl.timeline, records, task_id)
        if not entries:
            raise ApiError(404, f"no history for task {task_id!r}")
        source = "log" if self.storage is not None else "recent"
        return json({"task_id": task_id, "entries": entries, "source": source})

    async def _records(self, task_id: str, family: set[str]) -> list[dict[str, Any]]:
        """Stored records about the task and its ancestors, then what the engine folded
        since (delivered before it reached the disk)."""
        stored: list[dict[str, Any]] = []
        if isinstance(self.storage, str) or (
            self.storage is not None and os.path.isdir(self.storage)
        ):
            stored = await asyncio.to_thread(stored_records, self.storage, task_id, family)
            family = family | {str(tl.subject(r)) for r in stored}
        last = max((r[ev.F_SEQ] for r in stored if type(r.get(ev.F_SEQ)) is int), default=0)
        recent = {
            r[ev.F_SEQ]: r
            for member in family
            for r in self.monitor.recent_events(member)
            if type(r.get(ev.F_SEQ)) is int and r[ev.F_SEQ] > last and tl.concerns(r, family)
        }
        return stored + [recent[seq] for seq in sorted(recent)]

    async def dag(self, request: web.Request) -> web.Response:
        task_id = request.match_info["id"]
        state, now = self.engine.state, self._now()
        known = (
            task_id in state.tasks
            or task_id in state.dlq
            or self.monitor.finished(task_id) is not None
        )
        if not known:
            raise ApiError(404, f"no task {task_id!r}")
        return json(dags.dag_view(state, task_id, finished=self.monitor.finished, now=now))

    async def dlq(self, request: web.Request) -> web.Response:
        return json(views.dlq_rows(self.engine.state))

    # --- changing ---------------------------------------------------------------------

    async def enqueue(self, request: web.Request) -> web.Response:
        body = await read_json(request)
        try:
            command = enqueue_options(Fields(body))
        except OptionError as exc:
            raise ApiError(400, exc.message) from None
        outcome = await self.engine.enqueue(command)
        if isinstance(outcome, cmds.Refusal):
            raise ApiError(_REFUSAL_STATUS.get(outcome.code, 400), outcome.message)
        if isinstance(outcome, cmds.Deduplicated):
            return json(
                {"ok": True, "task_id": command.task_id, "deduplicated_of": outcome.duplicate_of}
            )
        reply: dict[str, Any] = {"ok": True, "task_id": command.task_id}
        if isinstance(outcome, cmds.UnknownParents):
            reply["unknown_parents"] = list(outcome.ids)
        return json(reply, status=201)

    async def cancel(self, request: web.Request) -> web.Response:
        return await self._act(request, "id", "cancel", self.engine.cancel)

    async def requeue(self, request: web.Request) -> web.Response:
        return await self._act(request, "key", "requeue", self.engine.requeue)

    async def purge(self, request: web.Request) -> web.Response:
        return await self._act(request, "key", "purge", self.engine.purge)

    async def _act(
        self,
        request: web.Request,
        name: str,
        action: str,
        op: Callable[[str], Awaitable[cmds.Refusal | None]],
    ) -> web.Response:
        await read_json(request)  # no fields yet, but a malformed body is still an error
        key = request.match_info[name]
        refusal = await op(key)
        if refusal is not None:
            raise ApiError(_REFUSAL_STATUS.get(refusal.code, 400), refusal.message)
        return json({"ok": True, "action": action, "task_id": key})


@web.middleware
async def errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """ApiError, and any HTTP error under ``/api/``, as a JSON error reply."""
    try:
        return await handler(request)
    except ApiError as exc:
        return json({"error": exc.message, "status": exc.status}, status=exc.status)
    except SnerdError as exc:  # the log is closed or unwritable (e.g. while shutting down)
        return json({"error": f"storage unavailable: {exc}", "status": 503}, status=503)
    except web.HTTPException as exc:
        if not request.path.startswith("/api/") or exc.status < 400:
            raise
        return json({"error": exc.reason, "status": exc.status}, status=exc.status)
    except Exception:  # a bug: logged with its traceback, answered as JSON, nothing leaks
        if not request.path.startswith("/api/"):
            raise
        log.exception("internal error on %s %s", request.method, request.path)
        return json({"error": "internal error (details in the server log)", "status": 500},
                    status=500)  # fmt: skip
