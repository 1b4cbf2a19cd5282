"""Reports of a suite run: the terminal table, JSON, JUnit XML and Markdown.

Files are written atomically (a temporary file in the same folder, then renamed), so a crash
never leaves half a report behind, with the permissions of any file the user creates. Before a
run starts, each report file is replaced by a placeholder that says the run is in progress
(`running_placeholder`), so an earlier run's report never looks like this one's. A run that was
interrupted writes what it has, marked `interrupted`. Text from engines and case files is made
safe for each format: no lone surrogates anywhere; no character that drives a terminal or
reorders text (control characters, line separators, bidi overrides) in what is printed, nor in
XML, HTML or Markdown; in Markdown, a fence longer than any backtick run of the text it holds
and every other character Markdown or HTML would read as markup escaped.
"""

from __future__ import annotations

import html
import json
import os
import re
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from conformance.run.executor import LEVELS
from conformance.run.labels import CONTROL, escape_controls, plain_line
from conformance.verdict.causes import PLACEHOLDER, by_cause, expectations_text, unfilled
from conformance.verdict.expectations import Expectations
from conformance.verdict.suite import SuiteReport, suite_info

COLUMNS = ("passed", "failed", "error", "unsupported", "xfail")
# XML 1.0 forbids these even as character references: what `terminal_text` leaves of them (the
# non-characters U+FFFE and U+FFFF) is written as an escape too.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
# Markdown reads these as markup: emphasis, code, links, tables, strikethrough, headings, and
# `_` only at a word's edge (inside a word, as in is_leaf, it is text and stays readable).
_MARKDOWN = re.compile(r"[\\`*\[\]|~#]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def safe_text(text: str) -> str:
    """`text` with lone surrogates written as `\\udXXX` escapes (they cannot be encoded)."""
    if not isinstance(text, str):
        raise TypeError(f"report text must be str, not {type(text).__name__}")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def terminal_text(text: str) -> str:
    """`text` safe to print: every character a terminal would obey rather than show (an
    escape sequence that clears the screen or sets the title, a carriage return that hides
    what came before it, a bidi override) written as a visible escape such as `\\x1b`;
    newlines and tabs stay."""
    return escape_controls(safe_text(text), keep="\n\t")


def markdown_text(text: str) -> str:
    """`text` as literal Markdown inline text, on one line: no character of it can open a
    block, a code span, a link, emphasis, a table cell or an HTML tag."""
    text = " ".join(terminal_text(text).split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN.sub(lambda m: "\\" + m.group(), text)


def markdown_code(text: str, in_table: bool = True) -> str:
    """`text` as a Markdown code span on one line, delimited by more backticks than any run of
    them inside it. In a table cell `|` is still escaped: GFM splits cells before it reads
    code spans."""
    text = " ".join(terminal_text(text).split())
    if in_table:
        text = text.replace("|", "\\|")
    ticks = "`" * (_longest_run(text, "`") + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def markdown_fence(text: str, info: str = "text") -> list[str]:
    """`text` as the lines of a fenced code block whose fence is longer than any backtick run
    in it, so no line of the text can close the block."""
    fence = "`" * max(3, _longest_run(text, "`") + 1)
    return [fence + info, *terminal_text(text).splitlines(), fence]


def _longest_run(text: str, char: str) -> int:
    runs = re.findall(f"{re.escape(char)}+", text)
    return max((len(run) for run in runs), default=0)


def _xml_text(text: str) -> str:
    return _XML_ILLEGAL.sub(lambda m: f"\\u{ord(m.group()):04x}", terminal_text(text))


def running_placeholder(kind: str) -> str:
    """What a report file holds while its run is in progress."""
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if kind == "json":
        return json.dumps({"status": "running", "started": started,
                           "suite": suite_info()}, indent=2) + "\n"
    if kind == "html":
        return (f"<!DOCTYPE html><html><body><p>A run is in progress (started {started}); "
                "this file is replaced when it ends.</p></body></html>\n")
    if kind == "junit":
        return ("<?xml version='1.0' encoding='utf-8'?>\n<testsuites name=\"autograd-conformance\" "
                f"tests=\"0\"><!-- run in progress since {started} --></testsuites>\n")
    return f"# Conformance report\n\nA run is in progress (started {started}); this file is " \
           "replaced when it ends.\n"


def _columns(report: SuiteReport) -> tuple[str, ...]:
    stale = any(run.summary()["stale"] for run in report.runs)
    return COLUMNS + (("stale",) if stale else ())


def summary_table(report: SuiteReport) -> str:
    """Topic by engine, with the verdict counts, a total per engine and the wall time."""
    columns = _columns(report)
    rows = [("topic", "engine", *columns)]
    for topic in report.topics():
        for run in report.runs:
            counts = run.summary(topic)
            rows.append((plain_line(topic), plain_line(run.engine.name),
                         *(str(counts[c]) for c in columns)))
    for run in report.runs:
        counts = run.summary()
        rows.append(("TOTAL", plain_line(run.engine.name), *(str(counts[c]) for c in columns)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1])]
        cells += [cell.rjust(width) for cell, width in zip(row[2:], widths[2:], strict=True)]
        lines.append("  ".join(cells))
        if index == 0 or (index == len(rows) - len(report.runs) - 1):
            lines.append("-" * len(lines[-1]))
    for run in report.runs:
        engine = run.engine
        state = "" if engine.available else \
            f"  UNAVAILABLE: {plain_line(engine.unavailable_reason, 1000)}"
        other = "semantics" if run.level == "full" else "full"
        counts = run.summary(level=other)
        # Each fact on its own line: a newline in an engine's version cannot forge another.
        lines.append(f"{plain_line(engine.name)}: {plain_line(engine.version)} on "
                     f"{plain_line(engine.device)}, level {plain_line(run.level)} "
                     f"(at {other}: {counts['passed']} passed, {counts['failed']} failed, "
                     f"{counts['error']} error), {run.wall_s:.2f} s{state}")
        for entry in run.unused_expectations:
            lines.append(f"  stale expectation in {run.expectations_source}:{entry.line}: "
                         f"{entry.prefix} matches no case")
        placeholders = unfilled(run.results, run.level)
        if placeholders:
            lines.append(f"  {len(placeholders)} xfail case(s) still have the reason "
                         f"--write-expectations wrote ('{PLACEHOLDER} ...') in "
                         f"{run.expectations_source}: replace each with what the engine does "
                         "instead, so a known failure says why it is known")
    lines.append(f"{len(report.cases)} cases, wall time {report.wall_s:.2f} s")
    return terminal_text("\n".join(lines))


def failure_text(result: Any) -> str:
    """A failure as a person reads it: case, step, snippet, expected against actual (safe to
    print: see `terminal_text`)."""
    lines = [f"{plain_line(result.case_id)} [{plain_line(result.engine)}]: "
             f"{plain_line(result.verdict)}"]
    if result.step is not None:
        lines.append(f"  step {result.step}:")
    if result.snippet:
        lines += ["    " + line for line in result.snippet.rstrip().splitlines()]
    lines.append(f"  {result.message.rstrip()}")
    if result.expected is not None:
        lines.append(f"  expected: {result.expected}")
    if result.actual is not None:
        lines.append(f"  actual:   {result.actual}")
    checks = getattr(result, "checks", None) or []
    if len(checks) > 1:
        lines.append("  every failed check:")
        lines += [f"    step {c.step} [{plain_line(c.level)}] {c.message}" for c in checks]
    return terminal_text("\n".join(lines))


def to_json(report: SuiteReport) -> dict[str, Any]:
    return {
        "status": "interrupted" if report.interrupted else "complete",
        "suite": {**suite_info(), "cases": len(report.cases)},
        "wall_time_s": round(report.wall_s, 4),
        "engines": [
            {
                **run.engine.describe(),
                "wall_time_s": round(run.wall_s, 4),
                "level": run.level,
                "summary": run.summary(),
                "summaries": {level: run.summary(level=level) for level in LEVELS},
                "causes": [{"level": c.level, "cause": c.text, "count": c.count,
                            "cases": c.case_ids}
                           for c in by_cause(_at_level(run))],
                "unfilled_expectations": [r.case_id for r in unfilled(run.results, run.level)],
                "stale_expectations": [
                    {"prefix": e.prefix, "reason": e.reason, "line": e.line}
                    for e in run.unused_expectations
                ],
            }
            for run in report.runs
        ],
        "results": [result.to_dict() for run in report.runs for result in run.results],
    }


def to_junit(report: SuiteReport) -> str:
    root = ET.Element("testsuites", name="autograd-conformance",
                      time=f"{report.wall_s:.3f}")
    if report.interrupted:
        root.set("status", "interrupted")
    for run in report.runs:
        counts = run.summary()
        suite = ET.SubElement(
            root, "testsuite", name=_xml_text(run.engine.name), tests=str(len(run.results)),
            failures=str(counts["failed"]), errors=str(counts["error"]),
            skipped=str(counts["unsupported"] + counts["xfail"]), time=f"{run.wall_s:.3f}",
        )
        for result in run.results:
            case = ET.SubElement(suite, "testcase",
                                 classname=_xml_text(f"{run.engine.name}.{result.topic}"),
                                 name=_xml_text(result.case_id), time=f"{result.duration_s:.4f}")
            if result.verdict in ("failed", "error"):
                first = (result.message.splitlines() or [""])[0]
                node = ET.SubElement(case, "failure" if result.verdict == "failed" else "error",
                                     message=_xml_text(first))
                node.text = _xml_text(failure_text(result))
            elif result.verdict in ("unsupported", "xfail"):
                ET.SubElement(case, "skipped", type=_xml_text(result.verdict),
                              message=_xml_text(result.reason or result.message))
            elif result.verdict == "stale":
                ET.SubElement(case, "system-out").text = _xml_text(result.message)
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def to_markdown(report: SuiteReport) -> str:
    info = suite_info()
    columns = _columns(report)
    lines = [
        "# Conformance report",
        "",
        f"Suite {info['version']} (commit {info['commit'] or 'unknown'}), "
        f"{len(report.cases)} cases, {report.wall_s:.2f} s.",
        "",
        *(["**Interrupted:** the run was stopped; only the cases that ran are counted.", ""]
          if report.interrupted else []),
        "| engine | version | device | " + " | ".join(columns) + " |",
        "| --- | --- | --- | " + " | ".join("---:" for _ in columns) + " |",
    ]
    for run in report.runs:
        counts = run.summary()
        lines.append(f"| {markdown_text(run.engine.name)} | "
                     f"{markdown_text(str(run.engine.version))} | "
                     f"{markdown_text(str(run.engine.device))} | "
                     + " | ".join(str(counts[c]) for c in columns) + " |")
    lines += ["", "## Both levels", "",
              "`full` holds an engine to PyTorch's surface too (node names, messages, repr, "
              "identity); `semantics` to values, gradients, flags and which step raises or "
              "warns.", "", "| engine | level run | full: passed | failed | semantics: passed "
              "| failed |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    for run in report.runs:
        full, semantic = run.summary(level="full"), run.summary(level="semantics")
        lines.append(f"| {markdown_text(run.engine.name)} | {markdown_text(run.level)} "
                     f"| {full['passed']} "
                     f"| {full['failed']} "
                     f"| {semantic['passed']} | {semantic['failed']} |")
    for run in report.runs:
        causes = by_cause(_at_level(run))
        if causes:
            lines += ["", f"## What to fix first: {markdown_text(run.engine.name)}", "",
                      "| level | cases | cause | e.g. |", "| --- | ---: | --- | --- |"]
            lines += [f"| {markdown_text(c.level)} | {c.count} | {markdown_text(c.text)} | "
                      f"{markdown_code(c.case_ids[0])} |" for c in causes]
    for run in report.runs:
        reasons = _expected_divergences(run)
        if reasons:
            lines += ["", f"## Expected divergences: {markdown_text(run.engine.name)}", "",
                      "| cases | reason | e.g. |", "| ---: | --- | --- |"]
            lines += [f"| {len(ids)} | {markdown_text(reason)} | {markdown_code(ids[0])} |"
                      for reason, ids in reasons]
    lines += ["", "## By topic", "", "| topic | engine | " + " | ".join(columns) + " |",
              "| --- | --- | " + " | ".join("---:" for _ in columns) + " |"]
    for topic in report.topics():
        for run in report.runs:
            counts = run.summary(topic)
            lines.append(f"| {markdown_text(topic)} | {markdown_text(run.engine.name)} | "
                         + " | ".join(str(counts[c]) for c in columns) + " |")
    bad = [r for run in report.runs for r in _at_level(run)]
    if bad:
        lines += ["", "## Failures", ""]
        for result in bad:
            lines += [f"### {markdown_code(result.case_id, in_table=False)} on "
                      f"{markdown_text(result.engine)}", "",
                      *markdown_fence(failure_text(result)), ""]
    return "\n".join(lines).rstrip() + "\n"


_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:72em;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .6em}
th{background:#f3f3f3}td.n{text-align:right}.passed{background:#e6f4ea}.failed{background:#fce8e6}
.mixed{background:#fef7e0}.none{background:#eee;color:#666}
details{margin:.3em 0}summary{cursor:pointer}
pre{background:#f7f7f7;padding:.6em;overflow-x:auto;white-space:pre-wrap}
.surface{color:#666}.semantics{color:#a50e0e;font-weight:600}
"""


def to_html(report: SuiteReport) -> str:
    """One self-contained HTML file (no server, no script): totals at both levels, what to
    fix first, the expected divergences with their reasons, a topic by engine matrix (grey
    where nothing ran), and each failure expandable to its checks, snippet, expected, actual
    and repro script."""
    def e(text: object) -> str:
        return html.escape(terminal_text(str(text)))

    info = suite_info()
    out = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
           "<title>Conformance report</title>", f"<style>{_CSS}</style></head><body>",
           "<h1>Conformance report</h1>",
           f"<p>Suite {e(str(info['version']))} (commit {e(str(info['commit'] or 'unknown'))}),"
           f" {len(report.cases)} cases, {report.wall_s:.2f} s.</p>"]
    if report.interrupted:
        out.append("<p><strong>Interrupted:</strong> only the cases that ran are counted.</p>")
    columns = _columns(report)
    out.append("<table><tr><th>engine</th><th>version</th><th>level</th>" + "".join(
        f"<th>{c}</th>" for c in columns) + "<th>semantics: passed</th><th>failed</th></tr>")
    for run in report.runs:
        counts, semantic = run.summary(), run.summary(level="semantics")
        out.append(f"<tr><td>{e(run.engine.name)}</td><td>{e(str(run.engine.version))}</td>"
                   f"<td>{e(run.level)}</td>" + "".join(f"<td class=n>{counts[c]}</td>"
                                                        for c in columns)
                   + f"<td class=n>{semantic['passed']}</td>"
                     f"<td class=n>{semantic['failed']}</td></tr>")
    out.append("</table>")
    for run in report.runs:
        causes = by_cause(_at_level(run))
        if causes:
            out.append(f"<h2>What to fix first: {e(run.engine.name)}</h2><table><tr><th>level"
                       "</th><th>cases</th><th>cause</th><th>cases</th></tr>")
            out += [f"<tr><td {_class(c.level)}>{e(c.level)}</td><td class=n>{c.count}</td>"
                    f"<td>{e(c.text)}</td><td>{e(', '.join(c.case_ids[:3]))}"
                    f"{' ...' if c.count > 3 else ''}</td></tr>" for c in causes]
            out.append("</table>")
    for run in report.runs:
        reasons = _expected_divergences(run)
        if reasons:
            out.append(f"<h2>Expected divergences: {e(run.engine.name)}</h2><table><tr>"
                       "<th>cases</th><th>reason</th><th>e.g.</th></tr>")
            out += [f"<tr><td class=n>{len(ids)}</td><td>{e(reason)}</td>"
                    f"<td><code>{e(ids[0])}</code></td></tr>" for reason, ids in reasons]
            out.append("</table>")
    out.append("<h2>Topics by engine</h2><table><tr><th>topic</th>" + "".join(
        f"<th>{e(run.engine.name)}</th>" for run in report.runs) + "</tr>")
    for topic in report.topics():
        cells = []
        for run in report.runs:
            counts = run.summary(topic)
            bad = counts["failed"] + counts["error"]
            ran = counts["passed"] + bad + counts["xfail"] + counts["stale"]
            if bad:
                kind = "failed"
            elif ran == 0:
                kind = "none"  # nothing ran: not a pass, whatever the engine lacks
            else:
                kind = "mixed" if counts["xfail"] or counts["stale"] else "passed"
            text = [f"{counts['passed']}/{ran} passed" if ran else "none run"]
            text += [f"{bad} failing"] if bad else []
            text += [f"{counts[c]} {c}" for c in ("xfail", "stale", "unsupported") if counts[c]]
            cells.append(f"<td class={kind}>{', '.join(text)}</td>")
        out.append(f"<tr><td>{e(topic)}</td>{''.join(cells)}</tr>")
    out.append("</table>")
    for run in report.runs:
        failing = _at_level(run)
        if not failing:
            continue
        out.append(f"<h2>Failures on {e(run.engine.name)} ({len(failing)})</h2>")
        for result in failing:
            checks = "".join(f"<li {_class(c.level)}>step {e(c.step)} [{e(c.level)}] "
                             f"{e(c.message)}</li>" for c in result.checks)
            repro = run.repros.get(result.case_id)
            out.append(
                f"<details><summary><code>{e(result.case_id)}</code>: {e(result.verdict)} - "
                f"{e((result.message.splitlines() or [''])[0])}</summary>"
                + (f"<ul>{checks}</ul>" if checks else "")
                + f"<pre>{e(failure_text(result))}</pre>"
                + (f"<details><summary>repro script</summary><pre>{e(repro)}</pre></details>"
                   if repro else "") + "</details>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _class(name: str) -> str:
    """An HTML class attribute, quoted, of one class name made from data (a check's level comes
    from the engine's worker): what is not a letter, digit, `_` or `-` in it becomes `-`. The
    classes the writer names itself (`n`, `passed`) are words of this module."""
    return f'class="{re.sub(r"[^A-Za-z0-9_-]", "-", str(name)) or "-"}"'


def _expected_divergences(run: Any) -> list[tuple[str, list[str]]]:
    """The reasons of the run's xfail cases at its level, each with its case ids, the reason
    with the most cases first."""
    reasons: dict[str, list[str]] = {}
    for result in run.results:
        if result.verdict_at(run.level) == "xfail":
            reasons.setdefault(result.reason or "", []).append(result.case_id)
    return sorted(reasons.items(), key=lambda kv: -len(kv[1]))


def _at_level(run: Any) -> list[Any]:
    """The run's failed and errored results at its level."""
    return [r for r in run.results if r.verdict_at(run.level) in ("failed", "error")]


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` so that readers see either the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(safe_text(text))
        os.chmod(temporary, 0o666 & ~_UMASK)  # mkstemp makes it private; a report is not
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _json_text(data: Any) -> str:
    """`data` as JSON whose every string is safe to print: JSON escapes C0 controls only, so a
    C1 control or a bidi override (never outside a string) becomes a `\\u` escape too; the
    newlines of the indentation stay."""
    text = json.dumps(data, indent=2, default=str, ensure_ascii=False)
    return CONTROL.sub(lambda m: "\n" if m.group() == "\n" else f"\\u{ord(m.group()):04x}",
                       text) + "\n"


def write_reports(report: SuiteReport, json_path: Path | None = None,
                  junit_path: Path | None = None, markdown_path: Path | None = None,
                  html_path: Path | None = None) -> None:
    # Render everything first, so a failure while rendering writes no file at all.
    rendered = []
    if json_path is not None:
        rendered.append((json_path, _json_text(to_json(report))))
    if junit_path is not None:
        rendered.append((junit_path, to_junit(report)))
    if markdown_path is not None:
        rendered.append((markdown_path, to_markdown(report)))
    if html_path is not None:
        rendered.append((html_path, to_html(report)))
    for path, text in rendered:
        write_atomic(path, text)


def write_expectations(path: Path, engine: str, results: Sequence[Any],
                       cases: Mapping[str, Any] | None = None) -> None:
    """Write `path`; entries already in it that still match a failing case keep their reason.
    `cases` (case id to `Case`) tells apart groups whose failures read alike."""

    known = Expectations.load(Path(path)) if Path(path).is_file() else None
    write_atomic(Path(path), expectations_text(engine, results, known, cases))
