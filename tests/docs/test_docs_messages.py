"""The messages index, the links between cases, and search that lands on a case.

A PyTorch user arrives with an error on the screen. These tests hold the reference to what that
user needs: every message a case expects is on `messages.html` with its causes (linked cases) and
fixes; a case's fix and related cases show on both ends; and the search page, in a real headless
browser, puts a section holding the pasted message among its first three results, for every
message of the index.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import quote

import pytest
from docs_support import chromium_run as _chromium

from conformance.casefile.loader import DEFAULT_SPEC_DIR, load
from conformance.casefile.messages import expected_texts, read_inventory
from conformance.reference.messages import _chosen_by_the_case, build_index


def _collapse(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def cases():
    return load([DEFAULT_SPEC_DIR / "cases"]).cases


@pytest.fixture(scope="module")
def soup(site):
    bs4 = pytest.importorskip("bs4", reason="beautifulsoup4 (installed with furo) reads pages")
    parsed: dict[str, object] = {}

    def get(name: str):
        if name not in parsed:
            parsed[name] = bs4.BeautifulSoup((site.html / name).read_text(encoding="utf-8"),
                                             "html.parser")
        return parsed[name]

    return get


def _section_text(soup, url: str) -> str:
    name, _, anchor = url.partition("#")
    found = soup(name).find(id=anchor)
    assert found is not None, f"{url}: no element with that id"
    return _collapse(found.get_text(" "))


def test_every_expected_message_is_on_the_messages_page(soup, cases):
    text = _collapse(soup("messages.html").get_text(" "))
    for expected in expected_texts(cases):
        if re.search(r"[A-Za-z]{3}", expected.message) and not _chosen_by_the_case(expected):
            assert _collapse(expected.message) in text, (expected.case.id, expected.message)


def test_the_index_holds_pytorchs_messages_under_titles_that_tell_them_apart(cases):
    # A message the case itself spells out (disable_saved_tensors_hooks("hooks are off
    # here")) is the program's, not PyTorch's: a reader would take it for an error PyTorch
    # has. Messages that begin alike (the three version-counter errors) get titles that show
    # where they differ, so the contents and the search results tell them apart.
    index = build_index(cases, read_inventory(DEFAULT_SPEC_DIR)[0])
    titles = [group.title for group in index.groups]
    assert not {"inner", "too late", "hooks are off here"} & set(titles)
    assert any(_chosen_by_the_case(t) for t in expected_texts(cases)), \
        "no case spells out its own message: this test checks nothing"
    assert len(titles) == len(set(titles)), sorted(t for t in titles if titles.count(t) > 1)
    version = [t for t in titles if t.startswith("one of the variables needed")]
    assert len(version) >= 3 and any("which is output" in t for t in version)


def test_each_message_lists_the_cases_that_cause_it(soup, cases):
    page = soup("messages.html")
    element_zero = "element 0 of tensors does not require grad and does not have a grad_fn"
    sections = [s for s in page.select("section.spec-message")
                if element_zero in _collapse(s.get_text(" "))]
    assert len(sections) == 1, "the element 0 error is one section, whatever its index"
    section = sections[0]
    causes = {a["href"].partition("#")[2] for a in section.select("a[href]")}
    expecting = {e.case.id for e in expected_texts(cases) if element_zero in e.message}
    assert len(expecting) >= 5 and expecting <= causes
    text = _collapse(section.get_text(" "))
    assert "What to do" in text and "loss.requires_grad = True" in text


def test_fix_and_related_cases_show_on_both_ends(soup, cases):
    by_id = {case.id: case for case in cases}
    hidden = by_id["graph_lifetime.hidden-state-across-iterations-fails"]
    assert hidden.fix is not None
    text = _section_text(soup, f"graph_lifetime.html#{hidden.id}")
    assert "What to do:" in text and _collapse(hidden.fix.text) in text
    assert "graph_lifetime.detached-hidden-state-trains" in text
    # The case a fix points to names the case that points to it.
    target = _section_text(soup, "backward.html#backward.retain-graph-allows-second-call")
    assert "See also:" in target and hidden.id in target
    # A case with an error links to its section of the messages index.
    section = soup("graph_lifetime.html").find(id=hidden.id)
    assert any(a["href"].startswith("messages.html#message-") for a in section.select("a[href]"))


def test_the_home_page_leads_to_the_messages(soup):
    home = soup("index.html")
    assert home.find("a", href="messages.html") is not None
    assert "An error or a warning on your screen?" in _collapse(home.get_text(" "))


def test_the_inventory_and_its_coverage_are_shown(soup, cases):
    inventory, problems = read_inventory(DEFAULT_SPEC_DIR)
    assert inventory is not None and problems == []
    text = _collapse(soup("messages.html").get_text(" "))
    match = re.search(r"(\d+) messages; (\d+) a user of the API this spec covers can meet, of "
                      r"which (\d+) \(\d+%\) are shown by a case", text)
    assert match, text[-3000:]
    assert int(match.group(1)) == len(inventory.messages)
    assert int(match.group(2)) == sum(1 for e in inventory.messages if e.scope == "in")


def _messages_of_the_index(soup) -> list[str]:
    """The exact texts the messages page shows: each section's literal block for a message of
    its own, and the listed texts for a message of the inventory."""
    found = []
    for section in soup("messages.html").select("section.spec-message"):
        listed = section.select(".exact-messages li")
        if listed:
            found += [_collapse(li.get_text(" ")).strip("“”") for li in listed]
        else:
            found.append(_collapse(section.select_one("pre").get_text()))
    return list(dict.fromkeys(found))


HARNESS = """<!DOCTYPE html><html data-content_root="./"><head><meta charset="utf-8">
<script src="_static/spec-index.js"></script><script src="_static/spec-search.js"></script>
</head><body><pre id="out">running</pre><script>
var queries = QUERIES;
var out = queries.map(function (q) { return window.specSearch(q).slice(0, 3).map(
  function (r) { return r.url; }); });
document.getElementById("out").textContent = JSON.stringify(out);
</script></body></html>
"""


def test_search_puts_each_message_among_the_first_three_results(chromium, server, site, soup,
                                                                 tmp_path):
    messages = _messages_of_the_index(soup)
    assert len(messages) > 100
    queries = json.dumps(messages, ensure_ascii=True).replace("</", "<\\/")
    harness = site.html / "search-harness-messages.html"
    harness.write_text(HARNESS.replace("QUERIES", queries), encoding="utf-8")
    done = _chromium(chromium, tmp_path / "profile", "--dump-dom",
                     f"{server}/{harness.name}")
    assert done.returncode == 0, done.stderr[-2000:]
    bs4 = pytest.importorskip("bs4")
    out = bs4.BeautifulSoup(done.stdout, "html.parser").find(id="out").get_text()
    results = json.loads(out)
    assert len(results) == len(messages)
    missed = []
    for message, urls in zip(messages, results, strict=True):
        if not any(message in _section_text(soup, url) for url in urls):
            missed.append(f"{message[:80]!r} -> {urls}")
    assert missed == [], "\n".join(missed)


def test_questions_in_a_users_words_find_their_rules(chromium, server, site, tmp_path):
    # From a newcomer's test of the site: a word no entry holds ("vs") emptied the results,
    # "inplace" (PyTorch's messages, users) did not match "in-place" (the rules), and a
    # pasted issue title with no entry holding half its words found nothing at all.
    questions = {
        "inference_mode vs no_grad": "inference_mode.html",
        "difference between detach and no_grad": None,
        "inplace operation on a leaf": "variable_type_utils.leaf-inplace",
        "in place operation on a leaf": "variable_type_utils.leaf-inplace",
        "Inplace operation changes is_leaf attribute": None,
        # From a PyTorch user's pass over the site: every message holding "tensor" and
        # "leaf" outranked the rules (a message's bonus is for a pasted message now), and the
        # rules say "is_leaf" (an API name counts as its parts now).
        "when is a tensor a leaf": "leaf.html#leaf.",
    }
    queries = json.dumps(list(questions), ensure_ascii=True).replace("</", "<\\/")
    harness = site.html / "search-harness-questions.html"
    harness.write_text(HARNESS.replace("QUERIES", queries), encoding="utf-8")
    done = _chromium(chromium, tmp_path / "profile", "--dump-dom", f"{server}/{harness.name}")
    assert done.returncode == 0, done.stderr[-2000:]
    bs4 = pytest.importorskip("bs4")
    results = json.loads(bs4.BeautifulSoup(done.stdout, "html.parser").find(id="out").get_text())
    for (question, expected), urls in zip(questions.items(), results, strict=True):
        assert urls, f"{question!r} found nothing"
        if expected:
            assert any(expected in url for url in urls), (question, urls)


def test_the_search_page_ranks_a_pasted_error_with_other_numbers(chromium, server, tmp_path):
    # As a user pastes it: with the exception's class, and the numbers of their own program.
    pasted = ("RuntimeError: one of the variables needed for gradient computation has been "
              "modified by an inplace operation: [torch.FloatTensor [64, 10]], which is output 0 "
              "of Exp, is at version 3; expected version 2 instead. Hint: enable anomaly "
              "detection to find the operation that failed to compute its gradient, with "
              "torch.autograd.set_detect_anomaly(True, check_nan=False).")
    done = _chromium(chromium, tmp_path / "profile", "--dump-dom",
                     f"{server}/search.html?q={quote(pasted)}")
    assert done.returncode == 0, done.stderr[-2000:]
    bs4 = pytest.importorskip("bs4")
    dom = bs4.BeautifulSoup(done.stdout, "html.parser")
    results = dom.select("#spec-results li.spec-result")
    assert len(results) >= 3, done.stdout[-3000:]
    for result in results[:3]:
        snippet = _collapse(result.select_one(".spec-result-snippet").get_text())
        assert "modified by an inplace operation" in snippet, snippet
        assert result.select_one("a")["href"].split("#")[0].removeprefix("./") in (
            "messages.html", "errors.html", "inplace_and_views.html", "fuzz_findings.html",
            "grad_fn.html", "anomaly_mode.html", "custom_function.html", "detach.html")
    # The messages index comes first: it gathers every cause of the message.
    assert results[0].select_one("a")["href"].removeprefix("./").startswith("messages.html#")
    # Text from case files is shown as text: the snippet holds no markup of its own.
    assert not results[0].select(".spec-result-snippet script")


def test_the_search_index_is_a_script_a_file_url_can_load(site):
    script = (site.html / "_static" / "spec-index.js").read_text(encoding="utf-8")
    assert script.startswith("window.SPEC_INDEX = ")
    entries = json.loads(script[len("window.SPEC_INDEX = "):].rstrip().rstrip(";"))
    kinds = {entry["k"] for entry in entries}
    assert kinds == {"case", "message"}
    assert all(Path(entry["u"].partition("#")[0]).suffix == ".html" for entry in entries)


def test_comparison_tables_link_their_cases_and_their_topics(soup):
    page = soup("comparisons.html")
    tables = page.select("table.comparison")
    assert len(tables) >= 3
    for table in tables:
        for row in table.select("tbody tr"):
            cells = row.select("td")[1:]
            assert cells and all(cell.select("a[href]") for cell in cells), row.get_text(" ")
    home = soup("index.html")
    assert home.find("a", href="comparisons.html#comparison-grad-modes") is not None
    detach = _collapse(soup("detach.html").get_text(" "))
    assert "Compared side by side:" in detach
