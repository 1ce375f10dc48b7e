"""The compiled core (``setup.py``): which modules a wheel compiles with mypyc, and
that nothing else ever compiles them. ``.ci/run`` runs the whole suite a second time
against a build of them (its step "the suite again, on the mypyc-compiled core")."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import setup  # noqa: E402  (setup.py: COMPILED and ext_modules, no setup() on import)

sys.path.remove(str(ROOT))


PURE = ("snerd/projections/", "snerd/rpc/protocol.py", "snerd/rpc/replies.py",
        "snerd/rpc/result.py", "snerd/rpc/enqueue.py")
"""Where the pure part of the compiled core lives: what pyproject.toml's contracts keep
pure (``pure-core``, ``pure-wire``)."""


def test_the_compiled_modules_are_the_pure_core_and_the_engine() -> None:
    assert setup.PURE and setup.COMPILED == setup.PURE + setup.GLUE
    for path in setup.PURE:
        assert (ROOT / path).is_file(), path
        assert path.startswith(PURE), path
        module = importlib.import_module(path[:-3].replace("/", "."))
        assert module.__name__.startswith(("snerd.projections.", "snerd.rpc."))
    assert setup.GLUE == (
        "snerd/dispatcher/engine.py", "snerd/dispatcher/dispatch.py", "snerd/dispatcher/runs.py",
        "snerd/dispatcher/flags.py", "snerd/eventlog/chain.py", "snerd/eventlog/codec.py",
        "snerd/eventlog/batch.py", "snerd/eventlog/base.py", "snerd/eventlog/batching.py",
        "snerd/eventlog/filelog.py", "snerd/eventlog/locking.py", "snerd/rpc/output.py",
        "snerd/rpc/handlers.py", "snerd/rpc/reader.py",
    )  # fmt: skip


def test_the_pure_modules_are_under_a_purity_contract() -> None:
    """A module compiled for being pure is one lint-imports holds to it."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    held = {m for c in contracts["contracts"] if c["id"] in ("pure-core", "pure-wire")
            for m in c["source_modules"]}  # fmt: skip
    for path in setup.PURE:
        module = path[:-3].replace("/", ".")
        assert any(module == m or module.startswith(m + ".") for m in held), module


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


def test_a_wheel_build_hands_every_listed_module_to_mypyc(monkeypatch: pytest.MonkeyPatch) -> None:
    """What setup.py asks of mypyc; what mypyc then builds is checked where it is built:
    .ci/run's compiled step builds a wheel as pip does and fails unless every listed
    module imports from its extension (mypyc's own run takes ~10 s, so not here)."""
    mypyc_build = pytest.importorskip("mypyc.build")  # the test extra installs mypy
    calls: list[tuple[list[str], dict[str, Any]]] = []

    def mypycify(paths: list[str], **options: Any) -> list[SimpleNamespace]:
        calls.append((paths, options))
        return [SimpleNamespace(name=p[:-3].replace("/", "."), optional=False) for p in paths
                if p.endswith(".py")]  # fmt: skip

    monkeypatch.setattr(mypyc_build, "mypycify", mypycify)
    monkeypatch.setattr(sys, "argv", ["setup.py", "bdist_wheel"])
    monkeypatch.delenv("SNERD_PURE", raising=False)
    extensions = setup.ext_modules()
    (paths, options), = calls
    assert [p for p in paths if not p.startswith("-")] == list(setup.COMPILED)
    assert "--config-file=" in paths  # not the project's strict settings (build env)
    assert options["opt_level"] == "3"
    assert len(extensions) == len(setup.COMPILED)
    assert all(ext.optional for ext in extensions)  # no compiler: the pure modules


def _hazards(source: str) -> list[str]:
    """What in ``source`` mypyc (2.4) compiles differently from the interpreter, as met
    in this project (``benchmarks/README.md``, twenty-first and twenty-second sessions):

    - one name bound by two ``except ... as`` clauses of different types in one
      function: compiled, the name keeps the first clause's type, and the second
      clause raises ``TypeError`` on its own exception;
    - a class attribute assigned in a class body without ``ClassVar`` (but
      ``__slots__``, ``__hash__``): compiled, it is an instance slot, and a subclass's
      own value of it is never read;
    - ``types.coroutine``: a compiled generator under it no longer drives a task;
    - a call inside a slice's bounds: its bound may be evaluated twice (a match's
      ``start()`` or ``end()``, a read with no effect, is let be);
    - a call of an ``__init__`` with ``**options``: compiled, the options' dict
      reached a native base's ``__init__`` as a positional argument (``super()``), or
      its defaults went unset (the base named), thirty-sixth session."""
    import ast

    found: list[str] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            bound: dict[str, set[str]] = {}
            for inner in _own_nodes(node):  # (a nested function is a scope of its own)
                if isinstance(inner, ast.ExceptHandler) and inner.name:
                    kind = ast.unparse(inner.type) if inner.type else "BaseException"
                    bound.setdefault(inner.name, set()).add(kind)
            found += [f"{node.name}: '{name}' bound as {sorted(kinds)}"
                      for name, kinds in bound.items() if len(kinds) > 1]  # fmt: skip
        elif isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, ast.Assign):
                    found += [f"class {node.name}: attribute {target.id} without ClassVar"
                              for target in statement.targets
                              if isinstance(target, ast.Name)
                              and target.id not in ("__slots__", "__hash__")]  # fmt: skip
        elif isinstance(node, ast.Attribute) and ast.unparse(node) == "types.coroutine":
            found.append(f"line {node.lineno}: types.coroutine")
        elif isinstance(node, ast.Slice):
            found += [f"line {node.lineno}: a call in a slice's bound"
                      for bound_ in (node.lower, node.upper, node.step) if bound_ is not None
                      for inner in ast.walk(bound_)
                      if isinstance(inner, ast.Call) and not _a_match_read(inner)]  # fmt: skip
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "__init__" and any(k.arg is None for k in node.keywords)):
            found.append(f"line {node.lineno}: an __init__ called with **")  # fmt: skip
    return found


def _own_nodes(function: Any) -> Any:
    """The nodes of ``function``'s body, not those of the functions nested in it."""
    import ast

    stack = list(function.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def _a_match_read(call: Any) -> bool:
    """``m.start()``, ``m.end()``: a regex match's position, read with no effect."""
    import ast

    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr in ("start", "end")
            and not call.args and not call.keywords)  # fmt: skip


@pytest.mark.parametrize("path", setup.COMPILED)
def test_the_compiled_modules_avoid_what_mypyc_compiles_differently(path: str) -> None:
    assert _hazards((ROOT / path).read_text()) == [], path


def test_the_hazard_scan_finds_each_hazard() -> None:
    assert _hazards(
        "def f():\n"
        "    try:\n        pass\n"
        "    except KeyError as exc:\n        pass\n"
        "    except ValueError as exc:\n        pass\n"
        "class C:\n    FLAG = False\n    __slots__ = ()\n"
        "@types.coroutine\ndef g():\n    yield\n"
        "v = v[os.write(1, v):]\n"
        "w = line[: m.start()] + line[m.end() :]\n"
        "super().__init__(a, **options)\n"
        "Base.__init__(self, a, **options)\n"
    ) == [
        "f: 'exc' bound as ['KeyError', 'ValueError']",
        "class C: attribute FLAG without ClassVar",
        "line 11: types.coroutine",
        "line 16: an __init__ called with **",
        "line 17: an __init__ called with **",
        "line 14: a call in a slice's bound",
    ]
    assert _hazards(
        "def f():\n    def g():\n        try:\n            pass\n"
        "        except ValueError as exc:\n            pass\n"
        "    try:\n        pass\n    except KeyError as exc:\n        pass\n"
        "    except KeyError as exc:\n        pass\n"
        "class C:\n    FLAG: ClassVar[bool] = False\n"
        "v = v[n:]\n"
        "super().__init__(a, b=b)\n"
        "f(**options)\n"
    ) == []
