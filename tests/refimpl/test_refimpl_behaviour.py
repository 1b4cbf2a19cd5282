"""Flags, errors, warnings and printing, run as the same program on refimpl and on PyTorch.

Each scenario is a short program; what it returns, raises and warns must be identical
(PyTorch's "(Triggered internally at ...)" suffix on C++ warnings aside).
"""

from __future__ import annotations

import pytest
from refimpl_helpers import run_program

import refimpl

torch = pytest.importorskip("torch", reason="PyTorch is the oracle these tests compare with")

SCENARIOS = {
    # ---- leaves, requires_grad, grad_fn
    "leaf_flags": "x = torch.rand(3); result = (x.is_leaf, x.requires_grad, x.grad_fn, x.grad)",
    "leaf_requires_grad": "x = torch.rand(3, requires_grad=True); "
                          "result = (x.is_leaf, x.requires_grad, x.grad_fn)",
    "nonleaf_flags": "x = torch.rand(3, requires_grad=True) + 1; "
                     "result = (x.is_leaf, x.requires_grad, type(x.grad_fn).__name__)",
    "no_grad_input_stays_leaf": "x = torch.rand(3) + 1; result = (x.is_leaf, x.grad_fn)",
    "set_requires_grad_on_nonleaf_false": "y = torch.rand(3, requires_grad=True) * 2; "
                                          "y.requires_grad = False",
    "set_requires_grad_on_nonleaf_true": "y = torch.rand(3, requires_grad=True) * 2; "
                                         "y.requires_grad = True",
    "requires_grad_method_nonleaf_true": "y = torch.rand(3, requires_grad=True) * 2; "
                                         "result = y.requires_grad_(True) is y",
    "requires_grad_method_nonleaf_false": "y = torch.rand(3, requires_grad=True) * 2; "
                                          "y.requires_grad_(False)",
    "requires_grad_method_returns_self": "x = torch.rand(3); "
                                         "result = (x.requires_grad_() is x, x.requires_grad)",
    "int_requires_grad_constructor": "torch.tensor([1, 2], requires_grad=True)",
    "int_requires_grad_attribute": "i = torch.tensor([1, 2]); i.requires_grad = True",
    "int_requires_grad_method": "i = torch.tensor([1, 2]); i.requires_grad_()",
    "int_requires_grad_false_ok": "i = torch.tensor([1, 2]); i.requires_grad = False; "
                                  "result = i.requires_grad",
    "int_zeros_requires_grad": "torch.zeros(2, dtype=torch.int64, requires_grad=True)",
    "complex_requires_grad": "z = torch.tensor([1 + 2j], requires_grad=True); "
                             "result = (z.requires_grad, z.dtype)",
    "float16_requires_grad": "h = torch.ones(2, dtype=torch.float16, requires_grad=True); "
                             "(h * 3).sum().backward(); "
                             "result = (h, h.grad, h.type(), torch.half, h.half() is h)",
    "float16_values_print": "result = torch.tensor([1 / 3, 2.25, -7.5], dtype=torch.float16)",
    "float16_promotion": "h = torch.ones(2, dtype=torch.float16); result = ("
                         "(h * 2.5).dtype, (h + torch.ones(2)).dtype, "
                         "(h + torch.ones(2, dtype=torch.int64)).dtype, "
                         "(h + torch.tensor(1.0, dtype=torch.float64)).dtype, "
                         "torch.promote_types(torch.float16, torch.complex64), "
                         "torch.promote_types(torch.int32, torch.half))",
    "float16_grad_of_another_dtype": "x = torch.ones(2, requires_grad=True); "
                                     "x.grad = torch.ones(2, dtype=torch.float16)",
    "backward_unknown_keyword": "x = torch.rand(2, requires_grad=True); "
                                "x.sum().backward(retain_grad=True)",
    # ---- views of a base written in place get regenerated grad_fns
    "views_see_write_through_other_view": (
        "x = torch.tensor([1., 2., 3., 4.], requires_grad=True); b = x * 1; v1 = b[:2]; "
        "v2 = b[2:]; v3 = b.view(2, 2); v1.mul_(2); (v2.sum() + v3.sum()).backward(); "
        "result = ([type(t.grad_fn).__name__ for t in (v1, v2, v3, b)], "
        "type(v2.grad_fn.next_functions[0][0]).__name__, x.grad)"),
    "views_see_write_to_base": (
        "x = torch.tensor([1., 2., 3.], requires_grad=True); b = x * 1; v = b[1]; "
        "w = b.unsqueeze(0); b.add_(1); (v * 3 + w.sum()).backward(); "
        "result = (type(v.grad_fn).__name__, type(w.grad_fn).__name__, "
        "type(w.grad_fn.next_functions[0][0]).__name__, x.grad)"),
    "view_of_view_sees_write": (
        "x = torch.tensor([1., 2., 3.], requires_grad=True); b = x * 1; v = b[1:]; vv = v[0]; "
        "v.mul_(5); vv.backward(); result = (type(vv.grad_fn).__name__, x.grad)"),
    "saved_view_modified_names_as_strided": (
        "x = torch.tensor([1., 2., 3.], requires_grad=True); b = x * 1; v = b[:2]; y = v * v; "
        "b.add_(1); y.sum().backward()"),
    "inplace_pow_exp_fill_nodes": (
        "x = torch.tensor([1., 2.], requires_grad=True); p = (x * 1).pow_(2); e = (x * 1).exp_(); "
        "f = (x * 1).fill_(2.); (p.sum() + e.sum() + f.sum()).backward(); "
        "result = ([type(t.grad_fn).__name__ for t in (p, e, f)], x.grad)"),
    "inplace_cannot_grow_target": "z = torch.ones(3, requires_grad=True) * 1; "
                                  "z.add_(torch.ones(2, 3))",
    "contiguous_and_argmax": (
        "a = torch.tensor([[1., 5.], [7., 2.]], requires_grad=True); k = a.t().contiguous(); "
        "result = (a.contiguous() is a, type(k.grad_fn).__name__, a.argmax(), "
        "a.argmax(1, keepdim=True), torch.argmax(a, dim=0), a.argmax().requires_grad)"),
    # ---- tensor hooks
    "leaf_hook_replaces_and_removes": (
        "x = torch.tensor([1., 2.], requires_grad=True); seen = []; "
        "h = x.register_hook(lambda g: seen.append(g.tolist()) or g * 10); "
        "(x * 3).sum().backward(); first = x.grad.clone(); h.remove(); "
        "(x * 3).sum().backward(); result = (seen, first, x.grad, type(h).__name__)"),
    "nonleaf_hook_runs_before_retain_grad": (
        "x = torch.tensor([1., 2.], requires_grad=True); y = x * 2; y.retain_grad(); "
        "y.register_hook(lambda g: g + 1); (y * y).sum().backward(); result = (y.grad, x.grad)"),
    "hooks_in_autograd_grad": (
        "x = torch.tensor([1., 2.], requires_grad=True); x.register_hook(lambda g: g * 0 + 5); "
        "y = x * 2; y.register_hook(lambda g: g * 100); "
        "result = torch.autograd.grad((y * x).sum(), [x, y])"),
    "hook_on_tensor_without_grad": "torch.ones(2).register_hook(lambda g: g)",
    "hook_changes_size": (
        "x = torch.tensor([1., 2.], requires_grad=True); "
        "x.register_hook(lambda g: torch.ones(3)); x.sum().backward()"),
    # ---- unbind and iteration
    "iter_and_unbind": (
        "x = torch.tensor([[1., 2.], [3., 4.]], requires_grad=True); rows = list(x); "
        "cols = x.unbind(1); (rows[0] * rows[1] + cols[0].sum()).sum().backward(); "
        "result = ([type(r.grad_fn).__name__ for r in rows + list(cols)], "
        "rows[0]._base is x, type(torch.unbind(x)).__name__, x.grad)"),
    "iter_0d": "iter(torch.tensor(1.))",
    "unbind_0d": "torch.tensor(1.).unbind()",
    # ---- grad attribute
    "nonleaf_grad_warns": "y = torch.rand(3, requires_grad=True) * 2; result = y.grad",
    "retained_grad_no_warning": "y = torch.rand(3, requires_grad=True) * 2; y.retain_grad(); "
                                "result = (y.grad, y.retains_grad)",
    "retain_grad_requires_grad_false": "torch.rand(3).retain_grad()",
    "retain_grad_leaf_noop": "x = torch.rand(3, requires_grad=True); x.retain_grad(); "
                             "result = x.retains_grad",
    "grad_assign_wrong_shape": "x = torch.rand(3, requires_grad=True); x.grad = torch.rand(2)",
    "grad_assign_wrong_dtype": "x = torch.rand(3, requires_grad=True); "
                               "x.grad = torch.rand(3, dtype=torch.float64)",
    "grad_assign_not_tensor": "x = torch.rand(3, requires_grad=True); x.grad = 3",
    "grad_assign_ok": "x = torch.tensor([1., 2.], requires_grad=True); "
                      "x.grad = torch.tensor([3., 4.]); result = x.grad",
    # ---- detach, clone, data, numpy, item
    "detach_shares_data": "x = torch.tensor([1., 2.], requires_grad=True); d = x.detach(); "
                          "d.zero_(); result = (x, d.requires_grad, d.is_leaf)",
    "detach_then_backward": "x = torch.tensor(3.0, requires_grad=True); y = x**2 + 3*x + 2; "
                            "z = y.detach(); y.backward(); result = (y, z, x.grad); "
                            "z.backward()",
    "detach_inplace": "x = torch.tensor(3.0, requires_grad=True); y = x**2 + 3*x + 2; "
                      "z = y.detach_(); result = (y, z is y, y.is_leaf); y.backward()",
    "detach_inplace_view": "x = torch.rand(3, requires_grad=True); (x * 2)[0:2].detach_()",
    "clone_keeps_graph": "x = torch.tensor([1., 2.], requires_grad=True); c = x.clone(); "
                         "c.sum().backward(); result = (c, c.is_leaf, x.grad)",
    "data_is_detached": "x = torch.tensor([1., 2.], requires_grad=True); "
                        "result = (x.data, x.data.requires_grad)",
    "numpy_requires_grad": "torch.rand(3, requires_grad=True).numpy()",
    "numpy_detached": "result = torch.tensor([1., 2.]).numpy().tolist()",
    "item_multi": "torch.rand(3).item()",
    "item_tolist": "x = torch.tensor([[1.5, 2.]]); result = (x[0, 0].item(), x.tolist(), "
                   "torch.tensor(3).item())",
    "metadata": "x = torch.rand(2, 3); result = (x.shape, x.size(), x.size(1), x.dim(), "
                "x.numel(), x.dtype, x.device, x.ndim, len(x))",
    # ---- printing
    "repr_scalars": "x = torch.tensor(3.0, requires_grad=True); "
                    "result = (torch.tensor(3.), x, x + 17, x * 4, torch.tensor(7))",
    "repr_matrix": "result = torch.tensor([[1.5, 2.25], [3., -4.]], requires_grad=True) * 2",
    "repr_double": "result = torch.tensor([[1.5, 2.25], [3., -4.]]).double()",
    "repr_sci": "result = (torch.tensor([1e-5, 1.0]), torch.tensor([123456.0, 1.0]), "
                "torch.tensor([1e9, 1.0]))",
    "repr_special": "result = (torch.tensor([float('nan'), 1.0, float('inf')]), "
                    "torch.tensor([0.0, 0.0]), torch.tensor([-0.5, 100.0]), torch.tensor([]))",
    "repr_ints_bools": "result = (torch.tensor([1, 2, 3]), torch.tensor([True, False]), "
                       "torch.tensor(3, dtype=torch.int32), torch.arange(5))",
    "repr_3d": "result = torch.ones(2, 2, 2) / 3",
    "repr_complex": "result = torch.tensor([1 + 2j])",
    "format_scalar": "result = (f'{torch.tensor(3.)}', f'{torch.tensor([3.])}')",
    "repr_max_dim": "result = torch.tensor([[1., 3.], [4., 2.]]).max(1)",
    # ---- dtype promotion
    "promotion": "result = ((torch.tensor([1, 2]) + 1.5).dtype, (torch.tensor([1, 2]) / 2).dtype,"
                 " (torch.tensor([True]) + 1).dtype, "
                 "(torch.tensor([1], dtype=torch.int32) + torch.tensor(5)).dtype, "
                 "(torch.tensor([1.]) + torch.tensor(2., dtype=torch.float64)).dtype, "
                 "(torch.tensor([1.]) + torch.tensor([2.], dtype=torch.float64)).dtype, "
                 "torch.tensor([1, 2]).sum().dtype, torch.tensor([True]).sum().dtype, "
                 "torch.tensor([1, 2]).exp().dtype, (torch.tensor([1, 2]) * (1 + 1j)).dtype, "
                 "(torch.tensor([1.]) * (1 + 1j)).dtype)",
    "mixed_dtype_backward": "x = torch.tensor([1., 2.], requires_grad=True); "
                            "w = torch.tensor(3., dtype=torch.float64, requires_grad=True); "
                            "(x * w).sum().backward(); result = (x.grad, w.grad)",
    "creation_dtypes": "result = (torch.ones(2).dtype, torch.tensor(2).dtype, "
                       "torch.tensor([1.0, 2]).dtype, torch.tensor(1j).dtype, "
                       "torch.arange(0, 1, 0.25), torch.full((2,), 7).dtype, "
                       "torch.zeros_like(torch.tensor([1, 2])).dtype)",
    "mean_of_ints": "torch.tensor([1, 2]).mean()",
    # ---- shape errors
    "broadcast_error": "torch.rand(3) + torch.rand(2)",
    "mm_error": "torch.rand(2, 3) @ torch.rand(2, 3)",
    "cat_error": "torch.cat([torch.rand(2, 3), torch.rand(2, 2)])",
    "view_error": "torch.rand(2, 3).t().view(6)",
    "view_size_error": "torch.rand(2, 3).view(4)",
    "index_error": "torch.rand(3)[3]",
    # ---- moves
    "to_same_returns_self": "x = torch.tensor([1.], requires_grad=True); "
                            "result = (x.to(torch.float32) is x, x.cpu() is x, x.float() is x, "
                            "x.to('cpu') is x, type(x.double().grad_fn).__name__, "
                            "x.to(torch.float64, copy=False).dtype)",
    "cuda_unavailable": "torch.rand(3).cuda()",
    "cuda_to_unavailable": "torch.rand(3).to('cuda')",
    "cuda_device_unavailable": "torch.rand(3, device='cuda')",
    "cuda_is_available": "result = torch.cuda.is_available()",
    "device_objects": "result = (torch.device('cpu'), str(torch.device('cuda:0')), "
                      "torch.device('cuda'), torch.device('cpu') == torch.device('cpu'))",
}

@pytest.mark.parametrize("name", list(SCENARIOS))
def test_behaves_like_torch(name: str) -> None:
    code = SCENARIOS[name]
    if "cuda" in name and torch.cuda.is_available() != refimpl.cuda.is_available():
        pytest.skip("cuda availability differs between this torch and refimpl here")
    assert run_program(refimpl, code) == run_program(torch, code)
