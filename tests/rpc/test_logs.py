"""SNERD_LOG_FORMAT / SNERD_LOG_LEVEL, in a fresh interpreter (logging is process-wide)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import logging, os
from snerd.rpc import logs
logs.configure(os.environ)
log = logging.getLogger("snerd.test")
log.info("hidden at warning")
log.warning("disk %s", "full", extra={"task": "t-1"})
try:
    1 / 0
except ZeroDivisionError:
    log.exception("handler crashed")
"""


def stderr_of(**env: str) -> list[str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    for name in ("SNERD_LOG_FORMAT", "SNERD_LOG_LEVEL"):
        if name not in env:
            full.pop(name, None)
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=full, capture_output=True,
                          text=True, timeout=30, check=True)  # fmt: skip
    assert done.stdout == ""  # stdout carries the wire protocol: never a log line
    return done.stderr.splitlines()


def test_json_format_writes_one_object_per_line() -> None:
    lines = stderr_of(SNERD_LOG_FORMAT="json")
    records = [orjson.loads(line) for line in lines]
    assert [(r["level"], r["logger"], r["message"]) for r in records] == [
        ("WARNING", "snerd.test", "disk full"),
        ("ERROR", "snerd.test", "handler crashed"),
    ]
    assert records[0]["task"] == "t-1"  # extra= fields become keys
    assert "ZeroDivisionError" in records[1]["exc_info"]  # the traceback stays in its line
    assert records[0]["timestamp"].endswith("+00:00")


def test_text_is_the_default() -> None:
    lines = stderr_of()
    assert lines[0] == "snerdmq WARNING snerd.test: disk full"
    assert any(line.startswith("Traceback") for line in lines)


@pytest.mark.parametrize(("name", "value"), [("SNERD_LOG_FORMAT", "yaml"),
                                             ("SNERD_LOG_LEVEL", "loud")])  # fmt: skip
def test_an_unknown_value_falls_back_with_a_warning(name: str, value: str) -> None:
    lines = stderr_of(**{name: value})
    assert f"{name}={value!r}" in lines[0]
    assert lines[1] == "snerdmq WARNING snerd.test: disk full"
