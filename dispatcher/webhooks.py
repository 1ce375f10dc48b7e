"""Webhook tasks: POST the task to its ``webhook_url``; 2xx is success.

aiohttp is imported on first use so the daemon starts fast. One ``ClientSession``
per daemon, closed on shutdown. On dead letter one more POST goes out with
``X-SnerdMQ-Event: MaxRetriesReached``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from typing import Any

import orjson

from snerd.dispatcher.executors import Outcomes, decode_data
from snerd.dispatcher.runs import Run
from snerd.eventlog.base import Record
from snerd.projections import events as ev

log = logging.getLogger("snerd.webhooks")

DEFAULT_TIMEOUT = 30.0
EXECUTE = "Execute"
MAX_RETRIES_REACHED = "MaxRetriesReached"


def snerdmq_keys(task_id: Any, task_type: Any, data: str) -> dict[str, Any]:
    """What SnerdMQ's daemon POSTs, and receivers written for it read: ``taskId``,
    ``taskType`` and ``data``, the task's data as its JSON text (a string)."""
    return {"taskId": task_id, "taskType": task_type, "data": data}


class WebhookExecutor:
    """Executor for tasks with a ``webhook_url``, and dead-letter notifier for them."""

    def __init__(self, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.timeout = timeout
        self._session: Any = None
        self._background: set[asyncio.Task[None]] = set()

    @property
    def task_types(self) -> Collection[str]:
        return ()  # it runs any task with a webhook_url, whatever its type

    def accepts(self, task_type: str, webhook_url: str | None) -> bool:
        return bool(webhook_url)

    def start(self, run: Run, outcomes: Outcomes) -> None:
        run.handle = asyncio.get_running_loop().create_task(self._execute(run, outcomes))

    def stop(self, run: Run) -> None:
        if run.handle is not None and not run.handle.done():
            run.handle.cancel()

    async def _execute(self, run: Run, outcomes: Outcomes) -> None:
        task = run.task
        timeout = task.max_execution_seconds or self.timeout
        body = {
            **snerdmq_keys(task.id, task.type, task.data),
            "task_id": task.id, "task_type": task.type, "task_data": decode_data(task.data),
            "attempt": run.attempt, "retry_count": task.retry_count,
        }  # fmt: skip
        error = await self._post(task.webhook_url or "", EXECUTE, body, timeout)
        await outcomes.finish(task.id, success=error is None, error=error, attempt=run.attempt)

    async def _post(self, url: str, event: str, body: dict[str, Any], timeout: float) -> str | None:
        """POST; None on a 2xx answer, else what went wrong."""
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession()
        headers = {"X-SnerdMQ-Event": event, "Content-Type": "application/json"}
        try:
            async with self._session.post(
                url, data=orjson.dumps(body), headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as response:  # fmt: skip
                if 200 <= response.status < 300:
                    return None
                text = (await response.text())[:200]
                return f"webhook answered HTTP {response.status}: {text}"
        except TimeoutError:
            return f"webhook timed out after {timeout:g} seconds"
        except aiohttp.ClientError as exc:
            return f"webhook request failed: {type(exc).__name__}: {exc}"

    # notifier side ---------------------------------------------------------------------

    def on_progress(self, task_id: str, task_type: str | None, data: Any, local: bool) -> None:
        return None

    def on_dead_letter(self, record: Record) -> None:
        url = record.get(ev.F_WEBHOOK_URL)
        if not url:
            return
        data = record.get(ev.F_TASK_DATA)
        text = data if isinstance(data, str) else orjson.dumps(data).decode()
        body = {
            **snerdmq_keys(record.get(ev.F_TASK_ID), record.get(ev.F_TASK_TYPE), text),
            "task_id": record.get(ev.F_TASK_ID), "task_type": record.get(ev.F_TASK_TYPE),
            "task_data": decode_data(text),
            "reason": record.get(ev.F_REASON), "last_error": record.get(ev.F_LAST_ERROR_TEXT),
            "retry_count": record.get(ev.F_RETRY_COUNT),
        }  # fmt: skip
        job = asyncio.get_running_loop().create_task(self._notify(str(url), body))
        self._background.add(job)
        job.add_done_callback(self._background.discard)

    async def _notify(self, url: str, body: dict[str, Any]) -> None:
        error = await self._post(url, MAX_RETRIES_REACHED, body, self.timeout)
        if error is not None:
            log.warning("MaxRetriesReached notice to %s failed: %s", url, error)

    async def close(self) -> None:
        if self._background:
            await asyncio.wait(self._background, timeout=5.0)
        if self._session is not None:
            await self._session.close()
            self._session = None
