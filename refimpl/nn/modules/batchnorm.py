"""``BatchNorm1d`` and ``BatchNorm2d``: normalization with running statistics; the
``InstanceNorm`` layers, which normalize each sample's channels on their own.

In training mode each call normalizes with the batch's mean and (biased) variance and, when
``track_running_stats``, updates the buffers ``running_mean``, ``running_var`` (with the
unbiased variance) and ``num_batches_tracked``. In eval mode the running statistics normalize.
The output's ``grad_fn`` is ``NativeBatchNormBackward0`` in both modes.
"""

from __future__ import annotations

import warnings
from typing import Any

from refimpl import _creation, _dtype
from refimpl._tensor import Tensor
from refimpl.nn import functional as F
from refimpl.nn import init
from refimpl.nn.modules.module import Module
from refimpl.nn.parameter import Parameter

__all__ = ["BatchNorm1d", "BatchNorm2d", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"]


class _BatchNorm(Module):
    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, device: Any = None,
                 dtype: Any = None, *, bias: bool = True) -> None:
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = Parameter(_creation.empty(num_features, device=device, dtype=dtype))
            if bias:
                self.bias = Parameter(_creation.empty(num_features, device=device, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean",
                                 _creation.zeros(num_features, device=device, dtype=dtype))
            self.register_buffer("running_var",
                                 _creation.ones(num_features, device=device, dtype=dtype))
            self.register_buffer("num_batches_tracked",
                                 _creation.tensor(0, dtype=_dtype.int64, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        """Running statistics reset; weight ones and bias zeros."""
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def _check_input_dim(self, input: Tensor) -> None:
        raise NotImplementedError(f"{type(self).__name__} must say which input ranks it takes")

    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                # No momentum: a cumulative average over every batch seen so far.
                factor = 1.0 / float(self.num_batches_tracked)
        # Batch statistics in training, and in eval when there are no running buffers.
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        buffers = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if buffers else None,
                            self.running_var if buffers else None, self.weight, self.bias,
                            use_batch, factor, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch norm over ``(N, C)`` or ``(N, C, L)`` input."""

    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {input.dim()}D input)")


class BatchNorm2d(_BatchNorm):
    """Batch norm over ``(N, C, H, W)`` input."""

    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() != 4:
            raise ValueError(f"expected 4D input (got {input.dim()}D input)")


class _InstanceNorm(_BatchNorm):
    """Statistics of each sample and channel over its spatial dimensions, in training and
    eval alike unless ``track_running_stats`` (then eval uses the running buffers, which
    training updates with the mean over the samples; ``num_batches_tracked`` stays 0).
    Neither affine parameters nor running statistics by default. ``_batch_dims``: the ranks
    of one unbatched sample and of a batch."""

    _batch_dims: tuple[int, int] = (0, 0)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = False, track_running_stats: bool = False, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype)

    def _check_input_dim(self, input: Tensor) -> None:
        low, high = self._batch_dims
        if input.dim() not in (low, high):
            raise ValueError(f"expected {low}D or {high}D input (got {input.dim()}D input)")

    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        unbatched = self._batch_dims[0]
        feature_dim = input.dim() - unbatched
        if input.size(feature_dim) != self.num_features:
            if self.affine:
                raise ValueError(f"expected input's size at dim={feature_dim} to match "
                                 f"num_features ({self.num_features}), but got: "
                                 f"{input.size(feature_dim)}.")
            warnings.warn(f"input's size at dim={feature_dim} does not match num_features. "
                          "You can silence this warning by not passing in num_features, "
                          "which is not used because affine=False", UserWarning, stacklevel=2)
        if input.dim() == unbatched:
            return self._normalize(input.unsqueeze(0)).squeeze(0)
        return self._normalize(input)

    def _normalize(self, input: Tensor) -> Tensor:
        return F.instance_norm(input, self.running_mean, self.running_var, self.weight,
                               self.bias, self.training or not self.track_running_stats,
                               self.momentum if self.momentum is not None else 0.0, self.eps)


class InstanceNorm1d(_InstanceNorm):
    """Instance norm over ``(N, C, L)`` input, or one ``(C, L)`` sample."""

    _batch_dims = (2, 3)


class InstanceNorm2d(_InstanceNorm):
    """Instance norm over ``(N, C, H, W)`` input, or one ``(C, H, W)`` sample."""

    _batch_dims = (3, 4)


class InstanceNorm3d(_InstanceNorm):
    """Instance norm over ``(N, C, D, H, W)`` input, or one ``(C, D, H, W)`` sample."""

    _batch_dims = (4, 5)
