"""The published engine reports (reports/engines/<engine>.md) are what one command writes, and
they lead with the genuine divergences."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PUBLISHED = REPO / "reports" / "engines"


def test_every_in_tree_adapter_has_a_published_report():
    assert sorted(p.stem for p in PUBLISHED.glob("*.md")) == [
        "jax", "mygrad", "paddle", "tinygrad", "torch-compiled-autograd"]
    for path in PUBLISHED.glob("*.md"):
        text = path.read_text(encoding="utf-8")
        assert "| semantics |" in text and "## Genuine divergences" in text
        assert "## Not yet in the expectations file" not in text, path.name


def test_paddle_and_tinygrad_reports_name_their_real_bugs_with_a_repro():
    paddle = (PUBLISHED / "paddle.md").read_text(encoding="utf-8")
    assert "w -= 0.1 * w.grad" in paddle and "paddle.to_tensor([5])" in paddle
    tinygrad = (PUBLISHED / "tinygrad.md").read_text(encoding="utf-8")
    assert "gives x.grad 12, not 9" in tinygrad and "clone()" in tinygrad


def test_the_mygrad_report_is_up_to_date(tmp_path):
    pytest.importorskip("mygrad", reason="the MyGrad report is regenerated with MyGrad")
    done = subprocess.run([sys.executable, "-m", "conformance", "engine-report", "mygrad",
                           "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "mygrad.md").read_text() == (PUBLISHED / "mygrad.md").read_text(), \
        "reports/engines/mygrad.md is stale: run `python -m conformance engine-report mygrad`"
