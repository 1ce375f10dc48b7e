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

@queue.task(max_retries=3)
async def resize(path: str, width: int = 640) -> dict[str, int]:
    return {"width": width}

@queue.task(name="count")
def count(text: str) -> int:
    return len(text)

async def tasks() -> None:
    handle = await resize.enqueue("a.png", width=320)
    reveal_type(handle)
    reveal_type(await handle.result(timeout=5))
    reveal_type(await count.options(id="c1").delay("abc"))
    await resize.enqueue(5)
    await resize.enqueue("a.png", height=3)
    await queue.result("a", timeout=5)
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
    # the task decorator keeps the function's parameter and return types
    handle, value, counted = (m for m in mine if "Revealed type" in m and "user.py:2" in m)
    assert 'TaskHandle[dict[str, int]]' in handle, mine
    assert 'Revealed type is "dict[str, int]"' in value, mine
    assert 'TaskHandle[int]' in counted, mine
    assert any("user.py:24: error: Argument 1" in m and '"int"; expected "str"' in m
               for m in mine), mine  # fmt: skip
    assert any('user.py:25: error: Unexpected keyword argument "height"' in m for m in mine), mine
    assert not any("user.py:26" in m for m in mine), mine
