"""``refimpl.autograd.functional``: Jacobians, Hessians and their products with a vector.

The six functions of ``torch.autograd.functional``, with PyTorch 2.13's behaviour::

    out, g = vjp(f, x, v)        # f(x) and vᵀ·J, shaped like x
    out, t = jvp(f, x, v)        # f(x) and J·v, shaped like f(x)
    J = jacobian(f, x)           # shape f(x).shape + x.shape
    H = hessian(f, x)            # f returns one element; shape x.shape + x.shape
    out, hv = hvp(f, x, v)       # H·v
    out, vh = vhp(f, x, v)       # vᵀ·H

How PyTorch computes them, and so what a user observes:

- ``func`` is called on fresh tensors, never on the caller's: each input is ``detach()``-ed
  and made to require grad, so nothing reaches the caller's ``.grad`` and a tensor ``func``
  captures from outside is a constant. With ``create_graph=True`` an input that requires grad
  is passed as ``x.view_as(x)`` instead, so the results stay connected to ``x``.
- The results are detached unless ``create_graph=True``; ``func`` itself always runs with
  grad enabled, even under ``no_grad``.
- An input no output depends on gets zeros, or with ``strict=True`` an error.
- ``jvp`` and ``hvp`` have no forward mode: they differentiate a backward with respect to
  its (dummy, all-zero) cotangent, the double-backward trick; a ``jacobian`` runs one
  backward per output element. ``vectorize=True`` (PyTorch batches those backwards with
  vmap) gives the same values here, computed one row at a time; ``strategy="forward-mode"``
  pushes one basis tangent per input element through forward AD.

The error and warning texts are PyTorch's, including its quirks (a missing space in the
forward-mode message, ``vectorized`` for ``vectorize``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from refimpl import _creation
from refimpl._tensor import Tensor
from refimpl.autograd import forward_ad, grad_mode

__all__ = ["vjp", "jvp", "jacobian", "hessian", "hvp", "vhp"]

Tensors = tuple[Tensor, ...]


# -- arguments and results ---------------------------------------------------------------------

def _tensors(value: Any, what: str, api: str) -> tuple[bool, Tensors]:
    """``value`` as a tuple of tensors, and whether it was given as a tuple (a list is one
    object, not a sequence: PyTorch's check accepts tuples only)."""
    given_tuple = isinstance(value, tuple)
    items = value if given_tuple else (value,)
    for i, item in enumerate(items):
        if not isinstance(item, Tensor):
            where = f"the value at index {i}" if given_tuple else f"the given {what}"
            raise TypeError(f"The {what} given to {api} must be either a Tensor or a tuple of "
                            f"Tensors but {where} has type {type(item)}.")
    return given_tuple, items


def _outputs(value: Any, api: str) -> tuple[bool, Tensors]:
    return _tensors(value, "outputs of the user-provided function", api)


def _fresh(inputs: Tensors, create_graph: bool, need_graph: bool) -> Tensors:
    """New tensor objects for ``func``: connected to the caller's (a view) only when the
    result must be differentiable with respect to them, otherwise detached leaves."""
    return tuple(t.view_as(t) if create_graph and t.requires_grad
                 else t.detach().requires_grad_(need_graph) for t in inputs)


def _detached(results: Any, create_graph: bool) -> Any:
    """Results without history unless the caller asked for it; nested tuples keep shape."""
    if create_graph:
        return results
    if isinstance(results, Tensor):
        return results.detach()
    return tuple(_detached(r, create_graph) for r in results)


def _unpack(results: Any, was_tuple: bool | tuple[bool, bool]) -> Any:
    """Undo the tupling of single arguments: for a Jacobian, ``(outputs_tuple,
    inputs_tuple)`` unpacks the inner level, then the outer."""
    if isinstance(was_tuple, tuple):
        outer, inner = was_tuple
        if not inner:
            results = tuple(r[0] for r in results)
        return results if outer else results[0]
    return results if was_tuple else results[0]


def _check_v(v: Tensors, refs: Tensors, refs_tuple: bool) -> None:
    if len(v) != len(refs):
        if refs_tuple:
            raise RuntimeError(
                f"v is a tuple of invalid length: should be {len(refs)} but got {len(v)}.")
        raise RuntimeError("The given v should contain a single Tensor.")
    for i, (given, ref) in enumerate(zip(v, refs, strict=True)):
        if given.size() != ref.size():
            prefix = f"Entry {i} in " if refs_tuple else ""
            raise RuntimeError(f"{prefix}v has invalid size: should be {ref.size()} but got "
                               f"{given.size()}.")


def _vector(v: Any, refs: Tensors, refs_tuple: bool, api: str, create_graph: bool,
            none_message: str) -> Tensors | None:
    """The user's ``v`` checked against ``refs``; None only where ``refs`` is one element."""
    if v is None:
        if len(refs) != 1 or refs[0].nelement() != 1:
            raise RuntimeError(none_message)
        return None
    _, vs = _tensors(v, "v", api)
    vs = _fresh(vs, create_graph, need_graph=False)
    _check_v(vs, refs, refs_tuple)
    return vs


_V_NONE_INPUT = ("The vector v can only be None if the input to the user-provided function is "
                 "a single Tensor with a single element.")


# -- strict mode ---------------------------------------------------------------------------------

def _require_grad(tensors: Sequence[Tensor | None], kind: str, strict: bool) -> None:
    """In strict mode, each of ``tensors`` must exist and depend on the inputs."""
    if not strict:
        return
    for i, t in enumerate(tensors):
        if t is None:
            raise RuntimeError(f"The output of the user-provided function is independent of "
                               f"input {i}. This is not allowed in strict mode.")
        if t.requires_grad:
            continue
        if kind == "outputs":
            raise RuntimeError(
                f"Output {i} of the user-provided function does not require gradients. The "
                "outputs must be computed in a differentiable manner from the input when "
                "running in strict mode.")
        if kind == "grad_inputs":
            raise RuntimeError(
                f"The gradient with respect to input {i} is independent of the inputs of the "
                "user-provided function. This is not allowed in strict mode.")
        raise RuntimeError(
            "While computing the hessian, found that the jacobian of the user-provided "
            f"function with respect to input {i} is independent of the input. This is not "
            "allowed in strict mode. You should ensure that your function is twice "
            "differentiable and that the jacobian depends on the inputs (this would be "
            "violated by a linear function for example).")


_MISSING = {
    "back": "The output of the user-provided function is independent of input {i}. This is "
            "not allowed in strict mode.",
    "back_trick": "The gradient with respect to the input is independent of entry {i} in the "
                  "grad_outputs when using the double backward trick to compute forward mode "
                  "gradients. This is not allowed in strict mode.",
    "double_back": "The jacobian of the user-provided function is independent of input {i}. "
                   "This is not allowed in strict mode.",
    "double_back_trick": "The hessian of the user-provided function is independent of entry "
                         "{i} in the grad_jacobian. This is not allowed in strict mode as it "
                         "prevents from using the double backward trick to replace forward "
                         "mode AD.",
    "row": "Output {output} of the user-provided function is independent of input {i}. This "
           "is not allowed in strict mode.",
}


def _zeros_for_missing(grads: Sequence[Tensor | None], refs: Tensors, strict: bool,
                       create_graph: bool, stage: str, output: int | None = None) -> Tensors:
    """Zeros (shaped like ``refs``) where no gradient flowed; in strict mode an error, and
    with ``create_graph`` also for a gradient that is a constant. ``output`` is the output a
    Jacobian row belongs to (stage ``row``)."""
    out = []
    for i, g in enumerate(grads):
        if g is None:
            if strict:
                raise RuntimeError(_MISSING[stage].format(i=i, output=output))
            g = _creation.zeros_like(refs[i])
        elif strict and create_graph and not g.requires_grad:
            what = "hessian" if stage.startswith("double") else "jacobian"
            # PyTorch names the output, not the input, for a constant Jacobian row.
            n = output if output is not None else i
            raise RuntimeError(f"The {what} of the user-provided function is independent of "
                               f"input {n}. This is not allowed in strict mode when "
                               "create_graph=True.")
        out.append(g)
    return tuple(out)


# -- differentiation -----------------------------------------------------------------------------

def _grad(outputs: Sequence[Tensor | None], inputs: Tensors,
          grad_outputs: Sequence[Tensor | None] | None = None, create_graph: bool = False,
          retain_graph: bool | None = None) -> tuple[Tensor | None, ...]:
    """``autograd.grad`` over the outputs that require grad (an input none of them reaches
    gets None); no call at all when none does."""
    cotangents = grad_outputs if grad_outputs is not None else (None,) * len(outputs)
    pairs = [(o, g) for o, g in zip(outputs, cotangents, strict=True)
             if o is not None and o.requires_grad]
    if not pairs:
        return (None,) * len(inputs)
    from refimpl import autograd

    return autograd.grad([o for o, _ in pairs], inputs, [g for _, g in pairs],
                         retain_graph=retain_graph, create_graph=create_graph,
                         allow_unused=True)


def _product(outputs: Sequence[Tensor | None], wrt: Tensors, vs: Tensors | None,
             refs: Tensors, strict: bool, create_graph: bool, stage: str) -> Tensors:
    """The last backward of vjp, jvp, vhp and hvp: ``outputs`` differentiated with respect
    to ``wrt`` with ``vs`` as cotangents, zeros (shaped like ``refs``) where nothing flowed.
    It records a graph only where the caller wants one: with create_graph, or under the
    caller's own grad mode."""
    with grad_mode.set_grad_enabled(create_graph or grad_mode.is_grad_enabled()):
        return _zeros_for_missing(_grad(outputs, wrt, vs, create_graph=create_graph), refs,
                                  strict, create_graph, stage)


def vjp(func: Callable[..., Any], inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> tuple[Any, Any]:
    """``(func(inputs), vᵀ·J)``; the second is shaped like ``inputs``."""
    with grad_mode.enable_grad():
        inputs_tuple, ins = _tensors(inputs, "inputs", "vjp")
        ins = _fresh(ins, create_graph, need_graph=True)
        outputs_tuple, outs = _outputs(func(*ins), "vjp")
        _require_grad(outs, "outputs", strict)
        vs = _vector(v, outs, outputs_tuple, "vjp", create_graph,
                     "The vector v can only be None if the user-provided function returns a "
                     "single Tensor with a single element.")
    result = _product(outs, ins, vs, ins, strict, create_graph, "back")
    return (_unpack(_detached(outs, create_graph), outputs_tuple),
            _unpack(_detached(result, create_graph), inputs_tuple))


def jvp(func: Callable[..., Any], inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> tuple[Any, Any]:
    """``(func(inputs), J·v)``; the second is shaped like ``func``'s output."""
    with grad_mode.enable_grad():
        inputs_tuple, ins = _tensors(inputs, "inputs", "jvp")
        ins = _fresh(ins, create_graph, need_graph=True)
        vs = _vector(v, ins, inputs_tuple, "jvp", create_graph, _V_NONE_INPUT)
        outputs_tuple, outs = _outputs(func(*ins), "jvp")
        _require_grad(outs, "outputs", strict)
        # Jᵀ·u is linear in u, so differentiating it with respect to u at any finite point
        # (zeros here) gives J; the product with v is that derivative's vector product.
        dummies = tuple(_creation.zeros_like(o, requires_grad=True) for o in outs)
        grad_inputs = _grad(outs, ins, dummies, create_graph=True)
        _require_grad(grad_inputs, "grad_inputs", strict)
    result = _product(grad_inputs, dummies, vs, outs, strict, create_graph, "back_trick")
    return (_unpack(_detached(outs, create_graph), outputs_tuple),
            _unpack(_detached(result, create_graph), outputs_tuple))


# -- Jacobian and Hessian ------------------------------------------------------------------------

def jacobian(func: Callable[..., Any], inputs: Any, create_graph: bool = False,
             strict: bool = False, vectorize: bool = False,
             strategy: str = "reverse-mode") -> Any:
    """d func / d inputs: for output ``i`` and input ``j`` a tensor of shape
    ``out_i.shape + in_j.shape``; a tuple where either side was a tuple."""
    if strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError(
            'Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your '
            'function has more outputs than inputs, "forward-mode" tends to be more '
            'performant. Otherwise, prefer to use "reverse-mode".')
    if strategy == "forward-mode":
        if create_graph:
            raise NotImplementedError(
                'torch.autograd.functional.jacobian: `create_graph=True` and '
                '`strategy="forward-mode"` are not supported together (yet). Please either '
                'set `create_graph=False` or `strategy="reverse-mode"`.')
        return _forward_jacobian(func, inputs, strict, vectorize)
    with grad_mode.enable_grad():
        inputs_tuple, ins = _tensors(inputs, "inputs", "jacobian")
        ins = _fresh(ins, create_graph, need_graph=True)
        outputs_tuple, outs = _outputs(func(*ins), "jacobian")
        _require_grad(outs, "outputs", strict)
        if vectorize and strict:
            raise RuntimeError(
                "torch.autograd.functional.jacobian: `strict=True` and `vectorized=True` are "
                "not supported together. Please either set `strict=False` or "
                "`vectorize=False`.")
        blocks = tuple(_reverse_rows(i, out, ins, strict, create_graph)
                       for i, out in enumerate(outs))
    return _unpack(_detached(blocks, create_graph), (outputs_tuple, inputs_tuple))


def _reverse_rows(i: int, out: Tensor, ins: Tensors, strict: bool,
                  create_graph: bool) -> Tensors:
    """The blocks of output ``i``: one backward per element of ``out``, each a row."""
    rows: list[list[Tensor]] = [[] for _ in ins]
    flat = out.reshape(-1)
    for k in range(out.nelement()):
        grads = _grad((flat[k],), ins, retain_graph=True, create_graph=create_graph)
        for j, g in enumerate(_zeros_for_missing(grads, ins, strict, create_graph, "row",
                                                 output=i)):
            rows[j].append(g)
    from refimpl.ops.functional import stack

    return tuple(stack(r, 0).view(tuple(out.shape) + tuple(inp.shape))
                 for r, inp in zip(rows, ins, strict=True))


def _forward_jacobian(func: Callable[..., Any], inputs: Any, strict: bool,
                      vectorize: bool) -> Any:
    """Columns of the Jacobian from forward AD, one basis tangent per input element."""
    if strict:
        raise RuntimeError(
            'torch.autograd.functional.jacobian: `strict=True` and `strategy="forward-mode"` '
            'are not supported together (yet). Please either set `strict=False` or '
            '`strategy="reverse-mode"`.')
    inputs_tuple, ins = _tensors(inputs, "inputs", "jacobian")
    if not vectorize:
        # PyTorch's text, its missing space included.
        raise NotImplementedError("Computing Jacobian using forward-AD or forward-over-reverse "
                                  "Hessian isonly implemented for `vectorize=True`.")
    basis = [(j, k) for j, inp in enumerate(ins) for k in range(inp.nelement())]
    outputs_tuple, primals, columns = False, (), []
    for j, k in basis or [(None, None)]:
        tangents = [_creation.zeros_like(t) for t in ins]
        if j is not None:
            tangents[j].view(-1)[k] = 1
        with forward_ad.dual_level():
            duals = tuple(forward_ad.make_dual(t, d) for t, d in zip(ins, tangents, strict=True))
            # PyTorch checks these outputs without naming the function ("given to None").
            outputs_tuple, outs = _tensors(func(*duals), "outputs", "None")
            unpacked = [forward_ad.unpack_dual(o) for o in outs]
        primals = tuple(u.primal for u in unpacked)
        if j is not None:
            columns.append([u.tangent if u.tangent is not None
                            else _creation.zeros_like(u.primal) for u in unpacked])
    from refimpl.ops.functional import split, stack

    sizes = [t.nelement() for t in ins]
    blocks = []
    for i, out in enumerate(primals):
        shape = tuple(out.shape)
        if not columns:
            blocks.append([_creation.zeros(shape + tuple(t.shape), dtype=out.dtype)
                           for t in ins])
            continue
        stacked = stack([c[i] for c in columns], out.dim())
        blocks.append([part.reshape(shape + tuple(t.shape))
                       for part, t in zip(split(stacked, sizes, dim=out.dim()), ins, strict=True)])
    # Lists, not tuples, where PyTorch's forward mode returns them.
    return _unpack(blocks, (outputs_tuple, inputs_tuple))


def hessian(func: Callable[..., Any], inputs: Any, create_graph: bool = False,
            strict: bool = False, vectorize: bool = False,
            outer_jacobian_strategy: str = "reverse-mode") -> Any:
    """The Jacobian of the gradient of a function returning one element: for inputs ``i`` and
    ``j`` a tensor of shape ``in_i.shape + in_j.shape``."""
    inputs_tuple, ins = _tensors(inputs, "inputs", "hessian")
    if outer_jacobian_strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError('Expected strategy to be either "forward-mode" or "reverse-mode".')

    def scalar(*args: Tensor) -> Tensor:
        out = func(*args)
        out_tuple, outs = _outputs(out, "hessian")
        _require_grad(outs, "outputs", strict)
        if out_tuple:
            raise RuntimeError("The function given to hessian should return a single Tensor")
        if out.nelement() != 1:
            raise RuntimeError("The Tensor returned by the function given to hessian should "
                               "contain a single element")
        return out.squeeze()

    def gradient(*args: Tensor) -> Any:
        if outer_jacobian_strategy == "forward-mode":
            args = tuple(t.requires_grad_(True) for t in args)
        jac = jacobian(scalar, args, create_graph=True)
        _require_grad(jac, "jacobian", strict)
        return jac

    result = jacobian(gradient, ins, create_graph=create_graph, strict=strict,
                      vectorize=vectorize, strategy=outer_jacobian_strategy)
    return _unpack(result, (inputs_tuple, inputs_tuple))


def _scalar_function(func: Callable[..., Any], inputs: Any, v: Any, create_graph: bool,
                     strict: bool, api: str) -> tuple[bool, Tensors, Tensors | None, Tensor,
                                                      tuple[Tensor | None, ...]]:
    """The common start of ``vhp`` and ``hvp``: the fresh inputs, the checked ``v``, the one
    output and its gradient, recorded so it can be differentiated again."""
    inputs_tuple, ins = _tensors(inputs, "inputs", api)
    ins = _fresh(ins, create_graph, need_graph=True)
    vs = _vector(v, ins, inputs_tuple, api, create_graph, _V_NONE_INPUT)
    outputs_tuple, outs = _outputs(func(*ins), api)
    _require_grad(outs, "outputs", strict)
    if outputs_tuple:
        raise RuntimeError(f"The function given to {api} should return a single Tensor")
    if outs[0].nelement() != 1:
        raise RuntimeError(f"The Tensor returned by the function given to {api} should contain "
                           "a single element")
    jac = _grad(outs, ins, create_graph=True)
    _require_grad(jac, "jacobian", strict)
    return inputs_tuple, ins, vs, outs[0], jac


def vhp(func: Callable[..., Any], inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> tuple[Any, Any]:
    """``(func(inputs), vᵀ·H)``: the gradient differentiated once more, with ``v`` as its
    cotangent."""
    with grad_mode.enable_grad():
        inputs_tuple, ins, vs, out, jac = _scalar_function(func, inputs, v, create_graph,
                                                           strict, "vhp")
    result = _product(jac, ins, vs, ins, strict, create_graph, "double_back")
    return _detached(out, create_graph), _unpack(_detached(result, create_graph), inputs_tuple)


def hvp(func: Callable[..., Any], inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> tuple[Any, Any]:
    """``(func(inputs), H·v)`` by the double-backward trick: ``vᵀ·H`` with respect to a dummy
    cotangent of the gradient, differentiated with respect to that cotangent."""
    with grad_mode.enable_grad():
        inputs_tuple, ins, vs, out, jac = _scalar_function(func, inputs, v, create_graph,
                                                           strict, "hvp")
        dummies = tuple(_creation.zeros_like(t, requires_grad=True) for t in ins)
        double_back = _grad(jac, ins, dummies, create_graph=True)
    result = _product(double_back, dummies, vs, ins, strict, create_graph,
                      "double_back_trick")
    return _detached(out, create_graph), _unpack(_detached(result, create_graph), inputs_tuple)
