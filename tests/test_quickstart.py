"""The README's quickstart is a promise: two commands, and the first one's suite run is green.

CI runs the second command (`.ci/run`); this file runs the main job of the first and checks that
README, CI and tox agree on the one torch pin.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def quickstart_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1, "the quickstart has one bash block"
    return [line for line in blocks[0].splitlines() if line.strip()]


def test_quickstart_has_exactly_two_commands() -> None:
    install_and_run, run_tests = quickstart_commands()
    assert "-c constraints.txt" in install_and_run
    assert "conformance run --engine refimpl --engine torch" in install_and_run
    assert "pytest" in run_tests


def test_ci_runs_the_readme_install_and_test_command() -> None:
    install_and_run, run_tests = quickstart_commands()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    ci_lines = [line for line in ci.splitlines() if line.strip() and not line.startswith("#")]
    assert ci_lines[-1] == run_tests, "CI's last command is the README's test command"
    install = shlex.split(install_and_run.split("&&")[0])
    ci_installs = [shlex.split(line) for line in ci_lines if "pip install" in line]
    assert ci_installs and all(set(install) <= set(words) for words in ci_installs), \
        "CI installs exactly what the README installs (quiet flags aside)"


def test_torch_pin_lives_in_one_constraints_file() -> None:
    pins = [line for line in (ROOT / "constraints.txt").read_text().splitlines()
            if line.startswith("torch")]
    assert pins == ["torch==2.13.0"]
    assert "constraints.txt" in (ROOT / "tox.ini").read_text()
    assert "torch==" not in (ROOT / "pyproject.toml").read_text(), "no second pin to drift"
    assert "torch==" not in (ROOT / "tox.ini").read_text(), "no second pin to drift"


def test_installed_torch_is_the_pinned_oracle() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    assert torch.__version__.split("+")[0] == "2.13.0"


def test_main_job_passes_every_applicable_case_on_refimpl_and_torch(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the main job compares against torch, which is missing")
    install_and_run = quickstart_commands()[0]
    run = shlex.split(install_and_run.split("&&", 1)[1])
    assert run[:3] == ["python3", "-m", "conformance"]
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, *run[1:], "--json", str(report)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "TOTAL" in done.stdout and "wall time" in done.stdout
    engines = {e["name"]: e for e in json.loads(report.read_text())["engines"]}
    assert set(engines) == {"refimpl", "torch"}
    for engine in engines.values():
        summary = engine["summary"]
        assert summary["failed"] == summary["error"] == 0
        assert summary["passed"] > 150, summary
