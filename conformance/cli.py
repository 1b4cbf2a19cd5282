"""`python -m conformance` (also `autograd-conformance`): run, list, show and lint cases.

    python -m conformance run --engine refimpl --engine torch --json reports/run.json
    python -m conformance run --engine mygrad -k leaf. -k backward.
    python -m conformance list
    python -m conformance show leaf.factory-tensor-is-leaf
    python -m conformance lint spec/cases
    python -m conformance fuzz --engines torch,refimpl --profile ci
    python -m conformance docs --out build/reference

Exit status: 0 when everything ran and passed (or is unsupported, xfail or stale), 1 when a case
failed or errored or a file is bad, 2 for a usage error (unknown engine, bad option).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import signal
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from conformance import scaffold
from conformance.casefile.case import Case
from conformance.casefile.comparisons import read_comparisons
from conformance.casefile.loader import DEFAULT_SPEC_DIR, LoadResult, SpecResources, load
from conformance.casefile.messages import read_inventory
from conformance.engines import EngineError, tape
from conformance.fuzz import cli as fuzz_cli
from conformance.reference import cli as docs_cli
from conformance.report import engine_report
from conformance.report.formats import (
    failure_text,
    running_placeholder,
    summary_table,
    terminal_text,
    write_atomic,
    write_expectations,
    write_reports,
)
from conformance.run.executor import DEFAULT_TIMEOUT, CaseResult
from conformance.run.workers import (
    DEFAULT_MEMORY_MB,
    EngineWorkers,
    WorkerStartError,
    start_engines,
)
from conformance.verdict.expectations import ExpectationsError, read_once
from conformance.verdict.suite import EngineRun, SuiteReport, run_suite


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m conformance", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    def cases_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--cases", nargs="+", type=Path, default=[DEFAULT_SPEC_DIR / "cases"],
                         metavar="PATH", help="case files or folders (default: spec/cases)")
        sub.add_argument("--spec", type=Path, default=DEFAULT_SPEC_DIR, metavar="DIR",
                         help="folder with features.yaml, api.yaml, case.schema.json")
        sub.add_argument("-k", dest="prefixes", action="append", default=[], metavar="PREFIX",
                         help="only cases whose id starts with PREFIX (repeatable)")

    run = commands.add_parser("run", help="run the cases on one or more engines")
    run.add_argument("--engine", action="append", metavar="NAME",
                     help="built-in name, entry point name or module:factory (repeatable; "
                          "default: refimpl)")
    cases_options(run)
    run.add_argument("--timeout", type=_positive, default=DEFAULT_TIMEOUT,
                     help=f"seconds per case (default {DEFAULT_TIMEOUT:g}); a case that runs "
                          "longer is an error, and its worker is killed a little later")
    run.add_argument("--memory-limit", type=int, default=DEFAULT_MEMORY_MB, metavar="MIB",
                     help=f"address space of each engine's worker process (default "
                          f"{DEFAULT_MEMORY_MB}); 0 for no limit")
    run.add_argument("--level", choices=("full", "semantics"), default=None,
                     help="full: PyTorch's surface too (node names, messages, repr, identity); "
                          "semantics: values, gradients, flags, which step raises or warns "
                          "(default: the adapter's own level, full for refimpl and torch)")
    run.add_argument("--shuffle", type=int, default=None, metavar="SEED",
                     help="run the cases in an order drawn from SEED (the same on every "
                          "engine), so engine state kept from one case to the next shows; "
                          "reports keep the cases' order")
    run.add_argument("--fresh-worker", action="store_true",
                     help="run every case in a fresh worker process (slower: each worker "
                          "loads the engine), so no case sees engine state another left")
    run.add_argument("--allow-unavailable", action="store_true",
                     help="report an engine that cannot run here (no CUDA device) as "
                          "unsupported instead of failing")
    run.add_argument("--expectations", action="append", default=[], metavar="ENGINE=PATH",
                     help="use this skip/xfail file for ENGINE (its name, or the --engine "
                          "value as typed) instead of the adapter's")
    run.add_argument("--json", type=Path, metavar="PATH")
    run.add_argument("--junit", type=Path, metavar="PATH")
    run.add_argument("--markdown", type=Path, metavar="PATH")
    run.add_argument("--html", type=Path, metavar="PATH",
                     help="one self-contained HTML report (topic by engine, failures to expand)")
    run.add_argument("--write-expectations", type=Path, metavar="PATH",
                     help="write an expectations file of this run's failures, grouped by cause, "
                          "one reason to fill in per group (one engine only)")
    run.add_argument("--repro-dir", type=Path, metavar="DIR",
                     help="write a standalone repro script per failure into DIR")
    run.add_argument("-q", "--quiet", action="store_true", help="do not print failures")

    listing = commands.add_parser("list", help="list case ids and rules")
    cases_options(listing)
    show = commands.add_parser("show", help="print one case")
    show.add_argument("id")
    cases_options(show)
    lint = commands.add_parser("lint", help="check case files without running anything")
    lint.add_argument("paths", nargs="*", type=Path, default=[DEFAULT_SPEC_DIR / "cases"])
    lint.add_argument("--spec", type=Path, default=DEFAULT_SPEC_DIR, metavar="DIR")
    lint.add_argument("--sources", type=Path, metavar="DIR",
                      help="also check every quote against the documents' texts in DIR "
                           "(found by the file names in spec/sources.yaml)")
    lint.add_argument("--docstrings", action="store_true",
                      help="also check quotes of PyTorch's documentation against the "
                           "docstrings of the installed torch")
    fuzz_cli.add_parser(commands)
    docs_cli.add_parser(commands)
    scaffold.add_parser(commands)
    engine_report.add_parser(commands)
    tape.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "lint":
        return _lint(args)
    if args.command == "fuzz":
        return fuzz_cli.run(args)
    if args.command == "docs":
        return docs_cli.run(args)
    if args.command == "new-adapter":
        return scaffold.run(args)
    if args.command == "engine-report":
        return engine_report.run(args)
    if args.command == "tape-ops":
        return tape.run(args)
    loaded = _load(args.cases, args.spec)
    if loaded is None:
        return 1
    cases = [c for c in loaded.cases
             if not args.prefixes or any(c.id.startswith(p) for p in args.prefixes)]
    if not cases:
        print(f"no case id starts with {' or '.join(map(repr, args.prefixes))} "
              "(see `python -m conformance list`)", file=sys.stderr)
        return 1
    if args.command == "list":
        for case in cases:
            print(terminal_text(f"{case.id}\t{case.rule}"))
        return 0
    if args.command == "show":
        return _show(args.id, loaded.cases)
    return _run(args, cases, [c.id for c in loaded.cases])


def _load(paths: Sequence[Path], spec: Path) -> LoadResult | None:
    result = load(paths, SpecResources.load(spec))
    if result.problems:
        for problem in result.problems:
            _error(str(problem))
        print(f"{len(result.problems)} problem(s) in the case files; nothing was run",
              file=sys.stderr)
        return None
    return result


def _lint(args: argparse.Namespace) -> int:
    if args.sources is not None and not args.sources.is_dir():
        print(f"error: --sources {args.sources}: no such folder", file=sys.stderr)
        return 2
    result = load(args.paths, SpecResources.load(args.spec, texts_dir=args.sources,
                                                  docstrings=args.docstrings))
    inventory, inventory_problems = read_inventory(args.spec)
    result.problems += inventory_problems
    tables, table_problems = read_comparisons(args.spec, [case.id for case in result.cases])
    result.problems += table_problems
    for problem in result.problems:
        print(terminal_text(str(problem)))
    texts = "checked against the texts" if args.sources else \
        "not checked against the texts (use --sources DIR)"
    docstrings = "checked against PyTorch's docstrings" if args.docstrings else \
        "not checked against PyTorch's docstrings (use --docstrings)"
    quotes = f"quotes {texts}, {docstrings}"
    checked = f"{len(result.cases)} cases"
    if inventory is not None:
        checked += f", {len(inventory.messages)} inventory messages"
    if tables:
        checked += f", {len(tables)} comparison tables"
    print(f"{checked} checked, {len(result.problems)} problem(s); {quotes}")
    return 1 if result.problems else 0


def _show(case_id: str, cases: Sequence[Case]) -> int:
    """Print the case as it is written in its file, so comments and layout survive."""
    for case in cases:
        if case.id == case_id:
            later = [c.line for c in cases if c.file == case.file and c.line > case.line]
            lines = Path(case.file).read_text(encoding="utf-8").splitlines()
            end = min(later) - 1 if later else len(lines)
            text = "\n".join(lines[case.line - 1:end]).rstrip()
            print(terminal_text(f"# {case.file}:{case.line}\n{text}"))
            return 0
    starting = [case.id for case in cases if case.id.startswith(case_id)]
    if starting:
        shown = "\n  ".join(starting[:20]) + ("\n  ..." if len(starting) > 20 else "")
        print(terminal_text(f"no case with id {case_id!r}; {len(starting)} case id(s) start "
                            f"with it:\n  {shown}"), file=sys.stderr)
    else:
        print(f"no case with id {case_id!r} (see `python -m conformance list`)",
              file=sys.stderr)
    return 1


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {text}")
    return value


def _run(args: argparse.Namespace, cases: Sequence[Case], all_ids: Sequence[str]) -> int:
    specs = args.engine or ["refimpl"]
    outputs = [(kind, path) for kind, path in (("json", args.json), ("junit", args.junit),
                                               ("markdown", args.markdown), ("html", args.html))
               if path]
    if args.write_expectations is not None and len(specs) != 1:
        print("error: --write-expectations writes one engine's file: run one --engine",
              file=sys.stderr)
        return 2
    with _stop_on_sigterm():
        try:
            # Before anything runs: a report that cannot be written is found now, and no
            # earlier run's report is left looking like this run's.
            for kind, path in outputs:
                write_atomic(path, running_placeholder(kind))
        except OSError as exc:
            _error(f"error: cannot write the report {exc.filename}: {exc.strerror}")
            return 2
        try:
            status, report = _run_engines(args, cases, all_ids, specs)
        except KeyboardInterrupt:  # before the suite started: while the engines were loading
            status, report = 130, None
    if report is None:
        # No run to report: the placeholders must not stay, looking like a run in progress.
        write_reports(SuiteReport(list(cases), [], interrupted=True), args.json, args.junit,
                      args.markdown, args.html)
        return status
    # The reports first: a reader that went away (`run ... | head`) must not cost them.
    write_reports(report, args.json, args.junit, args.markdown, args.html)
    if args.write_expectations is not None:
        run = report.runs[0]
        write_expectations(args.write_expectations, run.engine.name,
                           [r for r in run.results if r.verdict_at(run.level) != "passed"],
                           {case.id: case for case in cases})
    if args.repro_dir is not None:
        write_repros(report, args.repro_dir)
    with contextlib.suppress(BrokenPipeError):
        if not args.quiet:
            for run in report.runs:
                for result in run.results:
                    if result.verdict_at(run.level) in ("failed", "error"):
                        print(failure_text(result), end="\n\n")
        print(summary_table(report))
        if report.interrupted:
            print("interrupted: the reports hold the cases that ran", file=sys.stderr)
    if report.interrupted:
        return 130
    return 0 if report.ok else 1


def _run_engines(args: argparse.Namespace, cases: Sequence[Case], all_ids: Sequence[str],
                 specs: Sequence[str]) -> tuple[int, SuiteReport | None]:
    """Load the engines and run the suite: an exit status, and the report when there is one."""
    try:
        workers = start_engines(specs, memory_mb=args.memory_limit, spec_dir=args.spec,
                                fresh_worker_per_case=args.fresh_worker)
    except (EngineError, WorkerStartError) as exc:
        _error(f"error: {exc}")
        return 2, None
    try:
        unavailable = [w.engine for w in workers if not w.engine.available]
        if unavailable and not args.allow_unavailable:
            for engine in unavailable:
                _error(f"error: engine {engine.spec!r} cannot run here: "
                       f"{engine.unavailable_reason} (--allow-unavailable reports its cases as "
                       "unsupported instead)")
            return 2, None
        overrides = _expectation_overrides(args.expectations, workers)
        with read_once(overrides.values()), \
                _progress(len(cases) * len(workers), args.quiet) as on_result:
            report = run_suite(cases, workers, timeout=args.timeout, expectations=overrides,
                               all_case_ids=all_ids, level=args.level, on_result=on_result,
                               shuffle=args.shuffle)
    except (EngineError, ExpectationsError) as exc:
        _error(f"error: {exc}")
        return 2, None
    finally:
        for worker in workers:
            worker.close()
    return 0, report


@contextlib.contextmanager
def _progress(total: int, quiet: bool) -> Iterator[Callable[[EngineRun, CaseResult], None] | None]:
    """A progress line on stderr, moved on as each result arrives, for a person watching a
    terminal: never when stderr is a file, a pipe or a CI log, nor with -q. It is cleared
    when the run ends, so the failures and the summary that follow print as they would
    without it."""
    if quiet or total <= 0 or not _is_terminal(sys.stderr):
        yield None
        return
    from tqdm import tqdm

    bar = tqdm(total=total, file=sys.stderr, unit="case", leave=False, dynamic_ncols=True,
               desc="conformance")
    bad: Counter[str] = Counter()

    def on_result(run: EngineRun, result: CaseResult) -> None:
        verdict = result.verdict_at(run.level)
        if verdict in ("failed", "error"):
            bad[verdict] += 1
            bar.set_postfix_str(", ".join(f"{n} {v}" for v, n in sorted(bad.items())),
                                refresh=False)
        bar.update(1)

    try:
        yield on_result
    finally:
        bar.close()


def _is_terminal(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # a closed stream
        return False


def _expectation_overrides(items: Sequence[str], workers: Sequence[EngineWorkers]
                           ) -> dict[str, Path]:
    """`--expectations KEY=PATH`: KEY is an engine's name or its --engine value as typed."""
    names = {w.engine.name: w.engine.name for w in workers}
    names.update({w.spec: w.engine.name for w in workers})
    overrides = {}
    for item in items:
        key, sep, path = item.partition("=")
        if not sep or not path:
            raise EngineError(f"--expectations {item!r}: use ENGINE=PATH")
        if key not in names:
            raise EngineError(f"--expectations {item!r}: no engine {key!r} in this run "
                              f"(engines: {', '.join(sorted(names))})")
        # Any readable file: a regular one, /dev/null (no expectations), a pipe (`<(...)`).
        if not os.path.exists(path):
            raise EngineError(f"--expectations {item!r}: no such file {path}")
        if os.path.isdir(path):
            raise EngineError(f"--expectations {item!r}: {path} is a folder, not a file")
        if not os.access(path, os.R_OK):
            raise EngineError(f"--expectations {item!r}: cannot read {path}")
        overrides[names[key]] = Path(path)
    return overrides


def _error(text: str) -> None:
    """Print to stderr text that may hold an engine's or a case file's words."""
    print(terminal_text(text), file=sys.stderr)


@contextlib.contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    """SIGTERM stops the run like Ctrl-C does: between cases, with the reports written."""
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: leave SIGTERM alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def write_repros(report: SuiteReport, directory: Path) -> None:
    """One script per failure, `<engine>__<case id>.py`, each inside `directory` whatever the
    engine's name or the case's id holds."""
    root = Path(os.path.abspath(directory))
    for run in report.runs:
        for case_id, script in run.repros.items():
            name = f"{_file_part(run.engine.name)}__{_file_part(case_id)}.py"
            target = root / name
            # Checked on the path as written (not resolved): a link left at this name is
            # replaced by write_atomic, never followed.
            if Path(os.path.normpath(target)).parent != root:
                raise ValueError(f"repro file name {name!r} leaves {directory}")
            write_atomic(target, script)


def _file_part(text: str, limit: int = 100) -> str:
    """`text` as part of a file name: only letters, digits, `.`, `_` and `-`, no leading dot,
    at most `limit` characters. A name that had to change ends in a hash of the original, so
    two engines whose names differ keep apart."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", text)
    safe = re.sub(r"^\.+", lambda m: "_" * len(m.group()), safe)
    if safe == text and 0 < len(safe) <= limit:
        return safe
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{safe[:limit - len(digest) - 1]}-{digest}"


if __name__ == "__main__":
    sys.exit(main())
