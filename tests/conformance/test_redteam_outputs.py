"""The holes a red team found in the writers (at 6b35e3a), each closed: engine names, versions,
levels and verdicts are checked where they enter (`conformance.run.labels`, `docs --reports`)
and escaped by every writer, and no regex over an engine's text takes more than linear time."""

from __future__ import annotations

import contextlib
import html
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from conformance.report.formats import summary_table, to_html, to_junit, to_markdown, write_reports
from conformance.run.executor import CaseResult, Check
from conformance.verdict.suite import EngineRun, SuiteReport

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
# What a terminal obeys instead of showing: every control character, newline and tab but these.
RAW_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
SCRIPT = "<script>alert(1)</script>"
# Closes a role and opens a raw HTML block: as a verdict or an engine name, a script on a page.
RST_BREAKOUT = f"xfail`\n\n.. raw:: html\n\n   {SCRIPT}\n\n:spec:verdict:`x"
# Ends the class attribute a level is written into and adds an event handler or an element.
ATTRIBUTE_BREAKOUT = f"semantics onmouseover=alert(1) x='\"><img src=x onerror=alert(1)>{SCRIPT}"


class Facts:
    """An engine's facts as a report sees them, any of them hostile."""

    def __init__(self, name: str = "e", version: str = "1", level: str = "full") -> None:
        self.name, self.version, self.level = name, version, level
        self.device, self.available, self.unavailable_reason = "cpu", True, None
        self.message_strictness, self.spec = "exact", None

    def describe(self) -> dict:
        return {"name": self.name, "version": self.version}


def report_of(facts: Facts, check_level: str = "semantics", case_id: str = "topic.a",
              topic: str = "topic") -> SuiteReport:
    check = Check(step=0, level=check_level, what="x.grad", message="x.grad: wrong")
    failed = CaseResult(case_id=case_id, engine=facts.name, verdict="failed", topic=topic,
                        step=0, snippet="y = x * 2", message="x.grad: wrong", checks=[check])
    return SuiteReport([], [EngineRun(facts, results=[failed], level=facts.level)])


class Elements(HTMLParser):
    """Every element of a page with its attributes, as a browser would read them."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, dict[str, str | None]]] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, dict(attrs)))


# -- 6: a cause is found in linear time, whatever the message -----------------------------------

# Each made a pattern of `normalise` scan the rest of the line again from every position.
HOSTILE_LINES = {"tensor": "tensor(", "quote": " 'a", "double quote": '"a', "bracket": "[ [a]",
                 "brackets": "[[", "number": "1.1e", "hex": "0x"}
NORMALISE_ALL = textwrap.dedent("""
    import json, sys, time
    from conformance.verdict import causes
    if sys.argv[1] == "uncapped":
        causes.MAX_LINE = 10**8  # the rewrites alone, without the cap on the line's length
    seconds = {}
    for name, unit in json.loads(sys.argv[2]).items():
        message = "assert: " + unit * (2**20 // len(unit))
        start = time.perf_counter()
        causes.normalise(message)
        seconds[name] = time.perf_counter() - start
    print(json.dumps(seconds))
""")


@pytest.mark.parametrize("cap", ["capped", "uncapped"])
def test_a_cause_is_found_in_linear_time_whatever_the_message(cap: str) -> None:
    # In a child process with a deadline: the quadratic patterns took hours on a megabyte.
    done = subprocess.run([sys.executable, "-c", NORMALISE_ALL, cap, json.dumps(HOSTILE_LINES)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seconds = json.loads(done.stdout)
    assert set(seconds) == set(HOSTILE_LINES)
    slow = {name: round(s, 2) for name, s in seconds.items() if s > 2.0}
    assert not slow, f"a megabyte line took more than 2 s to normalise: {slow}"


def test_the_linear_rewrites_find_the_causes_the_patterns_found() -> None:
    from conformance.verdict.causes import normalise

    assert normalise("x: expected tensor([1., 2.]), got tensor([1., 3.], grad_fn=<Add>) now") \
        == "<tensor>: expected tensor(…), got tensor(…) now"
    assert normalise("unclosed tensor(1 and 'a quote") == "unclosed tensor(N and 'a quote"
    assert normalise("the engine's 'Add' and \"Mul\" can't") == "the engine's '…' and '…' can't"


# -- 7: an engine's level is text in the HTML and Markdown reports ------------------------------


def test_a_level_cannot_add_an_attribute_or_an_element_to_the_html_report() -> None:
    page = to_html(report_of(Facts(level=ATTRIBUTE_BREAKOUT), check_level=ATTRIBUTE_BREAKOUT))
    elements = Elements(page).found
    assert not [tag for tag, _ in elements if tag in ("script", "img")]
    assert not [(tag, attrs) for tag, attrs in elements
                if any(key.startswith("on") for key in attrs)]
    classes = [attrs["class"] for _, attrs in elements if "class" in attrs]
    assert len(classes) > 2 and all(re.fullmatch(r"[A-Za-z0-9_-]+", c) for c in classes), classes
    assert "semantics onmouseover=alert(1)" in html.unescape(page), "the level is shown, as text"


def test_a_level_cannot_add_a_cell_or_markup_to_the_markdown_report() -> None:
    markdown_it = pytest.importorskip("markdown_it")
    level = f"full | extra cell | <img src=x onerror=alert(1)> {SCRIPT}"
    text = to_markdown(report_of(Facts(level=level), check_level=level))
    page = markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(text)
    assert "<img" not in page and "<script" not in page
    assert "<td>full | extra cell | &lt;img src=x onerror=alert(1)&gt;" in page, \
        "the level stays in its cell, as text"


# -- 8, 9: the site takes names and verdicts as data, never as markup or paths ------------------


def _small_spec(root: Path) -> Path:
    spec = root / "spec"
    (spec / "cases").mkdir(parents=True)
    for name in ("features.yaml", "api.yaml", "case.schema.json", "INTERPRETING.md"):
        shutil.copy(REPO / "spec" / name, spec / name)
    (spec / "sources.yaml").write_text(yaml.safe_dump({"documents": [{
        "id": "doc", "title": "A document", "author": "someone", "site": "example",
        "kind": "blog", "reflects": "2.0", "file": "doc.txt"}]}), encoding="utf-8")
    (spec / "claims.yaml").write_text(yaml.safe_dump({"documents": [{"doc": "doc", "claims": [
        {"id": "doc.1", "quote": "a tensor made by the user is a leaf", "says": "leaf"}]}]}),
        encoding="utf-8")
    case = {"id": "leaf.ones", "rule": "A tensor made by the user is a leaf.",
            "sources": [{"doc": "doc", "quote": "a tensor made by the user is a leaf"}],
            "features": ["autograd_state"],
            "steps": [{"run": "x = torch.ones(2)", "expect": {"x.is_leaf": True}}]}
    (spec / "cases" / "leaf.yaml").write_text(yaml.safe_dump([case]), encoding="utf-8")
    return spec


def _docs_extra() -> None:
    for module in ("sphinx", "myst_parser", "furo"):
        pytest.importorskip(module, reason="building the reference needs the docs extra")


@pytest.mark.parametrize("name", [
    f"torch </engines/torch>`\n\n.. raw:: html\n\n   {SCRIPT}\n\n:doc:`x",
    "../../outside", "engines/../../outside", "index", "a b", ""],
    ids=["closes-the-role", "parent", "folder-and-parent", "index", "space", "empty"])
def test_the_site_refuses_an_engine_name_that_is_not_a_name(tmp_path: Path, name: str) -> None:
    from conformance.reference.generate import GenerateError, collect, write_sources
    from conformance.reference.results import EngineResults

    site = collect(_small_spec(tmp_path), results=[EngineResults(name)])
    folder = tmp_path / "site" / "source"
    with pytest.raises(GenerateError, match="engine"):
        write_sources(site, folder)
    assert not [p for p in tmp_path.rglob("*.rst") if folder not in p.parents]


def test_no_page_is_written_outside_the_source_folder(tmp_path: Path) -> None:
    from conformance.reference.generate import GenerateError, collect, write_sources

    site = collect(_small_spec(tmp_path), results=[])
    site.topics["../../outside"] = site.topics["leaf"]
    with pytest.raises(GenerateError, match="outside"):
        write_sources(site, tmp_path / "site" / "source")
    assert not (tmp_path / "outside.rst").exists()


def test_a_verdict_is_a_badge_or_plain_text_never_markup() -> None:
    from conformance.reference.sections import verdict_badge

    assert verdict_badge("xfail") == ":spec:verdict:`xfail`"
    assert verdict_badge("not run") == ":spec:verdict:`not-run`"
    assert verdict_badge("passed", 3) == ":spec:verdict:`3 passed`"
    shown = verdict_badge(RST_BREAKOUT)
    assert "\n" not in shown and ":spec:verdict:" not in shown and "<script>" not in shown


def test_the_site_shows_a_hostile_verdict_and_version_as_text(tmp_path: Path) -> None:
    _docs_extra()
    from conformance.reference.cli import sphinx_build
    from conformance.reference.generate import collect, write_sources
    from conformance.reference.results import EngineResults, Verdict

    # Made directly, as `run_engines` makes them: the pages must hold them as text anyway.
    results = EngineResults("torch", version=f"2.0 `x <javascript:alert(1)>`_ {SCRIPT}",
                            level=RST_BREAKOUT,
                            verdicts={"leaf.ones": Verdict(RST_BREAKOUT, SCRIPT, SCRIPT, 0)})
    site = collect(_small_spec(tmp_path), results=[results])
    write_sources(site, tmp_path / "source")
    log = io.StringIO()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        status = sphinx_build(tmp_path / "source", tmp_path / "html", tmp_path / "doctrees")
    assert status == 0, log.getvalue()
    pages = {p.name: p.read_text(encoding="utf-8") for p in (tmp_path / "html").rglob("*.html")}
    assert {"leaf.html", "torch.html", "index.html"} <= set(pages)
    for name, page in pages.items():
        assert "alert(1)</script>" not in page, name
        assert "javascript:" not in "".join(str(attrs.get("href")) for _, attrs
                                            in Elements(page).found), name
    assert "raw:: html" in pages["leaf.html"], "the verdict is on the case's page, as text"


def _report(folder: Path, engine: dict, row: dict) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / "run.json"
    info = {"name": "torch", "version": "2.13", "level": "full", **engine}
    path.write_text(json.dumps({"status": "complete", "engines": [info], "results": [
        {"engine": info["name"], "case_id": "leaf.ones", "verdict": "passed", **row}]}),
        encoding="utf-8")
    return path


@pytest.mark.parametrize(("engine", "row", "said"), [
    ({}, {"verdict": RST_BREAKOUT}, "not a known verdict"),
    ({}, {"verdicts": {"full": RST_BREAKOUT}}, "not a known verdict"),
    ({"name": "../../outside"}, {}, "not a valid name"),
    ({"name": f"torch`\n.. raw:: html\n{SCRIPT}"}, {}, "not a valid name"),
    ({"level": RST_BREAKOUT}, {}, "not a known level"),
    ({"message_strictness": RST_BREAKOUT}, {}, "not a known message strictness"),
    ({}, {"verdict": "failed", "step": f"0)\n\n.. raw:: html\n\n{SCRIPT}"}, "not a step"),
], ids=["verdict", "verdict-at-level", "name-path", "name-markup", "level", "strictness",
        "step"])
def test_docs_reports_refuses_what_the_runner_never_writes(tmp_path: Path, engine: dict,
                                                          row: dict, said: str) -> None:
    from conformance.reference.results import ReportsError, read_reports

    path = _report(tmp_path / "reports", engine, row)
    with pytest.raises(ReportsError) as raised:
        read_reports(tmp_path / "reports")
    message = str(raised.value)
    assert str(path) in message and said in message, message
    assert "python -m conformance run --json" in message, "it says what to do"
    assert not RAW_CONTROLS.search(message) and "\n" not in message, "safe to print"


def test_docs_reports_reads_what_the_runner_writes(tmp_path: Path) -> None:
    from conformance.reference.results import read_reports

    _report(tmp_path / "reports", {"level": "semantics", "message_strictness": "type",
                                   "version": "2.13\x1b[2J\nsecond line"},
            {"verdicts": {"semantics": "xfail"}, "reason": "known", "step": 1})
    (results,) = read_reports(tmp_path / "reports")
    assert (results.name, results.level, results.message_strictness) == \
        ("torch", "semantics", "type")
    assert results.verdicts["leaf.ones"].verdict == "xfail"
    assert results.version == "2.13\\x1b[2J\\x0asecond line", "one line, escapes visible"


def test_the_docs_command_names_the_bad_report_and_exits_2(tmp_path: Path, capsys) -> None:
    _docs_extra()
    from conformance.cli import main

    path = _report(tmp_path / "reports", {}, {"verdict": RST_BREAKOUT})
    status = main(["docs", "--reports", str(tmp_path / "reports"), "--spec",
                   str(_small_spec(tmp_path)), "--out", str(tmp_path / "html")])
    err = capsys.readouterr().err
    assert status == 2 and f"error: {path}" in err and "not a known verdict" in err
    assert not (tmp_path / "html" / "index.html").exists()


# -- 14: JUnit XML that parses, whatever an engine is called ------------------------------------


def test_the_junit_report_parses_whatever_the_engine_is_called() -> None:
    name = "e\x1b[31m\x00\x0c\ufffe"
    root = ET.fromstring(to_junit(report_of(Facts(name=name), case_id="topic.a\x01",
                                            topic="topic\x02")))
    suite = root.find("testsuite")
    case = root.find(".//testcase")
    assert suite.get("name") == "e\\x1b[31m\\x00\\x0c\\ufffe"
    assert case.get("classname") == "e\\x1b[31m\\x00\\x0c\\ufffe.topic\\x02"
    assert case.get("name") == "topic.a\\x01"
    assert root.find(".//failure") is not None


# -- 15: no raw terminal escapes: pytest's summary, fuzz's mismatches, the summary table -------


def _env(*paths: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in (*paths, REPO))}


def test_pytest_shows_an_expectations_reason_escaped(tmp_path: Path) -> None:
    case = "grad_fn.views-have-view-nodes"  # fails on the renamed-nodes engine: an xfail here
    (tmp_path / "expectations.yaml").write_text(yaml.safe_dump(
        {"xfail": {case: "names nodes \x1b]0;pwned\x07\x1b[2J its own way"}}), encoding="utf-8")
    (tmp_path / "xfail_engine.py").write_text(textwrap.dedent("""
        from pathlib import Path

        from fake_engines import make_renamed_nodes


        def make():
            engine = make_renamed_nodes()
            engine.expectations = Path(__file__).with_name("expectations.yaml")
            return engine
    """), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "--engine", "xfail_engine:make", "-k",
         case, "-p", "no:cacheprovider", "-rA", "--color=no"],
        cwd=REPO, env=_env(tmp_path, HERE), capture_output=True, text=True, timeout=300)
    assert f"XFAIL conformance::{case}[renamed-nodes]" in done.stdout, done.stdout + done.stderr
    assert "names nodes \\x1b]0;pwned\\x07\\x1b[2J its own way" in done.stdout
    assert not RAW_CONTROLS.search(done.stdout), "a raw escape was printed"


def test_fuzz_shows_an_engines_error_text_escaped(tmp_path: Path) -> None:
    (tmp_path / "escaping_engine.py").write_text(textwrap.dedent("""
        from conformance.engines import load_engine
        from conformance.engines.generic import TorchLikeEngine


        class Escaping(TorchLikeEngine):
            def node_name(self, node):
                raise RuntimeError("\\x1b]0;pwned\\x07\\x1b[2J cleared")


        def make():
            return Escaping("torch-escaping", "torch",
                            repro_import=load_engine("torch").repro_import)
    """), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "conformance", "fuzz", "--engines", "torch,escaping_engine:make",
         "--profile", "ci", "--examples", "200", "--out", str(tmp_path / "out"),
         "--no-progress"], cwd=REPO, env=_env(tmp_path), capture_output=True, text=True,
        timeout=300)
    assert done.returncode == 1 and "mismatch between torch" in done.stdout, done.stderr
    assert "RuntimeError: \\x1b]0;pwned\\x07\\x1b[2J cleared" in done.stdout
    assert not RAW_CONTROLS.search(done.stdout), "a raw escape was printed"


def test_an_engines_version_cannot_forge_a_line_of_the_summary() -> None:
    table = summary_table(report_of(Facts(version="1.0\nFORGED: 999 passed\x1b[2J")))
    assert not [line for line in table.splitlines() if line.startswith("FORGED")]
    assert "e: 1.0\\x0aFORGED: 999 passed\\x1b[2J on cpu" in table


# -- the rule itself, and JSON, which held already ----------------------------------------------


def test_the_label_rule_says_what_was_wrong_where_and_what_to_do() -> None:
    from conformance.run.labels import LabelError, engine_name, known, plain_line

    for name in ("torch", "torch-compiled-autograd", "mlx", "torch+cuda:0", "paddle_2.6"):
        assert engine_name(name, "here") == name
    for name in ("", "../x", "a/b", "a..b", ".hidden", "-x", "a b", "e\x1b", "x" * 65, None):
        with pytest.raises(LabelError, match=r"^the adapter x: .* use 1 to 64 letters"):
            engine_name(name, "the adapter x")
    assert known("semantics", ("full", "semantics"), "level", "f.json") == "semantics"
    with pytest.raises(LabelError, match=r"^f\.json: 'surface\\x0a' is not a known level: use "
                                         r"one of full, semantics$"):
        known("surface\n", ("full", "semantics"), "level", "f.json")
    assert plain_line("a\x1b[2J\r\n\x85\u202e\ud800b") == "a\\x1b[2J\\x0d\\x0a\\x85\\u202e\\ud800b"
    assert plain_line("x" * 300, 10) == "x" * 9 + "…"


def test_the_json_report_keeps_a_hostile_name_exactly(tmp_path: Path) -> None:
    name = f"e\x1b]0;t\x07\n{SCRIPT}\u202e\x9b2J é"
    write_reports(report_of(Facts(name=name)), json_path=tmp_path / "run.json")
    text = (tmp_path / "run.json").read_text(encoding="utf-8")
    assert not RAW_CONTROLS.search(text), "C1 controls and bidi overrides are \\u escapes too"
    assert "é" in text, "other text stays readable"
    assert json.loads(text)["engines"][0]["name"] == name


def test_a_findings_script_cannot_close_its_fence_or_drive_a_terminal(tmp_path: Path) -> None:
    from conformance.report.findings import render_findings

    (tmp_path / "repro.py").write_text(
        'print("expected: 1\\nactual: 2\\x1b[2J\\n```\\n# Injected heading")', encoding="utf-8")
    (tmp_path / "findings.yaml").write_text(yaml.safe_dump({"findings": [{
        "id": "f1", "kind": "MESSAGE", "severity": "parity", "title": "t", "script": "repro.py",
        "cases": ["topic.a"], "upstream": "known: #1"}]}), encoding="utf-8")
    lines = render_findings(tmp_path)
    assert not [line for line in lines if RAW_CONTROLS.search(line)]
    opening = next(i for i, line in enumerate(lines) if line.startswith("```") and "text" in line)
    fence = lines[opening].removesuffix("text")
    assert len(fence) > 3 and lines.index(fence, opening + 1) > lines.index("# Injected heading")
