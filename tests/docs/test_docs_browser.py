"""The built reference in a real headless browser: search finds a rule, pages render.

Chromium (Debian's `chromium` package) loads the site from a local HTTP server, runs Sphinx's
search JavaScript and dumps the resulting DOM. Without chromium the tests skip, except under CI
(`$CI` set), which installs it.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--virtual-time-budget=15000")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def chromium() -> str:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    message = "chromium is not installed (Debian: apt-get install chromium)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI must install it")
    pytest.skip(message)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """Requests are not test output."""


@pytest.fixture(scope="module")
def server(site) -> Iterator[str]:
    """The built site served on 127.0.0.1 from a thread; yields its base URL."""
    assert site.status == 0, site.log
    handler = functools.partial(_QuietHandler, directory=str(site.html))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def _chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([binary, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_search_finds_the_rule_by_its_id(chromium, server, tmp_path):
    case_id = "retain_grad.nonleaf-keeps-grad"
    done = _chromium(chromium, tmp_path / "profile", "--dump-dom",
                     f"{server}/search.html?q={case_id}")
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    assert "search-summary" in dom, dom[-2000:]
    assert f'href="retain_grad.html#{case_id}"' in dom, dom[-4000:]


def test_search_finds_rules_by_a_word(chromium, server, tmp_path):
    # A word of case ids finds the cases themselves; any other word finds the topic pages
    # (Sphinx indexes the full text by page).
    done = _chromium(chromium, tmp_path / "profile", "--dump-dom",
                     f"{server}/search.html?q=nonleaf")
    assert done.returncode == 0, done.stderr[-2000:]
    assert 'href="retain_grad.html#retain_grad.nonleaf-keeps-grad"' in done.stdout
    done = _chromium(chromium, tmp_path / "profile", "--dump-dom",
                     f"{server}/search.html?q=retains_grad")
    assert done.returncode == 0, done.stderr[-2000:]
    assert '<a href="retain_grad.html' in done.stdout


def test_screenshot_of_a_topic_page(chromium, server, tmp_path):
    shot = tmp_path / "retain_grad.png"
    done = _chromium(chromium, tmp_path / "profile", "--hide-scrollbars",
                     "--window-size=1280,1600", f"--screenshot={shot}",
                     f"{server}/retain_grad.html")
    assert done.returncode == 0, done.stderr[-2000:]
    data = shot.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000
