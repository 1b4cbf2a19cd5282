"""The argument checks PyTorch's Python binding makes before an op runs, with its messages.

PyTorch parses the arguments of every ``torch.*`` function and ``Tensor`` method against the
op's declared signatures before anything else happens (so ``leaf.add_(None)`` is a TypeError,
not the in-place error on leaves). Two messages come out of that parser:

- one signature fits the number of arguments: the first argument of the wrong type is named,
  ``matmul(): argument 'other' (position 2) must be Tensor, not NoneType``. Positions count
  from 1 over the call's own arguments (a method's ``self`` is not one) and are left out for
  keyword arguments. Ops that also take a number there (``add``, ``mul``...) still say
  ``must be Tensor``: their number overloads are hidden from Python;
- several signatures fit: ``pow() received an invalid combination of arguments - got
  (Tensor, NoneType), but expected one of:`` and every signature, some with a line that marks
  the arguments of the wrong type between ``!``.

This module wraps the public functions (re-exported by ``refimpl``) and rebinds the
``Tensor`` methods with those checks. Operators (``x + y``) are not wrapped: Python hands the
operands they cannot take back as ``NotImplemented`` (see ``functional._operator``), and
refimpl's own internal calls skip the checks.
"""

from __future__ import annotations

import builtins
import functools
import numbers
from collections.abc import Callable, Sequence
from typing import Any

from refimpl import _creation
from refimpl._tensor import Tensor
from refimpl.ops import functional as F
from refimpl.ops import inplace
from refimpl.ops.out import OUT_OPS, accepting_out

__all__ = ["function", "method", "overloaded", "Overload", "must_be", "invalid_combination"]

_NUMBER = numbers.Number


def _type_name(value: Any) -> str:
    return type(value).__name__


def must_be(op: str, param: str, position: int | None, expected: str, value: Any) -> TypeError:
    """PyTorch's error for an argument of the wrong type (``position`` None: by keyword)."""
    where = "" if position is None else f" (position {position})"
    return TypeError(f"{op}(): argument '{param}'{where} must be {expected}, not "
                     f"{_type_name(value)}")


def _checker(op: str, params: Sequence[str], numbers_ok: Sequence[str], first: int,
             offset: int, optional: Sequence[str] = ()
             ) -> Callable[[tuple[Any, ...], dict[str, Any]], None]:
    """Checks ``args[first:len(params)]`` and the same names given by keyword; an argument's
    reported position is its index plus ``offset``. ``optional`` parameters may be None."""
    accepts = [(Tensor, _NUMBER) if p in numbers_ok else
               (Tensor, type(None)) if p in optional else (Tensor,) for p in params]
    count = len(params)

    def check(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        for i in range(first, builtins.min(count, len(args))):
            value = args[i]
            if type(value) is not Tensor and not isinstance(value, accepts[i]):
                raise must_be(op, params[i], i + offset, "Tensor", value)
        if kwargs:
            for i in range(first, count):
                value = kwargs.get(params[i], Tensor)
                if value is not Tensor and not isinstance(value, accepts[i]):
                    raise must_be(op, params[i], None, "Tensor", value)

    return check


def function(fn: Callable[..., Any], op: str, *params: str, numbers_ok: Sequence[str] = (),
             optional: Sequence[str] = ()) -> Callable[..., Any]:
    """``fn`` as ``torch.<op>``: its leading parameters ``params`` (PyTorch's names) must be
    tensors (or numbers, for those in ``numbers_ok``; or None, for those in ``optional``)."""
    check = _checker(op, params, numbers_ok, 0, 1, optional)
    if op in OUT_OPS:
        fn = accepting_out(fn, op)

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        check(args, kwargs)
        return fn(*args, **kwargs)

    return checked


def method(fn: Callable[..., Any], op: str, *params: str,
           numbers_ok: Sequence[str] = ()) -> Callable[..., Any]:
    """``fn`` as ``Tensor.<op>``: as :func:`function`, with ``params[0]`` being ``self``."""
    check = _checker(op, params, numbers_ok, 1, 0)

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        check(args, kwargs)
        return fn(*args, **kwargs)

    return checked


class Overload:
    """One signature as PyTorch prints it (``"Tensor input, Number other"``).

    ``explained``: whether PyTorch adds the line marking the mismatched arguments under it
    (it does for signatures without an ``out`` argument, including the hidden one of methods
    that return several tensors, such as ``max(int dim)``).
    """

    __slots__ = ("text", "types", "names", "optional", "explained")

    def __init__(self, text: str, explained: bool) -> None:
        self.text = text
        self.explained = explained
        positional = text.split(", *")[0]
        items = [p for p in positional.split(", ") if p]
        self.types = [p.split(" ")[0] for p in items]
        self.names = [p.split(" ")[1] for p in items]
        self.optional = [" = " in p for p in items]

    def _fits(self, i: int, value: Any) -> bool:
        kind = self.types[i]
        if value is None and self.optional[i]:
            return True
        if kind == "Tensor":
            return isinstance(value, Tensor)
        if kind == "Number":
            return isinstance(value, _NUMBER) and not isinstance(value, Tensor)
        if kind == "int":
            return isinstance(value, int)
        return isinstance(value, bool)

    def plausible(self, count: int) -> bool:
        """Whether ``count`` positional arguments fit this signature's arity."""
        return builtins.sum(1 for o in self.optional if not o) <= count <= len(self.types)

    def matches(self, args: Sequence[Any]) -> bool:
        return self.plausible(len(args)) and builtins.all(
            self._fits(i, a) for i, a in enumerate(args))

    def mismatch(self, op: str, args: Sequence[Any]) -> TypeError:
        """The error for the first argument this (only plausible) signature refuses."""
        i = next(i for i, a in enumerate(args) if not self._fits(i, a))
        return must_be(op, self.names[i], i + 1, self.types[i], args[i])

    def marks(self, args: Sequence[Any]) -> str:
        # PyTorch marks every argument except a tensor given for a required Tensor parameter
        # (by type name: a Parameter is marked too), and spells out tuples' element types.
        out = []
        for i, a in enumerate(args):
            plain = (i < len(self.types) and self.types[i] == "Tensor" and not self.optional[i]
                     and _type_name(a) == "Tensor")
            out.append(_type_name(a) if plain else f"!{_mark_name(a)}!")
        return ", ".join(out)


def _mark_name(value: Any) -> str:
    if isinstance(value, tuple):
        return f"tuple of ({', '.join(_type_name(v) for v in value)})"
    return _type_name(value)


def invalid_combination(op: str, args: Sequence[Any], options: Sequence[Overload]) -> TypeError:
    """PyTorch's error when no signature of an overloaded op takes ``args``."""
    lines = [f"{op}() received an invalid combination of arguments - got "
             f"({', '.join(_type_name(a) for a in args)}), but expected one of:"]
    for option in options:
        lines.append(f" * ({option.text})")
        if option.explained:
            lines.append("      didn't match because some of the arguments have invalid types: "
                         f"({option.marks(args)})")
    return TypeError("\n".join(lines) + "\n")


def overloaded(fn: Callable[..., Any], op: str, options: Sequence[tuple[str, bool]],
               skip: int = 0) -> Callable[..., Any]:
    """``fn`` checked against several signatures (``(text, explained)`` pairs); ``skip`` is 1
    for a method, whose ``self`` the signatures leave out. Calls with keyword arguments are
    passed through unchecked, and so are calls no signature fits by arity (Python's own
    error for the wrong number of arguments comes from ``fn``)."""
    parsed = [Overload(text, explained) for text, explained in options]
    if op in OUT_OPS and not skip:
        fn = accepting_out(fn, op)

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        if not kwargs:
            given = args[skip:]
            if not builtins.any(o.matches(given) for o in parsed):
                plausible = [o for o in parsed if o.plausible(len(given))]
                if not plausible:
                    return fn(*args, **kwargs)
                if len(plausible) == 1:
                    # PyTorch names the argument when only one signature has this arity.
                    raise plausible[0].mismatch(op, given)
                raise invalid_combination(op, given, parsed)
        return fn(*args, **kwargs)

    return checked


def _tensor_list(fn: Callable[..., Any], op: str) -> Callable[..., Any]:
    """``cat``/``stack``: a sequence of tensors, each checked by its place in the list."""
    fn = accepting_out(fn, op)

    @functools.wraps(fn)
    def checked(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(tensors, (list, tuple)):
            raise must_be(op, "tensors", 1, "tuple of Tensors", tensors)
        for i, t in enumerate(tensors):
            if not isinstance(t, Tensor):
                raise TypeError(f"expected Tensor as element {i} in argument 0, but got "
                                f"{_type_name(t)}")
        return fn(tensors, *args, **kwargs)

    return checked


# ------------------------------------------------------------------ the signatures

_OUT = ", *, Tensor out = None"
_BINARY = ("input", "other")
_NUMBER_OTHER = {"numbers_ok": ("other",)}

abs = function(F.abs, "abs", "input")  # noqa: A001 - PyTorch's name
chunk = function(F.chunk, "chunk", "input")
diagonal = function(F.diagonal, "diagonal", "input")
median = function(F.median, "median", "input")
nanmedian = function(F.nanmedian, "nanmedian", "input")
trace = function(F.trace, "trace", "input")
atan2 = function(F.atan2, "atan2", *_BINARY)
masked_fill = function(F.masked_fill, "masked_fill", "input", "mask")
gather = function(F.gather, "gather", "input")
argmin = function(F.argmin, "argmin", "input")
isin = F.isin
var_mean = function(F.var_mean, "var_mean", "input")
std_mean = function(F.std_mean, "std_mean", "input")
narrow = function(F.narrow, "narrow", "input")
sgn = function(F.sgn, "sgn", "input")
unsafe_split = function(F.unsafe_split, "unsafe_split", "input")
split = F.split  # a Python function in PyTorch too (torch.functional.split)
argmax = function(F.argmax, "argmax", "input")
all = function(F.all, "all", "input")  # noqa: A001 - PyTorch's name
any = function(F.any, "any", "input")  # noqa: A001 - PyTorch's name
clone = function(F.clone, "clone", "input")
conj = function(F.conj, "conj", "input")
cos = function(F.cos, "cos", "input")
detach = function(F.detach, "detach", "input")
exp = function(F.exp, "exp", "input")
flatten = function(F.flatten, "flatten", "input")
log = function(F.log, "log", "input")
log_softmax = function(F.log_softmax, "log_softmax", "input")
logical_not = function(F.logical_not, "logical_not", "input")
mean = function(F.mean, "mean", "input")
neg = function(F.neg, "neg", "input")
permute = function(F.permute, "permute", "input")
real = function(F.real, "real", "input")
reciprocal = function(F.reciprocal, "reciprocal", "input")
relu = function(F.relu, "relu", "input")
reshape = function(F.reshape, "reshape", "input")
select = function(F.select, "select", "input")
sigmoid = function(F.sigmoid, "sigmoid", "input")
sign = function(F.sign, "sign", "input")
sin = function(F.sin, "sin", "input")
softmax = function(F.softmax, "softmax", "input")
sqrt = function(F.sqrt, "sqrt", "input")
squeeze = function(F.squeeze, "squeeze", "input")
sum = function(F.sum, "sum", "input")  # noqa: A001 - PyTorch's name
t = function(F.t, "t", "input")
tanh = function(F.tanh, "tanh", "input")
transpose = function(F.transpose, "transpose", "input")
unbind = function(F.unbind, "unbind", "input")
unsqueeze = function(F.unsqueeze, "unsqueeze", "input")
add = function(F.add, "add", *_BINARY, **_NUMBER_OTHER)
sub = function(F.sub, "sub", *_BINARY, **_NUMBER_OTHER)
mul = function(F.mul, "mul", *_BINARY, **_NUMBER_OTHER)
div = function(F.div, "div", *_BINARY, **_NUMBER_OTHER)
matmul = function(F.matmul, "matmul", *_BINARY)
mm = function(F.mm, "mm", "input", "mat2")
dot = function(F.dot, "dot", "input", "tensor")
mv = function(F.mv, "mv", "input", "vec")
addmm = function(F.addmm, "addmm", "input", "mat1", "mat2")
maximum = function(F.maximum, "maximum", *_BINARY)
minimum = function(F.minimum, "minimum", *_BINARY)
relu_ = function(inplace.relu_, "relu_", "input")
zeros_like = function(_creation.zeros_like, "zeros_like", "input")
ones_like = function(_creation.ones_like, "ones_like", "input")
empty_like = function(_creation.empty_like, "empty_like", "input")
full_like = function(_creation.full_like, "full_like", "input")
rand_like = function(_creation.rand_like, "rand_like", "input")
randn_like = function(_creation.randn_like, "randn_like", "input")
cat = _tensor_list(F.cat, "cat")
# Functions without a binding check of their own that take out= all the same.
amax, amin, ceil, floor, nan_to_num, round, trunc = (  # noqa: A001 - PyTorch's names
    accepting_out(getattr(F, name), name)
    for name in ("amax", "amin", "ceil", "floor", "nan_to_num", "round", "trunc"))
stack = _tensor_list(F.stack, "stack")
true_divide = overloaded(F.div, "true_divide", [
    ("Tensor input, Tensor other" + _OUT, False), ("Tensor input, Number other", True)])
rsub = overloaded(F.rsub, "rsub", [
    ("Tensor input, Tensor other, *, Number alpha = 1", False),
    ("Tensor input, Number other, Number alpha = 1", False)])
pow = overloaded(F.pow, "pow", [  # noqa: A001 - PyTorch's name
    ("Tensor input, Tensor exponent" + _OUT, False),
    ("Number self, Tensor exponent" + _OUT, False),
    ("Tensor input, Number exponent" + _OUT, False)])
where = overloaded(F.where, "where", [
    ("Tensor condition", False), ("Tensor condition, Tensor input, Tensor other" + _OUT, False),
    ("Tensor condition, Number self, Tensor other", True),
    ("Tensor condition, Tensor input, Number other", True),
    ("Tensor condition, Number self, Number other", True)])
_CLAMP = [("Tensor input, Tensor min = None, Tensor max = None" + _OUT, False),
          ("Tensor input, Number min = None, Number max = None" + _OUT, False)]
clamp = overloaded(F.clamp, "clamp", _CLAMP)
clip = overloaded(F.clamp, "clip", _CLAMP)
_REDUCE = [("Tensor input" + _OUT, False), ("Tensor input, Tensor other" + _OUT, False),
           ("Tensor input, int dim, bool keepdim = False, *, tuple of Tensors out = None", False)]
max = overloaded(F.max, "max", _REDUCE)  # noqa: A001 - PyTorch's name
min = overloaded(F.min, "min", _REDUCE)  # noqa: A001 - PyTorch's name
_COMPARE = [("Tensor input, Tensor other" + _OUT, False),
            ("Tensor input, Number other" + _OUT, False)]
eq = overloaded(F.eq, "eq", _COMPARE)
ne = overloaded(F.ne, "ne", _COMPARE)
lt = overloaded(F.lt, "lt", _COMPARE)
le = overloaded(F.le, "le", _COMPARE)
gt = overloaded(F.gt, "gt", _COMPARE)
ge = overloaded(F.ge, "ge", _COMPARE)

_TENSOR_OR_NUMBER = [("Tensor {}", True), ("Number {}", True)]


def _either(param: str) -> list[tuple[str, bool]]:
    return [(text.format(param), explained) for text, explained in _TENSOR_OR_NUMBER]


_CLAMP_METHOD = [("Tensor min = None, Tensor max = None", True),
                 ("Number min = None, Number max = None", True)]


def _bind_methods() -> None:
    methods: dict[str, Callable[..., Any]] = {
        name: method(getattr(Tensor, name), name, "self", "other", **_NUMBER_OTHER)
        for name in ("add", "sub", "mul", "div", "add_", "sub_", "mul_", "div_", "copy_")}
    methods.update({
        name: method(getattr(Tensor, name), name, "self", "other")
        for name in ("matmul", "maximum", "minimum", "expand_as", "view_as", "reshape_as")})
    methods.update({
        "mm": method(Tensor.mm, "mm", "self", "mat2"),
        "dot": method(Tensor.dot, "dot", "self", "tensor"),
        "mv": method(Tensor.mv, "mv", "self", "vec"),
        "addmm": method(Tensor.addmm, "addmm", "self", "mat1", "mat2"),
        "pow": overloaded(Tensor.pow, "pow", _either("exponent"), skip=1),
        "pow_": overloaded(Tensor.pow_, "pow_", _either("exponent"), skip=1),
        "true_divide": overloaded(Tensor.true_divide, "true_divide", _either("other"), skip=1),
        "fill_": overloaded(Tensor.fill_, "fill_", _either("value"), skip=1),
        "where": overloaded(Tensor.where, "where", [
            ("Tensor condition, Tensor other", True), ("Tensor condition, Number other", True)],
            skip=1),
        "clamp": overloaded(Tensor.clamp, "clamp", _CLAMP_METHOD, skip=1),
        "clip": overloaded(Tensor.clip, "clip", _CLAMP_METHOD, skip=1),
        "clamp_": overloaded(Tensor.clamp_, "clamp_", _CLAMP_METHOD, skip=1),
    })
    for name in ("max", "min"):
        methods[name] = overloaded(getattr(Tensor, name), name, [
            ("", True), ("Tensor other", True), ("int dim, bool keepdim = False", False)],
            skip=1)
    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        methods[name] = overloaded(getattr(Tensor, name), name, _either("other"), skip=1)
    for name, fn in methods.items():
        setattr(Tensor, name, fn)


_bind_methods()
