"""Case text that is too long or too deeply nested to parse, walk or compile safely is a
problem with its file, line, case and step: `lint` never prints a traceback for it, and a case
built in memory with such text is refused by `Case.from_dict` before anything runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conformance.casefile.case import Case, CaseFormatError

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"

HEAD = """\
- id: topic.hostile
  rule: A rule.
  sources:
    - doc: doc
      quote: A tensor created by the user is a leaf.
  steps:
"""
SUM = "+".join(["1"] * 100_000)
MINUS = "-" * 100_000 + "1"

# (name, the step as YAML, the line of the problem). The long texts overflowed the parser
# (RecursionError, MemoryError); the shorter deep ones got past it and overflowed the walks.
HOSTILE_STEPS = [
    ("100,000-term sum", f"    - run: x = {SUM}\n", 7),
    ("100,000 unary minus in run", f"    - run: x = {MINUS}\n", 7),
    ("100,000 unary minus as expect key",
     f"    - run: x = 1\n      expect:\n        ? '{MINUS}'\n        : 1\n", 9),
    ("100,000 unary minus as np value",
     f"    - run: x = 1\n      expect:\n        x: {{np: '{MINUS}'}}\n", 9),
    ("9,000-term sum under the length cap", "    - run: x = " + "+".join(["1"] * 9_000) + "\n",
     7),
    ("19,000 unary minus under the length cap", "    - run: x = " + "-" * 19_000 + "1\n", 7),
    ("900-term sum the parser takes", "    - run: x = " + "+".join(["1"] * 900) + "\n", 7),
    ("1,999 unary minus as np value",
     "    - run: x = 1\n      expect:\n        x: {np: '" + "-" * 1_999 + "1'}\n", 9),
]


def lint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conformance", "lint", str(path), "--spec", str(DATA / "spec")],
        cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("step", "line"), [h[1:] for h in HOSTILE_STEPS],
                         ids=[h[0] for h in HOSTILE_STEPS])
def test_lint_reports_text_too_complex_without_traceback(tmp_path: Path, step: str,
                                                         line: int) -> None:
    path = tmp_path / "topic.yaml"
    path.write_text(HEAD + step, encoding="utf-8")
    done = lint(path)
    output = done.stdout + done.stderr
    assert done.returncode in (1, 2), output[-2000:]
    assert "Traceback" not in output, output[-2000:]
    problems = [p for p in done.stdout.splitlines() if p.startswith(f"{path}:")]
    assert len(problems) == 1, output[-2000:]
    assert problems[0].startswith(f"{path}:{line}: case topic.hostile step 0: ")
    assert "expression too deeply nested or too long" in problems[0]
    assert len(problems[0]) < 400


@pytest.mark.parametrize("step", [
    {"run": f"x = {SUM}"},
    {"run": "x = 1", "expect": {MINUS: 1}},
    {"run": "x = 1", "expect": {"x": {"np": MINUS}}},
    {"run": "x = 1", "expect": {"x": [{"np": "-" * 1_999 + "1"}]}},
], ids=["run", "expect key", "np value", "np value inside a list"])
def test_case_built_in_memory_is_refused(step: dict) -> None:
    with pytest.raises(CaseFormatError) as caught:
        Case.from_dict({"id": "topic.hostile", "rule": "r", "steps": [step]})
    assert "case topic.hostile step 0: " in str(caught.value)
    assert "expression too deeply nested or too long" in str(caught.value)


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value, value]
    return value


def _cycle() -> list:
    value: list = []
    value.append(value)
    return value


@pytest.mark.parametrize("expected", [_nested(100), _cycle()], ids=["shared and deep", "cycle"])
def test_expected_value_built_in_memory_is_bounded(expected: list) -> None:
    with pytest.raises(CaseFormatError, match="expected value too deeply nested or too large"):
        Case.from_dict({"id": "topic.hostile", "rule": "r",
                        "steps": [{"run": "x = 1", "expect": {"x": expected}}]})

