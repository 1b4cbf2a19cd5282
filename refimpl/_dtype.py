"""Data types, named and promoted as PyTorch names and promotes them.

Only names live here; the array libraries' dtype objects are looked up by ``refimpl._backend``.
"""

from __future__ import annotations

import math

__all__ = [
    "dtype", "float16", "float32", "float64", "int8", "int16", "int32", "int64", "bool",
    "complex64", "complex128",
    "promote_types", "result_type_of", "get_default_dtype", "checked_scalar",
]

_builtin_bool = bool


class dtype:  # noqa: N801 - PyTorch spells it torch.dtype
    """A tensor element type: ``refimpl.float32`` prints as ``torch.float32``, like PyTorch."""

    __slots__ = ("name", "kind", "itemsize", "legacy_name", "cpp_name")

    def __init__(self, name: str, kind: str, itemsize: int, legacy_name: str,
                 cpp_name: str) -> None:
        self.name = name
        self.kind = kind  # one of "b" (bool), "i" (integer), "f" (floating), "c" (complex)
        self.itemsize = itemsize
        self.legacy_name = legacy_name  # "Float" in torch.FloatTensor and in error messages
        self.cpp_name = cpp_name  # "float": the C++ type some of PyTorch's messages print

    @property
    def is_floating_point(self) -> _builtin_bool:
        return self.kind == "f"

    @property
    def is_complex(self) -> _builtin_bool:
        return self.kind == "c"

    def __repr__(self) -> str:
        return "torch." + self.name

    def __reduce__(self) -> str:
        return self.name


bool = dtype("bool", "b", 1, "Bool", "bool")  # noqa: A001 - torch.bool
int8 = dtype("int8", "i", 1, "Char", "signed char")
int16 = dtype("int16", "i", 2, "Short", "short")
int32 = dtype("int32", "i", 4, "Int", "int")
int64 = dtype("int64", "i", 8, "Long", "long")
float16 = dtype("float16", "f", 2, "Half", "c10::Half")
float32 = dtype("float32", "f", 4, "Float", "float")
float64 = dtype("float64", "f", 8, "Double", "double")
complex64 = dtype("complex64", "c", 8, "ComplexFloat", "c10::complex<float>")
complex128 = dtype("complex128", "c", 16, "ComplexDouble", "c10::complex<double>")

# bfloat16 needs an array type NumPy lacks: tensors of it work where the ``ml_dtypes`` package
# can be imported (refimpl._backend); elsewhere creating one says the package is missing.
bfloat16 = dtype("bfloat16", "f", 2, "BFloat16", "c10::BFloat16")

ALL = (bool, int8, int16, int32, int64, float16, bfloat16, float32, float64, complex64,
       complex128)
_RANK = {"b": 0, "i": 1, "f": 2, "c": 3}
_COMPLEX_OF = {bfloat16: complex64, float32: complex64, float64: complex128}
_REAL_OF = {complex64: float32, complex128: float64}


def get_default_dtype() -> dtype:
    """PyTorch's default floating type (float32); refimpl does not let it change."""
    return float32


def promote_types(a: dtype, b: dtype) -> dtype:
    """``torch.promote_types``: the smallest type both ``a`` and ``b`` convert to safely."""
    if a is b:
        return a
    ra, rb = _RANK[a.kind], _RANK[b.kind]
    if {a, b} == {float16, bfloat16}:  # neither holds the other's values
        return float32
    if ra != rb:
        hi, lo = (a, b) if ra > rb else (b, a)
        if hi.kind == "c" and lo.kind == "f" and lo.itemsize > _REAL_OF[hi].itemsize:
            return _COMPLEX_OF[lo]
        return hi
    return a if a.itemsize >= b.itemsize else b


def _combine_categories(higher: dtype | None, lower: dtype | None) -> dtype | None:
    # Mirrors ATen's combine_categories: a higher-priority operand group (dimensioned tensors
    # over zero-dim tensors over Python numbers) keeps its type unless a lower group is of a
    # higher category (bool < integer < floating < complex).
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.kind == "c":
        return higher
    if lower.kind == "c":
        if higher.kind != "f":
            return lower
        if higher not in _COMPLEX_OF:
            raise TypeError("float16 mixed with a complex number gives complex32 (ComplexHalf) "
                            "in PyTorch, which refimpl does not model; cast the float16 tensor "
                            "to float32 first")
        return _COMPLEX_OF[higher]
    if higher.kind == "f":
        return higher
    if higher.kind == "b" or lower.kind == "f":
        return promote_types(higher, lower)
    return higher


def _scalar_dtype(value: object) -> dtype:
    if isinstance(value, _builtin_bool):
        return bool
    if isinstance(value, int):
        return int64
    if isinstance(value, complex):
        return complex64
    return float32


def result_type_of(operands: tuple) -> dtype:
    """``torch.result_type`` for tensors and Python numbers, with PyTorch's three priorities."""
    dim_result = zero_result = wrapped_result = None
    for op in operands:
        if isinstance(op, (_builtin_bool, int, float, complex)):
            d = _scalar_dtype(op)
            wrapped_result = d if wrapped_result is None else promote_types(wrapped_result, d)
        elif op.dim() == 0:
            d = op.dtype
            zero_result = d if zero_result is None else promote_types(zero_result, d)
        else:
            d = op.dtype
            dim_result = d if dim_result is None else promote_types(dim_result, d)
    return _combine_categories(dim_result, _combine_categories(zero_result, wrapped_result))


# The finite range of each non-bool type (complex types: of each component), as c10's
# ``overflows`` checks a number converted to an element.
_FLOAT32_MAX = 3.4028234663852886e38
_BFLOAT16_MAX = 3.3895313892515355e38
_RANGE = {int8: (-2**7, 2**7 - 1), int16: (-2**15, 2**15 - 1), int32: (-2**31, 2**31 - 1),
          int64: (-2**63, 2**63 - 1), float16: (-65504.0, 65504.0),
          bfloat16: (-_BFLOAT16_MAX, _BFLOAT16_MAX), float32: (-_FLOAT32_MAX, _FLOAT32_MAX),
          float64: (-math.inf, math.inf), complex64: (-_FLOAT32_MAX, _FLOAT32_MAX),
          complex128: (-math.inf, math.inf)}
# The C++ type names c10's conversion check prints.
_OVERFLOW_NAME = {int8: "int8_t", int16: "int16_t", int64: "int64_t"}


def overflows(d: dtype, value: int | float | complex) -> _builtin_bool:
    """Whether ``value`` is out of the finite range of ``d`` (c10's ``overflows``)."""
    if d.kind == "b":
        return False
    if isinstance(value, complex):
        # Complex to real drops a non-zero imaginary part: PyTorch counts that as overflow.
        if d.kind != "c" and value.imag != 0:
            return True
        return overflows(d, value.real) or overflows(d, value.imag)
    low, high = _RANGE[d]
    if isinstance(value, float):
        if d.kind in "fc" and math.isinf(value):
            return False
        if value != value:
            return d.kind == "i"
        # C++ compares in double: the integer limits are rounded first.
        return value < float(low) or value > float(high)
    return value < low or value > high


def checked_scalar(value: int | float | complex, d: dtype, *, one_element: _builtin_bool = False
                   ) -> int | float | complex:
    """``value`` as an element of type ``d``, refused as PyTorch refuses it (``fill_``,
    ``full``, item assignment) when it does not fit.

    ``one_element``: the value is written as a 0-d tensor copied into place (item assignment,
    and fill_/full of a one-element tensor). Such a number is checked as a double, so for Half
    a value past its range becomes inf, and only an imaginary part is refused.
    """
    check = float64 if one_element and d == float16 else d
    if overflows(check, value):
        name = _OVERFLOW_NAME.get(check, check.cpp_name)
        raise RuntimeError(f"value cannot be converted to type {name} without overflow")
    if isinstance(value, complex) and d.kind != "c":
        return value.real  # its imaginary part is zero: checked above
    return value
