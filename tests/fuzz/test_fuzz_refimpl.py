"""Every CI run fuzzes refimpl against PyTorch with the `ci` profile: zero mismatches allowed.

The profile is derandomized (fixed seed, no example database), so a failure here reproduces
with `python -m conformance fuzz --engines torch,refimpl --profile ci`, and the finding it
prints is a ready YAML case for `spec/cases/fuzz_findings.yaml`.
"""

from __future__ import annotations

import pytest

from conformance.engines import load_engine
from conformance.fuzz.profiles import PROFILES
from conformance.fuzz.runner import fuzz


def test_refimpl_matches_torch_over_the_ci_profile(torch_engine, tmp_path):
    result = fuzz(torch_engine, load_engine("refimpl"), profile="ci", out=tmp_path)
    if result.finding is not None:
        pytest.fail(result.finding.message(), pytrace=False)
    assert result.programs >= PROFILES["ci"].examples
