"""`tools/mutation.py`, the steps of `tox -e mutation`: the test command runs the suite on the
engines that reach the mutated file (the tape engine for `refimpl/ops/kernels.py`), and
`prepare` never leaves the checkout's copy reachable for a mutant. No cosmic-ray run here: the
engines' runs are recorded, not made."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def tool(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("mutation_tool", ROOT / "tools" / "mutation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "MUTATION_DIR", tmp_path)
    monkeypatch.setattr(module, "TREE", tmp_path / "tree")
    monkeypatch.setattr(module, "PRISTINE", tmp_path / "pristine")
    monkeypatch.setattr(module, "CONFIG", tmp_path / "cosmic-ray.toml")
    return module


def _runs(tool, monkeypatch, rc: int = 0) -> list[str]:
    engines: list[str] = []

    def call(command, cwd):
        assert Path(cwd) == tool.TREE
        engines.append(command[command.index("--engine") + 1])
        return rc

    monkeypatch.setattr(tool.subprocess, "call", call)
    return engines


def test_prepare_copies_the_tree_and_keeps_pristine_copies(tool, monkeypatch):
    # toml comes with cosmic-ray (the tox env); without it, a stand-in writes the same dict.
    try:
        import toml  # noqa: F401
    except ImportError:
        monkeypatch.setitem(sys.modules, "toml", types.SimpleNamespace(dumps=repr))
    tool.prepare()
    for name in tool.COPIED:
        assert (tool.TREE / name).is_dir()
    for rel in tool.REACHED_ONLY_BY:
        assert (tool.PRISTINE / rel).read_bytes() == (ROOT / rel).read_bytes()
    config = (tool.CONFIG).read_text()
    assert "mutation.py test" in config and str(tool.MUTATION_DIR / "mutation.py") in config
    assert (tool.MUTATION_DIR / "mutation.py").read_bytes() == \
        (ROOT / "tools" / "mutation.py").read_bytes()


def test_the_tape_engine_runs_only_for_a_mutant_in_the_tape(tool, monkeypatch):
    rel = next(iter(tool.REACHED_ONLY_BY))
    for base in (tool.TREE, tool.PRISTINE):
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text("x = 1\n")
    engines = _runs(tool, monkeypatch)
    assert tool.test() == 0
    assert engines == ["refimpl"]

    (tool.TREE / rel).write_text("x = 2\n")  # what cosmic-ray does to the file
    engines = _runs(tool, monkeypatch)
    assert tool.test() == 0
    assert engines == ["refimpl", *tool.REACHED_ONLY_BY[rel]]


def test_a_failing_run_kills_the_mutant(tool, monkeypatch):
    rel = next(iter(tool.REACHED_ONLY_BY))
    for base, text in ((tool.TREE, "x = 2\n"), (tool.PRISTINE, "x = 1\n")):
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(text)
    engines = _runs(tool, monkeypatch, rc=1)
    assert tool.test() == 1
    assert engines == ["refimpl"], "the first failing engine decides; the rest need not run"


def test_usage_is_refused_with_a_message(tool, capsys):
    assert tool.main([]) == 2
    assert "usage" in capsys.readouterr().err
    assert tool.main(["nonsense"]) == 2

