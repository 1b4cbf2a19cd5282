"""A fuzzing campaign as a pytest module, one shard per test, so pytest-xdist spreads it:

    python -m pytest conformance/fuzz/campaign.py -n auto

Environment (all optional):

- `AUTOGRAD_FUZZ_ENGINES`: the two engines, `torch,refimpl` by default (torch is the reference).
- `AUTOGRAD_FUZZ_EXAMPLES`: programs per shard (default 20,000, the `campaign` profile's).
- `AUTOGRAD_FUZZ_SHARDS`: number of shards (default: the number of CPU cores).
- `AUTOGRAD_FUZZ_SEED`: base seed; shard i uses seed + i (default: random per shard).
- `AUTOGRAD_FUZZ_DB`: the shared Hypothesis example database: a folder, or a
  `redis://host:port/db` URL (see `profiles`); default `.hypothesis/fuzz-campaign`.
- `AUTOGRAD_FUZZ_OUT`: the findings folder (default `findings`).

On N machines: start one Redis server that every machine reaches (it needs no disk:
`redis-server --port 6379 --bind <private address> --requirepass <secret> --save ''`), check
out the same commit everywhere (Hypothesis keys the database by the fuzz loop's source), and
run on each machine:

    # 16 cores; a long campaign runs it again and again
    AUTOGRAD_FUZZ_DB=redis://:<secret>@fuzz-db.internal:6379/0 AUTOGRAD_FUZZ_SHARDS=16 \
        python -m pytest conformance/fuzz/campaign.py -n 16

Without `AUTOGRAD_FUZZ_SEED` every shard draws from its own random seed; with one, give
machine k the base seed k * 16 (shard i adds i), or shards on two machines draw the same
programs. A failure a shard finds is saved in Redis while it is shrunk; every shard that starts
later, on any machine, replays it before drawing new programs (shards already running see it in
their next run). Each machine writes its findings into its own `AUTOGRAD_FUZZ_OUT` and keeps a
local copy of the database in `.hypothesis/fuzz-campaign` (see `profiles` for why). The URL,
the server and the findings folder are checked when this module is collected: a bad one fails
collection with one line saying what to fix, before any shard runs.

Each shard fails with the finding's message (differences, case, repro path) on a mismatch.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conformance.fuzz.findings import DEFAULT_OUT, unwritable_reason
from conformance.fuzz.profiles import PROFILES, DatabaseError
from conformance.fuzz.runner import fuzz, prefer_single_thread

prefer_single_thread()
SHARDS = int(os.environ.get("AUTOGRAD_FUZZ_SHARDS", os.cpu_count() or 1))
OUT = Path(os.environ.get("AUTOGRAD_FUZZ_OUT", str(DEFAULT_OUT)))


def _check_setup() -> None:
    """Fail collection, with one line, when the database or the findings folder cannot be used
    (every shard would fail the same way, some only after hours of fuzzing)."""
    problem = None
    try:
        PROFILES["campaign"].open_database()
    except DatabaseError as exc:
        problem = str(exc)
    reason = unwritable_reason(OUT)
    if problem is None and reason is not None:
        problem = f"{reason}: set $AUTOGRAD_FUZZ_OUT to a folder you can write"
    if problem is not None:
        pytest.fail(f"error: {problem}", pytrace=False)


_check_setup()


@pytest.mark.parametrize("shard", range(SHARDS))
def test_campaign_shard(shard: int) -> None:
    names = os.environ.get("AUTOGRAD_FUZZ_ENGINES", "torch,refimpl").split(",")
    if len(names) != 2:
        raise ValueError(f"AUTOGRAD_FUZZ_ENGINES must name two engines, got {names}")
    reference_name = "torch" if "torch" in names else names[0]
    other_name = names[1] if names[0] == reference_name else names[0]
    base = os.environ.get("AUTOGRAD_FUZZ_SEED")
    examples = int(os.environ.get("AUTOGRAD_FUZZ_EXAMPLES", PROFILES["campaign"].examples))
    from conformance.run.workers import start_engines

    reference, other = start_engines([reference_name, other_name])
    try:
        result = fuzz(reference, other, examples=examples,
                      seed=None if base is None else int(base) + shard, profile="campaign",
                      out=OUT)
    finally:
        reference.close()
        other.close()
    print(result.summary())
    assert result.finding is None, result.finding.message()
