"""The built reference: every topic, case, claim and erratum is there, and every link works."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from docs_support import Page

from conformance.casefile.loader import DEFAULT_SPEC_DIR, load
from conformance.casefile.sources import collapse, load_sources
from conformance.engines.mygrad_adapter import EXPECTATIONS as MYGRAD_EXPECTATIONS
from conformance.reference.results import DEFAULT_ENGINES
from conformance.traceability import trace
from conformance.verdict.expectations import Expectations


@pytest.fixture(scope="module")
def cases():
    return load([DEFAULT_SPEC_DIR / "cases"]).cases


def test_builds_without_warnings(site):
    assert site.status == 0, site.log
    assert "WARNING" not in site.log and "ERROR" not in site.log, site.log
    assert (site.html / "index.html").is_file()


def test_every_case_is_a_section_anchored_by_its_id(site, page, cases):
    topics = {case.topic for case in cases}
    for topic in topics:
        assert (site.html / f"{topic}.html").is_file(), topic
    for case in cases:
        found = page(f"{case.topic}.html")
        assert case.id in found.ids, case.id
        section = next(attrs for tag, attrs in found.elements if attrs.get("id") == case.id)
        assert "spec-case" in (section.get("class") or "")
        assert case.id in found.text  # the id is shown, not only linked to
        assert collapse(case.rule) in found.text, case.id


def test_home_page_links_every_topic_and_names_the_oracle(page, cases):
    home = page("index.html")
    for topic in {case.topic for case in cases}:
        assert f"{topic}.html" in home.hrefs
    assert "PyTorch 2.13.0 (CPU)" in home.text
    for target in ("errata.html", "engines/index.html", "sources/index.html",
                   "case-language.html", "adapters.html", "fuzzing.html", "features.html"):
        assert target in home.hrefs, target


def test_examples_are_pytorch_sessions(page):
    text = page("retain_grad.html").text
    assert ">>> y.grad tensor([ 6., 12.])" in text
    assert "UserWarning: The .grad attribute of a Tensor that is not a leaf Tensor" in text
    refusal = page("retain_grad.html").text
    assert ("Traceback (most recent call last): ... RuntimeError: can't retain_grad on Tensor "
            "that has requires_grad=False") in refusal
    assert "<MulBackward0 object at 0x...>" in page("grad_fn.html").text


def test_errata_page_lists_every_erratum(page, cases):
    errata = page("errata.html")
    blocks = [attrs for tag, attrs in errata.elements
              if "erratum" in (attrs.get("class") or "").split()]
    total = sum(len(case.errata) for case in cases)
    assert len(blocks) == total
    for case in cases:
        for erratum in case.errata:
            assert f"{case.topic}.html#{case.id}" in errata.hrefs, case.id
            assert collapse(erratum.quote) in errata.text, (case.id, erratum.quote)
            assert collapse(erratum.correction) in errata.text, (case.id, erratum.correction)


def test_source_pages_list_each_claim_with_its_cases(page):
    documents, _ = load_sources(DEFAULT_SPEC_DIR / "sources.yaml")
    for document in trace(DEFAULT_SPEC_DIR).documents:
        source = page(f"sources/{document.doc}.html")
        assert collapse(documents[document.doc].title) in source.text
        for claim in document.claims:
            assert claim.id in source.ids, claim.id
            assert collapse(claim.quote) in source.text
            for case_id in claim.cases:
                assert f"../{case_id.split('.')[0]}.html#{case_id}" in source.hrefs


def test_engine_matrix_and_xfail_reasons(page, site, cases):
    matrix = page("engines/index.html")
    for name in DEFAULT_ENGINES:
        assert f"{name}.html" in matrix.hrefs
        assert (site.html / "engines" / f"{name}.html").is_file()
    for topic in {case.topic for case in cases}:
        assert f"../{topic}.html" in matrix.hrefs
    mygrad = page("engines/mygrad.html").text
    if "unavailable" not in mygrad:
        listed = Expectations.load(MYGRAD_EXPECTATIONS)
        xfail_ids = {case.id for case in cases
                     if (entry := listed.match(case.id)) and entry.kind == "xfail"}
        reasons = {listed.match(case_id).reason for case_id in xfail_ids}
        for reason in reasons:
            assert collapse(reason) in mygrad, reason


def test_case_language_adapters_and_fuzzing_pages(page):
    assert "Interpreting the cases" in page("case-language.html").text
    adapters = page("adapters.html").text
    assert "TorchLikeEngine" in adapters and "mygrad_adapter" in adapters
    fuzzing = page("fuzzing.html")
    assert "Open findings" in fuzzing.text
    assert any(href.startswith("fuzz_findings.html#fuzz_findings.") for href in fuzzing.hrefs)


def _html_files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.html"))


def test_internal_links_resolve(site):
    ids: dict[Path, set[str]] = {}
    broken = []
    for path in _html_files(site.html):
        parsed = Page(path)
        ids[path.resolve()] = parsed.ids
        for href in parsed.hrefs:
            parts = urlsplit(href)
            if parts.scheme or href.startswith("//"):
                continue
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else \
                path.resolve()
            if not target.exists():
                broken.append(f"{path.relative_to(site.html)}: {href} (no such file)")
                continue
            if parts.fragment and target.suffix == ".html":
                if target not in ids:
                    ids[target] = Page(target).ids
                if unquote(parts.fragment) not in ids[target]:
                    broken.append(f"{path.relative_to(site.html)}: {href} (no such anchor)")
    assert not broken, "\n".join(broken[:50])
