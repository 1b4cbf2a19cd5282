"""Every engine's findings hold: each `BUG:`/`LIMITATION:`/`MESSAGE:` entry of its expectations
file names a root cause that lists its case, every root cause lists only such entries, and each
root cause's standalone script still shows the divergence on the installed engine (its two
labelled lines differ)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from conformance.casefile.files import DEFAULT_SPEC_DIR
from conformance.casefile.loader import load
from conformance.report.findings import (
    KINDS,
    FindingsError,
    compared,
    load_findings,
    reason_finding,
    run_script,
)

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "reports" / "findings"
EXPECTATIONS = ROOT / "conformance" / "expectations"
ENGINES = {"autograd": "autograd", "mlx": "mlx", "paddle": "paddle", "tinygrad": "tinygrad",
           "torch-compiled-autograd": "torch._dynamo.compiled_autograd"}
"""Each engine with findings, and the module its scripts need."""
SCRIPTS = [(engine, finding) for engine in sorted(ENGINES)
           for finding in load_findings(FOLDER / engine / "findings.yaml")]


def test_every_engine_with_findings_is_listed_here() -> None:
    assert sorted(p.parent.name for p in FOLDER.glob("*/findings.yaml")) == sorted(ENGINES)


def _entries(engine: str) -> dict[str, str]:
    data = yaml.safe_load((EXPECTATIONS / f"{engine}.yaml").read_text())
    return {case: reason for section in ("xfail", "isolate")
            for case, reason in (data.get(section) or {}).items()}


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_classed_entry_names_the_finding_that_lists_its_case(engine: str) -> None:
    findings = {f["id"]: f for f in load_findings(FOLDER / engine / "findings.yaml")}
    classed = {case: reason for case, reason in _entries(engine).items()
               if reason.split(":", 1)[0] in KINDS}
    for case_id, reason in classed.items():
        finding = findings.get(reason_finding(reason) or "")
        assert finding is not None, f"{engine}: {case_id}: {reason!r} names no finding"
        assert case_id in finding["cases"], f"{case_id} is not among {finding['id']}'s cases"
        assert reason.startswith(finding["kind"] + ":"), (case_id, finding["kind"])
    listed = {case for f in findings.values() for case in f["cases"]}
    assert listed == set(classed), f"{engine}: a finding's case has no entry naming it, or back"
    known = {case.id for case in load([DEFAULT_SPEC_DIR / "cases"]).cases}
    assert listed <= known


def test_a_finding_without_what_a_maintainer_needs_is_refused(tmp_path: Path) -> None:
    (tmp_path / "repro.py").write_text("print('expected: 1')\n")
    entry = {"id": "x", "kind": "BUG", "severity": "wrong value", "title": "t",
             "script": "repro.py", "cases": ["a.b"], "upstream": "not found"}

    def refused(match: str, **header: object) -> None:
        (tmp_path / "findings.yaml").write_text(yaml.safe_dump({**header, "findings": [entry]}))
        with pytest.raises(FindingsError, match=match):
            load_findings(tmp_path / "findings.yaml")

    refused("draft issue")
    entry.update(kind="LIMITATION")
    refused("'source'")
    entry.update(kind="BUG", severity="high", draft={"title": "t", "body": "b"})
    refused("severity must be one of crash, wrong value")
    entry.update(severity="crash")
    refused("'compare' must name two labels", compare=["eager"])
    entry.update(script="missing.py")
    refused("not beside the file")


@pytest.mark.parametrize(("engine", "finding"), SCRIPTS,
                         ids=[f"{e}:{f['id']}" for e, f in SCRIPTS])
def test_the_script_shows_the_divergence(engine: str, finding: dict) -> None:
    if importlib.util.find_spec(ENGINES[engine].split(".")[0]) is None:
        pytest.skip(f"{engine}'s scripts need {ENGINES[engine]}, which is not installed")
    first, second = compared(FOLDER / engine / "findings.yaml")
    output = run_script(FOLDER / engine / finding["script"])
    lines = dict(line.split(":", 1) for line in output.splitlines() if ":" in line)
    assert first in lines and second in lines, output
    assert lines[first].strip() != lines[second].strip(), output


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_the_report_lists_every_finding_with_its_upstream_status(engine: str) -> None:
    from conformance.report.findings import render_findings

    findings = load_findings(FOLDER / engine / "findings.yaml")
    text = "\n".join(render_findings(FOLDER / engine, run=False))
    kinds = [f["kind"] for f in findings]
    assert f"{len(findings)} root causes: {kinds.count('BUG')} BUG" in text
    for finding in findings:
        section = text.split(f"### {finding['id']}", 1)[1].split("\n### ", 1)[0]
        assert finding["script"] in section and str(finding["upstream"])[:20] in \
            section.replace("\\", "")
        if finding.get("draft"):
            assert "Draft issue" in section
