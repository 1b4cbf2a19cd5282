"""The suite catches non-conformance: refimpl with one rule broken fails that rule's cases.

For every break in `broken_engines.BREAKS` this file lists, by id, the cases of `spec/cases`
that encode the rule, and checks three things:

(a) each of them fails on the broken engine (verdict `failed`, not a crash), and the failure
    shows the broken rule (`symptom`);
(b) each of them passes on the unbroken refimpl engine, so (a) is the break's doing;
(c) a sample of cases about other rules, most of them near the broken one, still passes on the
    broken engine: the break is surgical and the verdicts are specific.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from broken_engines import BREAKS, BrokenEngine, Patch

import refimpl
from conformance.casefile.case import Case
from conformance.casefile.loader import DEFAULT_SPEC_DIR, load
from conformance.engines import Engine, load_engine
from conformance.run.executor import CaseResult, run_case


@dataclass(frozen=True)
class Encoded:
    encoding: tuple[str, ...]
    """Every case that encodes the broken rule."""
    unrelated: tuple[str, ...]
    """Cases about other rules (besides `COMMON`) that must still pass."""
    symptom: str
    """A regular expression the failure (message, expected and actual) matches."""


# A spread over every topic, none about a broken rule.
COMMON = (
    "leaf.factory-tensor-is-leaf",
    "backward.blog-derivative",
    "autograd_grad.several-inputs",
    "grad_fn.views-have-view-nodes",
    "inplace_and_views.modified-saved-tensor-fails-backward",
    "dtypes.grad-has-tensor-dtype",
)

RULES: dict[str, Encoded] = {
    "no_accumulation": Encoded(
        encoding=(
            "accumulation.devto-one-tensor",
            "accumulation.devto-three-tensors",
            "accumulation.across-graphs",
            "accumulation.zero-in-place",
            "accumulation.assigned-grad-accumulates",
            "backward.second-call-through-add-succeeds",
            "backward.second-call-through-sum-and-mean-succeeds",
            "backward.retain-graph-allows-second-call",
            "backward.retain-graph-holds-for-one-more-call",
            "inplace_and_views.view-shares-graph",
            "repr.devto-tuples",
            "retain_grad.must-come-before-backward",
            "retain_grad.retained-grad-accumulates",
        ),
        # Within one graph the engine sums contributions before AccumulateGrad runs.
        unrelated=("accumulation.within-one-graph", "accumulation.grad-defaults-to-none",
                   "accumulation.reset-to-none", "retain_grad.nonleaf-keeps-grad"),
        symptom=r"\.grad\)?: expected",
    ),
    "nonleaf_grads": Encoded(
        encoding=(
            "backward.only-leaves-that-require-grad-get-grad",
            "devices.forum-scenario-2-dtype-twin",
            "leaf.nonleaf-grad-of-nonleaf-is-none",
            "leaf.xyzw-example",
            "modules.l1loss-backward-reaches-parameters-only",
            "retain_grad.nonleaf-grad-after-backward-warns",
            "retain_grad.must-come-before-backward",
        ),
        unrelated=("retain_grad.nonleaf-keeps-grad", "retain_grad.retains-grad-flag",
                   "retain_grad.retained-grad-accumulates", "retain_grad.leaf-is-no-op"),
        symptom=r"expected None, observed tensor",
    ),
    "no_nonleaf_grad_warning": Encoded(
        encoding=(
            "devices.forum-scenario-2-dtype-twin",
            "leaf.xyzw-example",
            "retain_grad.nonleaf-grad-access-warns",
            "retain_grad.nonleaf-grad-after-backward-warns",
            "leaf.nonleaf-grad-of-nonleaf-is-none",
        ),
        unrelated=("retain_grad.leaf-grad-access-does-not-warn",
                   "retain_grad.no-warning-after-retain-grad"),
        symptom=r"expected warning UserWarning was not emitted",
    ),
    "wrong_element_message": Encoded(
        encoding=(
            "autograd_grad.output-must-require-grad",
            "autograd_grad.result-without-create-graph-is-constant",
            "backward.no-grad-tensor-refuses",
            "backward.plain-leaf-refuses",
            "backward.autograd-backward-function",
            "detach.original-stays-in-graph",
            "detach.in-place-then-backward-fails",
            "grad_mode.no-grad-result-cannot-backward",
        ),
        unrelated=("backward.non-scalar-needs-gradient", "autograd_grad.input-must-require-grad",
                   "autograd_grad.unused-input-refused", "backward.gradient-shape-mismatch"),
        # Where the case has run a backward before, a reworded refusal is PyTorch's surface;
        # where it has not, the engine cannot be told from one that refuses every backward.
        symptom=r"(wrong message for RuntimeError|a refusal of backward in the engine's own "
                r"words)[\s\S]*has no grad_fn",
    ),
    "no_release": Encoded(
        encoding=(
            "autograd_grad.frees-graph-by-default",
            "autograd_grad.retain-graph-defaults-to-create-graph",
            "backward.second-call-through-mul-fails",
            "backward.second-call-through-self-product-fails",
            "backward.retain-graph-holds-for-one-more-call",
            "backward.after-autograd-grad-fails",
        ),
        unrelated=("backward.second-call-through-add-succeeds",
                   "backward.second-call-through-sum-and-mean-succeeds",
                   "backward.retain-graph-allows-second-call",
                   "autograd_grad.retain-graph-keeps-graph"),
        symptom=r"expected RuntimeError to be raised, nothing was raised",
    ),
    "wrong_node_name": Encoded(
        encoding=(
            "accumulation.devto-three-tensors",
            "clone.of-nonleaf-extends-graph",
            "dtypes.int-input-gets-no-grad",
            "grad_fn.names-the-creating-operation",
            "grad_fn.graph-saves-inputs-and-operator",
            "grad_fn.blog-case-1",
            "grad_fn.shared-input-appears-twice",
            "grad_mode.enable-grad-inside-no-grad",
            "grad_mode.set-grad-enabled-true-inside-no-grad",
            "higher_order.second-and-third-derivative",
            "inplace_and_views.nonleaf-in-place-is-recorded",
            "inplace_and_views.in-place-on-view-of-nonleaf",
            "leaf.product-after-requires-grad-is-nonleaf",
            "leaf.nonleaf-requires-grad-method-true-is-allowed",
            "leaf.backward-walks-nonleaves-to-leaves",
            "leaf.xyzw-example",
            "modules.dropout-train-and-eval",
            "repr.devto-tuples",
            "requires_grad.any-input-makes-output-require-grad",
            "requires_grad.no-grad-subgraph-not-in-graph",
        ),
        unrelated=("grad_fn.rsub-node", "leaf.add-note-names-addbackward",
                   "grad_fn.blog-case-2", "repr.result-shows-grad-fn"),
        symptom=r"MulBackward(?!0)",
    ),
    "clone_of_plain_tensor_not_leaf": Encoded(
        encoding=("clone.of-plain-tensor-is-leaf",),
        unrelated=("clone.of-grad-tensor-is-nonleaf", "clone.under-no-grad-is-leaf",
                   "clone.of-nonleaf-extends-graph", "clone.copies-data"),
        symptom=r"is_leaf: expected True",
    ),
    "grad_mode_kept_on_exception": Encoded(
        encoding=("grad_mode.restored-after-exception",
                  "grad_mode.restored-after-exception-in-enable-grad"),
        unrelated=("grad_mode.no-grad-records-nothing", "grad_mode.enable-grad-inside-no-grad",
                   "grad_mode.set-grad-enabled-false-context", "grad_mode.no-grad-decorator"),
        symptom=r"is_grad_enabled\(\): expected (True|False)",
    ),
    "detach_copies": Encoded(
        encoding=("detach.shares-storage",
                  "inplace_and_views.modified-through-detached-alias-fails-backward"),
        unrelated=("detach.result-is-leaf-without-grad", "detach.stops-gradient-flow",
                   "detach.in-place-makes-leaf", "leaf.backward-stops-at-detached-leaf"),
        symptom=r"expected \[[0-9., ]+\], observed",
    ),
    "nonleaf_requires_grad_settable": Encoded(
        encoding=("leaf.nonleaf-requires-grad-cannot-be-cleared",
                  "leaf.nonleaf-requires-grad-cannot-be-cleared-by-method",
                  "leaf.nonleaf-requires-grad-assign-true-raises"),
        unrelated=("leaf.nonleaf-requires-grad-method-true-is-allowed",
                   "requires_grad.set-by-attribute", "requires_grad.method-false-on-leaf",
                   "dtypes.int-attribute-refuses-requires-grad"),
        symptom=r"expected RuntimeError to be raised, nothing was raised",
    ),
}


@pytest.fixture(scope="module")
def cases() -> dict[str, Case]:
    result = load([DEFAULT_SPEC_DIR / "cases"])
    assert result.ok, "\n".join(str(problem) for problem in result.problems)
    return {case.id: case for case in result.cases}


@pytest.fixture(scope="module")
def reference() -> Engine:
    return load_engine("refimpl")


def _run(cases: dict[str, Case], ids: tuple[str, ...], engine: Engine) -> list[CaseResult]:
    return [run_case(cases[case_id], engine) for case_id in ids]


def _explain(result: CaseResult) -> str:
    return (f"{result.case_id} on {result.engine}: {result.verdict} at step {result.step}: "
            f"{result.message}\n  expected: {result.expected}\n  actual:   {result.actual}")


def test_every_break_has_its_cases_listed() -> None:
    assert sorted(RULES) == sorted(BREAKS)


def test_listed_cases_exist(cases: dict[str, Case]) -> None:
    listed = {i for rule in RULES.values() for i in rule.encoding + rule.unrelated} | set(COMMON)
    assert sorted(listed - set(cases)) == []


@pytest.mark.parametrize("name", sorted(RULES))
def test_broken_engine_fails_the_cases_of_its_rule(name: str, cases: dict[str, Case]) -> None:
    rule = RULES[name]
    engine = BrokenEngine(BREAKS[name])
    results = _run(cases, rule.encoding, engine)
    assert not engine.patch.active, "the break outlived the case"
    missed = [_explain(r) for r in results if r.verdict != "failed"
              or not re.search(rule.symptom, f"{r.message}\n{r.expected}\n{r.actual}")]
    assert missed == [], f"{BREAKS[name].rule}\n" + "\n".join(missed)


@pytest.mark.parametrize("name", sorted(RULES))
def test_reference_engine_passes_the_same_cases(name: str, cases: dict[str, Case],
                                               reference: Engine) -> None:
    failed = [_explain(r) for r in _run(cases, RULES[name].encoding, reference)
              if r.verdict != "passed"]
    assert failed == []


@pytest.mark.parametrize("name", sorted(RULES))
def test_broken_engine_passes_unrelated_cases(name: str, cases: dict[str, Case]) -> None:
    ids = RULES[name].unrelated + COMMON
    assert not set(ids) & set(RULES[name].encoding)
    failed = [_explain(r) for r in _run(cases, ids, BrokenEngine(BREAKS[name]))
              if r.verdict != "passed"]
    assert failed == []


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_break_is_undone(name: str) -> None:
    patch = Patch()
    BREAKS[name].apply(patch)
    replaced = patch.originals()
    assert replaced, "a break must replace something"
    assert all(getattr(owner, attr) is not original for owner, attr, original in replaced)
    patch.undo()
    assert all(getattr(owner, attr) is original for owner, attr, original in replaced)


def test_refimpl_is_intact_after_a_broken_run(cases: dict[str, Case]) -> None:
    engine = BrokenEngine(BREAKS["no_accumulation"])
    assert run_case(cases["accumulation.devto-one-tensor"], engine).verdict == "failed"
    x = refimpl.tensor(1.0, requires_grad=True)
    (x * 2).backward()
    (x * 2).backward()
    assert x.grad.item() == 4.0


# Breaks of PyTorch's surface (a node's name, a message's wording): an engine that differs only
# there conforms at the semantics level. Every other break is of the autograd model itself.
SURFACE_BREAKS = {"wrong_node_name", "wrong_element_message"}
# ... except where a reworded refusal of backward comes before the case has seen any backward
# run: an engine that cannot run backward at all would refuse the same way, so the rewording
# is not provably surface there (`conformance.run.refusals`).
REFUSED_BEFORE_ANY_BACKWARD = {
    "wrong_element_message": {
        "autograd_grad.output-must-require-grad", "backward.no-grad-tensor-refuses",
        "backward.plain-leaf-refuses", "detach.in-place-then-backward-fails",
        "grad_mode.no-grad-result-cannot-backward"},
}
# Cases whose only evidence of their rule is Python identity, which is surface: `zero_()` keeps
# the same .grad object, and a later accumulation writes into it (`g is x.grad`).
IDENTITY_EVIDENCE = {"accumulation.zero-in-place"}


@pytest.mark.parametrize("name", sorted(RULES))
def test_the_semantics_level_sees_exactly_the_semantic_breaks(name: str,
                                                            cases: dict[str, Case]) -> None:
    results = _run(cases, RULES[name].encoding, BrokenEngine(BREAKS[name]))
    at_semantics = {r.case_id: r.verdict_at("semantics") for r in results}
    semantic = REFUSED_BEFORE_ANY_BACKWARD.get(name, set())

    def want(case_id: str) -> str:
        return "passed" if name in SURFACE_BREAKS and case_id not in semantic else "failed"

    assert {i: v for i, v in at_semantics.items()
            if v != want(i) and i not in IDENTITY_EVIDENCE} == {}, BREAKS[name].rule
