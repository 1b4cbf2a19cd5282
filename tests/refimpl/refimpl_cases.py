"""The op cases every op test runs: one per op-table row (and per public overload).

Each case builds its output from an engine module (``refimpl`` or ``torch``) and input
tensors, so the same case runs on both and on every device. ``node`` is the grad_fn class
PyTorch 2.13 records for the output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class OpCase:
    id: str
    fn: Callable[..., Any]
    shapes: tuple[tuple[int, ...], ...]
    node: str
    domain: str = "real"  # "real", "positive" (log, sqrt...) or "spread" (kinks kept away)
    eps: float = 1e-6
    tol: float = 1e-5

    def arrays(self, dtype: Any = np.float64, seed: int = 0) -> list[np.ndarray]:
        """Deterministic inputs for this case, chosen away from the op's kinks."""
        rng = np.random.default_rng(seed + sum(map(ord, self.id)))
        out = []
        for shape in self.shapes:
            n = int(np.prod(shape))
            if self.domain == "positive":
                a = rng.uniform(0.5, 2.0, n)
            elif self.domain == "spread":
                # Distinct magnitudes 0.1..1 with random signs: no ties, far from 0 and +-0.55.
                mags = 0.1 + 0.9 * (np.arange(n) + rng.uniform(0.2, 0.4, n)) / max(n, 1)
                mags = np.where(np.abs(mags - 0.55) < 0.06, mags + 0.12, mags)
                a = rng.permutation(mags) * rng.choice([-1.0, 1.0], n)
            else:
                a = rng.uniform(-1.0, 1.0, n)
            out.append(a.reshape(shape).astype(dtype))
        return out


def _inplace_view(lib: Any, a: Any, b: Any) -> Any:
    c = a * 1
    c[0] = b[1] * 2
    return c


def _mul_view(lib: Any, a: Any, b: Any) -> Any:
    c = a * 1
    c[:, 1:].mul_(b[:, 1:])
    return c


def _index_put(lib: Any, a: Any, b: Any) -> Any:
    c = a * 1
    c[[0, 1], [2, 0]] = b[0, :2]
    return c


def _mask_put(lib: Any, a: Any, b: Any) -> Any:
    c = a * 1
    c[a > 0] = b.sum()
    return c


CASES = [
    OpCase("add", lambda lib, a, b: a + b, ((2, 3), (3,)), "AddBackward0"),
    OpCase("add_scalar", lambda lib, a: a + 2.5, ((2, 3),), "AddBackward0"),
    OpCase("radd_scalar", lambda lib, a: 2.5 + a, ((2, 3),), "AddBackward0"),
    OpCase("add_alpha", lambda lib, a, b: lib.add(a, b, alpha=2), ((2, 3), (2, 3)),
           "AddBackward0"),
    OpCase("sub", lambda lib, a, b: a - b, ((2, 3), (2, 1)), "SubBackward0"),
    OpCase("sub_scalar", lambda lib, a: a - 1.5, ((3,),), "SubBackward0"),
    OpCase("rsub_scalar", lambda lib, a: 1.5 - a, ((3,),), "RsubBackward1"),
    OpCase("sub_alpha", lambda lib, a, b: lib.sub(a, b, alpha=3), ((3,), (3,)),
           "SubBackward0"),
    OpCase("mul", lambda lib, a, b: a * b, ((2, 3), (2, 3)), "MulBackward0"),
    OpCase("mul_scalar", lambda lib, a: a * 4, ((2, 3),), "MulBackward0"),
    OpCase("rmul_scalar", lambda lib, a: 4 * a, ((2, 3),), "MulBackward0"),
    OpCase("div", lambda lib, a, b: a / b, ((2, 3), (3,)), "DivBackward0", domain="positive"),
    OpCase("div_scalar", lambda lib, a: a / 2, ((3,),), "DivBackward0"),
    OpCase("rdiv_scalar", lambda lib, a: 2 / a, ((3,),), "MulBackward0", domain="positive"),
    OpCase("reciprocal", lambda lib, a: a.reciprocal(), ((3,),), "ReciprocalBackward0",
           domain="positive"),
    OpCase("pow_int", lambda lib, a: a ** 3, ((2, 3),), "PowBackward0"),
    OpCase("pow_float", lambda lib, a: a ** 2.5, ((2, 3),), "PowBackward0",
           domain="positive"),
    OpCase("pow_zero", lambda lib, a: a ** 0, ((3,),), "PowBackward0"),
    OpCase("pow_tensor", lambda lib, a, b: a ** b, ((2, 3), (2, 3)), "PowBackward1",
           domain="positive"),
    OpCase("rpow_scalar", lambda lib, a: 2 ** a, ((3,),), "PowBackward2"),
    OpCase("neg", lambda lib, a: -a, ((2, 3),), "NegBackward0"),
    OpCase("mm", lambda lib, a, b: a @ b, ((2, 3), (3, 4)), "MmBackward0"),
    OpCase("mm_method", lambda lib, a, b: a.mm(b), ((2, 3), (3, 2)), "MmBackward0"),
    OpCase("dot", lambda lib, a, b: a @ b, ((3,), (3,)), "DotBackward0"),
    OpCase("mv", lambda lib, a, b: a @ b, ((2, 3), (3,)), "MvBackward0"),
    OpCase("vm", lambda lib, a, b: a @ b, ((3,), (3, 4)), "SqueezeBackward4"),
    OpCase("matmul_3d_2d", lambda lib, a, b: a @ b, ((2, 2, 3), (3, 2)),
           "UnsafeViewBackward0"),
    OpCase("addmm", lambda lib, c, a, b: lib.addmm(c, a, b), ((4,), (2, 3), (3, 4)),
           "AddmmBackward0"),
    OpCase("addmm_scaled", lambda lib, c, a, b: lib.addmm(c, a, b, beta=0.5, alpha=2.0),
           ((2, 4), (2, 3), (3, 4)), "AddmmBackward0"),
    OpCase("sum", lambda lib, a: a.sum(), ((2, 3),), "SumBackward0"),
    OpCase("sum_dim", lambda lib, a: a.sum(0), ((2, 3),), "SumBackward1"),
    OpCase("sum_dims_keepdim", lambda lib, a: a.sum((0, 2), keepdim=True), ((2, 3, 2),),
           "SumBackward1"),
    OpCase("mean", lambda lib, a: a.mean(), ((2, 3),), "MeanBackward0"),
    OpCase("mean_dim", lambda lib, a: a.mean(-1, keepdim=True), ((2, 3),), "MeanBackward1"),
    OpCase("max", lambda lib, a: a.max(), ((2, 3),), "MaxBackward1", domain="spread"),
    OpCase("max_dim", lambda lib, a: a.max(1)[0], ((2, 3),), "MaxBackward0", domain="spread"),
    OpCase("median", lambda lib, a: a.median(), ((2, 3),), "MedianBackward0", domain="spread"),
    OpCase("median_dim", lambda lib, a: a.median(1)[0], ((2, 3),), "MedianBackward1",
           domain="spread"),
    OpCase("sgn", lambda lib, a: lib.sgn(a) * a, ((2, 3),), "MulBackward0", domain="spread"),
    OpCase("narrow", lambda lib, a: a.narrow(1, 1, 2), ((2, 3),), "SliceBackward0"),
    OpCase("split", lambda lib, a: a.split(2, 1)[1], ((2, 3),), "SplitBackward0"),
    OpCase("split_sizes", lambda lib, a: a.split([1, 2], 1)[0], ((2, 3),),
           "SplitWithSizesBackward0"),
    OpCase("chunk", lambda lib, a: a.chunk(2, 0)[0], ((3, 2),), "SplitBackward0"),
    OpCase("unsafe_split", lambda lib, a: lib.unsafe_split(a, 2, 1)[0], ((2, 3),),
           "UnsafeSplitBackward0"),
    OpCase("diagonal", lambda lib, a: a.diagonal(-1), ((3, 3),), "DiagonalBackward0"),
    OpCase("diagonal_dims", lambda lib, a: lib.diagonal(a, 1, 1, 2), ((2, 3, 4),),
           "DiagonalBackward0"),
    OpCase("repeat", lambda lib, a: a.repeat(2, 1, 3), ((2, 3),), "RepeatBackward0"),
    OpCase("min", lambda lib, a: lib.min(a), ((2, 3),), "MinBackward1", domain="spread"),
    OpCase("min_dim_keepdim", lambda lib, a: a.min(0, keepdim=True).values, ((2, 3),),
           "MinBackward0", domain="spread"),
    OpCase("maximum", lambda lib, a, b: lib.maximum(a, b), ((2, 3), (2, 3)),
           "MaximumBackward0", domain="spread"),
    OpCase("max_binary", lambda lib, a, b: lib.max(a, b), ((2, 3), (2, 3)),
           "MaximumBackward0", domain="spread"),
    OpCase("minimum", lambda lib, a, b: lib.minimum(a, b), ((2, 3), (3,)),
           "MinimumBackward0", domain="spread"),
    OpCase("exp", lambda lib, a: a.exp(), ((2, 3),), "ExpBackward0"),
    OpCase("log", lambda lib, a: lib.log(a), ((2, 3),), "LogBackward0", domain="positive"),
    OpCase("sqrt", lambda lib, a: a.sqrt(), ((2, 3),), "SqrtBackward0", domain="positive"),
    OpCase("sin", lambda lib, a: a.sin(), ((2, 3),), "SinBackward0"),
    OpCase("cos", lambda lib, a: lib.cos(a), ((2, 3),), "CosBackward0"),
    OpCase("tanh", lambda lib, a: a.tanh(), ((2, 3),), "TanhBackward0"),
    OpCase("sigmoid", lambda lib, a: lib.sigmoid(a), ((2, 3),), "SigmoidBackward0"),
    OpCase("relu", lambda lib, a: a.relu(), ((2, 3),), "ReluBackward0", domain="spread"),
    OpCase("abs", lambda lib, a: a.abs(), ((2, 3),), "AbsBackward0", domain="spread"),
    OpCase("clamp", lambda lib, a: a.clamp(-0.55, 0.55), ((2, 3),), "ClampBackward1",
           domain="spread"),
    OpCase("clamp_min", lambda lib, a: a.clamp(min=0.0), ((2, 3),), "ClampBackward1",
           domain="spread"),
    OpCase("clamp_tensor", lambda lib, a, lo, hi: a.clamp(lo, hi + 2),
           ((2, 3), (2, 3), (2, 3)), "ClampBackward0", domain="spread"),
    OpCase("where", lambda lib, a, b: lib.where(a > 0, a, b), ((2, 3), (2, 3)),
           "WhereBackward0", domain="spread"),
    OpCase("softmax", lambda lib, a: a.softmax(1), ((2, 3),), "SoftmaxBackward0"),
    OpCase("log_softmax", lambda lib, a: lib.log_softmax(a, 0), ((2, 3),),
           "LogSoftmaxBackward0"),
    OpCase("view", lambda lib, a: a.view(6), ((2, 3),), "ViewBackward0"),
    OpCase("view_infer", lambda lib, a: a.view(-1, 2), ((2, 3),), "ViewBackward0"),
    OpCase("reshape", lambda lib, a: lib.reshape(a, (3, 2)), ((2, 3),), "ViewBackward0"),
    OpCase("reshape_copy", lambda lib, a: a.t().reshape(6), ((2, 3),),
           "UnsafeViewBackward0"),
    OpCase("flatten", lambda lib, a: a.flatten(), ((2, 3),), "ViewBackward0"),
    OpCase("t", lambda lib, a: a.t(), ((2, 3),), "TBackward0"),
    OpCase("transpose", lambda lib, a: a.transpose(0, 2), ((2, 3, 2),),
           "TransposeBackward0"),
    OpCase("permute", lambda lib, a: a.permute(2, 0, 1), ((2, 3, 2),), "PermuteBackward0"),
    OpCase("unsqueeze", lambda lib, a: a.unsqueeze(1), ((2, 3),), "UnsqueezeBackward0"),
    OpCase("squeeze", lambda lib, a: a.squeeze(), ((2, 1, 3),), "SqueezeBackward0"),
    OpCase("squeeze_dim", lambda lib, a: a.squeeze(1), ((2, 1, 3),), "SqueezeBackward1"),
    OpCase("expand", lambda lib, a: a.expand(2, 3), ((3,),), "ExpandBackward0"),
    OpCase("expand_keep", lambda lib, a: a.expand(-1, 3), ((2, 1),), "ExpandBackward0"),
    OpCase("select", lambda lib, a: a[1], ((2, 3),), "SelectBackward0"),
    OpCase("select_neg", lambda lib, a: a[:, -1], ((2, 3),), "SelectBackward0"),
    OpCase("select_scalar", lambda lib, a: a[0, 1], ((2, 3),), "SelectBackward0"),
    OpCase("slice", lambda lib, a: a[:, 1:], ((2, 3),), "SliceBackward0"),
    OpCase("slice_step", lambda lib, a: a[::2], ((5,),), "SliceBackward0"),
    OpCase("slice_full", lambda lib, a: a[:], ((3,),), "SliceBackward0"),
    OpCase("alias", lambda lib, a: a[:, :], ((2, 3),), "AliasBackward0"),
    OpCase("index_none", lambda lib, a: a[None], ((2, 3),), "UnsqueezeBackward0"),
    OpCase("cat", lambda lib, a, b: lib.cat([a, b], 1), ((2, 3), (2, 2)), "CatBackward0"),
    OpCase("stack", lambda lib, a, b: lib.stack([a, b], 1), ((2, 3), (2, 3)),
           "StackBackward0"),
    OpCase("clone", lambda lib, a: a.clone(), ((2, 3),), "CloneBackward0"),
    OpCase("to_float32", lambda lib, a: a.float(), ((2, 3),), "ToCopyBackward0", eps=1e-2,
           tol=1e-3),
    OpCase("add_inplace", lambda lib, a, b: (a * 1).add_(b), ((2, 3), (3,)), "AddBackward0"),
    OpCase("mul_inplace", lambda lib, a, b: (a * 1).mul_(b), ((2, 3), (2, 3)),
           "MulBackward0"),
    OpCase("copy_inplace", lambda lib, a, b: (a * 1).copy_(b), ((2, 3), (3,)),
           "CopyBackwards"),
    OpCase("zero_inplace", lambda lib, a: (a * 1).zero_() + a, ((3,),), "AddBackward0"),
    OpCase("setitem", _inplace_view, ((2, 3), (2, 3)), "CopySlices"),
    OpCase("index_list", lambda lib, a: a[[1, 0, 1]], ((2, 3),), "IndexBackward0"),
    OpCase("index_mask", lambda lib, a: a[a > 0], ((2, 3),), "IndexBackward0",
           domain="spread"),
    OpCase("index_after_slice", lambda lib, a: a[:, [2, 0, 2]], ((2, 3),), "IndexBackward0"),
    OpCase("index_pairs", lambda lib, a: a[[0, 1], [2, 2]], ((2, 3),), "IndexBackward0"),
    OpCase("index_tensor", lambda lib, a: a[lib.tensor([[1], [0]]), lib.tensor([[0, 2]])],
           ((2, 3),), "IndexBackward0"),
    OpCase("index_put", _index_put, ((2, 3), (2, 3)), "IndexPutBackward0"),
    OpCase("index_put_mask", _mask_put, ((2, 3), (2,)), "IndexPutBackward0", domain="spread"),
    OpCase("fill_tensor", lambda lib, a, b: (a * 1).fill_(b.sum()) * a, ((2, 3), (2,)),
           "MulBackward0"),
    OpCase("mul_inplace_view", _mul_view, ((2, 3), (2, 3)), "CopySlices"),
    # Overlapping and skipping strided views of one memory: their gradients add up per element.
    OpCase("as_strided", lambda lib, a: a.as_strided((2, 2), (1, 2), 1) * a.as_strided((2, 2),
                                                                                      (2, 0)),
           ((6,),), "MulBackward0"),
    # Real to complex and back: each view's gradient is the other view of the gradient.
    OpCase("view_as_complex_and_real",
           lambda lib, a, b: lib.view_as_real(lib.view_as_complex(a * b)) * a,
           ((3, 2), (3, 2)), "MulBackward0"),
]
