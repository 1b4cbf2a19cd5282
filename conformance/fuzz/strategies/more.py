"""Hooks, custom Functions, more ops, and the statements that may raise (in-place ops,
`backward`, `autograd.grad`, flag toggles): at most one per step, always last.
"""

from __future__ import annotations

import math

from conformance.fuzz.differential import least_precise
from conformance.fuzz.strategies.forward import (
    binary,
    copy,
    index,
    join,
    matmul,
    module,
    reduction,
    unary,
    view,
)
from conformance.fuzz.strategies.state import (
    BOOL,
    MAX_BOUND,
    Draw,
    Op,
    TensorVar,
    _between,
    _broadcast,
    _choice,
    _derived,
    _index,
    _pick,
    _promote,
    _State,
)

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
    others = [u for u in state.tensors if u.requires_grad and u is not t]
    if others and draw(_index(5)) == 0 and \
            state.allows("torch.autograd.graph.register_multi_grad_hook"):
        # A hook on two tensors: once per backward pass, with which gradients it computed
        # ("all") or with the first one ("any").
        u = _pick(draw, others)
        mode = _choice(draw, ("all", "any"))
        body = f"calls.append(('{handle}', [g is None for g in gs]))" if mode == "all" \
            else f"calls.append('{handle}')"
        text = (f"{handle} = torch.autograd.graph.register_multi_grad_hook(({t.name}, "
                f"{u.name}), lambda gs: {body}, mode='{mode}')")
    elif t.leaf and draw(_index(4)) == 0 and \
            state.allows("register_post_accumulate_grad_hook"):
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


CHECKPOINTED = (
    ("a.sin() * 2", lambda bound: 2.0),
    ("(a * a).tanh() + a", lambda bound: bound + 1.0),
    ("a.exp().sqrt()", lambda bound: math.exp(bound / 2) if bound <= 10 else math.inf),
    ("(a.sigmoid() * a).sum()", lambda bound: bound),
)
"""Bodies of a checkpointed function of `a` and the bound of its result given `a`'s: each
saves tensors for backward (recomputed there), the last returns a 0-d result."""


def checkpointed(draw: Draw, state: _State) -> str | None:
    """A segment run through torch.utils.checkpoint, reentrant or not."""
    if "checkpoint" not in state.families or not state.allows(
            "torch.utils.checkpoint.checkpoint"):
        return None
    t = _pick(draw, state.operands())
    if t is None:
        return None
    body, bound_of = _choice(draw, CHECKPOINTED)
    bound = bound_of(t.bound)
    if bound > MAX_BOUND:
        return None
    reentrant = draw(BOOL)
    state.features.add("checkpoint")
    shape = () if body.endswith(".sum()") else t.shape
    out = _derived(state, [t], shape, t.dtype, bound, False)
    return (f"{out.name} = torch.utils.checkpoint.checkpoint(lambda a: {body}, {t.name}, "
            f"use_reentrant={reentrant})")


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
        # On a contiguous copy: PyTorch 2.13's CPU median(dim) of an expanded tensor (a stride
        # of 0, as the gradient of a sum is) returns uninitialised memory
        # (torch.ones(1).expand(2).median(dim=0)), a PyTorch bug no engine is held to.
        source = f"{t.name}.contiguous()" if state.allows("contiguous") else t.name
        expr = f"torch.median({source}, dim={dim}{keep})" if function \
            else f"{source}.median(dim={dim}{keep})"
        return f"{out.name} = {expr}[0]"
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
                             hook: "hooks", node_hook: "node_hooks", checkpointed: "checkpoint"}
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


