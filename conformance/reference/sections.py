"""reStructuredText blocks the pages share: a case's section (its rule, example, graph
drawings, fix and related cases, engine verdicts, folded sources), citations, counts and
tables of contents."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from conformance.casefile.case import Case
from conformance.casefile.sources import SourceDocument, collapse
from conformance.reference import graphs, rst
from conformance.reference.results import describe
from conformance.reference.session import render_case
from conformance.reference.site import SHORT_ORACLE, SHOWN_VERDICTS, GenerateError, Site
from conformance.run.labels import LabelError, engine_name


def toctree(entries: Iterable[str], caption: str | None = None, hidden: bool = True,
             maxdepth: int = 1) -> str:
    out = [".. toctree::", f"   :maxdepth: {maxdepth}"]
    if caption:
        out.append(f"   :caption: {caption}")
    if hidden:
        out.append("   :hidden:")
    out.append("")
    out += [f"   {entry}" for entry in entries]
    return "\n".join(out) + "\n"


def counts_text(counts: Mapping[str, int]) -> str:
    """A `:spec:verdict:` badge for each non-zero count: `11 passed`, `2 xfail`."""
    parts = [verdict_badge(verdict, int(counts[verdict])) for verdict in SHOWN_VERDICTS
             if counts.get(verdict)]
    return " ".join(parts) if parts else "none run"


BADGES = (*SHOWN_VERDICTS, "not run")


def verdict_badge(verdict: str, count: int | None = None) -> str:
    """`:spec:verdict:` for one of `BADGES`, with a count when given. A role's text cannot be
    escaped, so any other verdict (read from a report nobody checked) is shown as plain text."""
    if verdict not in BADGES:
        return rst.text(verdict if count is None else f"{count} {verdict}")
    shown = verdict.replace(" ", "-")
    return f":spec:verdict:`{shown if count is None else f'{count} {shown}'}`"


def engine_page(name: str) -> str:
    """The page of the engine `name` (`engines/torch`). The name is a file name and a link
    target, so it must be a valid engine name (`conformance.run.labels.NAME`)."""
    try:
        name = engine_name(name, "an engine of the reference")
    except LabelError as exc:
        raise GenerateError(str(exc)) from None
    if name == "index":
        raise GenerateError("an engine named 'index' would replace the engines' index page; "
                            "give the engine another name")
    return f"engines/{name}"


def engine_link(name: str) -> str:
    """A link to the engine's page, titled by its name."""
    return f":doc:`{rst.text(name)} </{engine_page(name)}>`"


def byline(doc: SourceDocument) -> str:
    author = collapse(doc.author)
    return f"author {author}" if author.lower().startswith("not stated") else f"by {author}"


def doc_link(doc: SourceDocument) -> str:
    return f":doc:`{rst.text(doc.title)} </sources/{doc.id}>`"


def case_section(site: Site, case: Case) -> str:
    body = [f".. rst-class:: case-rule\n\n{rst.text(case.rule)}\n"]
    if case.features:
        body.append("**Needs:** " + ", ".join(f":spec:feature:`{f}`" for f in case.features)
                    + "\n")
    rendered = render_case(case)
    body.append(rst.literal(rendered.text, "pycon"))
    body += _graph_figures(case)
    for kind, versions, message in rendered.older_messages:
        body.append(f"PyTorch {rst.text(versions)} words the {rst.text(kind)}: "
                    f"{rst.quoted(message)}\n")
    body += _what_to_do(site, case)
    subject = site.subjects.get(case.id)
    if subject is not None:
        body.append(f"**Subject:** :doc:`{rst.text(site.title(subject))} </{subject}>` "
                    "(the case is listed on that page too).\n")
    meta = [rst.code(_case_file(site, case))]
    if case.seed:
        meta.append(f"random data from seed {case.seed}")
    body.append(".. rst-class:: case-meta\n\n" + rst.text("defined in") + " "
                + ", ".join(meta) + "\n")
    if site.results:
        body.append(_engine_lines(site, case))
    if case.sources or case.errata:
        summary = f"Sources ({len(case.sources)})" + (
            f" and errata ({len(case.errata)})" if case.errata else "")
        body.append(_details_open(summary, "case-sources"))
        for source in case.sources:
            body.append("- " + _citation(site, source.doc, source.quote))
        body.append("")
        for erratum in case.errata:
            body.append(_erratum_text(site, erratum.doc, erratum.quote, erratum.correction))
        body.append(DETAILS_CLOSE)
    return f".. spec:case:: {case.id}\n\n" + rst.indent("\n".join(body)) + "\n"


DETAILS_CLOSE = ".. raw:: html\n\n   </details>\n"
_GRAPH_KEY = re.compile(r"^graph\((.+)\)$")
GRAPH_LEGEND = ("the output's node at the top, each node's inputs (next_functions) below it; "
                "blue: AccumulateGrad, a leaf that gets .grad; dashed: an input that needs no "
                "gradient")


def _graph_figures(case: Case) -> list[str]:
    """A diagram for each backward graph the case checks (`graph(t)` with a node name)."""
    out = []
    for index, step in enumerate(case.steps):
        for key, expected in step.expect:
            found = _GRAPH_KEY.match(key)
            if not found or not isinstance(expected, str):
                continue
            caption = f"{key}" + (f" after step {index + 1}" if len(case.steps) > 1 else "")
            try:
                picture = graphs.svg(expected, caption)
            except ValueError:
                continue  # not a graph text (the case expects an error text or None)
            out.append(".. raw:: html\n\n   <figure class=\"autograd-graph-figure\">"
                       f"{picture}<figcaption>{html.escape(caption)}: "
                       f"{GRAPH_LEGEND}</figcaption></figure>\n")
    return out


def _details_open(summary: str, css_class: str) -> str:
    """An HTML <details> around the reStructuredText that follows (closed by DETAILS_CLOSE).
    The summary is made here from counts and fixed words, never from case text."""
    assert re.fullmatch(r"[A-Za-z0-9 ()]+", summary), summary
    return f".. raw:: html\n\n   <details class=\"{css_class}\"><summary>{summary}</summary>\n"


def _engine_lines(site: Site, case: Case) -> str:
    """One line with every engine's verdict; the reasons folded under it."""
    verdicts = []
    reasons = []
    for results in site.results:
        verdict, why = describe(results, case.id)
        link = engine_link(results.name)
        verdicts.append(f"{link} {verdict_badge(verdict)}")
        if why:
            reasons.append(f"- {link}: {rst.text(why)}")
    out = [".. rst-class:: engine-line\n", "**Engines:** " + " · ".join(verdicts) + "\n"]
    if reasons:
        out += [_details_open(f"Why ({len(reasons)})", "engine-reasons"), *reasons, "",
                DETAILS_CLOSE]
    return "\n".join(out)


def _what_to_do(site: Site, case: Case) -> list[str]:
    """The case's fix, its place in the messages index and its related cases (both ways)."""
    out = []
    if case.fix is not None:
        line = f"**What to do:** {rst.text(case.fix.text)}"
        if case.fix.cases:
            line += " Shown in " + ", ".join(f":spec:case:`{c}`" for c in case.fix.cases) + "."
        out.append(line + "\n")
    groups = site.messages.group_of(case.id) if site.messages is not None else []
    if groups:
        links = ", ".join(f":spec:message:`the {g.kind} <{g.anchor}>`" for g in groups)
        out.append(f"**In the messages index:** {links}, with its other causes and fixes.\n")
    related = list(dict.fromkeys([*case.see_also, *site.referenced_by.get(case.id, [])]))
    if related:
        out.append("**See also:** " + ", ".join(f":spec:case:`{c}`" for c in related) + "\n")
    return out


def _case_file(site: Site, case: Case) -> str:
    name = Path(case.file).name if case.file else f"{case.topic}.yaml"
    folder = "cases" if case in site.topics.get(case.topic, []) else "open findings"
    return f"{folder}/{name}:{case.line}" if case.line else f"{folder}/{name}"


def _citation(site: Site, doc_id: str, quote: str) -> str:
    doc = site.sources.get(doc_id)
    if doc is None:
        return f"{rst.quoted(quote)} ({rst.text(doc_id)})"
    text = f"{rst.quoted(quote)} — {doc_link(doc)}, {rst.text(byline(doc))}."
    origin = doc.docs_origin(quote)
    if origin:
        text += f" *The document is quoting PyTorch's documentation:* {rst.text(origin)}."
    return text


def _erratum_text(site: Site, doc_id: str, quote: str, correction: str) -> str:
    doc = site.sources.get(doc_id)
    where = doc_link(doc) if doc is not None else rst.text(doc_id)
    return (f".. container:: erratum\n\n"
            f"   **The document says** {rst.quoted(quote)} ({where})\n\n"
            f"   **{SHORT_ORACLE} does:** {rst.text(correction)}\n")
