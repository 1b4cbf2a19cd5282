"""Helpers of the docs tests: reading a built page, and what a test needs installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--virtual-time-budget=15000")


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


def require(modules: tuple[str, ...], why: str) -> None:
    """Skip when a module is missing, except under CI (`$CI` set), where it must be there."""
    missing = []
    for name in modules:
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if not missing:
        return
    message = f"{', '.join(missing)} not installed: {why}"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI must install it)")
    pytest.skip(message)


def find_chromium() -> str:
    """Debian's chromium; skips without it, except under CI (`$CI` set), which installs it."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    message = "chromium is not installed (Debian: apt-get install chromium)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI must install it")
    pytest.skip(message)


def chromium_run(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    """One headless chromium run (`--dump-dom URL`, `--screenshot=...`) with its own profile."""
    return subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120, check=False)
