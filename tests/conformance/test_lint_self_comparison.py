"""An expectation whose `{np: ...}` value is the observed value itself (`x: {np: "x"}`) holds on
every engine, whatever it did to x: lint refuses it."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.casefile.loader import load

CASE = """\
- id: topic.same
  rule: A rule.
  sources:
    - doc: doc
      quote: A tensor created by the user is a leaf.
  steps:
    - run: |
{run}
      expect:
        {key}: {{np: "{np}"}}
"""


def problems(tmp_path: Path, resources, run: str, key: str, np: str) -> list[str]:
    path = tmp_path / "topic.yaml"
    body = "\n".join("        " + line for line in run.splitlines())
    path.write_text(CASE.format(run=body, key=key, np=np), encoding="utf-8")
    return [str(p).removeprefix(f"{path}:") for p in load([path], resources).problems]


def message(key: str, np: str) -> str:
    return (f"case topic.same: step 0: expect {key!r}: {{np: {np!r}}} is the observed value "
            "itself, so every engine passes: state the expected values (literals, or an np "
            "expression over the inputs or over a copy saved before the step)")


# (run, key, np that is the observation itself, np over the same names that is not)
SELF = [
    ("x = torch.ones(2)", "x", "x", "x * 2"),
    ("x = torch.ones(2)", "value(x)", "np.asarray(x)", "np.asarray(x) + 1"),
    ("x = torch.ones(2)", "x.detach()", "x", "-x"),
    ("x = torch.ones(2)", "x[0]", "x[0]", "x[1]"),
    ("x = torch.ones(2)\ny = x", "y", "x", "x.sum()"),
    ("x = torch.ones(2)\ny = x\nz = y", "z", "x", "x[0]"),
]


@pytest.mark.parametrize(("run", "key", "same", "other"), SELF,
                         ids=["name", "value and asarray", "detach", "index", "alias",
                              "alias of alias"])
def test_expectation_of_the_observed_value_itself_is_refused(tmp_path: Path, resources,
                                                             run: str, key: str, same: str,
                                                             other: str) -> None:
    line = 9 + len(run.splitlines())  # the expect line, after the run's lines
    assert problems(tmp_path, resources, run, key, same) == [f"{line}: {message(key, same)}"]
    assert problems(tmp_path, resources, run, key, other) == []


def test_a_rebound_name_is_no_longer_an_alias(tmp_path: Path, resources) -> None:
    run = "x = torch.ones(2)\ny = x\nx = x + 1"
    assert problems(tmp_path, resources, run, "y", "x - 1") == []
    assert problems(tmp_path, resources, run, "x", "x") == [f"12: {message('x', 'x')}"]
