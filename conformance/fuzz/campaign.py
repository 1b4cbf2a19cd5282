"""A fuzzing campaign as a pytest module, one shard per test, so pytest-xdist spreads it:

    python -m pytest conformance/fuzz/campaign.py -n auto

Environment (all optional):

- `AUTOGRAD_FUZZ_ENGINES`: the two engines, `torch,refimpl` by default (torch is the reference).
- `AUTOGRAD_FUZZ_EXAMPLES`: programs per shard (default 20,000, the `campaign` profile's).
- `AUTOGRAD_FUZZ_SHARDS`: number of shards (default: the number of CPU cores).
- `AUTOGRAD_FUZZ_SEED`: base seed; shard i uses seed + i (default: random per shard).
- `AUTOGRAD_FUZZ_DB`: the shared Hypothesis example database folder (see `profiles`).
- `AUTOGRAD_FUZZ_OUT`: the findings folder (default `findings`).

Each shard fails with the finding's message (differences, case, repro path) on a mismatch.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conformance.engines import load_engine
from conformance.fuzz.findings import DEFAULT_OUT
from conformance.fuzz.profiles import PROFILES
from conformance.fuzz.runner import fuzz, prefer_single_thread

prefer_single_thread()
SHARDS = int(os.environ.get("AUTOGRAD_FUZZ_SHARDS", os.cpu_count() or 1))


@pytest.mark.parametrize("shard", range(SHARDS))
def test_campaign_shard(shard: int) -> None:
    names = os.environ.get("AUTOGRAD_FUZZ_ENGINES", "torch,refimpl").split(",")
    if len(names) != 2:
        raise ValueError(f"AUTOGRAD_FUZZ_ENGINES must name two engines, got {names}")
    reference_name = "torch" if "torch" in names else names[0]
    other_name = names[1] if names[0] == reference_name else names[0]
    base = os.environ.get("AUTOGRAD_FUZZ_SEED")
    examples = int(os.environ.get("AUTOGRAD_FUZZ_EXAMPLES", PROFILES["campaign"].examples))
    result = fuzz(load_engine(reference_name), load_engine(other_name), examples=examples,
                  seed=None if base is None else int(base) + shard, profile="campaign",
                  out=Path(os.environ.get("AUTOGRAD_FUZZ_OUT", str(DEFAULT_OUT))))
    print(result.summary())
    assert result.finding is None, result.finding.message()
