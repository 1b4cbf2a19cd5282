"""``refimpl.autograd.gradcheck``: check analytical gradients against finite differences, with
PyTorch's semantics::

    x = refimpl.tensor([1., 2.], dtype=refimpl.float64, requires_grad=True)
    refimpl.autograd.gradcheck(lambda t: t.sin() * t, (x,))      # True, or GradcheckError

Slow mode builds both Jacobians in full: the numerical one by central differences (each input
element moved by ``±eps`` in place, ``func`` run again), the analytical one a row per output
element by ``autograd.grad`` with a one-hot gradient, twice (the two must agree within
``nondet_tol``: a backward that is not reentrant is refused). Fast mode compares only the
scalars ``vᵀ J u`` for random unit vectors ``u`` (per input) and ``v`` (per output), and on a
mismatch recomputes the pair in slow mode for the message. After the Jacobians, backward with
zero output gradients must give zero (or no) input gradients, of the inputs' dtype and size.
The failure messages are PyTorch 2.13's; the random vectors of fast mode are refimpl's own
(seeded, so a run repeats), not PyTorch's.

refimpl has no undefined gradients: ``check_undefined_grad`` runs backward with zero output
gradients, what an undefined gradient becomes here. ``check_batched_grad``,
``check_batched_forward_grad`` and ``masked`` (sparse inputs) are not supported and raise
NotImplementedError when asked for.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy

from refimpl import _backend, _dtype
from refimpl._tensor import Tensor, wrap

__all__ = ["gradcheck", "gradgradcheck", "GradcheckError"]

FAILED_NONDET_MSG = """

NOTE: If your op relies on non-deterministic operations i.e., it is listed here:
https://pytorch.org/docs/stable/generated/torch.use_deterministic_algorithms.html
this failure might be expected.

If you are adding a new operator, please file an issue and then use one of the
workarounds. The workaround depends on how your test invokes gradcheck/gradgradcheck.
If the test
- manually invokes gradcheck/gradgradcheck, then call gradcheck/gradgradcheck
  with `nondet_tol=<tol>` as a keyword argument.
- is OpInfo-based (e.g., in test_ops_gradients.py), then modify the OpInfo for the test
  to have `gradcheck_nondet_tol=<tol>`.
- is a Module test (e.g., in common_nn.py), then modify the corresponding
  module_test entry to have `gradcheck_nondet_tol=<tol>`
"""

FAST_FAIL_SLOW_OK_MSG = """\
Fast gradcheck failed but element-wise differences are small. This means that the
test might've passed in slow_mode!

If you are adding a new operator, please file an issue and then use one of the
workarounds. The workaround depends on how your test invokes gradcheck/gradgradcheck:

If the test
- manually invokes gradcheck/gradgradcheck, then call gradcheck/gradgradcheck
  with `fast_mode=False` as a keyword argument.
- is OpInfo-based (e.g., in test_ops_gradients.py), then modify the OpInfo for the test
  to have `gradcheck_fast_mode=False`
- is a Module test (e.g., in common_nn.py), then modify the corresponding
  module_test entry to have `gradcheck_fast_mode=False`"""

UNDEFINED_GRAD_NOTE = ('Please look at "Notes about undefined output gradients" in '
                       '"tools/autograd/derivatives.yaml"')

# Fast mode's vectors: refimpl's own stream, the same in every call (PyTorch draws from a fresh
# default-seeded generator, so its vectors repeat too).
_FAST_MODE_SEED = 67280421310721


class GradcheckError(RuntimeError):
    """What gradcheck and gradgradcheck raise when a check fails."""


def _as_tuple(x: Any) -> tuple[Any, ...]:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _diff_inputs(inputs: Sequence[Any]) -> list[tuple[int, Tensor]]:
    return [(i, x) for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]


def _differentiable_outputs(out: Any) -> tuple[Tensor, ...]:
    return tuple(o for o in _as_tuple(out) if o.requires_grad)


def _host(t: Tensor) -> numpy.ndarray:
    return numpy.asarray(t.detach().numpy(force=True))


def _on_host(array: Any, like: Tensor | None = None) -> Tensor:
    """A cpu tensor of ``array`` (of ``like``'s dtype when given)."""
    t = wrap(numpy.array(array, order="C"), _backend.CPU)
    return t if like is None else t.to(like.dtype)


def _jacobian_tensor(array: numpy.ndarray, like: Tensor) -> Tensor:
    """A Jacobian as the message prints it: a tensor of the input's dtype, on the cpu."""
    return _on_host(array, like)


def _check_inputs(inputs: Sequence[Any]) -> None:
    found = False
    for idx, inp in enumerate(inputs):
        if not (isinstance(inp, Tensor) and inp.requires_grad):
            continue
        if inp.dtype not in (_dtype.float64, _dtype.complex128):
            warnings.warn(f"Input #{idx} requires gradient and is not a double precision "
                          "floating point or complex. This check will likely fail if all the "
                          "inputs are not of double precision floating point or complex. ",
                          UserWarning, stacklevel=4)
        if not all(st > 0 or sz <= 1 for st, sz in zip(inp.stride(), inp.shape, strict=True)):
            raise RuntimeError(
                f"The {idx}th input has a dimension with stride 0. gradcheck only supports "
                "inputs that are non-overlapping to be able to compute the numerical gradients "
                "correctly. You should call .contiguous on the input before passing it to "
                "gradcheck.")
        found = True
    if not found:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, "
                         "but none of them have requires_grad=True.")


def _outputs_at(func: Callable[..., Any], inputs: Sequence[Any]) -> list[numpy.ndarray | None]:
    """The values of ``func``'s tensor outputs (None for a non-tensor one), copied: an
    output may be a view of the input about to be moved back."""
    return [_host(o).copy() if isinstance(o, Tensor) else None
            for o in _as_tuple(func(*inputs))]


def _directional(func: Callable[..., Any], inputs: Sequence[Any], inp: Tensor,
                 delta: numpy.ndarray, norm: float) -> list[numpy.ndarray | None]:
    """Central difference of every output along ``delta`` (moved in place, as PyTorch does,
    through ``.data``, so the input's version and graph are untouched), divided by ``2 norm``."""
    data = inp.data
    orig = _host(data).copy()
    shift = delta.reshape(orig.shape).astype(orig.dtype)
    data.copy_(_on_host(orig - shift))
    before = _outputs_at(func, inputs)
    data.copy_(_on_host(orig + shift))
    after = _outputs_at(func, inputs)
    data.copy_(_on_host(orig))
    diffs: list[numpy.ndarray | None] = []
    for a, b in zip(before, after, strict=True):
        if a is None or b is None:
            diffs.append(None)
            continue
        if a.shape != b.shape or a.dtype != b.dtype:
            raise GradcheckError("Expected `func` to return outputs with the same dtype and "
                                 "shape when inputs are perturbed")
        diffs.append(((b.astype(numpy.float64) - a) / (2 * norm)).reshape(-1))
    return diffs


def _numerical_jacobians(func: Callable[..., Any], inputs: Sequence[Any], outputs: list[Any],
                         eps: float) -> list[list[numpy.ndarray]]:
    """[input][output] Jacobians of shape (input numel, output numel), for every tensor
    output (differentiable or not)."""
    result = []
    for _, inp in _diff_inputs(inputs):
        n = inp.numel()
        columns: list[list[numpy.ndarray]] = [[] for _ in outputs]
        for k in range(n):
            delta = numpy.zeros(n)
            delta[k] = eps
            for o, d in enumerate(_directional(func, inputs, inp, delta, eps)):
                columns[o].append(numpy.zeros(0) if d is None else d)
        result.append([numpy.stack(c) if c else numpy.zeros((0, 0)) for c in columns])
    return result


def _analytical_rows(inputs: Sequence[Any], output: Tensor,
                     grad_outputs: list[numpy.ndarray]) -> tuple[list[numpy.ndarray], bool, bool]:
    """A Jacobian per input whose column ``k`` is the vector-Jacobian product with
    ``grad_outputs[k]``, and whether every gradient had the input's size and dtype."""
    from refimpl.autograd import grad

    diff = [x for _, x in _diff_inputs(inputs)]
    jacobians = [numpy.zeros((x.numel(), len(grad_outputs))) for x in diff]
    sizes_ok = types_ok = True
    for k, v in enumerate(grad_outputs):
        g = _on_host(v.reshape(tuple(output.shape)), output).to(output.device)
        vjps = grad(output, diff, g, retain_graph=True, allow_unused=True)
        for j, (vjp, x) in enumerate(zip(vjps, diff, strict=True)):
            if vjp is None:
                continue
            if tuple(vjp.shape) != tuple(x.shape):
                sizes_ok = False
            elif vjp.dtype != x.dtype:
                types_ok = False
            values = _host(vjp).reshape(-1)
            if values.size == jacobians[j].shape[0]:
                jacobians[j][:, k] = values
    return jacobians, sizes_ok, types_ok


def _checked_rows(inputs: Sequence[Any], output: Tensor, grad_outputs: list[numpy.ndarray],
                  nondet_tol: float, check_grad_dtypes: bool) -> list[numpy.ndarray]:
    first, sizes_ok, types_ok = _analytical_rows(inputs, output, grad_outputs)
    second, _, _ = _analytical_rows(inputs, output, grad_outputs)
    # PyTorch 2.13 unpacks the two flags in the other order than they are returned: a gradient
    # of another dtype is reported as one of another size (always), and one of another size
    # only as a dtype mismatch (with check_grad_dtypes).
    if not sizes_ok and check_grad_dtypes:
        raise GradcheckError("Gradient has dtype mismatch")
    if not types_ok:
        raise GradcheckError("Analytical gradient has incorrect size")
    for a, b in zip(first, second, strict=True):
        if a.size and numpy.abs(a - b).max() > nondet_tol:
            raise GradcheckError(
                "Backward is not reentrant, i.e., running backward with same input and "
                "grad_output multiple times gives different values, although analytical "
                "gradient matches numerical gradient."
                f"The tolerance for nondeterminism was {nondet_tol}." + FAILED_NONDET_MSG)
    return first


def _allclose(a: numpy.ndarray, n: numpy.ndarray, rtol: float, atol: float) -> bool:
    return bool(numpy.allclose(a, n, rtol=rtol, atol=atol))


def _mismatch(a: Tensor | float, n: Tensor | float, out_idx: int, inp_idx: int,
              mode: str = "") -> str:
    return (f"Jacobian {mode}mismatch for output {out_idx:d} with respect to input "
            f"{inp_idx:d},\nnumerical:{n}\nanalytical:{a}\n")


def _slow(func: Callable[..., Any], func_out: tuple[Any, ...], inputs: Sequence[Any],
          outputs: tuple[Tensor, ...], eps: float, rtol: float, atol: float,
          check_grad_dtypes: bool, nondet_tol: float) -> None:
    tensors = [o for o in func_out if isinstance(o, Tensor)]
    numerical = _numerical_jacobians(func, inputs, tensors, eps)
    if not outputs:
        if any(numpy.count_nonzero(n) for per_input in numerical for n in per_input):
            raise GradcheckError("Numerical gradient for function expected to be zero")
        return
    diff = [x for _, x in _diff_inputs(inputs)]
    differentiable = [i for i, o in enumerate(tensors) if o.requires_grad]
    for i, (o_idx, output) in enumerate(zip(differentiable, outputs, strict=True)):
        one_hot = list(numpy.eye(output.numel()))
        analytical = _checked_rows(inputs, output, one_hot, nondet_tol, check_grad_dtypes)
        for j, (a, x) in enumerate(zip(analytical, diff, strict=True)):
            n = numerical[j][o_idx]
            if not _allclose(a, n, rtol, atol):
                raise GradcheckError(_mismatch(_jacobian_tensor(a, x), _jacobian_tensor(n, x),
                                               i, j))


def _unit_vector(numel: int, rng: numpy.random.Generator) -> numpy.ndarray:
    vec = rng.random(numel)
    norm = numpy.linalg.norm(vec)
    return vec / norm if norm else vec


def _fast(func: Callable[..., Any], func_out: tuple[Any, ...], inputs: Sequence[Any],
          outputs: tuple[Tensor, ...], eps: float, rtol: float, atol: float,
          check_grad_dtypes: bool, nondet_tol: float) -> None:
    rng = numpy.random.default_rng(_FAST_MODE_SEED)
    diff = _diff_inputs(inputs)
    all_u = [_unit_vector(x.numel(), rng) for _, x in diff]
    all_v = [_unit_vector(o.numel(), rng) for o in outputs]
    tensors = [o for o in func_out if isinstance(o, Tensor)]
    differentiable = [k for k, o in enumerate(tensors) if o.requires_grad]
    # Ju by a central difference along eps * u, for every output.
    all_ju = [_directional(func, inputs, x, u * eps, eps) for (_, x), u in zip(diff, all_u,
                                                                                 strict=True)]
    if not outputs:
        for ju in all_ju:
            for d in ju:
                if d is not None and d.size and numpy.abs(d).max() > nondet_tol:
                    raise GradcheckError("Numerical gradient for function expected to be zero")
        return
    for i, (output, v) in enumerate(zip(outputs, all_v, strict=True)):
        vj = _checked_rows(inputs, output, [v], nondet_tol, check_grad_dtypes)
        for j, u in enumerate(all_u):
            analytical = float(vj[j][:, 0] @ u)
            numerical = float(v @ all_ju[j][differentiable[i]])
            # The atol of each Jacobian element, summed over vᵀ·(all ones)·u.
            scaled_atol = atol * float(u.sum()) * float(v.sum())
            if not _allclose(numpy.float64(analytical), numpy.float64(numerical), rtol,
                             scaled_atol):
                # PyTorch prints fast mode's two scalars as Python floats.
                raise GradcheckError(
                    _mismatch(analytical, numerical, i, j)
                    + _slow_details(func, inputs, j, differentiable[i], output, eps, rtol,
                                    atol))


def _slow_details(func: Callable[..., Any], inputs: Sequence[Any], j: int, out_pos: int,
                  output: Tensor, eps: float, rtol: float, atol: float) -> str:
    """Fast mode's failure, explained by the pair's Jacobians in slow mode."""
    inp = _diff_inputs(inputs)[j][1]
    tensors = [o for o in _as_tuple(func(*inputs)) if isinstance(o, Tensor)]
    numerical = _numerical_jacobians(func, inputs, tensors, eps)[j][out_pos]
    a = _analytical_rows(inputs, output, list(numpy.eye(output.numel())))[0][j]
    max_diff = float(numpy.abs(numerical - a).max()) if a.size else 0.0
    msg = ("\nThe above quantities relating the numerical and analytical jacobians are "
           "computed \nin fast mode. See: https://github.com/pytorch/pytorch/issues/53876 for "
           "more background \nabout fast mode. Below, we recompute numerical and analytical "
           "jacobians in slow mode:\n\n"
           f"Numerical:\n {_jacobian_tensor(numerical, inp)}\n"
           f"Analytical:\n{_jacobian_tensor(a, inp)}\n\n"
           f"The max per-element difference (slow mode) is: {max_diff}.\n")
    if _allclose(a, numerical, rtol, atol):
        msg += FAST_FAIL_SLOW_OK_MSG
    return msg


def _check_forward_ad(func: Callable[..., Any], func_out: tuple[Any, ...],
                      inputs: Sequence[Any], eps: float, rtol: float, atol: float) -> None:
    """The Jacobian forward AD gives (a tangent per input element) against the numerical
    one."""
    from refimpl.autograd import forward_ad

    tensors = [o for o in func_out if isinstance(o, Tensor)]
    numerical = _numerical_jacobians(func, inputs, tensors, eps)
    for j, (idx, x) in enumerate(_diff_inputs(inputs)):
        columns: list[list[numpy.ndarray]] = [[] for _ in tensors]
        for k in range(x.numel()):
            basis = numpy.zeros(x.numel())
            basis[k] = 1.0
            tangent = _on_host(basis.reshape(tuple(x.shape)), x).to(x.device)
            with forward_ad.dual_level():
                args = list(inputs)
                args[idx] = forward_ad.make_dual(x.detach(), tangent)
                outs = [o for o in _as_tuple(func(*args)) if isinstance(o, Tensor)]
                for o, out in enumerate(outs):
                    t = forward_ad.unpack_dual(out).tangent
                    columns[o].append(numpy.zeros(out.numel()) if t is None
                                      else _host(t).reshape(-1))
        for o, col in enumerate(columns):
            if not tensors[o].requires_grad or not col:
                continue
            a = numpy.stack(col)
            n = numerical[j][o]
            if not _allclose(a, n, rtol, atol):
                raise GradcheckError(_mismatch(_jacobian_tensor(a, x), _jacobian_tensor(n, x),
                                               o, j, "computed with forward mode "))


def _zero_output_grads(outputs: Sequence[Tensor], inputs: Sequence[Any]) -> tuple[Any, ...]:
    from refimpl import _creation
    from refimpl.autograd import grad

    diff = [x for _, x in _diff_inputs(inputs)]
    if not diff:
        raise GradcheckError("no Tensors requiring grad found in input")
    return grad(list(outputs), diff, [_creation.zeros_like(o) for o in outputs],
                allow_unused=True)


def _check_multiplied_by_grad_output(outputs: Sequence[Tensor], inputs: Sequence[Any]) -> None:
    diff = [x for _, x in _diff_inputs(inputs)]
    for gi, di in zip(_zero_output_grads(outputs, inputs), diff, strict=True):
        if gi is None:
            continue
        if numpy.any(_host(gi) != 0):
            raise GradcheckError("backward not multiplied by grad_output")
        if gi.dtype != di.dtype:
            raise GradcheckError("grad is incorrect type")
        if gi.device != di.device:
            raise GradcheckError("grad is incorrect device")
        if tuple(gi.shape) != tuple(di.shape):
            raise GradcheckError("grad is incorrect size")


def _check_undefined_grads(func: Callable[..., Any], inputs: Sequence[Any]) -> None:
    def warn_bc_breaking() -> None:
        warnings.warn("Backwards compatibility: New undefined gradient support checking "
                      "feature is enabled by default, but it may break existing callers of "
                      "this function. If this is true for you, you can call this function "
                      'with "check_undefined_grad=False" to disable the feature',
                      UserWarning, stacklevel=5)

    outputs = _differentiable_outputs(func(*inputs))
    try:
        grads = _zero_output_grads(outputs, inputs)
    except RuntimeError as error:
        warn_bc_breaking()
        raise GradcheckError("Expected backward function to handle undefined output grads. "
                             + UNDEFINED_GRAD_NOTE) from error
    for gi in grads:
        if gi is not None and numpy.any(_host(gi) != 0):
            warn_bc_breaking()
            raise GradcheckError("Expected all input grads to be undefined or zero when all "
                                 "output grads are undefined or zero. " + UNDEFINED_GRAD_NOTE)


def _real_parts_of_inputs(func: Callable[..., Any], inputs: tuple[Any, ...]
                          ) -> list[tuple[Callable[..., Any], tuple[Any, ...]]]:
    """``func`` and ``inputs`` as functions of real inputs only: with a complex input that
    requires grad, once of its real part (the imaginary part held) and once of its imaginary
    part. Its complex gradient is the real part's plus 1j times the imaginary part's
    (PyTorch's convention), so both checks together check it, as PyTorch's fast mode does.
    (PyTorch's slow mode prints a complex Jacobian instead when one fails.)"""
    complex_at = [i for i, x in enumerate(inputs)
                  if isinstance(x, Tensor) and x.requires_grad and x.dtype.kind == "c"]
    if not complex_at:
        return [(func, inputs)]
    from refimpl.ops.complex_views import view_as_real

    parts = []
    for part in (0, 1):
        def rebuilt(*args: Any, part: int = part) -> Any:
            args = list(args)
            for i in complex_at:
                kept = view_as_real(inputs[i].detach())[..., 1 - part]
                re, im = (args[i], kept) if part == 0 else (kept, args[i])
                args[i] = re + im * 1j
            return func(*args)

        real_inputs = tuple(view_as_real(x.detach())[..., part].clone().requires_grad_()
                            if i in complex_at else x for i, x in enumerate(inputs))
        parts.append((rebuilt, real_inputs))
    return parts


def _check_real_and_imag_outputs(check: Callable[..., None], func: Callable[..., Any],
                                 inputs: tuple[Any, ...], eps: float, rtol: float,
                                 atol: float, check_grad_dtypes: bool,
                                 nondet_tol: float) -> None:
    """``check`` on ``func``; where it has complex outputs, as PyTorch does: on their
    imaginary parts, then on their real parts, a Jacobian mismatch of a complex output saying
    which part it considered."""
    func_out = _as_tuple(func(*inputs))
    tensors = [o for o in func_out if isinstance(o, Tensor)]
    complex_at = {i for i, o in enumerate(_differentiable_outputs(func_out))
                  if o.dtype.kind == "c"}
    if not complex_at:
        check(func, func_out, inputs, _differentiable_outputs(func_out), eps, rtol, atol,
              check_grad_dtypes, nondet_tol)
        return
    del tensors
    from refimpl.ops.complex_views import view_as_real

    for part, name in ((1, "imaginary"), (0, "real")):
        def part_of(*args: Any, part: int = part) -> tuple[Any, ...]:
            return tuple(view_as_real(o)[..., part]
                         if isinstance(o, Tensor) and o.dtype.kind == "c" else o
                         for o in _as_tuple(func(*args)))

        part_out = part_of(*inputs)
        try:
            check(part_of, part_out, inputs, _differentiable_outputs(part_out), eps, rtol,
                  atol, check_grad_dtypes, nondet_tol)
        except GradcheckError as error:
            text = str(error)
            if any(text.startswith(f"Jacobian mismatch for output {i:d} ") or
                   text.startswith(f"Jacobian computed with forward mode mismatch for output "
                                   f"{i:d} ") for i in complex_at):
                raise GradcheckError(f"While considering the {name} part of complex outputs "
                                     f"only, {text}") from None
            raise


def gradcheck(func: Callable[..., Any], inputs: Any, *, eps: float = 1e-6, atol: float = 1e-5,
              rtol: float = 1e-3, raise_exception: bool = True, nondet_tol: float = 0.0,
              check_undefined_grad: bool = True, check_grad_dtypes: bool = False,
              check_batched_grad: bool = False, check_batched_forward_grad: bool = False,
              check_forward_ad: bool = False, check_backward_ad: bool = True,
              fast_mode: bool = False, masked: bool | None = None) -> bool:
    """Check the gradients ``func`` computes for ``inputs`` (the tensors among them that
    require grad, best in float64) against finite differences; True, or GradcheckError (False
    with ``raise_exception=False``)."""
    if not (check_forward_ad or check_backward_ad):
        raise AssertionError(
            "Expected at least one of check_forward_ad or check_backward_ad to be True")
    if check_batched_grad and not check_backward_ad:
        raise AssertionError(
            "Setting check_batched_grad=True requires check_backward_ad to be True")
    if check_batched_forward_grad and not check_forward_ad:
        raise AssertionError(
            "Setting check_batched_forward_grad=True requires check_forward_ad to be True")
    for name, value in (("check_batched_grad", check_batched_grad),
                        ("check_batched_forward_grad", check_batched_forward_grad),
                        ("masked", masked)):
        if value:
            raise NotImplementedError(f"refimpl's gradcheck does not implement {name}=True "
                                      "(it has no batched gradients and no sparse tensors)")
    try:
        inputs = _as_tuple(inputs)
        _check_inputs(inputs)
        func_out = _as_tuple(func(*inputs))
        outputs = _differentiable_outputs(func_out)
        if check_backward_ad:
            check = _fast if fast_mode else _slow
            for part_func, part_inputs in _real_parts_of_inputs(func, inputs):
                _check_real_and_imag_outputs(check, part_func, part_inputs, eps, rtol, atol,
                                             check_grad_dtypes, nondet_tol)
        if check_forward_ad:
            _check_forward_ad(func, func_out, inputs, eps, rtol, atol)
        if not check_backward_ad:
            return True
        _check_multiplied_by_grad_output(outputs, inputs)
        if check_undefined_grad:
            _check_undefined_grads(func, inputs)
        return True
    except GradcheckError:
        if raise_exception:
            raise
        return False


def gradgradcheck(func: Callable[..., Any], inputs: Any, grad_outputs: Any = None, *,
                  eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
                  gen_non_contig_grad_outputs: bool = False, raise_exception: bool = True,
                  nondet_tol: float = 0.0, check_undefined_grad: bool = True,
                  check_grad_dtypes: bool = False, check_batched_grad: bool = False,
                  check_fwd_over_rev: bool = False, check_rev_over_rev: bool = True,
                  fast_mode: bool = False, masked: bool = False) -> bool:
    """gradcheck of ``func``'s vector-Jacobian product (``autograd.grad`` with
    ``create_graph=True``) with respect to the inputs and the output gradients, which are
    random in [-1, 1) unless given."""
    from refimpl import _creation
    from refimpl.autograd import grad

    if not (check_fwd_over_rev or check_rev_over_rev):
        raise AssertionError(
            "Expected at least one of check_fwd_over_rev or check_rev_over_rev to be True")
    if check_undefined_grad and not check_rev_over_rev:
        raise AssertionError(
            "Setting check_undefined_grad=True requires check_rev_over_rev to be True")
    if check_batched_grad and not check_rev_over_rev:
        raise AssertionError(
            "Setting check_batched_grad=True requires check_rev_over_rev to be True")
    inputs = _as_tuple(inputs)
    if grad_outputs is None:
        rng = numpy.random.default_rng(_FAST_MODE_SEED)
        made = []
        for out in _differentiable_outputs(func(*inputs)):
            dtype = out.dtype if out.dtype.kind in "fc" else _dtype.float64
            values = _on_host(rng.uniform(-1.0, 1.0, tuple(out.shape))).to(dtype).to(out.device)
            if gen_non_contig_grad_outputs:
                # Every other element of a buffer twice as long: the same values, strided.
                g = _creation.zeros((*tuple(out.shape), 2), dtype=dtype, device=out.device)[..., 0]
                g.copy_(values)
            else:
                g = values
            made.append(g.requires_grad_())
        grad_outputs = tuple(made)
    else:
        grad_outputs = _as_tuple(grad_outputs)
    count = len(grad_outputs)
    diff_inputs = {i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad}
    diff_grads = {i for i, x in enumerate(grad_outputs) if x.requires_grad}

    def new_func(*args: Any) -> tuple[Tensor, ...]:
        given = tuple(x.requires_grad_() if i in diff_inputs else x
                      for i, x in enumerate(args[:-count]))
        outputs = _differentiable_outputs(func(*given))
        gos = tuple(x.requires_grad_() if i in diff_grads else x
                    for i, x in enumerate(args[-count:]))
        wrt = tuple(x for i, x in enumerate(given) if i in diff_inputs)
        grads = grad(outputs, wrt, gos, create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return gradcheck(new_func, inputs + grad_outputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception, nondet_tol=nondet_tol,
                     check_undefined_grad=check_undefined_grad,
                     check_grad_dtypes=check_grad_dtypes, check_batched_grad=check_batched_grad,
                     fast_mode=fast_mode, check_forward_ad=check_fwd_over_rev,
                     check_backward_ad=check_rev_over_rev, masked=masked or None)
