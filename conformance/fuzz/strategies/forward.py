"""Forward statements: leaves, elementwise ops with broadcasting, reductions, matmul, views,
cat/stack, indexing, copies and module calls.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from conformance.fuzz.differential import FUZZ_TOLERANCES, least_precise
from conformance.fuzz.strategies.state import (
    BOOL,
    DEFAULT_EPS,
    DTYPES,
    MAX_BOUND,
    UNIT_ROUNDOFF,
    Draw,
    ModuleVar,
    TensorVar,
    _between,
    _broadcast,
    _choice,
    _derived,
    _dtype_kw,
    _index,
    _pick,
    _promote,
    _shape_args,
    _State,
)

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


