"""conformance.traceability on small made-up specs: matching, rendering and --check."""

from __future__ import annotations

from pathlib import Path

import yaml

from conformance import traceability

SOURCES = {"documents": [{"id": name, "title": f"Doc {name}", "author": "a", "site": "s",
                          "kind": "blog", "reflects": "not stated", "file": f"{name}.txt"}
                         for name in ("d", "other")]}
CLAIMS = {"documents": [{"doc": "d", "claims": [
    {"id": "d.1", "quote": "leaves   get grad", "says": "Leaves get grad."},
    {"id": "d.2", "quote": "a <Node> named | here", "says": "Node names."},
]}]}


def make_spec(tmp_path: Path, sources: list[dict], errata: list[dict] | None = None) -> Path:
    (tmp_path / "cases").mkdir()
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump(CLAIMS))
    (tmp_path / "sources.yaml").write_text(yaml.safe_dump(SOURCES))
    case = {"id": "leaf.a", "rule": "r", "sources": sources, "steps": [{"run": "x = 1"}]}
    if errata:
        case["errata"] = errata
    (tmp_path / "cases" / "leaf.yaml").write_text(yaml.safe_dump([case]))
    return tmp_path


def test_overlap_is_containment_after_collapsing_whitespace() -> None:
    assert traceability.overlaps("leaves get\n grad", "all leaves  get grad here")
    assert traceability.overlaps("all leaves get grad", "leaves get")
    assert not traceability.overlaps("leaves get grad", "leaves got grad")


def test_case_covers_only_claims_it_overlaps(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, [{"doc": "d", "quote": "get grad"}])
    result = traceability.trace(spec)
    assert [c.cases for c in result.documents[0].claims] == [["leaf.a"], []]
    assert [c.id for c in result.uncovered] == ["d.2"]


def test_same_words_in_another_document_do_not_cover(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, [{"doc": "other", "quote": "leaves get grad"}])
    result = traceability.trace(spec)
    assert len(result.uncovered) == 2
    assert [o.case_id for o in result.orphans] == ["leaf.a"]


def test_errata_are_matched_and_rendered(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, [{"doc": "d", "quote": "a <Node> named | here"}],
                     [{"doc": "d", "quote": "<Node>", "correction": "It is Node0."}])
    result = traceability.trace(spec)
    assert [(e.case_id, ids) for e, ids in result.errata] == [("leaf.a", ["d.2"])]
    text = traceability.render(result)
    assert "a &lt;Node&gt; named \\| here" in text
    assert "It is Node0." in text
    assert "**none**" in text  # d.1 is uncovered and says so


def test_check_fails_on_uncovered_claim_and_stale_file(tmp_path: Path, capsys) -> None:
    spec = make_spec(tmp_path, [{"doc": "d", "quote": "leaves get grad"}])
    assert traceability.main(["--spec", str(spec)]) == 0
    assert traceability.main(["--check", "--spec", str(spec)]) == 1
    assert "claim d.2 (d) has no case" in capsys.readouterr().err


def test_check_passes_when_covered_and_fresh_then_fails_when_stale(tmp_path: Path,
                                                                   capsys) -> None:
    spec = make_spec(tmp_path, [{"doc": "d", "quote": "leaves get grad"},
                                {"doc": "d", "quote": "a <Node> named | here"}])
    assert traceability.main(["--spec", str(spec)]) == 0
    assert traceability.main(["--check", "--spec", str(spec)]) == 0
    (spec / "TRACEABILITY.md").write_text("old\n")
    assert traceability.main(["--check", "--spec", str(spec)]) == 1
    assert "out of date" in capsys.readouterr().err


def test_unreadable_claims_file_is_reported(tmp_path: Path, capsys) -> None:
    spec = make_spec(tmp_path, [{"doc": "d", "quote": "leaves get grad"}])
    (spec / "claims.yaml").write_text("documents: [{doc: d, claims: [{id: d.1}]}]\n")
    assert traceability.main(["--check", "--spec", str(spec)]) == 2
    assert "missing or non-text quote, says" in capsys.readouterr().err
