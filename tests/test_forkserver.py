"""The fork server's children behave as the ``python -c``/``-m`` processes they replace.

Every check runs forked and exec'd (``SNERD_TEST_SPAWN=exec``) and asks for the same
result, so a test that moved to ``forkserver.run`` cannot pass on a difference between
the two.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import forkserver
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=["fork", "exec"])
def how(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "fork" and not forkserver.enabled():
        pytest.skip("forking is off here (SNERD_TEST_SPAWN=exec or not Linux)")
    if request.param == "exec":
        monkeypatch.setenv("SNERD_TEST_SPAWN", "exec")
    return str(request.param)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SNERD_TEST_SPAWN"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return {**env, **extra}


def test_code_gets_its_argv_stdin_cwd_and_environment(how: str, tmp_path: Path) -> None:
    code = ("import os, sys; data = sys.stdin.read(); "
            "print(sys.argv, data.upper(), os.getcwd(), os.environ['PROBE'])")  # fmt: skip
    done = forkserver.run([sys.executable, "-c", code, "a", "b"], input="hi", env=_env(PROBE="p"),
                          cwd=tmp_path, capture_output=True, text=True, timeout=30)  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"['-c', 'a', 'b'] HI {tmp_path} p\n"


def test_exit_codes_messages_and_tracebacks(how: str) -> None:
    def run(code: str) -> subprocess.CompletedProcess[str]:
        return forkserver.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                              text=True, timeout=30)  # fmt: skip

    assert run("import sys; sys.exit(3)").returncode == 3
    said = run("import sys; sys.exit('no storage here')")
    assert (said.returncode, said.stderr) == (1, "no storage here\n")
    crashed = run("raise ValueError('boom')")
    assert crashed.returncode == 1 and "ValueError: boom" in crashed.stderr


def test_atexit_hooks_and_threads_finish_before_the_exit(how: str) -> None:
    code = (
        "import atexit, threading, time\n"
        "atexit.register(lambda: print('atexit'))\n"
        "def late():\n"
        "    time.sleep(0.05)  # still running when the script's last line has run\n"
        "    print('thread')\n"
        "threading.Thread(target=late).start()\n"
    )
    done = forkserver.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                          text=True, timeout=30)  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "thread\natexit\n"), done.stderr


def test_pythonpath_of_the_environment_is_importable(how: str, tmp_path: Path) -> None:
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "probe_module.py").write_text("NAME = 'found'\n")
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "extra"), env["PYTHONPATH"]])
    done = forkserver.run([sys.executable, "-c", "import probe_module; print(probe_module.NAME)"],
                          env=env, capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.stdout == "found\n", done.stderr


def test_the_cli_runs_as_dash_m_does(how: str, tmp_path: Path) -> None:
    done = forkserver.run([sys.executable, "-m", "snerd.cli", "--version"], env=_env(),
                          cwd=tmp_path, capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 0 and "snerdmq" in done.stdout, done.stderr
    usage = forkserver.run([sys.executable, "-m", "snerd.cli", "dlq", "requeue", "-s",
                            str(tmp_path / "q")], env=_env(), capture_output=True, text=True,
                           timeout=30)  # fmt: skip
    assert usage.returncode == 2 and "--all" in usage.stderr


async def test_asyncio_children_stream_and_signal(how: str) -> None:
    import asyncio
    import signal

    code = "import sys\nfor line in sys.stdin:\n    print(line.strip()[::-1], flush=True)\n"
    proc = await forkserver.create_subprocess_exec(
        sys.executable, "-c", code, env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"abc\n")
    await proc.stdin.drain()
    assert await asyncio.wait_for(proc.stdout.readline(), 30) == b"cba\n"
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), 30) == -signal.SIGTERM


def test_other_commands_are_not_forked() -> None:
    if not forkserver.enabled():
        pytest.skip("forking is off here")
    with pytest.raises(ValueError, match="only python -c"):
        forkserver.run(["echo", "hi"])
    with pytest.raises(ValueError, match="only python -c"):
        forkserver.run([sys.executable, "-m", "json.tool"])
