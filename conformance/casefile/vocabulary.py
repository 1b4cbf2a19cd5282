"""The vocabulary of snippets (`spec/api.yaml`) and the static check of every snippet.

`spec/api.yaml` is a mapping from a section to a list of names (a mapping of name to a short
description is accepted too; only its keys count)::

    globals: [abs, len, range, float, int, isinstance, list, tuple]   # builtins and other globals
    torch: [rand, tensor, ones, float32, float64, no_grad, enable_grad]
    torch.autograd: [grad, backward]
    nn: [Linear, Parameter, L1Loss]          # torch.nn members
    F: [relu, l1_loss]                       # torch.nn.functional members
    attributes: [grad, is_leaf, requires_grad, grad_fn, next_functions, backward, sum]

- `globals`: global names a snippet may use besides `torch`, `nn`, `F` and the observation
  helpers (`grad_fn_name`, `node_name`, `graph`, `shape`, `dtype`, `device`, `value`), which are
  always available.
- Every other section except `attributes` names a namespace: `torch`, `nn` (= `torch.nn`),
  `F` (= `torch.nn.functional`), `torch.autograd`, or any further dotted `torch.` path. A member
  reached through that namespace (`torch.rand`, `nn.Linear`, `torch.nn.Linear`,
  `torch.autograd.grad`) must be listed in it. A namespace that is itself a section
  (`torch.autograd`) may be reached without being listed.
- `attributes`: every other attribute or method name (`x.grad`, `y.backward`,
  `n.next_functions`, `m.weight`, `torch.float32.is_floating_point`).
- `settable`: the attribute names a snippet may assign or delete (`x.grad = None`,
  `x.requires_grad = False`). Nothing reached through `torch`, `nn` or `F` may be assigned.

The check (`check_snippet`, `check_expression`) accepts only the constructs the case language
needs (`ALLOWED_NODES`: assignments, calls, operators, comprehensions, `for`, `if`, `with`,
`def`, `lambda`, `class` for custom autograd Functions, `yield` and `async def` for grad-mode
decorators on generators and coroutines...); it rejects everything else, `import`,
`try`/`except`, `match`, `while`, `global`, `raise` and `:=` among them. It also rejects any
name, attribute or keyword that starts with `_`, binding `torch`/`nn`/`F`/a helper by any means
(assignment, `def`, `class`, argument, loop or comprehension variable), global names that are
neither bound by an earlier statement of the case nor listed, members or attributes that are
not listed, and assigning attributes that are not `settable`. `api.yaml` itself may not list
names that would open a way around the check (`eval`, `exec`, `getattr`, `open`, ...).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

HELPERS = ("grad_fn_name", "node_name", "graph", "shape", "dtype", "device", "value")
ROOTS = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional"}

# The one kind of underscore attribute a case may read: a node's saved values.
SAVED_INTROSPECTION = re.compile(r"_(raw_)?saved_[a-z][a-z0-9_]*")
FORBIDDEN_GLOBALS = frozenset(
    {
        "eval", "exec", "compile", "open", "getattr", "setattr", "delattr", "globals",
        "locals", "vars", "input", "breakpoint", "exit", "quit", "help", "memoryview",
    }
)
SPECIAL_SECTIONS = ("globals", "attributes", "settable")
# The syntax of the case language. Anything else (imports, try/except, match, while, global,
# raise, walrus...) is refused: a case has no use for it, and each of those is a way to bind
# names or catch the runner's own signals behind the checker's back.
ALLOWED_NODES = frozenset({
    ast.Module, ast.Expression, ast.Expr, ast.Assign, ast.AugAssign, ast.Delete, ast.For,
    ast.If, ast.With, ast.withitem, ast.FunctionDef, ast.Lambda, ast.arguments, ast.arg,
    ast.Return, ast.Pass, ast.Break, ast.Continue, ast.Assert, ast.ClassDef,
    ast.AsyncFunctionDef, ast.Await, ast.Yield, ast.YieldFrom,
    ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.IfExp, ast.Compare, ast.Call, ast.keyword,
    ast.Attribute, ast.Subscript, ast.Slice, ast.Starred, ast.Name, ast.Constant,
    ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp, ast.SetComp, ast.DictComp,
    ast.GeneratorExp, ast.comprehension, ast.JoinedStr, ast.FormattedValue,
    ast.Load, ast.Store, ast.Del,
    ast.And, ast.Or, ast.Add, ast.Sub, ast.Mult, ast.MatMult, ast.Div, ast.Mod, ast.Pow,
    ast.LShift, ast.RShift, ast.BitOr, ast.BitXor, ast.BitAnd, ast.FloorDiv,
    ast.Invert, ast.Not, ast.UAdd, ast.USub,
    ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Is, ast.IsNot, ast.In, ast.NotIn,
})


# Case text is parsed, walked and compiled by code that recurses (`ast.parse` itself, the
# feature scan, `ast.unparse`, `compile`): a 100,000-term sum or a run of 100,000 unary minus
# signs overflows the stack or the parser. No case needs anything near these bounds.
MAX_SNIPPET = 20_000
"""Characters in one `run` snippet."""
MAX_EXPRESSION = 2_000
"""Characters in one `expect` key or `{np: ...}` expression."""
MAX_NESTING = 100
"""Levels of the syntax tree of one snippet or expression."""
TOO_COMPLEX = "expression too deeply nested or too long"


class TooComplex(ValueError):
    """Case text past `MAX_SNIPPET`/`MAX_EXPRESSION` characters or `MAX_NESTING` levels."""


def parse(source: str, mode: str = "exec") -> ast.AST:
    """`ast.parse` for case text, within the bounds above: raises `SyntaxError` for text that
    is not Python and `TooComplex` for text too long or too deeply nested to handle."""
    limit = MAX_SNIPPET if mode == "exec" else MAX_EXPRESSION
    if len(source) > limit:
        raise TooComplex(f"{TOO_COMPLEX}: {len(source)} characters (at most {limit})")
    try:
        tree = ast.parse(source, mode=mode)
    except (RecursionError, MemoryError):
        # The parser's own limits: deep nesting overflows its stack (MemoryError in CPython's
        # parser) or the building of the tree (RecursionError).
        raise TooComplex(f"{TOO_COMPLEX} (at most {MAX_NESTING} levels)") from None
    if nesting(tree) > MAX_NESTING:
        raise TooComplex(f"{TOO_COMPLEX} (at most {MAX_NESTING} levels)")
    return tree


def nesting(tree: ast.AST) -> int:
    """The depth of a syntax tree, measured without recursion (any depth is safe)."""
    deepest = 0
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


class ApiFormatError(ValueError):
    """`spec/api.yaml` is malformed; the message says which section and what to fix."""


@dataclass(frozen=True)
class Api:
    globals: frozenset[str] = frozenset()
    namespaces: Mapping[str, frozenset[str]] = field(default_factory=dict)
    attributes: frozenset[str] = frozenset()
    settable: frozenset[str] = frozenset()

    @classmethod
    def from_mapping(cls, data: Any) -> Api:
        if not isinstance(data, Mapping):
            raise ApiFormatError("api.yaml must be a mapping from a section to a list of names")
        sections: dict[str, frozenset[str]] = {}
        for key, names in data.items():
            if isinstance(names, Mapping):
                names = list(names)
            if not isinstance(key, str) or not isinstance(names, list) or not all(
                isinstance(n, str) for n in names
            ):
                raise ApiFormatError(
                    f"api.yaml section {key!r} must be a list of names (or a mapping of name to "
                    "description)"
                )
            sections[key] = frozenset(names)
        banned = sorted(sections.get("globals", frozenset()) & FORBIDDEN_GLOBALS)
        if banned:
            raise ApiFormatError(
                f"api.yaml globals may not list {', '.join(banned)}: they would let a snippet "
                "escape the static check"
            )
        namespaces = {}
        for key, names in sections.items():
            if key in SPECIAL_SECTIONS:
                continue
            path = ROOTS.get(key, key)
            if not path.startswith("torch"):
                raise ApiFormatError(
                    f"api.yaml section {key!r} is unknown: use globals, attributes, settable, "
                    "torch, nn, F "
                    "or a dotted torch path such as torch.autograd"
                )
            namespaces[path] = names
        return cls(
            globals=sections.get("globals", frozenset()),
            namespaces=namespaces,
            attributes=sections.get("attributes", frozenset()),
            settable=sections.get("settable", frozenset()),
        )


@dataclass
class Problem:
    line: int
    """1-based line inside the checked text."""
    message: str


def check_snippet(source: str, api: Api, defined: set[str]) -> list[Problem]:
    """Check a step's `run` text; names it binds are added to `defined` (in order)."""
    try:
        tree = parse(source, "exec")
    except SyntaxError as exc:
        return [Problem(exc.lineno or 1, f"syntax error: {exc.msg}")]
    except TooComplex as exc:
        return [Problem(1, str(exc))]
    checker = _Checker(api)
    for stmt in tree.body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and stmt.value is not None:
            # `x = x + 1` must not see its own target: check the value first.
            checker.check(stmt.value, defined | _bound(stmt.value))
            checker.check_targets(stmt, defined)
            defined |= _bound(stmt)
        else:
            bound = _bound(stmt)
            checker.check(stmt, defined | bound)
            defined |= bound
    return checker.problems


def check_expression(source: str, api: Api, defined: set[str]) -> list[Problem]:
    """Check an observation expression (an `expect` key)."""
    try:
        tree = parse(source, "eval")
    except SyntaxError as exc:
        return [Problem(1, f"expect key is not a Python expression: {exc.msg}")]
    except TooComplex as exc:
        return [Problem(1, str(exc))]
    checker = _Checker(api)
    checker.check(tree, defined | _bound(tree))
    return checker.problems


def _bound(node: ast.AST) -> set[str]:
    """Names bound anywhere inside `node` (assignment targets, loop variables, arguments...)."""
    names: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            names.add(sub.id)
        elif isinstance(sub, ast.arg):
            names.add(sub.arg)
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(sub.name)
        elif isinstance(sub, ast.ExceptHandler) and sub.name:
            names.add(sub.name)
    return names


class _Checker:
    def __init__(self, api: Api) -> None:
        self.api = api
        self.problems: list[Problem] = []
        self.reserved = set(ROOTS) | set(HELPERS)

    def report(self, node: ast.AST, message: str) -> None:
        self.problems.append(Problem(getattr(node, "lineno", 1), message))

    def check_targets(self, stmt: ast.stmt, defined: set[str]) -> None:
        targets: Iterable[ast.AST] = getattr(stmt, "targets", None) or [stmt.target]
        for target in targets:
            self.check(target, defined | _bound(target))

    def check(self, root: ast.AST, known: set[str]) -> None:
        visible = known | self.api.globals | self.reserved
        for node in ast.walk(root):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self.report(node, "imports are not allowed: use torch, nn and F")
            elif type(node) not in ALLOWED_NODES:
                self.report(node, f"'{_construct(node)}' is not allowed in a case (the case "
                                  "language has no use for it)")
            elif isinstance(node, ast.Name):
                self.name(node, visible)
            elif isinstance(node, ast.Attribute):
                self.attribute(node)
            elif isinstance(node, (ast.arg, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.binding(node, node.arg if isinstance(node, ast.arg) else node.name)
            elif isinstance(node, ast.keyword) and node.arg is not None:
                self.private(node, node.arg)

    def binding(self, node: ast.AST, name: str) -> None:
        if not self.private(node, name) and name in self.reserved:
            self.report(node, f"'{name}' is provided by the runner and may not be rebound")

    def private(self, node: ast.AST, name: str) -> bool:
        if name.startswith("_"):
            self.report(node, f"'{name}': names starting with '_' are not allowed")
            return True
        return False

    def name(self, node: ast.Name, visible: set[str]) -> None:
        if self.private(node, node.id):
            return
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            if node.id in self.reserved:
                self.report(node, f"'{node.id}' is provided by the runner and may not be rebound")
        elif node.id not in visible:
            self.report(
                node,
                f"unknown name '{node.id}': bind it in an earlier statement or add it to "
                "api.yaml globals",
            )

    def attribute(self, node: ast.Attribute) -> None:
        if SAVED_INTROSPECTION.fullmatch(node.attr) and isinstance(node.ctx, ast.Load):
            # A node's saved values (grad_fn._saved_self, ._raw_saved_result): PyTorch's
            # documented way to see them; plain data, nothing to escape through.
            return
        if self.private(node, node.attr):
            return
        path = dotted(node.value)
        root = path.split(".", 1)[0] if path else None
        if not isinstance(node.ctx, ast.Load):
            if root in ROOTS:
                self.report(node, f"'{path}.{node.attr}' may not be assigned or deleted: "
                                  "torch, nn and F are the engine's, shared by every case")
            elif node.attr not in self.api.settable:
                self.report(node, f"assigning or deleting attribute '{node.attr}' is not "
                                  "allowed (add it to api.yaml settable)")
            return
        if root in ROOTS:
            namespace = ROOTS[root] + path[len(root):]
            if _is_namespace_path(f"{namespace}.{node.attr}", self.api):
                # `torch.nn` on the way to `torch.nn.Linear`: checked at the next level.
                return
            if namespace in self.api.namespaces:
                if node.attr not in self.api.namespaces[namespace]:
                    self.report(
                        node, f"'{path}.{node.attr}' is not in api.yaml (add '{node.attr}' to "
                        f"section {_section_name(namespace)})"
                    )
                return
            if _is_namespace_path(namespace, self.api):
                self.report(node, f"'{path}' is not in api.yaml (add a section {namespace})")
                return
        if node.attr not in self.api.attributes:
            self.report(
                node, f"attribute '{node.attr}' is not in api.yaml (add it to attributes)"
            )


def _construct(node: ast.AST) -> str:
    """A reader's name for a refused construct."""
    words = {ast.ClassDef: "class", ast.Try: "try/except", ast.ExceptHandler: "except",
             ast.While: "while", ast.Global: "global", ast.Nonlocal: "nonlocal",
             ast.Raise: "raise", ast.Yield: "yield", ast.YieldFrom: "yield from",
             ast.Await: "await", ast.NamedExpr: "walrus (:=)", ast.AsyncFunctionDef: "async def",
             ast.AsyncFor: "async for", ast.AsyncWith: "async with", ast.AnnAssign: "annotation"}
    if isinstance(node, (ast.Match, ast.match_case, ast.pattern)):
        return "match"
    return words.get(type(node), type(node).__name__)


def _is_namespace_path(path: str, api: Api) -> bool:
    return any(ns == path or ns.startswith(path + ".") for ns in api.namespaces)


def _section_name(namespace: str) -> str:
    for short, full in ROOTS.items():
        if full == namespace:
            return short
    return namespace


def dotted(node: ast.AST) -> str | None:
    """`torch.nn.Linear` for that attribute chain; None when it is not rooted at a name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))
