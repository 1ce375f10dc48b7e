"""The daemon's storage when started without an argument: ``$SNERD_STORAGE``, else
``.snerdata`` in its working directory (issue 10: a URL or a dir wherever one goes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import forkserver
import orjson

ROOT = Path(__file__).resolve().parents[2]
ENQUEUE = b'{"action":"enqueue","task_id":"e1","task_type":"t","task_data":"{}"}\n'


def _run(cwd: Path, **env: str) -> subprocess.CompletedProcess[bytes]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SNERD_")}
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full.get("PYTHONPATH")]))
    code = "import sys; from snerd.daemon import main; sys.exit(main([]))"
    return forkserver.run([sys.executable, "-c", code], input=ENQUEUE, cwd=cwd,
                          env={**full, **env}, capture_output=True, timeout=60)  # fmt: skip


def _acked(done: subprocess.CompletedProcess[bytes]) -> list[str]:
    lines = [orjson.loads(line) for line in done.stdout.splitlines()]
    return [m["task_id"] for m in lines if m.get("action") == "ack"]


def test_without_an_argument_the_daemon_runs_on_snerd_storage(tmp_path: Path) -> None:
    done = _run(tmp_path, SNERD_STORAGE=str(tmp_path / "elsewhere"))
    assert done.returncode == 0, done.stderr
    assert _acked(done) == ["e1"]
    assert b'"taskId":"e1"' in (tmp_path / "elsewhere" / "tasks" / "tasks.log").read_bytes()
    assert not (tmp_path / ".snerdata").exists()


def test_without_either_the_daemon_runs_on_snerdata_here(tmp_path: Path) -> None:
    done = _run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert _acked(done) == ["e1"]
    assert (tmp_path / ".snerdata" / "tasks" / "tasks.log").exists()
