"""The features a case uses, read from its own text (`run` snippets, `expect` keys and values,
`raises` and `warns`), so `lint` can hold every case to its `features:` list.

An engine that lacks a feature reports the cases declaring it as unsupported; a case that
uses a feature without declaring it would instead fail on that engine for a reason the
registry already names. The derivation reads syntax only::

    >>> sorted(snippet_features("x = torch.ones(2, requires_grad=True)\\nx.add_(1)"))
    ['autograd_state', 'inplace']

What it cannot see: values known only at run time (a dtype or device held in a variable,
`getattr` with a computed name, a tensor method reached through a helper function's argument)
and which objects are tensors: `a[i] = v` and `a -= b` count as in-place whatever `a` is, and
whether a name holds a view or a backward node is followed only through plain assignments
(`v = y[0]`, `n = y.grad_fn`). Such a case declares the feature by hand; declaring more than
is derived is always allowed.

The adapter guide (`docs/adapters.md`) lists every registered feature with its meaning, in a
section generated from `spec/features.yaml`: after changing the registry, run
`python -m conformance.casefile.features --write-docs` (`--check` exits 1 while the section is
stale).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from conformance.casefile.case import Case
from conformance.casefile.files import DEFAULT_SPEC_DIR
from conformance.casefile.vocabulary import TooComplex, parse

ATTRIBUTES = {
    # Autograd state carried by tensors (functional engines such as JAX have none).
    "requires_grad": "autograd_state", "requires_grad_": "autograd_state",
    "is_leaf": "autograd_state", "backward": "autograd_state",
    # Grad mode.
    "no_grad": "no_grad", "enable_grad": "no_grad", "is_grad_enabled": "no_grad",
    "set_grad_enabled": "set_grad_enabled",
    "inference_mode": "inference_mode", "is_inference": "inference_mode",
    "is_inference_mode_enabled": "inference_mode",
    # Flags and the backward graph.
    "detach_": "detach_",
    "retain_grad": "retain_grad", "retains_grad": "retain_grad",
    "grad_fn": "node_introspection", "next_functions": "node_introspection",
    "register_hook": "hooks", "register_post_accumulate_grad_hook": "hooks",
    "register_prehook": "node_hooks",
    "forward_ad": "forward_ad",
    "saved_tensors_hooks": "saved_tensor_hooks", "save_on_cpu": "saved_tensor_hooks",
    "disable_saved_tensors_hooks": "saved_tensor_hooks", "register_multi_grad_hook": "hooks",
    "detect_anomaly": "anomaly_mode", "set_detect_anomaly": "anomaly_mode",
    "is_anomaly_enabled": "anomaly_mode", "is_anomaly_check_nan_enabled": "anomaly_mode",
    "once_differentiable": "custom_function",
    "vjp": "functional_api", "jvp": "functional_api", "jacobian": "functional_api",
    "hessian": "functional_api", "hvp": "functional_api", "vhp": "functional_api",
    "gradcheck": "gradcheck", "gradgradcheck": "gradcheck",
    # Dtypes and devices.
    "complex64": "complex", "complex128": "complex", "cfloat": "complex", "cdouble": "complex",
    "float16": "half", "half": "half", "bfloat16": "half",
    "cuda": "cuda", "is_meta": "meta",
    # Layers that need more than `modules`.
    "Conv2d": "conv", "BatchNorm1d": "batchnorm", "BatchNorm2d": "batchnorm",
    "InstanceNorm2d": "batchnorm",
    "Dropout": "dropout", "dropout": "dropout",
    # A tensor's memory, and the legacy constructors.
    "resize_": "storage", "resize_as_": "storage", "set_": "storage",
    "new": "legacy_constructors",
    **{f"{kind}Tensor": "legacy_constructors" for kind in (
        "Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool",
        "ComplexFloat", "ComplexDouble")},
}
"""Attribute name -> feature, wherever the attribute is read or called."""
HELPERS = {"grad_fn_name": "node_introspection", "node_name": "node_introspection",
           "graph": "node_introspection", "repr": "repr"}
"""Observation helpers and builtins (called by name) -> feature."""
STRINGS = {"float16": "half", "bfloat16": "half", "complex64": "complex",
           "complex128": "complex", "meta": "meta", "cuda": "cuda"}
"""String constants (`device='cuda:0'`, `dtype: float16` in an expected value) -> feature."""
NOT_INPLACE = frozenset({"requires_grad_", "detach_"})
"""Methods named like in-place ops that only set a flag (`requires_grad_`) or have their own
feature (`detach_`)."""
VIEWS = frozenset({"view", "view_as", "expand", "expand_as", "select", "narrow", "t", "T",
                   "transpose", "permute", "unsqueeze", "squeeze", "unbind", "split", "chunk",
                   "diagonal", "as_strided", "unfold", "detach", "data", "real", "imag"})
"""Methods and attributes whose result shares its base's storage and version counter."""
INPLACE_METHOD = re.compile(r"^[a-z][a-z0-9_]*[a-z0-9]_$")
GRAD_MODES = frozenset({"no_grad", "enable_grad", "set_grad_enabled", "inference_mode"})
VERSION_MESSAGE = re.compile(r"\bversion \d|modified by an inplace operation")


@dataclass(frozen=True)
class Use:
    """The first place a case uses a feature: the file line (None for a case made in memory),
    the step and what in its text does it."""

    feature: str
    line: int | None
    step: int
    what: str


@dataclass
class _Scan(ast.NodeVisitor):
    """Collects the features of one case's sources, in order; names bound to views and to
    backward nodes carry over from step to step, as the namespace does."""

    found: dict[str, tuple[int, str]] = field(default_factory=dict)
    view_names: set[str] = field(default_factory=set)
    view_bases: set[str] = field(default_factory=set)
    node_names: set[str] = field(default_factory=set)
    writes: list[tuple[ast.expr, int]] = field(default_factory=list)
    base: int = 1

    def add(self, feature: str, node: ast.AST, text: str | None = None) -> None:
        if feature not in self.found:
            line = self.base + getattr(node, "lineno", 1) - 1
            what = text if text is not None else _text(node)
            self.found[feature] = (line, what)

    def scan(self, source: str, base: int) -> None:
        try:
            tree = parse(source)
        except (SyntaxError, TooComplex):
            return  # The API check reports it.
        self.base = base
        self.writes = []
        self.visit(tree)
        for written, _ in self.writes:
            if self._touches_view(written):
                self.add("views", written, f"{_text(written)} written in place")

    # -- names bound to views and nodes ------------------------------------------------------

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if isinstance(target, ast.Subscript):
                self._write(target)
            self._bind(target, node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._write(node.target)
        self.generic_visit(node)

    def _bind(self, target: ast.expr, value: ast.expr) -> None:
        if not isinstance(target, ast.Name):
            return
        if self._is_node(value):
            self.node_names.add(target.id)
        root = _view_root(value)
        if root is not None:
            self.view_names.add(target.id)
            if isinstance(root, ast.Name):
                self.view_bases.add(root.id)

    def _is_node(self, node: ast.expr) -> bool:
        return any(isinstance(n, ast.Attribute) and n.attr in ("grad_fn", "next_functions")
                   or isinstance(n, ast.Name) and n.id in self.node_names
                   for n in ast.walk(node))

    def _write(self, target: ast.expr) -> None:
        """`a[i] = v` or `a -= v`: the tensor written is `a`."""
        self.add("inplace", target, f"{_text(target)} written in place")
        written = target.value if isinstance(target, ast.Subscript) else target
        self.writes.append((written, target.lineno))

    def _touches_view(self, written: ast.expr) -> bool:
        """Whether an in-place write reaches a view or a tensor that has views."""
        return _view_root(written) is not None or isinstance(written, ast.Name) and (
            written.id in self.view_names or written.id in self.view_bases)

    # -- calls, attributes, names ------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute):
            name = func.attr
            if INPLACE_METHOD.match(name) and name not in NOT_INPLACE \
                    and name not in ATTRIBUTES:
                self.add("inplace", node)
                self.writes.append((func.value, node.lineno))
            if name == "register_hook":
                self.add("node_hooks" if self._is_node(func.value) else "hooks", node)
            if name == "backward":
                self._backward_options(node)
        elif isinstance(func, ast.Name) and func.id in HELPERS:
            self.add(HELPERS[func.id], node)
        if isinstance(func, ast.Call) and _grad_mode(func.func):
            self.add("grad_mode_decorators", node)  # torch.no_grad()(f)
        for keyword in node.keywords:
            if keyword.arg == "requires_grad":
                self.add("autograd_state", node)
            elif keyword.arg == "create_graph" and not _is_false(keyword.value):
                self.add("create_graph", node)
            elif keyword.arg == "out":
                self.add("out_arguments", node)
        self.generic_visit(node)

    def _backward_options(self, node: ast.Call) -> None:
        for keyword in node.keywords:
            if keyword.arg == "inputs":
                self.add("backward_inputs", node)
            elif keyword.arg == "create_graph" and not _is_false(keyword.value):
                self.add("backward_create_graph", node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = node.attr
        if name == "grad":
            # `torch.autograd.grad` is the functional form; `t.grad` is state on a tensor.
            if not (isinstance(node.value, ast.Attribute) and node.value.attr == "autograd"):
                self.add("autograd_state", node)
        elif name == "Function" and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "autograd":
            self.add("custom_function", node)
        elif name in ATTRIBUTES and name != "register_hook":
            self.add(ATTRIBUTES[name], node)
        if isinstance(node.value, ast.Name) and node.value.id == "nn" and name != "functional":
            self.add("modules", node)
        elif isinstance(node.value, ast.Attribute) and node.value.attr == "nn" \
                and name != "functional":
            self.add("modules", node)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, complex):
            self.add("complex", node)
        elif isinstance(node.value, str):
            feature = STRINGS.get(node.value.split(":")[0])
            if feature is not None:
                self.add(feature, node)

    def visit_Compare(self, node: ast.Compare) -> None:
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands[:-1], operands[1:], strict=True):
            if isinstance(op, ast.Is | ast.IsNot) and not any(map(_is_none_or_type,
                                                                    (left, right))):
                self.add("identity", node)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._decorators(node)
        self.generic_visit(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._decorators(node)
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._decorators(node)
        self.generic_visit(node)

    def _decorators(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        for decorator in node.decorator_list:
            callee = decorator.func if isinstance(decorator, ast.Call) else decorator
            if _grad_mode(callee):
                self.add("grad_mode_decorators", decorator, "@" + _text(decorator))

    # -- expected values and messages --------------------------------------------------------

    def values(self, value: Any, line: int, step: int) -> None:
        for text in _strings(value):
            feature = STRINGS.get(text)
            if feature is not None and feature not in self.found:
                self.found[feature] = (line, f"expected {text!r}")


def snippet_features(source: str) -> dict[str, str]:
    """The features one snippet uses, each with the text that uses it first."""
    scan = _Scan()
    scan.scan(source, 1)
    return {feature: what for feature, (_, what) in scan.found.items()}


def case_uses(case: Case) -> list[Use]:
    """Every feature the case uses, with where it is first used, in order of use."""
    scan = _Scan()
    steps: dict[str, int] = {}

    def note(step: int) -> None:
        for feature in scan.found:
            steps.setdefault(feature, step)

    for index, step in enumerate(case.steps):
        line = step.run_line or step.line or case.line or 1
        scan.scan(step.run, line)
        for (key, expected), key_line in zip(step.expect, _lines(step), strict=True):
            scan.scan(key, key_line or line)
            scan.values(expected, key_line or line, index)
        if step.warns and "warnings" not in scan.found:
            scan.found["warnings"] = (step.line or line, "warns:")
        messages = [m for m in (step.raises, *step.warns) if m is not None]
        for expected in messages:
            texts = [expected.message or "", *(v.message for v in expected.messages)]
            if any(VERSION_MESSAGE.search(text) for text in texts) \
                    and "version_counter" not in scan.found:
                scan.found["version_counter"] = (step.line or line,
                                                 "a message about a tensor's version")
        note(index)
    return [Use(feature, line, steps[feature], what)
            for feature, (line, what) in scan.found.items()]


def derive(case: Case) -> tuple[str, ...]:
    """The features the case uses, sorted (what its `features:` must include)."""
    return tuple(sorted(use.feature for use in case_uses(case)))


def undeclared(case: Case, registry: Iterable[str] | None = None) -> list[Use]:
    """The uses of features the case does not declare. With `registry`, only features it
    registers count: a registry without a name does not let a case require it."""
    known = None if registry is None else set(registry)
    return [use for use in case_uses(case) if use.feature not in case.features
            and (known is None or use.feature in known)]


def _lines(step: Any) -> tuple[int | None, ...]:
    lines = tuple(step.expect_lines)
    return lines if len(lines) == len(step.expect) else (None,) * len(step.expect)


def _view_root(node: ast.expr) -> ast.expr | None:
    """The base of a view expression (`y` in `y[0]`, `y.view(2)`, `y.detach().t()`)."""
    found = None
    while True:
        if isinstance(node, ast.Subscript) and _basic_index(node.slice):
            found, node = node.value, node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in VIEWS:
            found, node = node.func.value, node.func.value
        elif isinstance(node, ast.Attribute) and node.attr in VIEWS:
            found, node = node.value, node.value
        else:
            return node if found is not None else None


def _basic_index(node: ast.expr) -> bool:
    """Integers, slices, `None` and `...` index a view; lists, tensors and masks copy."""
    if isinstance(node, ast.Tuple):
        return all(map(_basic_index, node.elts))
    return isinstance(node, ast.Slice | ast.Name) or isinstance(node, ast.Constant) \
        and not isinstance(node.value, str) or isinstance(node, ast.UnaryOp)


def _grad_mode(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in GRAD_MODES


def _is_none_or_type(node: ast.expr) -> bool:
    """`x is None` and `type(x) is C` ask what a thing is, not whether two are one object."""
    return isinstance(node, ast.Constant) and node.value is None or isinstance(node, ast.Call) \
        and isinstance(node.func, ast.Name) and node.func.id == "type"


def _is_false(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if key != "np":
                yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def _text(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


# -- the feature list of the adapter guide ---------------------------------------------------

DOCS_BEGIN = ("<!-- features: begin. Generated from spec/features.yaml by `python -m "
              "conformance.casefile.features --write-docs`: edit the registry, not this "
              "section. -->")
DOCS_END = "<!-- features: end -->"
GUIDE = Path("docs") / "adapters.md"
"""The adapter guide, relative to the folder that holds the spec folder."""


def registry(spec_dir: Path) -> dict[str, str]:
    """`spec/features.yaml`: every feature name with its meaning, in the file's order."""
    data = yaml.safe_load((Path(spec_dir) / "features.yaml").read_text(encoding="utf-8"))
    return {str(name): " ".join(str(text).split()) for name, text in (data or {}).items()}


def docs_section(features: Mapping[str, str]) -> str:
    """The generated section of the adapter guide, markers included."""
    rows = [f"| `{name}` | {_cell(features[name])} |" for name in sorted(features)]
    return "\n".join([
        DOCS_BEGIN,
        "",
        textwrap.fill(
            f"The {len(features)} feature names of `spec/features.yaml`. Declare the ones your "
            "engine has (`features = frozenset({...})`, or `lacks=` for `TorchLikeEngine`); a "
            "case that needs a feature the engine lacks is reported `unsupported`. The core is "
            "not among them and cannot be declared away: tensors with float32 and float64 "
            "values, their operators, `detach` and `clone`.", width=96, break_long_words=False,
            break_on_hyphens=False),
        "",
        "| feature | what a case that needs it uses |",
        "| --- | --- |",
        *rows,
        "",
        DOCS_END,
    ])


def _cell(text: str) -> str:
    """Registry text as one Markdown table cell, read as plain text: `<AddBackward0>` would be
    an HTML tag, `|` would end the cell, and `*`, `_` or a backtick could start emphasis or
    code."""
    return _MARKDOWN.sub(lambda match: "\\" + match.group(0), text)


# An underscore after a letter (`requires_grad_`) cannot open emphasis, so it stays as it is.
_MARKDOWN = re.compile(r"[\\`*<>\[\]|]|(?<!\w)_")


class DocsError(ValueError):
    """The guide has no well-formed generated section (its markers are missing or repeated)."""


def with_docs_section(guide: str, features: Mapping[str, str]) -> str:
    """The guide's text with its generated section rewritten from `features`."""
    if guide.count(DOCS_BEGIN) != 1 or guide.count(DOCS_END) != 1 \
            or guide.index(DOCS_BEGIN) > guide.index(DOCS_END):
        raise DocsError(f"the guide must hold the line {DOCS_BEGIN!r} once, and after it the "
                        f"line {DOCS_END!r} once")
    start = guide.index(DOCS_BEGIN)
    end = guide.index(DOCS_END) + len(DOCS_END)
    return guide[:start] + docs_section(features) + guide[end:]


def main(argv: Sequence[str] | None = None) -> int:

    parser = argparse.ArgumentParser(
        prog="python -m conformance.casefile.features",
        description="Rewrite the feature list of the adapter guide from spec/features.yaml.")
    parser.add_argument("--spec", type=Path, default=DEFAULT_SPEC_DIR, metavar="DIR",
                        help="the spec folder (features.yaml)")
    parser.add_argument("--docs", type=Path, default=None, metavar="FILE",
                        help="the adapter guide (default: docs/adapters.md beside the spec)")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write-docs", action="store_true", help="rewrite the section")
    action.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the section is stale")
    args = parser.parse_args(argv)
    guide_path = args.docs if args.docs is not None else args.spec.parent / GUIDE
    try:
        guide = guide_path.read_text(encoding="utf-8")
        text = with_docs_section(guide, registry(args.spec))
    except (OSError, yaml.YAMLError, DocsError) as exc:
        print(f"error: {guide_path}: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if text != guide:
            print(f"{guide_path}: the feature list is stale: run `python -m "
                  "conformance.casefile.features --write-docs`", file=sys.stderr)
            return 1
        return 0
    if text != guide:
        guide_path.write_text(text, encoding="utf-8")
    print(f"wrote the feature list of {guide_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
