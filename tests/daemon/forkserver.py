"""Spawn test daemons by forking a process that has already imported snerd.

Every daemon test used to pay a fresh interpreter plus snerd's imports (~0.2-0.3 s
of CPU on the 2-core VMs) before its first line, a few hundred times per suite. A
fork server, started once per test session, imports ``snerd.rpc.daemon`` and
forks one child per daemon; the child takes the pipes the test made, the
environment, working directory and argv the test asked for, and runs exactly what
the console script runs (``snerd.rpc.daemon.main``). Each daemon is still its own
process: real stdio pipes, real signals (SIGTERM drains, SIGKILL kills), its own
pid, liveness lock and exit code, which the server reports when it reaps the child.

The daemons of tests about the process (``@pytest.mark.process``) and the clients
tests build themselves come from here; the other daemon tests serve theirs in the
test's own process (``daemonkit.InProcessClient``). What forking skips is interpreter
start-up and imports (including aiohttp and croniter, which a daemon imports on first
use), which no daemon test is about (``tests/tools/test_replay_cli.py`` checks the
daemon's imports in a fresh interpreter; the official SDK, the tests of
``snerd.Client``'s own start-up and the stdin-redirect tests still exec real
processes). ``SNERD_TEST_SPAWN=fork`` forks every daemon of the ``spawn`` fixture,
``=exec`` execs every one.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


PRELOAD = ("aiohttp", "croniter", "snerd.dispatcher.webhooks")
"""Imported by the server too: the daemon imports them lazily, on its first webhook
or cron task, and each test would pay that import again."""


def enabled() -> bool:
    """Fork unless told to exec; Linux only (SOCK_SEQPACKET with SCM_RIGHTS)."""
    return os.environ.get("SNERD_TEST_SPAWN", "auto") != "exec" and sys.platform == "linux"


# --- the server (runs in its own process) -------------------------------------------------


def _server(fd: int) -> None:  # pragma: no cover - runs in the fork server process
    import selectors

    import snerd.rpc.daemon  # noqa: F401  (the point: imported once, before any fork)

    for lazy in PRELOAD:  # what daemons import on first use (webhooks, cron)
        __import__(lazy)

    sock = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the test session ends us (socket EOF)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ, "request")
    selector.register(wake_r, selectors.EVENT_READ, "child")

    def send(message: dict[str, Any]) -> None:
        sock.sendall(json.dumps(message).encode())

    while True:
        for key, _ in selector.select():
            if key.data == "child":
                while True:
                    try:
                        if not os.read(wake_r, 4096):
                            break
                    except BlockingIOError:
                        break
                _reap(send)
                continue
            data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
            if not data:  # the session is over
                return
            request = json.loads(data)
            pid = os.fork()
            if pid == 0:
                _child(request, fds, (fd, wake_r, wake_w))
            for received in fds:
                os.close(received)
            send({"id": request["id"], "pid": pid})


def _reap(send: Any) -> None:  # pragma: no cover - fork server
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        send({"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _child(  # pragma: no cover - runs in a forked daemon
    request: dict[str, Any], fds: list[int], server_fds: Sequence[int]
) -> None:
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL if signum == signal.SIGCHLD
                          else signal.default_int_handler)  # fmt: skip
        for server_fd in server_fds:
            os.close(server_fd)
        for target, received in enumerate(fds):
            os.dup2(received, target)
        for received in fds:
            if received > 2:
                os.close(received)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.argv = list(request["argv"])
        from snerd.rpc.daemon import main

        code = main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


# --- the test side ---------------------------------------------------------------------------


class ForkServer:
    """The session's fork server and the thread that reads its replies."""

    def __init__(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}  # fmt: skip
        code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); " \
               "import forkserver; forkserver._server(int(sys.argv[1]))"  # fmt: skip
        self.process = subprocess.Popen(
            [sys.executable, "-c", code, str(theirs.fileno())], pass_fds=[theirs.fileno()],
            env=env, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        theirs.close()
        self.sock = mine
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.replies: dict[int, concurrent.futures.Future[int]] = {}
        self.exits: dict[int, int] = {}
        self.waiters: dict[int, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[int]]]] = {}
        threading.Thread(target=self._read, name="forkserver-replies", daemon=True).start()

    def _read(self) -> None:
        while data := self.sock.recv(1 << 16):
            message = json.loads(data)
            with self.lock:
                if "exit" in message:
                    pid, code = message["exit"], message["code"]
                    self.exits[pid] = code
                    for loop, future in self.waiters.pop(pid, []):
                        loop.call_soon_threadsafe(_settle, future, code)
                else:
                    self.replies.pop(message["id"]).set_result(message["pid"])

    def fork(self, argv: Sequence[str], env: Mapping[str, str], cwd: str,
             fds: Sequence[int]) -> concurrent.futures.Future[int]:  # fmt: skip
        request_id = next(self.ids)
        reply: concurrent.futures.Future[int] = concurrent.futures.Future()
        with self.lock:
            self.replies[request_id] = reply
        message = {"id": request_id, "argv": list(argv), "env": dict(env), "cwd": cwd}
        socket.send_fds(self.sock, [json.dumps(message).encode()], list(fds))
        return reply

    def exit_code(self, pid: int) -> int | None:
        with self.lock:
            return self.exits.get(pid)

    def exited(self, pid: int) -> asyncio.Future[int]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        with self.lock:
            if pid in self.exits:
                future.set_result(self.exits[pid])
            else:
                self.waiters.setdefault(pid, []).append((loop, future))
        return future

    def close(self) -> None:
        # shutdown, not only close: the reply thread is blocked in recv on this socket,
        # and a close() alone leaves the socket open until that recv returns, so the
        # server would never see the end of the session (it waited 10 s, then died).
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _settle(future: asyncio.Future[int], code: int) -> None:
    if not future.done():
        future.set_result(code)


_SERVER: ForkServer | None = None


def server() -> ForkServer:
    global _SERVER
    if _SERVER is None or _SERVER.process.poll() is not None:
        _SERVER = ForkServer()
        atexit.register(_SERVER.close)
    return _SERVER


class ForkedProcess:
    """The parts of :class:`asyncio.subprocess.Process` that ``snerd.Client`` uses."""

    def __init__(self, srv: ForkServer, pid: int, stdin: asyncio.StreamWriter,
                 stdout: asyncio.StreamReader, stderr: asyncio.StreamReader) -> None:  # fmt: skip
        self._server = srv
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr

    @property
    def returncode(self) -> int | None:
        return self._server.exit_code(self.pid)

    async def wait(self) -> int:
        code = await self._server.exited(self.pid)
        if not self.stdin.is_closing():
            self.stdin.close()
        return code

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:  # never signal a reaped (possibly reused) pid
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


async def spawn(argv: Sequence[str], env: Mapping[str, str], *, limit: int) -> ForkedProcess:
    """Fork a daemon with ``argv`` (``sys.argv`` as the daemon sees it) and ``env``."""
    srv = server()
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    try:
        reply = srv.fork(argv, env, os.getcwd(), [stdin_r, stdout_w, stderr_w])
    finally:
        for fd in (stdin_r, stdout_w, stderr_w):
            os.close(fd)
    pid = await asyncio.wrap_future(reply)
    stdout = await read_stream(stdout_r, limit)
    stderr = await read_stream(stderr_r, limit)
    return ForkedProcess(srv, pid, await write_stream(stdin_w), stdout, stderr)


async def read_stream(fd: int, limit: int) -> asyncio.StreamReader:
    """The test's reading end of a daemon's output pipe, as asyncio streams it."""
    reader = asyncio.StreamReader(limit=limit)
    await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", 0)
    )
    return reader


async def write_stream(fd: int) -> asyncio.StreamWriter:
    """The test's writing end of a daemon's stdin pipe, as asyncio streams it."""
    loop = asyncio.get_running_loop()
    protocol = asyncio.StreamReaderProtocol(asyncio.StreamReader())
    transport, _ = await loop.connect_write_pipe(lambda: protocol, os.fdopen(fd, "wb", 0))
    return asyncio.StreamWriter(transport, protocol, None, loop)
