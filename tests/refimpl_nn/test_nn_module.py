"""Parameter and Module behaviour: registration, flags, modes, gradients, moves, devices and
default initialisation."""

from __future__ import annotations

import math

import numpy as np
import pytest

import refimpl
import refimpl.nn as nn
import refimpl.nn.functional as F


def test_parameter_is_a_leaf_that_requires_grad_and_shares_data() -> None:
    x = refimpl.rand(3, requires_grad=True) * 2
    p = nn.Parameter(x)
    assert isinstance(p, refimpl.Tensor) and type(p) is nn.Parameter
    assert (p.is_leaf, p.requires_grad, p.grad_fn, p.grad) == (True, True, None, None)
    assert p._data is x._data
    assert not nn.Parameter(refimpl.rand(2), requires_grad=False).requires_grad
    assert type(p * 2) is refimpl.Tensor and type(p.detach()) is refimpl.Tensor
    assert repr(p).startswith("Parameter containing:\ntensor([")


def test_module_registers_by_assignment() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU())
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias", "1.weight",
                                                         "1.bias"]
    assert [n for n, _ in model.named_buffers()] == ["1.running_mean", "1.running_var",
                                                      "1.num_batches_tracked"]
    assert list(model.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias",
                                        "1.running_mean", "1.running_var",
                                        "1.num_batches_tracked"]
    assert len(list(model.children())) == 3 and len(list(model.modules())) == 4
    assert model[0] is list(model.children())[0] and len(model[1:]) == 2
    for p in model.parameters():
        assert p.is_leaf and p.requires_grad and p.grad is None
    shared = nn.Linear(2, 2)
    twice = nn.Sequential(shared, shared)
    assert len(list(twice.parameters())) == 2


def test_train_eval_flags_reach_every_submodule() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Dropout()))
    assert model.eval() is model
    assert [m.training for m in model.modules()] == [False] * 4
    assert model.train() is model and all(m.training for m in model.modules())


def test_backward_fills_parameter_grads_and_zero_grad_clears_them() -> None:
    lin = nn.Linear(3, 5)
    x = refimpl.rand(2, 3)
    lin(x).sum().backward()
    assert np.allclose(lin.bias.grad.numpy(), 2.0)
    assert np.allclose(lin.weight.grad.numpy(), np.tile(x.numpy().sum(0), (5, 1)), atol=1e-6)
    grad = lin.weight.grad
    lin.zero_grad(set_to_none=False)
    assert lin.weight.grad is grad and not grad.numpy().any()
    lin.zero_grad()
    assert lin.weight.grad is None and lin.bias.grad is None


@pytest.mark.parametrize("move", [lambda m: m.double(), lambda m: m.to(refimpl.float64),
                                  lambda m: m.to("cpu", refimpl.float64),
                                  lambda m: m.to(dtype=refimpl.float64)])
def test_moves_keep_parameters_as_the_same_leaves(move: object) -> None:
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    params = list(model.parameters())
    model(refimpl.rand(4, 3)).sum().backward()
    grads = [p.grad for p in params]
    assert move(model) is model
    for p, g in zip(model.parameters(), params, strict=True):
        assert p is g
        assert (p.dtype, p.is_leaf, p.requires_grad, p.grad_fn) == (refimpl.float64, True,
                                                                    True, None)
    assert [p.grad for p in params] == grads  # the same gradient objects, moved too
    assert all(g.dtype is refimpl.float64 for g in grads)
    assert model[1].running_mean.dtype is refimpl.float64
    assert model[1].num_batches_tracked.dtype is refimpl.int64
    out = model(refimpl.rand(4, 3, dtype=refimpl.float64))
    out.sum().backward()
    assert all(p.grad.dtype is refimpl.float64 for p in params)
    assert model.float() is model and all(p.dtype is refimpl.float32 for p in params)


def test_cuda_without_a_device_raises_what_cpu_only_torch_raises(no_cuda: None) -> None:
    with pytest.raises(AssertionError, match="^Torch not compiled with CUDA enabled$"):
        nn.Linear(2, 2).cuda()
    with pytest.raises(AssertionError, match="^Torch not compiled with CUDA enabled$"):
        nn.Linear(2, 2).to("cuda")
    relu = nn.ReLU()
    assert relu.cuda() is relu  # nothing to move, so nothing to refuse


def test_cuda_moves_parameters_in_place(cuda_backend: object) -> None:
    model = nn.Sequential(nn.Conv2d(1, 2, 2), nn.BatchNorm2d(2), nn.ReLU())
    cpu_out = model(refimpl.rand(2, 1, 4, 4))
    params = list(model.parameters())
    assert model.cuda() is model
    assert [p is q for p, q in zip(model.parameters(), params, strict=True)] == [True] * 4
    for p in params:
        assert p.device.type == "cuda" and p.is_leaf and p.requires_grad
    assert model[1].running_mean.device.type == "cuda"
    x = refimpl.rand(2, 1, 4, 4, device="cuda")
    out = model(x)
    assert out.device.type == "cuda" and out.grad_fn.name() == "ReluBackward0"
    out.sum().backward()
    for p in params:
        assert p.grad.device.type == "cuda" and p.grad.shape == p.shape
    model.cpu()
    assert all(p.device.type == "cpu" for p in params)
    assert model(refimpl.rand(2, 1, 4, 4)).shape == cpu_out.shape


def test_linear_on_cuda_matches_cpu(cuda_backend: object) -> None:
    refimpl.manual_seed(0)
    lin = nn.Linear(3, 2)
    x = refimpl.rand(4, 3)
    expected = lin(x).detach().numpy().copy()
    lin.cuda()
    got = lin(x.cuda()).cpu()
    assert np.allclose(got.detach().numpy(), expected, atol=1e-6)


def test_default_initialisation_follows_torch_distributions() -> None:
    refimpl.manual_seed(0)
    lin = nn.Linear(400, 50)
    conv = nn.Conv2d(8, 16, 3, groups=2)
    for w, fan_in in ((lin.weight, 400), (lin.bias, 400), (conv.weight, 4 * 9),
                      (conv.bias, 4 * 9)):
        bound = 1 / math.sqrt(fan_in)
        values = w.detach().numpy()
        assert np.abs(values).max() <= bound
    values = lin.weight.detach().numpy()
    assert abs(values.var() - (1 / 400) / 3) < 0.05 * (1 / 400) / 3  # var of U(-b, b) is b²/3
    bn = nn.BatchNorm2d(3)
    assert bn.weight.tolist() == [1.0] * 3 and bn.bias.tolist() == [0.0] * 3
    assert (bn.running_mean.tolist(), bn.running_var.tolist()) == ([0.0] * 3, [1.0] * 3)
    assert bn.num_batches_tracked.item() == 0
    assert lin.weight.is_leaf and lin.weight.grad_fn is None


def test_initialisation_is_reproducible_from_the_seed() -> None:
    refimpl.manual_seed(7)
    a = nn.Linear(3, 4).weight.tolist()
    refimpl.manual_seed(7)
    assert nn.Linear(3, 4).weight.tolist() == a
    assert nn.Linear(3, 4).weight.tolist() != a


def test_batch_norm_running_stats_by_hand() -> None:
    bn = nn.BatchNorm1d(2, momentum=0.5).double()
    x = refimpl.tensor([[1.0, 2.0], [3.0, 6.0]], dtype=refimpl.float64)
    y = bn(x)
    assert y.grad_fn.name() == "NativeBatchNormBackward0"
    assert np.allclose(y.detach().numpy(), [[-1, -1], [1, 1]], atol=1e-4)
    assert bn.running_mean.tolist() == [1.0, 2.0]  # 0.5 * 0 + 0.5 * [2, 4]
    assert np.allclose(bn.running_var.numpy(), [1.5, 4.5])  # 0.5 * 1 + 0.5 * [2, 8]
    assert bn.num_batches_tracked.item() == 1
    bn.eval()
    out = bn(x)
    expected = (x.numpy() - [1.0, 2.0]) / np.sqrt(np.array([1.5, 4.5]) + 1e-5)
    assert np.allclose(out.detach().numpy(), expected)
    assert bn.num_batches_tracked.item() == 1  # eval leaves the statistics alone


def test_registration_errors() -> None:
    lin = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="cannot assign 'int' object to buffer 'b'"):
        lin.register_buffer("b", 3)
    lin.bias = None
    assert lin.bias is None and [n for n, _ in lin.named_parameters()] == ["weight"]
    del lin.weight
    assert list(lin.parameters()) == []


CUDA_CASES = {
    "conv2d": (lambda x, w: F.conv2d(x, w, stride=2, padding=1, groups=2), [(1, 4, 5, 5),
                                                                           (2, 2, 3, 3)]),
    "batch_norm": (lambda x, w: F.batch_norm(x, None, None, w, None, training=True),
                   [(3, 4, 2), (4,)]),
    "mse_loss": (lambda x, t: F.mse_loss(x, t), [(2, 3), (2, 3)]),
    "l1_loss": (lambda x, t: F.l1_loss(x, t, reduction="sum"), [(2, 3), (2, 3)]),
    "linear": (lambda x, w: F.linear(x, w, w[0]), [(3,), (3, 3)]),
}


@pytest.mark.parametrize("name", sorted(CUDA_CASES))
def test_functional_ops_on_cuda_match_cpu(cuda_backend: object, name: str) -> None:
    fn, shapes = CUDA_CASES[name]
    refimpl.manual_seed(3)
    host = [refimpl.randn(*s, dtype=refimpl.float64, requires_grad=True) for s in shapes]
    device = [h.detach().cuda().requires_grad_() for h in host]
    results = []
    for xs in (host, device):
        out = fn(*xs)
        grads = refimpl.autograd.grad((out * out).sum(), xs, create_graph=True)
        second = refimpl.autograd.grad(sum(g.sum() for g in grads), xs)
        results.append([t.cpu().detach().numpy() for t in (out, *grads, *second)])
        assert all(t.device.type == xs[0].device.type for t in (out, *grads, *second))
    for a, b in zip(*results, strict=True):
        assert np.allclose(a, b, atol=1e-10)
