"""A leaf's grad_dtype is ignored: the gradient is not cast to it, so accumulating it raises.

A float32 leaf with grad_dtype = torch.float64: eager autograd casts the incoming float32
gradient to float64 before AccumulateGrad; compiled autograd passes it on uncast, and the
accumulation refuses it as a gradient of the wrong dtype, so a valid backward fails.

Standalone: plain PyTorch, no conformance import. Runs the same program with eager autograd and
with compiled autograd (torch._dynamo.compiled_autograd, the graph compiled by torch.compile with
the "eager" backend) in one process and prints both results.
"""
import torch
from torch._dynamo import compiled_autograd


def program():
    x = torch.ones(2, requires_grad=True)
    x.grad_dtype = torch.float64
    (x * 2).sum().backward()
    return {"x.grad": x.grad.tolist(), "dtype": str(x.grad.dtype)}


def outcome(fn):
    try:
        return repr(fn())
    except Exception as exc:  # the error is the result
        return f"raises {type(exc).__name__}: {str(exc).strip().splitlines()[0]}"


def compiled():
    torch._dynamo.reset()  # a cold compiled-autograd cache
    with compiled_autograd._enable(lambda gm: torch.compile(gm, backend="eager", fullgraph=False)):
        return program()


print("torch", torch.__version__)
print("eager:   ", outcome(program))
print("compiled:", outcome(compiled))
