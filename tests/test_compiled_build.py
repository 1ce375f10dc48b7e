"""The compiled core (``setup.py``): which modules a wheel compiles with mypyc, and
that nothing else ever compiles them. ``.ci/run`` runs the whole suite a second time
against a build of them (its step "the suite again, on the mypyc-compiled core")."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import setup  # noqa: E402  (setup.py: COMPILED and ext_modules, no setup() on import)

sys.path.remove(str(ROOT))


def test_the_compiled_modules_are_the_pure_core() -> None:
    assert setup.COMPILED
    for path in setup.COMPILED:
        assert (ROOT / path).is_file(), path
        assert path.startswith("snerd/projections/"), path  # pure: no I/O to compile around
        module = importlib.import_module(path[:-3].replace("/", "."))
        assert module.__name__.startswith("snerd.projections.")


@pytest.mark.parametrize("argv", [["setup.py", "egg_info"], ["setup.py", "sdist"],
                                  ["setup.py", "editable_wheel", "--dist-dir", "x"]])  # fmt: skip
def test_only_a_build_compiles(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> None:
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.delenv("SNERD_PURE", raising=False)
    assert setup.ext_modules() == []


def test_snerd_pure_builds_without_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["setup.py", "bdist_wheel"])
    monkeypatch.setenv("SNERD_PURE", "1")
    assert setup.ext_modules() == []


def test_a_wheel_build_compiles_every_listed_module(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mypyc")  # the test extra installs mypy, which ships it
    monkeypatch.setattr(sys, "argv", ["setup.py", "bdist_wheel"])
    monkeypatch.delenv("SNERD_PURE", raising=False)
    monkeypatch.chdir(ROOT)  # mypycify reads the paths relative to the tree
    extensions = setup.ext_modules()
    names = {ext.name for ext in extensions}
    for path in setup.COMPILED:
        assert path[:-3].replace("/", ".") in names
    assert all(ext.optional for ext in extensions)  # no compiler: the pure modules
