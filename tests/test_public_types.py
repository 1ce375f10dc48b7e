"""Users' type checkers see the real ``snerd.Queue`` and ``snerd.Client`` (issue 9.12)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

USER_CODE = """\
import snerd

queue = snerd.Queue(".snerdata")
reveal_type(queue)
reveal_type(snerd.Client(".snerdata"))
wrong: int = queue.stats()

async def main() -> None:
    await queue.enqueue("a", "t", {}, urgency=10)
"""


def test_mypy_sees_the_real_types(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    (tmp_path / "user.py").write_text(USER_CODE)
    env = {**os.environ, "MYPYPATH": str(ROOT)}  # snerd/ as a user's checker finds it
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"),
         "--no-error-summary", "user.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    mine = [line for line in done.stdout.splitlines() if line.startswith("user.py")]
    assert 'Revealed type is "snerd.embedded.Queue"' in mine[0], mine
    assert 'Revealed type is "snerd.rpc.client.Client"' in mine[1], mine
    assert any("user.py:6: error: Incompatible types in assignment" in m for m in mine), mine
    assert any('user.py:9: error: Unexpected keyword argument "urgency"' in m for m in mine), mine
