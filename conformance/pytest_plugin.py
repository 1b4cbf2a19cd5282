"""pytest plugin: `pytest conformance --engine NAME [--engine NAME2]` runs the cases.

Each case becomes one item per engine, named `<case id>[<engine>]`, marked with its topic
(`-m leaf`) and each feature it needs (`-m feature_modules`). `unsupported` cases are
skipped, `xfail` cases are xfailed, `stale` ones pass with a warning. A failure shows the case,
the step, the snippet, expected against actual and a standalone repro script.

Without `--engine` the plugin does nothing, so ordinary test runs are unaffected. Options:
`--cases PATH` (repeatable; default `spec/cases`), `--spec DIR`, `--case-timeout SECONDS`,
`--level full|semantics` (as `run --level`; default each adapter's own).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PACKAGE_DIR = Path(__file__).resolve().parent


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("autograd-conformance")
    group.addoption("--engine", action="append", default=[], metavar="NAME",
                    help="run the conformance cases on this engine (repeatable)")
    group.addoption("--cases", action="append", default=[], metavar="PATH",
                    help="case files or folders (default: spec/cases)")
    group.addoption("--spec", default=None, metavar="DIR",
                    help="folder with features.yaml, api.yaml and case.schema.json")
    group.addoption("--case-timeout", type=float, default=None, metavar="SECONDS",
                    help="per-case timeout (default 10)")
    group.addoption("--level", default=None, choices=("full", "semantics"),
                    help="the level verdicts are read at (default: each adapter's own), as "
                         "`python -m conformance run --level`")


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """`pytest conformance --engine X` collects the suite instead of the package's files."""
    if parent.config.getoption("engine") and Path(path).resolve() == PACKAGE_DIR:
        return Suite.from_parent(parent, path=Path(path))
    return None


class CaseFailure(Exception):
    """A case that failed or errored on an engine; its text is the whole report."""


class Suite(pytest.Directory):
    def collect(self) -> Iterator[pytest.Item]:
        from conformance.casefile.loader import DEFAULT_SPEC_DIR, SpecResources, load
        from conformance.engines import EngineError
        from conformance.run.workers import WorkerStartError, start_engines
        from conformance.verdict.judge import expectations_for

        config = self.config
        paths = [Path(p) for p in config.getoption("cases")] or [DEFAULT_SPEC_DIR / "cases"]
        spec = config.getoption("spec")
        result = load(paths, SpecResources.load(Path(spec) if spec else None))
        if result.problems:
            raise pytest.UsageError("bad case files, nothing was run:\n"
                                    + "\n".join(str(p) for p in result.problems))
        try:
            started = start_engines(config.getoption("engine"),
                                    spec_dir=Path(spec) if spec else DEFAULT_SPEC_DIR)
        except (EngineError, WorkerStartError) as exc:
            raise pytest.UsageError(str(exc)) from None
        for workers in started:
            config.add_cleanup(workers.close)
            expectations = expectations_for(workers)
            for case in result.cases:
                item = CaseItem.from_parent(self, name=f"{case.id}[{workers.facts.name}]",
                                            case=case, engine=workers, expectations=expectations)
                for marker in [case.topic] + [f"feature_{f}" for f in case.features]:
                    marker = re.sub(r"\W", "_", marker)
                    config.addinivalue_line("markers", f"{marker}: conformance cases")
                    item.add_marker(marker)
                yield item


class CaseItem(pytest.Item):
    def __init__(self, *, case: Any, engine: Any, expectations: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.engine = engine
        self.expectations = expectations
        self.result: Any = None

    def runtest(self) -> None:
        from conformance.report.formats import terminal_text
        from conformance.run.executor import DEFAULT_TIMEOUT
        from conformance.verdict.judge import judge

        result = judge(self.case, self.engine, self.expectations,
                       timeout=self.config.getoption("case_timeout") or DEFAULT_TIMEOUT,
                       level=self.config.getoption("level"))
        self.result = result
        # The verdict `run` reports: at `semantics`, a case whose only failed checks are
        # PyTorch's surface has passed.
        verdict = result.verdict_at(result.level)
        # pytest prints these reasons in its summary as they are: an expectations file's or an
        # engine's text must not drive the terminal.
        if verdict == "unsupported":
            pytest.skip(terminal_text(result.message))
        if verdict == "xfail":
            pytest.xfail(terminal_text(result.reason or result.message))
        if verdict == "stale":
            warnings.warn(pytest.PytestWarning(terminal_text(result.message)), stacklevel=1)
        if verdict in ("failed", "error"):
            raise CaseFailure()

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, CaseFailure) and self.result is not None:
            from conformance.report.formats import failure_text, terminal_text

            script = self.engine.repros.get(self.case.id, "(none: see the message above)")
            where = f"{self.case.file}:{self.case.line}" if self.case.file else "(in memory)"
            return terminal_text(f"{failure_text(self.result)}\n  case defined at {where}\n\n"
                                 f"repro script:\n{script}")
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path | str, int | None, str]:
        line = self.case.line - 1 if self.case.line else None
        from conformance.report.formats import terminal_text

        return self.case.file or "<case>", line, \
            terminal_text(f"{self.case.id} on {self.engine.facts.name}")
