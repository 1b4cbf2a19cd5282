"""The errata are complete: every claim the documents get wrong or dated for PyTorch 2.13 has an
erratum on a case that cites it, and `says` in claims.yaml marks exactly those claims."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conformance import traceability
from conformance.casefile.sources import collapse, load_sources

SPEC = Path(__file__).resolve().parents[2] / "spec"
# A `says` line marks a claim the document gets wrong, dated, or lost in rendering.
MARK = re.compile(r"\((wrong|dated|lost)\b")
# Sentences end with . ! or ? before a capital; "x.grad" and "nn.L1Loss" do not end one.
SENTENCE_END = re.compile(r"[.!?]['\"]?\s+(?=[A-Z'\"])")


@pytest.fixture(scope="module")
def trace() -> traceability.Trace:
    return traceability.trace(SPEC)


@pytest.mark.parametrize(("doc", "claim", "words"), [
    # what a node saves
    ("autodiff-notes-flat", "autodiff000.19", "saves all the inputs"),
    ("autodiff-notes", "autodiff002.19", "saves all the inputs"),
    # no_grad: views still require grad, and backward() still runs inside it
    ("autodiff-notes-flat", "autodiff000.30", "behave as if no inputs requires grad"),
    ("autodiff-notes", "autodiff002.30", "behave as if no inputs requires grad"),
    ("autodiff-notes-flat", "autodiff000.30", "(and thus cannot call backward())"),
    ("autodiff-notes", "autodiff002.30", "(and thus cannot call `backward()`)"),
    # comparisons and argmax do not require grad
    ("forum-is-leaf", "forum001.34", "its output will also require gradient"),
    # a product computed before the flag was set stays a leaf
    ("forum-is-leaf", "forum001.49", "making C not a leaf tensor anymore"),
    # only backward() without a gradient needs one element
    ("devto-requires-grad", "devto003.7", "must be the scalar(only one element)"),
    # the flattened copy lost l.backward() and check(lin.weight)
    ("autodiff-notes-flat", "autodiff000.60", "'l.backward()' and 'check(lin.weight)'"),
])
def test_known_correction_has_an_erratum(trace: traceability.Trace, doc: str, claim: str,
                                         words: str) -> None:
    found = [e for e, ids in trace.errata if e.doc == doc and claim in ids
             and (words in collapse(e.quote) or words in (e.correction or ""))]
    assert found, f"no erratum of {doc} on claim {claim} with {words!r}"


def test_every_erratum_sits_on_a_case_citing_its_claims(trace: traceability.Trace) -> None:
    claims = {c.id: c for d in trace.documents for c in d.claims}
    unmatched = [(e.case_id, e.quote) for e, ids in trace.errata if not ids]
    uncited = [(e.case_id, claim) for e, ids in trace.errata for claim in ids
               if e.case_id not in claims[claim].cases]
    assert unmatched == []
    assert uncited == []


def test_every_document_has_errata(trace: traceability.Trace) -> None:
    # PyTorch 2.13's own docstrings describe the version the cases follow: nothing to correct.
    sources, _ = load_sources(SPEC / "sources.yaml")
    counts = {d.doc: sum(1 for e, _ in trace.errata if e.doc == d.doc) for d in trace.documents
              if sources[d.doc].kind != "docstring"}
    assert counts and all(counts.values()), counts


def test_says_marks_exactly_the_claims_with_errata(trace: traceability.Trace) -> None:
    corrected = {claim for _, ids in trace.errata for claim in ids}
    marked = {c.id for d in trace.documents for c in d.claims if MARK.search(c.says)}
    assert sorted(marked - corrected) == [], "says marks these wrong or dated, but no erratum"
    assert sorted(corrected - marked) == [], "errata correct these; says does not mark them"


def test_corrections_are_one_or_two_sentences(trace: traceability.Trace) -> None:
    long = [(e.case_id, e.correction) for e, _ in trace.errata
            if not e.correction or len(SENTENCE_END.split(e.correction.strip())) > 2]
    assert long == []
