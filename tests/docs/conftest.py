"""The specification reference, built once per test session and shared by the docs tests.

Building runs the suite on every in-tree engine and Sphinx on every page, so it happens once:
under pytest-xdist the first worker builds into a folder all workers share (a file lock keeps
the others waiting) and every worker reads the same site.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import io
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from docs_support import Page, find_chromium, require

NEEDS = "sphinx, myst-parser and furo (the docs extra)"


@dataclass
class Built:
    html: Path
    status: int
    log: str


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # no POSIX locks: each worker builds its own copy
        yield
        return
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Built:
    """The reference built from the repository's spec, with the suite run on every engine."""
    require(("sphinx", "myst_parser", "furo"), f"building the reference needs {NEEDS}")
    from conformance.reference.cli import build_site

    base = tmp_path_factory.getbasetemp()
    # pytest-xdist workers get folders side by side under one parent.
    shared = base.parent if hasattr(request.config, "workerinput") else base
    folder = shared / "reference-site"
    with _locked(shared / "reference-site.lock"):
        done = folder / "build.json"
        if not done.exists():
            log = io.StringIO()
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                status = build_site(folder / "html")
            done.write_text(json.dumps({"status": status, "log": log.getvalue()}))
    record = json.loads(done.read_text())
    return Built(folder / "html", record["status"], record["log"])


@pytest.fixture(scope="session")
def page(site: Built):
    """`page("retain_grad.html")`: a parsed page of the built site (parsed once)."""
    parsed: dict[str, Page] = {}

    def get(name: str) -> Page:
        if name not in parsed:
            parsed[name] = Page(site.html / name)
        return parsed[name]

    return get


@pytest.fixture(scope="module")
def chromium() -> str:
    """The headless browser the browser tests drive."""
    return find_chromium()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """Requests are not test output."""


@pytest.fixture(scope="module")
def server(site: Built) -> Iterator[str]:
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
