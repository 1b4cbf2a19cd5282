"""The in-tree adapters for real engines (tinygrad, Paddle, PyTorch's compiled autograd, and JAX,
HIPS autograd and MLX on the shipped tape) run the spec through the CLI, and their expectations
files are true (torch-func-tape, the tape's proof, is tests/conformance/test_tape.py's).

Each engine is an optional extra: its tests are skipped, with the install command, when its
package is missing. Where installed, the run must exit 0 (no `failed` or `error` verdict) with
no stale entry, and each engine bug its expectations file lists must still make its case fail:
an `xfail`, not a pass that would leave the entry stale and the bug unreported.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ENGINES = {
    "tinygrad": ("tinygrad", "pip install -c constraints.txt tinygrad"),
    "jax": ("jax", "pip install -c constraints.txt 'jax[cpu]'"),
    "autograd": ("autograd", "pip install -c constraints.txt autograd"),
    "mlx": ("mlx.core", "pip install -c constraints.txt 'mlx[cpu]'"),
    "paddle": ("paddle", "pip install paddlepaddle==3.3.1"),
    "torch-compiled-autograd": ("torch._dynamo.compiled_autograd",
                                "pip install -c constraints.txt torch"),
}
SPECS = {"torch-compiled-autograd": "torch-compiled-autograd"}
OPTIONS = {"torch-compiled-autograd": ["--timeout", "30"]}
"""Compiled autograd compiles every new graph with Dynamo, so a case's time is compile work that
scales with the machine's load: custom_function.backward-may-run-a-nested-backward (a new
Function class per run, compiled up to Dynamo's recompile limit of 8) takes 2.6 s on an idle
machine and ran past the default 10 s once in CI beside the other xdist worker. The default
limit is there to catch hangs; this engine gets room for its compiler."""
"""How each engine is named on the command line (default: its adapter module's factory)."""
FINDINGS = ROOT / "reports" / "findings"


def _bug_cases(engine: str) -> list[str]:
    """Every case of a BUG finding of `engine` (reports/findings/<engine>/findings.yaml)."""
    path = FINDINGS / engine / "findings.yaml"
    if not path.is_file():
        return []
    return sorted(case for finding in yaml.safe_load(path.read_text())["findings"]
                  if finding["kind"] == "BUG" for case in finding["cases"])


BUGS = {engine: _bug_cases(engine) for engine in ENGINES}


def _run_suite(engine: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    module, install = ENGINES[engine]
    pytest.importorskip(module, reason=f"{engine} is not installed ({install})")
    if engine == "tinygrad":
        from conformance.engines.tinygrad_adapter import choose_device

        if choose_device() == "PYTHON" and not shutil.which("clang"):
            pytest.skip("tinygrad's PYTHON device still compiles some kernels (Tensor.arange) "
                        "with clang, so tinygrad's run needs clang on PATH: apt-get install "
                        "clang (CI installs it)")
    report = tmp_path_factory.mktemp(engine) / "report.json"
    completed = subprocess.run(
        [sys.executable, "-m", "conformance", "run", "-q",
         "--engine", SPECS.get(engine, f"conformance.engines.{engine}_adapter:make_engine"),
         *OPTIONS.get(engine, []), "--json", str(report)],
        # An engine that crashes in a worker may write anything to the output it inherits:
        # Paddle's C++ crash traceback holds bytes that are not UTF-8.
        cwd=ROOT, capture_output=True, text=True, errors="replace", timeout=900, check=False,
    )
    data = json.loads(report.read_text()) if report.exists() else {}
    data["returncode"], data["output"] = completed.returncode, completed.stdout[-4000:] \
        + completed.stderr[-4000:]
    return data


@pytest.fixture(scope="module", params=sorted(ENGINES))
def suite_run(request: pytest.FixtureRequest,
              tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    return request.param, _run_suite(request.param, tmp_path_factory)


def test_engine_runs_the_spec_with_every_divergence_listed(
        suite_run: tuple[str, dict[str, Any]]) -> None:
    engine, data = suite_run
    assert data["returncode"] == 0, data["output"]
    (described,) = data["engines"]
    assert described["available"], described["unavailable_reason"]
    assert described["stale_expectations"] == []
    # At the level the adapter holds its engine to (the tape's engines: `semantics`).
    level = described.get("level", "full")
    unexpected = [(r["case_id"], r["verdict"], r["message"]) for r in data["results"]
                  if r["verdicts"].get(level, r["verdict"]) in ("failed", "error", "stale")]
    assert unexpected == []
    assert described["summary"]["xfail"] > 0, "the expectations file is read and used"


def test_engine_bugs_are_still_reported(suite_run: tuple[str, dict[str, Any]]) -> None:
    engine, data = suite_run
    verdicts = {r["case_id"]: r["verdict"] for r in data["results"]}
    listed = {case_id: verdicts.get(case_id) for case_id in BUGS[engine]}
    assert listed == {case_id: "xfail" for case_id in BUGS[engine]}
