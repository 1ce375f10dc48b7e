"""The README's Operations examples run as written (metrics, health, JSON logs)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
SECTION = README[README.index("## Operations") :]


def _block(language: str, after: str) -> str:
    part = SECTION[SECTION.index(after) :]
    match = re.search(rf"```{language}\n(.*?)```", part, re.S)
    assert match, (language, after)
    return match.group(1)


def test_the_metrics_example_runs_and_its_totals_survive_a_restart(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(_block("python", "### Metrics and health"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNERD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    outputs = []
    for _ in range(2):  # the second run meets the first run's storage
        done = subprocess.run([sys.executable, "app.py"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(done.stdout.splitlines())
    for out, total in zip(outputs, ("3.0", "6.0"), strict=True):
        assert "healthz 200 ok" in out
        assert f'snerd_tasks_enqueued_total{{type="resize"}} {total}' in out
        assert sum(line.startswith("resizing img-") for line in out) == 3


def test_the_json_log_line_shown_is_what_the_daemon_writes() -> None:
    shown = orjson.loads(_block("json", "### Logs"))
    assert set(shown) == {"timestamp", "level", "logger", "message"}
    command = _block("sh", "### Logs")
    assert "SNERD_LOG_FORMAT=json" in command
    code = "import logging, os; from snerd.rpc import logs; logs.configure(os.environ); " \
           "logging.getLogger('snerd.daemon').info('dashboard at x')"  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SNERD_LOG_FORMAT": "json",
           "SNERD_LOG_LEVEL": "info"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=30, check=True)  # fmt: skip
    written = orjson.loads(done.stderr)
    assert set(written) == set(shown)
    assert (written["level"], written["logger"]) == (shown["level"], shown["logger"])
