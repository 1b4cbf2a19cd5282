"""Differential fuzzing: generated autograd programs, run on two engines, compared.

- `strategies.programs()`: Hypothesis strategy of programs in the case language.
- `differential`: run a program on an engine, record and compare observations.
- `runner.fuzz()`: the loop (Hypothesis drives, shrinks, and a finding is written).
- `findings`: a mismatch as a lint-valid YAML case plus a standalone repro script.
- `profiles`: the `ci`, `dev` and `campaign` settings; `campaign.py` runs under pytest-xdist.
- `cli`: `python -m conformance fuzz`.
"""

from conformance.fuzz.program import Program, ProgramStep
from conformance.fuzz.runner import FuzzResult, FuzzSetupError, fuzz
from conformance.fuzz.strategies import FAMILIES, programs

__all__ = ["FAMILIES", "FuzzResult", "FuzzSetupError", "Program", "ProgramStep", "fuzz",
           "programs"]
