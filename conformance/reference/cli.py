"""`python -m conformance docs`: build the specification reference, a static HTML site.

    python -m conformance docs --out build/reference
    python -m conformance docs --out site --reports reports --open-findings tests/fuzz/open_findings

By default the suite runs on every engine with an in-tree adapter (torch, refimpl,
torch-compiled-autograd, mygrad, tinygrad, jax, autograd, mlx, paddle; an engine that cannot load
here is shown as unavailable); `--reports DIR` reads the JSON reports of
`python -m conformance run --json` in DIR instead. Sphinx builds the pages with warnings as
errors. Exit status: 0 when the site was built, 1 when the build or the spec failed, 2 for a
usage error (unknown engine, missing folder, Sphinx not installed).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from conformance.casefile.loader import DEFAULT_SPEC_DIR
from conformance.reference.results import DEFAULT_ENGINES

NEEDS = "sphinx, myst-parser and furo (pip install sphinx myst-parser furo)"


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the `docs` subcommand to the CLI's subparsers."""
    parser = commands.add_parser("docs", help="build the specification reference (HTML)",
                                 description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for the HTML site (index.html is its home page)")
    parser.add_argument("--spec", type=Path, default=DEFAULT_SPEC_DIR, metavar="DIR",
                        help="the spec folder (cases/, sources.yaml, claims.yaml, ...)")
    parser.add_argument("--reports", type=Path, metavar="DIR",
                        help="take verdicts from the JSON reports in DIR instead of running")
    parser.add_argument("--engine", action="append", metavar="NAME",
                        help="engines to run when --reports is not given (repeatable; default: "
                             f"{', '.join(DEFAULT_ENGINES)})")
    parser.add_argument("--open-findings", type=Path, metavar="DIR",
                        help="a folder of open fuzz findings (fuzz_<hash>.yaml) to list")
    parser.add_argument("--keep-source", type=Path, metavar="DIR",
                        help="write the generated page sources into DIR and keep them")
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the `docs` subcommand; returns the exit status."""
    for option, folder in (("--reports", args.reports), ("--open-findings", args.open_findings),
                           ("--spec", args.spec)):
        if folder is not None and not Path(folder).is_dir():
            print(f"error: {option} {folder}: no such folder", file=sys.stderr)
            return 2
    if args.reports is not None and args.engine:
        print("error: --engine runs the suite; --reports reads results: give one of them",
              file=sys.stderr)
        return 2
    try:
        import furo  # noqa: F401 - the theme the pages are written for
        import myst_parser  # noqa: F401
        import sphinx  # noqa: F401
    except ImportError as exc:
        print(f"error: building the reference needs {NEEDS}: {exc}", file=sys.stderr)
        return 2
    from conformance.engines import EngineError
    from conformance.reference.generate import GenerateError
    from conformance.reference.results import ReportsError
    from conformance.run.workers import WorkerStartError

    try:
        return build_site(args.out, spec_dir=args.spec, reports=args.reports,
                          engines=args.engine or None,
                          open_findings=args.open_findings, keep_source=args.keep_source)
    except (EngineError, ReportsError, WorkerStartError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except GenerateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def build_site(out: Path, *, spec_dir: Path = DEFAULT_SPEC_DIR, reports: Path | None = None,
               engines: list[str] | None = None, open_findings: Path | None = None,
               keep_source: Path | None = None, quiet: bool = False) -> int:
    """Generate the page sources and build them into `out`; returns Sphinx's exit status."""
    from conformance.reference.generate import collect, load_cases, write_sources
    from conformance.reference.results import read_reports, run_engines

    cases = load_cases(Path(spec_dir))
    if reports is not None:
        results = read_reports(Path(reports))
    else:
        results = run_engines(cases, engines or list(DEFAULT_ENGINES),
                              skip_missing=not engines)
    site = collect(spec_dir, results=results, cases=cases, open_findings_dir=open_findings)
    with tempfile.TemporaryDirectory(prefix="conformance-reference-") as scratch:
        source = Path(keep_source) if keep_source is not None else Path(scratch) / "source"
        pages = write_sources(site, source)
        status = sphinx_build(source, Path(out), Path(scratch) / "doctrees")
    if status == 0 and not quiet:
        print(f"wrote {Path(out) / 'index.html'}: {len(pages)} pages, {len(site.cases)} cases, "
              f"{len(site.results)} engines")
    return status


def sphinx_build(source: Path, out: Path, doctrees: Path) -> int:
    """Build HTML with warnings as errors, every one of them reported (`--keep-going`)."""
    from sphinx.cmd.build import build_main

    status = build_main(["-b", "html", "-W", "--keep-going", "-q", "-E", "-d", str(doctrees),
                         str(source), str(out)])
    if status != 0:
        print(f"error: Sphinx could not build the reference from {source} (exit {status}); "
              "its warnings are above", file=sys.stderr)
    return status
