"""Reports of a suite run: the terminal table, JSON, JUnit XML and Markdown.

Files are written atomically (a temporary file in the same folder, then renamed), so a crash
never leaves half a report behind.
"""

from __future__ import annotations

import json
import os
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from conformance.suite import SuiteReport, suite_info

COLUMNS = ("passed", "failed", "error", "unsupported", "xfail")


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
            rows.append((topic, run.engine.name, *(str(counts[c]) for c in columns)))
    for run in report.runs:
        counts = run.summary()
        rows.append(("TOTAL", run.engine.name, *(str(counts[c]) for c in columns)))
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
        state = "" if engine.available else f"  UNAVAILABLE: {engine.unavailable_reason}"
        lines.append(f"{engine.name}: {engine.version} on {engine.device}, "
                     f"{run.wall_s:.2f} s{state}")
        for entry in run.unused_expectations:
            lines.append(f"  stale expectation in {run.expectations_source}:{entry.line}: "
                         f"{entry.prefix} matches no case")
    lines.append(f"{len(report.cases)} cases, wall time {report.wall_s:.2f} s")
    return "\n".join(lines)


def failure_text(result: Any) -> str:
    """A failure as a person reads it: case, step, snippet, expected against actual."""
    lines = [f"{result.case_id} [{result.engine}]: {result.verdict}"]
    if result.step is not None:
        lines.append(f"  step {result.step}:")
    if result.snippet:
        lines += ["    " + line for line in result.snippet.rstrip().splitlines()]
    lines.append(f"  {result.message.rstrip()}")
    if result.expected is not None:
        lines.append(f"  expected: {result.expected}")
    if result.actual is not None:
        lines.append(f"  actual:   {result.actual}")
    return "\n".join(lines)


def to_json(report: SuiteReport) -> dict[str, Any]:
    return {
        "suite": {**suite_info(), "cases": len(report.cases)},
        "wall_time_s": round(report.wall_s, 4),
        "engines": [
            {
                **run.engine.describe(),
                "wall_time_s": round(run.wall_s, 4),
                "summary": run.summary(),
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
    for run in report.runs:
        counts = run.summary()
        suite = ET.SubElement(
            root, "testsuite", name=run.engine.name, tests=str(len(run.results)),
            failures=str(counts["failed"]), errors=str(counts["error"]),
            skipped=str(counts["unsupported"] + counts["xfail"]), time=f"{run.wall_s:.3f}",
        )
        for result in run.results:
            case = ET.SubElement(suite, "testcase", classname=f"{run.engine.name}.{result.topic}",
                                 name=result.case_id, time=f"{result.duration_s:.4f}")
            if result.verdict == "failed":
                node = ET.SubElement(case, "failure", message=result.message.splitlines()[0])
                node.text = failure_text(result)
            elif result.verdict == "error":
                node = ET.SubElement(case, "error", message=result.message.splitlines()[0])
                node.text = failure_text(result)
            elif result.verdict in ("unsupported", "xfail"):
                ET.SubElement(case, "skipped", type=result.verdict,
                              message=result.reason or result.message)
            elif result.verdict == "stale":
                ET.SubElement(case, "system-out").text = result.message
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
        "| engine | version | device | " + " | ".join(columns) + " |",
        "| --- | --- | --- | " + " | ".join("---:" for _ in columns) + " |",
    ]
    for run in report.runs:
        counts = run.summary()
        lines.append(f"| {run.engine.name} | {run.engine.version} | {run.engine.device} | "
                     + " | ".join(str(counts[c]) for c in columns) + " |")
    lines += ["", "## By topic", "", "| topic | engine | " + " | ".join(columns) + " |",
              "| --- | --- | " + " | ".join("---:" for _ in columns) + " |"]
    for topic in report.topics():
        for run in report.runs:
            counts = run.summary(topic)
            lines.append(f"| {topic} | {run.engine.name} | "
                         + " | ".join(str(counts[c]) for c in columns) + " |")
    bad = [r for run in report.runs for r in run.results if r.verdict in ("failed", "error")]
    if bad:
        lines += ["", "## Failures", ""]
        for result in bad:
            lines += [f"### `{result.case_id}` on {result.engine}", "", "```text",
                      failure_text(result), "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` so that readers see either the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def write_reports(report: SuiteReport, json_path: Path | None = None,
                  junit_path: Path | None = None, markdown_path: Path | None = None) -> None:
    # Render everything first, so a failure while rendering writes no file at all.
    rendered = []
    if json_path is not None:
        rendered.append((json_path, json.dumps(to_json(report), indent=2, default=str) + "\n"))
    if junit_path is not None:
        rendered.append((junit_path, to_junit(report)))
    if markdown_path is not None:
        rendered.append((markdown_path, to_markdown(report)))
    for path, text in rendered:
        write_atomic(path, text)
