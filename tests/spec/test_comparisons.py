"""Comparison tables and topic groups: every cell shown by an existing case, every topic on the
home page once."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from conformance.casefile.comparisons import load_comparisons, read_comparisons
from conformance.casefile.loader import DEFAULT_SPEC_DIR, SpecResources, load
from conformance.reference.generate import GenerateError, topic_groups

SPEC = DEFAULT_SPEC_DIR


@pytest.fixture(scope="module")
def case_ids() -> list[str]:
    result = load([SPEC / "cases"], SpecResources.load(SPEC))
    return [case.id for case in result.cases]


def test_the_spec_tables_cite_existing_cases_in_every_cell(case_ids):
    tables, problems = read_comparisons(SPEC, case_ids)
    assert problems == [], "\n".join(map(str, problems))
    assert {t.id for t in tables} >= {"grad-modes", "detach-data-clone",
                                      "retain-graph-create-graph"}
    for table in tables:
        for row in table.rows:
            assert len(row.cells) == len(table.columns)
            assert all(cell.cases for cell in row.cells), (table.id, row.aspect)


@pytest.mark.parametrize("table, problem", [
    ("{id: t, title: T, intro: I, columns: [a, b], rows: [{aspect: A, cells: "
     "[{text: x, cases: [leaf.nope]}, {text: y, cases: [leaf.nope]}]}]}",
     "'leaf.nope' is not a case"),
    ("{id: t, title: T, intro: I, columns: [a, b], rows: [{aspect: A, cells: "
     "[{text: x, cases: [leaf.a]}]}]}", "one cell per column (2)"),
    ("{id: t, title: T, intro: I, columns: [a, b], rows: [{aspect: A, cells: "
     "[{text: x, cases: []}, {text: y, cases: [leaf.a]}]}]}", "must list the case ids"),
    ("{id: T T, title: T, intro: I, columns: [a, b], rows: [{aspect: A, cells: "
     "[{text: x, cases: [leaf.a]}, {text: y, cases: [leaf.a]}]}]}", "id must be lower-case"),
    ("{id: t, title: T, columns: [a, b], rows: []}", "'intro' must be a non-empty string"),
])
def test_bad_tables_are_refused_with_their_line(tmp_path, table, problem):
    path = tmp_path / "comparisons.yaml"
    path.write_text(f"comparisons:\n  - {table}\n", encoding="utf-8")
    tables, problems = load_comparisons(path, ["leaf.a", "leaf.b"])
    assert tables == []
    assert any(line == 2 and problem in message for line, message in problems), problems


def test_a_cited_case_of_a_topic_not_loaded_is_not_checked(tmp_path):
    path = tmp_path / "comparisons.yaml"
    path.write_text(textwrap.dedent("""\
        comparisons:
          - id: t
            title: T
            intro: I
            columns: [a, b]
            rows:
              - aspect: A
                cells:
                  - {text: x, cases: [other.case]}
                  - {text: y, cases: [leaf.a]}
        """), encoding="utf-8")
    tables, problems = load_comparisons(path, ["leaf.a"])
    assert problems == [] and len(tables) == 1


def test_every_topic_is_in_exactly_one_group_of_the_home_page():
    topics = sorted(p.stem for p in (SPEC / "cases").glob("*.yaml"))
    groups = topic_groups(SPEC / "topics.yaml", topics)
    placed = [t for _, _, members in groups for t in members]
    assert sorted(placed) == topics
    assert all(title != "Other topics" for title, _, _ in groups), "place every topic by hand"
    data = yaml.safe_load((SPEC / "topics.yaml").read_text(encoding="utf-8"))
    assert all(group.get("question") for group in data["groups"])


def test_a_topic_placed_twice_is_refused_and_an_unplaced_one_still_shown(tmp_path):
    path = tmp_path / "topics.yaml"
    path.write_text("groups:\n  - {title: A, topics: [leaf]}\n  - {title: B, topics: [leaf]}\n")
    with pytest.raises(GenerateError, match="in groups 'A' and 'B'"):
        topic_groups(path, ["leaf"])
    path.write_text("groups:\n  - {title: A, topics: [nope, leaf]}\n  - {title: B, "
                    "topics: [gone]}\n")
    assert topic_groups(path, ["leaf", "extra"]) == [("A", "", ["leaf"]),
                                                     ("Other topics", "", ["extra"])]
    assert topic_groups(tmp_path / "missing.yaml", ["leaf"]) == [("Topics", "", ["leaf"])]
