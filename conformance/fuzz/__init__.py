"""Differential fuzzing: generated autograd programs, run on two engines, compared.

Run it:

    python -m conformance fuzz --engines torch,refimpl --examples 5000 --seed 7
    python -m conformance fuzz --engines torch,my_engine --profile ci --out findings
    python -m conformance fuzz --engines torch,refimpl --examples 20000 --jobs auto

`--jobs N` runs N fuzzing loops side by side on this machine, each a process that loads both
engines (`parallel`): `--examples` is then the total, loop i draws from seed + i, and the first
mismatch stops the others. With one loop each engine runs in a worker process of its own.

Hypothesis draws programs in the case language (leaves, broadcasting ops, views, in-place ops,
grad modes, backward/grad, modules, hooks, custom Functions...); both engines run each one, each
in its own worker process, and every observation after every step is compared (values with
dtype-aware tolerances, flags, graphs, errors and warnings at the weaker adapter's message
strictness). `--without FAMILY` leaves out a family (`inplace`, `create_graph`, `modules`,
`conv`, `batchnorm`, `hooks`, `node_hooks`, `custom_function`, `inference_mode`,
`saved_tensor_hooks`, `ops_more`); families an engine does not support are left out anyway. The
exit status is 0 when the engines agree, 1 on a mismatch (an engine that raises, SystemExit
included, is one), 2 when the run cannot start (an engine that cannot run, an unreachable
database, an `--out` that cannot be written); the last line gives programs per second.

Profiles (`--profile`, see `profiles`): `ci` is 400 programs from seed 0 with no database (the
same programs every run; `tests/fuzz/test_fuzz_refimpl.py` runs it in CI), `dev` (the CLI's
default) 2,000 programs from a random seed and remembers failures in `.hypothesis/fuzz`,
`campaign` is for long runs.

Findings: a mismatch is shrunk by Hypothesis, then reduced statement by statement to what the
mismatch needs (`minimise`), and written to `--out` (default `findings/`) as
`fuzz_<hash>.yaml`, a case that lints and holds on the reference engine, plus `fuzz_<hash>.py`,
a standalone repro for the other engine; the message shows the differences and both. Once the
engine is fixed, move the case into `spec/cases/`.

Campaign: one shard per pytest test, spread over the cores by pytest-xdist; the shards share a
Hypothesis example database, so a failure found by one is replayed first by every shard that
starts after it. On one machine that is a folder; across N machines it is a Redis server that
they all reach, named by `$AUTOGRAD_FUZZ_DB` (or `--db` on the command line):

    # one Redis for the campaign (no disk needed)
    redis-server --port 6379 --bind <private address> --requirepass <secret> --save ''
    # on each machine, all on the same commit (16 cores each; repeat it for a long campaign)
    AUTOGRAD_FUZZ_DB=redis://:<secret>@fuzz-db.internal:6379/0 AUTOGRAD_FUZZ_SHARDS=16 \
        python -m pytest conformance/fuzz/campaign.py -n 16

Each shard draws from its own random seed (to fix them, give machine k of N the base seed
`AUTOGRAD_FUZZ_SEED=$((k * 16))`, as shard i adds i). Every run replays what the shards before
it found, on any machine. Each machine also keeps a local copy of the database
(`.hypothesis/fuzz-campaign`), so a failure stays replayable there if Redis loses it, and a
Redis outage mid-run only stops the sharing. A bad URL, a server that is down or a findings
folder that cannot be written stops the run before any program, with one line that names it.
(`AUTOGRAD_FUZZ_ENGINES`, `_SHARDS`, `_SEED` and `_OUT` are described in `campaign`, the
database in `profiles`.)

Modules:

- `strategies.programs()`: Hypothesis strategy of programs in the case language.
- `differential`: run a program on an engine, record and compare observations.
- `runner.fuzz()`: the loop (Hypothesis drives and shrinks, `minimise` reduces, a finding is
  written).
- `findings`: a mismatch as a lint-valid YAML case plus a standalone repro script.
- `profiles`: the `ci`, `dev` and `campaign` settings and the example database (a folder or
  Redis); `campaign.py` runs under pytest-xdist.
- `parallel`: `fuzz --jobs N`, several loops side by side on one machine.
- `cli`: `python -m conformance fuzz`.
"""

from conformance.fuzz.program import Program, ProgramStep
from conformance.fuzz.runner import FuzzResult, FuzzSetupError, fuzz
from conformance.fuzz.strategies import FAMILIES, programs

__all__ = ["FAMILIES", "FuzzResult", "FuzzSetupError", "Program", "ProgramStep", "fuzz",
           "programs"]
