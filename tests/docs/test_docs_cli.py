"""`python -m conformance docs`: results from JSON reports, open findings, usage errors."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from pathlib import Path

import pytest
from docs_support import Page, require

from conformance.casefile.loader import DEFAULT_SPEC_DIR
from conformance.cli import main
from conformance.reference.results import ReportsError, read_reports

FINDING = """\
- id: fuzz_0123456789.refimpl-vs-torch
  rule: An open finding, shown on the fuzzing page.
  features: [autograd_state, node_introspection]
  sources:
    - doc: autodiff-notes-flat
      quote: "calculate gradients through the DAG."
  steps:
    - run: |
        x = torch.ones(2, requires_grad=True)
        y = x * 2
      expect:
        grad_fn_name(y): MulBackward0
"""


@pytest.fixture(scope="module")
def small_spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's spec with one topic, so a build takes a moment."""
    spec = tmp_path_factory.mktemp("small") / "spec"
    shutil.copytree(DEFAULT_SPEC_DIR, spec, ignore=shutil.ignore_patterns("cases"))
    (spec / "cases").mkdir()
    shutil.copy(DEFAULT_SPEC_DIR / "cases" / "retain_grad.yaml", spec / "cases")
    return spec


def _main(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        status = main([str(a) for a in argv])
    return status, out.getvalue()


def test_reports_and_open_findings(small_spec, tmp_path):
    require(("sphinx", "myst_parser", "furo"), "building the reference needs the docs extra")
    reports = tmp_path / "reports"
    status, log = _main("run", "--engine", "refimpl", "--cases", small_spec / "cases",
                        "--spec", small_spec, "--json", reports / "refimpl.json", "-q")
    assert status == 0, log
    findings = tmp_path / "open"
    findings.mkdir()
    (findings / "fuzz_0123456789.yaml").write_text(FINDING, encoding="utf-8")
    out = tmp_path / "html"
    status, log = _main("docs", "--out", out, "--spec", small_spec, "--reports", reports,
                        "--open-findings", findings)
    assert status == 0, log
    engines = sorted(p.name for p in (out / "engines").glob("*.html"))
    assert engines == ["index.html", "refimpl.html"]
    refimpl = Page(out / "engines" / "refimpl.html").text
    assert "the report refimpl.json" in refimpl and "11 passed" in refimpl
    fuzzing = Page(out / "fuzzing.html")
    assert "fuzz_0123456789.refimpl-vs-torch" in fuzzing.ids
    assert "An open finding, shown on the fuzzing page." in fuzzing.text


def test_a_newer_report_wins_for_its_engine(small_spec, tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    assert _main("run", "--engine", "refimpl", "--cases", small_spec / "cases", "--spec",
                 small_spec, "--json", first, "-q")[0] == 0
    shutil.copy(first, second)
    second.write_text(second.read_text().replace('"passed"', '"failed"'))
    os.utime(first, (1, 1))
    (results,) = read_reports(tmp_path)
    assert {v.verdict for v in results.verdicts.values()} == {"failed"}
    assert results.origin == "the report b.json"


def test_a_bad_report_names_its_file(tmp_path):
    (tmp_path / "broken.json").write_text('{"engines": 1}')
    with pytest.raises(ReportsError, match="broken.json"):
        read_reports(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ReportsError, match="no \\*.json reports"):
        read_reports(empty)


@pytest.mark.parametrize("argv, message", [
    (["--reports", "missing"], "--reports missing: no such folder"),
    (["--reports", ".", "--engine", "torch"], "give one of them"),
    (["--engine", "no-such-engine"], "unknown engine"),
])
def test_usage_errors(tmp_path, argv, message):
    require(("sphinx", "myst_parser", "furo"), "the docs command checks its options first")
    status, log = _main("docs", "--out", tmp_path / "html", *argv)
    assert status == 2 and message in log, log


def test_kept_sources_lose_old_pages_and_foreign_folders_are_refused(small_spec, tmp_path):
    from conformance.reference.generate import GenerateError, collect, write_sources

    site = collect(small_spec, results=[])
    folder = tmp_path / "source"
    write_sources(site, folder)
    (folder / "gone_topic.rst").write_text("a topic that no longer exists\n")
    pages = write_sources(site, folder)
    assert not (folder / "gone_topic.rst").exists()
    assert "retain_grad.rst" in pages and (folder / "retain_grad.rst").is_file()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.md").write_text("mine\n")
    with pytest.raises(GenerateError, match="not empty"):
        write_sources(site, foreign)
    assert (foreign / "notes.md").read_text() == "mine\n"
