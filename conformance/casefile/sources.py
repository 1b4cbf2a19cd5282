"""The source documents the cases cite (`spec/sources.yaml`), and checking quotes against them.

A case cites a document by its short id (`doc: forum-is-leaf`) and quotes its words. Nothing at
run time needs the documents' texts; `python -m conformance lint --sources DIR` checks every quote
against the plain-text copies in DIR, found by each document's `file` name.

    >>> docs, problems = load_sources(Path("spec/sources.yaml"))   # doctest: +SKIP
    >>> docs["forum-is-leaf"].title                                   # doctest: +SKIP
    '[PyTorch Forums thread on is_leaf: ...]'
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from conformance.casefile.case import line_of
from conformance.casefile.files import read_yaml

KINDS = ("blog", "forum", "article", "docstring", "docs")
_FIELDS = ("id", "title", "author", "site", "kind", "reflects", "file", "object", "url", "notes",
           "pytorch_docs")
_REQUIRED = ("id", "title", "author", "site", "kind", "reflects")
# What each kind needs past the common fields: a docstring names its object; a page of PyTorch's
# documentation (kind `docs`, such as the autograd notes) its address and the text file its quotes
# were checked against; the other kinds that file.
_KIND_FIELDS = {"docstring": ("object",), "docs": ("file", "url")}
_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


@dataclass(frozen=True)
class DocsQuote:
    """A passage of a document that quotes PyTorch's own documentation."""

    quote: str
    origin: str


@dataclass(frozen=True)
class SourceDocument:
    id: str
    title: str
    author: str
    site: str
    kind: str
    reflects: str
    file: str = ""
    """The plain-text copy the quotes are checked against (documents other than docstrings)."""
    url: str = ""
    """For kind `docs`: the address of the PyTorch documentation page the text was taken from."""
    object: str = ""
    """For kind `docstring`: the dotted name of the PyTorch object whose docstring is the text
    (`torch.autograd.Function.save_for_backward`)."""
    notes: str = ""
    pytorch_docs: tuple[DocsQuote, ...] = field(default_factory=tuple)

    def docs_origin(self, quote: str) -> str | None:
        """Which PyTorch documentation page `quote` comes from, if it lies in a quoted passage."""
        quote = collapse(quote)
        for passage in self.pytorch_docs:
            if quote in collapse(passage.quote):
                return passage.origin
        return None


def collapse(text: str) -> str:
    """The text with every run of whitespace replaced by one space, stripped."""
    return " ".join(text.split())


def load_sources(path: Path) -> tuple[dict[str, SourceDocument], list[tuple[int, str]]]:
    """Read `sources.yaml`; returns the documents by id and `(line, message)` problems."""

    data, problems = read_yaml(path)
    if data is None and not problems:
        problems.append((1, "empty file: expected 'documents:' with a list of documents"))
    if data is None:
        return {}, problems
    entries = data.get("documents") if isinstance(data, Mapping) else None
    if not isinstance(entries, list):
        return {}, problems + [(line_of(data) or 1, "expected 'documents:' with a list")]
    documents: dict[str, SourceDocument] = {}
    for entry in entries:
        line = line_of(entry) or line_of(entries) or 1
        if not isinstance(entry, Mapping):
            problems.append((line, "each document is a mapping (id, title, author, ...)"))
            continue
        unknown = sorted(set(map(str, entry)) - set(_FIELDS))
        required = (*_REQUIRED, *_KIND_FIELDS.get(entry.get("kind"), ("file",)))
        missing = [key for key in required if not isinstance(entry.get(key), str)
                   or not entry.get(key).strip()]
        if unknown:
            problems.append((line, f"unknown field(s) {', '.join(unknown)}; "
                                   f"allowed: {', '.join(_FIELDS)}"))
        if missing:
            problems.append((line, f"missing or empty text field(s): {', '.join(missing)}"))
            continue
        if not _ID.match(entry["id"]):
            problems.append((line, f"id {entry['id']!r} must be lower-case words joined by '-'"))
        if entry["kind"] not in KINDS:
            problems.append((line, f"kind {entry['kind']!r} must be one of {', '.join(KINDS)}"))
        if entry["id"] in documents:
            problems.append((line, f"duplicate document id {entry['id']!r}"))
        quotes = []
        for item in entry.get("pytorch_docs") or []:
            if not (isinstance(item, Mapping) and isinstance(item.get("quote"), str)
                    and isinstance(item.get("from"), str)):
                problems.append((line_of(item) or line,
                                 "pytorch_docs entries need 'quote' and 'from' texts"))
                continue
            quotes.append(DocsQuote(item["quote"], item["from"]))
        documents[entry["id"]] = SourceDocument(
            id=entry["id"], title=entry["title"], author=entry["author"], site=entry["site"],
            kind=entry["kind"], reflects=entry["reflects"], file=str(entry.get("file") or ""),
            object=str(entry.get("object") or ""), url=str(entry.get("url") or ""),
            notes=str(entry.get("notes") or ""), pytorch_docs=tuple(quotes))
    return documents, problems


def read_texts(documents: Mapping[str, SourceDocument], folder: Path | None,
               docstrings: bool = False) -> tuple[dict[str, str], list[str]]:
    """The whitespace-collapsed text of each document: from `folder` (files), and with
    `docstrings` from the installed PyTorch (kind `docstring`); and what could not be read."""
    texts: dict[str, str] = {}
    missing: list[str] = []
    for doc in documents.values():
        if doc.kind == "docstring":
            if docstrings:
                text, problem = docstring(doc.object)
                if text is None:
                    missing.append(f"{doc.id}: {problem}")
                else:
                    texts[doc.id] = collapse(text)
            continue
        if folder is None:
            continue
        path = folder / doc.file
        try:
            texts[doc.id] = collapse(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            missing.append(f"{doc.id}: cannot read {path}: {exc}")
    return texts, missing


def docstring(dotted: str) -> tuple[str | None, str]:
    """The docstring of an object of the installed PyTorch (`torch.autograd.Function`)."""
    import importlib
    import inspect

    parts = dotted.split(".")
    if parts[0] != "torch":
        return None, f"{dotted!r} is not a torch object"
    try:
        obj = importlib.import_module("torch")
    except ImportError as exc:
        return None, f"cannot import torch to read {dotted}'s docstring: {exc}"
    for index, part in enumerate(parts[1:], 1):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            try:
                obj = importlib.import_module(".".join(parts[:index + 1]))
            except ImportError:
                return None, f"torch has no {'.'.join(parts[:index + 1])}"
    text = inspect.getdoc(obj)
    return (text, "") if text else (None, f"{dotted} has no docstring")
