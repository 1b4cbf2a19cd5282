"""Repro scripts: no text of a case can become a statement of the script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conformance.casefile.case import Case
from conformance.engines import load_engine
from conformance.run.repro import repro_script

# Each ends a line for `str.splitlines` but not for Python's tokenizer: after one of them, the
# rest of a comment is still a comment when the runner compiles the snippet.
SEPARATORS = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]


def run_script(script: str, folder: Path, cwd: Path | None = None
               ) -> subprocess.CompletedProcess:
    path = folder / "repro.py"
    path.write_text(script, encoding="utf-8")
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                          timeout=120, cwd=cwd or folder)


def test_a_comment_in_a_snippet_stays_a_comment_in_the_script(tmp_path: Path) -> None:
    markers = [tmp_path / f"marker{index}" for index in range(len(SEPARATORS))]
    snippet = "\n".join(f"x = 1  # {sep}import os; open({str(marker)!r}, 'w')"
                        for sep, marker in zip(SEPARATORS, markers, strict=True))
    case = Case.from_dict({"id": "topic.inject", "rule": "r", "steps": [
        {"run": snippet, "expect": {"x": 1}},
        {"run": "x = torch.ones(1)\ny = 2", "expect": {"y": 2}}]})
    done = run_script(repro_script(case, load_engine("refimpl")), tmp_path)
    assert done.returncode == 0, done.stderr
    assert not [m for m in markers if m.exists()], "a comment became a statement"
    assert "x = 1 | expected: 1" in done.stdout and "y = 2 | expected: 2" in done.stdout


def test_an_expectation_key_is_evaluated_as_one_expression(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    key = f"x), open({str(marker)!r}, 'w'), (x"
    case = Case.from_dict({"id": "topic.key", "rule": "r", "steps": [
        {"run": "x = 1", "expect": {key: 1}}]})
    done = run_script(repro_script(case, load_engine("refimpl")), tmp_path)
    assert not marker.exists(), "the key broke out of its observation"
    assert "SyntaxError" in done.stderr


@pytest.mark.parametrize("separator", SEPARATORS, ids=[hex(ord(s)) for s in SEPARATORS])
def test_the_script_is_readable_and_every_step_a_string(separator: str) -> None:
    import ast

    case = Case.from_dict({"id": "topic.read", "rule": "r", "steps": [
        {"run": f"x = 1  # {separator}import os\ny = x", "expect": {"y": 1}}]})
    script = repro_script(case, load_engine("refimpl"))
    assert "#     y = x" in script, "the step is shown as comments"
    tree = ast.parse(script)
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    assert "os" not in imported


ADAPTER = '''
from conformance.engines.generic import TorchLikeEngine


class Mine(TorchLikeEngine):
    def node_name(self, node):
        return "Mine:" + type(node).__name__


def make():
    return Mine("mine", "refimpl")
'''


def test_an_out_of_tree_adapter_is_found_from_any_folder(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    # The adapter's guide has its author run the suite from the adapter's folder; the script
    # is then run from anywhere, without that folder on any path.
    adapters, elsewhere = tmp_path / "adapters", tmp_path / "elsewhere"
    adapters.mkdir()
    elsewhere.mkdir()
    (adapters / "repro_test_adapter.py").write_text(ADAPTER, encoding="utf-8")
    monkeypatch.syspath_prepend(str(adapters))
    monkeypatch.delitem(sys.modules, "repro_test_adapter", raising=False)
    try:
        engine = load_engine("repro_test_adapter:make")
        case = Case.from_dict({"id": "topic.node", "rule": "r", "steps": [
            {"run": "x = torch.ones(2, requires_grad=True)\ny = x * 2",
             "expect": {"grad_fn_name(y)": "MulBackward0"}}]})
        script = repro_script(case, engine)
    finally:
        sys.modules.pop("repro_test_adapter", None)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    done = run_script(script, tmp_path, cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert "grad_fn_name(y) = 'Mine:MulBackward0'" in done.stdout
    assert str(adapters) in script
    assert "sys.path" not in repro_script(case, load_engine("refimpl")), \
        "an engine this package or site-packages provides needs no path"
