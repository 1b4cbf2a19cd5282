"""Op-table rows for the nn ops: convolution, batch norm and mse_loss (see ``refimpl.ops.table``).

Each row is one PyTorch overload with its node name as PyTorch 2.13 records it. Derivatives are
written with refimpl ops, so ``create_graph=True`` differentiates them again:

- ``convolution`` is linear in its input and in its weight. Its input and weight gradients are
  two more rows (the transposed convolution and the weight correlation), whose own derivatives
  are again convolutions or each other: three rows close the family under differentiation, and
  first-order gradients carry PyTorch's ``ConvolutionBackwardBackward0`` name.
- ``mse_loss``'s gradient is the row ``mse_loss_backward`` (``MseLossBackwardBackward0``).
- ``native_batch_norm``'s gradients are the row ``native_batch_norm_backward``
  (``NativeBatchNormBackwardBackward0``), whose own derivatives are PyTorch's
  ``batchnorm_double_backward`` written op for op in refimpl ops, so third-order gradients
  record PyTorch's nodes.

Forwards use only array operations that NumPy and CuPy share (slicing, ``@``, ``stack``,
``zeros``, reductions), so the rows run unchanged on either backend.
"""

from __future__ import annotations

from typing import Any

from refimpl import _creation
from refimpl._tensor import Tensor
from refimpl.ops import apply, defop
from refimpl.ops import derivatives as D

__all__ = ["CONVOLUTION", "CONVOLUTION_INPUT_GRAD", "CONVOLUTION_WEIGHT_GRAD",
           "CONVOLUTION_BIAS_GRAD", "MSE_LOSS", "MSE_LOSS_BACKWARD", "NATIVE_BATCH_NORM",
           "NATIVE_BATCH_NORM_BACKWARD", "convolution", "conv_output_size"]

Pair = tuple[int, int]


# ------------------------------------------------------------------ convolution on arrays

def conv_output_size(size: Pair, kernel: Pair, stride: Pair, padding: Pair,
                     dilation: Pair) -> Pair:
    """Spatial output size of a 2-d convolution (PyTorch's formula, per dimension)."""
    return tuple((size[i] + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1
                 for i in range(2))  # type: ignore[return-value]


def _pad(xp: Any, x: Any, padding: Pair) -> Any:
    ph, pw = padding
    if not ph and not pw:
        return x
    n, c, h, w = x.shape
    out = xp.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=x.dtype)
    out[:, :, ph:ph + h, pw:pw + w] = x
    return out


def _tap(kernel_pos: Pair, stride: Pair, dilation: Pair, out: Pair) -> tuple[slice, ...]:
    # The input elements that kernel position (i, j) meets, one per output position.
    (i, j), (sh, sw), (dh, dw), (oh, ow) = kernel_pos, stride, dilation, out
    return (slice(None), slice(None), slice(i * dh, i * dh + sh * (oh - 1) + 1, sh),
            slice(j * dw, j * dw + sw * (ow - 1) + 1, sw))


def _patches(xp: Any, x: Any, kernel: Pair, stride: Pair, dilation: Pair, out: Pair,
             groups: int) -> Any:
    """The padded input seen by each kernel tap: ``(N, groups, C/groups * kh * kw, oh * ow)``."""
    kh, kw = kernel
    taps = xp.stack([x[_tap((i, j), stride, dilation, out)]
                     for i in range(kh) for j in range(kw)], axis=2)  # (N, C, kh*kw, oh, ow)
    n, c = x.shape[:2]
    return taps.reshape(n, groups, (c // groups) * kh * kw, out[0] * out[1])


def _conv_forward(xp: Any, input: Any, weight: Any, bias: Any, *, stride: Pair, padding: Pair,
                  dilation: Pair, groups: int) -> Any:
    n = input.shape[0]
    o, _, kh, kw = weight.shape
    out = conv_output_size(input.shape[2:], (kh, kw), stride, padding, dilation)
    cols = _patches(xp, _pad(xp, input, padding), (kh, kw), stride, dilation, out, groups)
    w = weight.reshape(1, groups, o // groups, -1)
    result = (w @ cols).reshape(n, o, out[0], out[1])
    return result + bias.reshape(1, o, 1, 1)


def _conv_input_grad_forward(xp: Any, grad_output: Any, input: Any, weight: Any, *,
                             stride: Pair, padding: Pair, dilation: Pair, groups: int) -> Any:
    # The transposed convolution: every output gradient flows back to the taps it came from.
    n, c, h, w = input.shape
    o, cg, kh, kw = weight.shape
    out = grad_output.shape[2:]
    g = grad_output.reshape(n, groups, o // groups, out[0] * out[1])
    wt = xp.transpose(weight.reshape(groups, o // groups, cg * kh * kw), (0, 2, 1))
    cols = (wt @ g).reshape(n, c, kh * kw, out[0], out[1])
    ph, pw = padding
    padded = xp.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=grad_output.dtype)
    for k in range(kh * kw):
        padded[_tap(divmod(k, kw), stride, dilation, out)] += cols[:, :, k]
    return padded[:, :, ph:ph + h, pw:pw + w]


def _conv_weight_grad_forward(xp: Any, grad_output: Any, input: Any, weight: Any, *,
                              stride: Pair, padding: Pair, dilation: Pair, groups: int) -> Any:
    # Correlate each output gradient with the input patch that produced it, summed over N.
    o, cg, kh, kw = weight.shape
    n = input.shape[0]
    out = grad_output.shape[2:]
    cols = _patches(xp, _pad(xp, input, padding), (kh, kw), stride, dilation, out, groups)
    g = grad_output.reshape(n, groups, o // groups, out[0] * out[1])
    return (g @ xp.transpose(cols, (0, 1, 3, 2))).sum(axis=0).reshape(weight.shape)


def _zero_bias(like: Tensor, channels: int) -> Tensor:
    return _creation.zeros(channels, dtype=like.dtype, device=like.device)


def convolution(input: Tensor, weight: Tensor, bias: Tensor | None, stride: Pair,
                padding: Pair, dilation: Pair, groups: int) -> Tensor:
    """The ``convolution`` row on 4-d ``input``; an absent bias is a zero constant (no edge)."""
    if bias is None:
        bias = _zero_bias(weight, weight.shape[0])
    return apply(CONVOLUTION, (input, weight, bias), {
        "stride": stride, "padding": padding, "dilation": dilation, "groups": groups})


def _input_grad(grad: Tensor, input: Tensor, weight: Tensor, **conv: Any) -> Tensor:
    return apply(CONVOLUTION_INPUT_GRAD, (grad, input, weight), conv)


def _weight_grad(grad: Tensor, input: Tensor, weight: Tensor, **conv: Any) -> Tensor:
    return apply(CONVOLUTION_WEIGHT_GRAD, (grad, input, weight), conv)


# PyTorch computes the three gradients of ``convolution`` and of ``native_batch_norm`` in one
# joint formula, so their nodes save input and weight whichever gradients are needed, and an
# in-place change to either fails the backward. Every formula below names both to keep that.
# Likewise each gradient of a convolution is an output of one ``ConvolutionBackwardBackward0``
# node whose edges are (grad_output, input, weight): the three rows below take all three
# tensors, so a gradient's graph has those edges even where its formula ignores one of them
# (an input gradient does not depend on the input: that edge gets no gradient).
CONVOLUTION = defop(
    "convolution", "ConvolutionBackward0", _conv_forward,
    {"input": lambda grad, input, weight, stride, padding, dilation, groups:
         _input_grad(grad, input, weight, stride=stride, padding=padding,
                     dilation=dilation, groups=groups),
     "weight": lambda grad, input, weight, stride, padding, dilation, groups:
         _weight_grad(grad, input, weight, stride=stride, padding=padding,
                      dilation=dilation, groups=groups),
     "bias": lambda grad, input, weight: apply(CONVOLUTION_BIAS_GRAD, (grad, input, weight))},
)
CONVOLUTION_INPUT_GRAD = defop(
    # d(input grad)/d(grad_output) is the forward convolution; d/d(weight) correlates the
    # incoming gradient (shaped like the input) with grad_output.
    "convolution_backward.input", "ConvolutionBackwardBackward0", _conv_input_grad_forward,
    {"grad_output": lambda grad, weight, stride, padding, dilation, groups:
         convolution(grad, weight, None, stride, padding, dilation, groups),
     "weight": lambda grad, grad_output, weight, stride, padding, dilation, groups:
         _weight_grad(grad_output, grad, weight, stride=stride, padding=padding,
                      dilation=dilation, groups=groups)},
)
CONVOLUTION_WEIGHT_GRAD = defop(
    "convolution_backward.weight", "ConvolutionBackwardBackward0", _conv_weight_grad_forward,
    {"grad_output": lambda grad, input, stride, padding, dilation, groups:
         convolution(input, grad, None, stride, padding, dilation, groups),
     "input": lambda grad, grad_output, input, stride, padding, dilation, groups:
         _input_grad(grad_output, input, grad, stride=stride, padding=padding,
                     dilation=dilation, groups=groups)},
)
CONVOLUTION_BIAS_GRAD = defop(
    "convolution_backward.bias", "ConvolutionBackwardBackward0",
    lambda xp, grad_output, input, weight: grad_output.sum(axis=(0, 2, 3)),
    {"grad_output": lambda grad, grad_output_shape:
         grad.reshape(1, -1, 1, 1).expand(grad_output_shape)},
)

# ------------------------------------------------------------------ mse_loss

def _reduce(loss: Any, reduction: str) -> Any:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _mse_scale(reduction: str, shape: tuple[int, ...]) -> float:
    # d/dx of mean((x - t)^2) is 2 (x - t) / numel; of the sum (or no reduction) 2 (x - t).
    if reduction != "mean":
        return 2.0
    n = 1
    for s in shape:
        n *= s
    return 2.0 / n


def _mse_backward(grad: Tensor, self: Tensor, target: Tensor, reduction: str) -> Tensor:
    return apply(MSE_LOSS_BACKWARD, (grad, self, target), {"reduction": reduction})


MSE_LOSS = defop(
    "mse_loss", "MseLossBackward0",
    lambda xp, self, target, *, reduction="mean": _reduce((self - target) ** 2, reduction),
    {"self": lambda grad, self, target, reduction: _mse_backward(grad, self, target, reduction),
     # (t - x)^2 is symmetric: the target's gradient is the same row with the roles swapped.
     "target": lambda grad, self, target, reduction:
         _mse_backward(grad, target, self, reduction)},
)
MSE_LOSS_BACKWARD = defop(
    "mse_loss_backward", "MseLossBackwardBackward0",
    # PyTorch's kernel writes into zeros like ``self``: the result has self's dtype even when
    # the target (or the incoming gradient) has a wider one.
    lambda xp, grad_output, self, target, *, reduction="mean":
        (_mse_scale(reduction, self.shape) * (self - target) * grad_output).astype(
            self.dtype, copy=False),
    {"grad_output": lambda grad, self, target, reduction:
         grad * (self - target) * _mse_scale(reduction, self.shape),
     "self": lambda grad, grad_output, self_shape, reduction:
         grad * grad_output * _mse_scale(reduction, self_shape),
     "target": lambda grad, grad_output, self_shape, reduction:
         grad * grad_output * -_mse_scale(reduction, self_shape)},
)


# ------------------------------------------------------------------ native_batch_norm

def _channel_shape(ndim: int) -> tuple[int, ...]:
    return (1, -1) + (1,) * (ndim - 2)


def _reduce_dims(ndim: int) -> tuple[int, ...]:
    return (0,) + tuple(range(2, ndim))


def _batch_norm_forward(xp: Any, input: Any, weight: Any, bias: Any, *, training: bool,
                        eps: float, running_mean: Any = None, running_var: Any = None) -> Any:
    dims = _reduce_dims(input.ndim)
    shape = _channel_shape(input.ndim)
    if training:
        mean = input.mean(axis=dims)
        centered = input - mean.reshape(shape)
        var = (centered * centered).mean(axis=dims)
    else:
        mean, var = running_mean._data, running_var._data
        centered = input - mean.reshape(shape)
    invstd = 1 / xp.sqrt(var + eps)
    out = centered * invstd.reshape(shape) * weight.reshape(shape) + bias.reshape(shape)
    # The batch statistics ride along so the caller can update the running estimates.
    return out, mean, var


def _batch_norm_backward_forward(xp: Any, grad_out: Any, input: Any, weight: Any,
                                 save_mean: Any, save_var: Any, *, training: bool, eps: float,
                                 running_mean: Any = None, running_var: Any = None,
                                 output: int = 0) -> Any:
    """Output ``output`` of PyTorch's ``native_batch_norm_backward`` on arrays: the gradient
    of the input (0), of the weight (1) or of the bias (2)."""
    dims = _reduce_dims(input.ndim)
    shape = _channel_shape(input.ndim)
    if output == 2:
        return grad_out.sum(axis=dims)
    mean, var = (save_mean, save_var) if training else (running_mean._data, running_var._data)
    invstd = (1 / xp.sqrt(var + eps)).reshape(shape)
    x_hat = (input - mean.reshape(shape)) * invstd
    if output == 1:
        return (grad_out * x_hat).sum(axis=dims)
    scale = weight.reshape(shape) * invstd
    if not training:
        return grad_out * scale
    centered = grad_out - grad_out.mean(axis=dims, keepdims=True)
    return scale * (centered - x_hat * (grad_out * x_hat).mean(axis=dims, keepdims=True))


def _sum_exclude_dim1(t: Tensor, keepdim: bool = True) -> Tensor:
    """PyTorch's ``sum_exclude_dim1``: dim 0 first, then the trailing dims from the last."""
    r = t.sum(0, keepdim=keepdim)
    for dim in range(r.dim() - 1, 1 if keepdim else 0, -1):
        r = r.sum(dim, keepdim=keepdim)
    return r


def _unsqueeze_dim1(src: Tensor, target: Tensor) -> Tensor:
    """A per-channel ``(C,)`` tensor shaped as a keepdim reduction of ``target``."""
    while src.dim() < target.dim() - 1:
        src = src.unsqueeze(1)
    return src.unsqueeze(0) if src.dim() == target.dim() - 1 else src


def _expand_as_dim1(src: Tensor, target: Tensor) -> Tensor:
    while src.dim() < target.dim() - 1:
        src = src.unsqueeze(1)
    return src.expand(target.shape)


def batchnorm_double_backward(input: Tensor, gamma: Tensor, ggI: Tensor | None,
                              ggG: Tensor | None, ggB: Tensor | None, gO: Tensor,
                              running_mean: Tensor | None, running_var: Tensor | None,
                              training: bool, eps: float, save_mean: Tensor,
                              save_var: Tensor, position: int) -> Tensor | None:
    """PyTorch's ``batchnorm_double_backward`` (FunctionsManual.cpp), op for op, so that under
    create_graph it records PyTorch's nodes: the gradient of ``grad_out`` (``position`` 0),
    ``input`` (1) or ``weight`` (2) of ``native_batch_norm_backward`` given the gradients
    ``ggI``, ``ggG``, ``ggB`` of its three outputs (None: no gradient). PyTorch's in-place
    steps on fresh intermediates (``div_(M)``, ``add_``) record the nodes their out-of-place
    forms do, which is what is written here; ``save_var`` stands for PyTorch's saved
    ``save_invstd`` (``(save_var + eps) ** -0.5``, a constant to autograd)."""
    gamma_expanded = _expand_as_dim1(gamma, input)
    ggG_expanded = _expand_as_dim1(ggG, input) if ggG is not None else None
    M = input.shape[0]
    for size in input.shape[2:]:
        M *= size
    if training:
        mu = _unsqueeze_dim1(save_mean, input)
        sigma2_eps_neg_1_2 = _unsqueeze_dim1((save_var + eps) ** -0.5, input)
    else:
        mu = _unsqueeze_dim1(running_mean, input)
        sigma2_eps_neg_1_2 = _unsqueeze_dim1((running_var + eps) ** -0.5, input)
    input_sub_mu = input - mu
    sigma2_eps_neg_1 = sigma2_eps_neg_1_2 ** 2
    sigma2_eps_neg_3_2 = sigma2_eps_neg_1_2 ** 3

    def first_back_grad_input(g: Tensor, gamma: Tensor) -> Tensor:
        # The first backward's grad_input.
        h0 = D.divide(gamma * sigma2_eps_neg_1_2, M)
        h1 = (D.scale(M, g) - _sum_exclude_dim1(g)) \
            - input_sub_mu * sigma2_eps_neg_1 * _sum_exclude_dim1(g * input_sub_mu)
        return h0 * h1

    if position == 1:
        input_mu_sigma2_neg_3_2 = input_sub_mu * sigma2_eps_neg_3_2
        gOinmu_sum = _sum_exclude_dim1(gO * input_sub_mu)
        gO_sum = _sum_exclude_dim1(gO)
        gI = None
        if ggI is not None and training:
            ggI_sum = _sum_exclude_dim1(ggI)
            ggIinmu_sum = _sum_exclude_dim1(ggI * input_sub_mu)
            all_sub = (D.divide(ggI_sum * gO_sum, M) - _sum_exclude_dim1(gO * ggI)) \
                + D.scale(3.0 / M, sigma2_eps_neg_1 * gOinmu_sum * ggIinmu_sum)
            gI_0t = D.divide(input_mu_sigma2_neg_3_2 * all_sub, M)
            gI_1t = D.divide(ggIinmu_sum * sigma2_eps_neg_3_2, M) * (D.divide(gO_sum, M) - gO)
            gI_2t = D.divide(gOinmu_sum * sigma2_eps_neg_3_2, M) * (D.divide(ggI_sum, M) - ggI)
            gI = gamma_expanded * ((gI_0t + gI_1t) + gI_2t)
        if ggG_expanded is not None:
            if training:
                t0 = gO * sigma2_eps_neg_1_2
                t1 = D.divide(sigma2_eps_neg_1_2 * gO_sum, -M)
                t2 = D.divide(input_mu_sigma2_neg_3_2 * _sum_exclude_dim1(gO * input_sub_mu),
                              -M)
                gI_G_term = ggG_expanded * ((t0 + t1) + t2)
            else:
                gI_G_term = ggG_expanded * sigma2_eps_neg_1_2 * gO
            gI = gI_G_term if gI is None else gI + gI_G_term
        return gI
    if position == 2:
        if ggI is None:
            return None
        if training:
            ones = _creation.ones((), dtype=sigma2_eps_neg_1_2.dtype,
                                  device=sigma2_eps_neg_1_2.device)
            return _sum_exclude_dim1(ggI * first_back_grad_input(gO, ones), False)
        return _sum_exclude_dim1(ggI * gO * sigma2_eps_neg_1_2, False)
    ggO = None
    if ggI is not None:
        ggO = first_back_grad_input(ggI, gamma_expanded) if training \
            else ggI * sigma2_eps_neg_1_2 * gamma_expanded
    if ggG_expanded is not None:
        ggO_G_term = ggG_expanded * input_sub_mu * sigma2_eps_neg_1_2
        ggO = ggO_G_term if ggO is None else ggO + ggO_G_term
    if ggB is not None:
        ggO_B_term = _expand_as_dim1(ggB, input)
        ggO = ggO_B_term if ggO is None else ggO + ggO_B_term
    return ggO


def _batch_norm_double(position: int) -> Any:
    """The double-backward formula for input ``position`` (grad_out, input, weight) of
    ``native_batch_norm_backward``: PyTorch's ``batchnorm_double_backward`` with the
    gradient of this node's one output (``output``) defined."""

    def formula(grad: Tensor, grad_out: Tensor, input: Tensor, weight: Tensor,
                save_mean: Tensor, save_var: Tensor, training: bool, eps: float,
                running_mean: Tensor | None, running_var: Tensor | None,
                output: int) -> Tensor | None:
        grads = [grad if k == output else None for k in range(3)]
        return batchnorm_double_backward(input, weight, *grads, grad_out, running_mean,
                                         running_var, training, eps, save_mean, save_var,
                                         position)

    return formula


NATIVE_BATCH_NORM_BACKWARD = defop(
    "native_batch_norm_backward", "NativeBatchNormBackwardBackward0",
    _batch_norm_backward_forward,
    {"grad_out": _batch_norm_double(0), "input": _batch_norm_double(1),
     "weight": _batch_norm_double(2)},
)


def _batch_norm_grad(output: int) -> Any:
    def formula(grad: Tensor, input: Tensor, weight: Tensor, save_mean: Tensor,
                save_var: Tensor, training: bool, eps: float, running_mean: Tensor | None,
                running_var: Tensor | None) -> Tensor:
        # PyTorch computes the three gradients in one native_batch_norm_backward call; with
        # create_graph each of them has a NativeBatchNormBackwardBackward0 node.
        return apply(NATIVE_BATCH_NORM_BACKWARD, (grad, input, weight, save_mean, save_var),
                     {"training": training, "eps": eps, "running_mean": running_mean,
                      "running_var": running_var, "output": output})

    return formula


NATIVE_BATCH_NORM = defop(
    "native_batch_norm", "NativeBatchNormBackward0", _batch_norm_forward,
    {"input": _batch_norm_grad(0), "weight": _batch_norm_grad(1), "bias": _batch_norm_grad(2)},
    extra_outputs=("save_mean", "save_var"),
)
