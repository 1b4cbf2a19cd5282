"""Reducing a failing program: filler steps and statements go, what the failure needs stays."""

from __future__ import annotations

from conformance.fuzz.minimise import minimise
from conformance.fuzz.program import Program, ProgramStep


def _program() -> Program:
    return Program((
        ProgramStep("a = torch.rand(2, requires_grad=True)\nfiller = torch.rand(())",
                    ("a",), ()),
        ProgramStep("m = nn.Conv2d(1, 2, 1)\nwith torch.no_grad():\n    with torch.enable_grad():"
                    "\n        b = a * 2", ("b",), ("conv", "modules")),
        ProgramStep("unused = a.exp()", ("unused",)),
        ProgramStep("b.sum().backward()", ("a.grad",)),
        ProgramStep("after = b + 1", ("after",)),
    ), seed=5)


def _needs(*texts: str):
    calls: list[Program] = []

    def fails(program: Program) -> bool:
        calls.append(program)
        source = program.source()
        return all(text in source for text in texts)

    return fails, calls


def test_keeps_only_the_statements_the_failure_needs():
    fails, _ = _needs("a = torch.rand", "b = a * 2", "b.sum().backward()")
    reduced = minimise(_program(), fails)
    assert [step.run for step in reduced.steps] == [
        "a = torch.rand(2, requires_grad=True)",
        "with torch.no_grad():\n    with torch.enable_grad():\n        b = a * 2",
        "b.sum().backward()",
    ]
    assert reduced.seed == 5
    # The Conv2d went, so the step no longer needs `conv`; observations stay with their steps.
    assert reduced.steps[1].features == ("modules",)
    assert reduced.steps[2].observe == ("a.grad",)


def test_a_with_block_goes_with_its_last_statement():
    fails, _ = _needs("filler", "nn.Conv2d")
    reduced = minimise(_program(), fails)
    assert [step.run for step in reduced.steps] == ["filler = torch.rand(())",
                                                    "m = nn.Conv2d(1, 2, 1)"]
    assert reduced.steps[1].features == ("conv", "modules")


def test_the_number_of_checks_is_bounded():
    fails, calls = _needs("a = torch.rand")
    reduced = minimise(_program(), fails, max_checks=3)
    assert len(calls) == 3
    assert len(reduced.steps) < len(_program().steps)
