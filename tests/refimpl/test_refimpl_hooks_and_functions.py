"""Hooks, custom Functions and saved-tensor hooks beyond what the YAML cases can say: programs
with ``try``, imports and Python introspection run on refimpl and on PyTorch, and the same
machinery on refimpl's cuda device (the strict CuPy stand-in, or CuPy on a GPU)."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest
from refimpl_helpers import run_program

import refimpl

torch = pytest.importorskip("torch", reason="PyTorch is the oracle these tests compare with")

EXP = """
class Exp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        result = x.exp()
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, g):
        (result,) = ctx.saved_tensors
        return g * result

x = torch.tensor([0., 1.], requires_grad=True)
"""

SCENARIOS = {
    # The node of a Function is its ctx, a BackwardCFunction subclass named <Name>Backward.
    "function_node_is_ctx": EXP + (
        "seen = []\n"
        "class Keep(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        seen.append(ctx)\n"
        "        return x * 2\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g\n"
        "y = Keep.apply(x)\n"
        "result = (seen[0] is y.grad_fn, type(y.grad_fn).__name__, y.grad_fn.name(),\n"
        "          isinstance(y.grad_fn, torch.autograd.function.BackwardCFunction),\n"
        "          isinstance(y.grad_fn, torch.autograd.graph.Node), repr(y))"),
    # issue 21, #16: the private _grad_fn reads as grad_fn and may not be deleted.
    "grad_fn_cannot_be_deleted": (
        "x = torch.ones(2, requires_grad=True)\n"
        "y = x * 2\n"
        "del y._grad_fn"),
    "leaf_grad_fn_cannot_be_deleted": "x = torch.ones(2, requires_grad=True)\ndel x._grad_fn",
    "grad_fn_survives_a_refused_deletion": (
        "x = torch.ones(2, requires_grad=True)\n"
        "y = x * 2\n"
        "try:\n"
        "    del y._grad_fn\n"
        "except RuntimeError:\n"
        "    pass\n"
        "y.sum().backward()\n"
        "result = (y._grad_fn is y.grad_fn, y.grad_fn.name(), x.grad.tolist())"),
    # clear_saved_tensors_on_access: saved_tensors may be read once, then it raises.
    "function_clears_saved_tensors_on_access": (
        "trace = []\n"
        "class Once(torch.autograd.Function):\n"
        "    clear_saved_tensors_on_access = True\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n"
        "        return x * 2\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        (x,) = ctx.saved_tensors\n"
        "        try:\n"
        "            ctx.saved_tensors\n"
        "        except RuntimeError as e:\n"
        "            trace.append(str(e))\n"
        "        return g * x\n"
        "x = torch.tensor([3.0], requires_grad=True)\n"
        "y = Once.apply(x)\n"
        "y.backward(retain_graph=True)\n"
        "try:\n"
        "    y.backward()\n"
        "except RuntimeError as e:\n"
        "    trace.append(str(e))\n"
        "result = (x.grad.tolist(), trace, torch.autograd.Function.clear_saved_tensors_on_access)"),
    "function_node_not_callable": EXP + "y = Exp.apply(x); y.grad_fn(torch.ones(2))",
    "function_saved_tensors_after_backward": EXP + (
        "y = Exp.apply(x); y.sum().backward(); y.grad_fn.saved_tensors"),
    "function_saved_output_is_reattached": EXP + (
        "y = Exp.apply(x)\n"
        "(r,) = y.grad_fn.saved_tensors\n"
        "result = (r is y, r.grad_fn is y.grad_fn, r.requires_grad, r.is_leaf)"),
    "function_instance_warns": EXP + "f = Exp(); result = type(f).__name__",
    "function_forward_not_implemented": (
        "class Empty(torch.autograd.Function):\n"
        "    pass\n"
        "Empty.apply(torch.ones(1, requires_grad=True))"),
    "function_multi_output_numbering": (
        "class Two(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        return x * 2, 7, x * 3\n"
        "    @staticmethod\n"
        "    def backward(ctx, g1, g2, g3):\n"
        "        return g1 * 2 + g3 * 3\n"
        "x = torch.tensor([1., 2.], requires_grad=True)\n"
        "p, k, q = Two.apply(x)\n"
        "(q * q).sum().backward()\n"
        "result = (k, p.grad_fn is q.grad_fn, x.grad)"),
    "once_differentiable_without_create_graph": EXP + (
        "from torch.autograd.function import once_differentiable\n"
        "class Sq(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n"
        "        return x * x\n"
        "    @staticmethod\n"
        "    @once_differentiable\n"
        "    def backward(ctx, g):\n"
        "        (x,) = ctx.saved_tensors\n"
        "        return 2 * x * g\n"
        "g, = torch.autograd.grad(Sq.apply(x).sum(), x, create_graph=True)\n"
        "h, = torch.autograd.grad((Sq.apply(x) ** 2).sum(), x, create_graph=True)\n"
        "result = (g.requires_grad, g.grad_fn, h.grad_fn.name(), Sq.backward.__name__)"),
    # Node hooks return torch's RemovableHandle kind of object: remove() works on each.
    "node_hook_handles_remove_only_their_hook": (
        "x = torch.tensor([1., 2.], requires_grad=True)\n"
        "y = x * 3\n"
        "f = lambda go: (go[0] * 2,)\n"
        "h1 = y.grad_fn.register_prehook(f)\n"
        "h2 = y.grad_fn.register_prehook(f)\n"
        "h1.remove()\n"
        "y.sum().backward()\n"
        "result = x.grad"),
    "unbind_node_prehook_sees_none": (
        "x = torch.tensor([1., 2.], requires_grad=True)\n"
        "u = x.unbind()\n"
        "seen = []\n"
        "u[0].grad_fn.register_prehook(lambda go: seen.append(go))\n"
        "u[0].backward()\n"
        "result = (seen, x.grad)"),
    "unbind_node_call": (
        "x = torch.tensor([1., 2.], requires_grad=True)\n"
        "u = x.unbind()\n"
        "result = u[0].grad_fn(torch.tensor(1.), None)"),
    "posthook_returning_list": (
        "x = torch.tensor([1., 2.], requires_grad=True)\n"
        "y = x * 3\n"
        "y.grad_fn.register_hook(lambda gi, go: [gi[0], None])\n"
        "y.sum().backward()"),
    "prehook_changing_dtype": (
        "x = torch.tensor([1., 2.], requires_grad=True)\n"
        "y = x * 3\n"
        "y.grad_fn.register_prehook(lambda go: (go[0].double(),))\n"
        "y.sum().backward()"),
    # Pack order is an op's inputs in sorted name order, then its result.
    "pack_order_of_ops": (
        "names = []\n"
        "x = torch.tensor([1., 2.], requires_grad=True)\n"
        "w = torch.tensor([3., 4.], requires_grad=True)\n"
        "with torch.autograd.graph.saved_tensors_hooks(\n"
        "        lambda t: names.append(t.tolist()) or t.detach(), lambda t: t):\n"
        "    x @ w\n"
        "    x / w\n"
        "    torch.pow(x, w)\n"
        "result = names"),
    "unpacked_leaf_is_reattached": (
        "seen = []\n"
        "x = torch.tensor([1., 2.], requires_grad=True)\n"
        "def unpack(t):\n"
        "    seen.append((t.requires_grad, t.grad_fn))\n"
        "    return t\n"
        "with torch.autograd.graph.saved_tensors_hooks(lambda t: t.detach(), unpack):\n"
        "    y = (x * x).sum()\n"
        "g, = torch.autograd.grad(y, x, create_graph=True)\n"
        "gg, = torch.autograd.grad(g.sum(), x)\n"
        "result = (seen, g, gg)"),
    "pack_hook_raising_stops_the_op": (
        "x = torch.tensor([1., 2.], requires_grad=True)\n"
        "def pack(t):\n"
        "    raise ValueError('no saving here')\n"
        "with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):\n"
        "    y = x.exp()"),
    "hooks_survive_graph_deletion": (
        "import gc\n"
        "calls = []\n"
        "x = torch.tensor([1., 2.], requires_grad=True)\n"
        "x.register_post_accumulate_grad_hook(lambda p: calls.append(p.grad.tolist()))\n"
        "(x * 2).sum().backward()\n"
        "gc.collect()\n"
        "(x * 3).sum().backward()\n"
        "result = calls"),
    # A Function that marks dirty and saves a view of its input forms no reference cycle: the
    # output is freed as soon as the last name goes, without the cycle collector.
    "dirty_saved_view_freed_without_gc": (
        "import gc, weakref\n"
        "class Double(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        x.mul_(2)\n"
        "        ctx.mark_dirty(x)\n"
        "        ctx.save_for_backward(x)\n"
        "        return x\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        (x,) = ctx.saved_tensors\n"
        "        return g * 2\n"
        "gc.disable()\n"
        "a = torch.ones(3, requires_grad=True)\n"
        "y = Double.apply(a.clone()[:2])\n"
        "alive = weakref.ref(y)\n"
        "del y\n"
        "result = alive() is None\n"
        "gc.enable()"),
    # Each node runs in the thread-local state of the backward call: a saved-tensors-hooks
    # context an unpack hook enters, or a disable_saved_tensors_hooks a tensor hook enters,
    # ends with that node.
    "hooks_entered_by_a_hook_end_with_its_node": (
        "calls = []\n"
        "inner = torch.autograd.graph.saved_tensors_hooks(\n"
        "    lambda t: calls.append('inner') or t, lambda t: t)\n"
        "def unpack(t):\n"
        "    inner.__enter__()\n"
        "    return t\n"
        "a = torch.ones(2, requires_grad=True)\n"
        "with torch.autograd.graph.saved_tensors_hooks(lambda t: t, unpack):\n"
        "    y = a.exp()\n"
        "(y * a).sum().backward()\n"
        "torch.ones(2, requires_grad=True).exp()\n"
        "def hook(g):\n"
        "    torch.autograd.graph.disable_saved_tensors_hooks('off').__enter__()\n"
        "    return g\n"
        "z = a * 2\n"
        "z.register_hook(hook)\n"
        "z.sum().backward()\n"
        "with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):\n"
        "    pass\n"
        "result = (calls, a.grad)"),
    # A backward run from inside a node, nested far past what one thread's Python stack holds
    # (PyTorch moves on to a new thread every 60 levels).
    "reentrant_backward_nested_1000_deep": (
        "class Nest(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, depth):\n"
        "        ctx.depth = depth\n"
        "        return x * 3\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        if ctx.depth > 0:\n"
        "            with torch.enable_grad():\n"
        "                leaf = torch.ones(1, requires_grad=True)\n"
        "                Nest.apply(leaf, ctx.depth - 1).sum().backward()\n"
        "            seen.append(leaf.grad.item())\n"
        "        return g * 3, None\n"
        "seen = []\n"
        "x = torch.ones(1, requires_grad=True)\n"
        "Nest.apply(x, 1000).sum().backward()\n"
        "result = (x.grad, len(seen), sum(seen))"),
    # With warnings turned into errors, anomaly mode's report cannot be raised while the
    # node's error is on its way: PyTorch prints it to stderr and raises the original error.
    "anomaly_report_under_warnings_as_errors": (
        "import warnings\n"
        "x = torch.tensor([0.0], requires_grad=True)\n"
        "z = (x / x).sum()\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('error')\n"
        "    with torch.autograd.set_detect_anomaly(True):\n"
        "        z.backward()"),
    # A non-reentrant checkpoint keeps its tensor arguments as saved tensors and passes the
    # others through as they are, a tuple that starts with a tensor included.
    "checkpoint_passes_a_tuple_argument_through": (
        "x = torch.ones(2, requires_grad=True)\n"
        "pair = (torch.ones(1), 3.0, 'z')\n"
        "f = lambda a, t: (a * t[1]).sin() + t[0].sum()\n"
        "y = torch.utils.checkpoint.checkpoint(f, x, pair, use_reentrant=False)\n"
        "y.sum().backward()\n"
        "result = x.grad"),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_behaves_like_torch(name: str) -> None:
    code = SCENARIOS[name]
    theirs = run_program(torch, code)
    ours = run_program(refimpl, code.replace("from torch.autograd.function import",
                                             "from refimpl.autograd.function import"))
    assert ours == theirs


def _chain(device: str) -> tuple:
    """A custom Function, node hooks and saved-tensor hooks together on one device."""
    lib = refimpl

    class Cube(lib.autograd.Function):
        @staticmethod
        def forward(ctx: object, x: refimpl.Tensor) -> refimpl.Tensor:
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx: object, g: refimpl.Tensor) -> refimpl.Tensor:
            (x,) = ctx.saved_tensors
            return 3 * x * x * g

    devices = []
    x = lib.tensor([1.0, 2.0], device=device, requires_grad=True)
    with lib.autograd.graph.saved_tensors_hooks(
            lambda t: devices.append(str(t.device)) or t.detach(), lambda t: t):
        y = Cube.apply(x)
        z = y.exp()
    with lib.autograd.graph.save_on_cpu():
        w = z * x
    w.grad_fn.register_prehook(lambda go: (go[0] * 2,))
    y.register_hook(lambda g: g + 1)
    (g,) = lib.autograd.grad(w.sum(), x, create_graph=True)
    (gg,) = lib.autograd.grad(g.sum(), x)
    return devices, str(g.device), g.detach().numpy(force=True), gg.detach().numpy(force=True)


def test_hooks_and_functions_on_cuda_match_cpu(cuda_backend: ModuleType) -> None:
    dev_devices, dev, g, gg = _chain("cuda")
    cpu_devices, _, cpu_g, cpu_gg = _chain("cpu")
    assert dev == "cuda:0"
    assert dev_devices == ["cuda:0"] * len(cpu_devices)
    np.testing.assert_allclose(g, cpu_g, rtol=1e-6)
    np.testing.assert_allclose(gg, cpu_gg, rtol=1e-6)


def test_chain_matches_torch() -> None:
    _, _, g, gg = _chain("cpu")
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = x * x * x
    w = y.exp() * x
    w.grad_fn.register_prehook(lambda go: (go[0] * 2,))
    y.register_hook(lambda g: g + 1)
    (tg,) = torch.autograd.grad(w.sum(), x, create_graph=True)
    (tgg,) = torch.autograd.grad(tg.sum(), x)
    np.testing.assert_allclose(g, tg.detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(gg, tgg.numpy(), rtol=1e-5)
