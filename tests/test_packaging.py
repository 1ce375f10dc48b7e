"""Packaging (issues 9.14, 9.15): license, metadata, the bench extra, and an sdist that
carries what the README links to."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD_SDIST = (
    "import sys; from setuptools import build_meta as m; print(m.build_sdist(sys.argv[1]))"
)
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_license_is_an_spdx_string_with_its_file() -> None:
    assert PROJECT["license"] == "MIT"  # PEP 639: the table form is deprecated
    assert PROJECT["license-files"] == ["LICENSE"]
    assert "MIT License" in (ROOT / "LICENSE").read_text()


def test_classifiers_and_urls() -> None:
    classifiers = PROJECT["classifiers"]
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert "Typing :: Typed" in classifiers
    assert not any(c.startswith("License ::") for c in classifiers)  # PEP 639 forbids both
    assert PROJECT["urls"]


def test_the_bench_extra_installs_the_peer_queue() -> None:
    bench = PROJECT["optional-dependencies"]["bench"]
    assert any(req.startswith("huey") for req in bench)
    readme = (ROOT / "README.md").read_text()
    assert "pip install -e '.[bench]'" in readme


def test_the_sdist_carries_specs_license_and_readme(tmp_path: Path) -> None:
    setuptools = pytest.importorskip("setuptools")
    major = int(setuptools.__version__.split(".")[0])
    if major < 77:
        pytest.skip(f"setuptools {setuptools.__version__} < 77 (the test extra installs it)")
    done = subprocess.run(
        [sys.executable, "-c", BUILD_SDIST, str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    name = done.stdout.strip().splitlines()[-1]
    with tarfile.open(tmp_path / name) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    for needed in ("LICENSE", "README.md", "specs/protocol.md", "specs/log-format.md",
                   "specs/log-storage.md", "snerd/dashboard/static/app.js", "snerd/py.typed",
                   "examples/Dockerfile", "examples/snerd-dashboard.service"):
        assert needed in names, needed
