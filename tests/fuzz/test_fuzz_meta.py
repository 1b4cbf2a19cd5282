"""Meta-tests: the fuzzer finds a seeded fault inside the CI profile, and what it writes is a
case that passes on the reference and fails on the faulty engine."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import faulty_engines
import pytest

from conformance.casefile.loader import load
from conformance.engines import load_engine
from conformance.fuzz.profiles import PROFILES
from conformance.fuzz.runner import FuzzResult, fuzz
from conformance.run.executor import run_case

FAULTS = {
    "no-accumulation": (faulty_engines.make_no_accumulation, ".grad"),
    "renamed-sum": (faulty_engines.make_renamed_sum, "graph("),
}


@pytest.fixture(scope="module", params=sorted(FAULTS))
def found(request, torch_engine, tmp_path_factory) -> tuple[FuzzResult, object, str]:
    make, key = FAULTS[request.param]
    faulty = make()
    result = fuzz(torch_engine, faulty, profile="ci", out=tmp_path_factory.mktemp("findings"))
    return result, faulty, key


def test_ci_profile_finds_the_seeded_fault(found):
    result, faulty, key = found
    finding = result.finding
    assert finding is not None, f"{faulty.name}: no mismatch in {result.programs} programs"
    # Found inside the CI budget (the count includes the shrinking runs after it).
    assert result.programs <= PROFILES["ci"].examples + 600
    assert any(key in d.what for d in finding.mismatch.differences)
    assert "torch (reference)" in finding.message()


def test_finding_is_a_case_that_tells_the_engines_apart(found, torch_engine):
    result, faulty, _ = found
    finding = result.finding
    assert finding.yaml_path.exists() and finding.lint_problems == ()
    loaded = load([finding.yaml_path])
    assert loaded.problems == [] and len(loaded.cases) == 1
    case = loaded.cases[0]
    assert [s.run for s in case.steps] == [
        s.run for s in finding.program.steps[: finding.mismatch.step + 1]]
    assert run_case(case, torch_engine).verdict == "passed"
    assert run_case(case, faulty).verdict == "failed"
    assert str(finding.yaml_path) in finding.message()


def test_repro_script_runs_standalone(found):
    finding = found[0].finding
    assert str(finding.repro_path) in finding.message()
    run = subprocess.run([sys.executable, str(finding.repro_path)], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "expected:" in run.stdout


OPEN_FINDINGS = Path(__file__).resolve().parent / "open_findings"


def test_open_findings_are_valid_and_still_open(torch_engine):
    """Mismatches the fuzzer found in refimpl and not fixed yet, kept as ready cases.

    Each is a valid case whose expectations are PyTorch's: it passes on torch and still fails on
    refimpl. Once refimpl is fixed the case passes there too, and this test fails until the case
    moves into spec/cases/fuzz_findings.yaml with a rule and its sources.
    """
    if not any(OPEN_FINDINGS.glob("*.yaml")):
        assert (OPEN_FINDINGS / "README.md").is_file()  # nothing is open now
        return
    refimpl = load_engine("refimpl")
    loaded = load([OPEN_FINDINGS])
    assert loaded.problems == []
    for case in loaded.cases:
        assert run_case(case, torch_engine).verdict == "passed", case.id
        assert run_case(case, refimpl).verdict == "failed", \
            f"{case.id} now passes on refimpl: move it to spec/cases/fuzz_findings.yaml"


def test_finding_program_keeps_only_what_the_mismatch_needs(found):
    """Every name the reduced program binds is read later or is what differed (no filler)."""
    finding = found[0].finding
    tree = ast.parse(finding.program.source())
    bound = {target.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
             for target in ast.walk(node) if isinstance(target, ast.Name)
             and isinstance(target.ctx, ast.Store)}
    read = {node.id for node in ast.walk(tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    differing = " ".join(d.what for d in finding.mismatch.differences)
    unused = {name for name in bound - read if not re.search(rf"\b{name}\b", differing)}
    assert not unused, finding.program.source()
    assert len(finding.program.steps) == finding.mismatch.step + 1
