"""`python -m conformance engine-report ENGINE...`: the published report of a third-party engine.

For each engine it runs the suite (in worker processes, at both levels) and writes
`reports/engines/<name>.md`: the figures at both levels, then what an engine's maintainers can
act on: the findings first (`reports/findings/<engine>/findings.yaml`, one per root cause, each
script run now), then every case whose expectations reason starts with `BUG:` (a genuine
divergence, naming its finding), then every other xfail grouped by its reason, the semantic ones
before those that differ only in PyTorch's surface (node names, messages). Reasons starting with
`ADAPTER:` are gaps of the adapter, not of the engine, and go to a separate to-do list. A report
whose engine can run too few cases says so before anything else.

    python -m conformance engine-report mygrad tinygrad jax autograd mlx paddle  # rewrites them

The text depends only on the suite, the engine and its expectations file (no dates or
timings), so a regenerated report changes only when one of them does.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from conformance.casefile.loader import DEFAULT_SPEC_DIR, SpecResources, load
from conformance.report.findings import DEFAULT_DIR as FINDINGS_DIR
from conformance.report.findings import render_findings
from conformance.report.formats import markdown_code, markdown_text, terminal_text, write_atomic
from conformance.run.labels import LabelError, engine_name

DEFAULT_OUT = Path("reports") / "engines"
BUG = "BUG:"
ADAPTER = "ADAPTER:"
LOW_COVERAGE = 0.5
"""Below this share of cases applicable (not unsupported), a report warns that it says little."""


def add_parser(commands: argparse._SubParsersAction) -> None:
    sub = commands.add_parser("engine-report", help="write reports/engines/<engine>.md",
                              description=__doc__.split("\n\n")[0])
    sub.add_argument("engines", nargs="+", metavar="ENGINE")
    sub.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                     help=f"folder for the reports (default {DEFAULT_OUT})")
    sub.add_argument("--findings", type=Path, default=FINDINGS_DIR, metavar="DIR",
                     help="folder of per-engine findings (<DIR>/<engine>/findings.yaml: root "
                     f"causes with repro scripts, run into the report; default {FINDINGS_DIR})")


def run(args: argparse.Namespace) -> int:
    from conformance.engines import EngineError
    from conformance.run.workers import WorkerStartError, start_engines
    from conformance.verdict.suite import run_suite

    loaded = load([DEFAULT_SPEC_DIR / "cases"], SpecResources.load(DEFAULT_SPEC_DIR))
    if loaded.problems:
        print(terminal_text("\n".join(map(str, loaded.problems))), file=sys.stderr)
        return 1
    try:
        workers = start_engines(args.engines)
    except (EngineError, WorkerStartError) as exc:
        print(terminal_text(f"error: {exc}"), file=sys.stderr)
        return 2
    try:
        # Each name becomes a file name: one that could leave the folder is refused.
        for engine in workers:
            engine_name(engine.facts.name, f"the engine {engine.spec!r} (its describe())")
        report = run_suite(loaded.cases, workers, level="full")
    except LabelError as exc:
        print(terminal_text(f"error: {exc}"), file=sys.stderr)
        return 2
    finally:
        for engine in workers:
            engine.close()
    rules = {case.id: case.rule for case in loaded.cases}
    for run_ in report.runs:
        path = args.out / f"{run_.engine.name}.md"
        findings = args.findings / run_.engine.name
        write_atomic(path, render(run_, rules,
                                  findings if (findings / "findings.yaml").is_file() else None))
        print(terminal_text(f"wrote {path}"))
    # Each engine answers at the level it is held to (the tape's engines at semantics): a
    # report of surface differences, listed as such, is not a failed run.
    held_ok = all(result.verdict_at(getattr(run_.engine, "level", "full") or "full")
                  not in ("failed", "error") for run_ in report.runs for result in run_.results)
    return 0 if held_ok else 1


def render(run: Any, rules: dict[str, str], findings: Path | None = None) -> str:
    """The Markdown report of one engine's run; `findings`: the engine's findings folder, whose
    root causes (their scripts run now) follow the figures."""
    from conformance import __version__

    engine = run.engine
    full, semantic = run.summary(level="full"), run.summary(level="semantics")
    lines = [
        f"# {markdown_text(engine.name)} {markdown_text(str(engine.version))} against the "
        "autograd conformance suite",
        "",
        f"Suite {__version__}, {len(run.results)} cases, engine on "
        f"{markdown_text(str(engine.device))}; message strictness "
        f"{markdown_code(str(engine.message_strictness), in_table=False)}. Regenerate with "
        + markdown_code(f"python -m conformance engine-report {engine.spec or engine.name}",
                        in_table=False) + ".",
        "",
        "| level | passed | failed | error | unsupported | xfail |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        *(f"| {name} | {c['passed']} | {c['failed']} | {c['error']} | {c['unsupported']} | "
          f"{c['xfail']} |" for name, c in (("full", full), ("semantics", semantic))),
        "",
        "`semantics` holds the engine to values, gradients, flags and which step raises or "
        "warns; `full` also to PyTorch's surface (node names, messages, repr, identity). "
        "`unsupported`: the case needs a feature the adapter does not declare.",
    ]
    applicable = len(run.results) - semantic["unsupported"]
    if applicable < LOW_COVERAGE * len(run.results):
        lines += ["", f"**Coverage is too low to say much:** only {applicable} of "
                  f"{len(run.results)} cases apply to this engine; the rest need features the "
                  "adapter does not declare. Passing here says nothing about those parts of "
                  "autograd."]
    if findings is not None:
        lines += render_findings(findings)
    xfails = [r for r in run.results if r.verdict == "xfail"]
    bugs = [r for r in xfails if (r.reason or "").startswith(BUG)]
    adapter = [r for r in xfails if (r.reason or "").startswith(ADAPTER)]
    lines += ["", "## Cases that fail on a bug", ""]
    if bugs:
        lines += ["Each names its finding (above, with its repro in the engine's own API):", ""]
        for result in bugs:
            lines.append(f"- **{markdown_code(result.case_id, in_table=False)}** "
                         f"({_text(rules.get(result.case_id, ''))}): "
                         f"{_text(result.reason[len(BUG):].strip())}")
    else:
        lines.append("None listed.")
    others: dict[tuple[str, str], list[str]] = defaultdict(list)
    for result in xfails:
        if result in bugs or result in adapter:
            continue
        level = "semantics" if result.verdict_at("semantics") == "xfail" else "surface only"
        others[(level, result.reason or "")].append(result.case_id)
    for level in ("semantics", "surface only"):
        groups = sorted(((reason, ids) for (lv, reason), ids in others.items() if lv == level),
                        key=lambda item: (-len(item[1]), item[0]))
        if not groups:
            continue
        title = "Other differences in the autograd model" if level == "semantics" else \
            "Differences of PyTorch's surface only"
        lines += ["", f"## {title}", "", "| cases | what the engine does | e.g. |",
                  "| ---: | --- | --- |"]
        lines += [f"| {len(ids)} | {_text(reason)} | {markdown_code(ids[0])} |"
                  for reason, ids in groups]
    if adapter:
        todo: dict[str, list[str]] = defaultdict(list)
        for result in adapter:
            todo[result.reason[len(ADAPTER):].strip()].append(result.case_id)
        lines += ["", "## Adapter to-do", "",
                  "Gaps of this project's adapter, not of the engine (a function the engine "
                  "has that the adapter does not map or maps wrongly); fixing them would let "
                  "these cases check the engine.", "", "| cases | gap | e.g. |",
                  "| ---: | --- | --- |"]
        lines += [f"| {len(ids)} | {_text(gap)} | {markdown_code(ids[0])} |"
                  for gap, ids in sorted(todo.items(), key=lambda item: (-len(item[1]), item[0]))]
    held = getattr(engine, "level", "full")
    if held == "semantics" and full["failed"] + full["error"] > semantic["failed"] + \
            semantic["error"]:
        surface = [r for r in run.results if r.verdict in ("failed", "error")
                   and r.verdict_at("semantics") not in ("failed", "error")]
        lines += ["", "## Surface differences of an engine held to `semantics`", "",
                  f"The adapter holds {markdown_text(engine.name)} to the `semantics` level; "
                  f"{len(surface)} cases differ at `full` only, in PyTorch's surface (node "
                  "names, graph text, messages), e.g. "
                  f"{markdown_code(surface[0].case_id, in_table=False)}: "
                  f"{markdown_text((surface[0].message.splitlines() or [''])[0])}"]
    failing = [r for r in run.results if r.verdict_at(held) in ("failed", "error")]
    if failing:
        lines += ["", "## Not yet in the expectations file", ""]
        # The engine's own words: every character that Markdown or HTML would read is escaped.
        lines += [f"- {markdown_code(r.case_id, in_table=False)}: {markdown_text(r.verdict)}: "
                  f"{markdown_text((r.message.splitlines() or [''])[0])}" for r in failing]
    return "\n".join(lines) + "\n"


def _text(text: str) -> str:
    """Reasons and rules, written by the engine's maintainers and the suite's authors: their
    Markdown (a code span, `0.1 * w.grad`) is kept, but not HTML (`<Op>GradNode` would vanish
    as a tag) nor anything that would break the table or the line."""
    text = " ".join(terminal_text(text).split())
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") \
        .replace("|", "\\|")
