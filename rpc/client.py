"""The thin Python client: spawn a ``snerdmq`` daemon and speak the stdio protocol.

    async with snerd.Client("/var/lib/app/.snerdata") as client:
        async def send_email(task_id: str, data: Any) -> None:
            await client.progress(task_id, {"pct": 50})

        client.register("send_email", send_email)
        ack = await client.enqueue("email-1", "send_email", {"to": "a@b.c"})

Every request carries a ``request_id``, so any number of them may be in flight at once
(pipelining) and each reply finds its caller. A refused request raises
:class:`RemoteProtocolError` (the line was invalid) or :class:`RemoteDispatchError`
(the daemon refused the command), both carrying the protocol's ``code``.
``execute`` lines run the registered async handler and its outcome goes back as a
``result``; ``progress`` and ``max_retries_reached`` notices reach callbacks and the
:attr:`Client.notices` queue. ``send_line`` / ``lines`` give raw access for tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import sys
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Final, TypeAlias

import orjson

from snerd.errors import DispatchError, Fail, ProtocolError, SnerdError
from snerd.projections.commands import check_result
from snerd.rpc.output import heap_sized_reads
from snerd.rpc.protocol import MAX_LINE_BYTES

log = logging.getLogger("snerd.client")

Message: TypeAlias = dict[str, Any]
Handler: TypeAlias = Callable[[str, Any], Awaitable[Any]]
"""An async task handler: ``(task_id, data)``; returning is success (what it returns
is the task's result), raising is failure."""
NoticeCallback: TypeAlias = Callable[[Message], Any]

DAEMON_CODE: Final = "import sys; from snerd.daemon import main; sys.exit(main())"
STDOUT_LIMIT: Final = 64 << 20
"""Longest daemon line the client reads (an ``execute`` echoes up to 1 MiB of data)."""
PROTOCOL_CODES: Final = frozenset(
    {"invalid_json", "line_too_long", "unknown_action", "missing_field", "invalid_field"}
)
NOTICES: Final = frozenset({"progress", "max_retries_reached"})


class RemoteProtocolError(ProtocolError):
    """The daemon refused a line as invalid (bad JSON, a missing or wrong field)."""

    def __init__(self, reply: Message) -> None:
        super().__init__(str(reply.get("message")), field=reply.get("field"),
                         task_id=reply.get("task_id"))  # fmt: skip
        self.code: str = str(reply.get("code"))
        self.reply = reply


class RemoteDispatchError(DispatchError):
    """The daemon refused a valid command (duplicate task, unknown task, not active...)."""

    def __init__(self, reply: Message) -> None:
        super().__init__(str(reply.get("message")))
        self.message: str = str(reply.get("message"))
        self.code: str = str(reply.get("code"))
        self.task_id: str | None = reply.get("task_id")
        self.reply = reply


class DaemonExited(SnerdError):
    """The daemon process ended (or was never started) before the reply arrived."""


def remote_error(reply: Message) -> RemoteProtocolError | RemoteDispatchError:
    """The exception for an ``error`` reply, chosen by its ``code``."""
    if reply.get("code") in PROTOCOL_CODES:
        return RemoteProtocolError(reply)
    return RemoteDispatchError(reply)


def _json_data(data: Any) -> Any:
    """What a handler receives: ``task_data`` parsed as JSON, or the raw text."""
    if not isinstance(data, str):
        return data
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return data


class Client:
    """One spawned daemon on ``storage`` and the conversation with it.

    ``binary`` is an executable run as ``binary STORAGE`` (e.g. the ``snerdmq`` console
    script); by default the daemon runs as ``python -c ...`` with this interpreter and
    this copy of ``snerd``. ``env`` entries are added to the inherited environment.
    ``keep_transcript`` keeps every raw stdout line in :attr:`transcript`.
    """

    def __init__(
        self,
        storage: str | os.PathLike[str] = ".snerdata",
        *,
        binary: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        keep_transcript: bool = False,
    ) -> None:
        self.storage = os.fspath(storage)
        self.binary = None if binary is None else os.fspath(binary)
        self.env = dict(env or {})
        self.process: asyncio.subprocess.Process | None = None
        self.handlers: dict[str, Handler] = {}
        self.notices: asyncio.Queue[Message] = asyncio.Queue()
        """``progress``, ``max_retries_reached`` and uncorrelated ``error`` messages."""
        self.transcript: list[bytes] | None = [] if keep_transcript else None
        self.stderr_tail: deque[str] = deque(maxlen=200)
        self._callbacks: dict[str, list[NoticeCallback]] = {a: [] for a in NOTICES}
        self._pending: dict[int, asyncio.Future[Message]] = {}
        self._ids = itertools.count(1)
        self._subscribers: list[asyncio.Queue[Message | None]] = []
        self._running: set[asyncio.Task[None]] = set()
        self._readers: list[asyncio.Task[None]] = []
        self._exited = asyncio.Event()

    # --- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        """Spawn the daemon and send the registrations made so far."""
        if self.process is not None:
            raise SnerdError("the client was already started")
        self.process = await asyncio.create_subprocess_exec(
            *self._command(), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=self._environment(), limit=STDOUT_LIMIT,
        )  # fmt: skip
        pipes = getattr(self.process, "_transport", None)  # (asyncio keeps them there)
        if pipes is not None:  # the daemon's stdout and stderr, read in heap-sized chunks
            for fd in (1, 2):
                heap_sized_reads(pipes.get_pipe_transport(fd))
        loop = asyncio.get_running_loop()
        self._readers = [loop.create_task(self._read_stdout()),
                         loop.create_task(self._read_stderr())]  # fmt: skip
        for task_type in self.handlers:
            self._write({"action": "register", "task_type": task_type})

    def _command(self) -> list[str]:
        if self.binary is not None:
            return [self.binary, self.storage]
        return [sys.executable, "-c", DAEMON_CODE, self.storage]

    def _environment(self) -> dict[str, str]:
        env = {**os.environ, **self.env}
        if self.binary is None:  # the child imports the same snerd as this process
            import snerd

            root = str(Path(snerd.__file__).resolve().parent.parent)
            paths = [root, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
            env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        return env

    async def __aenter__(self) -> Client:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def pid(self) -> int:
        """The daemon's process id."""
        return self._proc().pid

    @property
    def returncode(self) -> int | None:
        """The daemon's exit code, or None while it runs."""
        return None if self.process is None else self.process.returncode

    async def close(self, *, timeout: float = 35.0) -> int:
        """SIGTERM (the daemon drains, handlers may still answer), wait, return the exit
        code; SIGKILL if it takes longer than ``timeout`` seconds."""
        proc = self._proc()
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        try:
            return await self.wait(timeout=timeout)
        except TimeoutError:
            return await self.kill()

    async def kill(self) -> int:
        """SIGKILL the daemon (no drain, no release) and return its exit code."""
        proc = self._proc()
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        return await self.wait(timeout=None)

    async def close_stdin(self) -> None:
        """Close the daemon's stdin: it releases what it sent us and exits."""
        stdin = self._proc().stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()
            with contextlib.suppress(ConnectionError):
                await stdin.wait_closed()

    async def wait(self, *, timeout: float | None = 35.0) -> int:
        """Wait for the daemon to exit and its output to be read; return the exit code."""
        proc = self._proc()
        code = await asyncio.wait_for(proc.wait(), timeout)
        await asyncio.wait_for(self._exited.wait(), timeout)
        for task in list(self._running):
            task.cancel()
        return code

    def _proc(self) -> asyncio.subprocess.Process:
        if self.process is None:
            raise DaemonExited("the daemon has not been started")
        return self.process

    # --- handlers and notices ---------------------------------------------------------

    def register(self, task_type: str, handler: Handler) -> None:
        """Run ``handler`` for tasks of ``task_type`` sent to this client."""
        self.handlers[task_type] = handler
        if self.process is not None:
            self._write({"action": "register", "task_type": task_type})

    def on_progress(self, callback: NoticeCallback) -> NoticeCallback:
        """Call ``callback(message)`` for every ``progress`` line (usable as a decorator)."""
        self._callbacks["progress"].append(callback)
        return callback

    def on_max_retries_reached(self, callback: NoticeCallback) -> NoticeCallback:
        """Call ``callback(message)`` for every ``max_retries_reached`` line."""
        self._callbacks["max_retries_reached"].append(callback)
        return callback

    # --- requests ---------------------------------------------------------------------

    async def enqueue(
        self,
        task_id: str,
        task_type: str,
        data: Any = None,
        *,
        max_retries: int | None = None,
        retry_after_hours: float | None = None,
        retry_backoff: str | None = None,
        retry_max_delay: float | None = None,
        auto_dedupe: bool | None = None,
        urgency_score: float | None = None,
        rate_limit_group: str | None = None,
        max_per_minute: int | None = None,
        execute_at: str | float | datetime | None = None,
        cron: str | None = None,
        webhook_url: str | None = None,
        max_execution_seconds: float | None = None,
        pool: str | None = None,
        trigger_after_ids: Iterable[str] | None = None,
    ) -> Message:
        """Enqueue and wait for the ``ack`` (durable, or ``deduplicated``); return it.

        ``data`` that is a string is stored verbatim; any other value as its JSON text.
        """
        if isinstance(execute_at, datetime):
            execute_at = execute_at.isoformat()
        options = {
            "max_retries": max_retries, "retry_after_hours": retry_after_hours,
            "retry_backoff": retry_backoff, "retry_max_delay": retry_max_delay,
            "auto_dedupe": auto_dedupe, "urgency_score": urgency_score,
            "rate_limit_group": rate_limit_group, "max_per_minute": max_per_minute,
            "execute_at": execute_at, "cron": cron, "webhook_url": webhook_url,
            "max_execution_seconds": max_execution_seconds, "pool": pool,
            "trigger_after_ids": None if trigger_after_ids is None else list(trigger_after_ids),
        }  # fmt: skip
        message = {"action": "enqueue", "task_id": task_id, "task_type": task_type,
                   "task_data": data}  # fmt: skip
        message.update((k, v) for k, v in options.items() if v is not None)
        return await self.request(message)

    async def stats(self) -> dict[str, Any]:
        """Queue counters and this daemon's status (the ``stats`` payload)."""
        reply = await self.request({"action": "stats"})
        return dict(reply["stats"])

    async def get(self, task_id: str) -> dict[str, Any]:
        """A task's latest state (an ended one with its ``result`` and ``attempts``,
        from the log's history); raises ``RemoteDispatchError`` (``unknown_task``)."""
        reply = await self.request({"action": "get", "task_id": task_id})
        return dict(reply["task"])

    async def cancel(self, task_id: str) -> Message:
        """Cancel a task that has not ended; return the ``ok`` reply."""
        return await self.request({"action": "cancel", "task_id": task_id})

    async def requeue(self, task_id: str) -> Message:
        """Put a dead-lettered task back in the queue; return the ``ok`` reply."""
        return await self.request({"action": "requeue", "task_id": task_id})

    async def progress(self, task_id: str, data: Any) -> None:
        """Report progress of a running task (no reply; the daemon echoes it)."""
        await self.send({"action": "progress", "task_id": task_id, "data": data})

    async def result(
        self, task_id: str, *, success: bool, error: str | None = None,
        attempt: int | None = None, result: Any = None, retry: bool = True,
    ) -> None:  # fmt: skip
        """Report an attempt's outcome by hand (handlers do this automatically). A
        success's ``result`` (a JSON value, at most ``MAX_RESULT_BYTES`` of it) is
        recorded with it; one that cannot be reports a failure saying why.
        ``retry=False``: a failure that dead-letters at once."""
        if success and result is not None:
            try:
                result = check_result(result)
            except ValueError as exc:
                success, error, result = False, str(exc), None
        message: Message = {"action": "result", "task_id": task_id,
                            "status": "success" if success else "error"}  # fmt: skip
        if result is not None:
            message["result"] = result
        if not success and error is not None:
            message["error_msg"] = error
        if attempt is not None:
            message["attempt"] = attempt
        if not success and not retry:
            message["retry"] = False
        await self.send(message)

    async def request(self, message: Mapping[str, Any]) -> Message:
        """Send ``message`` with a fresh ``request_id``; return the reply or raise.

        A line over the daemon's 1 MiB limit is refused here (``ProtocolError``): the
        daemon's ``line_too_long`` reply could not say which request it was about.
        """
        if self._exited.is_set() or self.process is None:
            raise DaemonExited("the daemon is not running")
        rid = next(self._ids)
        line = orjson.dumps({**message, "request_id": rid})
        if len(line) > MAX_LINE_BYTES:
            raise ProtocolError(f"message of {len(line)} bytes exceeds {MAX_LINE_BYTES} bytes",
                                task_id=message.get("task_id"))  # fmt: skip
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        try:
            await self.send_line(line + b"\n")
            reply = await future
        finally:
            self._pending.pop(rid, None)
        if reply.get("action") == "error":
            raise remote_error(reply)
        return reply

    # --- raw access -------------------------------------------------------------------

    async def send(self, message: Mapping[str, Any]) -> None:
        """Send one message as a JSON line."""
        await self.send_line(orjson.dumps(dict(message)) + b"\n")

    async def send_line(self, line: bytes) -> None:
        """Write raw bytes to the daemon's stdin (add the ``\\n`` yourself)."""
        stdin = self._proc().stdin
        if stdin is None or stdin.is_closing():
            raise DaemonExited("the daemon's stdin is closed")
        stdin.write(line)
        try:
            await stdin.drain()
        except ConnectionError as exc:
            raise DaemonExited(f"the daemon's stdin is closed: {exc}") from exc

    def _write(self, message: Mapping[str, Any]) -> None:
        stdin = self._proc().stdin
        if stdin is not None and not stdin.is_closing():
            stdin.write(orjson.dumps(dict(message)) + b"\n")

    async def lines(self) -> AsyncIterator[Message]:
        """Every message the daemon writes once iteration has started, until it closes
        stdout (use :meth:`subscribe` to catch replies to a line sent just before)."""
        queue: asyncio.Queue[Message | None] = asyncio.Queue()
        self._subscribers.append(queue)
        try:
            while (message := await queue.get()) is not None:
                yield message
        finally:
            self._subscribers.remove(queue)

    def subscribe(self) -> asyncio.Queue[Message | None]:
        """A queue of every message from now on (``None`` after the last one)."""
        queue: asyncio.Queue[Message | None] = asyncio.Queue()
        self._subscribers.append(queue)
        if self._exited.is_set():
            queue.put_nowait(None)
        return queue

    # --- reading ----------------------------------------------------------------------

    async def _read_stdout(self) -> None:
        stdout = self._proc().stdout
        assert stdout is not None
        try:
            while line := await stdout.readline():
                if self.transcript is not None:
                    self.transcript.append(line)
                try:
                    message = orjson.loads(line)
                except orjson.JSONDecodeError:
                    log.warning("daemon wrote a non-JSON line: %r", line[:200])
                    continue
                if isinstance(message, dict):
                    self._route(message)
        finally:
            self._exited.set()
            for queue in self._subscribers:
                queue.put_nowait(None)
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(DaemonExited("the daemon exited before replying"))

    async def _read_stderr(self) -> None:
        stderr = self._proc().stderr
        assert stderr is not None
        while line := await stderr.readline():
            text = line.decode("utf-8", "replace").rstrip()
            self.stderr_tail.append(text)
            log.debug("daemon: %s", text)

    def _route(self, message: Message) -> None:
        for queue in self._subscribers:
            queue.put_nowait(message)
        action = message.get("action")
        future = self._pending.get(message["request_id"]) if "request_id" in message else None
        if future is not None and not future.done():
            future.set_result(message)
        elif action == "execute":
            self._execute(message)
        elif action in NOTICES or action == "error":
            self.notices.put_nowait(message)
            for callback in self._callbacks.get(str(action), ()):
                try:
                    callback(message)
                except Exception:
                    log.exception("%s callback failed", action)

    def _execute(self, message: Message) -> None:
        handler = self.handlers.get(str(message.get("task_type")))
        if handler is None:
            return  # registered by hand (send_line): the caller answers
        run = asyncio.get_running_loop().create_task(self._run(handler, message))
        self._running.add(run)
        run.add_done_callback(self._running.discard)

    async def _run(self, handler: Handler, message: Message) -> None:
        task_id = str(message.get("task_id"))
        attempt = message.get("attempt")
        try:
            value = await handler(task_id, _json_data(message.get("task_data")))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = str(exc) or type(exc).__name__
            outcome = self.result(task_id, success=False, error=error, attempt=attempt,
                                  retry=not isinstance(exc, Fail))  # fmt: skip
        else:
            outcome = self.result(task_id, success=True, attempt=attempt, result=value)
        with contextlib.suppress(DaemonExited):
            await outcome
