"""Loader errors: every kind of bad case file is reported as file:line: message."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conformance.casefile.loader import load

REPO = Path(__file__).resolve().parents[2]

GOOD_CASE = """\
- id: {topic}.ok
  rule: A rule.
  sources:
    - doc: doc
      quote: A tensor created by the user is a leaf.
  steps:
    - run: x = torch.ones(2)
"""


def write(tmp_path: Path, text: str, name: str = "topic.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def problems_of(path: Path, resources) -> list[str]:
    return [str(p) for p in load([path], resources).problems]


def test_fixture_cases_load_cleanly(resources):
    result = load([Path(__file__).parent / "data" / "cases"], resources)
    assert result.problems == []
    assert [c.id for c in result.cases] == [
        "basic.leaf", "basic.backward-fills-grad", "basic.nonleaf-flag", "basic.linear-module"]
    assert result.cases[1].steps[1].expect[0] == ("x.grad", [2.0, 4.0])


BAD_FILES = [
    ("invalid yaml", "- id: topic.a\n  rule: [unclosed\n", 3, "invalid YAML"),
    ("top level mapping", "id: topic.a\n", 1, "top level must be a list of cases, not a mapping"),
    ("missing rule", """\
        - id: topic.a
          steps:
            - run: x = 1
        """, 1, "schema: 0: 'rule' is a required property"),
    ("rule too long for the schema", """\
        - id: topic.a
          rule: """ + "r" * 201 + """
          steps:
            - run: x = 1
        """, 2, "schema: 0/rule"),
    ("bad id prefix", GOOD_CASE.format(topic="other"), 1, "id must start with 'topic.'"),
    ("unknown key", GOOD_CASE.format(topic="topic") + "  colour: red\n", 8,
     "unknown key 'colour'"),
    ("duplicate yaml key", GOOD_CASE.format(topic="topic").replace(
        "  rule: A rule.\n", "  rule: A rule.\n  rule: Again.\n"), 3, "duplicate key 'rule'"),
    ("unknown feature", GOOD_CASE.format(topic="topic") + "  features: [teleport]\n", 8,
     "unknown feature 'teleport'"),
    ("quote not in the document", GOOD_CASE.format(topic="topic").replace(
        "quote: A tensor", "quote: No tensor"), 5, "quote not found in doc"),
    ("unknown source document", GOOD_CASE.format(topic="topic").replace(
        "doc: doc", "doc: nowhere"), 5, "unknown source document 'nowhere'"),
    ("import", GOOD_CASE.format(topic="topic").replace(
        "run: x = torch.ones(2)", "run: |\n        x = 1\n        import os"), 9,
     "imports are not allowed"),
    ("dunder attribute", GOOD_CASE.format(topic="topic").replace(
        "x = torch.ones(2)", "x = torch.ones(2).__class__"), 7, "names starting with '_'"),
    ("unknown global", GOOD_CASE.format(topic="topic").replace(
        "x = torch.ones(2)", "x = open('f')"), 7, "unknown name 'open'"),
    ("unknown torch member", GOOD_CASE.format(topic="topic").replace(
        "torch.ones", "torch.zeros"), 7, "'torch.zeros' is not in api.yaml"),
    ("unknown nn member", GOOD_CASE.format(topic="topic").replace(
        "torch.ones(2)", "nn.Conv2d(1, 1, 1)"), 7, "'nn.Conv2d' is not in api.yaml"),
    ("unknown attribute", GOOD_CASE.format(topic="topic").replace(
        "torch.ones(2)", "torch.ones(2).cuda()"), 7, "attribute 'cuda' is not in api.yaml"),
    ("name used before bound", GOOD_CASE.format(topic="topic").replace(
        "x = torch.ones(2)", "x = y + 1"), 7, "unknown name 'y'"),
    ("expect key with unknown name", GOOD_CASE.format(topic="topic") +
     "      expect:\n        z.is_leaf: true\n", 9, "expect 'z.is_leaf': unknown name 'z'"),
    ("rebinding torch", GOOD_CASE.format(topic="topic").replace(
        "x = torch.ones(2)", "torch = 1"), 7, "may not be rebound"),
    ("bad stage", GOOD_CASE.format(topic="topic") +
     "      raises: {type: RuntimeError, stage: later}\n", 8, "stage must be one of"),
    ("bad version specifier", GOOD_CASE.format(topic="topic") +
     "      raises:\n        type: RuntimeError\n        messages:\n"
     "          - {torch: 'around 2', message: m}\n", 11, "not a PEP 440 version specifier"),
    ("syntax error in snippet", GOOD_CASE.format(topic="topic").replace(
        "run: x = torch.ones(2)", "run: |\n        x = 1\n        y = = 2"), 9, "syntax error"),
]


@pytest.mark.parametrize(("text", "line", "message"), [b[1:] for b in BAD_FILES],
                         ids=[b[0] for b in BAD_FILES])
def test_bad_file_reports_file_and_line(tmp_path, resources, text, line, message):
    path = write(tmp_path, text)
    problems = problems_of(path, resources)
    assert any(p.startswith(f"{path}:{line}: ") and message in p for p in problems), problems


def test_duplicate_ids_across_files(tmp_path, resources):
    first = write(tmp_path, GOOD_CASE.format(topic="topic"))
    other = tmp_path / "more"
    other.mkdir()
    second = write(other, GOOD_CASE.format(topic="topic"))
    problems = [str(p) for p in load([first, second], resources).problems]
    assert problems == [f"{second}:1: case topic.ok: duplicate id (first defined at {first}:1)"]


def test_unusable_api_yaml_is_reported(tmp_path):
    from conformance.casefile.loader import SpecResources

    spec = tmp_path / "spec"
    spec.mkdir()
    (spec / "features.yaml").write_text("modules: x\n")
    (spec / "api.yaml").write_text("globals: [eval]\n")
    resources = SpecResources.load(spec)
    assert any("may not list eval" in str(p) for p in resources.problems)


@pytest.mark.parametrize(("text", "line"), [("- id: [unclosed\n", 2), ("just text\n", 1),
                                             ("- id: topic.a\n", 1)],
                         ids=["invalid yaml", "not a list", "missing keys"])
def test_lint_exits_non_zero_without_traceback(tmp_path, text, line):
    path = write(tmp_path, text)
    data = Path(__file__).parent / "data"
    proc = subprocess.run(
        [sys.executable, "-m", "conformance", "lint", str(path), "--spec", str(data / "spec")],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    assert f"{path}:{line}: " in proc.stdout


def test_lint_passes_a_good_file():
    data = Path(__file__).parent / "data"
    proc = subprocess.run(
        [sys.executable, "-m", "conformance", "lint", str(data / "cases"), "--spec",
         str(data / "spec")],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 cases checked, 0 problem(s)" in proc.stdout
