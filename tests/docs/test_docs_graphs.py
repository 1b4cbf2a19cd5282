"""Backward graphs drawn as SVG: the tree of each `graph()` text, laid out without overlaps,
escaped, on every case that checks a graph; in a real browser every label fits its box."""

from __future__ import annotations

import html
import itertools
import json
import re

import pytest
from docs_support import chromium_run

from conformance.casefile.loader import DEFAULT_SPEC_DIR, load
from conformance.reference import graphs


def test_parse_reads_nodes_inputs_and_none():
    tree = graphs.parse("AddBackward0(MulBackward0(AccumulateGrad, None), None)")
    assert tree.name == "AddBackward0"
    assert [c.name for c in tree.children] == ["MulBackward0", "None"]
    assert [c.kind for c in tree.children[0].children] == ["leaf", "none"]


@pytest.mark.parametrize("text", ["", "MulBackward0(", "MulBackward0(AccumulateGrad", "a b",
                                  "MulBackward0()", "<script>", "x)", "tensor([1., 2.])"])
def test_parse_refuses_what_is_not_a_graph(text):
    with pytest.raises(ValueError):
        graphs.parse(text)


def test_boxes_of_one_level_never_overlap_and_parents_sit_over_their_children():
    text = ("SubBackward0(DivBackward0(AddBackward0(AddBackward0(AddBackward0(PowBackward0("
            "AccumulateGrad), MulBackward0(AccumulateGrad, None)), None), None), None), None)")
    picture = graphs.svg(text, "graph(z)")
    boxes = [(float(x), float(y), float(w)) for x, y, w in
             re.findall(r'<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)"', picture)]
    assert len(boxes) == text.count("Backward") + text.count("AccumulateGrad") + \
        text.count("None")
    by_row: dict[float, list[tuple[float, float]]] = {}
    for x, y, w in boxes:
        by_row.setdefault(y, []).append((x, x + w))
    for spans in by_row.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
    width = float(re.search(r'viewBox="0 0 ([\d.]+) ', picture).group(1))
    assert all(x >= 0 and x + w <= width + 0.5 for x, _, w in boxes)


def test_names_are_escaped():
    picture = graphs.svg("MulBackward0(AccumulateGrad)", 'graph(y) "<b>"')
    assert "<b>" not in picture and "&lt;b&gt;" in picture


def test_every_case_that_checks_a_graph_shows_its_diagram(page):
    cases = load([DEFAULT_SPEC_DIR / "cases"]).cases
    drawn = 0
    for case in cases:
        texts = [value for step in case.steps for key, value in step.expect
                 if key.startswith("graph(") and isinstance(value, str)]
        if not texts:
            continue
        found = page(f"{case.topic}.html")
        # Each graph's node names are in the page as SVG text of that case's figures.
        html_text = found.path.read_text(encoding="utf-8")
        section = html_text[html_text.index(f'id="{case.id}"'):]
        for text in texts:
            name = graphs.parse(text).name
            assert '<svg class="autograd-graph"' in section and f">{name}</text>" in section, \
                (case.id, text)
            drawn += 1
    assert drawn >= 150


HARNESS = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>
<pre id="out">running</pre><iframe id="page" src="PAGE" width="1200" height="800"></iframe>
<script>
document.getElementById("page").addEventListener("load", function () {
  var doc = document.getElementById("page").contentDocument;
  var svgs = doc.querySelectorAll("svg.autograd-graph");
  var bad = [];
  svgs.forEach(function (svg) {
    svg.querySelectorAll("g").forEach(function (g) {
      var rect = g.querySelector("rect"), text = g.querySelector("text");
      var need = text.getComputedTextLength(), have = rect.width.baseVal.value;
      if (!(need > 0) || need > have - 4) bad.push(text.textContent + " " + need + ">" + have);
    });
  });
  document.getElementById("out").textContent = JSON.stringify({svgs: svgs.length, bad: bad});
});
</script></body></html>
"""


def test_in_a_browser_every_label_fits_its_box(chromium, server, site, tmp_path):
    harness = site.html / "graph-harness-grad-fn.html"
    harness.write_text(HARNESS.replace("PAGE", "grad_fn.html"), encoding="utf-8")
    done = chromium_run(chromium, tmp_path / "profile", "--dump-dom",
                        f"{server}/{harness.name}")
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'<pre id="out">(.*?)</pre>', done.stdout, re.S)
    assert found, done.stdout[-2000:]
    result = json.loads(html.unescape(found.group(1)))
    assert result["svgs"] >= 5 and result["bad"] == [], result
