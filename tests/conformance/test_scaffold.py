"""`new-adapter NAME` writes a skeleton that runs at once, and whose expectations file can be
bootstrapped in one command so that its own test passes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("module", [None, "refimpl"], ids=["other API", "torch-like"])
def test_a_new_adapter_runs_at_once_and_passes_its_test_once_bootstrapped(tmp_path, module):
    extra = ["--module", module] if module else []
    made = cli("new-adapter", "mine", "--out", str(tmp_path), *extra, cwd=REPO)
    assert made.returncode == 0, made.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "mine_adapter.py", "mine_expectations.yaml", "test_mine_conformance.py"]
    first = cli("run", "--engine", "mine_adapter:make_engine", "-q", cwd=tmp_path)
    assert "TOTAL" in first.stdout, first.stderr
    assert first.returncode in (0, 1)
    boot = cli("run", "--engine", "mine_adapter:make_engine", "-q", "--write-expectations",
               "mine_expectations.yaml", cwd=tmp_path)
    assert boot.returncode == first.returncode
    test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "test_mine_conformance.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=900)
    assert test.returncode == 0, test.stdout[-3000:]


def test_new_adapter_refuses_bad_names_and_overwriting(tmp_path):
    assert cli("new-adapter", "My-Engine", "--out", str(tmp_path), cwd=REPO).returncode == 2
    assert cli("new-adapter", "mine", "--out", str(tmp_path), cwd=REPO).returncode == 0
    again = cli("new-adapter", "mine", "--out", str(tmp_path), cwd=REPO)
    assert again.returncode == 2 and "would overwrite" in again.stderr
