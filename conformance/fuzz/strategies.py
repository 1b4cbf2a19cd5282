"""Hypothesis strategies that draw autograd programs in the case language.

    >>> from hypothesis import given
    >>> @given(programs())
    ... def test_runs(program):
    ...     ...

A program is a few steps. Each step is zero to three forward statements (leaves, elementwise
ops with broadcasting, reductions, matmul, views, cat/stack, detach/clone, module calls),
optionally inside a grad-mode region, followed by at most one statement that may raise on
purpose (an in-place op, `backward`, `autograd.grad`, a flag toggle): an error skips the rest of
its step, so it must come last. The generator tracks each tensor's shape, dtype and a rough
value range, so almost every statement is valid and `log`/`sqrt`/division only see positive
data (NaN then means a real difference); whether a statement raises is left to the engines.

The op table follows `spec/api.yaml`: the tensor methods, `torch.*`, `F.*` and `nn.*` ops
listed there are drawn (not Dropout, whose mask comes from the engine's own generator, nor
`argmax`, `half` and `empty`: integer, float16 and uninitialised data need checks of their own),
and an op whose name is missing there is left out, so every program passes the loader's check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TypeVar

from hypothesis import strategies as st

from conformance.api import Api
from conformance.fuzz.differential import FUZZ_TOLERANCES, least_precise
from conformance.fuzz.program import Program, ProgramStep
from conformance.loader import DEFAULT_SPEC_DIR, SpecResources

FAMILIES = ("inplace", "create_graph", "modules", "conv", "batchnorm", "hooks", "node_hooks",
            "custom_function", "inference_mode", "saved_tensor_hooks", "ops_more")
"""Program families that need a feature an engine may lack; all are drawn by default. Each is
named after its feature in spec/features.yaml, except `ops_more` (narrow, split, chunk, sgn,
median, diagonal, repeat: ops rather than a feature, which an engine with a fixed feature list
is not assumed to have)."""
DTYPES = ("float32", "float64")
MAX_STEPS = 6
MAX_BOUND = 1e6
"""Ops that would push a tensor's estimated magnitude past this are not drawn (no overflow)."""
DEFAULT_EPS = 1e-5
"""BatchNorm's default eps."""
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float64": 2.0 ** -53}
TENSOR_OBSERVATIONS = ("{v}", "{v}.requires_grad", "{v}.is_leaf", "graph({v})", "{v}.grad",
                       "{v}.retains_grad")


@dataclass
class TensorVar:
    """What the generator believes about a tensor it bound (the engines decide the truth)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    requires_grad: bool
    leaf: bool
    bound: float
    """An upper estimate of the largest absolute value."""
    positive: bool
    """Every value is > 0 (safe for log, sqrt and as a divisor)."""
    contiguous: bool = True
    view_of: str | None = None
    precision: str = ""
    """The least precise float dtype its values were computed in (default: its dtype). A
    float32 result moved to float64 keeps float32 here: the comparison's tolerance follows it."""
    inference: bool = False
    """Made in an inference-mode region (an inference tensor, or a view the generator treats
    as one)."""

    def __post_init__(self) -> None:
        self.precision = self.precision or self.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass
class ModuleVar:
    name: str
    kind: str
    dtype: str
    in_size: int
    """in_features (Linear), in_channels (Conv2d) or num_features (BatchNorm)."""
    size: int
    """out_features (Linear), kernel_size (Conv2d), 0 (BatchNorm)."""
    training: bool = True
    eps: float = DEFAULT_EPS
    """BatchNorm's eps (see `batchnorm_eps`)."""
    precision: str = ""
    """The least precise float dtype of the inputs it was called on (its running stats carry
    their rounding; default: its dtype)."""

    def __post_init__(self) -> None:
        self.precision = self.precision or self.dtype


@dataclass
class _State:
    api: Api
    families: frozenset[str]
    tensors: list[TensorVar] = field(default_factory=list)
    modules: list[ModuleVar] = field(default_factory=list)
    features: set[str] = field(default_factory=set)
    counter: int = 0
    grad_enabled: bool = True
    inference: bool = False
    """Inside an inference-mode region."""
    handles: list[str] = field(default_factory=list)
    """Hook handles not removed yet."""
    functions: set[str] = field(default_factory=set)
    """The custom Functions of `FUNCTIONS` defined so far."""
    calls: bool = False
    """Whether `calls`, the list hooks append to, is defined (then it is observed)."""
    inference_used: bool = False
    saved_hooks: bool = False
    """Inside a saved_tensors_hooks region."""

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def allows(self, *names: str) -> bool:
        """Whether api.yaml lists every name (`torch.cat`, `nn.Linear`, or an attribute)."""
        for name in names:
            section, _, member = name.rpartition(".")
            if section:
                namespace = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional"}.get(
                    section, section)
                if member not in self.api.namespaces.get(namespace, frozenset()):
                    return False
            elif name not in self.api.attributes:
                return False
        return True

    def lowest_precision(self) -> str:
        """The least precise dtype of any tensor so far: what gradients are computed in.

        A gradient flows back through every tensor downstream of its input, which the generator
        does not track; the least precise dtype of the whole program bounds them all.
        """
        return least_precise(*(t.dtype for t in self.tensors)) if self.tensors else "float64"

    def add(self, var: TensorVar) -> TensorVar:
        # Without grad mode an op's result is a leaf that does not require grad; a factory
        # called with requires_grad=True still makes a leaf that requires it.
        if not self.grad_enabled and not var.leaf:
            var = replace(var, requires_grad=False, leaf=True)
        if self.inference:
            var.inference = True
        self.tensors.append(var)
        return var

    def operands(self) -> list[TensorVar]:
        """The tensors a forward statement may take without raising.

        Outside inference mode, with grad mode on, an op that records a node raises when it
        would save an inference tensor: those meet only the statements that may raise.
        """
        if self.inference or not self.grad_enabled or not self.inference_used:
            return self.tensors
        return [t for t in self.tensors if not t.inference]

    def recorder(self) -> str:
        """`calls = []` the first time a hook needs the list, else nothing."""
        if self.calls:
            return ""
        self.calls = True
        return "calls = []\n"


T = TypeVar("T")
Draw = Callable[[st.SearchStrategy], object]
Op = Callable[[Draw, _State], "str | None"]


@lru_cache(maxsize=1)
def default_api() -> Api:
    """The vocabulary of `spec/api.yaml` in this checkout."""
    resources = SpecResources.load(DEFAULT_SPEC_DIR)
    if resources.api is None:
        raise RuntimeError(f"cannot read {DEFAULT_SPEC_DIR / 'api.yaml'}: "
                           f"{'; '.join(map(str, resources.problems))}")
    return resources.api


def _dtype_kw(dtype: str) -> str:
    return "" if dtype == "float32" else ", dtype=torch.float64"


def _shape_args(shape: tuple[int, ...]) -> str:
    return ", ".join(map(str, shape)) if shape else "()"


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    out = []
    for x, y in zip(reversed((1,) * (len(b) - len(a)) + a),
                    reversed((1,) * (len(a) - len(b)) + b), strict=True):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return tuple(reversed(out))


def _promote(*dtypes: str) -> str:
    return "float64" if "float64" in dtypes else "float32"


def _direct(strategy: st.SearchStrategy[T]) -> st.SearchStrategy[T]:
    """The strategy a lazy one (what `st.integers()` returns) stands for.

    Every draw from a lazy strategy looks its target up again in a thread-local cache; a
    program takes a few hundred draws, and that lookup was a tenth of the fuzzer's time.
    """
    return getattr(strategy, "wrapped_strategy", strategy)


# Strategies are built once and reused: building one per draw costs more than the draw.
BOOL = _direct(st.booleans())


@lru_cache(maxsize=256)
def _between(low: int, high: int) -> st.SearchStrategy[int]:
    return _direct(st.integers(low, high))


def _index(n: int) -> st.SearchStrategy[int]:
    """`integers(0, n - 1)`."""
    return _between(0, n - 1)


def _choice(draw: Draw, items: Sequence[T]) -> T:
    return items[draw(_index(len(items)))] if len(items) > 1 else items[0]


def _pick(draw: Draw, items: Iterable[T]) -> T | None:
    items = list(items)
    return _choice(draw, items) if items else None


def _derived(state: _State, inputs: Iterable[TensorVar], shape: tuple[int, ...], dtype: str,
             bound: float, positive: bool, **extra: object) -> TensorVar:
    inputs = list(inputs)
    requires_grad = any(t.requires_grad for t in inputs)
    precision = least_precise(dtype, *(t.precision for t in inputs))
    return state.add(TensorVar(state.fresh(), shape, dtype, requires_grad, not requires_grad,
                               bound, positive, precision=precision, **extra))


# Leaves ------------------------------------------------------------------------------------

def leaf(draw: Draw, state: _State, base: tuple[int, ...]) -> str:
    """A new leaf whose shape is a suffix of `base`, some dims set to 1 (so shapes broadcast)."""
    # Counted down from the full shape: unbiased draws would make most leaves 0-d.
    ndim = len(base) - draw(_between(0, len(base)))
    shape = tuple(_choice(draw, (n, 1)) if n != 1 else 1 for n in base[len(base) - ndim:])
    dtype = _choice(draw, DTYPES)
    requires_grad = draw(BOOL)
    kind = _choice(draw, ("rand", "randn", "ones", "tensor", "zeros", "full", "like"))
    name = state.fresh()
    flag = ", requires_grad=True" if requires_grad else ""
    like = _pick(draw, (t for t in state.tensors if t.shape == shape and t.dtype == dtype))
    factories = ("torch.ones_like", "torch.zeros_like", "torch.rand_like")
    if kind == "like" and like is not None and state.allows(*factories):
        # The *_like factories take dtype and shape from the model tensor, never its grad state.
        factory = _choice(draw, factories)
        text = f"{name} = {factory}({like.name}{flag})"
        bound, positive = 1.0, factory != "torch.zeros_like"
    elif kind == "full" and state.allows("torch.full"):
        value = _choice(draw, (0.5, -1.5))
        text = f"{name} = torch.full({shape!r}, {value}{_dtype_kw(dtype)}{flag})"
        bound, positive = abs(value), value > 0
    elif kind == "zeros" and state.allows("torch.zeros"):
        text = f"{name} = torch.zeros({_shape_args(shape)}{_dtype_kw(dtype)}{flag})"
        bound, positive = 0.0, False
    elif kind not in ("rand", "randn", "ones") or not shape and kind == "ones":
        number = _choice(draw, (1.5, 0.5, -2.0, 3.0))
        data = number
        for n in reversed(shape):
            data = [data] * n
        text = f"{name} = torch.tensor({data!r}{_dtype_kw(dtype)}{flag})"
        bound, positive = abs(number), number > 0
    else:
        text = f"{name} = torch.{kind}({_shape_args(shape)}{_dtype_kw(dtype)}{flag})"
        bound, positive = {"rand": (1.0, True), "randn": (5.0, False), "ones": (1.0, True)}[kind]
    state.add(TensorVar(name, shape, dtype, requires_grad, True, bound, positive))
    return text


# Forward ops -------------------------------------------------------------------------------

def _positive_form(t: TensorVar) -> tuple[str, float]:
    """An expression for `t` that is strictly positive, with its bound."""
    return (t.name, t.bound) if t.positive else (f"({t.name}.abs() + 0.5)", t.bound + 0.5)


def unary(draw: Draw, state: _State) -> str | None:
    t = _pick(draw, state.operands())
    if t is None:
        return None
    choices = [
        ("neg", f"{t.name}.neg()", t.bound, False),
        ("abs", f"{t.name}.abs()", t.bound, False),
        ("torch.tanh", f"torch.tanh({t.name})", 1.0, False),
        ("sigmoid", f"{t.name}.sigmoid()", 1.0, True),
        ("torch.sin", f"torch.sin({t.name})", 1.0, False),
        ("cos", f"{t.name}.cos()", 1.0, False),
        ("relu", f"{t.name}.relu()", t.bound, False),
        ("clamp", f"{t.name}.clamp(-0.5, 0.5)", 0.5, False),
        (None, f"{t.name} * 2.5", t.bound * 2.5, t.positive),
        (None, f"{t.name} + 1.5", t.bound + 1.5, False),
        (None, f"2.0 - {t.name}", t.bound + 2.0, False),
        (None, f"{t.name} / 4.0", t.bound / 4.0, t.positive),
        ("pow", f"{t.name}.pow(2)", t.bound ** 2, False),
        ("torch.abs", f"torch.abs({t.name})", t.bound, False),
        ("torch.relu", f"torch.relu({t.name})", t.bound, False),
        ("F.relu", f"F.relu({t.name})", t.bound, False),
        ("F.sigmoid", f"F.sigmoid({t.name})", 1.0, True),
        ("torch.sigmoid", f"torch.sigmoid({t.name})", 1.0, True),
        ("clamp", f"{t.name}.clamp(min=0.25)", t.bound + 0.25, True),
        ("torch.sum", f"torch.sum({t.name})", t.bound * math.prod(t.shape), t.positive),
        ("torch.mean", f"torch.mean({t.name})", t.bound, t.positive),
    ]
    # Softmax subtracts the largest value: beyond ~100 the rounding of that difference (an ulp
    # of the bound) is larger than the tolerance allows for log_softmax's small outputs.
    if t.ndim >= 1 and t.bound <= 100:
        dim = draw(_between(-t.ndim, t.ndim - 1))
        choices += [
            ("softmax", f"{t.name}.softmax(dim={dim})", 1.0, True),
            ("torch.softmax", f"torch.softmax({t.name}, dim={dim})", 1.0, True),
            ("F.log_softmax", f"F.log_softmax({t.name}, dim={dim})", t.bound * 2 + 2.0, False),
            ("log_softmax", f"{t.name}.log_softmax({dim})", t.bound * 2 + 2.0, False),
        ]
    if t.bound <= 10:
        choices += [("exp", f"{t.name}.exp()", math.exp(t.bound), True),
                    ("torch.exp", f"torch.exp({t.name})", math.exp(t.bound), True),
                    (None, f"2.0 ** {t.name}", 2.0 ** t.bound, True)]
    positive, pbound = _positive_form(t)
    choices += [
        ("torch.log", f"torch.log({positive})", max(20.0, math.log(pbound)), False),
        ("sqrt", f"{positive}.sqrt()", math.sqrt(pbound), True),
        ("pow", f"{positive}.pow(1.5)", pbound ** 1.5, True),
    ]
    # The first item names what api.yaml must list for the form (None: an operator).
    choices = [c for c in choices
               if c[2] <= MAX_BOUND and (c[0] is None or state.allows(c[0]))]
    if not choices:
        return None
    name, text, bound, is_positive = _choice(draw, choices)
    shape = () if name in ("torch.sum", "torch.mean") else t.shape
    out = _derived(state, [t], shape, t.dtype, bound, is_positive)
    return f"{out.name} = {text}"


def binary(draw: Draw, state: _State) -> str | None:
    a = _pick(draw, state.operands())
    if a is None:
        return None
    b = _pick(draw, (t for t in state.operands() if _broadcast(a.shape, t.shape) is not None))
    shape = _broadcast(a.shape, b.shape)
    # A 0-d operand does not promote a dimensioned one of the same kind (float32 (2,) +
    # float64 () is float32).
    dtype = _promote(*([t.dtype for t in (a, b) if t.ndim] or [a.dtype, b.dtype]))
    positive, pbound = _positive_form(b)
    choices = [
        (None, f"{a.name} + {b.name}", a.bound + b.bound, a.positive and b.positive),
        (None, f"{a.name} - {b.name}", a.bound + b.bound, False),
        (None, f"{a.name} * {b.name}", a.bound * b.bound, a.positive and b.positive),
        ("add", f"{a.name}.add({b.name})", a.bound + b.bound, a.positive and b.positive),
        ("mul", f"{a.name}.mul({b.name})", a.bound * b.bound, a.positive and b.positive),
        (None, f"{a.name} / {positive}", a.bound * 2.0, a.positive),
        ("torch.where", f"torch.where({a.name} > 0.5, {a.name}, {b.name})",
         max(a.bound, b.bound), a.positive and b.positive),
        ("sub", f"{a.name}.sub({b.name})", a.bound + b.bound, False),
        ("div", f"{a.name}.div({positive})", a.bound * 2.0, a.positive),
        ("torch.maximum", f"torch.maximum({a.name}, {b.name})", max(a.bound, b.bound),
         a.positive or b.positive),
        ("torch.minimum", f"torch.minimum({a.name}, {b.name})", max(a.bound, b.bound),
         a.positive and b.positive),
    ]
    if b.bound <= 3:
        # A tensor exponent (PowBackward1) on a base kept positive and away from 0.
        base, base_bound = _positive_form(a)
        choices.append(("pow", f"{base}.pow({b.name})", max(base_bound, 2.0) ** b.bound, True))

    if a.shape == b.shape:
        # Losses reduce to a scalar (mean by default); shapes must agree or they warn.
        choices += [
            ("F.mse_loss", f"F.mse_loss({a.name}, {b.name})", (a.bound + b.bound) ** 2, False),
            ("F.l1_loss", f"F.l1_loss({a.name}, {b.name})", a.bound + b.bound, False),
        ]
        if "modules" in state.families:
            choices += [
                ("nn.MSELoss", f"nn.MSELoss(reduction='sum')({a.name}, {b.name})",
                 (a.bound + b.bound) ** 2 * math.prod(a.shape), False),
                ("nn.L1Loss", f"nn.L1Loss()({a.name}, {b.name})", a.bound + b.bound, False),
            ]
    # The first item names what api.yaml must list for the form (None: an operator).
    choices = [c for c in choices
               if c[2] <= MAX_BOUND and (c[0] is None or state.allows(c[0]))]
    if not choices:
        return None
    name, text, bound, is_positive = _choice(draw, choices)
    if name is not None and "loss" in name.lower():
        shape = ()
        if name.startswith("nn."):
            state.features.add("modules")
    out = _derived(state, [a, b], shape, dtype, bound, is_positive)
    return f"{out.name} = {text}"


def reduction(draw: Draw, state: _State) -> str | None:
    t = _pick(draw, state.operands())
    if t is None:
        return None
    kind = _choice(draw, ("sum", "mean", "max", "min"))
    if not state.allows(kind):
        return None
    # Over a dim two times in three: those have the richer backward (SumBackward1, indices).
    if t.ndim == 0 or draw(_index(3)) == 0:
        text, shape = f"{t.name}.{kind}()", ()
    else:
        dim = draw(_between(-t.ndim, t.ndim - 1))
        keepdim = draw(BOOL)
        keep = ", keepdim=True" if keepdim else ""
        shape = tuple(1 if i == dim % t.ndim else n for i, n in enumerate(t.shape)) if keepdim \
            else tuple(n for i, n in enumerate(t.shape) if i != dim % t.ndim)
        if kind in ("max", "min"):
            text = f"{t.name}.{kind}(dim={dim}{keep})[0]"
        elif kind == "sum" and t.ndim >= 2 and not keepdim and draw(BOOL):
            text = f"{t.name}.sum(dim=(0, -1))"
            shape = tuple(t.shape[1:-1])
        else:
            text = f"{t.name}.{kind}(dim={dim}{keep})"
    bound = t.bound * math.prod(t.shape) if kind == "sum" else t.bound
    out = _derived(state, [t], shape, t.dtype, bound, t.positive and kind != "min")
    return f"{out.name} = {text}"


def matmul(draw: Draw, state: _State) -> str | None:
    a = _pick(draw, (t for t in state.operands() if t.ndim in (1, 2)))
    if a is None:
        return None
    bias: TensorVar | None = None
    k = a.shape[-1]
    partners = [t for t in state.operands()
                if t.ndim in (1, 2) and t.dtype == a.dtype and t.shape[0] == k]
    prelude = ""
    b = _pick(draw, partners) if partners and draw(BOOL) else None
    if b is None:
        n = _choice(draw, (None, 2, 3))
        shape = (k,) if n is None else (k, n)
        b = state.add(TensorVar(state.fresh(), shape, a.dtype, draw(BOOL), True, 1.0,
                                True))
        flag = ", requires_grad=True" if b.requires_grad else ""
        prelude = f"{b.name} = torch.rand({_shape_args(shape)}{_dtype_kw(a.dtype)}{flag})\n"
    shape = a.shape[:-1] + b.shape[1:]
    inputs, bound = [a, b], a.bound * b.bound * k
    forms = [("torch.matmul", f"torch.matmul({a.name}, {b.name})")]
    if a.ndim == b.ndim == 1:
        forms.append(("dot", f"{a.name}.dot({b.name})"))
    elif a.ndim == 2 and b.ndim == 1:
        forms.append(("mv", f"{a.name}.mv({b.name})"))
    elif a.ndim == b.ndim == 2:
        forms += [("mm", f"{a.name}.mm({b.name})"),
                  ("F.linear", f"F.linear({a.name}, {b.name}.t())")]
        # addmm's first operand broadcasts to the product's shape.
        bias = _pick(draw, (t for t in state.operands()
                            if t.dtype == a.dtype and _broadcast(shape, t.shape) == shape))
        if bias is not None:
            forms.append(("torch.addmm", f"torch.addmm({bias.name}, {a.name}, {b.name})"))
            if bias.ndim == 1:
                forms.append(("F.linear", f"F.linear({a.name}, {b.name}.t(), {bias.name})"))
    forms = [f for f in forms if state.allows(f[0])]
    if not forms:
        return None
    call = _choice(draw, forms)[1]
    if bias is not None and bias.name + ")" in call:
        inputs, bound = [a, b, bias], bound + bias.bound
    out = _derived(state, inputs, shape, a.dtype, bound, a.positive and b.positive)
    return f"{prelude}{out.name} = {call}"


def view(draw: Draw, state: _State) -> str | None:
    t = _pick(draw, state.operands())
    if t is None:
        return None
    # Only the kinds that apply to `t`: a draw that comes to nothing is a wasted view.
    kinds = [k for k, applies in _VIEW_APPLIES.items()
             if (k == "slice" or state.allows(k)) and applies(t)]
    if state.allows("contiguous"):
        kinds.append("contiguous")
    if t.ndim >= 1:
        kinds.append("iterate")
    kind = _choice(draw, kinds)
    if kind == "contiguous":
        return _contiguous(state, t)
    if kind == "iterate":
        # Unpacking a tensor iterates over dim 0 (`unbind`): views sharing one UnbindBackward0
        # that in-place ops must refuse.
        names = [_derived(state, [t], t.shape[1:], t.dtype, t.bound, t.positive,
                          contiguous=t.contiguous, view_of=t.view_of or t.name).name
                 for _ in range(t.shape[0])]
        return f"{', '.join(names)}{',' if len(names) == 1 else ''} = {t.name}"
    made = _VIEWS[kind](draw, t)
    if made is None:
        return None
    text, shape, contiguous = made
    out = _derived(state, [t], shape, t.dtype, t.bound, t.positive, contiguous=contiguous,
                   view_of=t.view_of or t.name)
    return f"{out.name} = {text}"


def _alias(state: _State, t: TensorVar) -> str:
    """A new name for the very tensor `t` (methods that return self)."""
    alias = replace(t, name=state.fresh())
    state.tensors.append(alias)
    return alias.name


def _contiguous(state: _State, t: TensorVar) -> str:
    # A contiguous tensor comes back as itself (same object, leaf or not); any other is copied
    # into a new non-view tensor (CloneBackward0 when it requires grad).
    name = _alias(state, t) if t.contiguous \
        else _derived(state, [t], t.shape, t.dtype, t.bound, t.positive).name
    return f"{name} = {t.name}.contiguous()"


ViewResult = tuple[str, tuple[int, ...], bool] | None
"""The view's text, its shape, and whether it is contiguous (so `.view` may follow)."""


def _view(draw: Draw, t: TensorVar) -> ViewResult:
    if not t.contiguous:
        return None
    return f"{t.name}.view(-1)", (math.prod(t.shape),), True


def _reshape(draw: Draw, t: TensorVar) -> ViewResult:
    return f"{t.name}.reshape(1, -1)", (1, math.prod(t.shape)), t.contiguous


def _t(draw: Draw, t: TensorVar) -> ViewResult:
    if t.ndim > 2:
        return None
    return f"{t.name}.t()", tuple(reversed(t.shape)), t.ndim < 2


def _transpose(draw: Draw, t: TensorVar) -> ViewResult:
    if t.ndim < 2:
        return None
    d0 = draw(_index(t.ndim - 1))
    d1 = d0 + 1 + draw(_index(t.ndim - 1 - d0))
    shape = list(t.shape)
    shape[d0], shape[d1] = shape[d1], shape[d0]
    return f"{t.name}.transpose({d0}, {d1 - t.ndim})", tuple(shape), False


def _permute(draw: Draw, t: TensorVar) -> ViewResult:
    if t.ndim < 2:
        return None
    order = list(range(t.ndim))
    for i in reversed(range(1, t.ndim)):  # Fisher-Yates, shrinking towards the identity
        j = draw(_index(i + 1))
        order[i], order[j] = order[j], order[i]
    # Negative dims sometimes, and both call forms (varargs and one tuple).
    dims = [d - t.ndim if draw(BOOL) else d for d in order]
    args = ", ".join(map(str, dims)) if draw(BOOL) else repr(tuple(dims))
    return (f"{t.name}.permute({args})", tuple(t.shape[i] for i in order),
            order == sorted(order) and t.contiguous)


def _unsqueeze(draw: Draw, t: TensorVar) -> ViewResult:
    if t.ndim >= 4:
        return None
    dim = draw(_index(2 * t.ndim + 2)) - t.ndim - 1
    shape = list(t.shape)
    shape.insert(dim % (t.ndim + 1), 1)
    return f"{t.name}.unsqueeze({dim})", tuple(shape), t.contiguous


def _squeeze(draw: Draw, t: TensorVar) -> ViewResult:
    if 1 not in t.shape:
        return None
    if draw(BOOL):
        return f"{t.name}.squeeze()", tuple(n for n in t.shape if n != 1), t.contiguous
    dim = t.shape.index(1)
    return f"{t.name}.squeeze({dim})", t.shape[:dim] + t.shape[dim + 1:], t.contiguous


def _expand(draw: Draw, t: TensorVar) -> ViewResult:
    if 1 in t.shape and draw(BOOL):
        shape = tuple(2 + draw(_index(2)) if n == 1 else n for n in t.shape)
        return f"{t.name}.expand({_shape_args(shape)})", shape, False
    if t.ndim >= 4:
        return None
    return f"{t.name}.expand({', '.join(['2'] + ['-1'] * t.ndim)})", (2, *t.shape), False


def _select(draw: Draw, t: TensorVar) -> ViewResult:
    if t.ndim == 0:
        return None
    if t.ndim >= 2 and draw(BOOL):
        index = draw(_index(t.shape[1]))
        return f"{t.name}[:, {index}]", (t.shape[0], *t.shape[2:]), False
    if draw(BOOL):
        dim = draw(_between(-t.ndim, t.ndim - 1))
        index = draw(_index(t.shape[dim]))
        return (f"{t.name}.select({dim}, {index})",
                t.shape[:dim % t.ndim] + t.shape[dim % t.ndim + 1:],
                t.contiguous and all(n == 1 for n in t.shape[:dim % t.ndim]))
    index = draw(_index(2 * t.shape[0])) - t.shape[0]
    return f"{t.name}[{index}]", t.shape[1:], t.contiguous


def _slice(draw: Draw, t: TensorVar) -> ViewResult:
    if t.ndim == 0 or t.shape[0] < 2:
        return None
    if draw(BOOL):
        return f"{t.name}[1:]", (t.shape[0] - 1, *t.shape[1:]), t.contiguous
    return f"{t.name}[::2]", ((t.shape[0] + 1) // 2, *t.shape[1:]), False


_VIEW_APPLIES: dict[str, Callable[[TensorVar], bool]] = {
    "view": lambda t: t.contiguous, "reshape": lambda t: True, "t": lambda t: t.ndim <= 2,
    "transpose": lambda t: t.ndim >= 2, "permute": lambda t: t.ndim >= 2,
    "unsqueeze": lambda t: t.ndim < 4, "squeeze": lambda t: 1 in t.shape,
    "expand": lambda t: 1 in t.shape or t.ndim < 4, "select": lambda t: t.ndim >= 1,
    "slice": lambda t: t.ndim >= 1 and t.shape[0] >= 2,
}
"""When each view applies (the functions below return None otherwise)."""
_VIEWS: dict[str, Callable[[Draw, TensorVar], ViewResult]] = {
    "view": _view, "reshape": _reshape, "t": _t, "transpose": _transpose,
    "permute": _permute, "unsqueeze": _unsqueeze, "squeeze": _squeeze, "expand": _expand,
    "select": _select, "slice": _slice,
}


def join(draw: Draw, state: _State) -> str | None:
    a = _pick(draw, state.operands())
    if a is None:
        return None
    b = _pick(draw, (t for t in state.operands() if t.shape == a.shape))
    kind = _choice(draw, ("cat", "stack"))
    if not state.allows(f"torch.{kind}") or (kind == "cat" and a.ndim == 0):
        return None
    ndim = a.ndim if kind == "cat" else a.ndim + 1
    dim = draw(_between(-ndim, ndim - 1))
    shape = list(a.shape)
    if kind == "cat":
        shape[dim] *= 2
    else:
        shape.insert(dim % ndim, 2)
    out = _derived(state, [a, b], tuple(shape), _promote(a.dtype, b.dtype),
                   max(a.bound, b.bound), a.positive and b.positive)
    return f"{out.name} = torch.{kind}([{a.name}, {b.name}], dim={dim})"


def index(draw: Draw, state: _State) -> str | None:
    """Advanced indexing with a list of ints (repeats allowed): a copy (IndexBackward0)."""
    t = _pick(draw, (t for t in state.operands() if t.ndim >= 1))
    if t is None:
        return None
    dim = draw(_between(0, min(t.ndim, 2) - 1))
    n = t.shape[dim]
    picks = [draw(_between(-n, n - 1)) for _ in range(draw(_between(1, 3)))]
    shape = t.shape[:dim] + (len(picks),) + t.shape[dim + 1:]
    out = _derived(state, [t], shape, t.dtype, t.bound, t.positive)
    return f"{out.name} = {t.name}[{':, ' * dim}{picks}]"


def copy(draw: Draw, state: _State) -> str | None:
    t = _pick(draw, state.operands())
    if t is None:
        return None
    kind = _choice(draw, ("detach", "clone", "data", "double", "float", "to"))
    if kind in ("double", "float", "to") and state.allows(kind):
        # A cast to another dtype copies (ToCopyBackward0); to the same dtype it returns self.
        dtype = {"double": "float64", "float": "float32"}.get(kind) or _choice(draw, DTYPES)
        name = _alias(state, t) if dtype == t.dtype \
            else _derived(state, [t], t.shape, dtype, t.bound, t.positive).name
        call = f"to(torch.{dtype})" if kind == "to" else f"{kind}()"
        return f"{name} = {t.name}.{call}"
    name = state.fresh()
    if kind == "data" and state.allows("data"):
        state.add(TensorVar(name, t.shape, t.dtype, False, True, t.bound, t.positive,
                            t.contiguous, t.view_of or t.name, t.precision))
        return f"{name} = {t.name}.data"
    if kind != "clone":
        kind = "detach"
    if kind == "clone":
        state.add(TensorVar(name, t.shape, t.dtype, t.requires_grad, not t.requires_grad,
                            t.bound, t.positive, precision=t.precision))
    else:
        state.add(TensorVar(name, t.shape, t.dtype, False, True, t.bound, t.positive,
                            t.contiguous, t.view_of or t.name, t.precision))
    return f"{name} = {t.name}.{kind}()"


def batchnorm_eps(dtype: str, bound: float) -> float:
    """The eps of a BatchNorm that normalises values up to `bound` without amplifying rounding.

    Training-mode BatchNorm computes `(x - mean) / sqrt(var + eps)`. `x - mean` carries the
    rounding of the mean (a few units in the last place of |x|, and engines sum in different
    orders), and when a channel is (nearly) constant, var is about 0 and that noise is divided
    by sqrt(eps): with float32 and the default eps, one ulp of 7.3 becomes 6e-5 in the output,
    while the exact result is 0. Constant channels are common here (`expand`, `fill_`, `ones`,
    `torch.tensor` data) and the generator cannot rule them out, so instead it bounds the
    amplification: eps is the default unless `4 u bound / sqrt(eps)` (u the unit roundoff) would
    exceed a tenth of the comparison's atol, else the next power of ten that keeps it below.
    float64 keeps the default eps for every bound the generator allows; float32 gets 0.1 for
    rand data.
    """
    atol = FUZZ_TOLERANCES[dtype][1]
    needed = (4 * UNIT_ROUNDOFF[dtype] * bound / (atol / 10)) ** 2
    if needed <= DEFAULT_EPS:
        return DEFAULT_EPS
    return 10.0 ** math.ceil(math.log10(needed))


def module(draw: Draw, state: _State) -> str | None:
    """Call a module (Linear, Sequential, Conv2d, BatchNorm) on a tensor it fits, creating it
    if needed."""
    kinds = []
    if "modules" in state.families:
        kinds += ["Linear", "Sequential"]
        if "conv" in state.families:
            kinds.append("Conv2d")
        # Not under saved-tensor hooks: refimpl's NativeBatchNormBackward0 saves 2 tensors
        # where PyTorch's saves 6 (running stats and save_mean/save_invstd too), an open
        # difference the hooks' counts would report every time.
        if "batchnorm" in state.families and not state.saved_hooks:
            kinds += ["BatchNorm1d", "BatchNorm2d"]
    kinds = [k for k in kinds if state.allows(f"nn.{k}")]
    if not kinds:
        return None
    ndims = {"Linear": (1, 2, 3, 4), "Sequential": (1, 2, 3, 4), "Conv2d": (4,),
             "BatchNorm1d": (2, 3), "BatchNorm2d": (4,)}
    # The module first, then a tensor that fits it, made on the spot half of the time or when
    # none fits: 4-d tensors are rare, and Conv2d and BatchNorm2d would hardly be drawn else.
    kind = _choice(draw, kinds)
    t = _pick(draw, (t for t in state.operands() if t.ndim in ndims[kind])) if draw(BOOL) else None
    lines = []
    if t is None:
        shape = {"Conv2d": (2, 1 + draw(BOOL), 2 + draw(BOOL), 2 + draw(BOOL)),
                 "BatchNorm1d": (2, 1 + draw(BOOL)),
                 "BatchNorm2d": (2, 1 + draw(BOOL), 1 + draw(BOOL), 2)}.get(kind, (2, 3))
        dtype = _choice(draw, DTYPES)
        t = state.add(TensorVar(state.fresh(), shape, dtype, draw(BOOL), True, 1.0, True))
        flag = ", requires_grad=True" if t.requires_grad else ""
        lines.append(f"{t.name} = torch.rand({_shape_args(shape)}{_dtype_kw(dtype)}{flag})")
    in_size = t.shape[-1] if kind in ("Linear", "Sequential") else t.shape[1]
    # The rounding BatchNorm amplifies is that of the data's precision, not of its dtype.
    eps = batchnorm_eps(t.precision, t.bound) if kind.startswith("BatchNorm") else DEFAULT_EPS
    existing = [m for m in state.modules
                if m.kind == kind and m.dtype == t.dtype and m.in_size == in_size
                and m.eps >= eps]
    mod = _pick(draw, existing) if draw(BOOL) else None
    if mod is None:
        if kind == "Linear":
            size = _choice(draw, (1, 2))
            ctor = f"nn.Linear({in_size}, {size})"
        elif kind == "Sequential":
            size = _choice(draw, (1, 2))
            activation = _choice(draw, [a for a in ("ReLU", "Sigmoid") if state.allows(f"nn.{a}")]
                                 or ["Linear"])
            tail = f"nn.Linear({size}, {size})" if activation == "Linear" else f"nn.{activation}()"
            ctor = f"nn.Sequential(nn.Linear({in_size}, {size}), {tail})"
        elif kind == "Conv2d":
            size = draw(_between(1, min(t.shape[2], t.shape[3])))
            ctor = f"nn.Conv2d({in_size}, 2, {size})"
        else:
            size = 0
            ctor = f"nn.{kind}({in_size})" if eps == DEFAULT_EPS \
                else f"nn.{kind}({in_size}, eps={eps:g})"
        mod = ModuleVar(state.fresh("m"), kind, t.dtype, in_size, size, eps=eps)
        if t.dtype == "float64":
            ctor += ".double()"
        lines.append(f"{mod.name} = {ctor}")
        state.modules.append(mod)
        state.features.add("modules")
        state.features.add({"Conv2d": "conv", "Linear": "modules", "Sequential": "modules"}.get(
            kind, "batchnorm"))
    shape = _module_output(mod, t)
    if shape is None:
        return "\n".join(lines) or None
    mod.precision = least_precise(mod.precision, t.precision)
    out = state.add(TensorVar(state.fresh(), shape, t.dtype, state.grad_enabled,
                              not state.grad_enabled, 10.0 + t.bound * 4, False,
                              precision=t.precision))
    lines.append(f"{out.name} = {mod.name}({t.name})")
    return "\n".join(lines)


def _module_output(mod: ModuleVar, t: TensorVar) -> tuple[int, ...] | None:
    if mod.kind in ("Linear", "Sequential"):
        return t.shape[:-1] + (mod.size,)
    if mod.kind == "Conv2d":
        if min(t.shape[2:]) < mod.size:
            return None
        return (t.shape[0], 2, t.shape[2] - mod.size + 1, t.shape[3] - mod.size + 1)
    return t.shape


# Hooks, custom Functions and more ops (families hooks, node_hooks, custom_function, ops_more)

HOOKS = (
    ("g * 2", "a hook whose return replaces the gradient"),
    ("calls.append('{h}')", "a hook that only records that it ran"),
    ("g + 1", "a replacement that is not a scaling"),
)
"""Tensor hook bodies over the gradient `g` (`{h}`: the handle's name)."""
NODE_HOOKS = (
    ("register_prehook", "gs", "calls.append('{h}')"),
    ("register_prehook", "gs", "tuple(None if g is None else g * 2 for g in gs)"),
    ("register_hook", "gi, go", "calls.append('{h}')"),
    ("register_hook", "gi, go", "tuple(None if g is None else g * 0.5 for g in gi)"),
)
"""Backward-node hooks: pre-hooks see the gradients of the node's outputs and may replace
them, post-hooks see both and may replace the gradients of its inputs."""


def hook(draw: Draw, state: _State) -> str | None:
    """Register a tensor hook on a tensor that requires grad, or remove one registered before."""
    if "hooks" not in state.families:
        return None
    if state.handles and draw(_index(4)) == 0 and state.allows("remove"):
        handle = state.handles.pop(draw(_index(len(state.handles))))
        state.features.add("hooks")
        return f"{handle}.remove()"
    t = _pick(draw, (t for t in state.tensors if t.requires_grad))
    if t is None or not state.allows("register_hook"):
        return None
    handle = state.fresh("h")
    if t.leaf and draw(_index(4)) == 0 and state.allows("register_post_accumulate_grad_hook"):
        # Runs after .grad is accumulated and sees the leaf itself; what it returns must be None.
        text = (f"{handle} = {t.name}.register_post_accumulate_grad_hook("
                f"lambda p: calls.append('{handle}'))")
    else:
        body = _choice(draw, HOOKS)[0].format(h=handle)
        text = f"{handle} = {t.name}.register_hook(lambda g: {body})"
    state.handles.append(handle)
    state.features.add("hooks")
    return state.recorder() + text


def node_hook(draw: Draw, state: _State) -> str | None:
    """Register a pre-hook or a post-hook on the backward node of a non-leaf."""
    if "node_hooks" not in state.families or not state.allows("grad_fn"):
        return None
    # Gradients from autograd.grad (`g...`) may be constants without a node.
    t = _pick(draw, (t for t in state.tensors
                     if t.requires_grad and not t.leaf and not t.name.startswith("g")))
    if t is None:
        return None
    method, args, body = _choice(draw, NODE_HOOKS)
    if not state.allows(method):
        return None
    handle = state.fresh("h")
    state.handles.append(handle)
    state.features.add("node_hooks")
    return (state.recorder()
            + f"{handle} = {t.name}.grad_fn.{method}(lambda {args}: {body.format(h=handle)})")


FUNCTIONS = {
    # save_for_backward, and a backward made of differentiable ops (double backward works).
    "Square": """class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x
    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 2 * x * g""",
    # Two outputs, one marked non-differentiable: it never requires grad, its gradient is
    # zeros (materialized) in backward.
    "Triple": """class Triple(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        positive = (x > 0).to(x.dtype)
        ctx.mark_non_differentiable(positive)
        return x * 3, positive
    @staticmethod
    def backward(ctx, g, g_positive):
        return g * 3""",
    # once_differentiable: differentiating its gradient again raises.
    "Sine": """class Sine(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()
    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * x.cos()""",
    # setup_context style, two inputs that may broadcast and differ in dtype: autograd sums
    # each gradient to its input's shape and casts it to its input's dtype.
    "MulAdd": """class MulAdd(torch.autograd.Function):
    @staticmethod
    def forward(a, b):
        return a * b + a
    @staticmethod
    def setup_context(ctx, inputs, output):
        a, b = inputs
        ctx.save_for_backward(a, b)
    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return g * (b + 1), g * a""",
}
"""The custom Functions a program may use: each is written into it before its first call."""


def custom_function(draw: Draw, state: _State) -> str | None:
    if "custom_function" not in state.families or not state.allows(
            "torch.autograd.Function", "apply", "save_for_backward", "saved_tensors"):
        return None
    t = _pick(draw, state.operands())
    if t is None:
        return None
    kind = _choice(draw, tuple(FUNCTIONS))
    prelude = "" if kind in state.functions else FUNCTIONS[kind] + "\n"
    state.functions.add(kind)
    state.features.add("custom_function")
    if kind == "Square" and t.bound ** 2 <= MAX_BOUND:
        out = _derived(state, [t], t.shape, t.dtype, t.bound ** 2, False)
    elif kind == "Sine":
        out = _derived(state, [t], t.shape, t.dtype, 1.0, False)
    elif kind == "MulAdd":
        b = _pick(draw, (o for o in state.operands() if _broadcast(t.shape, o.shape) is not None))
        bound = t.bound * (b.bound + 1)
        if bound > MAX_BOUND:
            return prelude.rstrip("\n") or None
        dtype = _promote(*([o.dtype for o in (t, b) if o.ndim] or [t.dtype, b.dtype]))
        out = _derived(state, [t, b], _broadcast(t.shape, b.shape), dtype, bound, False)
        return f"{prelude}{out.name} = MulAdd.apply({t.name}, {b.name})"
    else:
        if t.bound * 3 > MAX_BOUND:
            return prelude.rstrip("\n") or None
        out = _derived(state, [t], t.shape, t.dtype, t.bound * 3, t.positive)
        mask = state.add(TensorVar(state.fresh(), t.shape, t.dtype, False, True, 1.0, False,
                                   precision=t.precision))
        return f"{prelude}{out.name}, {mask.name} = Triple.apply({t.name})"
    return f"{prelude}{out.name} = {kind}.apply({t.name})"


def more_ops(draw: Draw, state: _State) -> str | None:
    """narrow, split, chunk (views), diagonal (a view), sgn, median, repeat."""
    if "ops_more" not in state.families:
        return None
    t = _pick(draw, state.operands())
    if t is None:
        return None
    # Those that need more dims first: draws favour the start of the list.
    kinds = ["diagonal"] if t.ndim >= 2 else []
    if t.ndim >= 1:
        kinds += ["narrow", "split", "chunk"]
    kind = _choice(draw, kinds + ["sgn", "median", "repeat"])
    if not state.allows(kind):
        return None
    function = draw(BOOL) and state.allows(f"torch.{kind}")
    call = (lambda args: f"torch.{kind}({t.name}, {args})") if function \
        else (lambda args: f"{t.name}.{kind}({args})")
    view = {"view_of": t.view_of or t.name}
    if kind == "sgn":
        out = _derived(state, [t], t.shape, t.dtype, 1.0, t.positive)
        return f"{out.name} = {f'torch.sgn({t.name})' if function else f'{t.name}.sgn()'}"
    if kind == "median":
        # Without a dim the gradient is shared among tied values; with one it goes to the
        # index the engine returns.
        if t.ndim == 0 or draw(BOOL):
            out = _derived(state, [t], (), t.dtype, t.bound, t.positive)
            return f"{out.name} = {t.name}.median()"
        dim = draw(_between(-t.ndim, t.ndim - 1))
        keepdim = draw(BOOL)
        shape = tuple(1 if i == dim % t.ndim else n for i, n in enumerate(t.shape)) if keepdim \
            else tuple(n for i, n in enumerate(t.shape) if i != dim % t.ndim)
        out = _derived(state, [t], shape, t.dtype, t.bound, t.positive)
        keep = ", keepdim=True" if keepdim else ""
        return f"{out.name} = {call(f'dim={dim}{keep}')}[0]"
    if kind == "repeat":
        sizes = [draw(_between(1, 2)) for _ in range(t.ndim + draw(_between(0, 1)))] or [2]
        padded = (1,) * (len(sizes) - t.ndim) + t.shape
        shape = tuple(s * n for s, n in zip(sizes, padded, strict=True))
        out = _derived(state, [t], shape, t.dtype, t.bound, t.positive)
        return f"{out.name} = {t.name}.repeat({', '.join(map(str, sizes))})"
    dim = draw(_between(-t.ndim, t.ndim - 1)) if kind != "diagonal" else 0
    if kind == "diagonal":
        d1, d2 = (0, 1) if draw(BOOL) else (t.ndim - 2, t.ndim - 1)
        # Offsets that leave at least one element (an empty tensor would stop later draws).
        offset = _choice(draw, [o for o in (0, 1, -1)
                                if min(t.shape[d1] + min(o, 0), t.shape[d2] - max(o, 0)) > 0])
        length = min(t.shape[d1] + min(offset, 0), t.shape[d2] - max(offset, 0))
        shape = tuple(n for i, n in enumerate(t.shape) if i not in (d1, d2)) + (length,)
        args = f"offset={offset}, dim1={d1}, dim2={d2}" if (offset, d1) != (0, 0) else ""
        out = _derived(state, [t], shape, t.dtype, t.bound, t.positive, contiguous=False,
                       **view)
        text = call(args) if args else f"{t.name}.diagonal()"
        return f"{out.name} = {text}"
    n = t.shape[dim]
    # A view stays contiguous when every dim before the one it cuts has size 1.
    contiguous = t.contiguous and all(m == 1 for m in t.shape[:dim % t.ndim])
    if kind == "narrow":
        start = draw(_index(n))
        length = draw(_between(1, n - start))
        shape = t.shape[:dim % t.ndim] + (length,) + t.shape[dim % t.ndim + 1:]
        out = _derived(state, [t], shape, t.dtype, t.bound, t.positive, contiguous=contiguous,
                       **view)
        return f"{out.name} = {call(f'{dim}, {start}, {length}')}"
    if kind == "split":
        size = draw(_between(1, n))
        pieces = [min(size, n - start) for start in range(0, n, size)]
        args = f"{size}, {dim}" if draw(BOOL) else f"{size}, dim={dim}"
    else:
        chunks = draw(_between(1, n))
        size = -(-n // chunks)
        pieces = [min(size, n - start) for start in range(0, n, size)]
        args = f"{chunks}, {dim}" if draw(BOOL) else f"{chunks}, dim={dim}"
    names = [_derived(state, [t], t.shape[:dim % t.ndim] + (m,) + t.shape[dim % t.ndim + 1:],
                      t.dtype, t.bound, t.positive, contiguous=contiguous, **view).name
             for m in pieces]
    return f"{', '.join(names)}{',' if len(names) == 1 else ''} = {call(args)}"


FORWARD_OPS: tuple[Op, ...] = (unary, binary, reduction, view, matmul, join, copy, module,
                               index)
FAMILY_OPS: dict[Op, str] = {custom_function: "custom_function", more_ops: "ops_more",
                             hook: "hooks", node_hook: "node_hooks"}
"""Forward ops drawn only when their family is. Together they take one slot among the forward
ops, so the others are drawn about as often as without them."""


# Statements that may raise: at most one per step, always last ------------------------------

def inplace(draw: Draw, state: _State) -> str | None:
    if "inplace" not in state.families:
        return None
    t = _pick(draw, state.tensors)
    if t is None:
        return None
    choices: list[tuple[str, str, TensorVar | None]] = [
        ("add_", f"{t.name}.add_(1.0)", None), ("mul_", f"{t.name}.mul_(2.0)", None),
        ("zero_", f"{t.name}.zero_()", None), ("fill_", f"{t.name}.fill_(0.5)", None),
        ("div_", f"{t.name}.div_(2.0)", None)]
    if t.bound <= 10:
        choices.append(("exp_", f"{t.name}.exp_()", None))
    if t.bound ** 2 <= MAX_BOUND:
        choices.append(("pow_", f"{t.name}.pow_(2)", None))
    # A tensor operand must broadcast to the target's shape (in-place ops cannot grow it).
    operand = _pick(draw, (o for o in state.tensors if _broadcast(t.shape, o.shape) == t.shape))
    if operand is not None:
        choices += [("sub_", f"{t.name}.sub_({operand.name})", operand),
                    ("mul_", f"{t.name}.mul_({operand.name})", operand)]
    if t.ndim >= 1:
        choices.append(("select", f"{t.name}[0] = 1.5", None))
        # Item assignment at advanced indices (index_put_, IndexPutBackward0); a tensor value
        # must have t's dtype and broadcast to the selection, else both engines must refuse.
        rows = sorted({draw(_between(-t.shape[0], t.shape[0] - 1)) for _ in range(2)})
        choices.append(("select", f"{t.name}[{rows}] = 2.5", None))
        if operand is not None:
            choices.append(("select", f"{t.name}[{rows}] = {operand.name}", operand))
    kind, text, used = _choice(draw, [c for c in choices
                                      if c[0] == "select" or state.allows(c[0])])
    state.features.add("inplace")
    if used is not None and used.requires_grad and state.grad_enabled:
        t.requires_grad, t.leaf = True, False
    if used is not None:
        # The write reaches every tensor sharing t's storage (views, detach, .data).
        root = t.view_of or t.name
        for shared in state.tensors:
            if (shared.view_of or shared.name) == root:
                shared.precision = least_precise(shared.precision, used.precision)
    if kind == "exp_":
        t.bound, t.positive = math.exp(t.bound), True
    elif kind == "pow_":
        t.bound, t.positive = t.bound ** 2, False
    else:
        t.bound = t.bound * max(2.0, used.bound if used is not None else 2.0) + 1.5
        t.positive = t.positive and (kind in ("add_", "div_") and used is None
                                     or kind == "mul_" and (used is None or used.positive))
    return text


def backward(draw: Draw, state: _State) -> str | None:
    # Mostly a tensor that requires grad; sometimes any tensor, for the errors.
    candidates = [t for t in state.tensors if t.requires_grad]
    if draw(_index(8)) == 0:
        candidates = state.tensors
    t = _pick(draw, candidates)
    if t is None:
        return None
    options = []
    if draw(BOOL):
        options.append("retain_graph=True")
    if "create_graph" in state.families and draw(_between(0, 5)) == 0:
        options.append("create_graph=True")
        state.features.add("create_graph")
    # Without grad mode, `t.sum()` has no grad_fn: only backward on `t` itself is meaningful.
    form = _choice(draw, ("sum", "gradient", "plain", "function")) if state.grad_enabled \
        else "plain"
    if form == "plain" or (t.ndim == 0 and form == "sum"):
        args = ", ".join(options)
        return f"{t.name}.backward({args})"
    if form == "gradient":
        gradient = _choice(draw, ("torch.ones_like", "torch.rand_like"))
        args = ", ".join([f"gradient={gradient}({t.name})", *options])
        return f"{t.name}.backward({args})"
    if form == "function" and state.allows("torch.autograd.backward"):
        return f"torch.autograd.backward({', '.join([f'{t.name}.sum()', *options])})"
    return f"{t.name}.sum().backward({', '.join(options)})"


def grad(draw: Draw, state: _State) -> str | None:
    outputs = [t for t in state.tensors if t.requires_grad]
    out = _pick(draw, outputs)
    inputs = [t for t in state.tensors if t.requires_grad]
    if out is None or not state.grad_enabled or not state.allows("torch.autograd.grad"):
        return None
    chosen = [_choice(draw, inputs)]
    others = [t for t in inputs if t is not chosen[0]]
    if others and draw(BOOL):
        chosen.append(_choice(draw, others))
    options = []
    if out.ndim == 0:
        target = out.name
    elif draw(BOOL):
        target = out.name
        options.append(f"grad_outputs=torch.ones_like({out.name})")
    else:
        target = f"{out.name}.sum()"
    create_graph = "create_graph" in state.families and draw(BOOL)
    if create_graph:
        options.append("create_graph=True")
        state.features.add("create_graph")
    if draw(BOOL):
        options.append("retain_graph=True")
    if draw(BOOL):
        options.append("allow_unused=True")
    names = []
    for t in chosen:
        g = state.add(TensorVar(state.fresh("g"), t.shape, t.dtype, create_graph, not create_graph,
                                out.bound * 10, False, precision=state.lowest_precision()))
        names.append(g.name)
    targets = ", ".join(names) + ("," if len(names) == 1 else "")
    inputs_text = ", ".join(t.name for t in chosen)
    return (f"{targets} = torch.autograd.grad({target}, [{inputs_text}]"
            f"{''.join(', ' + o for o in options)})")


def flags(draw: Draw, state: _State) -> str | None:
    t = _pick(draw, state.tensors)
    if t is None:
        return None
    choices = [
        ("retain_grad", f"{t.name}.retain_grad()"),
        ("requires_grad_", f"{t.name}.requires_grad_()"),
        ("requires_grad_", f"{t.name}.requires_grad_(False)"),
        ("requires_grad", f"{t.name}.requires_grad = {not t.requires_grad}"),
        ("detach_", f"{t.name}.detach_()"),
    ]
    kind, text = _choice(draw, [c for c in choices if state.allows(c[0])])
    if t.leaf and kind in ("requires_grad_", "requires_grad"):
        t.requires_grad = "False" not in text
    elif kind == "detach_" and t.view_of is None:
        t.requires_grad, t.leaf = False, True
    return text


def module_mode(draw: Draw, state: _State) -> str | None:
    mod = _pick(draw, state.modules)
    if mod is None:
        return None
    if draw(_index(3)) == 0 and state.allows("zero_grad"):
        return f"{mod.name}.zero_grad()"
    mod.training = not mod.training
    return f"{mod.name}.{'train' if mod.training else 'eval'}()"


def inference_use(draw: Draw, state: _State) -> str | None:
    """An inference tensor meets a tensor that requires grad outside inference mode: an op
    that saves it for backward raises, one that does not makes a normal tensor."""
    made = _pick(draw, (t for t in state.tensors if t.inference))
    other = _pick(draw, (t for t in state.tensors if t.requires_grad and not t.inference
                         and _broadcast(t.shape, made.shape) is not None)) if made else None
    if other is None or state.inference:
        return None
    # mul saves both operands, add neither, clone makes a normal tensor of its own.
    kind = _choice(draw, ("mul", "add", "clone"))
    if kind == "clone":
        out = _derived(state, [made], made.shape, made.dtype, made.bound, made.positive)
        return f"{out.name} = {made.name}.clone()"
    shape = _broadcast(made.shape, other.shape)
    dtype = _promote(*([t.dtype for t in (made, other) if t.ndim] or [made.dtype, other.dtype]))
    op = "*" if kind == "mul" else "+"
    out = _derived(state, [made, other], shape, dtype,
                   made.bound * other.bound if kind == "mul" else made.bound + other.bound,
                   False)
    return f"{out.name} = {made.name} {op} {other.name}"


LAST_OPS: tuple[Op, ...] = (backward, grad, inplace, flags, module_mode, inference_use)


# Steps and programs ------------------------------------------------------------------------

def _indent(lines: list[str], depth: int) -> list[str]:
    return [("    " * depth) + line for text in lines for line in text.splitlines()]


SAVED_TENSOR_HOOKS = {
    # Unpacks float tensors scaled: every gradient computed from a saved tensor changes.
    "scale": ("lambda t: t.detach()",
              "lambda t: t * 2 if t.dtype in (torch.float32, torch.float64) else t"),
    "identity": ("lambda t: t", "lambda t: t"),
}
"""Pack and unpack hooks. Hooks that count the calls are not drawn: refimpl's nodes do not yet
save exactly PyTorch's tensors (index_put_'s indices, the mm of a Linear's create_graph
backward, NativeBatchNormBackward0's six), so every such program would be reported."""


def _region(draw: Draw, state: _State) -> tuple[list[str], int] | None:
    """A grad-mode, inference-mode or saved-tensor-hooks region: its header lines and the
    body's depth; sets the state's modes inside it."""
    # Plain steps first (Hypothesis shrinks towards the first choice) and most often.
    kinds = ["none", "none", "none", "no_grad", "set_grad_enabled", "enable_grad"]
    if "inference_mode" in state.families and state.allows("torch.inference_mode"):
        kinds.append("inference_mode")
    if "saved_tensor_hooks" in state.families and state.allows(
            "torch.autograd.graph.saved_tensors_hooks"):
        kinds.append("saved_tensors_hooks")
    kind = _choice(draw, kinds)
    if kind == "none":
        return None
    if kind == "no_grad":
        state.grad_enabled = False
        return ["with torch.no_grad():"], 1
    if kind == "set_grad_enabled":
        state.grad_enabled = draw(BOOL)
        return [f"with torch.set_grad_enabled({state.grad_enabled}):"], 1
    if kind == "inference_mode":
        state.grad_enabled, state.inference, state.inference_used = False, True, True
        state.features.add("inference_mode")
        return ["with torch.inference_mode():"], 1
    if kind == "saved_tensors_hooks":
        pack, unpack = SAVED_TENSOR_HOOKS[_choice(draw, tuple(SAVED_TENSOR_HOOKS))]
        state.features.add("saved_tensor_hooks")
        state.saved_hooks = True
        return [f"with torch.autograd.graph.saved_tensors_hooks({pack}, {unpack}):"], 1
    return ["with torch.no_grad():", "    with torch.enable_grad():"], 2


def _step(draw: Draw, state: _State, base: tuple[int, ...]) -> str:
    lines: list[str] = []
    region = _region(draw, state)
    depth = 0
    if region is not None:
        header, depth = region
        lines += header
    family_ops = [op for op, family in FAMILY_OPS.items() if family in state.families]
    last_ops = [op for op in LAST_OPS if op is not inference_use or state.inference_used]
    body: list[str] = []
    for _ in range(draw(_between(0, 3))):
        op = _choice(draw, ("leaf", *FORWARD_OPS, *(("family",) if family_ops else ())))
        if op == "family":
            op = _choice(draw, family_ops)
        text = leaf(draw, state, base) if op == "leaf" or not state.tensors \
            else op(draw, state)
        if text:
            body.append(text)
    last = _choice(draw, (None, *range(len(last_ops))))
    if last is not None:
        text = last_ops[last](draw, state)
        if text:
            body.append(text)
    if not body:
        body.append(leaf(draw, state, base))
    state.grad_enabled, state.inference, state.saved_hooks = True, False, False
    return "\n".join(lines + _indent(body, depth))


def _observations(state: _State) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The observation keys after a step, and the precision of those computed in a less
    precise dtype than their own (see `ProgramStep.precision`)."""
    keys = [template.format(v=t.name) for t in state.tensors for template in TENSOR_OBSERVATIONS]
    lowest = state.lowest_precision()
    precision = []
    for t in state.tensors:
        if t.precision != t.dtype:
            precision.append((t.name, t.precision))
        if lowest != t.dtype:
            precision.append((f"{t.name}.grad", lowest))
    for mod in state.modules:
        first = f"{mod.name}[0]" if mod.kind == "Sequential" else mod.name
        keys += [f"{first}.weight.grad", f"{first}.bias.grad"]
        if lowest != mod.dtype:
            precision += [(f"{first}.weight.grad", lowest), (f"{first}.bias.grad", lowest)]
        if mod.kind.startswith("BatchNorm"):
            keys += [f"{mod.name}.running_mean", f"{mod.name}.running_var"]
            if mod.precision != mod.dtype:
                precision += [(f"{mod.name}.running_mean", mod.precision),
                              (f"{mod.name}.running_var", mod.precision)]
    if state.inference_used:
        keys += [f"{t.name}.is_inference()" for t in state.tensors]
    if state.calls:
        keys.append("calls")
    keys.append("torch.is_grad_enabled()")
    return tuple(keys), tuple(precision)


@st.composite
def _programs(draw: Draw, api: Api, families: frozenset[str], max_steps: int) -> Program:
    state = _State(api, families)
    # The largest shape of the program; leaves take suffixes of it, some dims set to 1. Its
    # length is drawn uniformly (a list strategy would make most programs 1-d).
    base = tuple(draw(_between(1, 3)) for _ in range(draw(_between(1, 4))))
    steps = []
    for _ in range(draw(_between(1, max_steps))):
        state.features = set()
        run = _step(draw, state, base)
        observe, precision = _observations(state)
        steps.append(ProgramStep(run, observe, tuple(sorted(state.features)), precision))
    seed = draw(_between(0, 2**16))
    return Program(tuple(steps), seed=seed)


def programs(api: Api | None = None, families: Iterable[str] = FAMILIES,
             max_steps: int = MAX_STEPS) -> st.SearchStrategy[Program]:
    """Programs over `api` (default: spec/api.yaml) using the given families of FAMILIES."""
    families = frozenset(families)
    unknown = families - set(FAMILIES)
    if unknown:
        raise ValueError(f"unknown program families {sorted(unknown)}: use {', '.join(FAMILIES)}")
    return _programs(api or default_api(), families, max_steps)
