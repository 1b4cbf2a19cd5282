"""Case files are untrusted input: every escape and every way to knock the loader over that
was found by probing is refused by `lint` with a `file:line` problem, never a traceback.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conformance.casefile.loader import MAX_MESSAGE, load

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"

HEAD = """\
- id: topic.hostile
  rule: A rule.
  sources:
    - doc: doc
      quote: A tensor created by the user is a leaf.
  steps:
    - run: |
"""


def case_with(snippet: str) -> str:
    return HEAD + textwrap.indent(textwrap.dedent(snippet).strip() + "\n", " " * 8)


# (name, snippet, a fragment of the problem). Each was a way around the checker: to reach
# attributes by keyword, to rebind a reserved name, to change the engine for later cases, or
# to catch the runner's own timeout.
HOSTILE_SNIPPETS = [
    ("match class keyword pattern", """
        match torch.rand:
            case function(__globals__=g):
                pass
     """, "'match' is not allowed"),
    ("match capture rebinds torch", """
        match 1:
            case torch:
                pass
     """, "'match' is not allowed"),
    ("except as rebinds nn", """
        x = 1
        try:
            x = 2
        except ValueError as nn:
            pass
     """, "'try/except' is not allowed"),
    ("bare except swallows the timeout", """
        try:
            for i in range(10):
                pass
        except:
            pass
     """, "'try/except' is not allowed"),
    ("while loop", "while True:\n    pass", "'while' is not allowed"),
    ("class rebinds torch", "class torch:\n    pass", "'torch' is provided by the runner"),
    ("dunder method", "class A:\n    def __init__(self):\n        pass",
     "names starting with '_'"),
    ("walrus", "x = (y := 3)", "'walrus (:=)' is not allowed"),
    ("raise", "raise ValueError", "'raise' is not allowed"),
    ("global", "global torch", "'global' is not allowed"),
    ("async def rebinds F", "async def F():\n    pass", "'F' is provided by the runner"),
    ("patch a torch method", "torch.Tensor.backward = torch.Tensor.detach",
     "'torch.Tensor.backward' may not be assigned"),
    ("patch an nn class", "nn.Linear.forward = nn.Linear.forward",
     "'nn.Linear.forward' may not be assigned"),
    ("delete a torch member", "del torch.rand", "'torch.rand' may not be assigned or deleted"),
    ("patch through an alias", "t = torch.ones(1)\nt.backward = t.detach",
     "assigning or deleting attribute 'backward' is not allowed"),
    ("def rebinds torch", "def torch():\n    return 1", "'torch' is provided by the runner"),
    ("lambda argument rebinds F", "f = lambda F: F", "'F' is provided by the runner"),
    ("comprehension rebinds nn", "x = [1 for nn in range(3)]", "'nn' is provided by the runner"),
    ("loop variable rebinds a helper", "for graph in range(3):\n    pass",
     "'graph' is provided by the runner"),
    ("with as rebinds torch", "with torch.no_grad() as torch:\n    pass",
     "'torch' is provided by the runner"),
    ("dunder in an f-string", "x = f'{torch.ones(1).__class__}'", "names starting with '_'"),
    ("private keyword", "x = torch.ones(1, _internal=1)", "names starting with '_'"),
    ("dunder after a saved value", "x = torch.ones(1).exp().grad_fn._saved_result.__class__",
     "names starting with '_'"),
    ("write to a saved value", "n = torch.ones(1).exp().grad_fn\nn._saved_result = 1",
     "names starting with '_'"),
    ("private look-alike", "x = torch.ones(1)._saved", "names starting with '_'"),
]


@pytest.mark.parametrize(("snippet", "fragment"), [h[1:] for h in HOSTILE_SNIPPETS],
                         ids=[h[0] for h in HOSTILE_SNIPPETS])
def test_hostile_snippet_is_refused(tmp_path: Path, resources, snippet: str,
                                    fragment: str) -> None:
    path = tmp_path / "topic.yaml"
    path.write_text(case_with(snippet), encoding="utf-8")
    problems = [str(p) for p in load([path], resources).problems]
    assert any(fragment in p for p in problems), problems
    assert all(p.startswith(f"{path}:") for p in problems)


def test_a_nodes_saved_values_may_be_read(tmp_path: Path, resources) -> None:
    """grad_fn._saved_self and ._raw_saved_result are the one underscore attributes a case
    may read (PyTorch documents them as the way to see what a node saved)."""
    path = tmp_path / "topic.yaml"
    path.write_text(case_with("n = torch.ones(1, requires_grad=True).exp().grad_fn\n"
                              "a = n._saved_result\nb = n._raw_saved_result"), encoding="utf-8")
    assert not [p for p in load([path], resources).problems if "'_" in str(p)]


def test_the_spec_needs_none_of_the_refused_constructs() -> None:
    result = load([REPO / "spec" / "cases"])
    assert [str(p) for p in result.problems] == []


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))

# (name, file text, the line of the problem, a fragment of it)
HOSTILE_FILES = [
    ("alias bomb", ALIAS_BOMB, 1, "anchors and aliases"),
    ("alias of a step", HEAD.replace("    - run: |\n", "    - &s {run: x = 1}\n    - *s\n"), 7,
     "anchors and aliases"),
    ("deep nesting", "- " + "[" * 5000 + "]" * 5000 + "\n", 1, "nested more than"),
    ("NUL character", "- id: topic.a\n  rule: a\x00b\n", 2, "control character"),
    ("BEL character", "- id: topic.a\n\n  rule: a\x07b\n", 3, "control character"),
    ("huge file", "# " + "x" * (1 << 20) + "\n", 1, "a case file may have at most"),
]


@pytest.mark.parametrize(("text", "line", "fragment"), [h[1:] for h in HOSTILE_FILES],
                         ids=[h[0] for h in HOSTILE_FILES])
def test_hostile_file_is_a_problem_with_a_line(tmp_path: Path, resources, text: str,
                                               line: int, fragment: str) -> None:
    path = tmp_path / "topic.yaml"
    path.write_text(text, encoding="utf-8")
    problems = load([path], resources).problems
    assert [(p.line, fragment in p.message) for p in problems] == [(line, True)], problems


def test_long_values_are_cut_in_messages(tmp_path: Path, resources) -> None:
    path = tmp_path / "topic.yaml"
    path.write_text("- " + "[" + ", ".join(["1234567890"] * 20000) + "]\n", encoding="utf-8")
    problems = load([path], resources).problems
    assert problems and all(len(p.message) <= MAX_MESSAGE for p in problems)


def test_yml_files_and_empty_folders_are_errors(tmp_path: Path, resources) -> None:
    (tmp_path / "topic.yml").write_text(case_with("x = 1"), encoding="utf-8")
    empty = tmp_path / "empty"
    empty.mkdir()
    problems = [str(p) for p in load([tmp_path, empty], resources).problems]
    assert f"{tmp_path / 'topic.yml'}:1: case files end in .yaml: rename it, or it is not " \
           "read" in problems
    assert f"{empty}:1: no case files (*.yaml) in this folder" in problems


def test_run_on_an_empty_folder_fails_without_traceback(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "conformance", "run", "--cases", str(tmp_path),
                           "--spec", str(DATA / "spec")], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    assert "no case files (*.yaml) in this folder" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_lint_reports_hostile_files_without_traceback(tmp_path: Path) -> None:
    for name, text, _, _ in HOSTILE_FILES:
        (tmp_path / f"{name.replace(' ', '_')}.yaml").write_text(text, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "conformance", "lint", str(tmp_path),
                           "--spec", str(DATA / "spec")], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    assert len([line for line in done.stdout.splitlines() if line.startswith(str(tmp_path))]) \
        == len(HOSTILE_FILES)


def expect_np(expression: str, nested: bool = False) -> str:
    value = f"[{{np: {expression!r}}}]" if nested else f"{{np: {expression!r}}}"
    return (HEAD.replace("    - run: |\n", "    - run: x = torch.ones(2)\n")
            + f"      expect:\n        x.is_leaf: {value}\n")


@pytest.mark.parametrize(("expression", "nested", "fragment"), [
    ("__import__('os')", True, "names starting with '_'"),
    ("np.fromfile('/etc/passwd')", False, "np.fromfile"),
    ("np.load('x.npy', allow_pickle=True)", True, "np.load"),
    ("np.save('x.npy', x)", False, "np.save"),
    ("exec('import os')", False, "reads 'exec', which the case has not bound"),
    ("(lambda: 1)()", False, "may not use Lambda"),
    ("[v for v in x]", True, "may not use ListComp"),
    ("x.tofile('out')", False, "attribute 'tofile'"),
], ids=["import nested", "fromfile", "load pickle nested", "save", "exec", "lambda",
        "comprehension nested", "array tofile"])
def test_np_expectations_are_checked_wherever_they_occur(tmp_path: Path, resources,
                                                         expression: str, nested: bool,
                                                         fragment: str) -> None:
    path = tmp_path / "topic.yaml"
    path.write_text(expect_np(expression, nested), encoding="utf-8")
    problems = [str(p) for p in load([path], resources).problems]
    assert any(fragment in p for p in problems), problems


def test_np_expectations_run_without_builtins() -> None:
    import numpy as np

    from conformance.casefile.sandbox import eval_np

    assert eval_np("np.exp(x) * 2", {"x": np.zeros(2)}).tolist() == [2.0, 2.0]
    assert eval_np("x.sum(axis=0)", {"x": np.ones((2, 3), dtype=np.float32)}).tolist() \
        == [2.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="np.fromfile"):
        eval_np("np.fromfile('/etc/passwd')", {})
    with pytest.raises(NameError, match="open"):
        eval_np("open('/etc/passwd')", {})


def test_snippets_run_with_only_the_listed_builtins() -> None:
    from conformance.engines import load_engine
    from conformance.run.executor import run_case

    case = {"id": "topic.open", "rule": "r", "steps": [
        {"run": "f = open('/etc/passwd')"}]}
    result = run_case(case, load_engine("refimpl"))
    assert result.verdict == "failed"
    assert "NameError: name 'open' is not defined" in result.message
    listed = {"id": "topic.len", "rule": "r", "steps": [
        {"run": "n = len([1, 2])", "expect": {"n": 2}}]}
    assert run_case(listed, load_engine("refimpl")).verdict == "passed"


def test_case_text_never_becomes_code_in_a_repro_script(tmp_path: Path) -> None:
    import ast

    from conformance.casefile.case import Case
    from conformance.engines import load_engine
    from conformance.run.repro import repro_script

    case = Case.from_dict({
        "id": "topic.inject", "rule": "A rule.\nimport os; os.system('echo pwned')\r\u2028x=1",
        "steps": [{"run": "x = torch.ones(2)", "raises": {"type": 'Error")\nimport os #'},
                   "warns": [{"type": "UserWarning", "message": "w\nimport os"}]}]})
    script = repro_script(case, load_engine("refimpl"))
    tree = ast.parse(script)
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    assert "os" not in imported
    assert "os.system" not in {ast.unparse(n.func) for n in ast.walk(tree)
                               if isinstance(n, ast.Call)}


def test_reports_survive_control_characters_and_lone_surrogates(tmp_path: Path) -> None:
    import json
    import xml.etree.ElementTree as ET

    from conformance.report.formats import write_reports
    from conformance.run.executor import CaseResult
    from conformance.verdict.suite import EngineRun, SuiteReport

    class Info:
        name, version, device, available, unavailable_reason = "e", "1", "cpu", True, None

        def describe(self):
            return {"name": "e"}

    text = "bell \x07 nul \x00 surrogate \ud800 end"
    result = CaseResult(case_id="topic.a", engine="e", verdict="failed", topic="topic",
                        message=text, actual=text, expected=text)
    report = SuiteReport([], [EngineRun(Info(), results=[result])])
    paths = [tmp_path / "r.json", tmp_path / "r.xml", tmp_path / "r.md"]
    write_reports(report, *paths)
    assert json.loads(paths[0].read_text())["results"][0]["verdict"] == "failed"
    failure = ET.parse(paths[1]).getroot().find(".//failure")
    assert "\\x07" in failure.text and "\\ud800" in failure.text
    assert "surrogate \\ud800 end" in paths[2].read_text(encoding="utf-8")
