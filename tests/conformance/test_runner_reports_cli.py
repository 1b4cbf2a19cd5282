"""Reports (JSON keys, JUnit, Markdown), CLI exit codes, engine selection and the pytest plugin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import conformance.engines as engines
from conformance.casefile.loader import load
from conformance.engines import EngineError, load_engine
from conformance.report.formats import to_junit, to_markdown, write_atomic, write_reports
from conformance.verdict.suite import run_suite

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent)}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def report(resources, torch_engine):
    cases = load([DATA / "cases", DATA / "failing"], resources).cases
    return run_suite(cases, [torch_engine])


def test_json_report_keys(tmp_path, report):
    path = tmp_path / "out" / "run.json"
    write_reports(report, json_path=path)
    data = json.loads(path.read_text())
    assert {"version", "commit"} <= set(data["suite"])
    engine = data["engines"][0]
    assert {"name", "version", "device", "summary"} <= set(engine)
    assert engine["summary"] == {"passed": 4, "failed": 1, "error": 0, "unsupported": 0,
                                 "xfail": 0, "stale": 0}
    rows = {(r["case_id"], r["engine"]): r for r in data["results"]}
    assert len(rows) == 5
    failed = rows[("broken.wrong-grad", "torch")]
    assert (failed["verdict"], failed["step"]) == ("failed", 0)
    assert failed["expected"] == "[3.0, 3.0]"


def test_junit_and_markdown(report):
    root = ET.fromstring(to_junit(report))
    suite = root.find("testsuite")
    assert suite.get("failures") == "1" and suite.get("tests") == "5"
    failure = root.find(".//testcase[@name='broken.wrong-grad']/failure")
    assert "expected: [3.0, 3.0]" in failure.text
    markdown = to_markdown(report)
    assert "| torch | 2.13" in markdown and "### `broken.wrong-grad` on torch" in markdown


def test_atomic_write_leaves_nothing_half_written(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old")

    with pytest.raises(TypeError):
        write_atomic(target, 12)  # not text: the write fails midway
    assert target.read_text() == "old"
    assert list(tmp_path.iterdir()) == [target]


def test_cli_exit_codes_and_outputs(tmp_path):
    spec = ["--spec", str(DATA / "spec")]
    good = cli("run", "--engine", "torch", "--cases", str(DATA / "cases"), *spec,
               "--json", str(tmp_path / "r.json"))
    assert good.returncode == 0, good.stderr
    assert "TOTAL  torch" in good.stdout and "wall time" in good.stdout
    bad = cli("run", "--engine", "torch", "--cases", str(DATA / "failing"), *spec,
              "--repro-dir", str(tmp_path / "repro"))
    assert bad.returncode == 1
    assert "broken.wrong-grad [torch]: failed" in bad.stdout
    script = tmp_path / "repro" / "torch__broken.wrong-grad.py"
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120)
    assert "x.grad = tensor([1., 1.]) | expected: [3.0, 3.0]" in ran.stdout
    unknown = cli("run", "--engine", "no-such-engine", "--cases", str(DATA / "cases"), *spec)
    assert unknown.returncode == 2 and "unknown engine 'no-such-engine'" in unknown.stderr
    listing = cli("list", "--cases", str(DATA / "cases"), *spec)
    assert listing.returncode == 0 and listing.stdout.startswith("basic.leaf\t")
    shown = cli("show", "basic.leaf", "--cases", str(DATA / "cases"), *spec)
    assert shown.returncode == 0
    assert "quote: A tensor created by the user is a leaf." in shown.stdout
    factory = cli("run", "--engine", "fake_engines:make_renamed_torch", "-k", "basic.leaf",
                  "--cases", str(DATA / "cases"), *spec)
    assert factory.returncode == 0 and "renamed-torch" in factory.stdout


def test_engine_by_entry_point_and_module_factory(monkeypatch, torch_engine):
    point = EntryPoint("renamed", "fake_engines:make_renamed_torch", engines.ENTRY_POINT_GROUP)
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent))
    monkeypatch.setattr(engines, "entry_points",
                        lambda group: [point] if group == engines.ENTRY_POINT_GROUP else [])
    assert load_engine("renamed").name == "renamed-torch"
    assert load_engine("fake_engines:make_renamed_torch").name == "renamed-torch"
    with pytest.raises(EngineError, match="not a conformance.engines.Engine"):
        load_engine("fake_engines:not_an_engine")
    assert load_engine("mygrad").name == "mygrad"


def test_cuda_engines_say_why_they_are_unavailable(torch_engine):
    import torch

    engine = load_engine("torch-cuda")
    if torch.cuda.is_available():
        assert engine.available and engine.device == "cuda"
    else:
        assert engine.unavailable_reason == "no usable CUDA device for torch"


def test_pytest_plugin_collects_and_reports(tmp_path):
    args = [sys.executable, "-m", "pytest", "conformance", "--engine", "torch", "-p",
            "no:cacheprovider", "--spec", str(DATA / "spec"), "--cases", str(DATA / "cases"),
            "--cases", str(DATA / "failing"), "-m", "basic or broken", "-rA"]
    proc = subprocess.run(args, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=180)
    out = proc.stdout
    assert proc.returncode == 1, out
    assert "PASSED conformance::basic.leaf[torch]" in out
    assert "FAILED conformance::broken.wrong-grad[torch]" in out
    assert "expected: [3.0, 3.0]" in out and "repro script:" in out and "import torch" in out


def test_pytest_plugin_stays_out_of_ordinary_runs(tmp_path):
    test = tmp_path / "test_plain.py"
    test.write_text("def test_one():\n    assert True\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", str(test), "conformance",
                           "-p", "no:cacheprovider", "-q", "--rootdir", str(REPO)],
                          cwd=REPO, env=ENV, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout
    assert "1 passed" in proc.stdout
