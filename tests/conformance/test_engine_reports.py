"""The published engine reports (reports/engines/<engine>.md) are what one command writes, and
they lead with the findings: each root cause with its repro's output, then the cases it fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PUBLISHED = REPO / "reports" / "engines"


def test_every_in_tree_adapter_has_a_published_report():
    assert sorted(p.stem for p in PUBLISHED.glob("*.md")) == [
        "autograd", "jax", "mlx", "mygrad", "paddle", "tinygrad", "torch-compiled-autograd"]
    for path in PUBLISHED.glob("*.md"):
        text = path.read_text(encoding="utf-8")
        assert "| semantics |" in text and "## Cases that fail on a bug" in text
        assert "## Not yet in the expectations file" not in text, path.name


def test_reports_open_with_every_finding_and_its_repro_output():
    import yaml

    for folder in (REPO / "reports" / "findings").glob("*/findings.yaml"):
        text = (PUBLISHED / f"{folder.parent.name}.md").read_text(encoding="utf-8")
        findings = yaml.safe_load(folder.read_text())["findings"]
        assert text.index("## Findings") < text.index("## Cases that fail on a bug")
        for finding in findings:
            section = text.split(f"### {finding['id']}", 1)[1].split("\n### ", 1)[0]
            assert "```text" in section and ":" in section.split("```text", 1)[1], finding["id"]


def test_a_report_on_an_engine_that_runs_few_cases_says_so():
    tinygrad = (PUBLISHED / "tinygrad.md").read_text(encoding="utf-8")
    assert "Coverage is too low to say much" in tinygrad
    jax = (PUBLISHED / "jax.md").read_text(encoding="utf-8")
    assert "Coverage is too low" not in jax  # on the tape, JAX runs 651 of 682 cases
    mygrad = (PUBLISHED / "mygrad.md").read_text(encoding="utf-8")
    assert "Coverage is too low" in mygrad  # 381 of 665 cases need features MyGrad lacks


def test_the_mygrad_report_is_up_to_date(tmp_path):
    pytest.importorskip("mygrad", reason="the MyGrad report is regenerated with MyGrad")
    done = subprocess.run([sys.executable, "-m", "conformance", "engine-report", "mygrad",
                           "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "mygrad.md").read_text() == (PUBLISHED / "mygrad.md").read_text(), \
        "reports/engines/mygrad.md is stale: run `python -m conformance engine-report mygrad`"
