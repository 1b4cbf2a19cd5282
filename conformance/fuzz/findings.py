"""Turn a mismatch into a permanent case: a YAML case file plus a standalone repro script.

The case replays the program up to the step that differed. Every step carries the reference
engine's error (`raises`) and warnings (`warns`), so the reference passes it; the differing
step expects the reference's value for each observation that differed. The file is named after
its topic (`fuzz_<hash>.yaml`, id `fuzz_<hash>.<other>-vs-<reference>`) so
`python -m conformance lint findings/` accepts it; move it into `spec/cases/` under a real
topic when the bug is fixed.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from conformance.casefile.case import Case
from conformance.casefile.features import derive
from conformance.casefile.loader import load
from conformance.engines.base import Engine
from conformance.fuzz.differential import (
    Mismatch,
    RaisedObservation,
    StepRecord,
    TensorObservation,
)
from conformance.fuzz.program import Program, features_of
from conformance.run.handle import as_handle
from conformance.run.refusals import stage

DEFAULT_OUT = Path("findings")
CRASH = "runner crash"
"""What differs when an engine raised out of the runner (SystemExit, an adapter bug)."""
SOURCE = {"doc": "autodiff-notes-flat", "quote": "calculate gradients through the DAG."}
"""Every generated program exercises the DAG this sentence describes; cite it so the case lints."""


@dataclass
class Finding:
    program: Program
    mismatch: Mismatch
    reference: str
    other: str
    case: dict[str, Any]
    yaml_text: str
    repro_text: str
    yaml_path: Path | None = None
    repro_path: Path | None = None
    lint_problems: tuple[str, ...] = ()
    write_error: str | None = None
    """Why the case and repro could not be written (the message then carries the case)."""
    unstable: bool = False
    """The engines differed on the program's first run and agreed when it ran again in the same
    processes: state an earlier program left in an engine decided the mismatch."""

    def message(self) -> str:
        """What a person needs: the differences, the case and where the repro is."""
        lines = [
            f"mismatch between {self.reference} (reference) and {self.other}",
            self.mismatch.text(self.reference, self.other),
            "",
            "program:",
            self.program.source(),
            "",
            f"case ({self.yaml_path or self._not_written()}):",
            self.yaml_text.rstrip(),
            "",
            f"repro on {self.other}: python {self.repro_path or '<not written>'}",
        ]
        if self.unstable:
            lines += ["", "unstable: the engines agreed when the program ran again in the same "
                      "processes, so state an earlier program left in an engine decided this "
                      "mismatch (the program is not shrunk; the repro, in a fresh process, may "
                      "not show it)"]
        if self.lint_problems:
            lines += ["", "the case does not lint:", *self.lint_problems]
        return "\n".join(lines)

    def _not_written(self) -> str:
        return f"not written: {self.write_error}" if self.write_error else "not written"


def build_finding(program: Program, mismatch: Mismatch, reference: Engine, other: Engine,
                  records: list[StepRecord]) -> Finding:
    """The case (expectations from `records`, the reference's) and repro for a mismatch."""
    digest = hashlib.sha256(f"{program.seed}\n{program.source()}".encode()).hexdigest()[:10]
    topic = f"fuzz_{digest}"
    reference, other = as_handle(reference), as_handle(other)

    case_id = f"{topic}.{_slug(other.facts.name)}-vs-{_slug(reference.facts.name)}"
    steps = []
    differing = {d.what for d in mismatch.differences}
    for index, step in enumerate(program.steps[: mismatch.step + 1]):
        record = records[index] if index < len(records) else None
        entry: dict[str, Any] = {"run": step.run}
        if record is None:
            steps.append(entry)
            continue
        # Where an engine crashed is not known: the case then observes what the fuzzer did
        # (all but observations that raised, mostly of names the reduction removed).
        wanted = set(record.observations) if CRASH in differing \
            else differing if index == mismatch.step else set()
        expect = {key: encode(value) for key, value in record.observations.items()
                  if key in wanted and not _has_raised(value)}
        if expect:
            entry["expect"] = expect
        if record.error is not None:
            entry["raises"] = {"type": record.error.type, "stage": record.error.stage,
                               "message": record.error.message}
        if record.warnings:
            entry["warns"] = [{"type": kind, "message": text} for kind, text in record.warnings]
        steps.append(entry)
        if index == mismatch.step:
            steps += _raising_observations(record, differing)
    case: dict[str, Any] = {
        "id": case_id,
        "rule": f"{other.facts.name} agrees with {reference.facts.name} on every observation "
                "of this generated program (a differential fuzzing finding).",
        "sources": [dict(SOURCE)],
    }
    # What the generator knows it used, and what lint will derive from the case's own text.
    features = sorted(set(features_of(program.steps[: mismatch.step + 1]))
                      | set(derive(Case.from_dict({**case, "steps": steps}))))
    if features:
        case["features"] = list(features)
    case["seed"] = program.seed
    case["steps"] = steps
    yaml_text = dump_cases([case])
    repro = other.repro_script(Case.from_dict(case), program.seed, mismatch.step)
    return Finding(program, mismatch, reference.facts.name, other.facts.name, case, yaml_text,
                   repro)


def _raising_observations(record: StepRecord, differing: set[str]) -> list[dict[str, Any]]:
    """A step per differing observation that raised on the reference: the expression run as a
    statement that must raise the same error (an `expect` cannot say that observing raises)."""
    steps = []
    for key, value in record.observations.items():
        if key in differing and isinstance(value, RaisedObservation):
            statement = ast.parse(key).body[0]
            steps.append({"run": key, "raises": {"type": value.type, "stage": stage(statement),
                                                 "message": value.message}})
    return steps


def write_finding(finding: Finding, out: Path = DEFAULT_OUT) -> Finding:
    """Write `<topic>.yaml` and `<topic>.py` into `out` and lint the case."""
    out.mkdir(parents=True, exist_ok=True)
    topic = finding.case["id"].split(".", 1)[0]
    finding.yaml_path = out / f"{topic}.yaml"
    finding.repro_path = out / f"{topic}.py"
    finding.yaml_path.write_text(finding.yaml_text, encoding="utf-8")
    finding.repro_path.write_text(finding.repro_text, encoding="utf-8")
    finding.lint_problems = tuple(str(p) for p in load([finding.yaml_path]).problems)
    return finding


def unwritable_reason(out: Path) -> str | None:
    """Why findings cannot be written into `out` (None: they can).

    Checked before fuzzing, so a finding is never shrunk only to be lost: the folder and its
    missing parents are created, a file is written there, and what this made is removed again
    (a run without a finding leaves nothing behind).
    """
    if out.exists() and not out.is_dir():
        return f"findings folder {out} is a file"
    missing = [folder for folder in (out, *out.parents) if not folder.exists()]
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        return f"findings folder {out} cannot be written ({exc.strerror or exc}{where})"
    finally:
        for folder in missing:  # deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()
    return None


def encode(value: Any) -> Any:
    """A normalised observation as a case's expected value."""
    if isinstance(value, TensorObservation):
        return {"value": value.values.tolist(), "dtype": value.dtype, "shape": list(value.shape)}
    if isinstance(value, tuple):
        return [encode(item) for item in value]
    return value


def _has_raised(value: Any) -> bool:
    if isinstance(value, tuple):
        return any(_has_raised(item) for item in value)
    return isinstance(value, RaisedObservation)


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-") or "engine"


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line snippets, so a case reads like the ones in spec/cases."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data and not any(line != line.rstrip() for line in data.split("\n")) \
        else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _represent_str)


def dump_cases(cases: list[dict[str, Any]]) -> str:
    return yaml.dump(cases, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
