"""The steps of `tox -e mutation` (cosmic-ray) that are more than one command.

    python tools/mutation.py prepare   # copy the tree, write cosmic-ray.toml, keep pristine copies
    python tools/mutation.py sample    # mark the mutants outside the sample as skipped
    python tools/mutation.py test      # the test command cosmic-ray runs on each mutant
    python tools/mutation.py summary   # killed, timeouts, survived and the score

Everything lives under $MUTATION_DIR (default /tmp/mutation): `tree/` is the copy cosmic-ray
mutates in place (the checkout must never see a mutant), `pristine/` the unmutated copy of the
files only some engines reach, `cosmic-ray.toml` and `session.sqlite` cosmic-ray's own files.

Why `test` is a script and not one `conformance run`: `conformance run --engine refimpl` never
imports `refimpl/ops/kernels.py`, the tape shipped for third-party engines. A mutant there is
reached only through a tape engine, so when that file differs from its pristine copy the suite
also runs on the `autograd` engine (HIPS autograd on the tape: NumPy and autograd, no torch).
Comparing with the pristine copy is how the command learns which file cosmic-ray mutated: it
passes no such argument.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTATION_DIR = Path(os.environ.get("MUTATION_DIR", "/tmp/mutation"))
TREE = MUTATION_DIR / "tree"
PRISTINE = MUTATION_DIR / "pristine"
CONFIG = MUTATION_DIR / "cosmic-ray.toml"
SESSION = MUTATION_DIR / "session.sqlite"

# The directories the suite needs, copied into the tree.
COPIED = ("refimpl", "conformance", "spec")
# Files the refimpl engine never imports, and the engines whose run reaches them.
REACHED_ONLY_BY = {"refimpl/ops/kernels.py": ("autograd",)}
TIMEOUT_S = 60.0


def prepare() -> None:
    import toml

    TREE.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        shutil.rmtree(TREE / name, ignore_errors=True)
        shutil.copytree(ROOT / name, TREE / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(PRISTINE, ignore_errors=True)
    for rel in REACHED_ONLY_BY:
        (PRISTINE / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(TREE / rel, PRISTINE / rel)
    # A copy of this script runs the tests, so that editing the checkout during a run that
    # takes an hour cannot change the command half-way.
    shutil.copy2(__file__, MUTATION_DIR / "mutation.py")
    config = {
        "cosmic-ray": {
            "module-path": os.environ.get("MUTATION_MODULES", "refimpl").split(),
            "timeout": TIMEOUT_S,
            "test-command": f"{sys.executable} {MUTATION_DIR / 'mutation.py'} test",
            "distributor": {"name": "local"},
            "filters": {
                "operators-filter": {
                    "exclude-operators": os.environ.get("MUTATION_SKIP_OPERATORS", "").split()
                }
            },
        }
    }
    CONFIG.write_text(toml.dumps(config))
    print(f"tree copied to {TREE}; {CONFIG} written")


def test() -> int:
    """Exit non-zero (the mutant is killed) when a case fails on an engine that reaches it."""
    engines = ["refimpl"]
    for rel, reached_by in REACHED_ONLY_BY.items():
        if not filecmp.cmp(TREE / rel, PRISTINE / rel, shallow=False):
            engines.extend(reached_by)
    for engine in engines:
        rc = subprocess.call(
            [sys.executable, "-m", "conformance", "run", "--engine", engine, "-q"], cwd=TREE
        )
        if rc:
            return rc
    return 0


def sample() -> None:
    from cosmic_ray.work_db import WorkDB
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    percent = int(os.environ.get("MUTATION_SAMPLE", "10"))

    def key(m) -> int:
        # Depends only on file, operator and occurrence, so that the same mutant stays in (or
        # out of) the sample from one run to the next while the rest of the code changes.
        return zlib.crc32(f"{m.module_path}:{m.operator_name}:{m.occurrence}".encode()) % 100

    db = WorkDB(str(SESSION), WorkDB.Mode.open)
    try:
        outside = [i.job_id for i in db.pending_work_items if key(i.mutations[0]) >= percent]
        db.set_multiple_results(
            outside,
            WorkResult(output="not in the sample", worker_outcome=WorkerOutcome.SKIPPED),
        )
        print(len(list(db.pending_work_items)), "mutants to run")
    finally:
        db.close()


def summary() -> None:
    from cosmic_ray.work_db import WorkDB

    db = WorkDB(str(SESSION), WorkDB.Mode.open)
    try:
        n = Counter(
            "timeout" if r.output == "timeout" else r.test_outcome
            for _, r in db.results
            if r.worker_outcome == "normal"
        )
    finally:
        db.close()
    run = sum(n.values())
    score = (n["killed"] + n["timeout"]) / max(run, 1)
    print(
        f"run {run}: killed {n['killed']}, timeouts {n['timeout']}, survived {n['survived']}, "
        f"incompetent {n['incompetent']}; score {score:.1%}"
    )


def main(argv: list[str]) -> int:
    steps = {"prepare": prepare, "sample": sample, "test": test, "summary": summary}
    if len(argv) != 1 or argv[0] not in steps:
        print(f"usage: python {Path(__file__).name} {{{','.join(steps)}}}", file=sys.stderr)
        return 2
    return steps[argv[0]]() or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
