"""Write the reference's page sources (reStructuredText, Markdown, conf.py) from the spec data.

Everything comes from the spec folder (cases, sources, claims, features, the case language),
from the engines' verdicts (`results`) and, when given, a folder of open fuzz findings; nothing
on a page is copied by hand. The one page not made from data, the adapter guide, is the
Markdown file `docs/adapters.md` that sits beside the spec folder (`<spec>/../docs/`, in a
checkout the repository's `docs/`).

    >>> site = collect(DEFAULT_SPEC_DIR, results=[])        # doctest: +SKIP
    >>> write_sources(site, Path("build/reference-src"))    # doctest: +SKIP

Pages: `index` (home, topics grouped by `spec/topics.yaml`), `messages` (every error and
warning, `conformance.reference.messages`), `comparisons` (`spec/comparisons.yaml`), one per
topic (`retain_grad`: each case a section whose anchor is its id, with its fix, related cases and
drawings of the graphs it checks), `sources/index` and one per document, `errata`,
`engines/index` (the topic by engine matrix) and one per engine, `features`, `case-language`
(spec/INTERPRETING.md), `adapters`, `fuzzing`. `_static/spec-index.js` and `spec-search.js` make
each case and message a search result of its own.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from conformance.casefile.case import Case
from conformance.casefile.comparisons import Comparison
from conformance.casefile.messages import expected_texts
from conformance.casefile.sources import SourceDocument
from conformance.reference import graphs, rst
from conformance.reference.messages import build_index, messages_page
from conformance.reference.results import EngineResults, engine_facts, first_line
from conformance.reference.sections import (
    byline,
    case_section,
    counts_text,
    doc_link,
    engine_link,
    engine_page,
    toctree,
    verdict_badge,
)
from conformance.reference.session import render_case
from conformance.reference.site import (
    EXAMPLE_CASE,
    LACKS,
    ORACLE,
    SHORT_ORACLE,
    GenerateError,
    Site,
    blocks_rst,
    collect,
    load_cases,
    summary,
    topic_groups,
)

__all__ = ["GenerateError", "Site", "collect", "load_cases", "topic_groups", "write_sources"]
from conformance.run.executor import VERDICTS
from conformance.traceability import Claim

# -- writing -------------------------------------------------------------------------------------


def write_sources(site: Site, folder: Path) -> list[str]:
    """Write conf.py, the stylesheet and every page into `folder`; returns the page names."""
    folder = Path(folder)
    pages: dict[str, str] = {"index.rst": home(site), "errata.rst": errata_page(site),
                             "features.rst": features_page(site),
                             "fuzzing.rst": fuzzing_page(site),
                             "case-language.md": site.interpreting,
                             "sources/index.rst": sources_index(site),
                             "engines/index.rst": engines_index(site)}
    if site.comparisons:
        pages["comparisons.rst"] = comparisons_page(site)
    pages["messages.rst"] = messages_page(site.messages or build_index(site.cases, None),
                                          ORACLE, SHORT_ORACLE)
    pages["adapters.md" if site.guide is not None else "adapters.rst"] = \
        site.guide if site.guide is not None else missing_guide()
    for topic, cases in site.topics.items():
        pages[f"{topic}.rst"] = topic_page(site, topic, cases)
    for doc in site.sources.values():
        pages[f"sources/{doc.id}.rst"] = source_page(site, doc)
    for results in site.results:
        pages[f"{engine_page(results.name)}.rst"] = engine_results_page(site, results)
    for name in pages:
        # A page's name is made from data (a topic, a document's id): it must name a file
        # inside the folder, whatever that data holds.
        if ".." in Path(name).parts or not (folder / name).resolve().is_relative_to(
                folder.resolve()):
            raise GenerateError(f"the page {name!r} would be written outside {folder}; "
                                "rename what it is made from")
    _clear(folder)
    (folder / "_static").mkdir(parents=True, exist_ok=True)
    (folder / "conf.py").write_text(CONF, encoding="utf-8")
    (folder / "_static" / "reference.css").write_text(CSS + graphs.CSS, encoding="utf-8")
    (folder / "_static" / SEARCH_SCRIPT).write_text(
        resources.files("conformance.reference").joinpath("static", SEARCH_SCRIPT)
        .read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "_static" / "spec-index.js").write_text(search_index(site), encoding="utf-8")
    for name, text in pages.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return sorted(pages)


CONF_MARK = "# Generated by `python -m conformance docs`; the pages beside it are generated too."
CONF = CONF_MARK + '''
project = "autograd-conformance"
html_title = "autograd-conformance reference"
extensions = ["myst_parser", "conformance.reference.sphinx_ext"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
language = "en"
html_theme = "furo"
html_static_path = ["_static"]
html_css_files = ["reference.css"]
html_js_files = ["spec-search.js"]
# Quotes must stay exactly as the documents wrote them: no curly quotes or dashes.
smartquotes = False
html_copy_source = False
html_show_sourcelink = False
html_show_sphinx = False
html_show_copyright = False
highlight_language = "none"
myst_heading_anchors = 3
'''

CSS = """\
.verdict { font-weight: 600; font-size: 0.85em; padding: 0.05em 0.4em; border-radius: 0.25em;
  white-space: nowrap; }
.verdict-passed { color: #1a7f37; background: rgba(46, 160, 67, 0.14); }
.verdict-failed, .verdict-error { color: #cf222e; background: rgba(248, 81, 73, 0.15); }
.verdict-xfail { color: #9a6700; background: rgba(212, 167, 44, 0.18); }
.verdict-unsupported, .verdict-not-run { color: #6e7781; background: rgba(110, 119, 129, 0.15); }
.verdict-stale { color: #8250df; background: rgba(130, 80, 223, 0.15); }
.spec-claim, .erratum { border-left: 3px solid var(--color-background-border, #ddd);
  padding-left: 0.9em; margin: 1.2em 0; }
.spec-claim-id { margin-bottom: 0.3em; }
.case-rule { font-size: 1.05em; }
.case-meta { font-size: 0.85em; color: var(--color-foreground-secondary, #555); }
.engine-line { margin: 0.2em 0; }
table.matrix td:first-child { white-space: nowrap; }
table.comparison td { vertical-align: top; font-size: 0.92em; }
.spec-claim-id code { font-weight: 600; }
section.spec-case { margin-top: 2.5em; }
section.spec-message { margin-top: 2em; }
details.case-sources, details.engine-reasons { margin: 0.4em 0 0.8em; font-size: 0.92em; }
details.case-sources > summary, details.engine-reasons > summary { cursor: pointer;
  color: var(--color-foreground-secondary, #555); }
/* An error's useful part is often its end ("... is at version 1; expected version 0"): long
   lines of examples and messages wrap instead of hiding it behind a scroll bar. */
.highlight-pycon pre, .highlight-none pre { white-space: pre-wrap; overflow-wrap: anywhere; }
#spec-results ol { padding-left: 1.4em; }
.spec-result { margin-bottom: 0.9em; }
.spec-result-kind { font-size: 0.85em; color: var(--color-foreground-secondary, #555); }
.spec-result-snippet { margin: 0.2em 0 0; font-size: 0.9em; overflow-wrap: anywhere; }
.spec-result-snippet mark { background: rgba(255, 200, 0, 0.35); color: inherit; }
"""


SEARCH_SCRIPT = "spec-search.js"
EXAMPLE_LIMIT = 4000
"""Characters of a case's example the search index keeps (enough for any real case)."""


def search_index(site: Site) -> str:
    """`_static/spec-index.js`: every case and every message as a search result of its own.

    Keys are short because the file is loaded by every search: `k` kind, `u` link, `i` case
    id, `t` title (the rule), `m` messages, `x` further text (the example, the causes). It is a
    script assigning a global, so a site opened from file:// can load it.
    """
    entries: list[dict[str, Any]] = []
    for topic, cases in site.topics.items():
        for case in cases:
            messages = [m for text in expected_texts([case])
                        for m in (text.message, *(older for _, older in text.older))]
            entries.append({"k": "case", "u": f"{topic}.html#{case.id}", "i": case.id,
                            "t": case.rule, "m": messages,
                            "x": render_case(case).text[:EXAMPLE_LIMIT]
                            + (f"\n{case.fix.text}" if case.fix else "")})
    index = site.messages or build_index(site.cases, None)
    for group in index.groups:
        entries.append({"k": "message", "u": f"messages.html#{group.anchor}", "t": group.title,
                        "m": [group.text, *group.exact_texts, *(m for _, m in group.older)],
                        "x": "\n".join([c.rule for c in group.cases]
                                       + [c.fix.text for c in group.cases if c.fix])})
    return "window.SPEC_INDEX = " + json.dumps(entries, ensure_ascii=True) + ";\n"


def _clear(folder: Path) -> None:
    """Remove the pages of an earlier generation, so a topic that is gone leaves no page.

    Only a folder this module wrote (its conf.py starts with CONF_MARK) is cleared; any other
    non-empty folder is refused rather than touched.
    """
    if not folder.exists() or not any(folder.iterdir()):
        return
    conf = folder / "conf.py"
    if not conf.is_file() or not conf.read_text(encoding="utf-8").startswith(CONF_MARK):
        raise GenerateError(f"{folder} is not empty and was not written by "
                            "`python -m conformance docs`: choose an empty folder")
    for path in [*folder.rglob("*.rst"), *folder.rglob("*.md")]:
        path.unlink()


# -- home ----------------------------------------------------------------------------------------


def home(site: Site) -> str:
    total_claims = sum(len(d.claims) for d in site.trace.documents)
    example = site.case_by_id.get(EXAMPLE_CASE) or next(iter(site.topics.values()))[0]
    out = [
        rst.heading("The autograd specification reference", "="),
        f"What ``is_leaf``, ``requires_grad``, ``grad_fn``, ``.grad``, ``retain_grad``, "
        f"``detach``, ``no_grad`` and ``autograd.grad`` do in PyTorch, and why your code "
        f"raised: {len(site.cases)} rules, each a short PyTorch program checked on "
        f"{ORACLE}, with the exact errors and warnings PyTorch prints.",
        "",
        "**An error or a warning on your screen?** :doc:`/messages` lists every message the "
        "cases meet, each with its causes and what to do; paste it into the search box to land "
        "on the cases that show it.",
        "",
    ]
    if site.comparisons:
        out += ["**Which one do I need?** :doc:`/comparisons` puts side by side what users "
                "confuse: " + "; ".join(f":ref:`{rst.text(t.title)} <comparison-{t.id}>`"
                                       for t in site.comparisons) + ".", ""]
    out += [
        rst.heading("What do you want to know?", "-"),
    ]
    for title, question, topics in site.groups:
        out.append(rst.heading(rst.text(title), "~"))
        if question:
            out.append(f"*{rst.text(question)}*\n")
        for topic in topics:
            said = summary(site.intros.get(topic, []))
            count = len(site.topics[topic])
            out.append(f"- :doc:`{rst.text(site.title(topic))} </{topic}>` ({count} case"
                       f"{'s' if count != 1 else ''})" + (f": {rst.text(said)}" if said else ""))
        out.append("")
    out += [
        rst.heading("How to read a rule", "-"),
        "Each topic page lists its cases. A case is a section headed by its **id**, which is "
        f"also its link: {rst.code(f'{example.topic}.html#{example.id}')} opens "
        f":spec:case:`{example.id}`. Under the id:",
        "",
        "- **the rule** in one sentence: what PyTorch does;",
        "- **the example**, as a PyTorch session: statements after ``>>>``, then each checked "
        "expression and the value it must print. An error is shown as its traceback, a "
        "warning as ``UserWarning: ...``; messages are PyTorch's exact text. A tensor is "
        "printed with the values, dtype and device the case checks (flags such as "
        "``requires_grad`` are checked on lines of their own); ``print(graph(y))`` is the "
        "case language's picture of the backward graph behind ``y``: each node, then in "
        "brackets the nodes of its ``next_functions`` (``None`` for an input that needs no "
        "gradient). See :doc:`/case-language` for every helper. Checked expressions are "
        "read with warnings silenced, as the runner reads them: in a live session, reading "
        "``.grad`` of a non-leaf would also print its ``UserWarning``;",
        "- **what to do** when the case shows an error or a trap, and the related cases;",
        "- the **features** the case needs beyond the core (see :doc:`/features`);",
        "- the **engines**: the verdict of each engine on the case, one line, with the "
        "reasons on demand;",
        "- the **sources**: the exact words of the documents the case encodes, and the "
        f"**errata**, what a document says that {SHORT_ORACLE} does not do (both folded).",
        "",
        "Search (the box in the sidebar) finds a case by its id, by any word of its rule, or "
        "by a message pasted whole.",
        "",
        rst.heading("For engine authors and PyTorch developers", "-"),
        f"**The oracle is {ORACLE}.** Where a source document and {SHORT_ORACLE} disagree, the "
        f"case follows PyTorch and records the document's words as an erratum "
        f"(:doc:`all errata </errata>`).",
        "",
        "The engines on these pages: ``torch`` (PyTorch itself), ``refimpl`` (the project's "
        "reference engine on NumPy, which obeys every case and is fuzzed against PyTorch) and "
        "third-party engines run through adapters. *xfail* marks a case an engine is known to "
        "fail, with the reason from its expectations file; a reason that starts with ``BUG:`` "
        "names a root cause verified on the engine's newest release, with a standalone repro "
        "in the engine's report (``reports/engines/<engine>.md``), ``ADAPTER:`` a gap of this "
        "project's adapter, and the others say what the engine does differently (API, wording "
        "or convention). *unsupported* marks a case that needs a feature the engine lacks, or "
        "hardware (a CUDA GPU) the machine that built these pages did not have.",
        "",
        "The suite is the Python package ``autograd-conformance``: its repository's README "
        "installs it in one command, runs these cases on any engine "
        "(``python -m conformance run --engine NAME``) and builds these pages "
        "(``python -m conformance docs``); :doc:`/adapters` shows how to check an engine of "
        "your own.",
        "",
        f"- :doc:`/sources/index`: the {len(site.sources)} source documents, each of their "
        f"{total_claims} claims and the cases that check it.",
        f"- :doc:`/errata`: the {len(site.trace.errata)} places where a document is wrong or "
        f"dated for {SHORT_ORACLE}.",
        "- :doc:`/engines/index`: the verdicts of "
        + (", ".join(f":doc:`{rst.text(r.name)} </engines/{r.name}>`" for r in site.results)
           or "no engine") + ", topic by topic, with the reasons for known failures.",
        "- :doc:`/features`: the optional capabilities a case may need.",
        "- :doc:`/case-language`: the contract between the case files, the runner and the "
        "engine adapters.",
        "- :doc:`/adapters`: how to check your own engine.",
        "- :doc:`/fuzzing`: the rules the differential fuzzer found.",
        "",
        toctree(["messages", *(["comparisons"] if site.comparisons else [])],
                 "Messages and comparisons"),
    ]
    for title, _, topics in site.groups:
        out.append(toctree(topics, title))
    out += [
        toctree(["sources/index", "errata", "engines/index"], "Sources and results"),
        toctree(["case-language", "features", "adapters", "fuzzing"], "Using the suite"),
    ]
    return "\n".join(out)


def comparisons_page(site: Site) -> str:
    out = [rst.heading("Comparisons", "="),
           "What users confuse, side by side. Each cell says what PyTorch does and links the "
           "cases that show it; the cases run on every engine, so each table is as checked "
           "as they are.", ""]
    for table in site.comparisons:
        out.append(f".. _comparison-{table.id}:\n")
        out.append(rst.heading(rst.text(table.title), "-"))
        out.append(rst.text(table.intro) + "\n")
        rows = []
        for row in table.rows:
            cells = [f"**{rst.text(row.aspect)}**"]
            for cell in row.cells:
                links = ", ".join(f":spec:case:`{c}`" for c in cell.cases)
                cells.append(rst.text(cell.text) + (f" ({links})" if links else ""))
            rows.append(cells)
        columns = [rst.text(c) for c in table.columns]
        width = 76 // len(columns)
        out.append(rst.table(["", *columns], rows, [24, *([width] * len(columns))],
                             classes="comparison"))
    return "\n".join(out)


def _comparisons_of(site: Site, cases: Sequence[Case]) -> list[Comparison]:
    ids = {case.id for case in cases}
    return [t for t in site.comparisons if ids & set(t.cases)]


# -- topics --------------------------------------------------------------------------------------


def topic_page(site: Site, topic: str, cases: Sequence[Case]) -> str:
    out = [rst.heading(rst.text(site.title(topic)), "=")]
    out.append(blocks_rst(site.intros.get(topic, [])))
    ids = [case.id for case in cases]
    found_by_testing = site.placed_under(topic)
    if found_by_testing:
        out.append(f"**Also on this subject:** {len(found_by_testing)} rule"
                   f"{'s' if len(found_by_testing) != 1 else ''} that mutation testing and "
                   f"fuzzing found, listed :ref:`at the end of this page <{topic}-found-by-"
                   "testing>`.\n")
    compared = _comparisons_of(site, cases)
    if compared:
        out.append("**Compared side by side:** " + "; ".join(
            f":ref:`{rst.text(t.title)} <comparison-{t.id}>`" for t in compared) + ".\n")
    out.append(f"{len(cases)} case{'s' if len(cases) != 1 else ''}, from "
               f"{rst.code(f'cases/{topic}.yaml')}. Examples are PyTorch sessions; helpers such as "
               f"``graph()`` are those of the :doc:`/case-language`.")
    out.append("")
    if site.results:
        out.append(rst.table(["engine", "verdicts on this topic"], [
            [f":doc:`{rst.text(r.name)} </engines/{r.name}>`", counts_text(r.counts(ids))]
            for r in site.results], [20, 80]))
    for case in cases:
        out.append(case_section(site, case))
    if found_by_testing:
        out.append(found_by_testing_section(site, topic, found_by_testing))
    return "\n".join(out)


def found_by_testing_section(site: Site, topic: str, cases: Sequence[Case]) -> str:
    """The rules filed by origin (`mutation_pins`, `fuzz_findings`) whose subject is `topic`:
    each its rule and a link to the case on its own page (ids stay where they are filed)."""
    out = [f".. _{topic}-found-by-testing:\n",
           rst.heading("Also on this subject: rules found by testing", "-"),
           "These cases are filed by how they were found, on the pages "
           + " and ".join(f":doc:`{rst.text(site.title(t))} </{t}>`"
                          for t in dict.fromkeys(c.topic for c in cases))
           + ", and their subject is this page's. Each link opens the case with its example.\n"]
    for case in cases:
        out.append(f"- :spec:case:`{case.id}`: {rst.text(case.rule)}")
    return "\n".join(out) + "\n"


# -- sources -------------------------------------------------------------------------------------


def sources_index(site: Site) -> str:
    out = [rst.heading("Source documents", "="),
           "The cases encode the claims of these documents, secondary sources written for "
           "PyTorch users. Every claim (a rule, a printed example, a quoted error) is listed on "
           "its document's page with the cases that check it; a case *covers* a claim when it "
           "cites the same document with an overlapping quote.",
           ""]
    rows = []
    cited: set[str] = set()
    for document in site.trace.documents:
        doc = site.sources[document.doc]
        cases = {c for claim in document.claims for c in claim.cases}
        cited |= cases
        covered = sum(1 for claim in document.claims if claim.cases)
        errata = sum(1 for erratum, _ in site.trace.errata if erratum.doc == document.doc)
        rows.append([doc_link(doc), rst.text(doc.kind), str(len(document.claims)),
                     str(covered), str(len(cases)), str(errata)])
    out.append(rst.table(["document", "kind", "claims", "covered", "cases citing it", "errata"],
                         rows, [50, 10, 10, 10, 10, 10]))
    out.append(f"{site.trace.case_count} cases in all; {len(cited)} of them cite a claim.\n")
    out.append(toctree([f"{doc.id}" for doc in site.sources.values()]))
    return "\n".join(out)


def source_page(site: Site, doc: SourceDocument) -> str:
    document = next((d for d in site.trace.documents if d.doc == doc.id), None)
    claims = document.claims if document is not None else []
    out = [rst.heading(rst.text(doc.title), "=")]
    facts = [["id", rst.code(doc.id)],
             ["author", rst.text(doc.author)], ["site", rst.text(doc.site)],
             ["kind", rst.text(doc.kind)], ["reflects", rst.text(doc.reflects)]]
    out.append(rst.table(["", ""], facts, [15, 85]).replace(":header-rows: 1", ":header-rows: 0"))
    if doc.notes:
        out += [rst.text(doc.notes), ""]
    if doc.pytorch_docs:
        out.append(rst.heading("Passages quoting PyTorch's documentation", "-"))
        for passage in doc.pytorch_docs:
            out.append(f"- {rst.quoted(passage.quote)} — from {rst.text(passage.origin)}")
        out.append("")
    covered = sum(1 for claim in claims if claim.cases)
    errata = [(e, ids) for e, ids in site.trace.errata if e.doc == doc.id]
    out.append(rst.heading("Claims", "-"))
    out.append(f"{len(claims)} claims, {covered} covered by a case; {len(errata)} errata. "
               f"Each claim: the document's words, what {SHORT_ORACLE} does, the cases that "
               f"check it.\n")
    for claim in claims:
        out.append(claim_block(claim, errata))
    return "\n".join(out)


def claim_block(claim: Claim, errata: Sequence[tuple]) -> str:
    body = [f"{rst.quoted(claim.quote)}\n", f"**In {SHORT_ORACLE}:** {rst.text(claim.says)}\n"]
    if claim.cases:
        body.append("**Checked by:** " + ", ".join(f":spec:case:`{c}`" for c in claim.cases)
                    + "\n")
    else:
        body.append("**Checked by:** no case yet.\n")
    for erratum, ids in errata:
        if claim.id in ids:
            body.append(f"**Erratum** (:spec:case:`{erratum.case_id}`): "
                        f"{rst.text(erratum.correction or '')}\n")
    return f".. spec:claim:: {claim.id}\n\n" + rst.indent("\n".join(body)) + "\n"


# -- errata --------------------------------------------------------------------------------------


def errata_page(site: Site) -> str:
    out = [rst.heading("Errata", "="),
           f"Where a source document is wrong or dated for {SHORT_ORACLE}, the case asserts "
           f"what PyTorch does and records the document's words here. "
           f"{len(site.trace.errata)} errata in "
           f"{len({e.case_id for e, _ in site.trace.errata})} cases.",
           ""]
    by_doc: dict[str, list] = defaultdict(list)
    for erratum, ids in site.trace.errata:
        by_doc[erratum.doc].append((erratum, ids))
    for doc_id, entries in by_doc.items():
        doc = site.sources.get(doc_id)
        title = rst.text(doc.title) if doc is not None else rst.text(doc_id)
        out.append(rst.heading(title, "-"))
        if doc is not None:
            out.append(f"{rst.text(byline(doc).capitalize())}; {rst.text(doc.site)}. "
                       f":doc:`The document's page </sources/{doc.id}>`.\n")
        for erratum, ids in entries:
            claims = ", ".join(f":spec:claim:`{i}`" for i in ids)
            out.append(
                f".. container:: erratum\n\n"
                f"   Case :spec:case:`{erratum.case_id}`"
                + (f"; claim {claims}" if claims else "") + "\n\n"
                f"   **The document says** {rst.quoted(erratum.quote)}\n\n"
                f"   **{SHORT_ORACLE} does:** {rst.text(erratum.correction or '')}\n")
    return "\n".join(out)


# -- engines -------------------------------------------------------------------------------------


def engines_index(site: Site) -> str:
    out = [rst.heading("Engines", "="),
           "Every engine in this build, run on every case, each at the level it is held to "
           "(full: every check; semantics: message wording and reprs left out). Verdicts: "
           ":spec:verdict:`passed`; :spec:verdict:`failed` (an expectation did not hold); "
           ":spec:verdict:`error` (the case crashed the runner); :spec:verdict:`unsupported` "
           "(the engine lacks a feature the case needs, or cannot run here); "
           ":spec:verdict:`xfail` (a known failure, listed with its reason in the engine's "
           "expectations file); :spec:verdict:`stale` (listed as a known failure, but it "
           "passed).",
           ""]
    if not site.results:
        out.append("This build was given no results.\n")
        return "\n".join(out)
    origins = sorted({r.origin for r in site.results})
    out.append("Results from " + rst.text("; ".join(origins)) + ".\n")
    rows = []
    for results in site.results:
        counts = results.counts()
        name = engine_link(results.name)
        version = rst.text(results.version if results.available else
                           f"unavailable: {results.unavailable_reason}")
        rows.append([name, version, rst.text(results.level),
                     *(str(counts[v]) for v in VERDICTS)])
    out.append(rst.table(["engine", "version", "level", *VERDICTS], rows))
    out.append(rst.heading("Topic by engine", "-"))
    matrix = []
    for topic, cases in site.topics.items():
        ids = [case.id for case in cases]
        matrix.append([f":doc:`{rst.text(topic)} </{topic}>`", str(len(cases)),
                       *(counts_text(r.counts(ids)) for r in site.results)])
    matrix.append(["**all**", str(len(site.cases)),
                   *(counts_text(r.counts(c.id for c in site.cases)) for r in site.results)])
    out.append(rst.table(["topic", "cases", *(rst.text(r.name) for r in site.results)], matrix,
                         classes="matrix"))
    out.append(toctree([engine_page(r.name).removeprefix("engines/") for r in site.results]))
    return "\n".join(out)


def engine_results_page(site: Site, results: EngineResults) -> str:
    out = [rst.heading(rst.text(results.name), "=")]
    facts = [[rst.text(k), rst.text(v)] for k, v in engine_facts(results).items()]
    out.append(rst.table(["", ""], facts, [25, 75]).replace(":header-rows: 1",
                                                           ":header-rows: 0"))
    out.append("**All cases:** " + counts_text(results.counts()) + "\n")
    out.append(rst.heading("By topic", "-"))
    rows = [[f":doc:`{rst.text(topic)} </{topic}>`",
             counts_text(results.counts(case.id for case in cases))]
            for topic, cases in site.topics.items()]
    out.append(rst.table(["topic", "verdicts"], rows, [25, 75]))
    case_ids = [case.id for case in site.cases]
    by_verdict: dict[str, list[str]] = defaultdict(list)
    for case_id in case_ids:
        found = results.verdicts.get(case_id)
        by_verdict[found.verdict if found else "not run"].append(case_id)
    bad = by_verdict.get("failed", []) + by_verdict.get("error", [])
    if bad:
        out.append(rst.heading("Failures", "-"))
        for case_id in bad:
            found = results.verdicts[case_id]
            step = f" (step {rst.text(found.step)})" if found.step is not None else ""
            out.append(f"- :spec:case:`{case_id}` {verdict_badge(found.verdict)}{step}\n")
            out.append(rst.indent(rst.literal(found.message or "(no message)"), 2))
    for verdict, title, explain in (
            ("xfail", "Known failures (xfail)",
             "Listed in the engine's expectations file, grouped by the reason it gives."),
            ("stale", "Stale expectations",
             "Listed as known failures, but they passed: the entries should go."),
            ("unsupported", "Unsupported",
             "Not run: the engine lacks a feature the case needs, or cannot run here.")):
        ids = by_verdict.get(verdict, [])
        if not ids:
            continue
        out.append(rst.heading(title, "-"))
        out.append(f"{len(ids)} cases. {explain}\n")
        groups: dict[str, list[str]] = defaultdict(list)
        for case_id in ids:
            found = results.verdicts[case_id]
            groups[found.reason or first_line(found.message) or "no reason given"].append(
                case_id)
        for reason, members in groups.items():
            out.append(f"- {rst.text(reason)}: "
                       + ", ".join(f":spec:case:`{c}`" for c in members) + "\n")
    return "\n".join(out)


# -- features, fuzzing, adapters -------------------------------------------------------------------


def features_page(site: Site) -> str:
    out = [rst.heading("Features", "="), blocks_rst(site.features_intro),
           "An adapter declares the features its engine has; :doc:`/adapters` lists them and "
           "says which to leave out for an engine without part of PyTorch's autograd API.\n"]
    needing: dict[str, list[str]] = defaultdict(list)
    for case in site.cases:
        for feature in case.features:
            needing[feature].append(case.id)
    for name, description in site.features.items():
        body = [rst.text(description) + "\n"]
        members = needing.get(name, [])
        lacking = [r.name for r in site.results if name in _lacked_features(r)]
        if lacking:
            body.append("Engines without it: " + ", ".join(
                engine_link(n) for n in lacking) + ".\n")
        if members:
            body.append(f"Needed by {len(members)} case{'s' if len(members) != 1 else ''}: "
                        + ", ".join(f":spec:case:`{c}`" for c in members) + "\n")
        else:
            body.append("No case needs it yet.\n")
        out.append(f".. spec:feature:: {name}\n\n" + rst.indent("\n".join(body)) + "\n")
    return "\n".join(out)


def _lacked_features(results: EngineResults) -> set[str]:
    """The features the runner found missing on the engine (from its `unsupported` verdicts)."""
    lacked: set[str] = set()
    for verdict in results.verdicts.values():
        if verdict.verdict == "unsupported" and verdict.message.startswith(LACKS):
            lacked.update(n.strip() for n in verdict.message[len(LACKS):].split(","))
    return lacked


def fuzzing_page(site: Site) -> str:
    found = site.topics.get("fuzz_findings", [])
    out = [
        rst.heading("Fuzzing", "="),
        "The differential fuzzer looks for the rules nobody wrote down. Hypothesis draws "
        "random autograd programs in the case language (leaves, broadcasting ops, views, "
        "in-place ops, grad modes, backward and autograd.grad, modules), runs each on two "
        "engines and compares every observation after every step: values within dtype-aware "
        "tolerances, flags, graphs, errors and warnings.",
        "",
        "A mismatch is shrunk, reduced statement by statement to what it needs, and written as "
        "a ready case (``fuzz_<hash>.yaml``, expectations from the reference engine) plus a "
        "standalone repro script. Once the engine is fixed, the case joins the specification "
        "with a rule and its sources.",
        "",
        rst.literal("python -m conformance fuzz --engines torch,refimpl --profile ci\n"
                    "python -m conformance fuzz --engines torch,refimpl --examples 5000 "
                    "--seed 1", "console"),
        rst.heading("Findings in the specification", "-"),
        f"{len(found)} rules found by fuzzing refimpl against {SHORT_ORACLE}, each on the "
        f":doc:`fuzz_findings </fuzz_findings>` page." if found else
        "No fuzz finding has joined the specification yet.",
        "",
    ]
    if found:
        out.append(rst.table(["case", "rule"], [[f":spec:case:`{c.id}`", rst.text(c.rule)]
                                                for c in found], [40, 60]))
    out.append(rst.heading("Open findings", "-"))
    if site.open_findings is None:
        out.append("Mismatches found but not fixed yet are kept with the project's tests "
                   "(``tests/fuzz/open_findings/``); this build was not given that folder.\n")
    elif not site.open_findings:
        out.append("None: every mismatch the fuzzer has found so far is fixed and its case is "
                   "in the specification.\n")
    else:
        out.append(f"{len(site.open_findings)} mismatches found and not fixed yet; each case "
                   f"holds on PyTorch and fails on the engine named in its id.\n")
        for case in site.open_findings:
            out.append(case_section(site, case))
    return "\n".join(out)


def missing_guide() -> str:
    return "\n".join([
        rst.heading("Writing an adapter", "="),
        "The adapter guide is ``docs/adapters.md`` in the project's source; this build found no "
        "copy of it beside the spec folder. The adapter interface itself is documented in the "
        "module ``conformance.engines.base``.",
        ""])

