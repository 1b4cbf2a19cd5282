"""`benchmarks/bench_refimpl.py --quick` runs and prints its three rows (no timing asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_quick_benchmark_prints_the_three_rows() -> None:
    pytest.importorskip("torch", reason="the benchmark compares refimpl with PyTorch")
    done = subprocess.run([sys.executable, "benchmarks/bench_refimpl.py", "--quick"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {match.group(1): match.group(0) for match in re.finditer(
        r"^\((a|b|c)\) .*\s(\d+\.\d\d)\s+<= [\d.]+\s+(PASS|MISS)$", done.stdout, re.MULTILINE)}
    assert sorted(rows) == ["a", "b", "c"], done.stdout
    assert "chain of 1,000 scalar ops" in rows["a"]
    assert "MLP 4x" in rows["b"]
    assert "peak memory" in rows["c"]
    assert re.search(r"threads: \d+ for both engines", done.stdout)
