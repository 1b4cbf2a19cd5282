"""A case or an engine cannot rewrite a report: whatever an assertion message holds, the
Markdown keeps its structure, the terminal shows escapes instead of obeying them, and the
HTML and JUnit reports hold the text as text."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from conformance.report.formats import failure_text, summary_table, to_html, to_junit, to_markdown
from conformance.run.executor import CaseResult, Check
from conformance.verdict.suite import EngineRun, SuiteReport

# Closes the report's fence and opens a heading, raw HTML and a link; clears the screen, sets
# the terminal's title, returns the cursor, and reverses and breaks the text shown after it.
HOSTILE = ("boom\n```\n# Injected heading\n<img src=x onerror=alert(1)>\n"
           "<script>alert(1)</script> [link](http://example.com) **bold**\n"
           "\x1b[2J\x1b]0;pwned\x07\r\x9b31m\u202egnp.exe\u2028\u2029\x85\u2066\x7f end")
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


class Info:
    name, version, device, available, unavailable_reason = "e", "1", "cpu", True, None
    message_strictness, spec = "exact", None

    def describe(self) -> dict:
        return {"name": self.name}


def hostile_report(engine_name: str = "e") -> SuiteReport:
    info = Info()
    info.name = engine_name
    check = Check(step=0, level="semantics", what="x.grad", message=HOSTILE,
                  expected=HOSTILE, actual=HOSTILE, snippet=HOSTILE)
    failed = CaseResult(case_id="topic.a", engine=engine_name, verdict="failed", topic="topic",
                        step=0, snippet=HOSTILE, message=HOSTILE, expected=HOSTILE,
                        actual=HOSTILE, checks=[check, check])
    xfail = CaseResult(case_id="topic.b", engine=engine_name, verdict="xfail", topic="topic",
                       message=HOSTILE, reason=HOSTILE)
    return SuiteReport([], [EngineRun(info, results=[failed, xfail],
                                      repros={"topic.a": HOSTILE})])


def test_markdown_keeps_its_structure_whatever_a_message_holds() -> None:
    markdown_it = pytest.importorskip("markdown_it")
    text = to_markdown(hostile_report())
    assert not CONTROLS.search(text)
    # Rendered with raw HTML allowed, as GitHub and most viewers do.
    page = markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(text)
    headings = re.findall(r"<h\d>(.*?)</h\d>", page)
    assert not any("Injected" in h for h in headings), headings
    assert "<img" not in page and "<script" not in page and "<a href" not in page
    assert "<strong>bold" not in page
    assert page.count("<pre>") == 1, "the failure is one code block"
    assert "# Injected heading" in page and "&lt;script&gt;" in page, "the text is all there"


def test_markdown_inline_text_cannot_open_a_table_cell_or_markup() -> None:
    markdown_it = pytest.importorskip("markdown_it")
    report = hostile_report(engine_name="e | x `y` <b>z</b> _w_")
    page = markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table") \
        .render(to_markdown(report))
    assert "<b>" not in page and "<em>" not in page and "<code>y</code>" not in page
    first_row = re.search(r"<tbody>\s*<tr>(.*?)</tr>", page, re.S).group(1)
    assert first_row.count("<td") == 3 + 5, "the engine's name stays in its cell"


def test_terminal_output_shows_escapes_instead_of_obeying_them() -> None:
    from conformance.report.formats import terminal_text

    report = hostile_report(engine_name="evil\x1b]0;title\x07")
    for text in (failure_text(report.runs[0].results[0]), summary_table(report)):
        assert not CONTROLS.search(text), repr(text)
    printed = failure_text(report.runs[0].results[0])
    assert "\\x1b[2J" in printed and "\\x1b]0;pwned\\x07" in printed and "\\r" not in printed
    assert "\\u202e" in printed and "\\u2028" in printed and "\\x85" in printed
    assert "\\x9b" in printed and "\\x7f" in printed and "\\u2066" in printed
    assert "evil\\x1b]0;title\\x07" in summary_table(report)
    assert terminal_text("a\tb\nc") == "a\tb\nc", "tabs and newlines stay"


def test_html_and_junit_hold_hostile_text_as_text() -> None:
    report = hostile_report()
    page = to_html(report)
    assert "<script" not in page and "<img" not in page and not CONTROLS.search(page)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    root = ET.fromstring(to_junit(report))
    assert [element.tag for element in root.iter()] == [
        "testsuites", "testsuite", "testcase", "failure", "testcase", "skipped"]
    failure = root.find(".//failure")
    assert "<script>alert(1)</script>" in failure.text, "XML escaping keeps the text"
    assert not CONTROLS.search(failure.text + failure.get("message"))


def test_engine_report_keeps_its_structure_whatever_an_engine_says() -> None:
    markdown_it = pytest.importorskip("markdown_it")
    from conformance.report.engine_report import render

    run = hostile_report().runs[0]
    run.results[1].reason = "names its nodes <Op>GradNode; `code` and 0.1 * w.grad stay"
    text = render(run, {"topic.a": HOSTILE})
    assert not CONTROLS.search(text)
    page = markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(text)
    assert "<script" not in page and "<img" not in page
    assert not any("Injected" in h for h in re.findall(r"<h\d>(.*?)</h\d>", page))
    assert "&lt;Op&gt;GradNode" in page and "<code>code</code>" in page
    assert "0.1 * w.grad" in page
