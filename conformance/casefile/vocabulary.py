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
  `x.requires_grad = False`). Nothing reached through `torch`, `nn`, `F`, a helper or
  `type(...)`, or through a name bound to one of those, may be assigned.

The check (`CaseCheck`, one pass over a case's text) accepts only the constructs the case
language needs (`ALLOWED_NODES`: assignments, calls, operators, comprehensions, `for`, `if`,
`with`, `def`, `lambda`, `class` for custom autograd Functions, `yield` and `async def` for
grad-mode decorators on generators and coroutines...); it rejects everything else, `import`,
`try`/`except`, `match`, `while`, `global`, `raise` and `:=` among them. It also rejects any
name, attribute or keyword that starts with `_`, binding `torch`/`nn`/`F`/a helper by any means
(assignment, `def`, `class`, argument, loop or comprehension variable), global names that are
neither listed nor bound where Python looks them up (`CaseCheck` says when a name is bound),
members or attributes that are not listed, and assigning attributes that are not `settable`.
`api.yaml` itself may not list names that would open a way around the check (`eval`, `exec`,
`getattr`, `open`, ...).
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Mapping
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
# What a name no case binds resolves to in a run with Python's own builtins (an engine such as
# compiled autograd runs cases so).
PYTHON_BUILTINS = frozenset(dir(builtins))
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
    """The file line (the checked text's line 1 is the line given to the check)."""
    message: str


class CaseCheck:
    """The check of one case's text, fed in the order the runner runs it: each step's `run`
    (`snippet`), then the step's `expect` keys (`expression`); `finish` adds what only the
    whole case can tell. Every problem comes out as `Problem(file line, "where: message")`.

    Names resolve as Python resolves them in the case's module namespace, in one pass over
    each tree. At the top level (and in a class body, or a list, set or dict comprehension run
    there), a name must be bound by a top-level statement that has certainly run: not one
    only inside an `if` or `for` body, nor the last statement of a `raises` step (the one that
    raises), and not undone by a `del`; else Python would look the name up in the builtins. A
    function, lambda or generator looks up its free names when it runs, so those must be bound
    at the top level somewhere in the case and may not name a Python builtin that `api.yaml`
    does not list (the function could run while the case's binding is missing). Parameters,
    other locals, comprehension variables and class-body names bind only in their own scope::

        >>> check = CaseCheck(Api())
        >>> check.snippet("f = lambda eval: 0\\neval('1')", "step 0", line=10)
        >>> [(p.line, p.message[:30]) for p in check.finish()]
        [(11, "step 0: unknown name 'eval': b")]

    An attribute may be assigned or deleted only if `settable`, and never on the engine's
    modules and classes: not through `torch`, `nn`, `F`, a helper or `type(...)`, nor through
    a name bound anywhere in the case to one of those (`Fn = torch.autograd.Function`).
    """

    def __init__(self, api: Api) -> None:
        self.api = api
        self.defined: set[str] = set()
        """The top-level names certainly bound at this point of the case."""
        self._module = _Scope("module", self.defined, None)
        self._anywhere: set[str] = set()
        self._late_names: list[tuple[str, Problem]] = []
        self._late_writes: list[tuple[str, Problem]] = []
        self._paths: dict[str, list[str]] = {}
        self._reserved = frozenset(ROOTS) | frozenset(HELPERS)
        self._engine_objects = set(self._reserved)
        self._problems: list[Problem] = []
        self._where = ""
        self._line = 1

    def snippet(self, source: str, where: str, line: int, may_stop: bool = False) -> None:
        """Check a step's `run` text starting on file line `line`; `may_stop`: the step
        expects an error (`raises`), which its last statement raises."""
        self._where, self._line = where, line
        try:
            tree = parse(source, "exec")
        except SyntaxError as exc:
            self._report_line(exc.lineno or 1, f"syntax error: {exc.msg}")
            return
        except TooComplex as exc:
            self._report_line(1, str(exc))
            return
        body = tree.body  # type: ignore[attr-defined]
        self._block(body[:-1] if may_stop else body, self._module)
        if may_stop and body:
            # The runner goes on after the last statement raised (the only one that may):
            # what that statement binds is then missing.
            mark = self._module.branch()
            self._statement(body[-1], self._module)
            self._module.undo(mark)

    def expression(self, source: str, where: str, line: int) -> None:
        """Check an observation expression (an `expect` key) on file line `line`."""
        self._where, self._line = where, line
        try:
            tree = parse(source, "eval")
        except SyntaxError as exc:
            self._report_line(1, f"expect key is not a Python expression: {exc.msg}")
            return
        except TooComplex as exc:
            self._report_line(1, str(exc))
            return
        self._expr(tree, self._module)

    def finish(self) -> list[Problem]:
        """Every problem of the case: those found so far, and the free names of functions and
        the attribute writes that the whole case shows to be wrong."""
        problems = list(self._problems)
        problems += [p for name, p in self._late_names if name not in self._anywhere]
        aliases = self._aliases()
        problems += [p for root, p in self._late_writes if root in aliases]
        return problems

    # -- statements ---------------------------------------------------------------------

    def _block(self, body: list[ast.stmt], scope: _Scope) -> None:
        for stmt in body:
            self._statement(stmt, scope)

    def _statement(self, stmt: ast.stmt, scope: _Scope) -> None:
        if not self._allowed(stmt):
            return
        if isinstance(stmt, ast.Assign):
            self._expr(stmt.value, scope)
            for target in stmt.targets:
                self._target(target, scope, stmt.value)
        elif isinstance(stmt, ast.AugAssign):
            self._expr(stmt.value, scope)
            self._target(stmt.target, scope, None, augmented=True)
        elif isinstance(stmt, ast.Delete):
            for target in stmt.targets:
                self._target(target, scope, None)
        elif isinstance(stmt, ast.For):
            self._expr(stmt.iter, scope)
            scope.loops += 1
            mark = scope.branch()
            items = stmt.iter.elts if isinstance(stmt.iter, (ast.List, ast.Tuple, ast.Set)) \
                else [None]
            for item in items:
                self._alias_targets(stmt.target, item)
            self._target(stmt.target, scope, None)
            self._block(stmt.body, scope)
            scope.undo(mark)
            scope.loops -= 1
            self._block(stmt.orelse, scope)
            scope.undo(mark)
        elif isinstance(stmt, ast.If):
            self._expr(stmt.test, scope)
            mark = scope.branch()
            self._block(stmt.body, scope)
            body = scope.undo(mark)
            self._block(stmt.orelse, scope)
            for name in body & scope.undo(mark):
                scope.bind(name)  # bound on either way through the `if`
        elif isinstance(stmt, ast.With):
            # The body runs whenever the statement after the `with` does: no context manager
            # a case can reach swallows an error (a class of its own cannot define __exit__:
            # names starting with '_' and `type(name, bases, namespace)` are refused).
            for item in stmt.items:
                if self._allowed(item):
                    self._expr(item.context_expr, scope)
                    if item.optional_vars is not None:
                        self._target(item.optional_vars, scope, None)
            self._block(stmt.body, scope)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._function(stmt, scope)
            if self._binding(stmt, stmt.name):
                self._bind(stmt.name, scope)
        elif isinstance(stmt, ast.ClassDef):
            for node in (*stmt.decorator_list, *stmt.bases, *stmt.keywords):
                self._expr(node, scope)
            self._block(stmt.body, _Scope("class", set(), scope))
            if self._binding(stmt, stmt.name):
                self._bind(stmt.name, scope)
        else:  # an expression, return, assert, pass, break, continue
            for child in ast.iter_child_nodes(stmt):
                self._expr(child, scope)

    def _target(self, node: ast.AST, scope: _Scope, value: ast.AST | None,
                augmented: bool = False) -> None:
        """A name bound (or deleted) by an assignment, a loop, a `with` or a `del`; `value` is
        what it is bound to, when the statement shows it."""
        if not self._allowed(node):
            return
        if isinstance(node, ast.Name):
            if not self._binding(node, node.id):
                return
            if isinstance(node.ctx, ast.Del):
                self._delete(node, scope)
                return
            if augmented:  # `x += 1` reads x first
                self._name(node, scope)
            self._bind(node.id, scope)
            self._alias(node.id, value)
        elif isinstance(node, (ast.Tuple, ast.List)):
            values: list[ast.AST | None] = [None] * len(node.elts)
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(values):
                values = list(value.elts)
            for element, item in zip(node.elts, values, strict=True):
                self._target(element, scope, item)
        elif isinstance(node, ast.Starred):
            self._target(node.value, scope, None)
        elif isinstance(node, ast.Attribute):
            self._attribute(node, scope)
        else:
            self._expr(node, scope)

    def _delete(self, node: ast.Name, scope: _Scope) -> None:
        if scope.loops and scope.ordered:
            # A later pass through the loop would read the deleted name from the builtins.
            self._report(node, f"'del {node.id}' inside a for loop is not allowed: delete it "
                               "after the loop")
        scope.unbind(node.id)

    def _bind(self, name: str, scope: _Scope) -> None:
        scope.bind(name)
        if scope is self._module:
            self._anywhere.add(name)

    # -- expressions --------------------------------------------------------------------

    def _expr(self, node: ast.AST, scope: _Scope) -> None:
        if not self._allowed(node):
            return
        if isinstance(node, ast.Name):
            if not isinstance(node.ctx, ast.Load):
                self._target(node, scope, None)
            elif not self._private(node, node.id):
                self._name(node, scope)
        elif isinstance(node, ast.Attribute):
            self._attribute(node, scope)
        elif isinstance(node, ast.Lambda):
            self._function(node, scope)
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            self._comprehension(node, scope)
        else:
            if isinstance(node, ast.keyword) and node.arg is not None:
                self._private(node, node.arg)
            elif isinstance(node, ast.Call) and _is_type_call(node) and not _one_argument(node):
                self._report(node, "type() with other than one argument makes a class whose "
                                   "methods lint cannot see (named by strings, '__exit__' "
                                   "among them): write a class statement")
            for child in ast.iter_child_nodes(node):
                self._expr(child, scope)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda,
                  scope: _Scope) -> None:
        """A def or lambda: what its statement evaluates where it stands (decorators,
        defaults, annotations), then its body in a scope of its own."""
        args = node.args
        params = [*args.posonlyargs, *args.args, *args.kwonlyargs,
                  *(a for a in (args.vararg, args.kwarg) if a is not None)]
        outer = [*getattr(node, "decorator_list", ()), *args.defaults,
                 *(d for d in args.kw_defaults if d is not None),
                 *(p.annotation for p in params if p.annotation is not None)]
        if getattr(node, "returns", None) is not None:
            outer.append(node.returns)  # type: ignore[union-attr]
        for item in outer:
            self._expr(item, scope)
        self._allowed(args)
        for param in params:
            if self._allowed(param):
                self._binding(param, param.arg)
        positional = [*args.posonlyargs, *args.args]
        for param, default in zip(positional[len(positional) - len(args.defaults):],
                                  args.defaults, strict=True):
            self._alias(param.arg, default)
        for param, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
            self._alias(param.arg, default)
        local = {p.arg for p in params}
        inner = _Scope("function", local, scope)
        if isinstance(node, ast.Lambda):
            self._expr(node.body, inner)
        else:
            _collect_locals(node.body, local)
            self._block(node.body, inner)

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.DictComp
                       | ast.GeneratorExp, scope: _Scope) -> None:
        """The first iterable is evaluated where the comprehension stands; the rest in its own
        scope, whose variables are its loop targets. A generator runs later, like a function."""
        local: set[str] = set()
        for generator in node.generators:
            _collect_target(generator.target, local)
        inner = _Scope("comprehension", local, scope, lazy=isinstance(node, ast.GeneratorExp))
        for index, generator in enumerate(node.generators):
            if not self._allowed(generator):
                continue
            self._expr(generator.iter, scope if index == 0 else inner)
            self._target(generator.target, inner, None)
            for condition in generator.ifs:
                self._expr(condition, inner)
        for part in (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,):
            self._expr(part, inner)

    # -- names --------------------------------------------------------------------------

    def _name(self, node: ast.Name, scope: _Scope) -> None:
        """A name read in `scope`: a local of it or of an enclosing function, else a global."""
        name, lazy, current = node.id, False, scope
        while current.kind != "module":
            # A class body's names are seen by its own statements, not by the functions and
            # comprehensions inside it.
            if (current is scope or current.kind != "class") and name in current.names:
                return
            lazy = lazy or current.lazy
            current = current.parent  # type: ignore[assignment]
        if name in self.api.globals or name in self._reserved:
            return
        if not lazy:
            if name not in self.defined:
                self._report(node, f"unknown name '{name}': bind it in an earlier statement or "
                                   "add it to api.yaml globals")
        elif name in FORBIDDEN_GLOBALS or name in PYTHON_BUILTINS:
            self._report(node, f"'{name}' is read by a function, lambda or generator, which "
                               "looks it up when it runs: it names a Python builtin not in "
                               "api.yaml globals, so rename the case's variable")
        elif name not in self.defined:
            self._late_names.append((name, self._problem(
                node, f"unknown name '{name}' (read by a function, lambda or generator): bind "
                      "it at the top level of a step or add it to api.yaml globals")))

    def _binding(self, node: ast.AST, name: str) -> bool:
        """Whether `name` may be bound or deleted (reports why not)."""
        if self._private(node, name):
            return False
        if name in self._reserved:
            self._report(node, f"'{name}' is provided by the runner and may not be rebound")
            return False
        return True

    def _private(self, node: ast.AST, name: str) -> bool:
        if name.startswith("_"):
            self._report(node, f"'{name}': names starting with '_' are not allowed")
            return True
        return False

    # -- attributes ---------------------------------------------------------------------

    def _attribute(self, node: ast.Attribute, scope: _Scope) -> None:
        self._expr(node.value, scope)
        if SAVED_INTROSPECTION.fullmatch(node.attr) and isinstance(node.ctx, ast.Load):
            # A node's saved values (grad_fn._saved_self, ._raw_saved_result): PyTorch's
            # documented way to see them; plain data, nothing to escape through.
            return
        if self._private(node, node.attr):
            return
        path = dotted(node.value)
        root = path.split(".", 1)[0] if path else None
        if not isinstance(node.ctx, ast.Load):
            self._write(node, path, root)
            return
        if root in ROOTS:
            namespace = ROOTS[root] + path[len(root):]  # type: ignore[index]
            if _is_namespace_path(f"{namespace}.{node.attr}", self.api):
                # `torch.nn` on the way to `torch.nn.Linear`: checked at the next level.
                return
            if namespace in self.api.namespaces:
                if node.attr not in self.api.namespaces[namespace]:
                    self._report(
                        node, f"'{path}.{node.attr}' is not in api.yaml (add '{node.attr}' to "
                        f"section {_section_name(namespace)})"
                    )
                return
            if _is_namespace_path(namespace, self.api):
                self._report(node, f"'{path}' is not in api.yaml (add a section {namespace})")
                return
        if node.attr not in self.api.attributes:
            self._report(
                node, f"attribute '{node.attr}' is not in api.yaml (add it to attributes)"
            )

    def _write(self, node: ast.Attribute, path: str | None, root: str | None) -> None:
        """An attribute assigned or deleted: never on the engine's modules and classes (they
        are shared by every case), however they are reached; else only `settable` names."""
        if root in ROOTS or root in HELPERS:
            self._report(node, f"'{path}.{node.attr}' may not be assigned or deleted: "
                               "torch, nn, F and the helpers are the engine's, shared by every "
                               "case")
        elif _is_type_call(_base(node.value)):
            self._report(node, f"'{ast.unparse(node)}' may not be assigned or deleted: a "
                               "tensor's class is the engine's, shared by every case")
        elif node.attr not in self.api.settable:
            self._report(node, f"assigning or deleting attribute '{node.attr}' is not "
                               "allowed (add it to api.yaml settable)")
        elif root is not None:
            self._late_writes.append((root, self._problem(
                node, f"'{path}.{node.attr}' may not be assigned or deleted: '{root}' is bound "
                      "to a module or class of the engine (a torch, nn or F path, a helper or "
                      "type(...)), shared by every case")))

    def _alias(self, name: str, value: ast.AST | None) -> None:
        """Note what `name` is bound to when that is an object found by a path: `torch.nn`,
        `Fn` in `Fn.apply`, `type(x)` (the engine's classes and modules, found at the end)."""
        if value is None:
            return
        if _is_type_call(value):
            self._engine_objects.add(name)
            return
        path = dotted(value)
        if path is not None:
            self._paths.setdefault(path.split(".", 1)[0], []).append(name)

    def _alias_targets(self, target: ast.AST, value: ast.AST | None) -> None:
        """A loop over a literal list binds its target to each item in turn."""
        if isinstance(target, ast.Name):
            self._alias(target.id, value)
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(
                value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
            for element, item in zip(target.elts, value.elts, strict=True):
                self._alias_targets(element, item)

    def _aliases(self) -> set[str]:
        """Every name bound, through any chain of paths, to an engine module or class."""
        found = set(self._engine_objects)
        todo = list(found)
        while todo:
            for name in self._paths.get(todo.pop(), ()):
                if name not in found:
                    found.add(name)
                    todo.append(name)
        return found

    # -- problems -----------------------------------------------------------------------

    def _allowed(self, node: ast.AST) -> bool:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            self._report(node, "imports are not allowed: use torch, nn and F")
        elif type(node) not in ALLOWED_NODES:
            self._report(node, f"'{_construct(node)}' is not allowed in a case (the case "
                               "language has no use for it)")
        else:
            return True
        return False

    def _problem(self, node: ast.AST, message: str) -> Problem:
        return Problem(self._line + getattr(node, "lineno", 1) - 1, f"{self._where}: {message}")

    def _report(self, node: ast.AST, message: str) -> None:
        self._problems.append(self._problem(node, message))

    def _report_line(self, line: int, message: str) -> None:
        self._problems.append(Problem(self._line + line - 1, f"{self._where}: {message}"))


class _Scope:
    """Where a name is looked up: the case's module namespace, a class body, a function or
    a comprehension. `names`: for the module and a class body (run statement by statement),
    the names certainly bound so far; for a function or comprehension, all its locals."""

    def __init__(self, kind: str, names: set[str], parent: _Scope | None,
                 lazy: bool = False) -> None:
        self.kind = kind
        self.names = names
        self.parent = parent
        self.lazy = lazy or kind == "function"
        """Its code runs later (a function, a generator): free names are looked up then."""
        self.ordered = kind in ("module", "class")
        self.loops = 0
        self._added: list[str] = []

    def bind(self, name: str) -> None:
        if self.ordered and name not in self.names:
            self.names.add(name)
            self._added.append(name)

    def unbind(self, name: str) -> None:
        if self.ordered:
            self.names.discard(name)

    def branch(self) -> int:
        """A mark to `undo` the bindings of a branch that may not run to its end."""
        return len(self._added)

    def undo(self, mark: int) -> set[str]:
        """Forget the names bound since `mark` (none was bound before it); returns them."""
        added = set(self._added[mark:])
        del self._added[mark:]
        self.names.difference_update(added)
        return added


def _collect_locals(body: list[ast.stmt], local: set[str]) -> None:
    """Add to `local` the names a function body binds (Python makes each a local of the whole
    function): statements only, since the case language has no expression that binds a name
    in its own scope (`:=` is refused); nested functions and classes keep theirs."""
    todo = list(body)
    while todo:
        stmt = todo.pop()
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            local.add(stmt.name)
            continue
        if isinstance(stmt, (ast.Assign, ast.Delete)):
            for target in stmt.targets:
                _collect_target(target, local)
        elif isinstance(stmt, (ast.AugAssign, ast.For, ast.AsyncFor)):
            _collect_target(stmt.target, local)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                if item.optional_vars is not None:
                    _collect_target(item.optional_vars, local)
        for field_name in ("body", "orelse"):
            todo.extend(getattr(stmt, field_name, ()))


def _collect_target(target: ast.AST, local: set[str]) -> None:
    """The names an assignment target binds (`a`, `a, *b`; not `a.x` nor `a[0]`)."""
    todo = [target]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Name):
            local.add(node.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            todo.extend(node.elts)
        elif isinstance(node, ast.Starred):
            todo.append(node.value)


def _base(node: ast.AST) -> ast.AST:
    """The object an attribute chain starts from (`type(x)` in `type(x).grad.data`)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def _is_type_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
        and node.func.id == "type"


def _one_argument(call: ast.Call) -> bool:
    return len(call.args) == 1 and not isinstance(call.args[0], ast.Starred) \
        and not call.keywords


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
