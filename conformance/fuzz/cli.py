"""`python -m conformance fuzz`: differential fuzzing of two engines from the command line.

    python -m conformance fuzz --engines refimpl,torch --profile ci
    python -m conformance fuzz --engines torch,mygrad --examples 5000 --seed 7 --out findings
    python -m conformance fuzz --profile campaign --db redis://fuzz-db.internal:6379/0
    python -m conformance fuzz --jobs auto --examples 20000      # every core of this machine

The reference engine (whose observations a finding's case expects) is `--reference`, else
`torch` when it is one of the two, else the first. Exit status: 0 when the engines agree on
every program, 1 on a mismatch (the case and repro are written to `--out`; an engine that
raises, SystemExit included, is a mismatch too), 2 for a usage error or when the run cannot
start (an engine that cannot run, a database that cannot be reached, an `--out` that cannot be
written), before any program runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from conformance.engines import EngineError
from conformance.fuzz.findings import DEFAULT_OUT
from conformance.fuzz.known import KnownDifference, KnownDifferencesError, load_known
from conformance.fuzz.parallel import ShardError, fuzz_in_parallel, jobs_value
from conformance.fuzz.profiles import PROFILES
from conformance.fuzz.runner import FuzzResult, FuzzSetupError, fuzz, prefer_single_thread
from conformance.fuzz.strategies import FAMILIES
from conformance.report.formats import terminal_text
from conformance.run.workers import WorkerStartError


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the `fuzz` subcommand to the CLI's subparsers."""
    parser = commands.add_parser("fuzz", help="compare two engines on generated programs",
                                 description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="torch,refimpl", metavar="A,B",
                        help="two engines: built-in name, entry point name or module:factory "
                             "(default: torch,refimpl)")
    parser.add_argument("--reference", metavar="NAME",
                        help="the engine whose observations findings expect (default: torch "
                             "when given, else the first)")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="dev",
                        help="ci (bounded, fixed seed), dev or campaign (default: dev)")
    parser.add_argument("--examples", type=int, metavar="N",
                        help="number of programs (default: the profile's)")
    parser.add_argument("--seed", type=int, metavar="S",
                        help="Hypothesis seed (default: the profile's; random for dev/campaign)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                        help=f"folder for finding cases and repro scripts (default: {DEFAULT_OUT})")
    parser.add_argument("--db", metavar="DIR|URL",
                        help="example database: a folder or redis://host:port/db, shared by "
                             "the machines of a campaign (default: the profile's; campaign: "
                             "$AUTOGRAD_FUZZ_DB)")
    parser.add_argument("--without", action="append", default=[], choices=FAMILIES,
                        metavar="FAMILY", help="leave out a program family (repeatable): "
                                               + ", ".join(FAMILIES))
    parser.add_argument("-j", "--jobs", default="1", metavar="N",
                        help="fuzz in N processes side by side, `auto` for one per core "
                             "(default 1); --examples is the total, shard i draws from seed + i")
    parser.add_argument("--known", type=Path, metavar="FILE",
                        help="known differences to count instead of report (a YAML file, see "
                             "conformance.fuzz.known; e.g. reports/findings/"
                             "torch-compiled-autograd/fuzz-known.yaml)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the `fuzz` subcommand; returns the exit status."""
    names = [name.strip() for name in args.engines.split(",") if name.strip()]
    if len(names) != 2:
        print(f"error: --engines needs two names separated by a comma, got {args.engines!r}",
              file=sys.stderr)
        return 2
    if args.examples is not None and args.examples < 1:
        print("error: --examples must be at least 1", file=sys.stderr)
        return 2
    reference_name = args.reference or ("torch" if "torch" in names else names[0])
    if reference_name not in names:
        print(f"error: --reference {reference_name!r} is not one of --engines {args.engines!r}",
              file=sys.stderr)
        return 2
    other_name = names[1] if names[0] == reference_name else names[0]
    try:
        jobs = jobs_value(args.jobs)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        known = load_known(args.known) if args.known is not None else ()
    except KnownDifferencesError as exc:
        print(f"error: --known: {exc}", file=sys.stderr)
        return 2
    prefer_single_thread()
    if jobs > 1:
        return _run_in_parallel(args, reference_name, other_name, jobs, known)
    from conformance.run.workers import start_engines

    try:
        # Each engine in its own worker process: the fuzzer compares plain records.
        reference, other = start_engines([reference_name, other_name])
    except (EngineError, WorkerStartError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        families = [f for f in FAMILIES if f not in args.without
                    and reference.engine.supports(f) and other.engine.supports(f)]
        result = fuzz(reference, other, examples=args.examples, seed=args.seed,
                      profile=args.profile, out=args.out, families=families,
                      progress=not args.no_progress, database=args.db, known=known)
    except (EngineError, FuzzSetupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        reference.close()
        other.close()
    return _report(result)


def _run_in_parallel(args: argparse.Namespace, reference: str, other: str, jobs: int,
                     known: Sequence[KnownDifference]) -> int:
    try:
        result = fuzz_in_parallel(
            reference, other, jobs=jobs, examples=args.examples, seed=args.seed,
            profile=args.profile, out=args.out,
            families=[f for f in FAMILIES if f not in args.without], database=args.db,
            progress=not args.no_progress, known=known)
    except ShardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return _report(result)


def _report(result: FuzzResult) -> int:
    # A mismatch shows each engine's own words (an error's message, a value's text): escaped,
    # so that no engine drives the terminal.
    for finding in (result.finding, *result.more_findings):
        if finding is not None:
            print(terminal_text(finding.message()))
            print()
    print(terminal_text(result.summary()))
    return 1 if result.finding is not None else 0
