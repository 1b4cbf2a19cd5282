"""The specification's own invariants: coverage of every claim, exact quotes, a fresh
traceability table, schema-valid case files, and one dtype twin for every CUDA case."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from conformance import traceability
from conformance.loader import default_seeds, load

SPEC = Path(__file__).resolve().parents[2] / "spec"
CASE_FILES = sorted((SPEC / "cases").glob("*.yaml"))


def seed_text(doc: str) -> str:
    for folder in default_seeds():
        if (folder / doc).is_file():
            return traceability.collapse((folder / doc).read_text(encoding="utf-8"))
    raise AssertionError(f"source document {doc} not found in {default_seeds()}; "
                         "set $AUTOGRAD_CONFORMANCE_SEEDS to the folder that holds it")


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
    docs = {d.doc: len(d.claims) for d in trace.documents}
    assert sorted(docs) == ["000_ab61d14c9099960f.txt", "001_725a8afb72183ef2.txt",
                            "002_fbafddff58fced88.txt", "003_24a6ca998d8174a8.txt",
                            "004_378e5139bc55d674.txt"]
    assert all(count >= 20 for count in docs.values()), docs


def test_every_claim_quote_is_in_its_document(trace: traceability.Trace) -> None:
    missing = [claim.id for document in trace.documents for claim in document.claims
               if traceability.collapse(claim.quote) not in seed_text(claim.doc)]
    assert missing == []


def test_every_case_and_erratum_quote_is_in_its_document(cases: list[dict]) -> None:
    missing = [(case["id"], item["quote"]) for case in cases
               for item in case["sources"] + case.get("errata", [])
               if traceability.collapse(item["quote"]) not in seed_text(item["doc"])]
    assert missing == []


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
    assert [str(p) for p in result.problems] == []
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
