"""examples/: the systemd unit and the Dockerfile the README's Operations section shows.

Checked as far as this machine can: both parsed (the unit by a key parser, the
Dockerfile by Docker's own parser through the ``dockerfile`` package), their command
lines parsed by our CLI, the unit by ``systemd-analyze verify`` when it is installed,
and the image built when a Docker daemon answers. What cannot run here is skipped
with the reason.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from snerd.tools.dashboard import dashboard

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "examples" / "snerd-dashboard.service"
DOCKERFILE = ROOT / "examples" / "Dockerfile"
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def unit_sections(text: str) -> dict[str, list[tuple[str, str]]]:
    """{section: [(key, value), ...]} (systemd keys may repeat, so no configparser)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        key, sep, value = line.partition("=")
        assert current is not None and sep, f"line {number} is not key=value: {raw!r}"
        current.append((key.strip(), value.strip()))
    return sections


def parses_as_our_command(argv: list[str]) -> None:
    """``argv`` runs our console script with arguments our CLI accepts."""
    assert Path(argv[0]).name in SCRIPTS, argv
    assert argv[1] == "dashboard", argv
    ctx = dashboard.make_context("dashboard", argv[2:])
    assert ctx.params["port"] == 8080


def test_the_unit_runs_the_dashboard_with_json_logs() -> None:
    sections = unit_sections(UNIT.read_text())
    assert set(sections) == {"Unit", "Service", "Install"}
    service = sections["Service"]
    keys = dict(service)
    parses_as_our_command(shlex.split(keys["ExecStart"]))
    environment = [v for k, v in service if k == "Environment"]
    assert "SNERD_LOG_FORMAT=json" in environment
    assert keys["User"] == "snerd" and keys["Restart"] == "on-failure"
    assert dict(sections["Install"])["WantedBy"] == "multi-user.target"


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed: the unit was only key-parsed")
    # verify checks that ExecStart's program exists: point it at this environment's
    script = Path(sys.executable).parent / "snerdmq"
    if not script.exists():
        pytest.skip(f"no {script}: install the package (pip install -e .) to verify the unit")
    text = UNIT.read_text().replace("/opt/snerd/bin/snerdmq", str(script))
    unit = tmp_path / UNIT.name
    unit.write_text(text)
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert UNIT.name not in done.stderr, done.stderr  # unknown keys and bad values warn


def test_the_dockerfile_runs_our_console_script_and_checks_health() -> None:
    dockerfile = pytest.importorskip("dockerfile")
    commands = dockerfile.parse_file(str(DOCKERFILE))
    by_name: dict[str, list[tuple[str, ...]]] = {}
    for command in commands:
        by_name.setdefault(command.cmd.upper(), []).append(command.value)
    assert by_name["FROM"][0][0].startswith("python:3.")
    [cmd] = [c for c in commands if c.cmd.upper() == "CMD"]
    assert cmd.json, "CMD in exec form, so SIGTERM reaches snerdmq"
    parses_as_our_command(list(cmd.value))
    assert "ENTRYPOINT" not in by_name
    assert by_name["EXPOSE"] == [("8080",)]
    assert by_name["ENV"][0][:2] == ("SNERD_LOG_FORMAT", "json")
    [health] = by_name["HEALTHCHECK"]
    assert "http://127.0.0.1:8080/healthz" in " ".join(health)
    assert by_name["USER"] == [("snerd",)]


def test_docker_builds_the_image() -> None:
    if shutil.which("docker") is None:
        pytest.skip("docker is not installed: the Dockerfile was only parsed")
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60)
    if info.returncode != 0:
        pytest.skip("no Docker daemon answers (docker info failed): the Dockerfile was "
                    "only parsed")  # fmt: skip
    done = subprocess.run(
        ["docker", "build", "-q", "-f", str(DOCKERFILE), "-t", "snerd-dashboard-test", str(ROOT)],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
