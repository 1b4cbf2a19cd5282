"""``refimpl.nn.functional``: the functions behind the modules, as in ``torch.nn.functional``.

Each function builds the graph PyTorch 2.13 builds for the same call, so node names agree::

    import refimpl as torch
    import refimpl.nn.functional as F

    x = torch.rand(1, 3)
    w = torch.rand(5, 3, requires_grad=True)
    F.linear(x, w, torch.zeros(5)).grad_fn     # <AddmmBackward0 ...>
    F.l1_loss(x, torch.rand(1, 3)).grad_fn     # <MeanBackward0 ...> (sub, abs, mean)

Composite ops (``linear``, ``l1_loss``, ``dropout``) call refimpl's core ops; ``conv2d``,
``mse_loss`` and ``batch_norm`` are rows of their own in ``refimpl.nn.derivatives``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from refimpl import _creation, _dtype
from refimpl._tensor import Tensor
from refimpl.autograd.grad_mode import no_grad
from refimpl.nn import derivatives as D
from refimpl.ops import apply, signatures
from refimpl.ops import functional as core

__all__ = ["linear", "conv2d", "l1_loss", "mse_loss", "dropout", "batch_norm", "instance_norm",
           "relu",
           "relu6", "hardtanh", "sigmoid", "softmax", "log_softmax", "tanh"]



def tanh(input: Tensor) -> Tensor:
    """``input.tanh()`` (a method call, so a non-tensor fails as in PyTorch)."""
    return input.tanh()


def sigmoid(input: Tensor) -> Tensor:
    """``input.sigmoid()`` (a method call, so a non-tensor fails as in PyTorch)."""
    return input.sigmoid()


# ------------------------------------------------------------------ linear

def _linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    if input.dim() == 0 or weight.dim() == 0:
        raise RuntimeError("both arguments to linear need to be at least 1D, but they are "
                           f"{input.dim()}D and {weight.dim()}D")
    if input.dtype is not weight.dtype:
        raise RuntimeError("mat1 and mat2 must have the same dtype, but got "
                           f"{input.dtype.legacy_name} and {weight.dtype.legacy_name}")
    if bias is None:
        # PyTorch's matmul: mm for 2-d, unsqueeze/mm/squeeze_ for 1-d, view/mm/_unsafe_view
        # for more dimensions.
        return core.matmul(input, weight.t())
    if input.dim() == 2:
        return core.addmm(bias, input, weight.t())
    if input.is_contiguous():
        flat = input.reshape(-1, input.shape[-1])
        out = core.addmm(bias, flat, weight.t())
        return out.view(*input.shape[:-1], out.shape[-1])
    # PyTorch adds the bias in place to matmul's result for other layouts (AddBackward0).
    return core.matmul(input, weight.t()).add_(bias)


linear = signatures.function(_linear, "linear", "input", "weight", "bias", optional=("bias",))
linear.__doc__ = """``input @ weight.T + bias``: ``addmm`` on 2-d input, else (contiguous input)
viewed to 2-d and back, else ``matmul`` then the bias added in place."""


# ------------------------------------------------------------------ conv2d

def _pair(value: int | Sequence[int], name: str) -> tuple[int, int]:
    if isinstance(value, int):
        return (value, value)
    pair = tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) for v in pair):
        raise ValueError(f"conv2d: {name} must be an int or a pair of ints, got {value!r}")
    return pair  # type: ignore[return-value]


def _same_padding(kernel: tuple[int, int], dilation: tuple[int, int],
                  stride: tuple[int, int]) -> tuple[int, int]:
    if stride != (1, 1):
        raise ValueError("padding='same' is not supported for strided convolutions")
    total = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
    if any(t % 2 for t in total):
        raise ValueError(
            f"refimpl's conv2d pads 'same' symmetrically only; kernel {kernel} with dilation "
            f"{dilation} needs uneven padding. Pad the input yourself and use padding=0.")
    return (total[0] // 2, total[1] // 2)


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None,
           stride: int | Sequence[int] = 1, padding: int | str | Sequence[int] = 0,
           dilation: int | Sequence[int] = 1, groups: int = 1) -> Tensor:
    """2-d cross-correlation over ``(N, C, H, W)`` or unbatched ``(C, H, W)`` input."""
    _check_conv2d_args((input, weight, bias, stride, padding, dilation, groups))
    if input.dim() not in (3, 4):
        raise RuntimeError("Expected 3D (unbatched) or 4D (batched) input to conv2d, but got "
                           f"input of size: {list(input.shape)}")
    if input.dim() == 3:
        out = conv2d(input.unsqueeze(0), weight, bias, stride, padding, dilation, groups)
        return out.squeeze(0)
    stride_ = _pair(stride, "stride")
    dilation_ = _pair(dilation, "dilation")
    kernel = (weight.shape[2], weight.shape[3])
    if padding == "valid":
        padding_ = (0, 0)
    elif padding == "same":
        padding_ = _same_padding(kernel, dilation_, stride_)
    elif isinstance(padding, str):
        raise ValueError(f"Invalid padding string '{padding}', should be one of "
                         "{'valid', 'same'}")
    else:
        padding_ = _pair(padding, "padding")
    if input.shape[1] != weight.shape[1] * groups:
        raise RuntimeError(
            f"Given groups={groups}, weight of size {list(weight.shape)}, expected "
            f"input{list(input.shape)} to have {weight.shape[1] * groups} channels, but got "
            f"{input.shape[1]} channels instead")
    padded = tuple(input.shape[2 + i] + 2 * padding_[i] for i in range(2))
    reach = tuple(dilation_[i] * (kernel[i] - 1) + 1 for i in range(2))
    if padded[0] < reach[0] or padded[1] < reach[1]:
        raise RuntimeError(
            f"Calculated padded input size per channel: ({padded[0]} x {padded[1]}). Kernel "
            f"size: ({reach[0]} x {reach[1]}). Kernel size can't be greater than actual input "
            "size")
    if bias is not None and bias.dtype is not input.dtype:
        raise RuntimeError(f"Input type ({_c_name(input)}) and bias type ({_c_name(bias)}) "
                           "should be the same")
    if weight.dtype is not input.dtype:
        raise RuntimeError(f"expected scalar type {input.dtype.legacy_name} but found "
                           f"{weight.dtype.legacy_name}")
    return D.convolution(input, weight, bias, stride_, padding_, dilation_, groups)


_CONV2D_SIGNATURES = (
    "Tensor input, Tensor weight, Tensor bias = None, tuple of ints stride = 1, tuple of ints "
    "padding = 0, tuple of ints dilation = 1, int groups = 1",
    "Tensor input, Tensor weight, Tensor bias = None, tuple of ints stride = 1, str padding = "
    '"valid", tuple of ints dilation = 1, int groups = 1')


def _check_conv2d_args(args: tuple[Any, ...]) -> None:
    """PyTorch's argument parser on conv2d's tensors: the module passes all seven arguments,
    and PyTorch explains each signature's mismatch only for such a full call."""
    input, weight, bias = args[:3]
    if isinstance(input, Tensor) and isinstance(weight, Tensor) and (
            bias is None or isinstance(bias, Tensor)):
        return
    options = [signatures.Overload(text, explained=True) for text in _CONV2D_SIGNATURES]
    raise signatures.invalid_combination("conv2d", args, options)


def _c_name(t: Tensor) -> str:
    return {_dtype.float32: "float", _dtype.float64: "double"}.get(t.dtype, t.dtype.name)


# ------------------------------------------------------------------ losses

_REDUCTIONS = ("none", "mean", "sum")
SIZE_WARNING = ("Using a target size ({}) that is different to the input size ({}). This will "
                "likely lead to incorrect results due to broadcasting. Please ensure they have "
                "the same size.")
LEGACY_REDUCTION_WARNING = ("size_average and reduce args will be deprecated, please use "
                            "reduction='{}' instead.")


def legacy_reduction(size_average: Any, reduce: Any, emit_warning: bool = True) -> str:
    """The ``reduction`` that PyTorch's deprecated ``size_average``/``reduce`` pair means.

    Both are tested for truth, so tensors passed there by mistake (``nn.L1Loss(y, gt)``) raise
    ``Boolean value of Tensor with more than one value is ambiguous`` as in PyTorch.
    """
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if size_average and reduce:
        reduction = "mean"
    elif reduce:
        reduction = "sum"
    else:
        reduction = "none"
    if emit_warning:
        warnings.warn(LEGACY_REDUCTION_WARNING.format(reduction), UserWarning, stacklevel=3)
    return reduction


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + a
    b = (1,) * (n - len(b)) + b
    out = []
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x != y and x != 1 and y != 1:
            raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b ({y}) "
                               f"at non-singleton dimension {i}")
        out.append(max(x, y))
    return tuple(out)


def _loss_operands(input: Tensor, target: Tensor, size_average: Any, reduce: Any,
                   reduction: str) -> tuple[Tensor, Tensor, str]:
    if size_average is not None or reduce is not None:
        reduction = legacy_reduction(size_average, reduce)
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    # Sizes are read as PyTorch reads them (target first), so a non-tensor fails the same way.
    if target.size() != input.size():
        warnings.warn(SIZE_WARNING.format(target.shape, input.shape), UserWarning, stacklevel=3)
        shape = _broadcast_shape(tuple(input.shape), tuple(target.shape))
        if tuple(input.shape) != shape:
            input = input.expand(shape)
        if tuple(target.shape) != shape:
            target = target.expand(shape)
    return input, target, reduction


def l1_loss(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None,
            reduction: str = "mean") -> Tensor:
    """Mean (or sum, or none) of ``|input - target|``: Sub, Abs, then Mean/Sum nodes."""
    input, target, reduction = _loss_operands(input, target, size_average, reduce, reduction)
    loss = (input - target).abs()
    if reduction == "mean":
        return loss.mean()
    return loss.sum() if reduction == "sum" else loss


def mse_loss(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None,
             reduction: str = "mean") -> Tensor:
    """Mean (or sum, or none) of ``(input - target) ** 2``, one ``MseLossBackward0`` node."""
    input, target, reduction = _loss_operands(input, target, size_average, reduce, reduction)
    tensors, arrays = core.promote((input, target))
    return apply(D.MSE_LOSS, tensors, {"reduction": reduction}, arrays)


# ------------------------------------------------------------------ dropout

def dropout(input: Tensor, p: float = 0.5, training: bool = True,
            inplace: bool = False) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``.

    The mask is drawn from refimpl's generator (``refimpl.manual_seed``). Returns ``input``
    itself when not training, when ``p`` is 0, or when it is empty, as PyTorch does.
    """
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not isinstance(input, Tensor):
        raise signatures.must_be("dropout", "input", 1, "Tensor", input)
    if not training or p == 0 or input.numel() == 0:
        return input
    keep = 1.0 - p
    with no_grad():
        draws = _creation.rand(input.shape, dtype=input.dtype, device=input.device)
        # p == 1 keeps nothing: multiply by zeros rather than divide by zero.
        mask = (draws < keep).to(input.dtype) * (1.0 / keep if keep > 0 else 0.0)
    return input.mul_(mask) if inplace else input * mask


# ------------------------------------------------------------------ batch_norm

def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None,
               training: bool = False, momentum: float = 0.1, eps: float = 1e-05) -> Tensor:
    """Normalize over every dimension but the channels (dim 1); one NativeBatchNorm node.

    In training the batch statistics normalize and, when running buffers are given, update
    them in place: ``running = (1 - momentum) * running + momentum * batch`` with the
    unbiased batch variance. Otherwise the running buffers normalize.
    """
    if not isinstance(input, Tensor):
        raise signatures.must_be("batch_norm", "input", 1, "Tensor", input)
    if training:
        per_channel = input.numel() // input.shape[1] if input.dim() > 1 else input.numel()
        if per_channel <= 1:
            raise ValueError("Expected more than 1 value per channel when training, got input "
                             f"size {input.shape!r}")
    channels = input.shape[1] if input.dim() > 1 else 1
    for name, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if t is not None and t.numel() != channels:
            raise RuntimeError(f"{name} should contain {channels} elements not {t.numel()}")
    if not training and (running_mean is None or running_var is None):
        raise RuntimeError("running_mean and running_var must be defined in evaluation mode")
    # An absent affine parameter is a constant: no gradient edge, as in PyTorch.
    if weight is None:
        weight = _creation.ones(channels, dtype=input.dtype, device=input.device)
    if bias is None:
        bias = _creation.zeros(channels, dtype=input.dtype, device=input.device)
    params = {"training": training, "eps": eps}
    if not training:
        params.update(running_mean=running_mean, running_var=running_var)
    out, batch_mean, batch_var = apply(D.NATIVE_BATCH_NORM, (input, weight, bias), params)
    if training and running_mean is not None and running_var is not None:
        n = input.numel() // channels
        with no_grad():
            running_mean.mul_(1 - momentum).add_(batch_mean * momentum)
            running_var.mul_(1 - momentum).add_(batch_var * (momentum * n / (n - 1)))
    return out


def instance_norm(input: Tensor, running_mean: Tensor | None = None,
                  running_var: Tensor | None = None, weight: Tensor | None = None,
                  bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-05) -> Tensor:
    """Normalize each sample's channels on their own, as PyTorch does: ``(N, C, ...)`` seen as
    one batch of ``N * C`` channels (a ``ViewBackward0``), the affine parameters and running
    buffers repeated ``N`` times (``RepeatBackward0``), ``batch_norm``, and a view back; the
    running buffers then take the mean over the samples."""
    if not isinstance(input, Tensor):
        raise signatures.must_be("instance_norm", "input", 1, "Tensor", input)
    if use_input_stats:
        spatial = input.numel() // (input.shape[0] * input.shape[1]) if input.dim() > 1 else 1
        if spatial == 1:
            raise ValueError("Expected more than 1 spatial element when training, got input "
                             f"size {input.shape!r}")
    elif running_mean is None or running_var is None:
        raise RuntimeError("Expected running_mean and running_var to be defined when "
                           "use_input_stats is false")
    b, c = input.shape[0], input.shape[1]
    repeated = [None if t is None else t.repeat(b)
                for t in (weight, bias, running_mean, running_var)]
    out = batch_norm(input.contiguous().view(1, b * c, *input.shape[2:]), repeated[2],
                     repeated[3], repeated[0], repeated[1], use_input_stats, momentum, eps)
    with no_grad():
        for buffer, copy in ((running_mean, repeated[2]), (running_var, repeated[3])):
            if buffer is not None:
                buffer.copy_(copy.view(b, c).mean(0))
    return out.view(*input.shape)


# ------------------------------------------------------------------ activations

def relu(input: Tensor, inplace: bool = False) -> Tensor:
    if not isinstance(input, Tensor):
        raise signatures.must_be("relu_" if inplace else "relu", "input", 1, "Tensor", input)
    if inplace:
        return input.relu_()
    return core.relu(input)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> Tensor:
    """Clamp to [min_val, max_val] with a zero gradient at the bounds (clamp passes it)."""
    return core.hardtanh(input, min_val, max_val)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    return core.hardtanh(input, 0.0, 6.0)


def _softmax_dim(name: str, ndim: int) -> int:
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call "
                  "to include dim=X as an argument.", UserWarning, stacklevel=4)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
            dtype: _dtype.dtype | None = None) -> Tensor:
    if dim is None:
        dim = _softmax_dim("softmax", input.dim())
    return input.softmax(dim, dtype)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
                dtype: _dtype.dtype | None = None) -> Tensor:
    if dim is None:
        dim = _softmax_dim("log_softmax", input.dim())
    return input.log_softmax(dim, dtype)
