"""Topic pages by subject: readable titles, and the rules filed by origin (mutation testing,
fuzzing) placed under the topic whose subject they are, from `spec/topics.yaml`."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from conformance.casefile.loader import DEFAULT_SPEC_DIR, load
from conformance.reference.generate import topic_page
from conformance.reference.site import (
    GenerateError,
    case_subjects,
    collect,
    plain_title,
    topic_titles,
)

TOPICS = DEFAULT_SPEC_DIR / "topics.yaml"
BY_ORIGIN = ("mutation_pins", "fuzz_findings")


@pytest.fixture(scope="module")
def cases():
    return load([DEFAULT_SPEC_DIR / "cases"]).cases


@pytest.fixture(scope="module")
def spec_site(cases):
    return collect(DEFAULT_SPEC_DIR, results=[], cases=cases)


def test_every_case_filed_by_origin_is_placed_under_an_existing_subject(cases):
    data = yaml.safe_load(TOPICS.read_text(encoding="utf-8"))
    assert sorted(data["subjects"]) == sorted(BY_ORIGIN)
    topics = {case.topic for case in cases}
    subjects = case_subjects(TOPICS, cases, topics)
    for case in cases:
        if case.topic in BY_ORIGIN:
            assert case.id in subjects, f"{case.id}: no subject in spec/topics.yaml"
            assert subjects[case.id] in topics - set(BY_ORIGIN), case.id
        else:
            assert case.id not in subjects


def test_every_topic_has_a_readable_title(cases):
    topics = sorted({case.topic for case in cases})
    titles = topic_titles(TOPICS, topics)
    assert sorted(titles) == topics, "give every topic a title in spec/topics.yaml"
    assert len(set(titles.values())) == len(titles), "two topics share a title"
    snake = [title for title in titles.values() if " " not in title and "_" in title]
    assert snake == [], "a title is a file name, not words"


def test_subject_page_lists_the_rules_found_by_testing(spec_site):
    hooks = topic_page(spec_site, "hooks", spec_site.topics["hooks"])
    assert hooks.startswith("Tensor and node hooks\n=")
    placed = spec_site.placed_under("hooks")
    assert "fuzz_findings.grad-input-sees-its-tensor-hooks" in {c.id for c in placed}
    for case in placed:
        assert f":spec:case:`{case.id}`" in hooks
    assert ":ref:`at the end of this page <hooks-found-by-testing>`" in hooks
    # A topic no rule found by testing is about has no such section.
    assert "found-by-testing" not in topic_page(spec_site, "clone", spec_site.topics["clone"])


def _spec(tmp_path, subjects: str):
    (tmp_path / "cases").mkdir()
    for topic in ("leaf", "hooks", "fuzz_findings"):
        (tmp_path / "cases" / f"{topic}.yaml").write_text("[]\n")
    path = tmp_path / "topics.yaml"
    path.write_text("groups: []\nsubjects:\n" + textwrap.indent(textwrap.dedent(subjects), "  "))
    return path


class _Case:
    def __init__(self, case_id: str) -> None:
        self.id = case_id
        self.topic = case_id.split(".", 1)[0]


KNOWN = {"leaf", "hooks", "fuzz_findings"}


@pytest.mark.parametrize(("placed", "refusal"), [
    ({"fuzz_findings.a": "hooks"}, "missing: fuzz_findings.b"),
    ({"fuzz_findings.a": "hook", "fuzz_findings.b": "leaf"}, "placed under 'hook'"),
    ({"fuzz_findings.a": "fuzz_findings", "fuzz_findings.b": "leaf"},
     "itself filed by origin"),
    ({"fuzz_findings.a": "hooks", "fuzz_findings.b": "leaf", "fuzz_findings.gone": "leaf"},
     "'fuzz_findings.gone', which is not a case"),
])
def test_a_missing_or_wrong_subject_is_refused(tmp_path, placed, refusal):
    cases = [_Case("fuzz_findings.a"), _Case("fuzz_findings.b")]
    path = tmp_path / "topics.yaml"
    path.write_text(yaml.safe_dump({"subjects": {"fuzz_findings": placed}}))
    with pytest.raises(GenerateError, match=refusal):
        case_subjects(path, cases, KNOWN)


def test_every_case_placed_under_a_topic_is_accepted(tmp_path):
    cases = [_Case("fuzz_findings.a"), _Case("fuzz_findings.b")]
    path = tmp_path / "topics.yaml"
    path.write_text("subjects:\n  fuzz_findings:\n    fuzz_findings.a: hooks\n"
                    "    fuzz_findings.b: leaf\n")
    assert case_subjects(path, cases, KNOWN) == {"fuzz_findings.a": "hooks",
                                                 "fuzz_findings.b": "leaf"}


def test_a_subset_of_the_spec_places_only_what_it_has(tmp_path):
    path = _spec(tmp_path, """\
        fuzz_findings:
          fuzz_findings.a: hooks
          fuzz_findings.b: leaf
        """)
    path.write_text("groups:\n  - {title: G, topics: [leaf, hooks, fuzz_findings]}\n"
                    + path.read_text().split("\n", 1)[1])
    # Without the origin's file nothing is placed; without a subject's page its case stays
    # on the origin's page only; a name no group knows is still refused.
    assert case_subjects(path, [_Case("leaf.x")], {"leaf"}) == {}
    cases = [_Case("fuzz_findings.a"), _Case("fuzz_findings.b")]
    assert case_subjects(path, cases, {"leaf", "fuzz_findings"}) == {"fuzz_findings.b": "leaf"}
    path.write_text(path.read_text().replace("fuzz_findings.a: hooks", "fuzz_findings.a: hook"))
    with pytest.raises(GenerateError, match="placed under 'hook'"):
        case_subjects(path, cases, {"leaf", "fuzz_findings"})


def test_a_topic_without_a_title_reads_as_words(tmp_path):
    path = tmp_path / "topics.yaml"
    path.write_text("titles:\n  leaf: Leaf tensors\n")
    assert topic_titles(path, ["leaf", "inplace_and_views"]) == {"leaf": "Leaf tensors"}
    assert plain_title("inplace_and_views") == "Inplace and views"
    path.write_text("titles:\n  leaf: ''\n")
    with pytest.raises(GenerateError, match="title of topic 'leaf'"):
        topic_titles(path, ["leaf"])


def test_built_pages_show_titles_and_subjects(page):
    hooks = page("hooks.html")
    assert "Tensor and node hooks" in hooks.text
    assert "Also on this subject: rules found by testing" in hooks.text
    assert any(href.endswith("fuzz_findings.html#fuzz_findings.grad-input-sees-its-tensor-hooks")
               for href in hooks.hrefs)
    home = page("index.html")
    assert "In-place operations and views" in home.text
    assert "inplace and views" not in home.text
    origin = page("fuzz_findings.html")
    assert "Subject: Tensor and node hooks" in origin.text
    assert "hooks.html" in origin.hrefs
