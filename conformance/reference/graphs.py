"""Pictures of backward graphs: the text of `graph(t)` drawn as an inline SVG tree.

A case checks a graph as text, `AddBackward0(MulBackward0(AccumulateGrad, None), None)`: each
node, then its `next_functions` in order, `None` for an input that needs no gradient. Users
reach for torchviz to see the same thing; the reference draws it at build time, so every
diagram is exactly the graph the case checks on PyTorch.

The text is a tree (a node reached twice is written twice), so the layout is a tidy tree:
each subtree as wide as its widest level, a parent centred over its children, the output at
the top and gradients flowing down to the leaves. That needs no layout engine; Graphviz would
add a system dependency for nothing a tree needs. Colours come from CSS (`currentColor` and the
classes below), so a diagram reads in the light and the dark theme alike.

    >>> tree = parse("MulBackward0(AccumulateGrad, None)")
    >>> tree.name, [child.name for child in tree.children]
    ('MulBackward0', ['AccumulateGrad', 'None'])
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_:]*|\(|\)|,)")
MAX_NODES = 400
"""Beyond this a picture no longer helps a reader; the case's text still shows the graph."""

FONT = 12
CHAR = 7.3      # width of one character of the monospace font at FONT px
PAD_X = 8
BOX_H = 24
GAP_X = 14
GAP_Y = 34
MARGIN = 4


@dataclass
class Node:
    name: str
    children: list[Node] = field(default_factory=list)
    width: float = 0.0      # the box
    span: float = 0.0       # the subtree
    x: float = 0.0          # centre
    y: float = 0.0          # top

    @property
    def kind(self) -> str:
        if self.name == "None":
            return "none"
        if self.name == "AccumulateGrad":
            return "leaf"
        return "node"


def parse(text: str) -> Node:
    """The tree of a `graph()` text; ValueError for anything else."""
    tokens = [m.group(1) for m in _TOKEN.finditer(text)]
    if "".join(tokens) != "".join(text.split()):
        raise ValueError(f"not a graph text: {text[:60]!r}")
    position = 0
    count = 0

    def node() -> Node:
        nonlocal position, count
        if position >= len(tokens) or not re.match(r"[A-Za-z_]", tokens[position]):
            raise ValueError(f"expected a node name at token {position} of {text[:60]!r}")
        count += 1
        if count > MAX_NODES:
            raise ValueError(f"more than {MAX_NODES} nodes")
        current = Node(tokens[position])
        position += 1
        if position < len(tokens) and tokens[position] == "(":
            position += 1
            while True:
                current.children.append(node())
                if position < len(tokens) and tokens[position] == ",":
                    position += 1
                    continue
                if position < len(tokens) and tokens[position] == ")":
                    position += 1
                    break
                raise ValueError(f"unbalanced parentheses in {text[:60]!r}")
        return current

    # Iterative parsing would be needed past Python's recursion limit; MAX_NODES keeps the
    # depth far below it.
    root = node()
    if position != len(tokens):
        raise ValueError(f"text after the graph in {text[:60]!r}")
    return root


def _measure(node: Node) -> None:
    node.width = len(node.name) * CHAR + 2 * PAD_X
    for child in node.children:
        _measure(child)
    below = sum(c.span for c in node.children) + GAP_X * max(0, len(node.children) - 1)
    node.span = max(node.width, below)


def _place(node: Node, left: float, depth: int) -> None:
    node.x = left + node.span / 2
    node.y = MARGIN + depth * (BOX_H + GAP_Y)
    below = sum(c.span for c in node.children) + GAP_X * max(0, len(node.children) - 1)
    cursor = left + (node.span - below) / 2
    for child in node.children:
        _place(child, cursor, depth + 1)
        cursor += child.span + GAP_X


def _walk(node: Node):
    yield node
    for child in node.children:
        yield from _walk(child)


def svg(text: str, caption: str) -> str:
    """The diagram of a `graph()` text as one line of SVG markup (every name escaped)."""
    root = parse(text)
    _measure(root)
    _place(root, MARGIN, 0)
    nodes = list(_walk(root))
    width = root.span + 2 * MARGIN
    height = max(n.y for n in nodes) + BOX_H + MARGIN
    parts = [f'<svg class="autograd-graph" xmlns="http://www.w3.org/2000/svg" role="img" '
             f'width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
             f'aria-label="{html.escape(caption)}: {html.escape(" ".join(text.split()))}">',
             f"<title>{html.escape(caption)}</title>"]
    for node in nodes:
        for child in node.children:
            parts.append(f'<line class="edge" x1="{node.x:.1f}" y1="{node.y + BOX_H:.1f}" '
                         f'x2="{child.x:.1f}" y2="{child.y:.1f}"/>')
    for node in nodes:
        left = node.x - node.width / 2
        label = "None" if node.kind == "none" else node.name
        parts.append(f'<g class="{node.kind}"><rect x="{left:.1f}" y="{node.y:.1f}" '
                     f'width="{node.width:.1f}" height="{BOX_H}" rx="4"/>'
                     f'<text x="{node.x:.1f}" y="{node.y + BOX_H / 2:.1f}">'
                     f"{html.escape(label)}</text></g>")
    parts.append("</svg>")
    return "".join(parts)


CSS = """\
figure.autograd-graph-figure { margin: 0.6em 0 1em; overflow-x: auto; }
figure.autograd-graph-figure figcaption { font-size: 0.85em;
  color: var(--color-foreground-secondary, #555); }
svg.autograd-graph { font-family: var(--font-stack--monospace, monospace); font-size: 12px; }
svg.autograd-graph text { fill: currentColor; text-anchor: middle; dominant-baseline: central; }
svg.autograd-graph rect { fill: var(--color-background-secondary, #f6f6f6);
  stroke: currentColor; stroke-width: 1; }
svg.autograd-graph .leaf rect { stroke: var(--color-brand-primary, #2962ff); stroke-width: 2; }
svg.autograd-graph .none rect { fill: none; stroke-dasharray: 4 3; opacity: 0.7; }
svg.autograd-graph .none text { opacity: 0.7; }
svg.autograd-graph line.edge { stroke: currentColor; stroke-width: 1; opacity: 0.6; }
"""
