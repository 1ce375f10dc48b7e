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
``snerd.Client``'s own start-up and the README's examples still exec real processes).
``SNERD_TEST_SPAWN=fork`` forks every daemon of the ``spawn`` fixture, ``=exec`` execs
every one.

Tests that run ``python -c CODE ...`` or ``python -m snerd.cli ...`` as a child (other
processes appending to a log, the CLI's exit codes, ``snerdmq worker``, a daemon on a
terminal) fork them here too, through :func:`run`, :func:`popen` and
:func:`create_subprocess_exec`, which take the arguments ``subprocess`` and ``asyncio``
take: the child runs the code, or the module as ``__main__`` as ``-m`` does, with the
given argv, environment (``PYTHONPATH`` entries joined to ``sys.path``), working
directory and stdio, and exits through the ``atexit`` hooks it registered. Forked, such
a child starts in ~10 ms instead of an interpreter's ~120 ms. With ``=exec`` they are
exec'd as written.
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


PRELOAD = ("aiohttp", "croniter", "snerd.dispatcher.webhooks", "click", "rich.console")
"""Imported by the server too: the daemon imports them lazily, on its first webhook
or cron task, and the CLI's commands on their first use (click, rich); each child
would pay those imports again."""


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


def _child(  # pragma: no cover - runs in a forked child
    request: dict[str, Any], fds: list[int], server_fds: Sequence[int]
) -> None:
    code: int = 1
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
        code = _run(request)
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        if request.get("run", "daemon") != "daemon":  # a script's exit, as the interpreter's:
            import atexit  # its threads joined, then its atexit hooks
            import threading

            with contextlib.suppress(Exception):
                threading._shutdown()  # type: ignore[attr-defined]
            atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _run(request: dict[str, Any]) -> int:  # pragma: no cover - runs in a forked child
    """What the child runs: the daemon's ``main``, ``-c CODE`` or ``-m snerd.cli``."""
    kind = request.get("run", "daemon")
    if kind == "daemon":
        from snerd.rpc.daemon import main

        return main()
    for entry in reversed(request["env"].get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:  # where a fresh interpreter would put them
            sys.path.insert(1, entry)
    if kind == "code":
        sys.path[0] = ""
        exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})
    else:
        import runpy

        sys.path[0] = os.getcwd()
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    return 0


def _exit_code(exc: SystemExit) -> int:  # pragma: no cover - runs in a forked child
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)  # as the interpreter does with sys.exit("message")
    return 1


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
        self.exit_seen = threading.Condition(self.lock)
        threading.Thread(target=self._read, name="forkserver-replies", daemon=True).start()

    def _read(self) -> None:
        while data := self.sock.recv(1 << 16):
            message = json.loads(data)
            with self.lock:
                if "exit" in message:
                    pid, code = message["exit"], message["code"]
                    self.exits[pid] = code
                    self.exit_seen.notify_all()
                    for loop, future in self.waiters.pop(pid, []):
                        loop.call_soon_threadsafe(_settle, future, code)
                else:  # a new child: an exit kept for an earlier child of its pid is stale
                    self.exits.pop(message["pid"], None)  # (its reply precedes its exit)
                    self.replies.pop(message["id"]).set_result(message["pid"])

    def fork(self, argv: Sequence[str], env: Mapping[str, str], cwd: str,
             fds: Sequence[int], **run: str) -> concurrent.futures.Future[int]:  # fmt: skip
        """Fork a child on ``fds`` (its stdin, stdout, stderr); ``run`` says what it
        runs (``_run``: the daemon by default)."""
        request_id = next(self.ids)
        reply: concurrent.futures.Future[int] = concurrent.futures.Future()
        with self.lock:
            self.replies[request_id] = reply
        message = {"id": request_id, "argv": list(argv), "env": dict(env), "cwd": cwd, **run}
        socket.send_fds(self.sock, [json.dumps(message).encode()], list(fds))
        return reply

    def exit_code(self, pid: int) -> int | None:
        with self.lock:
            return self.exits.get(pid)

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        """Block until ``pid`` has exited (its code), or ``timeout`` passed (None)."""
        with self.lock:
            self.exit_seen.wait_for(lambda: pid in self.exits, timeout)
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


class _Child:
    """A forked child's pid, exit code (as the server reaped it) and signals."""

    def __init__(self, srv: ForkServer, pid: int) -> None:
        self._server = srv
        self.pid = pid

    @property
    def returncode(self) -> int | None:
        return self._server.exit_code(self.pid)

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:  # never signal a reaped (possibly reused) pid
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkedProcess(_Child):
    """The parts of :class:`asyncio.subprocess.Process` that ``snerd.Client`` uses."""

    def __init__(self, srv: ForkServer, pid: int, stdin: asyncio.StreamWriter | None,
                 stdout: asyncio.StreamReader | None,
                 stderr: asyncio.StreamReader | None) -> None:  # fmt: skip
        super().__init__(srv, pid)
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr

    async def wait(self) -> int:
        code = await self._server.exited(self.pid)
        if self.stdin is not None and not self.stdin.is_closing():
            self.stdin.close()
        return code

    async def communicate(self, input: bytes | None = None) -> tuple[Any, Any]:
        """Write ``input`` and close stdin, read stdout and stderr to their ends, wait."""
        if self.stdin is not None:
            if input:
                self.stdin.write(input)
                with contextlib.suppress(ConnectionError):
                    await self.stdin.drain()
            self.stdin.close()

        async def read(stream: asyncio.StreamReader | None) -> bytes | None:
            return None if stream is None else await stream.read()

        out, err = await asyncio.gather(read(self.stdout), read(self.stderr))
        await self.wait()
        return out, err


async def spawn(argv: Sequence[str], env: Mapping[str, str], *, limit: int) -> ForkedProcess:
    """Fork a daemon with ``argv`` (``sys.argv`` as the daemon sees it) and ``env``."""
    stdio = _Stdio(subprocess.PIPE, subprocess.PIPE, subprocess.PIPE)
    return await _process(_fork(argv, env, os.getcwd(), stdio), stdio, limit)


async def _process(forked: tuple[ForkServer, concurrent.futures.Future[int]], stdio: _Stdio,
                   limit: int) -> ForkedProcess:  # fmt: skip
    """The child the server forked, with asyncio streams on the test's ends of its pipes."""
    srv, reply = forked
    pid = await asyncio.wait_for(asyncio.wrap_future(reply), FORK_TIMEOUT)
    w, r, e = stdio.ours
    return ForkedProcess(
        srv, pid, None if w is None else await write_stream(w),
        None if r is None else await read_stream(r, limit),
        None if e is None else await read_stream(e, limit),
    )  # fmt: skip


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


# --- python -c / python -m snerd.cli, forked ----------------------------------------------


FORK_TIMEOUT = 60.0
"""Seconds to wait for the server to say it forked a child (a server that died mid-way
fails the test instead of hanging it)."""

MODULES = ("snerd.cli",)
"""What ``python -m`` may run forked (imported fresh in the child, as ``__main__``)."""


def _what(args: Sequence[str]) -> dict[str, str]:
    """The fork request for ``[sys.executable, "-c", CODE, *rest]`` or
    ``[sys.executable, "-m", MODULE, *rest]``; anything else is a test's mistake."""
    if len(args) >= 3 and args[0] == sys.executable and args[1] == "-c":
        return {"run": "code", "code": args[2]}
    if len(args) >= 3 and args[0] == sys.executable and args[1] == "-m" and args[2] in MODULES:
        return {"run": "module", "module": args[2]}
    raise ValueError(f"only python -c CODE or -m {'/'.join(MODULES)} is forked: {args[:3]}")


def _argv(args: Sequence[str]) -> list[str]:
    return ["-c", *args[3:]] if args[1] == "-c" else [args[2], *args[3:]]


class _Stdio:
    """The child's three descriptors from ``subprocess``-style specs (None: the test's
    own, PIPE, DEVNULL, STDOUT for stderr, a descriptor or a file); ``ours`` holds the
    test's ends of the pipes made, ``theirs`` what to close once the child has them."""

    def __init__(self, stdin: Any, stdout: Any, stderr: Any) -> None:
        self.ours: list[int | None] = [None, None, None]
        self.theirs: list[int] = []
        self.fds = [self._one(0, stdin), self._one(1, stdout)]
        self.fds.append(self.fds[1] if stderr == subprocess.STDOUT else self._one(2, stderr))

    def _one(self, index: int, spec: Any) -> int:
        if spec is None:
            return index
        if spec == subprocess.PIPE:
            r, w = os.pipe()
            child, mine = (r, w) if index == 0 else (w, r)
            self.ours[index] = mine
            self.theirs.append(child)
            return child
        if spec == subprocess.DEVNULL:
            fd = os.open(os.devnull, os.O_RDWR)
            self.theirs.append(fd)
            return fd
        return spec if isinstance(spec, int) else int(spec.fileno())

    def close_theirs(self) -> None:
        for fd in self.theirs:
            os.close(fd)
        self.theirs = []


def _fork(argv: Sequence[str], env: Mapping[str, str], cwd: str, stdio: _Stdio,
          **run: str) -> tuple[ForkServer, concurrent.futures.Future[int]]:  # fmt: skip
    """Ask the server for a child on ``stdio`` (:meth:`ForkServer.fork`); the test's
    copies of the child's ends are closed once sent."""
    srv = server()
    try:
        reply = srv.fork(argv, env, cwd, stdio.fds, **run)
    finally:
        stdio.close_theirs()
    return srv, reply


def _fork_child(args: Sequence[str], env: Mapping[str, str] | None, cwd: Any,
                stdio: _Stdio) -> tuple[ForkServer, concurrent.futures.Future[int]]:  # fmt: skip
    """:func:`_fork` for ``subprocess``-style arguments (``python -c``/``-m``)."""
    return _fork(_argv(args), dict(os.environ if env is None else env),
                 os.fspath(cwd) if cwd is not None else os.getcwd(), stdio,
                 **_what(args))  # fmt: skip


class Forked(_Child):
    """The parts of :class:`subprocess.Popen` the tests use, for a forked child."""

    def __init__(self, args: Sequence[str], *, env: Mapping[str, str] | None = None,
                 cwd: Any = None, stdin: Any = None, stdout: Any = None, stderr: Any = None,
                 text: bool = False, close_fds: bool = True) -> None:  # fmt: skip
        # close_fds: a forked child has no descriptor but its three (the server's closed)
        self.args = list(args)
        _what(args)  # refused before any pipe is made
        stdio = _Stdio(stdin, stdout, stderr)
        srv, reply = _fork_child(args, env, cwd, stdio)
        super().__init__(srv, reply.result(timeout=FORK_TIMEOUT))
        self.text = text
        self.stdin, self.stdout, self.stderr = (
            _open(fd, writing=index == 0, text=text) for index, fd in enumerate(stdio.ours)
        )

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self._server.wait_exit(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        """Write ``input`` and close stdin, read stdout and stderr to their ends (in
        threads, so that neither pipe fills while the other is read), then wait."""
        results: dict[int, Any] = {}

        def drain(index: int, stream: Any) -> None:
            results[index] = stream.read()
            stream.close()

        readers = [threading.Thread(target=drain, args=(i, s), daemon=True)
                   for i, s in ((1, self.stdout), (2, self.stderr)) if s is not None]  # fmt: skip
        for reader in readers:
            reader.start()
        if self.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                if input:
                    self.stdin.write(input)
                self.stdin.close()
        for reader in readers:
            reader.join(timeout)
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(timeout)
        return results.get(1), results.get(2)

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self.wait()


def _open(fd: int | None, *, writing: bool, text: bool) -> Any:
    """The test's end of a pipe as :class:`subprocess.Popen` opens it."""
    if fd is None:
        return None
    if text:
        return os.fdopen(fd, "w" if writing else "r", encoding="utf-8")
    return os.fdopen(fd, "wb", buffering=0) if writing else os.fdopen(fd, "rb")


def popen(args: Sequence[str], **kwargs: Any) -> Forked | subprocess.Popen[Any]:
    """:class:`subprocess.Popen` for ``python -c``/``-m snerd.cli``: forked, or exec'd
    under ``SNERD_TEST_SPAWN=exec``."""
    if not enabled():
        return subprocess.Popen(args, **kwargs)
    return Forked(args, **kwargs)


def run(args: Sequence[str], *, input: Any = None, capture_output: bool = False,
        timeout: float | None = None, check: bool = False,
        **kwargs: Any) -> subprocess.CompletedProcess[Any]:  # fmt: skip
    """:func:`subprocess.run` for ``python -c``/``-m snerd.cli``, forked."""
    if not enabled():
        return subprocess.run(args, input=input, capture_output=capture_output,
                              timeout=timeout, check=check, **kwargs)  # fmt: skip
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with Forked(args, **kwargs) as child:
        try:
            out, err = child.communicate(input, timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            raise
        code = child.wait()
    done = subprocess.CompletedProcess(list(args), code, out, err)
    if check:
        done.check_returncode()
    return done


async def create_subprocess_exec(*args: str, env: Mapping[str, str] | None = None,
                                 cwd: Any = None, stdin: Any = None, stdout: Any = None,
                                 stderr: Any = None,
                                 limit: int = 1 << 16) -> Any:  # fmt: skip
    """:func:`asyncio.create_subprocess_exec` for ``python -c``/``-m snerd.cli``, forked:
    a :class:`ForkedProcess` with asyncio streams on the pipes asked for."""
    if not enabled():
        return await asyncio.create_subprocess_exec(
            *args, env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr, limit=limit
        )
    _what(args)  # refused before any pipe is made
    stdio = _Stdio(stdin, stdout, stderr)
    return await _process(_fork_child(args, env, cwd, stdio), stdio, limit)
