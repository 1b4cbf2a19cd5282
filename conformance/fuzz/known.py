"""Known differences: mismatches a campaign already has a root cause for, and skips.

Fuzzing an engine with known divergences (PyTorch's compiled autograd against eager PyTorch)
would otherwise stop at the first program that shows one of them. A known-differences file
names each by the observation it touches and a phrase of the other engine's value::

    known:
      - finding: retain-grad-graph-break-warning      # the root cause it belongs to
        what: warnings                                 # an observation, `error` or `warnings`
        other: "trace the builtin `torch._C._dynamo.autograd_compiler.call_cpp_tensor_pre_hooks"

A program whose every difference matches an entry counts as agreeing, and is tallied per
finding in the run's summary; one difference that matches nothing makes it a finding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from conformance.casefile.files import read_yaml_list
from conformance.fuzz.differential import Mismatch


class KnownDifferencesError(ValueError):
    """A known-differences file that cannot be used; the message says where."""


@dataclass(frozen=True)
class KnownDifference:
    finding: str
    what: str
    other: str
    """A phrase of the other engine's value (its text as the mismatch shows it)."""

    def matches(self, what: str, other: str) -> bool:
        return self.what == what and self.other in other


def load_known(path: Path) -> tuple[KnownDifference, ...]:
    try:
        entries = read_yaml_list(path, "known")
    except ValueError as exc:
        raise KnownDifferencesError(str(exc)) from None
    known = []
    for index, entry in enumerate(entries):
        fields = {key: entry.get(key) if isinstance(entry, dict) else None
                  for key in ("finding", "what", "other")}
        missing = [key for key, value in fields.items() if not isinstance(value, str) or not value]
        if missing:
            raise KnownDifferencesError(f"{path}: entry {index}: {', '.join(missing)} missing "
                                        "or not a non-empty string")
        known.append(KnownDifference(**fields))
    return tuple(known)


def known_finding(mismatch: Mismatch, known: Sequence[KnownDifference]) -> str | None:
    """The finding every difference of `mismatch` is known under (the first entry's), or None
    when one difference is new."""
    findings = []
    for difference in mismatch.differences:
        entry = next((k for k in known if k.matches(difference.what, difference.other)), None)
        if entry is None:
            return None
        findings.append(entry.finding)
    return findings[0] if findings else None
