"""refimpl: a reference autograd engine with PyTorch's API and PyTorch 2.13's behaviour.

``import refimpl as torch`` runs the covered surface of PyTorch programs::

    import refimpl as torch

    x = torch.tensor(3.0, requires_grad=True)
    y = x ** 2 + 3 * x + 2
    y.backward()
    print(y, x.grad)      # tensor(20., grad_fn=<AddBackward0>) tensor(9.)

Arrays live on NumPy (``cpu``) or CuPy (``cuda``); see ``refimpl._backend``.
"""

from refimpl import _dtype
from refimpl._backend import device
from refimpl._creation import (
    Generator,
    arange,
    as_tensor,
    empty,
    empty_like,
    from_numpy,
    full,
    full_like,
    is_tensor,
    manual_seed,
    ones,
    ones_like,
    rand,
    rand_like,
    randn,
    randn_like,
    tensor,
    zeros,
    zeros_like,
)
from refimpl._dtype import (
    complex64,
    complex128,
    dtype,
    float32,
    float64,
    get_default_dtype,
    int32,
    int64,
    promote_types,
)
from refimpl._tensor import Size, Tensor
from refimpl.autograd.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from refimpl.ops.functional import (  # noqa: A004 - PyTorch's names shadow builtins here too
    abs,
    add,
    addmm,
    cat,
    clamp,
    clip,
    clone,
    cos,
    detach,
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
    min,
    minimum,
    mm,
    mul,
    mv,
    ne,
    neg,
    permute,
    pow,
    reciprocal,
    relu,
    reshape,
    rsub,
    select,
    sigmoid,
    sign,
    sin,
    softmax,
    sqrt,
    squeeze,
    stack,
    sub,
    sum,
    t,
    tanh,
    transpose,
    true_divide,
    unsqueeze,
    where,
)
from refimpl import autograd, cuda  # noqa: E402,I001 - after the names they re-export

bool = _dtype.bool  # noqa: A001 - torch.bool
float = float32  # noqa: A001 - torch.float
double = float64
long = int64
int = int32  # noqa: A001 - torch.int
cfloat = complex64
cdouble = complex128
__version__ = "2.13.0+refimpl"
