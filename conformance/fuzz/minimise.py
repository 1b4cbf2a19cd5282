"""Reduce a failing program to the statements its mismatch needs.

Hypothesis shrinks the draws, but a program's steps refer to each other's variables, so taking
one out of the middle changes every later draw and shrinking keeps filler (`v3 = torch.rand(())`
that nothing uses). Here the program itself is reduced: steps after the differing one go, then
whole steps and single statements are taken out one at a time, last first, and a removal is kept
when the engines still differ on one of the same observations. The result is 1-minimal: taking
out any one remaining statement loses the mismatch.

    >>> from conformance.fuzz.program import ProgramStep
    >>> program = Program((ProgramStep("a = 1\\nb = 2"), ProgramStep("c = a")))
    >>> [s.run for s in minimise(program, lambda p: "c = a" in p.source() and
    ...                          "a = 1" in p.source()).steps]
    ['a = 1', 'c = a']
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import replace

from conformance.fuzz.program import Program

MAX_CHECKS = 400
"""At most this many candidate programs are run (each on both engines)."""
FEATURE_MARKERS = {"conv": "nn.Conv2d(", "batchnorm": "nn.BatchNorm",
                   "create_graph": "create_graph=True"}
"""A step keeps these features only while its text still contains the marker."""


def minimise(program: Program, fails: Callable[[Program], bool],
             max_checks: int = MAX_CHECKS) -> Program:
    """The smallest program found by removing statements from `program` while `fails` holds.

    `fails(program)` must be true on entry; it is called at most `max_checks` times.
    """
    checks = 0

    def attempt(candidate: Program | None) -> bool:
        nonlocal checks
        if candidate is None or checks >= max_checks:
            return False
        checks += 1
        return fails(candidate)

    changed = True
    while changed and checks < max_checks:
        changed = False
        for index in reversed(range(len(program.steps))):
            if index >= len(program.steps):
                continue
            candidate = _without_step(program, index)
            if attempt(candidate):
                program, changed = candidate, True
                continue
            for unit in reversed(range(len(_units(program.steps[index].run)))):
                candidate = _without_statement(program, index, unit)
                if attempt(candidate):
                    program, changed = candidate, True
    return program


def _without_step(program: Program, index: int) -> Program | None:
    if len(program.steps) == 1:
        return None
    return replace(program, steps=program.steps[:index] + program.steps[index + 1:])


def _without_statement(program: Program, index: int, unit: int) -> Program | None:
    step = program.steps[index]
    run = _remove(step.run, unit)
    if not run:
        return _without_step(program, index)
    features = tuple(f for f in step.features
                     if f not in FEATURE_MARKERS or FEATURE_MARKERS[f] in run)
    steps = list(program.steps)
    steps[index] = replace(step, run=run, features=features)
    return replace(program, steps=tuple(steps))


def _units(source: str) -> list[tuple[int, int]]:
    """Line ranges (first, last; 1-based) of the removable statements of `source`: every
    statement, except that a `with` block is entered rather than removed whole."""
    units: list[tuple[int, int]] = []

    def visit(body: list[ast.stmt]) -> None:
        for statement in body:
            if isinstance(statement, ast.With):
                visit(statement.body)
            else:
                units.append((statement.lineno, statement.end_lineno or statement.lineno))

    visit(ast.parse(source).body)
    return units


def _remove(source: str, unit: int) -> str:
    """`source` without its `unit`-th statement; a `with` left with an empty body goes too."""
    lines = source.split("\n")
    first = _units(source)[unit][0]

    def keep(body: list[ast.stmt]) -> list[str]:
        kept: list[str] = []
        for statement in body:
            if isinstance(statement, ast.With):
                inner = keep(statement.body)
                if inner:
                    kept += lines[statement.lineno - 1: statement.body[0].lineno - 1] + inner
            elif statement.lineno != first:
                kept += lines[statement.lineno - 1: statement.end_lineno or statement.lineno]
        return kept

    return "\n".join(keep(ast.parse(source).body))
