"""``Parameter``: a leaf tensor that a ``Module`` registers as one of its parameters.

As in PyTorch, wrapping shares the data with the given tensor (detached from its graph) and
sets ``requires_grad=True`` unless told otherwise::

    p = nn.Parameter(torch.rand(3))
    p.is_leaf, p.requires_grad, p.grad_fn   # (True, True, None)
    print(p)       # Parameter containing: / tensor([...], requires_grad=True)

Results of ops on a parameter are plain tensors.
"""

from __future__ import annotations

from refimpl import _creation
from refimpl._tensor import Tensor

__all__ = ["Parameter"]

# Every slot a tensor always fills; _grad_dtype is set only by its setter (a fresh detached
# tensor has the default: its own dtype).
_TENSOR_STATE = tuple(s for s in Tensor.__slots__ if s not in ("__weakref__", "_grad_dtype"))


class Parameter(Tensor):
    """A tensor that is a module parameter: a leaf that requires grad by default."""

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True) -> Parameter:
        if data is None:
            data = _creation.empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter expects a Tensor as data, got {type(data).__name__}; "
                            "wrap the values with refimpl.tensor(...) first")
        source = data.detach()
        self = Tensor.__new__(cls)
        for name in _TENSOR_STATE:
            setattr(self, name, getattr(source, name))
        if requires_grad:
            # Same check and message as the constructor's requires_grad=True.
            if self.dtype.kind not in "fc":
                raise RuntimeError(_creation.REQUIRES_GRAD_DTYPE)
            self._requires_grad = True
        return self

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()
