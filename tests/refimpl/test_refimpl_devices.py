"""The cuda device: every op through a CuPy-like backend, moves, and device errors.

On CPU machines the backend is ``strict_cupy`` (device arrays that refuse implicit conversion
to NumPy), so any host/device mix-up in refimpl fails here; with CuPy and a GPU the same tests
also run on the real thing.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest
import strict_cupy
from refimpl_cases import CASES, OpCase
from refimpl_helpers import graph

import refimpl


def _observe(case: OpCase, arrays: list[np.ndarray], device: str) -> tuple:
    ins = [refimpl.tensor(a, device=device, requires_grad=True) for a in arrays]
    out = case.fn(refimpl, *ins)
    v = refimpl.ones_like(out)
    grads = refimpl.autograd.grad(out, ins, v, create_graph=True, allow_unused=True)
    live = [g for g in grads if g is not None and g.requires_grad]
    second = (refimpl.autograd.grad(sum((g * g).sum() for g in live), ins, allow_unused=True)
              if live else (None,) * len(ins))
    assert all(g is None or g.device == out.device for g in (*grads, *second))

    def host(t: refimpl.Tensor | None) -> np.ndarray | None:
        return None if t is None else t.detach().numpy(force=True)

    return (str(out.device), graph(out), host(out), [host(g) for g in grads],
            [host(g) for g in second])


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op_on_cuda_matches_cpu(cuda_backend: ModuleType, case: OpCase) -> None:
    arrays = case.arrays()
    dev, dev_graph, value, grads, second = _observe(case, arrays, "cuda")
    _, cpu_graph, cpu_value, cpu_grads, cpu_second = _observe(case, arrays, "cpu")
    assert dev == "cuda:0"
    assert dev_graph == cpu_graph
    np.testing.assert_allclose(value, cpu_value, rtol=1e-12, atol=1e-12)
    for got, ref in zip(grads + second, cpu_grads + cpu_second, strict=True):
        assert (got is None) == (ref is None)
        if ref is not None:
            np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_stand_in_refuses_implicit_numpy_conversion(cuda_backend: ModuleType) -> None:
    x = refimpl.ones(3, device="cuda")
    if cuda_backend is strict_cupy:
        with pytest.raises(TypeError, match="Implicit conversion to a NumPy array"):
            np.asarray(x._data)
        with pytest.raises(TypeError):
            x._data + np.ones(3)
    assert refimpl.cuda.is_available()


def test_cuda_is_an_op_that_makes_a_nonleaf(cuda_backend: ModuleType) -> None:
    b = refimpl.rand(10, requires_grad=True).cuda()
    f = refimpl.rand(10, requires_grad=True, device="cuda")
    assert (b.is_leaf, type(b.grad_fn).__name__, str(b.device)) == (False, "ToCopyBackward0",
                                                                    "cuda:0")
    assert (f.is_leaf, f.grad_fn, str(f.device)) == (True, None, "cuda:0")
    assert f.cuda() is f and f.to("cuda") is f and f.to("cuda:0") is f


def test_gradient_flows_back_to_the_cpu_leaf(cuda_backend: ModuleType) -> None:
    a = refimpl.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], requires_grad=True)
    ac = a.cuda()
    b = refimpl.tensor([[1.0, 0.0, 2.0], [0.5, 1.0, 1.0]]).cuda()
    loss = 10 - (ac @ b).sum()
    loss.backward()
    assert str(a.grad.device) == "cpu"
    assert a.grad.tolist() == [[-3.0, -2.5]] * 3
    back = ac.cpu()
    assert type(back.grad_fn).__name__ == "ToCopyBackward0" and str(back.device) == "cpu"


def test_leaf_created_on_cuda_gets_its_grad(cuda_backend: ModuleType) -> None:
    a = refimpl.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], requires_grad=True, device="cuda")
    b = refimpl.tensor([[1.0, 0.0, 2.0], [0.5, 1.0, 1.0]]).cuda()
    (10 - (a @ b).sum()).backward()
    assert repr(a.grad) == ("tensor([[-3.0000, -2.5000],\n        [-3.0000, -2.5000],\n"
                            "        [-3.0000, -2.5000]], device='cuda:0')")


def test_mixing_devices_raises_pytorchs_error(cuda_backend: ModuleType) -> None:
    msg = ("Expected all tensors to be on the same device, but found at least two devices, "
           "cuda:0 and cpu!")
    with pytest.raises(RuntimeError) as err:
        refimpl.ones(3, device="cuda") + refimpl.ones(3)
    assert str(err.value) == msg
    with pytest.raises(RuntimeError) as err:
        refimpl.ones(2, 2, device="cuda") @ refimpl.ones(2, 2)
    assert str(err.value) == msg


def test_host_access_is_explicit(cuda_backend: ModuleType) -> None:
    x = refimpl.tensor([1.5, 2.5], device="cuda")
    assert x.tolist() == [1.5, 2.5] and x[0].item() == 1.5
    assert x.cpu().numpy().tolist() == [1.5, 2.5]
    with pytest.raises(TypeError) as err:
        x.numpy()
    assert str(err.value) == ("can't convert cuda:0 device type tensor to numpy. Use "
                              "Tensor.cpu() to copy the tensor to host memory first.")
    assert repr(x) == "tensor([1.5000, 2.5000], device='cuda:0')"
    assert x.type() == "torch.cuda.FloatTensor"


def test_copy_between_devices_keeps_the_graph(cuda_backend: ModuleType) -> None:
    src = refimpl.tensor([1.0, 2.0], requires_grad=True)
    dst = refimpl.zeros(2, device="cuda")
    dst.copy_(src * 3)
    (dst * dst).sum().backward()
    assert type(dst.grad_fn).__name__ == "CopyBackwards"
    assert src.grad.tolist() == [18.0, 36.0] and str(src.grad.device) == "cpu"


def test_without_cuda_asking_for_it_raises_like_cpu_only_pytorch() -> None:
    refimpl._backend.install_cuda_module(None)
    if refimpl.cuda.is_available():
        pytest.skip("this machine has a usable CUDA device")
    for make in (lambda: refimpl.rand(3, device="cuda"), lambda: refimpl.rand(3).cuda(),
                 lambda: refimpl.rand(3).to("cuda"), lambda: refimpl.tensor(1.0, device="cuda")):
        with pytest.raises(AssertionError) as err:
            make()
        assert str(err.value) == "Torch not compiled with CUDA enabled"
