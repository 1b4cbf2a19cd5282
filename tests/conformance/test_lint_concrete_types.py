"""`raises` and `warns` name the concrete class PyTorch raises or emits: a base class such as
`Exception` or `Warning` would let a step pass on any error or any warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.casefile.loader import load

CASE = """\
- id: topic.typed
  rule: A rule.
  sources:
    - doc: doc
      quote: A tensor created by the user is a leaf.
  steps:
    - run: x = torch.ones(2)
    - run: y = x + 1
{entry}
"""
RAISES = "      raises:\n        type: {name}\n        stage: forward\n"
WARNS = "      warns:\n        - type: UserWarning\n        - type: {name}\n"


def problems(tmp_path: Path, resources, entry: str) -> list[str]:
    path = tmp_path / "topic.yaml"
    path.write_text(CASE.format(entry=entry.rstrip("\n")), encoding="utf-8")
    return [str(p).removeprefix(f"{path}:") for p in load([path], resources).problems]


# Each abstract base with a concrete class that stays allowed (OSError is raised as such).
@pytest.mark.parametrize(("name", "concrete"), [
    ("BaseException", "RuntimeError"), ("Exception", "TypeError"),
    ("ArithmeticError", "ZeroDivisionError"), ("LookupError", "IndexError"),
    ("BufferError", "OSError")])
def test_raises_may_not_name_an_abstract_base(tmp_path: Path, resources, name: str,
                                              concrete: str) -> None:
    assert problems(tmp_path, resources, RAISES.format(name=name)) == [
        f"10: case topic.typed: step 1: raises type '{name}' is a base class that matches "
        "errors of many kinds: name the class PyTorch 2.13 raises (RuntimeError, TypeError, "
        "IndexError, ...)"]
    assert problems(tmp_path, resources, RAISES.format(name=concrete)) == []


@pytest.mark.parametrize(("name", "concrete"), [
    ("Warning", "UserWarning"), ("Exception", "FutureWarning"),
    ("BaseException", "DeprecationWarning")])
def test_warns_may_not_name_the_base_of_every_warning(tmp_path: Path, resources, name: str,
                                                      concrete: str) -> None:
    assert problems(tmp_path, resources, WARNS.format(name=name)) == [
        f"11: case topic.typed: step 1: warns type '{name}' is a base class that matches every "
        "warning: name the category PyTorch 2.13 emits (UserWarning, FutureWarning, ...)"]
    assert problems(tmp_path, resources, WARNS.format(name=concrete)) == []
