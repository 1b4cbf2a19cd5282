"""refimpl: a reference autograd engine with PyTorch's API and PyTorch 2.13's behaviour.

``import refimpl as torch`` runs the covered surface of PyTorch programs::

    import refimpl as torch

    x = torch.tensor(3.0, requires_grad=True)
    y = x ** 2 + 3 * x + 2
    y.backward()
    print(y, x.grad)      # tensor(20., grad_fn=<AddBackward0>) tensor(9.)

Arrays live on NumPy (``cpu``) or CuPy (``cuda``); see ``refimpl._backend``.
"""

from refimpl import _dtype, autograd, cuda  # noqa: E402,I001 - after the names they re-export
from refimpl._backend import device
from refimpl._creation import (
    Generator,
    arange,
    as_tensor,
    empty,
    eye,
    from_numpy,
    full,
    is_tensor,
    manual_seed,
    ones,
    rand,
    randint,
    randn,
    tensor,
    zeros,
)
from refimpl._dtype import (
    bfloat16,
    complex64,
    complex128,
    dtype,
    float16,
    float32,
    float64,
    get_default_dtype,
    int8,
    int16,
    int32,
    int64,
    promote_types,
)
from refimpl._tensor import Size, Tensor
from refimpl._storage import LEGACY_TYPES as _LEGACY_TYPES, load, save
from refimpl.ops.complex_views import view_as_complex, view_as_real
from refimpl.ops.strided import as_strided
from refimpl.autograd.anomaly_mode import is_anomaly_check_nan_enabled, is_anomaly_enabled
from refimpl._warn import is_warn_always_enabled, set_warn_always
from refimpl.autograd.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
# The public functions check their arguments as PyTorch's binding does (refimpl.ops.signatures).
from refimpl.ops.functional import prod, sort
from refimpl.ops.signatures import (  # noqa: A004 - PyTorch's names shadow builtins here too
    amax,
    amin,
    ceil,
    floor,
    nan_to_num,
    round,
    trunc,
    abs,
    add,
    empty_like,
    full_like,
    ones_like,
    rand_like,
    randn_like,
    zeros_like,
    addmm,
    all,
    any,
    argmax,
    argmin,
    atan2,
    isin,
    masked_fill,
    gather,
    nanmedian,
    std_mean,
    trace,
    var_mean,
    cat,
    chunk,
    clamp,
    clip,
    clone,
    conj,
    cos,
    detach,
    diagonal,
    div,
    dot,
    eq,
    exp,
    flatten,
    ge,
    gt,
    le,
    log,
    log_softmax,
    logical_not,
    lt,
    matmul,
    max,
    maximum,
    mean,
    median,
    min,
    minimum,
    mm,
    mul,
    mv,
    ne,
    narrow,
    neg,
    permute,
    pow,
    real,
    reciprocal,
    relu,
    relu_,
    reshape,
    rsub,
    select,
    sgn,
    sigmoid,
    sign,
    sin,
    softmax,
    split,
    sqrt,
    squeeze,
    stack,
    sub,
    sum,
    t,
    tanh,
    transpose,
    true_divide,
    unbind,
    unsafe_split,
    unsqueeze,
    where,
)

inf = float("inf")  # before refimpl's own `float` below
nan = float("nan")
bool = _dtype.bool  # noqa: A001 - torch.bool
float = float32  # noqa: A001 - torch.float
double = float64
half = float16
long = int64
int = int32  # noqa: A001 - torch.int
cfloat = complex64
cdouble = complex128
short = int16
__version__ = "2.13.0+refimpl"
globals().update(_LEGACY_TYPES)  # torch.FloatTensor, torch.LongTensor, ...

__all__ = [
    "__version__",
    "save",
    "load",
    "view_as_real",
    "view_as_complex",
    "as_strided",
    *_LEGACY_TYPES,
    "abs",
    "add",
    "addmm",
    "arange",
    "all",
    "any",
    "argmax",
    "argmin",
    "atan2",
    "eye",
    "isin",
    "masked_fill",
    "gather",
    "nanmedian",
    "randint",
    "trace",
    "std_mean",
    "var_mean",
    "as_tensor",
    "bfloat16",
    "chunk",
    "diagonal",
    "inf",
    "int8",
    "int16",
    "median",
    "nan",
    "narrow",
    "sgn",
    "short",
    "split",
    "unsafe_split",
    "autograd",
    "bool",
    "cat",
    "cdouble",
    "cfloat",
    "clamp",
    "amax",
    "amin",
    "ceil",
    "floor",
    "linalg",
    "nan_to_num",
    "prod",
    "round",
    "sort",
    "trunc",
    "clip",
    "clone",
    "complex128",
    "complex64",
    "conj",
    "cos",
    "cuda",
    "detach",
    "device",
    "div",
    "dot",
    "double",
    "dtype",
    "empty",
    "empty_like",
    "enable_grad",
    "eq",
    "exp",
    "flatten",
    "float",
    "float16",
    "float32",
    "float64",
    "from_numpy",
    "full",
    "full_like",
    "ge",
    "Generator",
    "get_default_dtype",
    "gt",
    "half",
    "int",
    "int32",
    "int64",
    "inference_mode",
    "is_anomaly_check_nan_enabled",
    "is_anomaly_enabled",
    "is_grad_enabled",
    "is_inference",
    "is_inference_mode_enabled",
    "is_tensor",
    "is_warn_always_enabled",
    "le",
    "log",
    "log_softmax",
    "logical_not",
    "long",
    "lt",
    "manual_seed",
    "matmul",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "mm",
    "mul",
    "mv",
    "ne",
    "neg",
    "no_grad",
    "ones",
    "ones_like",
    "permute",
    "pow",
    "promote_types",
    "rand",
    "rand_like",
    "randn",
    "randn_like",
    "real",
    "reciprocal",
    "relu",
    "relu_",
    "reshape",
    "rsub",
    "select",
    "set_grad_enabled",
    "set_warn_always",
    "sigmoid",
    "sign",
    "sin",
    "Size",
    "softmax",
    "sqrt",
    "squeeze",
    "stack",
    "sub",
    "sum",
    "t",
    "tanh",
    "Tensor",
    "tensor",
    "transpose",
    "true_divide",
    "unbind",
    "unsqueeze",
    "where",
    "allclose",
    "zeros",
    "zeros_like",
]

def allclose(input: Tensor, other: Tensor, rtol: float = 1e-05,  # noqa: A002 - PyTorch's name
             atol: float = 1e-08, equal_nan: bool = False) -> bool:
    """Whether ``input`` and ``other`` are equal within ``atol + rtol * |other|``."""
    from refimpl.ops import functional

    return functional.allclose(input, other, rtol, atol, equal_nan)


def is_inference(input: Tensor) -> bool:  # noqa: A002 - PyTorch's parameter name
    """Whether ``input`` is an inference tensor (``Tensor.is_inference``)."""
    if not isinstance(input, Tensor):
        raise TypeError("is_inference(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    return input._inference


# `torch.nn` and `torch.utils` are reachable as attributes after `import torch`; the same
# holds here. They come last because they build on everything above (checkpoint wraps
# Functions and modules).
from refimpl import linalg, nn, utils  # noqa: E402, F401
