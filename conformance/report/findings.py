"""Root causes of an engine's divergences, as its maintainers would file them.

`reports/findings/<engine>/findings.yaml` lists one entry per root cause: its kind (`BUG`,
`LIMITATION`, `MESSAGE`), severity, title, the API affected, what it was checked on, the cases it
fails, a standalone repro script beside the file, where the behaviour is documented (a
limitation), its upstream status and, for a bug not found upstream, a draft issue.
`engine-report` runs each script and prints its output in the report.

Every script is standalone (the engine's own API, no import of this project) and prints two
labelled lines, named by the file's `compare` (default `[expected, actual]`: PyTorch's result,
then the engine's); a finding holds only while the two differ, which the project's tests check.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from conformance.casefile.files import read_yaml, read_yaml_list
from conformance.report.formats import markdown_code, markdown_fence, markdown_text

KINDS = ("BUG", "LIMITATION", "MESSAGE")
SEVERITIES = ("crash", "wrong value", "inconsistent state", "parity")
"""Worst first: a valid program dies or fails inside the engine (memory corrupted, a signal, an
internal error); a value or gradient is silently wrong; a check is lost, or state carries over or
contradicts itself; PyTorch's surface only (another message, order, warning, documented refusal)."""
COMPARE = ("expected", "actual")
DEFAULT_DIR = Path("reports") / "findings"
SCRIPT_TIMEOUT = 300


class FindingsError(ValueError):
    """A findings file that does not say what a report needs; the message says where."""


def compared(path: Path) -> tuple[str, str]:
    """The labels of the two lines each script of `path` (a findings.yaml) prints."""
    data, _ = read_yaml(path)
    labels = data.get("compare", COMPARE) if isinstance(data, dict) else COMPARE
    if not (isinstance(labels, list | tuple) and len(labels) == 2
            and all(isinstance(x, str) and x.isidentifier() for x in labels)):
        raise FindingsError(f"{path}: 'compare' must name two labels, e.g. [expected, actual]")
    return labels[0], labels[1]


def load_findings(path: Path) -> list[dict[str, Any]]:
    """The findings of `path` (a findings.yaml), checked: every field a report needs."""
    try:
        entries = read_yaml_list(path, "findings")
    except ValueError as exc:
        raise FindingsError(str(exc)) from None
    compared(path)
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        where = f"{path}: finding {index}"
        if not isinstance(entry, dict):
            raise FindingsError(f"{where}: expected a mapping")
        for key in ("id", "kind", "severity", "title", "script", "cases", "upstream"):
            if not entry.get(key):
                raise FindingsError(f"{where}: '{key}' is missing or empty")
        where = f"{path}: finding {entry['id']!r}"
        if entry["id"] in seen:
            raise FindingsError(f"{where}: the id is used twice")
        seen.add(entry["id"])
        if entry["kind"] not in KINDS:
            raise FindingsError(f"{where}: kind must be one of {', '.join(KINDS)}")
        if entry["severity"] not in SEVERITIES:
            raise FindingsError(f"{where}: severity must be one of {', '.join(SEVERITIES)}")
        if entry["kind"] == "LIMITATION" and not entry.get("source"):
            raise FindingsError(f"{where}: a LIMITATION cites where it is documented "
                                "('source')")
        if not isinstance(entry["cases"], list):
            raise FindingsError(f"{where}: 'cases' must be a list of case ids")
        if entry["kind"] == "BUG" and str(entry["upstream"]).startswith("not found") \
                and not (entry.get("draft") or {}).get("body"):
            raise FindingsError(f"{where}: a bug not found upstream needs a draft issue "
                                "('draft' with 'title' and 'body')")
        if not (path.parent / entry["script"]).is_file():
            raise FindingsError(f"{where}: script {entry['script']} is not beside the file")
    return entries


def reason_finding(reason: str) -> str | None:
    """The finding an expectations reason names: `BUG: [finding-id] ...` -> `finding-id`."""
    _, _, rest = reason.partition(": [")
    finding, closed, _ = rest.partition("]")
    return finding if closed and finding else None


def run_script(script: Path) -> str:
    """What the repro script prints (stdout; stderr only when it fails)."""
    try:
        done = subprocess.run([sys.executable, script.name], cwd=script.parent,
                              capture_output=True, text=True, timeout=SCRIPT_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"(no output: the script ran past {SCRIPT_TIMEOUT} s)"
    out = done.stdout.strip()
    if done.returncode != 0:
        out += f"\n(exit status {done.returncode})\n" + done.stderr.strip()[-2000:]
    return out


def render_findings(findings_dir: Path, *, run: bool = True) -> list[str]:
    """Markdown lines: a summary table, then each finding with its script's output."""
    path = findings_dir / "findings.yaml"
    entries = load_findings(path)
    first, second = compared(path)
    counts = {kind: sum(1 for e in entries if e["kind"] == kind) for kind in KINDS}
    upstream = [str(e["upstream"]) for e in entries]
    known = sum(1 for u in upstream if u.startswith(("known", "fixed")))
    if not entries:
        return ["", "## Findings, one per root cause", "",
                "None: no divergence of this engine is, once checked, a bug or a documented "
                "limitation worth filing (the file, "
                f"{markdown_code(str(path), in_table=False)}, says what was checked)."]
    lines = ["", "## Findings, one per root cause", "",
             f"{len(entries)} root causes: " + ", ".join(f"{n} {k}" for k, n in counts.items()
                                                          if n)
             + f"; {known} known upstream, {len(entries) - known} not found. Each script is "
             "standalone (the engine's own API, no import of this project) and prints "
             f"`{first}:` and `{second}:` side by side; they are in "
             f"{markdown_code(str(findings_dir), in_table=False)}.",
             "", "| finding | kind | severity | cases | upstream |",
             "| --- | --- | --- | ---: | --- |"]
    order = sorted(entries, key=lambda e: (KINDS.index(e["kind"]),
                                          SEVERITIES.index(e["severity"])))
    lines += [f"| [{e['id']}](#{e['id']}) | {e['kind']} | {e['severity']} | {len(e['cases'])} | "
              f"{markdown_text(str(e['upstream']))} |" for e in order]
    for entry in order:
        lines += ["", f"### {entry['id']}", "",
                  f"**{entry['kind']}** ({entry['severity']}): {markdown_text(entry['title'])}"]
        for key, label in (("api", "API"), ("checked", "Checked on")):
            if entry.get(key):
                lines += ["", f"{label}: {markdown_text(str(entry[key]))}."]
        lines += ["", "Cases: " + ", ".join(markdown_code(c, in_table=False)
                                            for c in entry["cases"]) + ".",
                  "", f"Upstream: {markdown_text(str(entry['upstream']))}."]
        if entry.get("source"):
            lines += ["", f"Documented: {markdown_text(str(entry['source']))}."]
        if entry.get("note"):
            lines += ["", f"Note: {markdown_text(str(entry['note']))}"]
        script = findings_dir / entry["script"]
        lines += ["", f"Repro: {markdown_code(str(script), in_table=False)}"]
        if run:
            # What the engine printed: in a fence no line of it can close, escapes visible.
            lines += ["", *markdown_fence(run_script(script))]
        draft = entry.get("draft")
        if draft:
            # The body is Markdown for the engine's tracker: shown as it is, to copy.
            body = str(draft.get("body", "")).strip().replace("````", "```")
            lines += ["", "<details><summary>Draft issue</summary>", "",
                      f"**{markdown_text(str(draft.get('title', '')))}**", "",
                      "````markdown", body, "````", "", "</details>"]
    return lines
