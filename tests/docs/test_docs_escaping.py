"""Text from case files is shown literally: markup in a rule, quote or title is never markup.

A small spec whose every free-text field carries reStructuredText, Markdown and HTML markup is
built into a site; the pages must show the characters, build without warnings, and contain no
element the text asked for.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import textwrap
from pathlib import Path

import pytest
import yaml
from docs_support import Page, require

from conformance.casefile.loader import DEFAULT_SPEC_DIR
from conformance.reference.results import EngineResults, Verdict

HOSTILE = ("*em* **strong** `interpreted` ``literal`` |sub| _target `link <http://x.invalid>`_ "
           "[1]_ :ref:`x` {sub}`y` <script>alert(1)</script> <b>bold</b> & &amp; \\ 1. "
           "- item .. raw:: html $x$ end_ trailing::")


def _write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")


@pytest.fixture(scope="module")
def hostile_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(("sphinx", "myst_parser", "furo"), "building the reference needs the docs extra")
    from conformance.reference.cli import sphinx_build
    from conformance.reference.generate import collect, write_sources

    root = tmp_path_factory.mktemp("hostile")
    spec = root / "spec"
    (spec / "cases").mkdir(parents=True)
    for name in ("features.yaml", "api.yaml", "case.schema.json", "INTERPRETING.md"):
        shutil.copy(DEFAULT_SPEC_DIR / name, spec / name)
    _write(spec / "sources.yaml", {"documents": [{
        "id": "hostile-doc", "title": HOSTILE, "author": HOSTILE, "site": HOSTILE,
        "kind": "blog", "reflects": HOSTILE, "file": "hostile.txt", "notes": HOSTILE,
        "pytorch_docs": [{"quote": f"quoted {HOSTILE}", "from": HOSTILE}]}]})
    _write(spec / "claims.yaml", {"documents": [{"doc": "hostile-doc", "claims": [
        {"id": "hostile.1", "quote": f"quoted {HOSTILE}", "says": HOSTILE}]}]})
    case = {
        "id": "hostile.markup-is-text", "rule": HOSTILE,
        "sources": [{"doc": "hostile-doc", "quote": f"quoted {HOSTILE}"}],
        "errata": [{"doc": "hostile-doc", "quote": f"quoted {HOSTILE}",
                    "correction": HOSTILE}],
        "features": ["autograd_state", "node_introspection"],
        "steps": [
            {"run": "x = torch.ones(2, requires_grad=True)\ny = x * 2",
             "expect": {"grad_fn_name(y)": "MulBackward0"}},
            {"run": "y.requires_grad = False",
             "raises": {"type": "RuntimeError", "message": HOSTILE}},
        ],
    }
    header = "\n".join(["# " + line for line in textwrap.wrap(HOSTILE, 60)]) + "\n"
    (spec / "cases" / "hostile.yaml").write_text(
        header + yaml.safe_dump([case], sort_keys=False, allow_unicode=True), encoding="utf-8")
    results = EngineResults("torch", origin=HOSTILE, verdicts={
        "hostile.markup-is-text": Verdict("xfail", HOSTILE, HOSTILE)})
    site = collect(spec, results=[results])
    write_sources(site, root / "source")
    log = io.StringIO()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        status = sphinx_build(root / "source", root / "html", root / "doctrees")
    assert status == 0, log.getvalue()
    return root / "html"


def _plain(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("name", ["hostile.html", "errata.html", "sources/hostile-doc.html",
                                  "engines/torch.html", "index.html", "sources/index.html"])
def test_markup_in_the_spec_is_shown_as_text(hostile_site, name):
    page = Page(hostile_site / name)
    assert _plain(HOSTILE) in page.text
    html = (hostile_site / name).read_text(encoding="utf-8")
    assert "alert(1)</script>" not in html
    assert "<b>bold</b>" not in html
    assert "<em>em</em>" not in html and "<strong>strong</strong>" not in html
    assert "x.invalid" not in "".join(page.hrefs)


def test_every_field_of_the_case_is_literal(hostile_site):
    text = Page(hostile_site / "hostile.html").text
    # rule, source quote, erratum quote and correction, the error message, the topic's header
    assert text.count(_plain(HOSTILE)) >= 5
    assert f"RuntimeError: {_plain(HOSTILE)}" in text


def test_a_missing_adapter_guide_is_a_page_that_says_where_it_is(hostile_site):
    assert "docs/adapters.md" in Page(hostile_site / "adapters.html").text
