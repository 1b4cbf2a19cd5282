"""The traceability table: each claim of the source documents and the cases that encode it.

`spec/claims.yaml` lists every claim of the five source documents (its id, exact quote and a
one-line paraphrase); this is the denominator of coverage. A case *covers* a claim when one of
its `sources` cites the same document and the two quotes overlap: after collapsing runs of
whitespace, one contains the other. Errata recorded on cases are matched to claims the same way.

    python -m conformance.traceability            # rewrite spec/TRACEABILITY.md
    python -m conformance.traceability --check    # exit 1 if it is stale or a claim has no case

`--check` also fails when a case cites words that match no claim (claims.yaml is then missing
a claim, so the coverage figures would be wrong).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from conformance.casefile.loader import DEFAULT_SPEC_DIR
from conformance.casefile.sources import collapse, load_sources

OUTPUT_NAME = "TRACEABILITY.md"


def overlaps(a: str, b: str) -> bool:
    """Whether one quote contains the other once whitespace is collapsed."""
    a, b = collapse(a), collapse(b)
    return a in b or b in a


@dataclass
class Claim:
    id: str
    doc: str
    quote: str
    says: str
    cases: list[str] = field(default_factory=list)


@dataclass
class Document:
    doc: str
    title: str
    claims: list[Claim]


@dataclass(frozen=True)
class Citation:
    """One `sources` or `errata` entry of a case."""

    case_id: str
    doc: str
    quote: str
    correction: str | None = None


@dataclass
class Trace:
    documents: list[Document]
    errata: list[tuple[Citation, list[str]]]
    orphans: list[Citation]
    case_count: int

    @property
    def uncovered(self) -> list[Claim]:
        return [c for d in self.documents for c in d.claims if not c.cases]


class TraceabilityError(ValueError):
    """claims.yaml or a case file cannot be read; the message names the file and the entry."""


def load_claims(path: Path) -> list[Document]:
    """Read `spec/claims.yaml` into documents and their claims."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise TraceabilityError(f"{path}: cannot read the claims: {exc}") from exc
    if not isinstance(data, Mapping) or not isinstance(data.get("documents"), list):
        raise TraceabilityError(f"{path}: expected a mapping with a 'documents' list")
    documents = []
    seen: set[str] = set()
    for index, entry in enumerate(data["documents"]):
        where = f"{path}: documents[{index}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("claims"), list):
            raise TraceabilityError(f"{where}: needs doc and a 'claims' list")
        claims = []
        for number, item in enumerate(entry["claims"]):
            missing = [k for k in ("id", "quote", "says") if not isinstance(item.get(k), str)]
            if missing:
                raise TraceabilityError(
                    f"{where}.claims[{number}]: missing or non-text {', '.join(missing)}")
            if item["id"] in seen:
                raise TraceabilityError(f"{where}: duplicate claim id {item['id']!r}")
            seen.add(item["id"])
            claims.append(Claim(item["id"], str(entry["doc"]), item["quote"], item["says"]))
        documents.append(Document(str(entry["doc"]), "", claims))
    return documents


def load_citations(case_files: Iterable[Path]) -> tuple[list[Citation], list[Citation], int]:
    """The `sources` and `errata` entries of every case, and the number of cases."""
    sources: list[Citation] = []
    errata: list[Citation] = []
    count = 0
    for path in case_files:
        try:
            cases = yaml.safe_load(path.read_text(encoding="utf-8")) or []
        except (OSError, yaml.YAMLError) as exc:
            raise TraceabilityError(f"{path}: cannot read the cases: {exc}") from exc
        if not isinstance(cases, list):
            raise TraceabilityError(f"{path}: a case file must be a list of cases")
        for case in cases:
            if not isinstance(case, Mapping) or not isinstance(case.get("id"), str):
                raise TraceabilityError(f"{path}: every case needs an id (run "
                                        "`python -m conformance lint` for details)")
            count += 1
            for item in case.get("sources") or []:
                sources.append(Citation(case["id"], str(item["doc"]), str(item["quote"])))
            for item in case.get("errata") or []:
                errata.append(Citation(case["id"], str(item["doc"]), str(item["quote"]),
                                       str(item["correction"])))
    return sources, errata, count


def trace(spec_dir: Path = DEFAULT_SPEC_DIR) -> Trace:
    """Match every case citation in `spec_dir/cases` against `spec_dir/claims.yaml`."""
    documents = load_claims(spec_dir / "claims.yaml")
    sources, problems = load_sources(spec_dir / "sources.yaml")
    if problems:
        raise TraceabilityError(f"{spec_dir / 'sources.yaml'}:{problems[0][0]}: {problems[0][1]}")
    for document in documents:
        if document.doc not in sources:
            raise TraceabilityError(f"{spec_dir / 'claims.yaml'}: document {document.doc!r} is "
                                    f"not in sources.yaml ({', '.join(sorted(sources))})")
        document.title = sources[document.doc].title
    citations, errata, count = load_citations(sorted((spec_dir / "cases").glob("*.yaml")))
    claims = [c for d in documents for c in d.claims]
    orphans = []
    for citation in citations:
        hits = [c for c in claims if c.doc == citation.doc and overlaps(c.quote, citation.quote)]
        for claim in hits:
            if citation.case_id not in claim.cases:
                claim.cases.append(citation.case_id)
        if not hits:
            orphans.append(citation)
    matched_errata = []
    for erratum in errata:
        ids = [c.id for c in claims if c.doc == erratum.doc and overlaps(c.quote, erratum.quote)]
        matched_errata.append((erratum, ids))
        if not ids:
            orphans.append(erratum)
    return Trace(documents, matched_errata, orphans, count)


def _cell(text: str) -> str:
    """Text for a Markdown table cell, shown literally (no emphasis, tags or code spans)."""
    text = collapse(text).replace("\\", "\\\\")
    text = re.sub(r"([`*_\[\]|#])", r"\\\1", text)
    return text.replace("<", "&lt;").replace(">", "&gt;")


def render(result: Trace) -> str:
    """The Markdown text of TRACEABILITY.md."""
    out = [
        "# Traceability",
        "",
        "Each claim of the source documents (`spec/claims.yaml`) and the cases that encode it "
        "(`spec/cases/`). A case covers a claim when it cites the same document with an "
        "overlapping quote. Generated by `python -m conformance.traceability`; do not edit.",
        "",
        "## Totals",
        "",
        "| document | claims | covered | cases citing it | errata |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    all_claims = covered = errata_total = 0
    all_cases: set[str] = set()
    for document in result.documents:
        cases = {case for claim in document.claims for case in claim.cases}
        n_covered = sum(1 for claim in document.claims if claim.cases)
        n_errata = sum(1 for erratum, _ in result.errata if erratum.doc == document.doc)
        out.append(f"| {document.doc} | {len(document.claims)} | {n_covered} | {len(cases)} | "
                   f"{n_errata} |")
        all_claims += len(document.claims)
        covered += n_covered
        errata_total += n_errata
        all_cases |= cases
    out.append(f"| **all** | {all_claims} | {covered} | {len(all_cases)} | {errata_total} |")
    out += ["", f"{result.case_count} cases in all; {len(all_cases)} of them cite a claim.", ""]
    for document in result.documents:
        out += [f"## {document.doc}: {_cell(document.title)}", "",
                "| claim | quote | says | cases |", "| --- | --- | --- | --- |"]
        for claim in document.claims:
            cases = ", ".join(f"`{case}`" for case in claim.cases) or "**none**"
            out.append(f"| {claim.id} | {_cell(claim.quote)} | {_cell(claim.says)} | {cases} |")
        errata = [(e, ids) for e, ids in result.errata if e.doc == document.doc]
        if errata:
            out += ["", f"### Errata in {document.doc}", "",
                    "| claims | case | quote | correction |", "| --- | --- | --- | --- |"]
            for erratum, ids in errata:
                out.append(f"| {', '.join(ids)} | `{erratum.case_id}` | {_cell(erratum.quote)} "
                           f"| {_cell(erratum.correction or '')} |")
        out.append("")
    return "\n".join(out)


def problems(result: Trace, written: str | None, expected: str) -> list[str]:
    """What `--check` reports: uncovered claims, citations of no claim, a stale file."""
    found = [f"claim {c.id} ({c.doc}) has no case: {collapse(c.quote)[:80]!r}"
             for c in result.uncovered]
    found += [f"case {o.case_id} cites {o.doc} with words that match no claim in "
              f"claims.yaml: {collapse(o.quote)[:80]!r}" for o in result.orphans]
    if written != expected:
        found.append(f"{OUTPUT_NAME} is out of date: run `python -m conformance.traceability`")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.traceability",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=DEFAULT_SPEC_DIR,
                        help="folder with claims.yaml, cases/ and TRACEABILITY.md")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the table is stale or a claim has no case")
    args = parser.parse_args(argv)
    try:
        result = trace(args.spec)
    except TraceabilityError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = render(result)
    target = args.spec / OUTPUT_NAME
    if args.check:
        written = target.read_text(encoding="utf-8") if target.exists() else None
        found = problems(result, written, text)
        for line in found:
            print(line, file=sys.stderr)
        return 1 if found else 0
    target.write_text(text, encoding="utf-8")
    claims = sum(len(d.claims) for d in result.documents)
    print(f"wrote {target}: {claims} claims, {claims - len(result.uncovered)} covered, "
          f"{result.case_count} cases")
    for line in problems(result, text, text):
        print(line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
