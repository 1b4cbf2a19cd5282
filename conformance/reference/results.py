"""The verdicts the reference shows: from a run of the suite now, or from JSON reports.

`run_engines` runs every case on the engines that have an in-tree adapter (those that cannot
load here are shown as unavailable, with the reason); `read_reports` reads the files
`python -m conformance run --json PATH` wrote. Either way each engine becomes an
`EngineResults`, with each case's verdict and, for an xfail, the reason its expectations file
gives.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from conformance.casefile.case import Case
from conformance.engines.base import Strictness
from conformance.run.executor import LEVELS, VERDICTS
from conformance.run.labels import LabelError, engine_name, known, plain_line

# The CPU engines whose adapters live in this package: the builtins (PyTorch, refimpl, PyTorch
# with compiled autograd) and the third-party adapters it ships (JAX, HIPS autograd and MLX on
# the shipped tape). The CUDA variants run the same adapters on a GPU.
DEFAULT_ENGINES = ("torch", "refimpl", "torch-compiled-autograd", "mygrad", "tinygrad", "jax",
                   "autograd", "mlx", "paddle")


class ReportsError(ValueError):
    """A report file cannot be used; the message names the file."""


@dataclass(frozen=True)
class Verdict:
    verdict: str
    message: str = ""
    reason: str | None = None
    step: int | None = None


@dataclass
class EngineResults:
    name: str
    version: str = "unknown"
    device: str = "cpu"
    torch_version: str = ""
    message_strictness: str = ""
    available: bool = True
    unavailable_reason: str | None = None
    wall_s: float = 0.0
    origin: str = ""
    level: str = "full"
    """The level the engine is held to: its verdicts are read there (the run's headline)."""
    verdicts: dict[str, Verdict] = field(default_factory=dict)

    def counts(self, case_ids: Iterable[str] | None = None) -> dict[str, int]:
        ids = self.verdicts if case_ids is None else case_ids
        found = Counter(self.verdicts[i].verdict for i in ids if i in self.verdicts)
        return {verdict: found.get(verdict, 0) for verdict in VERDICTS}


def run_engines(cases: Sequence[Case], names: Sequence[str],
                skip_missing: bool = False) -> list[EngineResults]:
    """Run `cases` on each engine in `names`, each in its worker processes (unknown names
    raise EngineError, engines that cannot load WorkerStartError). `skip_missing`: an engine
    whose package is not installed is left out, with a line on stderr, instead."""
    import sys

    from conformance.run.workers import WorkerStartError, start_engines
    from conformance.verdict.suite import run_suite

    workers = []
    for name in names:
        try:
            workers += start_engines([name])
        except WorkerStartError as exc:
            if not skip_missing:
                for engine in workers:
                    engine.close()
                raise
            print(f"note: {exc}; the reference leaves it out", file=sys.stderr)
    try:
        report = run_suite(cases, workers)
    finally:
        for engine in workers:
            engine.close()
    out = []
    for run in report.runs:
        info = run.engine.describe()
        results = EngineResults(
            name=info["name"], version=str(info["version"]), device=str(info["device"]),
            torch_version=str(info["torch_version"]),
            message_strictness=str(info["message_strictness"]),
            available=bool(info["available"]), unavailable_reason=info["unavailable_reason"],
            wall_s=run.wall_s, origin="a run of the suite while this reference was built",
            level=run.level)
        for result in run.results:
            results.verdicts[result.case_id] = Verdict(result.verdict_at(run.level),
                                                       result.message, result.reason,
                                                       result.step)
        out.append(results)
    return out


def read_reports(folder: Path) -> list[EngineResults]:
    """Every engine of every `*.json` report in `folder`; a newer file wins for an engine."""
    files = sorted(Path(folder).glob("*.json"), key=lambda p: (p.stat().st_mtime, p.name))
    if not files:
        raise ReportsError(f"{folder}: no *.json reports (write them with "
                           "`python -m conformance run --json PATH`)")
    engines: dict[str, EngineResults] = {}
    for path in files:
        for results in _read_report(path):
            engines[results.name] = results
    return list(engines.values())


def _read_report(path: Path) -> list[EngineResults]:
    """The engines of one report. Its names, levels and verdicts become file names, links
    and markup on the pages, so each must be one the runner writes (`conformance.run.labels`);
    its free text is cut to one line."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        engines = data["engines"]
        rows = data["results"]
        out = []
        for index, info in enumerate(engines):
            where = f"engines[{index}]"
            name = engine_name(info["name"], f"{where}.name")
            strictness = info.get("message_strictness") or ""
            if strictness:
                known(strictness, get_args(Strictness), "message strictness",
                      f"{where}.message_strictness")
            reason = info.get("unavailable_reason")
            results = EngineResults(
                name=name, version=plain_line(info.get("version", "unknown")),
                device=plain_line(info.get("device", "cpu")),
                torch_version=plain_line(info.get("torch_version", "")),
                message_strictness=strictness, available=bool(info.get("available", True)),
                unavailable_reason=None if reason is None else plain_line(reason, 1000),
                wall_s=float(info.get("wall_time_s", 0.0)), origin=f"the report {path.name}",
                level=known(info.get("level", "full"), LEVELS, "level", f"{where}.level"))
            for number, row in enumerate(rows):
                if row["engine"] == results.name:
                    # At the level the run held the engine to, as its summary counts them.
                    verdict = (row.get("verdicts") or {}).get(results.level, row["verdict"])
                    why, step = row.get("reason"), row.get("step")
                    if step is not None and type(step) is not int:
                        raise LabelError(f"results[{number}].step: {step!r:.80} is not a step "
                                         "number: use an integer or null")
                    results.verdicts[str(row["case_id"])] = Verdict(
                        known(verdict, VERDICTS, "verdict", f"results[{number}].verdict"),
                        str(row.get("message") or ""), None if why is None else str(why), step)
            out.append(results)
        return out
    except LabelError as exc:
        raise ReportsError(f"{path}: {exc}. Write the report again with `python -m "
                           "conformance run --json PATH`, or remove it from the folder") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ReportsError(f"{path}: not a report of `python -m conformance run --json` "
                           f"({type(exc).__name__}: {exc})") from exc


def describe(results: EngineResults, case_id: str) -> tuple[str, str]:
    """(verdict, a short explanation) of one case on one engine; ('not run', '') if absent."""
    found = results.verdicts.get(case_id)
    if found is None:
        return "not run", ""
    if found.verdict in ("xfail", "stale") and found.reason:
        return found.verdict, found.reason
    if found.verdict == "passed":
        return found.verdict, ""
    return found.verdict, first_line(found.message)


def first_line(message: str, limit: int = 240) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= limit else line[:limit - 1] + "…"


def engine_facts(results: EngineResults) -> dict[str, Any]:
    """What the engine pages state about an engine, in order."""
    facts = {
        "version": results.version,
        "device": results.device,
        "messages held to PyTorch": results.torch_version or "not stated",
        "messages compared": results.message_strictness or "not stated",
        "verdicts read at level": results.level,
        "results from": results.origin,
    }
    if not results.available:
        facts["unavailable"] = results.unavailable_reason or "not stated"
    return facts
