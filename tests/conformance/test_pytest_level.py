"""The pytest plugin reaches the verdict `run` reaches, at the adapter's level or `--level`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(REPO)])}
ENGINE = "fake_engines:make_semantics_renamed_nodes"
# Node names are all this engine gets wrong: a surface failure, a pass at `semantics`.
CASE = "grad_fn.views-have-view-nodes"


def _run_verdict(tmp_path: Path, *level: str) -> str:
    report = tmp_path / "report.json"
    subprocess.run([sys.executable, "-m", "conformance", "run", "--engine", ENGINE, "-k", CASE,
                    "--json", str(report), "-q", *level], cwd=REPO, env=ENV,
                   capture_output=True, text=True, timeout=300)
    (result,) = json.loads(report.read_text())["results"]
    return "passed" if result["verdicts"][result["level"]] == "passed" else "failed"


def _pytest_verdict(*level: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "pytest", "conformance", "--engine", ENGINE,
                           "-k", CASE, "-p", "no:cacheprovider", "-rA", *level],
                          cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    for verdict in ("PASSED", "FAILED"):
        if f"{verdict} conformance::{CASE}[" in proc.stdout:
            return verdict.lower()
    raise AssertionError(proc.stdout[-3000:] + proc.stderr[-3000:])


@pytest.mark.parametrize("level", [(), ("--level", "full"), ("--level", "semantics")],
                         ids=["adapter-level", "full", "semantics"])
def test_pytest_and_run_agree(tmp_path: Path, level: tuple[str, ...]) -> None:
    expected = "failed" if level == ("--level", "full") else "passed"
    assert _run_verdict(tmp_path, *level) == expected
    assert _pytest_verdict(*level) == expected
