"""The specification's own invariants: coverage of every claim, exact quotes, a fresh
traceability table, schema-valid case files, and one dtype twin for every CUDA case."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from conformance import traceability
from conformance.casefile.loader import SpecResources, load
from conformance.casefile.sources import docstring, load_sources

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "spec"
CASE_FILES = sorted((SPEC / "cases").glob("*.yaml"))
# The documents' texts live beside the checkout, not in it; the project never needs them to run.
# Where they are, every quote is checked against them; where they are not, those tests say so.
TEXTS = ROOT.parent / "shared" / "seeds"
# The five documents' texts live in TEXTS; the text of a page of PyTorch's docs (kind docs) may
# not be there: its quotes are checked where it is (`lint --sources DIR`), and skipped here.
_ABSENT_TEXTS = tuple(
    f"--sources: {d.id}: cannot read" for d in load_sources(SPEC / "sources.yaml")[0].values()
    if d.kind == "docs" and not (TEXTS / d.file).is_file())


def _without_absent_texts(problems: list) -> list:
    return [p for p in problems if not p.message.startswith(_ABSENT_TEXTS)]


needs_texts = pytest.mark.skipif(
    not TEXTS.is_dir(), reason=f"the source documents' texts are not at {TEXTS}: quotes were "
    "not checked against them (run `python -m conformance lint --sources DIR` where they are)")


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    resources = SpecResources.load(SPEC, texts_dir=TEXTS)
    assert [str(p) for p in _without_absent_texts(resources.problems)] == []
    return resources.texts


@pytest.fixture(scope="module")
def trace() -> traceability.Trace:
    return traceability.trace(SPEC)


@pytest.fixture(scope="module")
def cases() -> list[dict]:
    return [case for path in CASE_FILES for case in yaml.safe_load(path.read_text())]


def test_every_claim_has_a_case(trace: traceability.Trace) -> None:
    assert [claim.id for claim in trace.uncovered] == []


def test_every_citation_matches_a_claim(trace: traceability.Trace) -> None:
    assert [(o.case_id, o.quote) for o in trace.orphans] == []


def test_all_five_documents_have_claims(trace: traceability.Trace) -> None:
    sources, _ = load_sources(SPEC / "sources.yaml")
    docs = {d.doc: len(d.claims) for d in trace.documents
            if sources[d.doc].kind not in ("docstring", "docs")}
    assert sorted(docs) == ["autodiff-notes", "autodiff-notes-flat", "blog-detach",
                            "devto-requires-grad", "forum-is-leaf"]
    assert all(count >= 20 for count in docs.values()), docs


def test_docstring_claims_quote_their_docstring(trace: traceability.Trace) -> None:
    pytest.importorskip("torch")
    sources, _ = load_sources(SPEC / "sources.yaml")
    missing = []
    for document in trace.documents:
        if sources[document.doc].kind == "docstring":
            text, problem = docstring(sources[document.doc].object)
            assert text is not None, problem
            missing += [c.id for c in document.claims
                        if traceability.collapse(c.quote) not in traceability.collapse(text)]
    assert missing == []


@needs_texts
def test_every_claim_quote_is_in_its_document(trace: traceability.Trace,
                                              texts: dict[str, str]) -> None:
    missing = [claim.id for document in trace.documents for claim in document.claims
               if document.doc in texts
               and traceability.collapse(claim.quote) not in texts[claim.doc]]
    assert missing == []


@needs_texts
def test_lint_with_sources_checks_every_quote_against_the_texts() -> None:
    import importlib.util

    docstrings = importlib.util.find_spec("torch") is not None
    result = load([SPEC / "cases"], SpecResources.load(SPEC, texts_dir=TEXTS,
                                                        docstrings=docstrings))
    assert [str(p) for p in _without_absent_texts(result.problems)] == []
    assert len(result.cases) >= 150


@needs_texts
def test_lint_with_sources_finds_a_misquote(tmp_path: Path) -> None:
    case = yaml.safe_load((SPEC / "cases" / "leaf.yaml").read_text())[0]
    case["sources"][0]["quote"] += " and words the document never wrote"
    (tmp_path / "leaf.yaml").write_text(yaml.safe_dump([case]))
    result = load([tmp_path / "leaf.yaml"], SpecResources.load(SPEC, texts_dir=TEXTS))
    assert [p.message.split(":")[1].strip() for p in _without_absent_texts(result.problems)] == [
        f"quote not found in {case['sources'][0]['doc']}"]


def test_every_document_is_described(trace: traceability.Trace) -> None:
    documents, problems = load_sources(SPEC / "sources.yaml")
    assert problems == []
    assert {d.doc for d in trace.documents} == set(documents)
    for document in documents.values():
        assert document.title and document.author and document.reflects
    assert sum(len(d.pytorch_docs) for d in documents.values()) >= 5


def test_the_project_reads_no_folder_beside_its_checkout() -> None:
    """Nothing but these tests may look at ../shared: the package must stand alone."""
    offenders = [str(path.relative_to(ROOT)) for folder in ("conformance", "refimpl")
                 for path in (ROOT / folder).rglob("*.py")
                 if "shared" + "/seeds" in path.read_text(encoding="utf-8")
                 or "../" + "shared" in path.read_text(encoding="utf-8")]
    assert offenders == []


def test_traceability_table_is_up_to_date(trace: traceability.Trace) -> None:
    written = (SPEC / traceability.OUTPUT_NAME).read_text(encoding="utf-8")
    assert written == traceability.render(trace), \
        "spec/TRACEABILITY.md is stale: run `python -m conformance.traceability`"


def test_check_mode_passes_on_the_repository() -> None:
    assert traceability.main(["--check", "--spec", str(SPEC)]) == 0


@pytest.mark.parametrize("path", CASE_FILES, ids=lambda p: p.stem)
def test_schema_validates_case_file(path: Path) -> None:
    validator = jsonschema.Draft202012Validator(json.loads((SPEC / "case.schema.json").read_text()))
    errors = [f"{list(e.absolute_path)}: {e.message}"
              for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
    assert errors == []


@pytest.mark.parametrize("bad", [
    {"rule": "r", "sources": [{"doc": "a.txt", "quote": "q"}], "steps": [{"run": "x = 1"}]},
    {"id": "leaf.a", "rule": "r", "sources": [], "steps": [{"run": "x = 1"}]},
    {"id": "leaf.a", "rule": "r", "sources": [{"doc": "a.txt", "quote": "q"}],
     "steps": [{"run": "x = 1", "raises": {"type": "RuntimeError", "stage": "later"}}]},
    {"id": "Leaf A", "rule": "r", "sources": [{"doc": "a.txt", "quote": "q"}],
     "steps": [{"run": "x = 1"}]},
    {"id": "leaf.a", "rule": "r", "sources": [{"doc": "a.txt", "quote": "q"}],
     "steps": [{"run": "x = 1", "expect": {"x": {"np": "x", "dtype": "float32"}}}]},
], ids=["no-id", "no-sources", "bad-stage", "bad-id", "np-with-other-keys"])
def test_schema_rejects_malformed_case(bad: dict) -> None:
    validator = jsonschema.Draft202012Validator(json.loads((SPEC / "case.schema.json").read_text()))
    assert not validator.is_valid([bad])


def test_case_files_load_without_problems() -> None:
    result = load([SPEC / "cases"])
    assert [str(p) for p in _without_absent_texts(result.problems)] == []
    assert len(result.cases) >= 150


def test_every_registered_feature_is_used(cases: list[dict]) -> None:
    registered = set(yaml.safe_load((SPEC / "features.yaml").read_text()))
    used = {feature for case in cases for feature in case.get("features", [])}
    assert registered == used


def test_every_cuda_case_has_a_dtype_twin(cases: list[dict]) -> None:
    by_id = {case["id"]: case for case in cases}
    cuda_ids = [case["id"] for case in cases if "cuda" in case.get("features", [])]
    assert cuda_ids
    for case_id in cuda_ids:
        twin = by_id.get(case_id + "-dtype-twin")
        assert twin is not None, f"{case_id} has no {case_id}-dtype-twin"
        assert "cuda" not in twin.get("features", [])
        quotes = {s["quote"] for s in by_id[case_id]["sources"]}
        assert quotes & {s["quote"] for s in twin["sources"]}, f"{case_id}: twin cites other words"


def test_every_erratum_is_listed_in_the_table(trace: traceability.Trace) -> None:
    text = (SPEC / traceability.OUTPUT_NAME).read_text(encoding="utf-8")
    assert len(trace.errata) >= 20
    for erratum, claim_ids in trace.errata:
        assert claim_ids, erratum
        assert f"`{erratum.case_id}`" in text


def test_a_docs_page_needs_its_address_and_its_text_file(tmp_path: Path) -> None:
    from conformance.casefile.sources import read_texts

    (tmp_path / "sources.yaml").write_text(
        "documents:\n"
        "  - {id: notes, title: Autograd mechanics, author: PyTorch, site: docs, kind: docs, "
        "reflects: PyTorch 2.x, url: https://docs.pytorch.org/notes, file: notes.rst}\n"
        "  - {id: bare, title: x, author: PyTorch, site: docs, kind: docs, reflects: x, "
        "file: bare.rst}\n")
    (tmp_path / "notes.rst").write_text("If the function is convex (at least\nlocally)")
    documents, problems = load_sources(tmp_path / "sources.yaml")
    assert [message for _, message in problems] == ["missing or empty text field(s): url"]
    assert documents["notes"].url == "https://docs.pytorch.org/notes"
    texts, missing = read_texts(documents, tmp_path)
    assert texts == {"notes": "If the function is convex (at least locally)"}
    assert missing == []


def test_docstring_sources_are_checked_against_the_installed_torch(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="docstring quotes are checked against installed torch")
    from conformance.casefile.sources import collapse, read_texts

    (tmp_path / "sources.yaml").write_text(
        "documents:\n"
        "  - {id: torch-no-grad, title: torch.no_grad, author: PyTorch, site: docstring, "
        "kind: docstring, reflects: PyTorch 2.13, object: torch.no_grad}\n"
        "  - {id: torch-nothing, title: x, author: PyTorch, site: docstring, "
        "kind: docstring, reflects: PyTorch 2.13, object: torch.no_such_thing}\n")
    documents, problems = load_sources(tmp_path / "sources.yaml")
    assert problems == []
    texts, missing = read_texts(documents, None, docstrings=True)
    assert collapse("Context-manager that disables gradient calculation.") in \
        texts["torch-no-grad"]
    assert missing == ["torch-nothing: torch has no torch.no_such_thing"]
