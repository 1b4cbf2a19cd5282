"""The findings on torch-compiled-autograd hold: every expectations entry names a root cause that
lists its case, and every root cause's standalone script still shows eager and compiled autograd
differ on the installed PyTorch."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conformance.casefile.files import DEFAULT_SPEC_DIR
from conformance.casefile.loader import load
from conformance.report.findings import FindingsError, load_findings, reason_finding, run_script

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "reports" / "findings" / "torch-compiled-autograd"
EXPECTATIONS = ROOT / "conformance" / "expectations" / "torch-compiled-autograd.yaml"
FINDINGS = load_findings(FOLDER / "findings.yaml")


def test_every_entry_names_the_finding_that_lists_its_case() -> None:
    by_id = {f["id"]: f for f in FINDINGS}
    entries = yaml.safe_load(EXPECTATIONS.read_text())["xfail"]
    for case_id, reason in entries.items():
        finding = by_id.get(reason_finding(reason) or "")
        assert finding is not None, f"{case_id}: {reason!r} names no finding"
        assert case_id in finding["cases"], f"{case_id} is not among {finding['id']}'s cases"
        assert reason.startswith(finding["kind"] + ":"), (case_id, finding["kind"])
    listed = {case for f in FINDINGS for case in f["cases"]}
    assert listed == set(entries), "a finding's case has no expectations entry, or back"
    known = {case.id for case in load([DEFAULT_SPEC_DIR / "cases"]).cases}
    assert listed <= known


def test_a_finding_without_what_a_maintainer_needs_is_refused(tmp_path: Path) -> None:
    (tmp_path / "repro.py").write_text("print('eager: 1')\n")
    entry = {"id": "x", "kind": "BUG", "severity": "high", "title": "t", "script": "repro.py",
             "cases": ["a.b"], "upstream": "not found"}
    (tmp_path / "findings.yaml").write_text(yaml.safe_dump({"findings": [entry]}))
    with pytest.raises(FindingsError, match="draft issue"):
        load_findings(tmp_path / "findings.yaml")
    entry.update(kind="LIMITATION")
    (tmp_path / "findings.yaml").write_text(yaml.safe_dump({"findings": [entry]}))
    with pytest.raises(FindingsError, match="'source'"):
        load_findings(tmp_path / "findings.yaml")


@pytest.mark.parametrize("finding", FINDINGS, ids=[f["id"] for f in FINDINGS])
def test_the_script_shows_the_divergence(finding: dict) -> None:
    pytest.importorskip("torch._dynamo.compiled_autograd", reason="compiled autograd is PyTorch's")
    output = run_script(FOLDER / finding["script"])
    lines = dict(line.split(":", 1) for line in output.splitlines() if ":" in line)
    assert "eager" in lines and "compiled" in lines, output
    assert lines["eager"].strip() != lines["compiled"].strip(), output


def test_the_report_lists_every_finding_with_its_upstream_status() -> None:
    from conformance.report.findings import render_findings

    text = "\n".join(render_findings(FOLDER, run=False))
    kinds = [f["kind"] for f in FINDINGS]
    assert f"{len(FINDINGS)} root causes: {kinds.count('BUG')} BUG" in text
    for finding in FINDINGS:
        assert f"### {finding['id']}" in text
        assert finding["script"] in text
        if finding.get("draft"):
            assert "Draft issue" in text.split(f"### {finding['id']}", 1)[1]
