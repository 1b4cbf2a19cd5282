"""A generated program: the steps of a case without expectations, plus what to observe.

    >>> program = Program(steps=(ProgramStep("x = torch.ones(2, requires_grad=True)",
    ...                                      observe=("x.requires_grad",)),), seed=0)
    >>> program.to_case("fuzz.example")["steps"][0]["run"]
    'x = torch.ones(2, requires_grad=True)'

The fuzzer runs a program on two engines, observes every `observe` expression after each step
and compares; a finding turns the program into a case whose expectations are one engine's
observations (see `conformance.fuzz.findings`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from conformance.casefile.case import Case
from conformance.casefile.features import derive


@dataclass(frozen=True)
class ProgramStep:
    run: str
    """Python source in the case language (one or more statements)."""
    observe: tuple[str, ...] = ()
    """Observation expressions evaluated after the step (keys of a case's `expect`)."""
    features: tuple[str, ...] = ()
    """Names from spec/features.yaml the step needs (modules, conv, inplace, ...)."""
    precision: tuple[tuple[str, str], ...] = ()
    """(observation, float dtype) for the observations whose value carries the rounding of a
    less precise dtype than its own (a float32 result moved to float64); the comparison uses
    that dtype's tolerance for them."""


@dataclass(frozen=True)
class Program:
    steps: tuple[ProgramStep, ...]
    seed: int = 0
    """Seed of the runner's NumPy generator, shared by both engines."""

    @property
    def features(self) -> tuple[str, ...]:
        """The features of all steps, sorted."""
        return features_of(self.steps)

    def source(self) -> str:
        """The whole program as one script, steps separated by a comment line."""
        return "\n".join(f"# step {index}\n{step.run}" for index, step in enumerate(self.steps))

    def to_case(self, case_id: str, rule: str = "A generated program.") -> dict[str, Any]:
        """A case dict without expectations (what the executor and the loader accept)."""
        case: dict[str, Any] = {"id": case_id, "rule": rule, "seed": self.seed,
                                "steps": [{"run": step.run} for step in self.steps]}
        # Lint derives features from the runs and from what a finding will observe.
        observed = {**case, "steps": [{"run": step.run, "expect": dict.fromkeys(step.observe)}
                                      for step in self.steps]}
        features = sorted(set(self.features) | set(derive(Case.from_dict(observed))))
        if features:
            case["features"] = features
        return case


def features_of(steps: Iterable[ProgramStep]) -> tuple[str, ...]:
    """The features the given steps need, sorted."""
    return tuple(sorted({feature for step in steps for feature in step.features}))
