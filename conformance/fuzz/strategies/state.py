"""The generator's state: the constants, the variables a program has bound (their shape,
dtype and value range) and the small drawing helpers every op uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TypeVar

from hypothesis import strategies as st

from conformance.casefile.loader import DEFAULT_SPEC_DIR, SpecResources
from conformance.casefile.vocabulary import Api
from conformance.fuzz.differential import least_precise

FAMILIES = ("inplace", "create_graph", "modules", "conv", "batchnorm", "hooks", "node_hooks",
            "custom_function", "inference_mode", "saved_tensor_hooks", "ops_more", "checkpoint")
"""Program families that need a feature an engine may lack; all are drawn by default. Each is
named after its feature in spec/features.yaml, except `ops_more` (narrow, split, chunk, sgn,
median, diagonal, repeat: ops rather than a feature, which an engine with a fixed feature list
is not assumed to have)."""
DTYPES = ("float32", "float64")
MAX_STEPS = 6
MAX_BOUND = 1e6
"""Ops that would push a tensor's estimated magnitude past this are not drawn (no overflow)."""
DEFAULT_EPS = 1e-5
"""BatchNorm's default eps."""
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float64": 2.0 ** -53}
TENSOR_OBSERVATIONS = ("{v}", "{v}.requires_grad", "{v}.is_leaf", "graph({v})", "{v}.grad",
                       "{v}.retains_grad")


@dataclass
class TensorVar:
    """What the generator believes about a tensor it bound (the engines decide the truth)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    requires_grad: bool
    leaf: bool
    bound: float
    """An upper estimate of the largest absolute value."""
    positive: bool
    """Every value is > 0 (safe for log, sqrt and as a divisor)."""
    contiguous: bool = True
    view_of: str | None = None
    precision: str = ""
    """The least precise float dtype its values were computed in (default: its dtype). A
    float32 result moved to float64 keeps float32 here: the comparison's tolerance follows it."""
    inference: bool = False
    """Made in an inference-mode region (an inference tensor, or a view the generator treats
    as one)."""

    def __post_init__(self) -> None:
        self.precision = self.precision or self.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass
class ModuleVar:
    name: str
    kind: str
    dtype: str
    in_size: int
    """in_features (Linear), in_channels (Conv2d) or num_features (BatchNorm)."""
    size: int
    """out_features (Linear), kernel_size (Conv2d), 0 (BatchNorm)."""
    training: bool = True
    eps: float = DEFAULT_EPS
    """BatchNorm's eps (see `batchnorm_eps`)."""
    precision: str = ""
    """The least precise float dtype of the inputs it was called on (its running stats carry
    their rounding; default: its dtype)."""

    def __post_init__(self) -> None:
        self.precision = self.precision or self.dtype


@dataclass
class _State:
    api: Api
    families: frozenset[str]
    tensors: list[TensorVar] = field(default_factory=list)
    modules: list[ModuleVar] = field(default_factory=list)
    features: set[str] = field(default_factory=set)
    counter: int = 0
    grad_enabled: bool = True
    inference: bool = False
    """Inside an inference-mode region."""
    handles: list[str] = field(default_factory=list)
    """Hook handles not removed yet."""
    functions: set[str] = field(default_factory=set)
    """The custom Functions of `FUNCTIONS` defined so far."""
    calls: bool = False
    """Whether `calls`, the list hooks append to, is defined (then it is observed)."""
    inference_used: bool = False
    saved_hooks: bool = False
    """Inside a saved_tensors_hooks region."""

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def allows(self, *names: str) -> bool:
        """Whether api.yaml lists every name (`torch.cat`, `nn.Linear`, or an attribute)."""
        for name in names:
            section, _, member = name.rpartition(".")
            if section:
                namespace = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional"}.get(
                    section, section)
                if member not in self.api.namespaces.get(namespace, frozenset()):
                    return False
            elif name not in self.api.attributes:
                return False
        return True

    def lowest_precision(self) -> str:
        """The least precise dtype of any tensor so far: what gradients are computed in.

        A gradient flows back through every tensor downstream of its input, which the generator
        does not track; the least precise dtype of the whole program bounds them all.
        """
        return least_precise(*(t.dtype for t in self.tensors)) if self.tensors else "float64"

    def add(self, var: TensorVar) -> TensorVar:
        # Without grad mode an op's result is a leaf that does not require grad; a factory
        # called with requires_grad=True still makes a leaf that requires it.
        if not self.grad_enabled and not var.leaf:
            var = replace(var, requires_grad=False, leaf=True)
        if self.inference:
            var.inference = True
        self.tensors.append(var)
        return var

    def operands(self) -> list[TensorVar]:
        """The tensors a forward statement may take without raising.

        Outside inference mode, with grad mode on, an op that records a node raises when it
        would save an inference tensor: those meet only the statements that may raise.
        """
        if self.inference or not self.grad_enabled or not self.inference_used:
            return self.tensors
        return [t for t in self.tensors if not t.inference]

    def recorder(self) -> str:
        """`calls = []` the first time a hook needs the list, else nothing."""
        if self.calls:
            return ""
        self.calls = True
        return "calls = []\n"


T = TypeVar("T")
Draw = Callable[[st.SearchStrategy], object]
Op = Callable[[Draw, _State], "str | None"]


@lru_cache(maxsize=1)
def default_api() -> Api:
    """The vocabulary of `spec/api.yaml` in this checkout."""
    resources = SpecResources.load(DEFAULT_SPEC_DIR)
    if resources.api is None:
        raise RuntimeError(f"cannot read {DEFAULT_SPEC_DIR / 'api.yaml'}: "
                           f"{'; '.join(map(str, resources.problems))}")
    return resources.api


def _dtype_kw(dtype: str) -> str:
    return "" if dtype == "float32" else ", dtype=torch.float64"


def _shape_args(shape: tuple[int, ...]) -> str:
    return ", ".join(map(str, shape)) if shape else "()"


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    out = []
    for x, y in zip(reversed((1,) * (len(b) - len(a)) + a),
                    reversed((1,) * (len(a) - len(b)) + b), strict=True):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return tuple(reversed(out))


def _promote(*dtypes: str) -> str:
    return "float64" if "float64" in dtypes else "float32"


def _direct(strategy: st.SearchStrategy[T]) -> st.SearchStrategy[T]:
    """The strategy a lazy one (what `st.integers()` returns) stands for.

    Every draw from a lazy strategy looks its target up again in a thread-local cache; a
    program takes a few hundred draws, and that lookup was a tenth of the fuzzer's time.
    """
    return getattr(strategy, "wrapped_strategy", strategy)


# Strategies are built once and reused: building one per draw costs more than the draw.
BOOL = _direct(st.booleans())


@lru_cache(maxsize=256)
def _between(low: int, high: int) -> st.SearchStrategy[int]:
    return _direct(st.integers(low, high))


def _index(n: int) -> st.SearchStrategy[int]:
    """`integers(0, n - 1)`."""
    return _between(0, n - 1)


def _choice(draw: Draw, items: Sequence[T]) -> T:
    return items[draw(_index(len(items)))] if len(items) > 1 else items[0]


def _pick(draw: Draw, items: Iterable[T]) -> T | None:
    items = list(items)
    return _choice(draw, items) if items else None


def _derived(state: _State, inputs: Iterable[TensorVar], shape: tuple[int, ...], dtype: str,
             bound: float, positive: bool, **extra: object) -> TensorVar:
    inputs = list(inputs)
    requires_grad = any(t.requires_grad for t in inputs)
    precision = least_precise(dtype, *(t.precision for t in inputs))
    return state.add(TensorVar(state.fresh(), shape, dtype, requires_grad, not requires_grad,
                               bound, positive, precision=precision, **extra))


