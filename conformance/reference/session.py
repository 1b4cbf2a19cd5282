"""A case's steps as an interactive PyTorch session, the way a reader would type it.

Each `run` statement gets a `>>> ` prompt (`... ` for its continuation lines); each expectation
becomes the expression a person would type and the value PyTorch would print. Helpers of the
case language turn into the PyTorch they stand for: `grad_fn_name(y)` is shown as `y.grad_fn`
and prints `<MulBackward0 object at 0x...>`, `shape(y)` as `y.shape`, `dtype(y)` as `y.dtype`,
`device(y)` as `y.device`; `graph(y)` has no PyTorch spelling and is shown as
`print(graph(y))`. Errors are printed as tracebacks, warnings as `UserWarning: ...`::

    >>> from conformance.casefile.case import Case
    >>> case = Case.from_dict({"id": "t.a", "rule": "r", "steps": [
    ...     {"run": "x = torch.ones(2, requires_grad=True)\\ny = x * 2",
    ...      "expect": {"grad_fn_name(y)": "MulBackward0", "y": [2.0, 2.0]}}]})
    >>> print(render_case(case).text)
    >>> x = torch.ones(2, requires_grad=True)
    >>> y = x * 2
    >>> y.grad_fn
    <MulBackward0 object at 0x...>
    >>> y
    tensor([2., 2.])

Whether an expression gives a tensor or a plain Python value is read from the code (`x.is_leaf`
is a bool, `x.grad` a tensor, `torch.autograd.grad(...)` a tuple of tensors), since the
expected value alone cannot tell `2` the int from `tensor(2)`. A tensor is printed with the
dtype and device the expectation states; flags such as requires_grad are expectations of their
own, so no `grad_fn=` suffix is printed.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from conformance.casefile.case import Case, ExpectedMessage, Step
from conformance.casefile.vocabulary import dotted
from conformance.reference import printing

TORCH_VERSION = "2.13.0"
COMPOUND = (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.FunctionDef, ast.ClassDef,
            ast.AsyncFunctionDef, ast.AsyncFor, ast.AsyncWith, ast.Match)

# What an expression gives, as far as the code tells.
PYTHON, TENSOR, TUPLE, NODE, UNKNOWN = "python", "tensor", "tuple", "node", "unknown"

HELPERS = {"grad_fn_name", "node_name", "graph", "shape", "dtype", "device", "value"}
PYTHON_BUILTINS = {"len", "isinstance", "int", "float", "bool", "str", "repr", "type", "id",
                   "hasattr", "callable", "all", "any", "list", "tuple", "sorted"}
PYTHON_METHODS = {"item", "dim", "numel", "size", "tolist", "is_contiguous", "is_floating_point",
                  "is_complex", "element_size", "stride", "storage_offset", "ndimension",
                  "nelement", "equal", "is_inference", "data_ptr", "get_device", "is_set_to",
                  "allclose", "parameters", "named_parameters", "children", "modules",
                  "state_dict", "keys", "values", "items", "name"}
PYTHON_FUNCTIONS = {"torch.is_grad_enabled", "torch.is_inference_mode_enabled",
                    "torch.is_tensor", "torch.equal", "torch.allclose", "torch.is_floating_point",
                    "torch.is_complex", "torch.get_default_dtype", "torch.numel"}
TUPLE_FUNCTIONS = {"torch.autograd.grad", "torch.unbind", "torch.split", "torch.chunk",
                   "torch.autograd.forward_ad.unpack_dual"}
TUPLE_METHODS = {"unbind", "split", "chunk"}
PYTHON_ATTRIBUTES = {"is_leaf", "requires_grad", "retains_grad", "is_cuda", "is_meta", "ndim",
                     "output_nr", "is_sparse", "is_quantized", "training", "next_functions",
                     "shape", "dtype", "device", "names", "layout"}
TENSOR_ATTRIBUTES = {"grad", "data", "T", "mT", "H", "mH", "real", "imag", "variable",
                     "weight", "bias", "primal", "tangent", "running_mean", "running_var"}


@dataclass
class RenderedCase:
    """The session text and what a reader needs beside it."""

    text: str
    older_messages: list[tuple[str, str, str]] = field(default_factory=list)
    """(class name, PyTorch versions, message) of wordings older releases use."""


def render_case(case: Case) -> RenderedCase:
    kinds: dict[str, str] = {}
    lines: list[str] = []
    older: list[tuple[str, str, str]] = []
    for step in case.steps:
        lines += _statements(step.run, kinds)
        for warning in step.warns:
            lines += _message_lines(warning, f"{warning.type}: ")
            older += _older(warning)
        if step.raises is not None:
            lines += ["Traceback (most recent call last):", "  ..."]
            lines += _message_lines(step.raises, f"{step.raises.type}: ")
            older += _older(step.raises)
        lines += _expectations(step, kinds)
    return RenderedCase("\n".join(lines), older)


def _message_lines(expected: ExpectedMessage, prefix: str) -> list[str]:
    message = expected.message_for(TORCH_VERSION)
    if message is None:
        return [prefix.rstrip(": ")]
    return (prefix + message).splitlines() or [prefix.rstrip()]


def _older(expected: ExpectedMessage) -> list[tuple[str, str, str]]:
    return [(expected.type, variant.torch, variant.message) for variant in expected.messages]


def _statements(source: str, kinds: dict[str, str]) -> list[str]:
    """`source` with prompts: `>>> ` on a statement's first line, `... ` on the others."""
    tree = ast.parse(source)
    text_lines = source.splitlines()
    out: list[str] = []
    covered: set[int] = set()
    starts: dict[int, ast.stmt] = {}
    for statement in tree.body:
        first = min([statement.lineno] + [d.lineno for d in
                                          getattr(statement, "decorator_list", [])])
        starts[first] = statement
        covered.update(range(first, (statement.end_lineno or statement.lineno) + 1))
    number = 1
    while number <= len(text_lines):
        if number in starts:
            statement = starts[number]
            end = statement.end_lineno or statement.lineno
            body = text_lines[number - 1:end]
            out.append(">>> " + body[0])
            out += [("... " + line).rstrip() for line in body[1:]]
            if isinstance(statement, COMPOUND):
                out.append("...")
            _track(statement, kinds)
            number = end + 1
            continue
        line = text_lines[number - 1].strip()
        if line and number not in covered:
            out.append(">>> " + line)  # a comment between statements
        number += 1
    return out


def _track(statement: ast.stmt, kinds: dict[str, str]) -> None:
    """Remember what each assigned name holds, for the expectations that read it."""
    if isinstance(statement, ast.Assign):
        kind = _kind(statement.value, kinds)
        for target in statement.targets:
            _bind(target, statement.value, kind, kinds)
    elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
        _bind(statement.target, statement.value, _kind(statement.value, kinds), kinds)
    elif isinstance(statement, (ast.For, ast.With)):
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                kinds[node.id] = UNKNOWN
        for child in statement.body:
            _track(child, kinds)


def _bind(target: ast.expr, value: ast.expr, kind: str, kinds: dict[str, str]) -> None:
    if isinstance(target, ast.Name):
        kinds[target.id] = kind
    elif isinstance(target, (ast.Tuple, ast.List)):
        items = value.elts if isinstance(value, (ast.Tuple, ast.List)) \
            and len(value.elts) == len(target.elts) else None
        for index, element in enumerate(target.elts):
            if items is not None:
                _bind(element, items[index], _kind(items[index], kinds), kinds)
            elif isinstance(element, ast.Name):
                kinds[element.id] = TENSOR if kind in (TUPLE, TENSOR) else UNKNOWN



def _kind(node: ast.expr, kinds: Mapping[str, str]) -> str:
    """What `node` gives: a tensor, a tuple of tensors, a backward node or a Python value."""
    if isinstance(node, ast.Constant):
        return PYTHON
    if isinstance(node, ast.Name):
        return kinds.get(node.id, UNKNOWN)
    if isinstance(node, ast.Attribute):
        if node.attr == "grad_fn":
            return NODE
        if node.attr in PYTHON_ATTRIBUTES:
            return PYTHON
        if node.attr in TENSOR_ATTRIBUTES:
            return TENSOR
        return UNKNOWN
    if isinstance(node, ast.Call):
        return _call_kind(node, kinds)
    if isinstance(node, ast.Subscript):
        base = _kind(node.value, kinds)
        return {TUPLE: TENSOR, TENSOR: TENSOR, PYTHON: PYTHON, NODE: PYTHON}.get(base, UNKNOWN)
    if isinstance(node, ast.BinOp):
        return _combine([_kind(node.left, kinds), _kind(node.right, kinds)])
    if isinstance(node, ast.UnaryOp):
        return PYTHON if isinstance(node.op, ast.Not) else _kind(node.operand, kinds)
    if isinstance(node, ast.Compare):
        if all(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in node.ops):
            return PYTHON
        return _combine([_kind(n, kinds) for n in (node.left, *node.comparators)])
    if isinstance(node, (ast.BoolOp, ast.Tuple, ast.List, ast.ListComp, ast.GeneratorExp,
                         ast.Dict, ast.Set, ast.DictComp, ast.SetComp, ast.JoinedStr)):
        return PYTHON
    if isinstance(node, ast.IfExp):
        return _combine([_kind(node.body, kinds), _kind(node.orelse, kinds)])
    return UNKNOWN


def _combine(found: list[str]) -> str:
    if TENSOR in found:
        return TENSOR
    return PYTHON if all(kind == PYTHON for kind in found) else UNKNOWN


def _call_kind(node: ast.Call, kinds: Mapping[str, str]) -> str:
    if isinstance(node.func, ast.Name):
        name = node.func.id
        return PYTHON if name in HELPERS or name in PYTHON_BUILTINS else UNKNOWN
    path = dotted(node.func) or ""
    method = node.func.attr if isinstance(node.func, ast.Attribute) else ""
    if path in TUPLE_FUNCTIONS or (method in TUPLE_METHODS and not path.startswith("torch.")):
        return TUPLE
    if path in PYTHON_FUNCTIONS or method in PYTHON_METHODS:
        return PYTHON
    if path.startswith("nn.") and method[:1].isupper():
        return PYTHON  # a module
    return TENSOR


def _expectations(step: Step, kinds: Mapping[str, str]) -> list[str]:
    out = []
    for key, expected in step.expect:
        out += observation(key, expected, kinds)
    return out


def observation(key: str, expected: Any, kinds: Mapping[str, str] | None = None) -> list[str]:
    """The prompt line and printed value for one expectation `key: expected`."""
    kinds = kinds or {}
    tree = ast.parse(key, mode="eval").body
    if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) \
            and tree.func.id in HELPERS and len(tree.args) == 1 and not tree.keywords:
        shown = _helper(tree.func.id, _operand(key, tree.args[0]), expected)
        if shown is not None:
            return shown
    if expected is None:
        return [f">>> print({key})", "None"]
    if isinstance(expected, Mapping):
        return _tensor_mapping(key, expected)
    return [f">>> {key}", *_value(tree, expected, kinds).splitlines()]


def _operand(key: str, node: ast.expr) -> str:
    text = ast.get_source_segment(key, node) or ast.unparse(node)
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
        return text
    return f"({text})"


def _helper(name: str, operand: str, expected: Any) -> list[str] | None:
    if name == "graph":
        shown = "None" if expected is None else str(expected)
        return [f">>> print(graph({operand}))", *shown.splitlines()]
    if name in ("grad_fn_name", "node_name"):
        shown = f"{operand}.grad_fn" if name == "grad_fn_name" else operand
        if expected is None:
            return [f">>> print({shown})", "None"]
        return [f">>> {shown}", printing.node_repr(str(expected))]
    if name == "shape" and isinstance(expected, list):
        return [f">>> {operand}.shape", printing.size_repr(expected)]
    if name == "dtype" and isinstance(expected, str):
        return [f">>> {operand}.dtype", printing.dtype_repr(expected)]
    if name == "device" and isinstance(expected, str):
        return [f">>> {operand}.device", printing.device_repr(expected)]
    if name == "value" and not isinstance(expected, Mapping) and expected is not None:
        return [f">>> {operand}", *_tensor(expected).splitlines()]
    return None


def _tensor_mapping(key: str, expected: Mapping[str, Any]) -> list[str]:
    """A tensor expectation with keys (`value`, `dtype`, `shape`, `device`, `np`)."""
    shown = _mapping_repr(expected)
    if shown is not None:
        return [f">>> {key}", *shown.splitlines()]
    return [f">>> {key}  # {_mapping_words(expected)}"]


def _mapping_repr(expected: Mapping[str, Any]) -> str | None:
    """The tensor's repr when the expectation gives its values, else None."""
    if "value" not in expected or "np" in expected:
        return None
    try:
        return printing.tensor_repr(expected["value"], expected.get("dtype"),
                                    str(expected.get("device", "cpu")), expected.get("shape"))
    except (TypeError, ValueError):
        return None


def _mapping_words(expected: Mapping[str, Any]) -> str:
    if "np" in expected:
        said = [f"a tensor equal to {expected['np']}, computed with NumPy from the tensors' "
                "values"]
    elif "value" in expected:
        said = [f"a tensor with the values {expected['value']!r}"]
    else:
        said = ["a tensor"]
    said += [f"{name} {expected[name]}" for name in ("dtype", "shape", "device")
             if name in expected]
    return ", ".join(said)


def _tensor(value: Any) -> str:
    try:
        return printing.tensor_repr(value)
    except (TypeError, ValueError):
        return repr(value)


def _value(node: ast.expr, expected: Any, kinds: Mapping[str, str]) -> str:
    """The printed form of `expected` as the value of expression `node`."""
    kind = _kind(node, kinds)
    if expected is None:
        return "None"
    if isinstance(expected, Mapping):
        return _mapping_repr(expected) or f"<{_mapping_words(expected)}>"
    if isinstance(node, (ast.Tuple, ast.List)) and isinstance(expected, list) \
            and len(node.elts) == len(expected):
        items = [_value(n, v, kinds) for n, v in zip(node.elts, expected, strict=True)]
        if isinstance(node, ast.List):
            return "[" + ", ".join(items) + "]"
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if kind == TUPLE and isinstance(expected, list):
        items = ["None" if v is None else _tensor(v) for v in expected]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    is_number = isinstance(expected, (int, float, list)) and not isinstance(expected, bool)
    if kind == TENSOR and (is_number or isinstance(expected, bool)):
        return _tensor(expected)
    if kind == UNKNOWN and is_number and not isinstance(expected, int):
        return _tensor(expected)
    return repr(expected)
