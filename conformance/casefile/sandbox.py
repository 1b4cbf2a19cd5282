"""What text from a case file may reach when it runs.

Case files are untrusted. The static checker (`conformance.casefile.vocabulary`) decides which
names a snippet may use; this module makes the run agree with it:

- snippets and observation expressions run with builtins limited to the names `api.yaml` lists
  under `globals` (plus the two the interpreter looks up itself), never the `builtins` module;
- `{np: ...}` expected values are checked (`check_np`) wherever they occur in an expectation,
  against an explicit list of NumPy members and array attributes, and evaluated (`eval_np`)
  without builtins, seeing only that list and the case's tensors as arrays.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType, SimpleNamespace
from typing import Any

import numpy as np

from conformance.casefile.vocabulary import TooComplex, parse

# NumPy as an `{np: ...}` expectation sees it: numbers, array construction and elementwise or
# reducing maths. Nothing that reads or writes files, evaluates strings or reaches objects.
NP_MEMBERS = frozenset({
    "abs", "absolute", "all", "allclose", "any", "arange", "arccos", "arcsin", "arctan",
    "arctan2", "argmax", "argmin", "array", "asarray", "broadcast_to", "ceil", "clip",
    "complex64", "complex128", "concatenate", "conj", "cos", "cosh", "cumprod", "cumsum",
    "diag", "diagonal", "dot", "e", "exp", "expand_dims", "expm1", "eye", "float16", "float32",
    "float64", "floor", "full", "full_like", "inf", "int8", "int16", "int32", "int64",
    "isclose", "isfinite", "isinf", "isnan", "linspace", "log", "log10", "log1p", "log2",
    "logical_and", "logical_not", "logical_or", "matmul", "max", "maximum", "mean", "min",
    "minimum", "nan", "ones", "ones_like", "outer", "pi", "power", "prod", "ravel", "reciprocal",
    "repeat", "reshape", "round", "sign", "sin", "sinh", "sqrt", "square", "squeeze", "stack",
    "std", "sum", "swapaxes", "tan", "tanh", "tile", "transpose", "tril", "triu", "uint8",
    "var", "where", "zeros", "zeros_like", "bool_", "newaxis", "float_power", "sort",
})
ARRAY_ATTRIBUTES = frozenset({
    "T", "astype", "dtype", "flatten", "max", "mean", "min", "ndim", "prod", "real", "imag",
    "reshape", "shape", "size", "sum", "transpose", "squeeze", "cumsum", "conj", "std", "var",
})
# The expression forms an `{np: ...}` value may use.
NP_NODES = frozenset({
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Call,
    ast.keyword, ast.Attribute, ast.Subscript, ast.Slice, ast.Name, ast.Constant, ast.List,
    ast.Tuple, ast.Load,
    ast.And, ast.Or, ast.Add, ast.Sub, ast.Mult, ast.MatMult, ast.Div, ast.Mod, ast.Pow,
    ast.FloorDiv, ast.Invert, ast.Not, ast.UAdd, ast.USub,
    ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE,
})
SAFE_NP = SimpleNamespace(**{name: getattr(np, name) for name in NP_MEMBERS if hasattr(np, name)})
# What the interpreter itself looks up in a frame's builtins: a class statement needs
# `__build_class__`, and C code (NumPy's lazy imports in `ndarray.sum`) calls `__import__`.
# Neither can be named by case text: the checkers refuse every name starting with '_'.
_INTERPRETER = {"__build_class__": builtins.__build_class__, "__import__": builtins.__import__}


def check_np(source: Any, names: Iterable[str] | None = None) -> list[str]:
    """Why an `{np: ...}` expression may not run (an empty list when it may). `names`: the
    case's names it may read as arrays (any name not starting with '_' when None)."""
    known = None if names is None else {"np", *names}
    if not isinstance(source, str):
        return ["'np' must be a NumPy expression string"]
    try:
        tree = parse(source, "eval")
    except SyntaxError as exc:
        return [f"'np' is not a Python expression: {exc.msg}"]
    except TooComplex as exc:
        return [f"'np': {exc}"]
    problems = []
    for node in ast.walk(tree):
        if type(node) not in NP_NODES:
            problems.append(f"'np' expression may not use {type(node).__name__}")
        elif isinstance(node, ast.Name) and node.id.startswith("_"):
            problems.append(f"'np' expression may not use '{node.id}' (names starting with '_')")
        elif isinstance(node, ast.Name) and known is not None and node.id not in known:
            problems.append(f"'np' expression reads '{node.id}', which the case has not bound "
                            "(it sees np and the case's tensors as arrays)")
        elif isinstance(node, ast.Attribute):
            on_np = isinstance(node.value, ast.Name) and node.value.id == "np"
            allowed = NP_MEMBERS if on_np else ARRAY_ATTRIBUTES
            if node.attr not in allowed:
                what = f"np.{node.attr}" if on_np else f"attribute '{node.attr}'"
                problems.append(f"'np' expression may not use {what} (not in the NumPy "
                                "allow-list of conformance.casefile.sandbox)")
    return problems


def np_expressions(expected: Any) -> Iterator[tuple[Any, Any]]:
    """Every `{np: ...}` mapping inside an expected value, however deeply nested."""
    stack = [expected]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            if "np" in item:
                yield item, item["np"]
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def eval_np(source: str, arrays: Mapping[str, Any]) -> Any:
    """Evaluate a checked `{np: ...}` expression: no builtins, the allowed NumPy, the arrays."""
    problems = check_np(source)
    if problems:
        raise ValueError(problems[0])
    code = compile(source, "<np expectation>", "eval")
    return eval(code, {"__builtins__": dict(_INTERPRETER), "np": SAFE_NP}, dict(arrays))


def case_builtins(names: Iterable[str], machinery: Iterable[str] = ()) -> Mapping[str, Any]:
    """The builtins a case runs with: the `globals` of api.yaml that are builtins, what a class
    statement needs, and the guarded builtins an engine's machinery looks up (`machinery`, each
    a key of MACHINERY_BUILTINS)."""
    table = {name: getattr(builtins, name) for name in sorted(frozenset(names))
             if hasattr(builtins, name)}
    extra = {}
    for name in machinery:
        if name not in MACHINERY_BUILTINS:
            raise ValueError(f"the engine asks for the builtin {name!r} for its machinery; only "
                             f"{', '.join(sorted(MACHINERY_BUILTINS))} can be given, guarded")
        extra[name] = MACHINERY_BUILTINS[name]
    return MappingProxyType({**table, **extra, **_INTERPRETER})


def _guarded_getattr(obj: Any, name: str, *default: Any) -> Any:
    """`getattr` that reaches no name starting with '_' (no `__class__`, `__globals__`...)."""
    if not isinstance(name, str) or name.startswith("_"):
        raise AttributeError(f"{name!r}: the case sandbox's getattr reads no private name")
    return getattr(obj, name, *default)


MACHINERY_BUILTINS: Mapping[str, Any] = MappingProxyType({"getattr": _guarded_getattr})
"""The builtins an engine's machinery may have in snippet globals. Each name is one lint refuses
in case text (`vocabulary.FORBIDDEN_GLOBALS`), and each function is guarded, so that a snippet
that reached one anyway (through a hole in lint) would still reach nothing private."""
