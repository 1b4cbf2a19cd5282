"""The built reference in a real headless browser: search finds a rule, pages render.

Chromium (Debian's `chromium` package) loads the site from a local HTTP server, runs Sphinx's
search JavaScript and dumps the resulting DOM. Without chromium the tests skip, except under CI
(`$CI` set), which installs it.
"""

from __future__ import annotations

from docs_support import chromium_run as _chromium

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


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
