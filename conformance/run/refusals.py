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

- A refusal of backward must be the one the case describes: its message begins as PyTorch's
  does, or the same case has run a backward on the engine before (a control), whatever the
  engine's message strictness. An engine that cannot run backward at all raises on every
  backward with words of its own, and must not earn the cases that expect a refusal there.

Which class, stage and message it is, is PyTorch's surface (`class_problem`, `full` level).

Everything here runs in the runner, on what the engine's process sent (`ExceptionSeen`); the
facts only a traceback holds were read there (`conformance.run.observe.exception_seen`).
"""

from __future__ import annotations

import ast
import builtins
import re

from conformance.run.observe import Classes, ExceptionSeen

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
_CRASHES = ("RecursionError", "SystemError", "MemoryError")


def node_at(statement: ast.stmt, position: tuple[int, int, int, int] | None
            ) -> ast.AST | None:
    """The node of `statement` whose instruction is at `position` (that of the instruction that
    raised, or called what raised), or None where it is not known."""
    if position is None:
        return None
    line, end_line, col, end_col = position
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


def stage_of(statement: ast.stmt, node: ast.AST | None) -> str:
    """The stage of an error (INTERPRETING.md "Stage"): from the expression that raised when
    it is known, else from the whole statement."""
    if node is None or isinstance(node, ast.stmt):
        return stage(statement if node is None else node)
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return "attribute"
    if isinstance(node, ast.Call):
        if _is_backward(call_name(node)):
            return "backward"
        if call_name(node).rsplit(".", 1)[-1] in FLAG_METHODS:
            return "attribute"
    return "forward"


def stage(statement: ast.stmt) -> str:
    """The stage an error raised by `statement` belongs to, from the statement alone."""
    calls = [node for node in ast.walk(statement) if isinstance(node, ast.Call)]
    names = [call_name(call) for call in calls]
    if any(_is_backward(name) for name in names):
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


def refusal_problem(raised: ExceptionSeen, statement: ast.stmt, expected_type: str,
                    expected_message: str | None = None, *, ran_backward: bool = True,
                    expected_stage: str | None = None) -> str | None:
    """Why `raised` (by `statement`) is not the engine's refusal of the statement meant to
    raise (None when it is). These are `semantics` failures: the engine did not refuse what the
    case refuses. `expected_message` is PyTorch's text: where PyTorch's own refusal is one the
    interpreter words (an unknown keyword), the engine's must be the same refusal.
    `ran_backward`: whether the case has run a backward on the engine before this statement."""
    what = f"{raised.type}: {_first_line(raised.message)}"
    if raised.statement != raised.statements - 1:
        return (f"statement {raised.statement + 1} of {raised.statements} raised {what}; only "
                "the step's last statement may raise, every statement before it must succeed")
    if raised.by_adapter:
        return (f"the adapter's own code raised {what}, not the engine (an adapter may "
                "translate an engine's exception with `raise ... from exc`, never invent one)")
    node = node_at(statement, raised.position)
    if not raised.declared_refusal:
        lacking = _lacks_name(raised, statement, node, expected_type, expected_message)
        if lacking is not None:
            return f"{what}: {lacking}, which is not a refusal"
        if any(raised.is_a(crash) for crash in _CRASHES) and raised.type != expected_type:
            return f"{what}: the engine crashed, which is not a refusal"
    where = stage_of(statement, node)
    ran_backward = ran_backward or _backward_before(statement, node)
    if "backward" in (expected_stage, where) and not ran_backward \
            and not _worded_as_expected(raised, expected_message):
        return (f"{what}: a refusal of backward in the engine's own words, and the case has not "
                "seen the engine run a backward: an engine that cannot run backward at all "
                "would refuse the same way (the message must begin as PyTorch's does)")
    return None


def _backward_before(statement: ast.stmt, node: ast.AST | None) -> bool:
    """Whether `statement` calls a backward that ends before `node` (what raised) begins: in a
    `with` block, `g, = autograd.grad(..., create_graph=True)` has run when the next line's
    `.backward()` raises."""
    start = _span(node) if node is not None else None
    if start is None:
        return False
    return any(isinstance(call, ast.Call) and _is_backward(call_name(call))
               and (call.end_lineno, call.end_col_offset) <= (start[0], start[2])
               for call in ast.walk(statement))


def _is_backward(name: str) -> bool:
    return name.rsplit(".", 1)[-1] == "backward" or name.endswith("autograd.grad")


def _worded_as_expected(raised: ExceptionSeen, expected: str | None) -> bool:
    """Whether the message says what PyTorch's does: the same head, or (for a refusal the
    interpreter words, an unknown keyword) the same phrase and names."""
    if same_head(raised.message, expected):
        return True
    return raised.is_a("TypeError") and expected is not None and _same_mechanics(
        _first_line(raised.message), expected.splitlines()[0] if expected else "")


def same_head(actual: str, expected: str | None) -> bool:
    """Whether `actual` begins with the head of `expected`: its text up to the first `.`, `:`
    or line break (INTERPRETING.md's `prefix` strictness). True when nothing is expected."""
    if expected is None:
        return True
    head = re.split(r"[.:\n]", expected, maxsplit=1)[0]
    return actual.startswith(head)


def class_problem(classes: Classes, expected_type: str) -> str | None:
    """Why an exception or warning class (`classes`: it and its bases, as the engine's process
    sent them) is not the one the case names (None when it is): the class itself, or an
    engine's own subclass of it. A built-in subclass has a meaning of its own
    (NotImplementedError is not a RuntimeError refusal), so it matches only where named."""
    (module, name), bases = classes[0], classes[1:]
    if name == expected_type:
        return None
    if module != "builtins" and any(base == expected_type for _, base in bases):
        return None
    return f"expected {expected_type}, raised {name}"


def _first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""


def _lacks_name(raised: ExceptionSeen, statement: ast.stmt, node: ast.AST | None,
                expected_type: str, expected_message: str | None) -> str | None:
    if raised.is_a("NameError"):
        return "a name the engine's namespace does not have"
    if raised.is_a("ImportError"):
        return "a module the engine cannot import"
    if raised.is_a("NotImplementedError") and expected_type != raised.type:
        return "the engine does not implement it"
    if raised.is_a("AttributeError") and raised.at_the_call:
        # Read by the case's statement or the adapter's facade: the engine lacks the name.
        # (An AttributeError deep in the engine's own code is how that engine refused.)
        stores = (isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del))
                  if node is not None else stage(statement) == "attribute")
        if not (stores and expected_type == "AttributeError"):
            if raised.adapter_class is not None:
                return (f"an attribute the adapter's {raised.adapter_class!r} does not provide "
                        "(the adapter does not map it, or the engine lacks it)")
            return "an attribute the engine's objects do not have"
    if raised.is_a("TypeError") and raised.at_the_call:
        text = _first_line(raised.message)
        if expected_type == "TypeError" and expected_message is not None \
                and _same_mechanics(text, expected_message.splitlines()[0]):
            return None  # PyTorch refuses this very signature or operand the same way
        if _CALL_MECHANICS.search(text):
            return "a signature the engine does not have"
        if _PROTOCOL.search(text) and any(name not in _PLAIN_TYPES
                                          for name in _QUOTED.findall(text)):
            return "an operation the engine's objects do not support"
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
