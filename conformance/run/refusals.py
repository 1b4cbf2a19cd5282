"""Whether an exception an engine raised is the refusal a case expects.

A step that expects `raises` is met only by a real refusal of the engine, never by an accident
(test262 learned this as "phase"). The checks, in the order `refusal_problem` applies them:

- The exception must come from the statement meant to raise: the step's last statement. Every
  statement before it must succeed (`Raised.index`).
- Its stage is where it came from: the expression that was running in the case's statement when
  it raised (`Raised.node`, read from the traceback's instruction position), not the statement
  as a whole. `(x * 2).sum().backward()` that fails in `x * 2` failed in the forward pass.
- An exception the adapter raised itself (a `raise` statement in the adapter's own files) is not
  the engine's refusal; an adapter may translate an engine's exception (`raise ... from exc`).
- An exception that means "this engine lacks a name" is never a refusal: a NameError, an
  AttributeError from reading an attribute in the case's statement or the adapter's facade, a
  NotImplementedError, an ImportError, or a TypeError raised by the interpreter at the call
  itself (a signature the engine does not have, an operator or protocol its objects lack).
  Where PyTorch itself raises that class (writing a read-only attribute raises AttributeError;
  a meta tensor's backward raises NotImplementedError), an exception of the same class raised
  the same way still counts.
- An exception that means the engine crashed (RecursionError, SystemError, MemoryError) is not a
  refusal.
- An adapter may name classes its engine refuses with on purpose (`Engine.refusal_types`) that
  would otherwise read as a missing name or a crash: those are refusals.

Which class, stage and message it is, is PyTorch's surface (`class_problem`, `full` level).
"""

from __future__ import annotations

import ast
import builtins
import dis
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from types import CodeType, TracebackType

FLAG_METHODS = frozenset({"requires_grad_", "retain_grad", "detach_"})
# Operators compute (forward) even in a statement without calls: `z = x * 2`, `v = x[0]`.
OPERATORS = (ast.BinOp, ast.UnaryOp, ast.Compare, ast.Subscript, ast.AugAssign)

# TypeErrors the interpreter raises when a call or an operator cannot even start: the engine
# does not have that signature or that protocol.
_CALL_MECHANICS = re.compile(
    r"takes (?:\d+|from \d+ to \d+|no) (?:positional |keyword )?arguments?"
    r"|got an unexpected keyword argument"
    r"|got multiple values for (?:keyword )?argument"
    r"|missing \d+ required (?:positional|keyword-only) arguments?"
)
_PROTOCOL = re.compile(
    r"object is not (?:callable|subscriptable|iterable|an iterator|a mapping)"
    r"|object does not support (?:item assignment|item deletion|the context manager protocol)"
    r"|object does not support the asynchronous context manager protocol"
    r"|unsupported operand type\(s\)"
    r"|bad operand type for"
    r"|not supported between instances of"
    r"|object cannot be interpreted as an integer"
    r"|has no len\(\)"
)
_QUOTED = re.compile(r"'([\w.]+)'")
_PLAIN_TYPES = frozenset(
    {name for name, value in vars(builtins).items() if isinstance(value, type)}
    | {"NoneType", "function", "builtin_function_or_method", "method", "generator", "module",
       "ellipsis", "NotImplementedType", "method-wrapper", "numpy.ndarray", "ndarray"}
)
_CRASHES = (RecursionError, SystemError, MemoryError)
_RAISE = frozenset(dis.opmap[name] for name in ("RAISE_VARARGS",) if name in dis.opmap)


@dataclass(frozen=True)
class Raised:
    """An exception raised by one statement of a step, with where it came from."""

    exc: BaseException
    statement: ast.stmt
    index: int
    """The statement's position in the step (0-based)."""
    count: int
    """How many statements the step has."""
    code: CodeType
    """The statement's compiled code (to find its frame in the traceback)."""

    @property
    def is_last(self) -> bool:
        return self.index == self.count - 1

    @cached_property
    def node(self) -> ast.AST | None:
        """The expression of the statement that was running when the exception was raised,
        or None where the interpreter keeps no positions (Python 3.10)."""
        return raising_node(self.exc, self.code, self.statement)

    @property
    def stage(self) -> str:
        return stage_of(self.statement, self.node)


def raising_node(exc: BaseException, code: CodeType, statement: ast.stmt) -> ast.AST | None:
    """The node of `statement` whose instruction raised `exc` (or called what raised it)."""
    tb = _frame_of(exc.__traceback__, code)
    if tb is None or not hasattr(code, "co_positions"):
        return None
    positions = list(code.co_positions())
    index = tb.tb_lasti // 2
    if not 0 <= index < len(positions) or None in positions[index]:
        return None
    line, end_line, col, end_col = positions[index]
    best: ast.AST | None = None
    best_size: tuple[int, int] | None = None
    for node in ast.walk(statement):
        span = _span(node)
        if span is None:
            continue
        if span == (line, end_line, col, end_col):
            return node
        if (span[0], span[2]) <= (line, col) and (span[1], span[3]) >= (end_line, end_col):
            size = (span[1] - span[0], span[3] - span[2])
            if best_size is None or size < best_size:
                best, best_size = node, size
    return best


def _span(node: ast.AST) -> tuple[int, int, int, int] | None:
    if not hasattr(node, "lineno") or getattr(node, "end_lineno", None) is None:
        return None
    return (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset)  # type: ignore


def _frame_of(tb: TracebackType | None, code: CodeType) -> TracebackType | None:
    while tb is not None:
        if tb.tb_frame.f_code is code:
            return tb
        tb = tb.tb_next
    return None


def _innermost(tb: TracebackType | None) -> TracebackType | None:
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def stage_of(statement: ast.stmt, node: ast.AST | None) -> str:
    """The stage of an error (INTERPRETING.md "Stage"): from the expression that raised when
    it is known, else from the whole statement."""
    if node is None or isinstance(node, ast.stmt):
        return stage(statement if node is None else node)
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return "attribute"
    if isinstance(node, ast.Call):
        name = call_name(node).rsplit(".", 1)[-1]
        if name == "backward" or call_name(node).endswith("autograd.grad"):
            return "backward"
        if name in FLAG_METHODS:
            return "attribute"
    return "forward"


def stage(statement: ast.stmt) -> str:
    """The stage an error raised by `statement` belongs to, from the statement alone."""
    calls = [node for node in ast.walk(statement) if isinstance(node, ast.Call)]
    names = [call_name(call) for call in calls]
    for name in names:
        if name.rsplit(".", 1)[-1] == "backward" or name.endswith("autograd.grad"):
            return "backward"
    assigns_attribute = any(
        isinstance(target, ast.Attribute)
        for node in ast.walk(statement)
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete))
        for target in (getattr(node, "targets", None) or [node.target])
    )
    computes = any(isinstance(node, OPERATORS) for node in ast.walk(statement))
    only_flags = all(name.rsplit(".", 1)[-1] in FLAG_METHODS for name in names)
    if assigns_attribute or (only_flags and not computes):
        return "attribute"
    return "forward"


def call_name(call: ast.Call) -> str:
    """`torch.autograd.grad` for a call of that dotted name; `?` stands for an expression."""
    parts = []
    node = call.func
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    parts.append(node.id if isinstance(node, ast.Name) else "?")
    return ".".join(reversed(parts))


def refusal_problem(raised: Raised, expected_type: str, adapter_files: Iterable[str],
                    refusal_types: tuple[type[BaseException], ...] = (),
                    expected_message: str | None = None) -> str | None:
    """Why `raised` is not the engine's refusal of the statement meant to raise (None when it
    is). These are `semantics` failures: the engine did not refuse what the case refuses.
    `expected_message` is PyTorch's text: where PyTorch's own refusal is one the interpreter
    words (an unknown keyword), the engine's must be the same refusal."""
    exc = raised.exc
    what = f"{type(exc).__name__}: {_first_line(exc)}"
    if not raised.is_last:
        return (f"statement {raised.index + 1} of {raised.count} raised {what}; only the "
                "step's last statement may raise, every statement before it must succeed")
    files = frozenset(adapter_files)
    if _raised_by(exc, files):
        return (f"the adapter's own code raised {what}, not the engine (an adapter may "
                "translate an engine's exception with `raise ... from exc`, never invent one)")
    if refusal_types and isinstance(exc, refusal_types):
        return None
    lacking = _lacks_name(raised, expected_type, files, expected_message)
    if lacking is not None:
        return f"{what}: {lacking}, which is not a refusal"
    if isinstance(exc, _CRASHES) and type(exc).__name__ != expected_type:
        return f"{what}: the engine crashed, which is not a refusal"
    return None


def class_problem(cls: type, expected_type: str) -> str | None:
    """Why an exception or warning class is not the one the case names (None when it is): the
    class itself, or an engine's own subclass of it. A built-in subclass has a meaning of its
    own (NotImplementedError is not a RuntimeError refusal), so it matches only where named."""
    if cls.__name__ == expected_type:
        return None
    inherits = any(base.__name__ == expected_type for base in cls.__mro__[1:])
    if inherits and cls.__module__ != "builtins":
        return None
    return f"expected {expected_type}, raised {cls.__name__}"


def _first_line(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - an exception whose str() raises is still an exception
        text = f"<{type(exc).__name__} whose str() raised>"
    return text.splitlines()[0] if text else ""


def _raised_by(exc: BaseException, files: frozenset[str]) -> bool:
    """Whether the adapter's code executed the `raise` (and did not translate an engine
    exception: `raise ... from exc`)."""
    tb = _innermost(exc.__traceback__)
    if tb is None or tb.tb_frame.f_code.co_filename not in files:
        return False
    raw = tb.tb_frame.f_code.co_code
    if not 0 <= tb.tb_lasti < len(raw) or raw[tb.tb_lasti] not in _RAISE:
        return False  # the adapter called something that raised (engine code, C code)
    return exc.__cause__ is None


def _lacks_name(raised: Raised, expected_type: str, files: frozenset[str],
                expected_message: str | None) -> str | None:
    exc = raised.exc
    if isinstance(exc, NameError):
        return "a name the engine's namespace does not have"
    if isinstance(exc, ImportError):
        return "a module the engine cannot import"
    if isinstance(exc, NotImplementedError) and expected_type != type(exc).__name__:
        return "the engine does not implement it"
    if isinstance(exc, AttributeError) and _at_the_call(exc, raised.code, files):
        # Read by the case's statement or the adapter's facade: the engine lacks the name.
        # (An AttributeError deep in the engine's own code is how that engine refused.)
        node = raised.node
        stores = (isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del))
                  if node is not None else stage(raised.statement) == "attribute")
        if not (stores and expected_type == "AttributeError"):
            owner = _adapter_class(exc, files)
            if owner is not None:
                return (f"an attribute the adapter's {owner} does not provide (the adapter does "
                        "not map it, or the engine lacks it)")
            return "an attribute the engine's objects do not have"
    if isinstance(exc, TypeError) and _at_the_call(exc, raised.code, files):
        text = _first_line(exc)
        if expected_type == "TypeError" and expected_message is not None \
                and _same_mechanics(text, expected_message.splitlines()[0]):
            return None  # PyTorch refuses this very signature or operand the same way
        if _CALL_MECHANICS.search(text):
            return "a signature the engine does not have"
        if _PROTOCOL.search(text) and any(name not in _PLAIN_TYPES
                                          for name in _QUOTED.findall(text)):
            return "an operation the engine's objects do not support"
    return None


def _adapter_class(exc: AttributeError, files: frozenset[str]) -> str | None:
    """The name of the class an AttributeError's object belongs to, when the adapter defines
    that class (its facade, its tensor wrapper): the gap may be the adapter's, not the
    engine's."""
    owner = getattr(exc, "obj", None)
    if owner is None:
        return None
    cls = owner if isinstance(owner, type) else type(owner)
    module = sys.modules.get(getattr(cls, "__module__", "") or "")
    if getattr(module, "__file__", None) in files:
        return repr(cls.__name__)
    return None


def _same_mechanics(actual: str, expected: str) -> bool:
    """Whether two interpreter-worded TypeErrors refuse the same thing: the same phrase, the
    same argument names, the same plain operand types (an engine's own classes may be named
    otherwise than PyTorch's)."""
    for pattern, mask in ((_CALL_MECHANICS, False), (_PROTOCOL, True)):
        want, got = pattern.search(expected), pattern.search(actual)
        if want is None or got is None:
            continue
        return (want.group(0) == got.group(0)
                and _quoted_names(actual, mask) == _quoted_names(expected, mask))
    return False


def _quoted_names(text: str, mask_engine_types: bool) -> list[str]:
    """The quoted names of a message; with `mask_engine_types`, a name that is not a plain
    type (an engine's own class) reads `*`."""
    return [name if not mask_engine_types or name in _PLAIN_TYPES else "*"
            for name in _QUOTED.findall(text)]


def _at_the_call(exc: BaseException, code: CodeType, files: frozenset[str]) -> bool:
    """Whether the interpreter raised at the case's own statement or in the adapter, before
    any engine code ran (the innermost frame is the statement's or an adapter's)."""
    tb = _innermost(exc.__traceback__)
    if tb is None:
        return False
    return tb.tb_frame.f_code is code or tb.tb_frame.f_code.co_filename in files
