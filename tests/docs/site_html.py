"""Reading a built page: its ids, its links and its visible text (the standard library only)."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path


class Page(HTMLParser):
    """What the tests read from a built page: ids, links and the visible text."""

    def __init__(self, path: Path) -> None:
        super().__init__(convert_charrefs=True)
        self.path = path
        self.ids: set[str] = set()
        self.hrefs: list[str] = []
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self._text: list[str] = []
        self._skip = 0
        self.feed(path.read_text(encoding="utf-8"))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.elements.append((tag, found))
        for key in ("id", "name"):
            if found.get(key):
                self.ids.add(str(found[key]))
        for key in ("href", "src"):
            if found.get(key) and tag in ("a", "link", "script", "img"):
                self.hrefs.append(str(found[key]))
        if tag in ("script", "style"):
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self._text.append(data)

    @property
    def text(self) -> str:
        """The visible text, runs of whitespace collapsed."""
        return " ".join("".join(self._text).split())
