"""The `spec` Sphinx domain: cases, claims and features with their ids as HTML anchors.

A case's anchor is its id exactly (`retain_grad.html#retain_grad.nonleaf-keeps-grad`), not
docutils' normalised form (`retain-grad-nonleaf-keeps-grad`), so a link written from the id
alone works. Every object also enters Sphinx's search index under its id.

    .. spec:case:: retain_grad.nonleaf-keeps-grad

       The case's body (any reStructuredText).

    .. spec:claim:: autodiff000.1

       The claim's body.

    .. spec:message:: message-engine.element-does-not-require-grad
       :title: element … of tensors does not require grad and does not have a grad_fn

       The message's causes and fixes.

    :spec:case:`retain_grad.nonleaf-keeps-grad`   a link; an unknown id is a build warning
    :spec:verdict:`xfail`                         a verdict, styled by its class
    :spec:verdict:`7 xfail`                       a count of verdicts
"""

from __future__ import annotations

from collections.abc import Iterator, Set
from typing import Any

from docutils import nodes
from docutils.parsers.rst.directives import unchanged_required
from sphinx.addnodes import pending_xref
from sphinx.application import Sphinx
from sphinx.builders import Builder
from sphinx.domains import Domain, ObjType
from sphinx.environment import BuildEnvironment
from sphinx.roles import XRefRole
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import make_refnode

FEATURE_PREFIX = "feature-"
# Verdict names as the topic-by-engine matrix prints them beside a count.
SHORT = {"passed": "passed", "failed": "failed", "unsupported": "unsup.", "not-run": "not run"}


class _Object(SphinxDirective):
    """An object of the domain: its id is the HTML anchor, its body is parsed content."""

    required_arguments = 1
    has_content = True
    objtype = ""

    def anchor(self, name: str) -> str:
        return name

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        anchor = self.anchor(name)
        node = self.make_node(name)
        node["ids"].append(anchor)
        self.state.document.set_id(node)
        self.state.nested_parse(self.content, self.content_offset, node)
        domain = self.env.get_domain("spec")
        assert isinstance(domain, SpecDomain)
        domain.note(self.objtype, name, self.env.docname, anchor, self.get_location())
        return [node]

    def make_node(self, name: str) -> nodes.Element:
        raise NotImplementedError


class CaseDirective(_Object):
    """A case: a section titled by its id, so it is listed in the page's contents."""

    objtype = "case"

    def make_node(self, name: str) -> nodes.Element:
        section = nodes.section(classes=["spec-case"])
        section += nodes.title(name, "", nodes.literal(name, name))
        return section


class FeatureDirective(_Object):
    objtype = "feature"

    def anchor(self, name: str) -> str:
        return FEATURE_PREFIX + name

    def make_node(self, name: str) -> nodes.Element:
        section = nodes.section(classes=["spec-feature"])
        section += nodes.title(name, "", nodes.literal(name, name))
        return section


class MessageDirective(_Object):
    """An error or warning of the messages index: a section titled by the message's text (the
    `:title:` option), anchored by a stable id, so search results and links can reach it."""

    objtype = "message"
    option_spec = {"title": unchanged_required}

    def make_node(self, name: str) -> nodes.Element:
        title = self.options.get("title", name)
        section = nodes.section(classes=["spec-message"])
        section += nodes.title(title, title)
        return section


class ClaimDirective(_Object):
    """A claim: a block headed by its id (hundreds per page, so not sections)."""

    objtype = "claim"

    def make_node(self, name: str) -> nodes.Element:
        block = nodes.container(classes=["spec-claim"])
        heading = nodes.paragraph(classes=["spec-claim-id"])
        heading += nodes.literal(name, name)
        block += heading
        return block


def verdict_role(name: str, rawtext: str, text: str, lineno: int, inliner: Any,
                 options: dict[str, Any] | None = None, content: list[str] | None = None
                 ) -> tuple[list[nodes.Node], list[nodes.system_message]]:
    """`:spec:verdict:`xfail`` or, with a count, `:spec:verdict:`7 xfail``."""
    count, _, verdict = text.rpartition(" ") if " " in text else ("", "", text)
    shown = verdict.replace("-", " ")
    if count:
        shown = f"{count} {SHORT.get(verdict, shown)}"
    return [nodes.inline(rawtext, shown, classes=["verdict", f"verdict-{verdict}"])], []


class SpecDomain(Domain):
    name = "spec"
    label = "Specification"
    object_types = {
        "case": ObjType("case", "case"),
        "claim": ObjType("claim", "claim"),
        "feature": ObjType("feature", "feature"),
        "message": ObjType("message", "message"),
    }
    directives = {"case": CaseDirective, "claim": ClaimDirective, "feature": FeatureDirective,
                  "message": MessageDirective}
    roles = {
        "case": XRefRole(innernodeclass=nodes.literal, warn_dangling=True),
        "claim": XRefRole(innernodeclass=nodes.literal, warn_dangling=True),
        "feature": XRefRole(innernodeclass=nodes.literal, warn_dangling=True),
        "message": XRefRole(warn_dangling=True),
        "verdict": verdict_role,
    }
    initial_data: dict[str, Any] = {"objects": {}}
    dangling_warnings = {
        "case": "no case with id %(target)s",
        "claim": "no claim with id %(target)s",
        "feature": "no feature named %(target)s",
        "message": "no message with id %(target)s",
    }

    @property
    def objects(self) -> dict[tuple[str, str], tuple[str, str]]:
        return self.data.setdefault("objects", {})

    def note(self, objtype: str, name: str, docname: str, anchor: str, location: Any) -> None:
        if (objtype, name) in self.objects:
            other = self.objects[(objtype, name)][0]
            from sphinx.util import logging

            logging.getLogger(__name__).warning(
                "duplicate %s %s (also in %s)", objtype, name, other, location=location)
        self.objects[(objtype, name)] = (docname, anchor)

    def clear_doc(self, docname: str) -> None:
        for key, (doc, _) in list(self.objects.items()):
            if doc == docname:
                del self.objects[key]

    def merge_domaindata(self, docnames: Set[str], otherdata: dict[str, Any]) -> None:
        for key, value in otherdata["objects"].items():
            if value[0] in docnames:
                self.objects[key] = value

    def get_objects(self) -> Iterator[tuple[str, str, str, str, str, int]]:
        # Priority 0 puts a case first when a search names it; claims and features follow.
        for (objtype, name), (docname, anchor) in self.objects.items():
            yield name, name, objtype, docname, anchor, 0 if objtype == "case" else 1

    def resolve_xref(self, env: BuildEnvironment, fromdocname: str, builder: Builder, typ: str,
                     target: str, node: pending_xref, contnode: nodes.Element
                     ) -> nodes.reference | None:
        found = self.objects.get((typ, target))
        if found is None:
            return None
        return make_refnode(builder, fromdocname, found[0], found[1], contnode, target)

    def resolve_any_xref(self, env: BuildEnvironment, fromdocname: str, builder: Builder,
                         target: str, node: pending_xref, contnode: nodes.Element
                         ) -> list[tuple[str, nodes.reference]]:
        found = []
        for objtype in self.object_types:
            ref = self.resolve_xref(env, fromdocname, builder, objtype, target, node, contnode)
            if ref is not None:
                found.append((f"spec:{objtype}", ref))
        return found


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_domain(SpecDomain)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
